"""Where the check layer hands the model layer the two pieces of onnx C++ code that
must run in its worker process: shape inference (for graph surgery's insert and
extract) and the ONNX text-format parser (for opening .onnxtxt files).

The model layer cannot import check; check sets these when `onnxviz.check` is imported.
This module imports nothing, so that importing `onnxviz.check` (and so its worker's
handle) costs no onnx import: `onnxviz check` starts its workers before anything else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onnx import ModelProto, TypeProto

# model -> {graph path: {value name: inferred type}}; None: declared types only.
TYPE_INFERENCE: Callable[[ModelProto], dict[str, dict[str, TypeProto]]] | None = None
# UTF-8 text -> model; raises ValueError with the parser's complaint.
TEXT_PARSER: Callable[[bytes], ModelProto] | None = None
