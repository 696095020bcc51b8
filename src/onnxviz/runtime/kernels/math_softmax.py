"""Softmax, LogSoftmax and Hardmax.

Opset < 13 coerces the input to 2-D at ``axis`` (rows = dims before it, columns = the
rest, default axis 1) and normalises each row; opset 13 normalises along one axis
(default -1).  Softmax subtracts the maximum first, so large inputs never overflow.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels.dense import dense
from onnxviz.runtime.kernels.math_common import normalize_axis, widen
from onnxviz.runtime.registry import kernel, specializer

Array = np.ndarray


def _shifted(x: Array, axis: int) -> Array:
    """x - max(x, axis) in a fresh array (rows of -inf stay NaN-free where possible)."""
    m = np.max(x, axis=axis, keepdims=True)
    if x.dtype.kind == "f" and not np.isfinite(m).all():
        m = np.where(np.isfinite(m), m, 0)  # rows of +-inf: keep them from becoming NaN
    return np.subtract(x, m)


# Widest spread of values for which one shift (the array's maximum) serves every row:
# exp(-60) is far above float32's smallest normal number, so no row loses precision or
# sums to zero, where the exact row maxima cost a slow reduction over short rows.
_ONE_SHIFT_SPREAD = 60.0
# A wider spread (an additive attention mask: -10000, the dtype's lowest value or -inf
# on some keys) still takes the one shift when every row's sum of exp(x - max) is at
# least this: the sum is at most n times the row's largest term, so that term is within
# 50 + ln(n) (< 64 for n < 2**20) of the shift and every term that matters (a share above
# about 1e-10 of its row) is a normal float, as with the row's own maximum.  Masked
# terms underflow to 0, as they do with the row's own maximum.
_ROW_SUM_FLOOR = math.exp(-50.0)


def softmax_rows(x: Array) -> Array | None:
    """Softmax along the last axis of a C-contiguous float32/float64 array with one shift
    (softmax is the same for any shift of a row) and the row sums as one matrix-vector
    product, or None where that is not safe: NaN or +inf values, or a row far below the
    array's maximum (see _ROW_SUM_FLOOR).  1.7x faster on a ViT's (1, 3, 197, 197)
    attention scores than per-row maxima and sums, 2.4x on BERT's masked scores."""
    if x.dtype not in _FLOATS or not x.flags.c_contiguous or x.ndim == 0 or x.shape[-1] < 2:
        return None
    hi = float(x.max())
    if not math.isfinite(hi):  # NaN, +inf, or every value -inf
        return None
    narrow = hi - float(x.min()) < _ONE_SHIFT_SPREAD
    e = np.subtract(x, hi)
    np.exp(e, out=e)
    n = x.shape[-1]
    total = (e.reshape(-1, n) @ np.ones(n, dtype=x.dtype)).reshape(x.shape[:-1] + (1,))
    if not narrow and not float(total.min()) >= _ROW_SUM_FLOOR:
        return None
    e *= np.reciprocal(total, out=total)
    return e


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


# The compiled row softmax (native/_softmax.c), None when compiled kernels are off or not
# built, or run below AVX-512 on a CPU that has it.  It normalises each row by its own
# maximum and runs in every run mode, so a stepped run shows the numbers a plain run
# gives.  Measured (1 thread, BERT-base's 12 x 128 x 128 scores): on a Sapphire Rapids
# core at AVX-512 156 us against 249 for softmax_rows, but at AVX2 349, since numpy's own
# exp runs AVX-512 there.  On an AVX2 CPU (a Zen 3 core, numpy's exp at AVX2 too) the
# AVX2 kernel wins: 254-313 us against 724-771 on those scores, 205-263 against 307-406
# on a ViT's 3 x 197 x 197, 41-45 against 77-82 on BERT-tiny's 2 x 128 x 128.
_NATIVE = native.load("softmax")
if (
    _NATIVE is not None
    and int(_NATIVE.level()) < native.AVX512
    and native.cpu_level() >= native.AVX512
):
    _NATIVE = None
_F32 = np.dtype(np.float32)


