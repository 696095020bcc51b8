"""Creation and padding kernels: Constant, ConstantOfShape, EyeLike, Range, Pad,
CenterCropPad."""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxviz.runtime.kernels._tensor_common import (
    as_ints,
    fail,
    normalize_axes,
    np_dtype,
)
from onnxviz.runtime.registry import kernel

_CONSTANT_FORMS = (
    "value",
    "sparse_value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
)


@kernel("Constant", since=(1, 9, 11, 12, 13, 19, 21, 23, 24, 25))
def constant(**attrs: Any) -> np.ndarray:
    given = [name for name in _CONSTANT_FORMS if name in attrs]
    if len(given) != 1:
        fail(f"Constant: exactly one value attribute is required, got {given or 'none'}")
    name = given[0]
    value = attrs[name]
    if name in ("value", "sparse_value"):
        # The attribute decoder already made a dense array (sparse values densified).
        return np.asarray(value)
    if name == "value_float":
        return np.array(value, dtype=np.float32)
    if name == "value_floats":
        return np.array(value, dtype=np.float32).reshape(-1)
    if name == "value_int":
        return np.array(value, dtype=np.int64)
    if name == "value_ints":
        return np.array(value, dtype=np.int64).reshape(-1)
    if name == "value_string":
        return np.array(value, dtype=object)
    out = np.empty(len(value), dtype=object)
    out[:] = value
    return out


@kernel("ConstantOfShape", since=(9, 20, 21, 23, 24, 25))
def constant_of_shape(shape: np.ndarray, value: np.ndarray | None = None) -> np.ndarray:
    dims = as_ints(shape)
    if any(d < 0 for d in dims):
        fail(f"ConstantOfShape: negative dimension in {dims}")
    if value is None:
        return np.zeros(dims, dtype=np.float32)
    fill = np.asarray(value).reshape(-1)
    if fill.size != 1:
        fail("ConstantOfShape: value must hold exactly one element")
    return np.full(dims, fill[0], dtype=fill.dtype)


@kernel("EyeLike", since=(9, 22))
def eye_like(data: np.ndarray, dtype: int | None = None, k: int = 0) -> np.ndarray:
    if data.ndim != 2:
        fail(f"EyeLike: input must be 2-D, got rank {data.ndim}")
    out_dtype = data.dtype if dtype is None else np_dtype(dtype)
    return np.eye(data.shape[0], data.shape[1], k=k, dtype=out_dtype)


def _range(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, stash: bool) -> np.ndarray:
    dtype = np.asarray(start).dtype
    s, lim, d = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
    if d == 0:
        fail("Range: delta is zero")
    if dtype.kind in "iu":
        return np.arange(int(s), int(lim), int(d), dtype=dtype)
    compute: Any = np.float64 if dtype == np.float64 else np.float32
    s32, lim32, d32 = (compute(v) for v in (s, lim, d))
    count = max(int(np.ceil((lim32 - s32) / d32)), 0)
    if dtype.itemsize < 4 and not stash:
        # stash_type=0: accumulate in the input type itself, as the spec's loop does.
        out = np.empty(count, dtype=dtype)
        acc = np.asarray(s, dtype=dtype)
        step = np.asarray(d, dtype=dtype)
        for i in range(count):  # only for the opt-in low-precision mode
            out[i] = acc
            acc = (acc + step).astype(dtype)
        return out
    steps: Any = np.arange(count, dtype=compute)
    return (s32 + steps * d32).astype(dtype)


