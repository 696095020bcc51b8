"""Numbers and pictures of a tensor for the inspector (numpy only, no Qt): summary
statistics, histogram, a 2-D slice, a colour map, a channel grid, table pages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# A perceptual blue -> green -> yellow ramp (viridis key colours), interpolated.
_KEYS = np.array(
    [
        [68, 1, 84],
        [59, 82, 139],
        [33, 145, 140],
        [94, 201, 98],
        [253, 231, 37],
    ],
    dtype=np.float64,
)
LUT = np.stack(
    [
        np.interp(np.linspace(0, 1, 256), np.linspace(0, 1, len(_KEYS)), _KEYS[:, c])
        for c in range(3)
    ],
    axis=1,
).astype(np.uint8)


@dataclass
class Summary:
    dtype: str
    shape: tuple[int, ...]
    size: int
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    nan: int = 0
    inf: int = 0
    zeros: int = 0
    numeric: bool = True


def as_float(arr: np.ndarray) -> np.ndarray | None:
    """A float64 view for statistics (bool and integers included), None for strings."""
    if arr.dtype.kind in "biuf":
        return arr.astype(np.float64, copy=False)
    if arr.dtype.kind == "c":
        return np.abs(arr).astype(np.float64)
    try:  # ml_dtypes floats (bfloat16, float8 ...) convert
        return arr.astype(np.float64)
    except (TypeError, ValueError):
        return None


def summarize(arr: np.ndarray) -> Summary:
    dtype = "string" if arr.dtype == object else str(arr.dtype)
    out = Summary(dtype, tuple(arr.shape), int(arr.size))
    f = as_float(arr)
    if f is None:
        out.numeric = False
        return out
    out.nan = int(np.isnan(f).sum())
    out.inf = int(np.isinf(f).sum())
    out.zeros = int((f == 0).sum())
    finite = f[np.isfinite(f)]
    if finite.size:
        out.min = float(finite.min())
        out.max = float(finite.max())
        out.mean = float(finite.mean())
        out.std = float(finite.std())
    return out


def histogram(arr: np.ndarray, bins: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Counts and bin edges over the finite values (empty arrays when there are none)."""
    f = as_float(arr)
    if f is None:
        return np.zeros(0, np.int64), np.zeros(0)
    finite = f[np.isfinite(f)]
    if not finite.size:
        return np.zeros(0, np.int64), np.zeros(0)
    lo, hi = float(finite.min()), float(finite.max())
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    counts, edges = np.histogram(finite, bins=bins, range=(lo, hi))
    return counts, edges


def slice_2d(arr: np.ndarray, row_axis: int, col_axis: int, index: dict[int, int]) -> np.ndarray:
    """The 2-D plane through ``arr`` along two axes, the other axes fixed at ``index``
    (0 when not given).  0-D and 1-D arrays come back as one row."""
    if arr.ndim == 0:
        return arr.reshape(1, 1)
    if arr.ndim == 1:
        return arr.reshape(1, -1)
    sel: list[Any] = []
    for ax in range(arr.ndim):
        if ax in (row_axis, col_axis):
            sel.append(slice(None))
        else:
            sel.append(int(np.clip(index.get(ax, 0), 0, arr.shape[ax] - 1)))
    plane = arr[tuple(sel)]
    return plane.T if row_axis > col_axis else plane


def colorize(plane: np.ndarray, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """An ``H x W x 3`` uint8 image of a 2-D array (NaN grey, +Inf white, -Inf black)."""
    f = as_float(plane)
    if f is None:
        return np.full((*plane.shape, 3), 128, np.uint8)
    finite = np.isfinite(f)
    if lo is None or hi is None:
        vals = f[finite]
        lo = float(vals.min()) if vals.size else 0.0
        hi = float(vals.max()) if vals.size else 1.0
    span = hi - lo if hi > lo else 1.0
    idx = np.clip(np.nan_to_num((f - lo) / span * 255, nan=0.0), 0, 255).astype(np.uint8)
    img = LUT[idx]
    img[np.isnan(f)] = (160, 160, 160)
    img[np.isposinf(f)] = (255, 255, 255)
    img[np.isneginf(f)] = (0, 0, 0)
    return np.ascontiguousarray(img)


def channel_grid(
    arr: np.ndarray, batch: int = 0, max_channels: int = 64, gap: int = 1
) -> tuple[np.ndarray, int, int]:
    """NCHW (or CHW) feature maps tiled in a near-square grid, each channel scaled to
    its own range: an ``H x W x 3`` image, the column count and the channels shown."""
    maps = arr[min(batch, arr.shape[0] - 1)] if arr.ndim == 4 else arr
    if maps.ndim != 3:
        raise ValueError("a channel grid needs a 3-D or 4-D tensor")
    f = as_float(maps)
    if f is None:
        raise ValueError("a channel grid needs numbers")
    c = min(maps.shape[0], max_channels)
    h, w = maps.shape[1], maps.shape[2]
    cols = int(np.ceil(np.sqrt(c)))
    rows = int(np.ceil(c / cols))
    f = np.where(np.isfinite(f[:c]), f[:c], np.nan)
    lo = np.nanmin(f.reshape(c, -1), axis=1, initial=np.inf, where=~np.isnan(f.reshape(c, -1)))
    hi = np.nanmax(f.reshape(c, -1), axis=1, initial=-np.inf, where=~np.isnan(f.reshape(c, -1)))
    lo = np.where(np.isfinite(lo), lo, 0.0)[:, None, None]
    span = np.where(hi > lo[:, 0, 0], hi - lo[:, 0, 0], 1.0)[:, None, None]
    norm = np.clip(np.nan_to_num((f - lo) / span, nan=0.0), 0, 1)
    mosaic = np.full((rows * (h + gap) - gap, cols * (w + gap) - gap), np.nan)
    padded = np.full((rows * cols, h, w), np.nan)
    padded[:c] = norm
    tiles = padded.reshape(rows, cols, h, w)
    body = np.full((rows, cols, h + gap, w + gap), np.nan)
    body[:, :, :h, :w] = tiles
    mosaic = body.transpose(0, 2, 1, 3).reshape(rows * (h + gap), cols * (w + gap))
    mosaic = mosaic[: rows * (h + gap) - gap, : cols * (w + gap) - gap]
    img = colorize(mosaic, 0.0, 1.0)
    img[np.isnan(mosaic)] = (255, 255, 255)
    return img, cols, c


def table_page(arr: np.ndarray, page: int, page_size: int) -> list[tuple[str, str]]:
    """(index text, value text) rows of one page of the flattened array."""
    flat = arr.reshape(-1)
    start = page * page_size
    stop = min(start + page_size, flat.size)
    if start >= stop:
        return []
    idx = np.unravel_index(np.arange(start, stop), arr.shape) if arr.ndim else ()
    rows = []
    for k, value in enumerate(flat[start:stop].tolist()):
        where = "[" + ",".join(str(int(i[k])) for i in idx) + "]" if arr.ndim else "[]"
        rows.append((where, format_value(value)))
    return rows


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
