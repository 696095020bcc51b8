"""The onnx backend node test models, collected once per test session (onnx makes them
in 13 s of one core; `conformance.node_cases` keeps them in the suite's case cache)."""

from __future__ import annotations

from functools import lru_cache

import onnx

from onnxviz.runtime.conformance import node_cases


@lru_cache(maxsize=1)
def node_models() -> tuple[tuple[str, onnx.ModelProto], ...]:
    return tuple((c.name, c.model) for c in node_cases() if c.model is not None)