@kernel("Range", since=11)
def range_v11(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    return _range(start, limit, delta, True)


@kernel("Range", since=27)
def range_op(
    start: np.ndarray, limit: np.ndarray, delta: np.ndarray, stash_type: int = 1
) -> np.ndarray:
    return _range(start, limit, delta, stash_type == 1)


def _default_fill(dtype: np.dtype[Any]) -> Any:
    if dtype == np.dtype(object):
        return ""
    return np.zeros((), dtype=dtype)[()]


def _pad_constant(data: np.ndarray, begins: list[int], ends: list[int], value: Any) -> np.ndarray:
    """Output index o along an axis holds input index o - begin when that exists, else
    the constant; negative pads crop, even past the opposite pad (size d + b + e)."""
    out_shape = [max(0, d + b + e) for d, b, e in zip(data.shape, begins, ends)]
    fill = _default_fill(data.dtype) if value is None else value
    out = np.full(out_shape, fill, dtype=data.dtype)
    src, dst = [], []
    for d, b, n_out in zip(data.shape, begins, out_shape):
        s0, d0 = max(0, -b), max(0, b)
        n = max(0, min(d - s0, n_out - d0))
        src.append(slice(s0, s0 + n))
        dst.append(slice(d0, d0 + n))
    out[tuple(dst)] = data[tuple(src)]
    return out


def _pad(data: np.ndarray, begins: list[int], ends: list[int], mode: str, value: Any) -> np.ndarray:
    if mode == "constant":
        return _pad_constant(data, begins, ends, value)
    if mode not in ("reflect", "edge", "wrap"):
        fail(f"Pad: unknown mode {mode!r}")
    # Negative pads crop first; then the positive pads are added in ``mode``.
    crop = tuple(
        slice(max(0, -b), max(0, data.shape[i] - max(0, -e)))
        for i, (b, e) in enumerate(zip(begins, ends))
    )
    x = data[crop]
    widths = [(max(0, b), max(0, e)) for b, e in zip(begins, ends)]
    if not any(b or e for b, e in widths):
        return x
    for i, (b, e) in enumerate(widths):
        if (b or e) and x.shape[i] == 0:
            fail(f"Pad: cannot pad an empty axis {i} in {mode} mode")
        if mode == "reflect" and (b or e) and x.shape[i] < 2:
            fail(f"Pad: reflect mode needs at least 2 elements along axis {i}")
    if mode == "reflect" and all(b < n and e < n for (b, e), n in zip(widths, x.shape)):
        return _reflect(x, widths)
    return np.pad(x, widths, mode=mode)  # type: ignore[call-overload]


def _reflect(x: np.ndarray, widths: list[tuple[int, int]]) -> np.ndarray:
    """np.pad(x, widths, mode="reflect") for pads shorter than their axes (the mirror
    excludes the edge: [a b c d] padded by 2 is [c b a b c d c b]): x copied into the
    middle, then axis by axis each side copied from its mirror in the output, as np.pad
    pads axis by axis (the corners from the axes padded before).  Copies, so np.pad's
    values; np.pad's general machinery took 240 us for 2 on each side of 64 x 56 x 56
    (onnxruntime 111)."""
    out = np.empty([n + b + e for (b, e), n in zip(widths, x.shape)], dtype=x.dtype)
    out[tuple(slice(b, b + n) for (b, _), n in zip(widths, x.shape))] = x
    every = [slice(None)] * x.ndim
    for axis, ((b, e), n) in enumerate(zip(widths, x.shape)):
        if b:
            to, src = list(every), list(every)
            to[axis], src[axis] = slice(0, b), slice(2 * b, b, -1)
            out[tuple(to)] = out[tuple(src)]
        if e:
            last = b + n - 1  # the last element of the middle
            stop = last - 1 - e
            to, src = list(every), list(every)
            to[axis] = slice(last + 1, last + 1 + e)
            src[axis] = slice(last - 1, stop if stop >= 0 else None, -1)
            out[tuple(to)] = out[tuple(src)]
    return out


def _pads_for(rank: int, pads: list[int], axes: list[int] | None) -> tuple[list[int], list[int]]:
    axes = list(range(rank)) if axes is None else normalize_axes(axes, rank)
    if len(pads) != 2 * len(axes):
        fail(f"Pad: {len(pads)} pad values for {len(axes)} axes")
    begins, ends = [0] * rank, [0] * rank
    for j, ax in enumerate(axes):
        begins[ax] = pads[j]
        ends[ax] = pads[j + len(axes)]
    return begins, ends


@kernel("Pad", since=1)
def pad_v1(
    data: np.ndarray, paddings: list[int], mode: str = "constant", value: float = 0.0
) -> np.ndarray:
    begins, ends = _pads_for(data.ndim, paddings, None)
    return _pad(data, begins, ends, mode, value)


@kernel("Pad", since=2)
def pad_v2(
    data: np.ndarray, pads: list[int], mode: str = "constant", value: float = 0.0
) -> np.ndarray:
    begins, ends = _pads_for(data.ndim, pads, None)
    return _pad(data, begins, ends, mode, value)


@kernel("Pad", since=(11, 13, 18, 19, 21, 23, 24, 25))
def pad(
    data: np.ndarray,
    pads: np.ndarray,
    constant_value: np.ndarray | None = None,
    axes: np.ndarray | None = None,
    mode: str = "constant",
) -> np.ndarray:
    begins, ends = _pads_for(data.ndim, as_ints(pads), None if axes is None else as_ints(axes))
    value = None
    if constant_value is not None and np.asarray(constant_value).size:
        value = np.asarray(constant_value).reshape(-1)[0]
    return _pad(data, begins, ends, mode, value)


@kernel("CenterCropPad", since=18)
def center_crop_pad(
    data: np.ndarray, shape: np.ndarray, axes: list[int] | None = None
) -> np.ndarray:
    targets = as_ints(shape)
    axes_n = list(range(data.ndim)) if axes is None else normalize_axes(axes, data.ndim)
    if len(targets) != len(axes_n):
        fail(f"CenterCropPad: {len(targets)} sizes for {len(axes_n)} axes")
    begins, ends = [0] * data.ndim, [0] * data.ndim
    for ax, target in zip(axes_n, targets):
        diff = target - data.shape[ax]
        if diff < 0:  # crop: window start rounded down
            begins[ax] = -((-diff) // 2)
            ends[ax] = diff - begins[ax]
        else:  # pad: the odd pixel goes to the end
            begins[ax] = diff // 2
            ends[ax] = diff - diff // 2
    return _pad(data, begins, ends, "constant", None)