def _softmax(x: Array, axis: int) -> Array:
    if (
        _NATIVE is not None
        and axis == x.ndim - 1
        and x.dtype == _F32
        and x.flags.c_contiguous
        and x.size
    ):
        y = np.empty(x.shape, dtype=_F32)
        if _NATIVE.softmax(x, y, x.shape[-1]):
            return y
        # A row with a NaN or +inf, or only -inf: the numpy path says what it gives.
    if axis == x.ndim - 1 and x.size:
        fast = softmax_rows(x)
        if fast is not None:
            return fast
    e = _shifted(x, axis)
    np.exp(e, out=e)
    # Multiplying by the row's reciprocal is several times faster than dividing every
    # element, at most one ulp apart; every row sum is >= 1 (its maximum gives exp(0)).
    total = np.sum(e, axis=axis, keepdims=True)
    e *= np.reciprocal(total, out=total)
    return e


def softmax_last_axis(x: Array) -> Array:
    """Softmax over the last axis, as the Softmax kernel computes it (a float32 array's
    compiled rows, numpy's steps otherwise): for the attention kernels' scores."""
    x = dense(x)
    return _softmax(x, x.ndim - 1) if x.ndim else np.ones_like(x)


def _log_softmax(x: Array, axis: int) -> Array:
    s = _shifted(x, axis)
    lse = np.log(np.sum(np.exp(s), axis=axis, keepdims=True))
    s -= lse
    return s


def _hardmax(x: Array, axis: int) -> Array:
    # One-hot of the first maximum along the axis.
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros(x.shape, dtype=x.dtype)
    np.put_along_axis(out, idx, 1, axis=axis)
    return out


def _apply(fn: object, x: Array, axis: int, coerce_2d: bool) -> Array:
    dt = x.dtype
    if x.size == 0:
        return np.empty(x.shape, dtype=dt)
    w = widen(x)
    if x.ndim == 0:
        out = fn(w.reshape(1), 0)  # type: ignore[operator]
        return np.asarray(out).reshape(()).astype(dt, copy=False)
    ax = normalize_axis(axis, x.ndim)
    if coerce_2d:
        rows = math.prod(x.shape[:ax])
        out = fn(w.reshape(rows, -1), 1)  # type: ignore[operator]
        out = out.reshape(x.shape)
    else:
        out = fn(w, ax)  # type: ignore[operator]
    return out if out.dtype == dt else out.astype(dt)


@kernel("Softmax", since=(1, 11))
def softmax_2d(x: Array, axis: int = 1) -> Array:
    return _apply(_softmax, x, axis, True)


@kernel("Softmax", since=13)
def softmax(x: Array, axis: int = -1) -> Array:
    return _apply(_softmax, x, axis, False)


@specializer(softmax)
def _prepared_softmax(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs on AVX-512: a float32 softmax over the last axis straight to the
    compiled kernel (an attention's scores; the kernel's own path is several Python
    calls deep, most of a small call's time); anything else takes the kernel."""
    native_softmax = _NATIVE
    if native_softmax is None:
        return None
    axis = attrs.get("axis", -1)

    def call(x: Any) -> Any:
        if (
            type(x) is np.ndarray
            and x.dtype == _F32
            and x.ndim
            and (axis == -1 or axis == x.ndim - 1)
            and x.flags.c_contiguous
            and x.size
        ):
            y = np.empty(x.shape, dtype=_F32)
            if native_softmax.softmax(x, y, x.shape[-1]):
                return y
        return softmax(x, axis=axis)

    return call


@kernel("LogSoftmax", since=(1, 11))
def log_softmax_2d(x: Array, axis: int = 1) -> Array:
    return _apply(_log_softmax, x, axis, True)


@kernel("LogSoftmax", since=13)
def log_softmax(x: Array, axis: int = -1) -> Array:
    return _apply(_log_softmax, x, axis, False)


@kernel("Hardmax", since=(1, 11))
def hardmax_2d(x: Array, axis: int = 1) -> Array:
    return _apply(_hardmax, x, axis, True)


@kernel("Hardmax", since=13)
def hardmax(x: Array, axis: int = -1) -> Array:
    return _apply(_hardmax, x, axis, False)
