"""Grid sampling: GridSample (opsets 16, 20, 22) and AffineGrid (20).

GridSample gathers all sampling points at once per interpolation tap (2**r taps for
linear, 4**r for cubic), each tap one `take_along_axis` over the flattened spatial axes.
"""

from __future__ import annotations

from itertools import product

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.nn_geometry import compute_dtype
from onnxviz.runtime.registry import kernel


def _unnormalize(g: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    if align_corners:
        return (g + 1) / 2 * (size - 1)
    return ((g + 1) * size - 1) / 2


def _reflect(x: np.ndarray, low2: float, high2: float) -> np.ndarray:
    """Reflect coordinates into [low2/2, high2/2] as many times as needed."""
    if low2 == high2:
        return np.zeros_like(x)
    lo = low2 / 2
    span = (high2 - low2) / 2
    d = np.abs(x - lo)
    extra = np.fmod(d, span)
    flips = np.floor(d / span)
    return np.where(flips % 2 == 0, extra + lo, span - extra + lo)


def _pad_coord(x: np.ndarray, size: int, padding: str, align_corners: bool) -> np.ndarray:
    if padding == "border":
        return np.clip(x, 0, size - 1)
    if padding == "reflection":
        if align_corners:
            x = _reflect(x, 0, 2 * (size - 1))
        else:
            x = _reflect(x, -1, 2 * size - 1)
        return np.clip(x, 0, size - 1)
    return x


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> list[np.ndarray]:
    def near(d: np.ndarray) -> np.ndarray:
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


@kernel("GridSample", since=(16, 20, 22))
def grid_sample(
    x: np.ndarray,
    grid: np.ndarray,
    *,
    align_corners: int = 0,
    mode: str = "linear",
    padding_mode: str = "zeros",
) -> np.ndarray:
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("linear", "nearest", "cubic"):
        raise ExecutionError(f"GridSample: unknown mode '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ExecutionError(f"GridSample: unknown padding_mode '{padding_mode}'")
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    r = len(spatial)
    if grid.shape[0] != n or grid.shape[-1] != r:
        raise ExecutionError(f"GridSample: grid {grid.shape} does not fit input {x.shape}")
    out_shape = grid.shape[1:-1]
    dt = compute_dtype(x.dtype)
    flat = x.astype(dt, copy=False).reshape(n, c, -1)
    g = grid.astype(dt).reshape(n, -1, r)
    ac = bool(align_corners)
    # grid[..., 0] addresses the last spatial axis (x = width).
    coords = [_unnormalize(g[:, :, r - 1 - a], spatial[a], ac) for a in range(r)]
    if mode != "cubic":
        coords = [_pad_coord(co, spatial[a], padding_mode, ac) for a, co in enumerate(coords)]
    taps_per_axis: list[list[tuple[np.ndarray, np.ndarray]]] = []
    for a, co in enumerate(coords):
        if mode == "nearest":
            taps_per_axis.append([(np.rint(co).astype(np.int64), np.ones_like(co))])
            continue
        base = np.floor(co)
        t = co - base
        b = base.astype(np.int64)
        if mode == "linear":
            taps_per_axis.append([(b, 1 - t), (b + 1, t)])
        else:
            weights = _cubic_weights(t)
            taps = []
            for k in range(4):
                idx = b + (k - 1)
                if padding_mode != "zeros":
                    padded = _pad_coord(idx.astype(dt), spatial[a], padding_mode, ac)
                    idx = padded.astype(np.int64)
                taps.append((idx, weights[k]))
            taps_per_axis.append(taps)
    out = np.zeros((n, c, g.shape[1]), dtype=dt)
    for combo in product(*taps_per_axis):
        weight = np.ones((n, g.shape[1]), dtype=dt)
        index = np.zeros((n, g.shape[1]), dtype=np.int64)
        valid = np.ones((n, g.shape[1]), dtype=bool)
        for a, (idx, w) in enumerate(combo):
            weight = weight * w
            valid &= (idx >= 0) & (idx < spatial[a])
            index = index * spatial[a] + np.clip(idx, 0, spatial[a] - 1)
        weight = np.where(valid, weight, 0).astype(dt)
        out += np.take_along_axis(flat, index[:, None, :], axis=2) * weight[:, None, :]
    return out.reshape(n, c, *out_shape).astype(x.dtype, copy=False)


@kernel("AffineGrid", since=20)
def affine_grid(theta: np.ndarray, size: np.ndarray, *, align_corners: int = 0) -> np.ndarray:
    dims = [int(v) for v in np.asarray(size).reshape(-1)]
    n, spatial = dims[0], dims[2:]
    r = len(spatial)
    if theta.shape != (n, r, r + 1):
        raise ExecutionError(f"AffineGrid: theta {theta.shape} does not fit size {dims}")
    dt = compute_dtype(theta.dtype)
    lines = []
    for s in spatial:
        if align_corners:
            lines.append(np.linspace(-1, 1, s, dtype=dt) if s > 1 else np.zeros(s, dtype=dt))
        else:
            lines.append(((np.arange(s, dtype=dt) * 2 + 1) / s - 1).astype(dt))
    mesh = np.meshgrid(*lines, indexing="ij")
    # Homogeneous positions with x (last spatial axis) first: (P, r + 1).
    pos = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size, dtype=dt)], 1)
    grid = np.matmul(pos[None], theta.astype(dt).transpose(0, 2, 1))
    return grid.reshape(n, *spatial, r).astype(theta.dtype, copy=False)
