"""In-place elementwise arithmetic when an input dies at the node (run() only).

For a few elementwise ops (Add, Sub, Mul, Div, two-input Sum of equal shapes, Neg,
Abs, Exp, Sqrt, Tanh, Relu, Sigmoid, Clip with one-element bounds) the
executor may write the result into an input's buffer instead of allocating a new one,
when all of these hold:

* the run is not being watched (no stepping, no kept intermediates), so no event or
  store shows the input value that gets overwritten;
* the input's slot is freed after this node (its last use) and the input is a plain
  float32/float64 array that owns its memory (or is a whole-buffer view of an array
  nothing else refers to), is writeable and C-contiguous, and has the result's shape
  and dtype;
* the array is big enough for the saving to matter (`MIN_ELEMENTS`): for a small
  array in cache a fresh result costs less than the ufunc's ``out=`` handling, and a
  chain of small ops (a model's shape arithmetic) pays that on every node;
* nothing else refers to the array: its reference count is exactly what the executor
  itself holds.  Views (Reshape, Squeeze, ...) keep a reference to their base, and
  initializers, folded constants, caller feeds, captured outer values all hold one,
  so any of them makes the count higher and the node runs normally.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnxviz.runtime.kernels.math_activation import clip_into, relu_into, sigmoid_into
from onnxviz.runtime.kernels.math_elementwise import tanh_into

_BINARY: dict[str, Callable[..., Any]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
}
_UNARY: dict[str, Callable[..., Any]] = {
    "Neg": np.negative,
    "Abs": np.absolute,
    "Exp": np.exp,
    "Sqrt": np.sqrt,
}
INPLACE_OPS = frozenset(_BINARY) | frozenset(_UNARY) | {"Relu", "Sigmoid", "Tanh", "Clip", "Sum"}
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_ND = np.ndarray

# Below this many elements an input is never reused (measured: numpy's out= costs
# about 0.6 us more than a fresh [1] result, and gains from about 16k elements on).
MIN_ELEMENTS = 8192

# Bytes a view may leave unused of the buffer it owns alone: nn_conv.aligned_empty's
# outputs (a compiled conv's or GEMM's) are 64-byte aligned views of a buffer up to 64
# bytes longer.  (Tests set it to 0 to measure against.)
_ALIGN_SLACK = 64

# References to a candidate array while it is checked: the frame's slot list, the
# node's input list, and getrefcount's own argument (the caller passes ``ins[k]``).
_OWN_REFS = 3


def _reusable(x: Any) -> bool:
    if type(x) is not np.ndarray or x.dtype not in _FLOATS:
        return False
    flags = x.flags
    if not (flags.writeable and flags.c_contiguous):
        return False
    return flags.owndata or _private_view(x)


def _private_view(x: np.ndarray) -> bool:
    """A reshaped view (e.g. a kernel's ``y.reshape(...)`` result) whose base nothing
    else holds: numpy points every view at the owning array, so a base referenced only
    by ``x`` (count 2: x's reference and getrefcount's argument) has no other view."""
    base = x.base
    return (
        type(base) is np.ndarray
        and base.flags.owndata
        and 0 <= base.nbytes - x.nbytes <= _ALIGN_SLACK
        and sys.getrefcount(base) <= 3  # x's reference, the local name, the argument
    )


def _broadcasts_into(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """Whether an array of shape ``small`` broadcasts to ``big`` unchanged (numpy's rule:
    aligned from the last axis, each of its sizes 1 or ``big``'s)."""
    return len(small) <= len(big) and all(
        s == b or s == 1 for s, b in zip(reversed(small), reversed(big))
    )


def try_inplace(op_type: str, ins: Sequence[Any], dead: tuple[bool, ...]) -> np.ndarray | None:
    """The result computed into a dead input's buffer, or None (run the kernel)."""
    # Cheapest test first: most values of small models are small.  (No local name may
    # refer to an input before the reference counts below are taken.)
    n = len(ins)
    if not (
        (n > 0 and type(ins[0]) is _ND and ins[0].size >= MIN_ELEMENTS)
        or (n > 1 and type(ins[1]) is _ND and ins[1].size >= MIN_ELEMENTS)
    ):
        return None  # Sum of more than two inputs is not done in place anyway
    if op_type == "Sum":
        # Two inputs of one shape only: every opset's Sum agrees on that case.
        if len(ins) != 2 or type(ins[0]) is not np.ndarray or type(ins[1]) is not np.ndarray:
            return None
        if ins[0].shape != ins[1].shape:
            return None
        op_type = "Add"
    if op_type in _BINARY:
        if len(ins) != 2:
            return None
        # Counted before any local name refers to the arrays.
        counts = (sys.getrefcount(ins[0]), sys.getrefcount(ins[1]))
        a, b = ins
        if (
            type(a) is not np.ndarray
            or type(b) is not np.ndarray
            or a.dtype != b.dtype
            or a.dtype not in _FLOATS
        ):
            return None
        # An input takes the result when the other broadcasts into its shape (shapes
        # that do not broadcast: none does, and the kernel reports the mismatch, naming
        # the node).  numpy's broadcast_shapes cost 2.5 us a call, this 0.7 (a written-out
        # LayerNorm's Sub and Div of a [128, 128] value by its [128, 1] statistics).
        for k, x, other in ((0, a, b), (1, b, a)):
            if (
                dead[k]
                and counts[k] <= _OWN_REFS
                and (x.shape == other.shape or _broadcasts_into(other.shape, x.shape))
                and _reusable(x)
            ):
                result: np.ndarray = _BINARY[op_type](a, b, out=x)
                return result
        return None
    if op_type == "Clip":
        return _clip_inplace(ins, dead)
    if op_type in _UNARY or op_type in ("Relu", "Sigmoid", "Tanh"):
        if len(ins) != 1 or not dead[0] or sys.getrefcount(ins[0]) > _OWN_REFS:
            return None
        x = ins[0]
        if not _reusable(x):
            return None
        if op_type == "Relu":
            return relu_into(x, x)  # the Relu kernel's own max, bit for bit
        if op_type == "Sigmoid":
            return sigmoid_into(x, x)  # the kernel's steps, bit for bit
        if op_type == "Tanh":
            # The kernel's own tanh (float32: the compiled chain's step, within 2 ulp of
            # the exact value), not numpy's: a third of a large Tanh's values differed
            # from the stepped run's by an ulp.
            tanh_into(x, x)
            return x
        out: np.ndarray = _UNARY[op_type](x, out=x)
        return out
    return None


def _clip_inplace(ins: Sequence[Any], dead: tuple[bool, ...]) -> np.ndarray | None:
    """Clip (opset 11 on: bounds are inputs) into its dead input, when each given bound
    is one element of x's dtype and no more axes (else numpy would broadcast or the
    kernel must report the type).  Before opset 11 the bounds are attributes, which
    this function does not see: a one-input Clip runs its kernel."""
    if len(ins) < 2 or not dead[0] or sys.getrefcount(ins[0]) > _OWN_REFS:
        return None
    x = ins[0]
    if not _reusable(x):
        return None
    bounds: list[Any] = [None, None]
    for k, v in enumerate(ins[1:3]):
        if v is None:
            continue
        if type(v) is not np.ndarray or v.dtype != x.dtype or v.size != 1 or v.ndim > x.ndim:
            return None
        bounds[k] = v.reshape(())
    if bounds[0] is None and bounds[1] is None:
        return None  # the kernel returns x itself
    return clip_into(x, bounds[0], bounds[1], x)
