"""Shared helpers of the math kernel families (no kernels here).

* `float_compute_dtype` / `as_compute` / `widen`: numpy has no (fast, correctly rounded)
  arithmetic for the ml_dtypes floats (bfloat16, float8, float4, float6), so those are
  computed in float32 and rounded back once, as the runtime contract asks; `widen` also
  lifts float16 to float32 for kernels whose intermediate steps should not round.
* `legacy_broadcast`: opset < 7 binary ops broadcast B onto A only when ``broadcast=1``,
  aligned at ``axis`` (or at the trailing dimensions when no axis is given).
* `normalize_axes`: negative axes, duplicates and range checks for reductions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels import half

# Float types numpy itself computes with (everything else "floating" comes from ml_dtypes).
_NUMPY_FLOATS = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))

ML_FLOATS: frozenset[np.dtype] = frozenset(
    np.dtype(getattr(ml_dtypes, name))
    for name in (
        "bfloat16",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "float4_e2m1fn",
        "float6_e2m3fn",
        "float6_e3m2fn",
    )
    if hasattr(ml_dtypes, name)
)

ML_INTS: frozenset[np.dtype] = frozenset(
    np.dtype(getattr(ml_dtypes, name))
    for name in ("int4", "uint4", "int2", "uint2")
    if hasattr(ml_dtypes, name)
)


def is_float(dtype: np.dtype) -> bool:
    """Any floating type, numpy's or ml_dtypes'."""
    return dtype in _NUMPY_FLOATS or dtype in ML_FLOATS


def float_compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype arithmetic on ``dtype`` values runs in."""
    if dtype in ML_FLOATS:
        return np.dtype(np.float32)
    if dtype in ML_INTS:
        return np.dtype(np.int32)
    return dtype


def as_compute(x: np.ndarray) -> np.ndarray:
    """``x`` in its compute dtype (no copy when it already is)."""
    dt = float_compute_dtype(x.dtype)
    return x if dt == x.dtype else x.astype(dt)


def widen(x: np.ndarray) -> np.ndarray:
    """``x`` in float32 when it is float16 or an ml_dtypes float, int32 for ml_dtypes ints;
    otherwise ``x`` itself (no copy)."""
    if x.dtype == np.float16:
        return half.to_float32(x)  # (numpy's bits, by F16C where compiled)
    if x.dtype in ML_FLOATS:
        return x.astype(np.float32)
    if x.dtype in ML_INTS:
        return x.astype(np.int32)
    return x


def float_unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """A unary float function that keeps the input's dtype (ml_dtypes via float32)."""

    def apply(x: np.ndarray) -> np.ndarray:
        dt = x.dtype
        if dt in ML_FLOATS:
            return np.asarray(fn(x.astype(np.float32))).astype(dt)
        out = np.asarray(fn(x))
        return out if out.dtype == dt else out.astype(dt)

    return apply


def legacy_broadcast(a: np.ndarray, b: np.ndarray, broadcast: int, axis: int | None) -> np.ndarray:
    """B reshaped so that numpy broadcasting aligns it as opset < 7 specified.

    With ``broadcast=1`` B's dimensions match A's starting at ``axis`` (suffix matching
    when no axis is given, which is numpy's own rule); with ``broadcast=0`` the shapes must
    be equal, except that a 1-element B has always been accepted by runtimes.
    """
    if not broadcast:
        if a.shape != b.shape and b.size != 1:
            raise ExecutionError(
                f"shapes {a.shape} and {b.shape} differ and broadcast=0 (opset < 7)"
            )
        return b
    if axis is None or b.ndim == 0 or b.ndim == a.ndim:
        return b
    axis = axis + a.ndim if axis < 0 else axis
    trailing = a.ndim - axis - b.ndim
    if trailing < 0:
        raise ExecutionError(f"broadcast axis {axis} does not fit B {b.shape} into A {a.shape}")
    return b.reshape(b.shape + (1,) * trailing)


def normalize_axes(axes: Sequence[int] | np.ndarray, rank: int) -> tuple[int, ...]:
    out = []
    for ax in np.asarray(axes, dtype=np.int64).ravel().tolist():
        a = ax + rank if ax < 0 else ax
        if not 0 <= a < max(rank, 1):
            raise ExecutionError(f"axis {ax} out of range for rank {rank}")
        if a not in out:
            out.append(a)
    return tuple(sorted(out))


def normalize_axis(axis: int, rank: int) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < max(rank, 1):
        raise ExecutionError(f"axis {axis} out of range for rank {rank}")
    return a


def scalar_of(value: Any) -> Any:
    """A Python scalar from a 0-d or 1-element tensor input."""
    arr = np.asarray(value)
    if arr.size != 1:
        raise ExecutionError(f"expected a single value, got shape {arr.shape}")
    return arr.reshape(()).item()
