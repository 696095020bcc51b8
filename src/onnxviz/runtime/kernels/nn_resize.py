"""Resize (opsets 10-19) and Upsample (1-10).

Resampling is separable: every resized axis gets a small tap table (input index and
weight for each output position), and the axis is resampled with one `take` and a
multiply-add per tap.  Linear and cubic with antialias use the same tables with the
filter stretched by 1/scale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.kernels.nn_geometry import compute_dtype
from onnxviz.runtime.registry import KernelContext, kernel, specializer

# The compiled nearest copy (native/_resize.c), None when compiled kernels are off.
_RESIZE = native.load("resize")


def _original_coords(
    n_out: int,
    n_in: int,
    scale: float,
    mode: str,
    roi: tuple[float, float],
) -> np.ndarray:
    """Input coordinate of each output position (coordinate_transformation_mode)."""
    x = np.arange(n_out, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = n_out / (n_in * scale)
        offset = n_in / 2 * (1 - adjustment)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
    if mode == "align_corners":
        # length_resized is the real-valued n_in * scale when scales were given.
        length = float(np.float32(n_in) * np.float32(scale))  # same arithmetic as the size
        return x * (n_in - 1) / (length - 1) if n_out > 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if n_out > 1:
            return start * (n_in - 1) + x * (end - start) * (n_in - 1) / (n_out - 1)
        return np.full(n_out, 0.5 * (start + end) * (n_in - 1))
    raise ExecutionError(f"Resize: unknown coordinate_transformation_mode '{mode}'")


def _nearest_index(x: np.ndarray, nearest_mode: str, downsampling: bool) -> np.ndarray:
    if nearest_mode == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if nearest_mode == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if nearest_mode == "floor":
        return np.floor(x)
    if nearest_mode == "ceil":
        return np.ceil(x)
    if nearest_mode == "simple":  # opset 10 / Upsample: truncate up, ceil down
        return np.ceil(x) if downsampling else np.floor(x)
    raise ExecutionError(f"Resize: unknown nearest_mode '{nearest_mode}'")


def _cubic_kernel(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _taps(
    coords: np.ndarray,
    n_in: int,
    scale: float,
    interp: str,
    cubic_a: float,
    antialias: bool,
    exclude_outside: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (n_out, taps)."""
    base = np.floor(coords)
    frac = (coords - base)[:, None]
    support = 1 if interp == "linear" else 2
    s = min(scale, 1.0) if antialias else 1.0
    start = int(np.floor(-support / s) + 1)
    if interp == "linear":
        offsets = np.arange(start, start + 2 - 2 * start)
    else:
        offsets = np.arange(start, 2 - start)
    dist = (offsets[None, :] - frac) * s
    if interp == "linear":
        weights = np.clip(1 - np.abs(dist), 0, 1)
    else:
        weights = _cubic_kernel(dist, cubic_a)
    index = base[:, None].astype(np.int64) + offsets[None, :]
    if exclude_outside:
        weights = np.where((index >= 0) & (index < n_in), weights, 0.0)
    total = weights.sum(axis=1, keepdims=True)
    if antialias or exclude_outside:
        weights = weights / np.where(total == 0, 1, total)
    return np.clip(index, 0, n_in - 1), weights


