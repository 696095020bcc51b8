"""Standard-op kernels that the contrib kernels build on, looked up through the registry.

Going through `registry.resolve` (the public kernel contract) instead of importing other
families' private functions keeps the contrib modules importable whatever those modules
call their helpers; a missing kernel becomes a clear error when the op runs."""

from __future__ import annotations

from typing import Any

from onnxviz.errors import ExecutionError
from onnxviz.runtime.registry import resolve


def standard_kernel(op_type: str, opset: int) -> Any:
    spec = resolve("", op_type, opset)
    if spec is None or spec.needs_ctx:
        raise ExecutionError(f"the {op_type} kernel this contrib op builds on is not available")
    return spec.fn
