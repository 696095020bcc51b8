"""Convolution variants built on the plain conv's helpers (nn_conv.py): DeformConv
(learned sampling offsets, N-linear interpolation), Col2Im (the inverse of im2col) and
CausalConvWithState (a depthwise causal conv carrying its past across calls).
"""

from __future__ import annotations

import math
from itertools import product

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.nn_conv import col2im_add, conv_geometry, depthwise
from onnxviz.runtime.kernels.nn_geometry import (
    as_compute,
    pad_spatial,
    pool_output_shape,
    spatial_list,
)
from onnxviz.runtime.registry import kernel


def _linear_sample(x: np.ndarray, coords: np.ndarray) -> np.ndarray:
    """N-linear interpolation of x (B, C, *spatial) at coords (B, n, *pts); zero outside.
    Returns (B, C, *pts)."""
    b, c = x.shape[:2]
    spatial = x.shape[2:]
    rank = len(spatial)
    pts_shape = coords.shape[2:]
    flat = x.reshape(b, c, -1)
    base = np.floor(coords)
    frac = coords - base
    base = base.astype(np.int64)
    out = np.zeros((b, c, math.prod(pts_shape)), dtype=x.dtype)
    for corner in product((0, 1), repeat=rank):
        weight = np.ones((b, *pts_shape), dtype=x.dtype)
        index = np.zeros((b, *pts_shape), dtype=np.int64)
        valid = np.ones((b, *pts_shape), dtype=bool)
        for axis, bit in enumerate(corner):
            pos = base[:, axis] + bit
            weight *= frac[:, axis] if bit else 1 - frac[:, axis]
            valid &= (pos >= 0) & (pos < spatial[axis])
            index = index * spatial[axis] + np.clip(pos, 0, spatial[axis] - 1)
        weight = np.where(valid, weight, 0).reshape(b, 1, -1)
        gathered = np.take_along_axis(flat, index.reshape(b, 1, -1), axis=2)
        out += gathered * weight
    return out.reshape(b, c, *pts_shape)


@kernel("DeformConv", since=(19, 22))
def deform_conv(
    x: np.ndarray,
    w: np.ndarray,
    offset: np.ndarray,
    b: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    *,
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    offset_group: int = 1,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    kernel, st, dil, pd, out = conv_geometry(x, w, "NOTSET", dilations, kernel_shape, pads, strides)
    rank = len(kernel)
    n, c = x.shape[:2]
    k_size = math.prod(kernel)
    xc = as_compute(x)
    dt = xc.dtype
    og = offset_group
    # Regular sampling grid (rank, K, *out) then the learned offsets on top.
    k_grid = np.stack(np.meshgrid(*(np.arange(k) for k in kernel), indexing="ij")).reshape(
        rank, k_size
    )
    o_grid = np.stack(np.meshgrid(*(np.arange(o) for o in out), indexing="ij"))
    base = np.empty((rank, k_size, *out), dtype=dt)
    for a in range(rank):
        base[a] = (
            k_grid[a].reshape((k_size,) + (1,) * rank) * dil[a] + o_grid[a][None] * st[a] - pd[a]
        )
    offs = as_compute(offset).astype(dt).reshape(n, og, k_size, rank, *out)
    coords = base[None, None] + np.moveaxis(offs, 3, 2)  # (N, og, rank, K, *out)
    xg = xc.reshape(n * og, c // og, *x.shape[2:])
    sampled = _linear_sample(xg, coords.reshape(n * og, rank, k_size, *out))
    sampled = sampled.reshape(n, og, c // og, k_size, *out)
    if mask is not None:
        sampled = sampled * as_compute(mask).astype(dt).reshape(n, og, 1, k_size, *out)
    cols = sampled.reshape(n, group, (c // group) * k_size, -1)
    wg = as_compute(w).astype(dt).reshape(group, w.shape[0] // group, -1)
    y = np.matmul(wg[None], cols).reshape(n, w.shape[0], *out)
    if b is not None:
        y += as_compute(b).astype(dt).reshape((1, -1) + (1,) * rank)
    return y.astype(x.dtype, copy=False)


@kernel("Col2Im", since=18)
def col2im(
    x: np.ndarray,
    image_shape: np.ndarray,
    block_shape: np.ndarray,
    *,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    image = [int(v) for v in np.asarray(image_shape).reshape(-1)]
    block = [int(v) for v in np.asarray(block_shape).reshape(-1)]
    rank = len(image)
    st = spatial_list(strides, rank, 1)
    dil = spatial_list(dilations, rank, 1)
    pd = spatial_list(pads, 2 * rank, 0)
    blocks = pool_output_shape(image, block, st, dil, pd, False)
    k_size = math.prod(block)
    n = x.shape[0]
    if x.shape[1] % k_size or x.shape[2] != math.prod(blocks):
        raise ExecutionError(f"Col2Im input {x.shape} does not fit blocks {block} / {blocks}")
    xc = as_compute(x)
    cols = xc.reshape(n, x.shape[1] // k_size, *block, *blocks)
    full = [i + pd[a] + pd[a + rank] for a, i in enumerate(image)]
    img = col2im_add(cols, block, st, dil, blocks, full)
    y = pad_spatial(img, [-p for p in pd[:rank]], [-p for p in pd[rank:]])
    return np.ascontiguousarray(y).astype(x.dtype, copy=False)


@kernel("CausalConvWithState", since=27)
def causal_conv_with_state(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    past_state: np.ndarray | None = None,
    *,
    activation: str = "none",
) -> tuple[np.ndarray, np.ndarray]:
    batch, channels, length = x.shape
    k = weight.shape[-1]
    xc = as_compute(x)
    if past_state is None:
        past = np.zeros((batch, channels, k - 1), dtype=xc.dtype)
    else:
        past = as_compute(past_state).astype(xc.dtype, copy=False)
    full = np.concatenate([past, xc], axis=2)
    wc = as_compute(weight).astype(xc.dtype).reshape(channels, 1, k)
    y = depthwise(full, wc, channels, [k], [1], [1], [length])
    if bias is not None:
        y += as_compute(bias).astype(xc.dtype).reshape(1, channels, 1)
    if activation in ("silu", "swish"):
        y = y / (1 + np.exp(-y))
    elif activation != "none":
        raise ExecutionError(f"CausalConvWithState: unknown activation '{activation}'")
    present = full[:, :, full.shape[2] - (k - 1) :]
    return y.astype(x.dtype, copy=False), np.ascontiguousarray(present).astype(x.dtype, copy=False)