def _resample_axis(
    x: np.ndarray, axis: int, index: np.ndarray, weights: np.ndarray | None
) -> np.ndarray:
    if weights is None:
        return np.take(x, index, axis=axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    new_shape = list(x.shape)
    new_shape[axis] = index.shape[0]
    acc: np.ndarray | None = None
    tmp: np.ndarray | None = None
    # One accumulator and one scratch buffer for all taps (no per-tap allocations).
    for t in range(index.shape[1]):
        w = weights[:, t]
        if not np.any(w):
            continue
        wb = w.astype(x.dtype).reshape(shape)
        if acc is None:
            acc = np.take(x, index[:, t], axis=axis)
            acc *= wb
            continue
        if tmp is None:
            tmp = np.empty_like(acc)
        np.take(x, index[:, t], axis=axis, out=tmp)
        tmp *= wb
        acc += tmp
    if acc is None:
        return np.zeros(new_shape, dtype=x.dtype)
    return acc


def resize_nd(
    x: np.ndarray,
    out_shape: Sequence[int],
    scales: Sequence[float],
    *,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    antialias: int = 0,
    roi: Sequence[float] | None = None,
) -> np.ndarray:
    """Resize every axis whose size or scale changes; scales are per axis of x."""
    if mode not in ("nearest", "linear", "cubic"):
        raise ExecutionError(f"Resize: unknown mode '{mode}'")
    rank = x.ndim
    integer = x.dtype.kind in "iub"
    y = x if mode == "nearest" else x.astype(compute_dtype(x.dtype) if not integer else np.float32)
    outside: np.ndarray | None = None
    crop = coordinate_transformation_mode == "tf_crop_and_resize"
    if (
        mode == "linear"
        and _RESIZE is not None
        and x.dtype == np.float32
        and rank >= 2
        and not crop
        and not antialias
        and not exclude_outside
        and x.size
    ):
        plan = _linear_plan(
            tuple(x.shape),
            tuple(int(n) for n in out_shape),
            tuple(float(v) for v in scales),
            coordinate_transformation_mode,
        )
        if plan is not None:
            # These same steps in one compiled pass per output row (native/_resize.c),
            # numpy's values bit for bit: a bilinear 2x upsampling of 16 channels at
            # 128 px 1.4 ms -> about 0.1.
            sizes, rows, cols, flags = plan
            out = np.empty(tuple(int(n) for n in out_shape), dtype=np.float32)
            _RESIZE.linear(np.ascontiguousarray(x), out, sizes, rows, cols, flags)
            return out
    if mode == "nearest" and not crop:
        factors = _repeat_factors(
            tuple(x.shape),
            tuple(int(n) for n in out_shape),
            tuple(float(v) for v in scales),
            coordinate_transformation_mode,
            nearest_mode,
        )
        if factors is not None:
            return _repeat(x, factors)
    for axis in range(rank):
        n_in, n_out, scale = x.shape[axis], int(out_shape[axis]), float(scales[axis])
        axis_roi = (
            (float(roi[axis]), float(roi[axis + rank]))
            if roi is not None and len(roi) == 2 * rank
            else (0.0, 1.0)
        )
        if n_in == n_out and scale == 1.0 and not crop:
            continue
        coords = _original_coords(n_out, n_in, scale, coordinate_transformation_mode, axis_roi)
        if crop:
            bad = (coords < 0) | (coords > n_in - 1)
            if bad.any():
                shape = [1] * rank
                shape[axis] = n_out
                bad_b = bad.reshape(shape)
                outside = bad_b if outside is None else outside | bad_b
        if mode == "nearest":
            idx = _nearest_index(coords, nearest_mode, scale < 1).astype(np.int64)
            y = _resample_axis(y, axis, np.clip(idx, 0, n_in - 1), None)
        else:
            index, weights = _taps(
                coords, n_in, scale, mode, cubic_coeff_a, bool(antialias), bool(exclude_outside)
            )
            y = _resample_axis(y, axis, index, weights)
    if outside is not None:
        y = np.where(outside, np.asarray(extrapolation_value, dtype=y.dtype), y)
    if y.dtype != x.dtype:
        if integer:
            info = np.iinfo(x.dtype) if x.dtype.kind in "iu" else None
            y = np.rint(y)
            if info is not None:
                y = np.clip(y, info.min, info.max)
        y = y.astype(x.dtype)
    return np.ascontiguousarray(y)


@lru_cache(maxsize=256)
def _repeat_factors(
    in_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    scales: tuple[float, ...],
    coordinate_transformation_mode: str,
    nearest_mode: str,
) -> tuple[int, ...] | None:
    """Per axis r when nearest resampling repeats every input element r times in a row
    along it (output i reads input i // r: a UNet's or a detector's 2x nearest
    upsampling), else None.  Looked up per geometry: working it out costs about as
    much as the copy on small images."""
    factors = []
    for axis, (n_in, n_out) in enumerate(zip(in_shape, out_shape)):
        n_out, scale = int(n_out), float(scales[axis])
        if n_in == n_out and scale == 1.0:
            factors.append(1)
            continue
        if n_in == 0 or n_out % n_in:
            return None
        r = n_out // n_in
        coords = _original_coords(n_out, n_in, scale, coordinate_transformation_mode, (0.0, 1.0))
        idx = np.clip(_nearest_index(coords, nearest_mode, scale < 1), 0, n_in - 1)
        if not np.array_equal(idx, np.arange(n_out) // r):
            return None
        factors.append(r)
    return tuple(factors)


def _repeat(x: np.ndarray, factors: Sequence[int]) -> np.ndarray:
    """x with element i of each axis repeated factors[axis] times: the output viewed as
    (n0, r0, n1, r1, ...) gets one strided copy of x per combination of repeat offsets.
    Twice as fast as a take per axis (two passes, the second a gather) and than one
    broadcasting copy, whose innermost loop runs over r elements."""
    rank = x.ndim
    module = _RESIZE
    if (
        module is not None
        and rank >= 2
        and x.dtype.itemsize == 4
        and x.flags.c_contiguous
        and all(r == 1 for r in factors[:-2])
    ):
        # The last two axes by the compiled copy (native/_resize.c): a 2x upsampling of
        # 64 channels at 16 x 16, 110 -> a few us.
        h, w = x.shape[-2:]
        rh, rw = factors[-2:]
        y = np.empty((*x.shape[:-2], h * rh, w * rw), dtype=x.dtype)
        module.repeat(x, y, (math.prod(x.shape[:-2]), h, w), (rh, rw))
        return y
    split = [v for n, r in zip(x.shape, factors) for v in (n, r)]
    out = np.empty(split, dtype=x.dtype)
    for offsets in np.ndindex(*factors):
        place = tuple(v for o in offsets for v in (slice(None), o))
        out[place] = x
    return out.reshape([n * r for n, r in zip(x.shape, factors)])


_LinearTaps = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@lru_cache(maxsize=256)
def _linear_plan(
    in_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    scales: tuple[float, ...],
    coordinate_transformation_mode: str,
) -> tuple[tuple[int, ...], _LinearTaps | None, _LinearTaps | None, int] | None:
    """A linear Resize of the last two axes only, as `_resize.linear` takes it: the
    sizes, each resampled axis's taps ((i0, i1, w0, w1): int32 indices and the float32
    weights numpy's steps multiply by) and the flags saying which axes and taps the steps
    use; None when another axis changes (numpy's steps then run)."""
    rank = len(in_shape)
    for axis in range(rank - 2):
        if in_shape[axis] != out_shape[axis] or scales[axis] != 1.0:
            return None
    taps: list[_LinearTaps | None] = []
    flags = 0
    for k, axis in enumerate((rank - 2, rank - 1)):
        n_in, n_out, scale = in_shape[axis], out_shape[axis], scales[axis]
        if n_in < 1 or n_out < 1:
            return None
        if n_in == n_out and scale == 1.0:
            taps.append(None)  # numpy's steps leave this axis as it is
            continue
        coords = _original_coords(n_out, n_in, scale, coordinate_transformation_mode, (0.0, 1.0))
        index, weights = _taps(coords, n_in, scale, "linear", -0.75, False, False)
        if index.shape[1] != 2:
            return None
        used = [bool(np.any(weights[:, t])) for t in range(2)]  # (an all-zero tap: skipped)
        if not any(used):
            return None
        flags |= (1 | 2 * used[0] | 4 * used[1]) << (3 * k)
        taps.append(
            (
                np.ascontiguousarray(index[:, 0], dtype=np.int32),
                np.ascontiguousarray(index[:, 1], dtype=np.int32),
                np.ascontiguousarray(weights[:, 0], dtype=np.float32),
                np.ascontiguousarray(weights[:, 1], dtype=np.float32),
            )
        )
    planes = math.prod(in_shape[:-2])
    sizes = (planes, in_shape[-2], in_shape[-1], out_shape[-2], out_shape[-1])
    return sizes, taps[0], taps[1], flags


@lru_cache(maxsize=256)
def _nearest_repeat(
    shape: tuple[int, ...],
    scales: bytes,
    dtype: str,  # numpy's one-letter type code
    axes: tuple[int, ...] | None,
    coordinate_transformation_mode: str,
    nearest_mode: str,
) -> tuple[int, ...] | None:
    """The repeat factors of a nearest Resize by these scales (`_repeat_factors`), or
    None (not whole repeats, or scales the general steps must judge and report)."""
    rank = len(shape)
    values = np.frombuffer(scales, dtype=np.dtype(dtype))
    try:
        ax = [a % rank for a in axes] if axes else list(range(rank))
        if len(set(ax)) != len(ax):
            return None
        out, sc = _sizes_from(np.empty(shape, np.uint8), ax, values, None, "stretch")
    except (ExecutionError, ZeroDivisionError, ValueError):
        return None
    if any(n < 1 for n in out) or any(n < 1 for n in shape):
        return None
    return _repeat_factors(
        shape, tuple(out), tuple(sc), coordinate_transformation_mode, nearest_mode
    )


def _scaled_size(n: int, scale: float) -> int:
    """floor(n * scale) in float32, the scales' own precision (10 * 0.7f is exactly 7)."""
    return int(np.floor(np.float32(n) * np.float32(scale)))


def _sizes_from(
    x: np.ndarray,
    axes: list[int],
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    policy: str,
) -> tuple[list[int], list[float]]:
    rank = x.ndim
    out = list(x.shape)
    sc = [1.0] * rank
    if sizes is not None and np.size(sizes) > 0:
        req = [int(v) for v in np.asarray(sizes).reshape(-1)]
        if len(req) != len(axes):
            raise ExecutionError(f"Resize: sizes {req} do not match axes {axes}")
        if policy == "stretch":
            for a, n in zip(axes, req):
                out[a] = n
                sc[a] = n / x.shape[a]
        elif policy in ("not_larger", "not_smaller"):
            ratios = [n / x.shape[a] for a, n in zip(axes, req)]
            common = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                out[a] = int(np.floor(common * x.shape[a] + 0.5))
                sc[a] = common
        else:
            raise ExecutionError(f"Resize: unknown keep_aspect_ratio_policy '{policy}'")
        return out, sc
    if scales is None or np.size(scales) == 0:
        raise ExecutionError("Resize: one of scales and sizes must be given")
    vals = [float(v) for v in np.asarray(scales).reshape(-1)]
    if len(vals) != len(axes):
        raise ExecutionError(f"Resize: scales {vals} do not match axes {axes}")
    for a, s in zip(axes, vals):
        if s <= 0:
            raise ExecutionError(f"Resize: scales must be positive, got {vals}")
        sc[a] = s
        out[a] = _scaled_size(x.shape[a], s)
    return out, sc


@kernel("Resize", since=(11, 13, 18, 19), ctx=True)
def resize(
    ctx: KernelContext,
    x: np.ndarray,
    roi: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    *,
    antialias: int = 0,
    axes: list[int] | None = None,
    coordinate_transformation_mode: str = "half_pixel",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    keep_aspect_ratio_policy: str = "stretch",
    mode: str = "nearest",
    nearest_mode: str = "round_prefer_floor",
) -> np.ndarray:
    rank = x.ndim
    if (
        mode == "nearest"
        and type(x) is np.ndarray
        and (roi is None or roi.size == 0)
        and (sizes is None or sizes.size == 0)
        and type(scales) is np.ndarray
        and 0 < scales.size <= 8
        and coordinate_transformation_mode != "tf_crop_and_resize"
    ):
        # A model's fixed 2x upsampling, every run: its repeat factors looked up by its
        # geometry (the general steps below cost 20 us a call about a copy of a few).
        # The scales' dtype by its one-letter code: str(dtype) is numpy Python code that
        # took 5-7 us a call, as long as the 2x copy of 64 channels at 16 x 16.
        factors = _nearest_repeat(
            x.shape,
            scales.tobytes(),
            scales.dtype.char,
            tuple(axes) if axes else None,
            coordinate_transformation_mode,
            nearest_mode,
        )
        if factors is not None:
            return _repeat(x, factors)
    ax = [a % rank for a in axes] if axes else list(range(rank))
    out, sc = _sizes_from(x, ax, scales, sizes, keep_aspect_ratio_policy)
    full_roi: list[float] | None = None
    if roi is not None and np.size(roi) > 0:
        r = [float(v) for v in np.asarray(roi).reshape(-1)]
        full_roi = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(ax):
            full_roi[a] = r[i]
            full_roi[a + rank] = r[i + len(ax)]
    return resize_nd(
        x,
        out,
        sc,
        mode=mode,
        coordinate_transformation_mode=coordinate_transformation_mode,
        nearest_mode=nearest_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        extrapolation_value=extrapolation_value,
        antialias=antialias,
        roi=full_roi,
    )


@specializer(resize)
def _prepared_resize(
    attrs: dict[str, Any], known: tuple[Any, ...], n: int, ctx: KernelContext
) -> Any:
    """Unwatched runs: a nearest Resize by constant scales (no roi, no sizes), a UNet's
    fixed 2x upsampling, as `resize`'s own first case (`_nearest_repeat`'s factors, then
    `_repeat`'s copy: the same bytes), without the executor's generic kernel call around
    it (its context, attribute and output handling: about 20-30 us of a diffusion UNet's
    upsampling of 64 channels, a copy of a few).  Anything else calls the kernel."""
    ins = (*known, None, None, None)[:4]
    roi, scales, sizes = ins[1], ins[2], ins[3]
    mode = attrs.get("mode", "nearest")
    transform = attrs.get("coordinate_transformation_mode", "half_pixel")
    if (
        n != 1
        or mode != "nearest"
        or transform == "tf_crop_and_resize"
        or type(scales) is not np.ndarray
        or not 0 < scales.size <= 8
        or not (roi is None or (type(roi) is np.ndarray and roi.size == 0))
        or not (sizes is None or (type(sizes) is np.ndarray and sizes.size == 0))
    ):
        return None
    axes = attrs.get("axes")
    key = (
        scales.tobytes(), scales.dtype.char, tuple(axes) if axes else None, transform,
        attrs.get("nearest_mode", "round_prefer_floor"),
    )  # fmt: skip

    def call(x: Any, *rest: Any) -> Any:
        given = (*rest, None, None, None)[:3]
        if type(x) is np.ndarray and given[0] is roi and given[1] is scales and given[2] is sizes:
            factors = _nearest_repeat(x.shape, *key)
            if factors is not None:
                return _repeat(x, factors)
        return resize(ctx, x, *rest, **attrs)

    return call


def _legacy_upsample(x: np.ndarray, scales: Sequence[float], mode: str) -> np.ndarray:
    """Opset-10 Resize and Upsample: asymmetric coordinates, 'simple' nearest rounding."""
    if len(scales) != x.ndim:
        raise ExecutionError(f"Upsample/Resize: {len(scales)} scales for rank {x.ndim}")
    interp = {"nearest": "nearest", "linear": "linear", "bilinear": "linear"}.get(mode)
    if interp is None:
        raise ExecutionError(f"Upsample/Resize: unknown mode '{mode}'")
    out = [_scaled_size(n, s) for n, s in zip(x.shape, scales)]
    return resize_nd(
        x,
        out,
        scales,
        mode=interp,
        coordinate_transformation_mode="asymmetric",
        nearest_mode="simple",
    )


@kernel("Resize", since=10)
def resize_v10(x: np.ndarray, scales: np.ndarray, *, mode: str = "nearest") -> np.ndarray:
    return _legacy_upsample(x, [float(v) for v in np.asarray(scales).reshape(-1)], mode)


@kernel("Upsample", since=(9, 10))
def upsample_v9(x: np.ndarray, scales: np.ndarray, *, mode: str = "nearest") -> np.ndarray:
    return _legacy_upsample(x, [float(v) for v in np.asarray(scales).reshape(-1)], mode)


@kernel("Upsample", since=7)
def upsample_v7(
    x: np.ndarray, *, mode: str = "nearest", scales: list[float] | None = None
) -> np.ndarray:
    if not scales:
        raise ExecutionError("Upsample: the scales attribute is required")
    return _legacy_upsample(x, scales, mode)


@kernel("Upsample", since=1)
def upsample_v1(
    x: np.ndarray,
    *,
    height_scale: float = 1.0,
    width_scale: float = 1.0,
    mode: str = "nearest",
    **_unused: Any,
) -> np.ndarray:
    if x.ndim != 4:
        raise ExecutionError(f"Upsample-1 expects a 4-D NCHW input, got shape {x.shape}")
    return _legacy_upsample(x, [1.0, 1.0, height_scale, width_scale], mode)
