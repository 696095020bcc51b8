"""onnx's compiled shape inference and checker, and its protobuf classes, loaded without
the onnx package, for check's worker process.

A worker needs three things of onnx: ModelProto, and the C++ inference and checker.
`import onnx` runs the package's __init__, which imports numpy, ml_dtypes, its helper,
json_format and more: about 100 ms of CPU that a worker started for a one-node model
spends most of its life on (two workers start for each `onnxviz check`).  `load()`
loads onnx's generated ``onnx_ml_pb2`` and its extension module from onnx's folder under
their own names, so that a later `import onnx` in the same process (for a request that
needs the rest, such as the text parser) reuses them instead of registering the proto
file twice.  None when onnx's folder is not laid out as expected: the worker then
imports onnx as usual.  Only the worker process calls it (tests/check/test_onnx_cpp_owner.py).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

# onnx.checker refuses a serialized model over 2 GiB (protobuf's limit) with this text.
MAXIMUM_PROTOBUF = 2147483648


@dataclass(frozen=True)
class Native:
    model_class: Any  # onnx.ModelProto
    inference: Any  # onnx.onnx_cpp2py_export.shape_inference
    checker: Any  # onnx.onnx_cpp2py_export.checker

    def infer(self, data: bytes, check_type: bool, strict: bool, data_prop: bool) -> bytes:
        """onnx.shape_inference.infer_shapes on serialized bytes (its own first step)."""
        return self.inference.infer_shapes(data, check_type, strict, data_prop)  # type: ignore[no-any-return]

    def check(self, data: bytes) -> None:
        """onnx.checker.check_model(model, full_check=False) on serialized bytes."""
        if len(data) > MAXIMUM_PROTOBUF:
            raise ValueError(
                "This protobuf of onnx model is too large (>2GiB). Call check_model with "
                "model path instead."
            )
        self.checker.check_model(data, False, False, False)


def _load(name: str, path: str, loader: Any) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise ImportError(name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load() -> Native | None:
    """onnx's protobuf classes and compiled entry points without `import onnx`; None
    when they cannot be had that way (then import onnx)."""
    if "onnx" in sys.modules:  # already paid for: use it as it is
        return None
    try:
        spec = importlib.util.find_spec("onnx")
        folders = list(spec.submodule_search_locations or []) if spec else []
        if len(folders) != 1:
            return None
        folder = folders[0]
        names = os.listdir(folder)
        ext = next(
            (
                n
                for n in names
                if n.startswith("onnx_cpp2py_export.")
                and n.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
            ),
            None,
        )
        if ext is None or "onnx_ml_pb2.py" not in names:
            return None
        native = sys.modules.get("onnx.onnx_cpp2py_export") or _load(
            "onnx.onnx_cpp2py_export",
            os.path.join(folder, ext),
            importlib.machinery.ExtensionFileLoader(
                "onnx.onnx_cpp2py_export", os.path.join(folder, ext)
            ),
        )
        pb2 = sys.modules.get("onnx.onnx_ml_pb2") or _load(
            "onnx.onnx_ml_pb2",
            os.path.join(folder, "onnx_ml_pb2.py"),
            importlib.machinery.SourceFileLoader(
                "onnx.onnx_ml_pb2", os.path.join(folder, "onnx_ml_pb2.py")
            ),
        )
        found = Native(pb2.ModelProto, native.shape_inference, native.checker)
        if not callable(getattr(found.inference, "infer_shapes", None)) or not callable(
            getattr(found.checker, "check_model", None)
        ):
            return None
        return found
    except Exception:  # any other layout, or a build that will not load alone
        return None
