"""Reductions (Reduce*), ArgMax/ArgMin and cumulative sums/products.

Axes are an attribute up to opset 12 (ReduceSum) / 17 (the others) and an optional int64
input afterwards, with ``noop_with_empty_axes``: when set and no axes are given, the
reduction runs over an empty set of axes, which numpy expresses as ``axis=()`` (the
composite steps still run: ReduceSumSquare squares, ReduceLogSum takes the log).
Accumulation runs in float32 for float16/bfloat16/float8 and in the input type for integers
(numpy would otherwise widen int32 sums to int64).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxviz.runtime.kernels._weight_cache import frozen
from onnxviz.runtime.kernels.math_common import (
    ML_FLOATS,
    ML_INTS,
    normalize_axes,
    normalize_axis,
    scalar_of,
)
from onnxviz.runtime.registry import kernel, specializer

Array = np.ndarray
Axes = tuple[int, ...] | None
_F32 = np.dtype(np.float32)


def _acc_dtype(dt: np.dtype) -> np.dtype:
    if dt == np.float16 or dt in ML_FLOATS:
        return _F32
    if dt in ML_INTS:
        return np.dtype(np.int32)
    return dt


# The ufuncs' reduce methods, which np.sum, np.prod, np.max and np.min call after a few
# microseconds of Python-level dispatch (most of a small reduction's cost).
def _sum(x: Array, axes: Axes, keep: bool) -> Array:
    return np.add.reduce(x, axis=axes, keepdims=keep, dtype=x.dtype)  # type: ignore[call-overload,no-any-return]


def _sum_square(x: Array, axes: Axes, keep: bool) -> Array:
    return _sum(np.square(x), axes, keep)


def _l1(x: Array, axes: Axes, keep: bool) -> Array:
    return _sum(np.abs(x), axes, keep)


def _l2(x: Array, axes: Axes, keep: bool) -> Array:
    out = _sum(np.square(x.astype(np.float64) if x.dtype.kind in "iu" else x), axes, keep)
    return np.sqrt(out)


def _log_sum(x: Array, axes: Axes, keep: bool) -> Array:
    with np.errstate(divide="ignore"):
        return np.log(_sum(x, axes, keep))


def _log_sum_exp(x: Array, axes: Axes, keep: bool) -> Array:
    if x.size == 0:  # empty set: log(0) = -inf (zero-size reductions below)
        with np.errstate(divide="ignore"):
            return np.log(_sum(x, axes, keep))
    m = np.max(x, axis=axes, keepdims=True)
    if x.dtype.kind == "f":
        m = np.where(np.isfinite(m), m, 0)
    s = np.sum(np.exp(x - m), axis=axes, keepdims=keep)
    with np.errstate(divide="ignore"):
        out = np.log(s)
    out += m if keep else m.reshape(out.shape)
    return out


def _mean(x: Array, axes: Axes, keep: bool) -> Array:
    if x.dtype.kind in "iu":
        return np.asarray(np.mean(x, axis=axes, keepdims=keep, dtype=np.float64))
    # np.mean's own steps (the sum, then a true division by the count as a Python int)
    # without its Python-level checks: 9.0 -> 6.9 us for a LayerNorm's [1, 128, 128]
    # over the last axis, the same bits (and no "Mean of empty slice" warning).
    total = np.add.reduce(x, axis=axes, keepdims=keep, dtype=x.dtype)  # type: ignore[call-overload]
    count = x.size if axes is None else math.prod(x.shape[a] for a in axes)
    return np.true_divide(total, count)  # type: ignore[no-any-return]


def _prod(x: Array, axes: Axes, keep: bool) -> Array:
    return np.multiply.reduce(x, axis=axes, keepdims=keep, dtype=x.dtype)  # type: ignore[call-overload,no-any-return]


def _lowest(dt: np.dtype) -> Any:
    if dt == np.bool_:
        return False
    return -np.inf if dt.kind == "f" else np.iinfo(dt).min


def _highest(dt: np.dtype) -> Any:
    if dt == np.bool_:
        return True
    return np.inf if dt.kind == "f" else np.iinfo(dt).max


def _max(x: Array, axes: Axes, keep: bool) -> Array:
    # initial= gives the empty-set result the spec asks for (-inf or the type's minimum).
    return np.maximum.reduce(x, axis=axes, keepdims=keep, initial=_lowest(x.dtype))  # type: ignore[call-overload,no-any-return]


def _min(x: Array, axes: Axes, keep: bool) -> Array:
    return np.minimum.reduce(x, axis=axes, keepdims=keep, initial=_highest(x.dtype))  # type: ignore[call-overload,no-any-return]


Reducer = Callable[[Array, Axes, bool], Array]


def _reduce(fn: Reducer, x: Array, axes: Axes, keepdims: int) -> Array:
    dt = x.dtype
    if x.ndim == 0 and axes:
        axes = None  # a scalar has no axis to name; reducing it over "all" is the identity
    w = x.astype(_acc_dtype(dt)) if _acc_dtype(dt) != dt else x
    out = np.asarray(fn(w, axes, bool(keepdims)))
    return out if out.dtype == dt else out.astype(dt)


def _axes_from_attr(axes: list[int] | None, rank: int) -> Axes:
    return None if not axes else normalize_axes(axes, rank)


def _axes_from_input(axes: Array | None, rank: int, noop: int) -> Axes:
    if axes is None or np.asarray(axes).size == 0:
        return () if noop else None
    return normalize_axes(axes, rank)


def _register(
    op: str, fn: Reducer, attr_versions: tuple[int, ...], input_versions: tuple[int, ...]
) -> None:
    def with_attr(data: Array, axes: list[int] | None = None, keepdims: int = 1) -> Array:
        return _reduce(fn, data, _axes_from_attr(axes, data.ndim), keepdims)

    def with_input(
        data: Array, axes: Array | None = None, keepdims: int = 1, noop_with_empty_axes: int = 0
    ) -> Array:
        return _reduce(fn, data, _axes_from_input(axes, data.ndim, noop_with_empty_axes), keepdims)

    with_attr.__name__ = f"kernel_{op.lower()}_axes_attribute"
    with_input.__name__ = f"kernel_{op.lower()}"
    kernel(op, since=attr_versions)(with_attr)
    kernel(op, since=input_versions)(with_input)
    specializer(with_attr)(_prepared(fn, with_attr, from_input=False))
    specializer(with_input)(_prepared(fn, with_input, from_input=True))


# The dtypes a reduction accumulates in as they are (_acc_dtype is the identity).
_AS_IS = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))


def _prepared(fn: Reducer, kernel_fn: Callable[..., Array], *, from_input: bool) -> Any:
    """The specializer (registry.specializer) of a reduction: in unwatched runs, the
    axes (an attribute, or an input that cannot change, _weight_cache.frozen, as
    initializers and folded Constant outputs are) are normalised once per rank, and the reduction of a
    float32/64 or int32/64 tensor is `_reduce`'s without its dtype steps (the identity
    for those types).  A decoder's mask sums a [1, T] tensor, where the steps were half
    of a 4 us call."""

    def specialize(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
        keep = bool(attrs.get("keepdims", 1))
        noop = attrs.get("noop_with_empty_axes", 0)
        fallback = functools.partial(kernel_fn, **attrs)
        # (axes input, rank) -> normalised axes; the input is held, so its id stays its.
        seen: dict[tuple[int, int], tuple[Any, Axes]] = {}

        def call(data: Any, axes: Any = None) -> Any:
            if type(data) is not np.ndarray or data.dtype not in _AS_IS or not data.ndim:
                return fallback(data) if axes is None else fallback(data, axes)
            rank = data.ndim
            if not from_input:
                hit = seen.get((0, rank))
                if hit is None:
                    hit = seen[(0, rank)] = (None, _axes_from_attr(attrs.get("axes"), rank))
                ax = hit[1]
            elif axes is None:
                ax = None if not noop else ()
            elif type(axes) is np.ndarray and not axes.flags.writeable:
                hit = seen.get((id(axes), rank))
                if hit is None or hit[0] is not axes:
                    if not frozen(axes):  # a read-only view of memory that may change
                        return fallback(data, axes)
                    if len(seen) > 8:
                        seen.clear()
                    hit = seen[(id(axes), rank)] = (axes, _axes_from_input(axes, rank, noop))
                ax = hit[1]
            else:
                ax = _axes_from_input(axes, rank, noop)
            out = np.asarray(fn(data, ax, keep))
            return out if out.dtype == data.dtype else out.astype(data.dtype)

        return call

    return specialize


_register("ReduceSum", _sum, (1, 11), (13,))
_register("ReduceSumSquare", _sum_square, (1, 11, 13), (18,))
_register("ReduceL1", _l1, (1, 11, 13), (18,))
_register("ReduceL2", _l2, (1, 11, 13), (18,))
_register("ReduceLogSum", _log_sum, (1, 11, 13), (18, 28))
_register("ReduceLogSumExp", _log_sum_exp, (1, 11, 13), (18, 28))
_register("ReduceMean", _mean, (1, 11, 13), (18,))
_register("ReduceProd", _prod, (1, 11, 13), (18,))
_register("ReduceMax", _max, (1, 11, 12, 13), (18, 20))
_register("ReduceMin", _min, (1, 11, 12, 13), (18, 20))


# ---------------------------------------------------------------- ArgMax / ArgMin
def _arg(fn: Callable[..., Array], data: Array, axis: int, keepdims: int, last: int) -> Array:
    x = data.astype(np.float32) if data.dtype in ML_FLOATS else data
    ax = normalize_axis(axis, x.ndim)
    if last:
        # The last occurrence is the first one in the reversed axis.
        n = x.shape[ax]
        idx = (n - 1) - fn(np.flip(x, axis=ax), axis=ax)
    else:
        idx = fn(x, axis=ax)
    idx = np.asarray(idx, dtype=np.int64)
    return np.expand_dims(idx, ax) if keepdims else idx


@kernel("ArgMax", since=(1, 11, 12, 13))
def arg_max(data: Array, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Array:
    return _arg(np.argmax, data, axis, keepdims, select_last_index)


@kernel("ArgMin", since=(1, 11, 12, 13))
def arg_min(data: Array, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Array:
    return _arg(np.argmin, data, axis, keepdims, select_last_index)


# ---------------------------------------------------------------- CumSum / CumProd
def _cumulative(
    fn: Callable[..., Array], identity: int, x: Array, axis: Any, exclusive: int, reverse: int
) -> Array:
    dt = x.dtype
    acc = _acc_dtype(dt)
    if x.ndim == 0:
        return x.copy() if not exclusive else np.full((), identity, dtype=dt)
    ax = normalize_axis(int(scalar_of(axis)), x.ndim)
    src = np.flip(x, axis=ax) if reverse else x
    out = np.empty(x.shape, dtype=acc)
    dst = np.flip(out, axis=ax) if reverse else out  # a view: results land in order
    if exclusive:
        n = x.shape[ax]
        head = [slice(None)] * x.ndim
        head[ax] = slice(0, 1)
        dst[tuple(head)] = identity
        if n > 1:
            body_src = [slice(None)] * x.ndim
            body_src[ax] = slice(0, n - 1)
            body_dst = [slice(None)] * x.ndim
            body_dst[ax] = slice(1, n)
            fn(src[tuple(body_src)], axis=ax, dtype=acc, out=dst[tuple(body_dst)])
    else:
        fn(src, axis=ax, dtype=acc, out=dst)
    return out if acc == dt else out.astype(dt)


@kernel("CumSum", since=(11, 14))
def cum_sum(x: Array, axis: Array, exclusive: int = 0, reverse: int = 0) -> Array:
    return _cumulative(np.cumsum, 0, x, axis, exclusive, reverse)


@kernel("CumProd", since=26)
def cum_prod(x: Array, axis: Array, exclusive: int = 0, reverse: int = 0) -> Array:
    return _cumulative(np.cumprod, 1, x, axis, exclusive, reverse)
