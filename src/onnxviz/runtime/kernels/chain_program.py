"""Programs for the compiled elementwise chain (native/_chain.c): one place for its op
codes and its 8-byte step format, used by fusion_elementwise's chains and by the kernels
that run a fixed chain (Gelu)."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from onnxviz.runtime import native

# The compiled chain, None when compiled kernels are off or not built.
CHAIN = native.load("chain")

# The steps whose float32 bits the kernel gives as numpy's ufuncs (and kernels/math_erf's
# erf) do, by their ONNX names.
OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Erf": 4, "Neg": 5, "Abs": 6, "Relu": 7}
MAX_STEPS = 64  # _chain.c's MAX_STEPS

# A step's operand: none (a unary op), a scalar, or the chain's own input.
NONE, SCALAR, INPUT = 0, 1, 2

_STEP = struct.Struct("=BBBxf")


def program(steps: Iterable[tuple[str, int, bool, float]]) -> bytes:
    """``steps`` (op name, operand kind, whether the running value is the first operand,
    the scalar) as the kernel's program."""
    return b"".join(_STEP.pack(OPS[op], kind, first, value) for op, kind, first, value in steps)
