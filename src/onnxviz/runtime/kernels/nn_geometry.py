"""Shared geometry for the convolution and pooling kernels (no kernels registered here).

Padding resolution (explicit pads, auto_pad SAME_UPPER / SAME_LOWER / VALID, ceil_mode),
strided window views over padded inputs (the im2col source), and the float compute type
for dtypes numpy has no fast arithmetic for.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError

_SCRATCH = threading.local()
# Larger temporaries are not kept between calls (memory would stay pinned).
_SCRATCH_MAX_BYTES = 64 * 1024 * 1024


def scratch(name: str, shape: Sequence[int], dtype: Any, aligned: bool = False) -> np.ndarray:
    """A reusable per-thread temporary of ``shape`` (contents undefined), its data at a
    multiple of 64 bytes when ``aligned`` (one cache line per vector of a compiled
    kernel, as nn_conv.aligned_empty).  Big fresh numpy arrays are mmapped by malloc and
    page-faulted in on every call, which costs as much as the arithmetic for a conv;
    kernels use this for internal buffers that never escape (never for returned arrays).
    One buffer per name: a name must not be used twice in one live computation."""
    dt = np.dtype(dtype)
    size = math.prod(shape) * dt.itemsize
    if size > _SCRATCH_MAX_BYTES:
        raw = np.empty(size + 64, dtype=np.uint8)
        start = -raw.ctypes.data % 64 if aligned else 0
        return raw[start : start + size].view(dt).reshape(shape)
    pool: dict[str, tuple[np.ndarray, int]] | None = getattr(_SCRATCH, "pool", None)
    if pool is None:
        pool = _SCRATCH.pool = {}
    entry = pool.get(name)
    if entry is None or entry[0].size < size + 64:
        raw = np.empty(size + 64, dtype=np.uint8)
        # where its aligned data starts, found once (ndarray.ctypes costs about 1 us)
        entry = pool[name] = (raw, -raw.ctypes.data % 64)
    raw, start = entry
    if not aligned:
        start = 0
    return raw[start : start + size].view(dt).reshape(shape)


def compute_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """float32 for float16 and the ml_dtypes floats (BLAS has no half GEMM), else itself."""
    if dtype == np.float64 or dtype == np.float32:
        return dtype
    return np.dtype(np.float32)


def as_compute(x: np.ndarray) -> np.ndarray:
    target = compute_dtype(x.dtype)
    return x if x.dtype == target else x.astype(target)


def spatial_list(value: Sequence[int] | None, rank: int, default: int) -> list[int]:
    if value is None or len(value) == 0:
        return [default] * rank
    if len(value) != rank:
        raise ExecutionError(f"expected {rank} spatial values, got {list(value)}")
    return [int(v) for v in value]


def conv_pads(
    in_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    auto_pad: str,
    pads: Sequence[int] | None,
) -> list[int]:
    """Begin pads then end pads (ONNX order) for a conv/pool, as auto_pad dictates."""
    rank = len(in_shape)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(in_shape, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small = total // 2
            if auto_pad == "SAME_UPPER":
                begin.append(small)
                end.append(total - small)
            else:
                begin.append(total - small)
                end.append(small)
        return begin + end
    if auto_pad == "VALID":
        return [0] * (2 * rank)
    if auto_pad not in ("NOTSET", ""):
        raise ExecutionError(f"unknown auto_pad '{auto_pad}'")
    return spatial_list(pads, 2 * rank, 0)


def pool_output_shape(
    in_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    ceil_mode: bool,
) -> list[int]:
    """Output spatial shape; with ceil_mode a window starting in the end padding is dropped."""
    rank = len(in_shape)
    out = []
    for i in range(rank):
        span = (kernel[i] - 1) * dilations[i] + 1
        numer = in_shape[i] + pads[i] + pads[i + rank] - span
        if ceil_mode:
            n = -(-numer // strides[i]) + 1
            if (n - 1) * strides[i] >= in_shape[i] + pads[i]:
                n -= 1
        else:
            n = numer // strides[i] + 1
        out.append(max(int(n), 0))
    return out


def pad_spatial(
    x: np.ndarray,
    begin: Sequence[int],
    end: Sequence[int],
    value: float = 0.0,
) -> np.ndarray:
    """Pad the trailing spatial axes; negative pads crop.  Returns x itself when all zero."""
    rank = len(begin)
    if not any(begin) and not any(end):
        return x
    crop = tuple(
        slice(max(-b, 0), x.shape[x.ndim - rank + i] - max(-e, 0))
        for i, (b, e) in enumerate(zip(begin, end))
    )
    index: tuple[Any, ...] = (Ellipsis, *crop)
    x = x[index]
    widths = [(0, 0)] * (x.ndim - rank) + [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    if any(w != (0, 0) for w in widths):
        # Interior copy plus border slabs only (np.pad walks more Python machinery and
        # np.full + copy writes every element twice).
        out = np.empty([s + b + e for s, (b, e) in zip(x.shape, widths)], dtype=x.dtype)
        inner = tuple(slice(b, b + s) for s, (b, _) in zip(x.shape, widths))
        out[inner] = x
        for axis in range(x.ndim - rank, x.ndim):
            b, e = widths[axis]
            lead: tuple[Any, ...] = (slice(None),) * axis
            if b:
                out[(*lead, slice(0, b))] = value
            if e:
                out[(*lead, slice(out.shape[axis] - e, None))] = value
        x = out
    return x


def window_view(
    xp: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_shape: Sequence[int],
    *,
    kernel_first: bool = True,
) -> np.ndarray:
    """Read-only strided view of shape (*lead, *kernel, *out) (or (*lead, *out, *kernel))
    over the padded input ``xp`` whose trailing len(kernel) axes are spatial."""
    rank = len(kernel)
    lead_shape = xp.shape[: xp.ndim - rank]
    lead_strides = xp.strides[: xp.ndim - rank]
    sp = xp.strides[xp.ndim - rank :]
    k_strides = tuple(s * d for s, d in zip(sp, dilations))
    o_strides = tuple(s * st for s, st in zip(sp, strides))
    if kernel_first:
        shape = (*lead_shape, *kernel, *out_shape)
        strides_all = (*lead_strides, *k_strides, *o_strides)
    else:
        shape = (*lead_shape, *out_shape, *kernel)
        strides_all = (*lead_strides, *o_strides, *k_strides)
    return np.lib.stride_tricks.as_strided(xp, shape, strides_all, writeable=False)


def offset_slices(
    offset: Sequence[int], strides: Sequence[int], out_shape: Sequence[int]
) -> tuple[slice, ...]:
    """Spatial slices selecting, for one kernel offset, the input element of every window."""
    return tuple(slice(o, o + (n - 1) * s + 1, s) for o, s, n in zip(offset, strides, out_shape))
