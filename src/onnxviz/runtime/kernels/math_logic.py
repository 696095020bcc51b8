"""Comparison, logical, bitwise and selection kernels (outputs bool unless bitwise)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.math_common import ML_FLOATS, as_compute, legacy_broadcast
from onnxviz.runtime.registry import kernel

Array = np.ndarray


def _register_predicate(
    op: str,
    fn: Callable[[Array, Array], Array],
    legacy: tuple[int, ...],
    modern: tuple[int, ...],
) -> None:
    def compare(a: Array, b: Array) -> Array:
        if a.dtype in ML_FLOATS or b.dtype in ML_FLOATS:
            a, b = as_compute(a), as_compute(b)
        return np.asarray(fn(a, b), dtype=bool)

    def run_legacy(a: Array, b: Array, broadcast: int = 0, axis: int | None = None) -> Array:
        return compare(a, legacy_broadcast(a, b, broadcast, axis))

    def run(a: Array, b: Array) -> Array:
        return compare(a, b)

    run_legacy.__name__ = f"kernel_{op.lower()}_legacy"
    run.__name__ = f"kernel_{op.lower()}"
    if legacy:
        kernel(op, since=legacy)(run_legacy)
    kernel(op, since=modern)(run)


_register_predicate("Equal", np.equal, (1,), (7, 11, 13, 19))
_register_predicate("Greater", np.greater, (1,), (7, 9, 13))
_register_predicate("Less", np.less, (1,), (7, 9, 13))
_register_predicate("GreaterOrEqual", np.greater_equal, (), (12, 16))
_register_predicate("LessOrEqual", np.less_equal, (), (12, 16))
_register_predicate("And", np.logical_and, (1,), (7,))
_register_predicate("Or", np.logical_or, (1,), (7,))
_register_predicate("Xor", np.logical_xor, (1,), (7,))


@kernel("Not", since=1)
def not_(x: Array) -> Array:
    return np.logical_not(x)


# ---------------------------------------------------------------- bitwise
def _same_int(fn: Callable[..., Array]) -> Callable[..., Array]:
    def run(*arrays: Array) -> Array:
        out = np.asarray(fn(*arrays))
        dt = arrays[0].dtype
        return out if out.dtype == dt else out.astype(dt)

    return run


kernel("BitwiseAnd", since=18)(_same_int(np.bitwise_and))
kernel("BitwiseOr", since=18)(_same_int(np.bitwise_or))
kernel("BitwiseXor", since=18)(_same_int(np.bitwise_xor))
kernel("BitwiseNot", since=18)(_same_int(np.invert))


@kernel("BitShift", since=(11, 28))
def bit_shift(x: Array, y: Array, direction: str = "") -> Array:
    """Shifts by Y bits.  A shift that is negative or not below the bit width gives what
    the sign extension alone produces (opset 28 made this explicit): -1 for a right shift
    of a negative X, 0 otherwise."""
    if direction not in ("LEFT", "RIGHT"):
        raise ExecutionError(f"BitShift direction must be LEFT or RIGHT, got {direction!r}")
    dt = x.dtype
    if y.dtype != dt:
        y = y.astype(dt)
    bits = dt.itemsize * 8
    out_of_range = (y >= bits) | (y < 0) if dt.kind == "i" else y >= bits
    safe_y = np.where(out_of_range, 0, y) if out_of_range.any() else y
    if direction == "LEFT":
        out = np.left_shift(x, safe_y)
        fill: Any = 0
    else:
        out = np.right_shift(x, safe_y)  # arithmetic for signed types
        fill = np.where(x < 0, -1, 0) if dt.kind == "i" else 0
    out = np.asarray(out, dtype=dt)
    if out_of_range.any():
        out = np.where(out_of_range, np.asarray(fill, dtype=dt), out).astype(dt, copy=False)
    return out


# ---------------------------------------------------------------- selection
@kernel("Where", since=(9, 16))
def where(condition: Array, x: Array, y: Array) -> Array:
    out = np.where(condition, x, y)
    return out if out.dtype == x.dtype else out.astype(x.dtype)
