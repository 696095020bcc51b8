"""Programs for the compiled elementwise chain (native/_chain.c): one place for its op
codes and its 8-byte step format, used by fusion_elementwise's chains and by the kernels
that run a fixed chain (Gelu).

A step is 8 bytes: the op code, the operand kind, whether the running value is the op's
first operand, the side byte (a SIDE step's side op), and a float32 scalar.  A per-tensor
8-bit QuantizeLinear -> DequantizeLinear pair is two steps (`qdq`): QDQ, whose third byte
says int8 (1) or uint8 (0) codes, fourth byte holds the quantizer's zero point (the
code's byte) and scalar its scale, then QDQ_ARGS with the dequantizer's zero point and
scale the same way.  The kernel runs the pair as the nodes' float32 steps (divide, round
half to even, add the zero point, clip, take the second zero point away, multiply) and
reports a NaN met there instead of giving a result (its cast to an integer is the
platform's choice): `CHAIN.run` returns 1, the caller runs the nodes one by one."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any

from onnxviz.runtime import native

# The compiled chain, None when compiled kernels are off or not built.
CHAIN = native.load("chain")

# The steps whose float32 bits the kernel gives as numpy's ufuncs (and kernels/math_erf's
# erf) do, by their ONNX names.
OPS = {
    "Add": 0,
    "Sub": 1,
    "Mul": 2,
    "Div": 3,
    "Erf": 4,
    "Neg": 5,
    "Abs": 6,
    "Relu": 7,
    "Tanh": 8,
    "Sigmoid": 9,
}
# The two steps of a QuantizeLinear -> DequantizeLinear pair (`qdq`).
QDQ, QDQ_ARGS = 10, 11
# v * sigmoid(v) of the running value v: a Sigmoid node and the Mul of v by it (SiLU
# inside a chain, where v has those two readers); a unary step.
SILU = 12
# Pow by 2 and by 3 as the Pow kernel computes them (math_elementwise.float_power: v * v,
# (v * v) * v); unary steps, the exponent in the op.  Another exponent has no step: pow's
# bits are numpy's.
SQUARE, CUBE = 13, 14
MAX_STEPS = 64  # _chain.c's MAX_STEPS: 8-byte steps, a pair's two included

# A step's operand: none (a unary op), a scalar, the chain's own input, or a side value
# (the chain's input combined with the scalar by a side op: h = x * 0.5 of a GELU).
NONE, SCALAR, INPUT, SIDE = 0, 1, 2, 3
# A value per channel of x: the side byte is the table's index in run's `channels`
# (a GroupNorm's gamma or beta, shape (C, 1, 1)), of at most MAX_TABLES (_chain.c's).
CHANNEL = 4
MAX_TABLES = 16
# Another value of x's shape, element by element (an LSTM cell's f * c + i * g): the side
# byte is its index in run's `tensors`, of at most MAX_TENSORS (_chain.c's).
TENSOR = 5
MAX_TENSORS = 4
# The side op's byte: its code, and this bit when the scalar is its first operand.
SIDE_SCALAR_FIRST = 0x10
SIDE_OPS = ("Add", "Sub", "Mul", "Div")

_STEP = struct.Struct("=BBBBf")


def side(op: str, scalar_first: bool) -> int:
    """The side byte of a SIDE step whose side value is ``op`` of x and the scalar."""
    if op not in SIDE_OPS:
        raise ValueError(f"a side value is Add, Sub, Mul or Div, not {op}")
    return OPS[op] | (SIDE_SCALAR_FIRST if scalar_first else 0)


def program(
    steps: Iterable[tuple[str, int, bool, float] | tuple[str, int, bool, float, int]],
) -> bytes:
    """``steps`` (op name, operand kind, whether the running value is the first operand,
    the scalar[, the side byte of a SIDE step]) as the kernel's program."""
    return b"".join(
        _STEP.pack(OPS[step[0]], step[1], step[2], step[4] if len(step) > 4 else 0, step[3])
        for step in steps
    )


def silu() -> bytes:
    """The SILU step."""
    return _STEP.pack(SILU, NONE, 1, 0, 0.0)


def power_step(exponent: float) -> bytes | None:
    """The step of a Pow of the running value by ``exponent``: SQUARE or CUBE, or None
    for another exponent."""
    code = {2.0: SQUARE, 3.0: CUBE}.get(exponent)
    return None if code is None else _STEP.pack(code, NONE, 1, 0, 0.0)


def channel_step(op: str, value_first: bool, table: int) -> bytes:
    """A binary ``op`` of the running value and per-channel table ``table``."""
    if op not in SIDE_OPS or not 0 <= table < MAX_TABLES:
        raise ValueError(
            f"a per-channel step is Add, Sub, Mul or Div of a table below {MAX_TABLES}, not {op}"
        )
    return _STEP.pack(OPS[op], CHANNEL, value_first, table, 0.0)


def tensor_step(op: str, value_first: bool, tensor: int) -> bytes:
    """A binary ``op`` of the running value and tensor operand ``tensor``."""
    if op not in SIDE_OPS or not 0 <= tensor < MAX_TENSORS:
        raise ValueError(
            f"a tensor step is Add, Sub, Mul or Div of a tensor below {MAX_TENSORS}, not {op}"
        )
    return _STEP.pack(OPS[op], TENSOR, value_first, tensor, 0.0)


def qdq(scale: float, zero_point: int, signed: bool, scale2: float, zero_point2: int) -> bytes:
    """The two steps of a QuantizeLinear (``scale``, ``zero_point``) -> DequantizeLinear
    (``scale2``, ``zero_point2``) pair over int8 (``signed``) or uint8 codes."""
    low, high = (-128, 127) if signed else (0, 255)
    if not (low <= zero_point <= high and low <= zero_point2 <= high):
        raise ValueError(f"a QDQ step's zero points are in [{low}, {high}]")
    return _STEP.pack(QDQ, NONE, int(signed), zero_point & 0xFF, scale) + _STEP.pack(
        QDQ_ARGS, NONE, 0, zero_point2 & 0xFF, scale2
    )


def held_unary(op: str, fallback: Callable[..., Any]) -> Any:
    """The compiled call of a lone unary ``op`` node (an op of OPS with no operand:
    Tanh, Sigmoid) for unwatched runs, or None when the kernel is off: native/_chain.c's
    held chain of that one step, from the node loop to the result in C, for a float32
    C-contiguous array of at least one axis; any other call is ``fallback(x)`` (the
    kernel).  The kernel's own compiled step, so its bits.  An unrolled recurrent
    layer's Tanh on 4 x 128 values cost 3.4 us through the kernel's Python layers, about
    1 in C."""
    if CHAIN is None:
        return None
    import numpy as np

    code = program([(op, NONE, True, 0.0)])
    return CHAIN.held(code, (), 1, fallback, np.ndarray, np.empty_like)
