"""Pooling: MaxPool (with Indices), AveragePool, LpPool, the Global pools, MaxUnpool.

Each windowed pool walks the kernel offsets (a handful of iterations), combining one
strided slice of the padded input per offset with a vectorised max/add over the whole
tensor; no per-window or per-element Python loop.  Float32 2-D MaxPool (without Indices)
and AveragePool run the compiled kernel native/_pool.c instead (one pass, no scratch),
in both run modes; every other case, and ONNXVIZ_NATIVE=off, runs the numpy path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import product
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.kernels.dense import dense
from onnxviz.runtime.kernels.nn_conv_nhwc import is_channels_last
from onnxviz.runtime.kernels.nn_geometry import (
    compute_dtype,
    conv_pads,
    offset_slices,
    pad_spatial,
    pool_output_shape,
    scratch,
    spatial_list,
)
from onnxviz.runtime.registry import KernelContext, kernel, specializer


class _Geometry:
    """Resolved window geometry of one pooling call."""

    def __init__(
        self,
        x: np.ndarray,
        kernel_shape: Sequence[int] | None,
        strides: Sequence[int] | None,
        dilations: Sequence[int] | None,
        pads: Sequence[int] | None,
        auto_pad: str,
        ceil_mode: int,
    ) -> None:
        rank = x.ndim - 2
        if rank < 1 or not kernel_shape or len(kernel_shape) != rank:
            raise ExecutionError(f"pool kernel_shape {kernel_shape} does not fit input {x.shape}")
        self.rank = rank
        self.kernel = [int(k) for k in kernel_shape]
        self.strides = spatial_list(strides, rank, 1)
        self.dilations = spatial_list(dilations, rank, 1)
        self.in_shape = list(x.shape[2:])
        self.pads = conv_pads(
            self.in_shape, self.kernel, self.strides, self.dilations, auto_pad, pads
        )
        if auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID") and ceil_mode:
            # Deprecated auto_pad with ceil_mode: output = ceil(in / s) or ceil((in - span + 1) / s).
            out = []
            for i in range(rank):
                span = (self.kernel[i] - 1) * self.dilations[i] + 1
                size = self.in_shape[i] - (span - 1 if auto_pad == "VALID" else 0)
                out.append(-(-size // self.strides[i]))
            self.out = out
        else:
            self.out = pool_output_shape(
                self.in_shape, self.kernel, self.strides, self.dilations, self.pads, bool(ceil_mode)
            )
        # Extra end padding so every window of the output fits (ceil_mode overhang).
        self.extra = []
        for i in range(rank):
            span = (self.kernel[i] - 1) * self.dilations[i] + 1
            need = (self.out[i] - 1) * self.strides[i] + span
            have = self.in_shape[i] + self.pads[i] + self.pads[i + rank]
            self.extra.append(max(need - have, 0))

    def padded(self, x: np.ndarray, value: float) -> np.ndarray:
        rank = self.rank
        end = [self.pads[rank + i] + self.extra[i] for i in range(rank)]
        return pad_spatial(x, self.pads[:rank], end, value)

    def separable(self, xp: np.ndarray, combine: Any) -> np.ndarray:
        """Reduce the windows one spatial axis at a time (max and sum are separable):
        sum(kernel) passes over shrinking arrays instead of prod(kernel) passes."""
        if all(s == 1 for s in self.strides) and xp.flags.c_contiguous:
            return self._separable_flat(xp, combine)
        y = xp
        lead = xp.ndim - self.rank
        for a in reversed(range(self.rank)):
            d, st, n = self.dilations[a], self.strides[a], self.out[a]
            acc: np.ndarray | None = None
            for k in range(self.kernel[a]):
                index: list[Any] = [slice(None)] * y.ndim
                index[lead + a] = slice(k * d, k * d + (n - 1) * st + 1, st)
                part = y[tuple(index)]
                if acc is None:
                    acc = np.array(part)
                else:
                    combine(acc, part, out=acc)
            assert acc is not None
            y = acc
        return y

    def _separable_flat(self, xp: np.ndarray, combine: Any) -> np.ndarray:
        """Stride-1 windows on the flattened padded tensor: along an axis with element
        step ``step`` the window sum/max at flat index i combines i, i + d*step, ...;
        every pass is one long contiguous 1-D ufunc call (no 4-D strided iteration) in
        reused scratch buffers.  Positions whose window wraps past a row end are garbage
        and cropped at the end into a fresh array."""
        flat = xp.reshape(-1)
        total = flat.size
        lead = xp.ndim - self.rank
        buffers = [scratch("pool_a", (total,), xp.dtype), scratch("pool_b", (total,), xp.dtype)]
        src, length = flat, total
        for a in reversed(range(self.rank)):
            step = math.prod(xp.shape[lead + a + 1 :]) * self.dilations[a]
            k = self.kernel[a]
            if k == 1:
                continue
            length -= (k - 1) * step
            dst = buffers[0] if src is not buffers[0] else buffers[1]
            out = dst[:length]
            combine(src[:length], src[step : step + length], out=out)
            for j in range(2, k):
                combine(out, src[j * step : j * step + length], out=out)
            src = dst
        full = np.empty(total, dtype=xp.dtype) if src is flat else src
        if src is flat:
            full[:] = flat
        grid = full.reshape(xp.shape)
        index: tuple[Any, ...] = (Ellipsis, *(slice(0, o) for o in self.out))
        return np.array(grid[index])  # fresh: the buffers are reused scratch

    def separable_unpadded(self, x: np.ndarray, combine: Any, identity: float) -> np.ndarray:
        """Like `separable` but straight from the unpadded input: each kernel offset
        combines only the output positions whose input lies inside the tensor, so the
        padded copy is never made (pads act as ``identity``).  Outer axes go first: their
        strided reads keep contiguous inner rows and shrink the array before the
        innermost axis, whose reads are element-strided (slow ufunc loops)."""
        y = x
        lead = x.ndim - self.rank
        for a in range(self.rank):
            d, st, n = self.dilations[a], self.strides[a], self.out[a]
            size, begin = y.shape[lead + a], self.pads[a]
            shape = list(y.shape)
            shape[lead + a] = n
            parts: list[tuple[Any, Any]] = []  # (destination slice, source slice)
            full: list[Any] = []  # sources that cover every output position
            for k in range(self.kernel[a]):
                first = k * d - begin  # input index read by output 0
                lo = 0 if first >= 0 else (-first + st - 1) // st
                room = size - 1 - first  # output o reads first + o * st <= size - 1
                hi = min(n, room // st + 1) if room >= 0 else 0
                if lo >= hi:
                    continue
                src: list[Any] = [slice(None)] * y.ndim
                start = first + lo * st
                src[lead + a] = slice(start, start + (hi - lo - 1) * st + 1, st)
                if lo == 0 and hi == n:
                    full.append(y[tuple(src)])
                else:
                    dst: list[Any] = [slice(None)] * y.ndim
                    dst[lead + a] = slice(lo, hi)
                    parts.append((tuple(dst), y[tuple(src)]))
            if len(full) >= 2:
                # Two full-coverage offsets make the accumulator: no identity fill pass.
                acc = combine(full[0], full[1])
                rest = full[2:]
            else:
                acc = np.full(shape, identity, dtype=y.dtype)
                rest = full
            for part in rest:
                combine(acc, part, out=acc)
            for dst_index, part in parts:
                target = acc[dst_index]
                combine(target, part, out=target)
            y = acc
        return y

    def reduce(self, x: np.ndarray, combine: Any, identity: float) -> np.ndarray:
        """Windowed max/sum: strided pools skip the padded copy (their reads are strided
        anyway); "same" stride-1 pools (output the input's size: Inception's 3x3/1 pad-1
        branches) run on the flat input with its edges fixed up; other stride-1 pools
        read long runs from one padded copy."""
        if any(s > 1 for s in self.strides):
            return self.separable_unpadded(x, combine, identity)
        if self.same() and x.flags.c_contiguous and x.size:
            return self.same_flat(x, combine)
        return self.separable(self.padded(x, identity), combine)

    def same(self) -> bool:
        """Stride 1, no dilation, and pads that keep every axis at its size (each window
        centred or, for even kernels, shifted by the SAME_* rule)."""
        rank = self.rank
        return all(
            self.strides[a] == 1
            and self.dilations[a] == 1
            and self.extra[a] == 0
            and min(self.pads[a], self.pads[a + rank]) >= 0
            and self.pads[a] + self.pads[a + rank] == self.kernel[a] - 1
            for a in range(rank)
        )

    def same_flat(self, x: np.ndarray, combine: Any) -> np.ndarray:
        """`reduce` for a `same` geometry without a padded copy: along each axis (element
        step ``step`` in the flat tensor), output i combines input i + j*step for the
        window's offsets j, as long contiguous 1-D ufunc calls over the flat tensor.
        Those are right away from the axis' ends; the few positions within a window of
        an end (which picked up the neighbouring row or plane) are then recomputed from
        their clipped window, one reduce per such position.  Two fewer passes than the
        padded copy and its crop, and no padded array: 18-28% faster on Inception's
        3x3/1 pools (28x28 and 14x14, 192-576 channels)."""
        rank = self.rank
        lead = x.ndim - rank
        total = x.size
        src = x.reshape(-1)
        names = ("pool_a", "pool_b")
        axes = [a for a in reversed(range(rank)) if self.kernel[a] > 1]
        if not axes:
            return np.array(x)
        for turn, a in enumerate(axes):
            last = turn == len(axes) - 1
            # The result is fresh; the passes before it go through reused scratch.
            dst = np.empty(total, x.dtype) if last else scratch(names[turn % 2], (total,), x.dtype)
            step = math.prod(x.shape[lead + a + 1 :])
            begin, size = self.pads[a], x.shape[lead + a]
            shifts = [j * step for j in range(-begin, self.kernel[a] - begin)]
            lo = max(0, -shifts[0])  # the range every offset reaches
            hi = total - max(0, shifts[-1])
            if lo < hi:
                combine(src[lo + shifts[0] : hi + shifts[0]], src[lo + shifts[1] : hi + shifts[1]],
                        out=dst[lo:hi])  # fmt: skip
                for shift in shifts[2:]:
                    combine(dst[lo:hi], src[lo + shift : hi + shift], out=dst[lo:hi])
            # Positions within a window of either end of the axis: their clipped windows.
            # (Every position outside [lo, hi) is one of these.)
            grid_src = src.reshape(x.shape)
            grid_dst = dst.reshape(x.shape)
            edges = set(range(min(begin, size))) | set(
                range(max(0, size - (self.kernel[a] - 1 - begin)), size)
            )
            for e in sorted(edges):
                into: list[Any] = [slice(None)] * x.ndim
                into[lead + a] = e
                target = grid_dst[tuple(into)]
                first = max(0, e - begin)
                for index in range(first, min(size, e - begin + self.kernel[a])):
                    # One strided ufunc call per window element (a reduce over the
                    # short axis ran numpy's reduction loop per row: 4x slower).
                    into[lead + a] = index
                    part = grid_src[tuple(into)]
                    if index == first:
                        target[...] = part
                    else:
                        combine(target, part, out=target)
            src = dst
        return src.reshape(x.shape)

    def offsets(self) -> list[tuple[int, ...]]:
        return list(product(*(range(k) for k in self.kernel)))

    def window(self, xp: np.ndarray, offset: Sequence[int]) -> np.ndarray:
        start = [o * d for o, d in zip(offset, self.dilations)]
        index: tuple[Any, ...] = (Ellipsis, *offset_slices(start, self.strides, self.out))
        return xp[index]


def _geometry(
    x: np.ndarray,
    kernel_shape: Sequence[int] | None,
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str,
    ceil_mode: int,
) -> _Geometry:
    """The `_Geometry` of a call, made once per input shape and attributes (nothing
    changes it once made): a small pool's geometry was over half of its 35 us."""
    key = (
        x.shape,
        None if kernel_shape is None else tuple(kernel_shape),
        None if strides is None else tuple(strides),
        None if dilations is None else tuple(dilations),
        None if pads is None else tuple(pads),
        auto_pad,
        ceil_mode,
    )
    geo = _GEOMETRIES.get(key)
    if geo is None:
        geo = _Geometry(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
        if len(_GEOMETRIES) >= 512:
            _GEOMETRIES.clear()
        _GEOMETRIES[key] = geo
    return geo


_GEOMETRIES: dict[tuple[Any, ...], _Geometry] = {}


def native_pool2d(
    x: np.ndarray, geo: _Geometry, average: bool, include_pad: bool
) -> np.ndarray | None:
    """The pool of float32 NCHW ``x`` by the compiled kernel (native/_pool.c), or None
    when it does not apply (another dtype or rank, dilation, negative pads, an empty
    tensor) or is off/not built: the caller then runs the numpy path."""
    if x.dtype != np.float32 or x.ndim != 4 or geo.rank != 2 or x.size == 0:
        return None
    if any(d != 1 for d in geo.dilations) or any(p < 0 for p in geo.pads):
        return None
    if min(geo.out) < 1:
        return None
    module = native.load("pool")
    if module is None:
        return None
    n, c, h, w = x.shape
    oh, ow = geo.out
    kh, kw = geo.kernel
    sh, sw = geo.strides
    pt, pl, pb, pr = geo.pads
    if is_channels_last(x):
        # A channels-last value (an unwatched run's conv chain, fusion_layout) pools
        # channels-last and stays so: no transposing copy either way.
        yl = np.empty((n, oh, ow, c), dtype=np.float32)
        module.pool2d_nhwc(x.transpose(0, 2, 3, 1), yl, n, h, w, c, oh, ow, kh, kw, sh, sw,
                           pt, pl, pb, pr, int(average), int(include_pad))  # fmt: skip
        return yl.transpose(0, 3, 1, 2)
    if h * w <= _SMALL_PLANE and c >= 16:
        # Small planes of many channels (a YOLO's SPPF: 5x5 max pools over 64 channels of
        # 10 x 10; ShuffleNet's 3x3 stride-2 average pools over 272 channels of 14 x 14
        # and 544 of 7 x 7): per plane, the NCHW kernel's edge rows and columns were most
        # of the work (31 us a max pool; the average pools 106 and 100 us, onnxruntime
        # 19 and 9); channels-last, 16 channels a vector, with a transposing copy each
        # way, 15.  A max is exact, so the same values either way; an average sums its
        # taps in row-major order there (the NCHW kernel: its rows' column sums, then
        # those), as it does for every channels-last value, within float32 rounding.
        xl = dense(x.transpose(0, 2, 3, 1))
        yl = np.empty((n, oh, ow, c), dtype=np.float32)
        module.pool2d_nhwc(xl, yl, n, h, w, c, oh, ow, kh, kw, sh, sw,
                           pt, pl, pb, pr, int(average), int(include_pad))  # fmt: skip
        return dense(yl.transpose(0, 3, 1, 2))
    y = np.empty((n, c, oh, ow), dtype=np.float32)
    module.pool2d(np.ascontiguousarray(x), y, n * c, h, w, oh, ow, kh, kw, sh, sw,
                  pt, pl, pb, pr, int(average), int(include_pad))  # fmt: skip
    return y


# Planes of at most this many values (a max pool of 16 or more channels) pool
# channels-last (native_pool2d).
_SMALL_PLANE = 400


def _lowest(dtype: np.dtype[Any]) -> float:
    if dtype.kind in "iu":
        return float(np.iinfo(dtype).min)
    return -np.inf


def _max_pool(
    x: np.ndarray, geo: _Geometry, want_indices: bool, storage_order: int
) -> tuple[np.ndarray, np.ndarray | None]:
    xc = x if x.dtype.kind in "iu" else x.astype(compute_dtype(x.dtype), copy=False)
    if not want_indices:
        got = native_pool2d(x, geo, average=False, include_pad=False)
        if got is not None:
            return got, None
        best = geo.reduce(xc, np.maximum, _lowest(xc.dtype))
        return np.ascontiguousarray(best).astype(x.dtype, copy=False), None
    xp = geo.padded(xc, _lowest(xc.dtype))
    offsets = geo.offsets()
    best = geo.separable(xp, np.maximum)
    # Argmax = the first kernel offset whose value equals the max: walk the offsets
    # backwards, overwriting on equality, with uint8/uint16 arithmetic (no masked copies).
    arg = np.zeros(best.shape, dtype=np.min_scalar_type(len(offsets)))
    for k_index in reversed(range(len(offsets))):
        hit = np.equal(geo.window(xp, offsets[k_index]), best).view(np.uint8).astype(arg.dtype)
        arg *= 1 - hit
        if k_index:
            hit *= arg.dtype.type(k_index)
            arg += hit
    # The flat input index is linear in the window origin and the kernel offset:
    # index = (n*C + c) * size + origin_offset(out position) + offset_shift[arg].
    n, c = x.shape[:2]
    rank = geo.rank
    spatial = geo.in_shape
    if storage_order == 0:
        axis_stride = [math.prod(spatial[a + 1 :]) for a in range(rank)]
    else:
        axis_stride = [math.prod(spatial[:a]) for a in range(rank)]
    table = np.array(offsets, dtype=np.int64).reshape(len(offsets), rank)
    shift = table @ np.array([d * st for d, st in zip(geo.dilations, axis_stride)], np.int64)
    origin = np.zeros(geo.out, dtype=np.int64)
    for a in range(rank):
        o = np.arange(geo.out[a], dtype=np.int64) * geo.strides[a] - geo.pads[a]
        origin = origin + (o * axis_stride[a]).reshape(
            tuple(-1 if b == a else 1 for b in range(rank))
        )
    plane = (np.arange(n * c, dtype=np.int64) * math.prod(spatial)).reshape((n, c) + (1,) * rank)
    index = np.take(shift, arg)
    index += origin
    index += plane
    return np.ascontiguousarray(best).astype(x.dtype, copy=False), index


@kernel("MaxPool", since=(1, 8, 10, 11, 12, 22), ctx=True)
def max_pool(
    ctx: KernelContext,
    x: np.ndarray,
    *,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: list[int] | None = None,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    storage_order: int = 0,
    strides: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    geo = _geometry(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return _max_pool(x, geo, ctx.wants_output(1), storage_order)


_COUNTS_CACHE: dict[tuple[Any, ...], np.ndarray] = {}


def _cached_counts(geo: _Geometry, include_pad: bool, dtype: np.dtype[Any]) -> np.ndarray:
    """_pool_counts in ``dtype``, memoised per geometry (a model calls the same pool
    geometry on every run; the counts never change)."""
    key = (
        tuple(geo.in_shape),
        tuple(geo.kernel),
        tuple(geo.strides),
        tuple(geo.dilations),
        tuple(geo.pads),
        tuple(geo.out),
        include_pad,
        dtype.str,
    )
    counts = _COUNTS_CACHE.get(key)
    if counts is None:
        if len(_COUNTS_CACHE) > 256:
            _COUNTS_CACHE.clear()
        counts = _pool_counts(geo, include_pad).astype(dtype)
        counts.setflags(write=False)
        _COUNTS_CACHE[key] = counts
    return counts


def _pool_counts(geo: _Geometry, include_pad: bool) -> np.ndarray:
    """How many elements each window averages: input cells, plus explicit pad cells when
    count_include_pad (the ceil_mode overhang never counts)."""
    rank = geo.rank
    ones = np.ones(geo.in_shape, dtype=np.float64)
    if include_pad:
        ones = pad_spatial(ones, geo.pads[:rank], geo.pads[rank:], 1.0)
        ones = pad_spatial(ones, [0] * rank, geo.extra, 0.0)
    else:
        ones = geo.padded(ones, 0.0)
    return geo.separable(ones, np.add)


@kernel("AveragePool", since=(1, 7, 10, 11, 19, 22))
def average_pool(
    x: np.ndarray,
    *,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    count_include_pad: int = 0,
    dilations: list[int] | None = None,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    geo = _geometry(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    got = native_pool2d(x, geo, average=True, include_pad=bool(count_include_pad))
    if got is not None:
        return got
    xc = x.astype(compute_dtype(x.dtype), copy=False)
    total = geo.reduce(xc, np.add, 0.0)
    counts = _cached_counts(geo, bool(count_include_pad), total.dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        if np.all(counts == counts.flat[0]):
            # Every window full: one scale.  total is a fresh array of ours.
            total *= total.dtype.type(1.0 / float(counts.flat[0]))
        else:
            total /= counts
    return total.astype(x.dtype, copy=False)


def fixed_window(
    attrs: dict[str, Any],
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int, int, int]] | None:
    """A 2-D pool's ((kh, kw), (sh, sw), (top, left, bottom, right) pads) when the
    compiled channels-last pool runs it as it is: explicit (or VALID) pads, floor
    rounding, no dilation; else None."""
    kernel_shape = attrs.get("kernel_shape")
    if kernel_shape is None or len(kernel_shape) != 2:
        return None
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "VALID") or attrs.get("ceil_mode", 0):
        return None
    if any(d != 1 for d in attrs.get("dilations") or (1, 1)):
        return None
    strides = tuple(int(v) for v in attrs.get("strides") or (1, 1))
    pads = (0, 0, 0, 0) if auto_pad == "VALID" else tuple(attrs.get("pads") or (0, 0, 0, 0))
    if len(strides) != 2 or len(pads) != 4 or min(pads) < 0 or min(strides) < 1:
        return None
    kh, kw = (int(v) for v in kernel_shape)
    top, left, bottom, right = (int(v) for v in pads)
    return (kh, kw), (strides[0], strides[1]), (top, left, bottom, right)


def held_pool(attrs: dict[str, Any], average: bool, fallback: Any) -> Any:
    """The specialized call (registry.specializer) of a one-output MaxPool or an
    AveragePool over two spatial axes with a `fixed_window`: native/_pool.c's `held`,
    which pools a float32 channels-last image of any size in C from the node loop (the
    same kernel as `native_pool2d`, so its values) and hands every other call to
    ``fallback(x)``, the op's kernel.  None where it does not apply or the kernels are
    off."""
    module = native.load("pool")
    window = fixed_window(attrs)
    if module is None or window is None:
        return None
    include_pad = int(bool(attrs.get("count_include_pad", 0))) if average else 0
    return module.held(*window, int(average), include_pad, fallback, *native.held_arrays())


def spatial_mean(x: np.ndarray) -> np.ndarray | None:
    """The mean over (H, W) of a float32 channels-last (N, C, H, W) ``x``, as an (N, C, 1,
    1) array, by the compiled pool with the whole image as its window (`pool2d_nhwc`: the
    taps summed in row-major order, then one division); None when the kernels are off.
    The held call `held_spatial_mean` makes is this kernel too, so the same values."""
    module = native.load("pool")
    if module is None:
        return None
    n, c, h, w = x.shape
    y = np.empty((n, 1, 1, c), dtype=np.float32)
    module.pool2d_nhwc(x.transpose(0, 2, 3, 1), y, n, h, w, c, 1, 1, h, w, 1, 1,
                       0, 0, 0, 0, 1, 0)  # fmt: skip
    return y.transpose(0, 3, 1, 2)


def held_spatial_mean(fallback: Any) -> Any:
    """`spatial_mean` in C from the node loop (native/_pool.c's `held` with a whole-image
    window) for a float32 channels-last image of any size; any other call goes to
    ``fallback``.  None when the kernels are off."""
    module = native.load("pool")
    if module is None:
        return None
    return module.held((0, 0), (1, 1), (0, 0, 0, 0), 1, 0, fallback, *native.held_arrays())


@specializer(max_pool)
def _held_max_pool(
    attrs: dict[str, Any], known: tuple[Any, ...], n_outputs: int, ctx: KernelContext
) -> Any:
    if n_outputs != 1:  # the Indices output: the kernel's
        return None

    def kernel_call(x: Any) -> Any:
        return max_pool(ctx, x, **attrs)[0]

    return held_pool(attrs, False, kernel_call)


@specializer(average_pool)
def _held_average_pool(attrs: dict[str, Any], known: tuple[Any, ...], n_outputs: int) -> Any:
    def kernel_call(x: Any) -> Any:
        return average_pool(x, **attrs)

    return held_pool(attrs, True, kernel_call)


@kernel("LpPool", since=(1, 2, 11, 18, 22))
def lp_pool(
    x: np.ndarray,
    *,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: list[int] | None = None,
    kernel_shape: list[int] | None = None,
    p: float = 2,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    geo = _geometry(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    xc = np.abs(x.astype(compute_dtype(x.dtype)))
    powered = xc**p if p != 2 else xc * xc
    total = geo.reduce(powered, np.add, 0.0)
    return (total ** (1.0 / p)).astype(x.dtype, copy=False)


def _spatial_axes(x: np.ndarray) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


@kernel("GlobalAveragePool", since=(1, 22))
def global_average_pool(x: np.ndarray) -> np.ndarray:
    xc = x.astype(compute_dtype(x.dtype), copy=False)
    return np.mean(xc, axis=_spatial_axes(x), keepdims=True).astype(x.dtype, copy=False)


@kernel("GlobalMaxPool", since=(1, 22))
def global_max_pool(x: np.ndarray) -> np.ndarray:
    return np.max(x, axis=_spatial_axes(x), keepdims=True)


@kernel("GlobalLpPool", since=(1, 2, 22))
def global_lp_pool(x: np.ndarray, *, p: float = 2) -> np.ndarray:
    xc = np.abs(x.astype(compute_dtype(x.dtype)))
    total = np.sum(xc**p, axis=_spatial_axes(x), keepdims=True)
    return (total ** (1.0 / p)).astype(x.dtype, copy=False)


@kernel("MaxUnpool", since=(9, 11, 22))
def max_unpool(
    x: np.ndarray,
    indices: np.ndarray,
    output_shape: np.ndarray | None = None,
    *,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    rank = x.ndim - 2
    ks = spatial_list(kernel_shape, rank, 1)
    st = spatial_list(strides, rank, 1)
    pd = spatial_list(pads, 2 * rank, 0)
    spatial = [(x.shape[2 + i] - 1) * st[i] + ks[i] - pd[i] - pd[i + rank] for i in range(rank)]
    default = [x.shape[0], x.shape[1], *spatial]
    flat = np.asarray(indices, dtype=np.int64).reshape(-1)
    shape = default
    if output_shape is not None:
        shape = [int(v) for v in np.asarray(output_shape).reshape(-1)]
        if shape != default and flat.size:
            # Indices address the unpooled tensor of the default shape: re-address them.
            flat = np.ravel_multi_index(np.unravel_index(flat, default), shape)
    y = np.zeros(math.prod(shape), dtype=x.dtype)
    if flat.size and (flat.min() < 0 or flat.max() >= y.size):
        raise ExecutionError(f"MaxUnpool index out of range for output shape {shape}")
    y[flat] = x.reshape(-1)
    return y.reshape(shape)
