"""Convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv (DeformConv, Col2Im and
CausalConvWithState, built on these helpers, are in nn_conv_variants.py).

Speed: a float32 plain conv runs the compiled direct conv (native/_conv.c) where
`direct_nchw_pays` measured it ahead; otherwise a general conv is one im2col copy of a
strided window view plus one (grouped) GEMM through np.matmul; a 1x1 stride-1 conv is a plain matmul on a reshaped view;
depthwise conv (one input channel per group) accumulates one vectorised multiply-add per
kernel offset instead of many tiny GEMMs.  ConvTranspose is the GEMM W^T.X followed by
a col2im that adds one strided slice per kernel offset.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from functools import lru_cache
from itertools import product
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.kernels import _weight_cache, blas, chain_program, nn_winograd, packed_gemm
from onnxviz.runtime.kernels.math_linalg import few_rows_by_packed_weight
from onnxviz.runtime.kernels.nn_geometry import (
    as_compute,
    conv_pads,
    offset_slices,
    pad_spatial,
    pool_output_shape,
    scratch,
    spatial_list,
    window_view,
)
from onnxviz.runtime.registry import kernel


class ConvWeight:
    """A constant conv weight with the repacked forms the fast paths read, made once.

    The planner wraps a Conv's initializer weight in one of these for unwatched runs
    (see runtime.fusion), so the per-offset weight matrices of a 3x3 conv are not copied
    out of the (M, C, kh, kw) array on every call.  ``array`` is the weight itself."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self._taps: np.ndarray | None = None
        self._winograd: np.ndarray | None = None
        self._winograd_nhwc: tuple[int, np.ndarray] | None = None
        self._tiles: dict[tuple[int, int, int], np.ndarray] = {}
        self._direct: tuple[int, np.ndarray] | None = None
        self._planar: ConvWeight | None = None

    def planar(self) -> ConvWeight:
        """This 1-D conv weight (M, C, k) as a 2-D one of kernel height 1, kept with its
        own packed forms (`_planar_dispatch`)."""
        if self._planar is None:
            self._planar = ConvWeight(planar_weight(self.array))
        return self._planar

    def winograd(self) -> np.ndarray:
        """The F(2x2, 3x3) transformed weight (16, M, C) (nn_winograd)."""
        if self._winograd is None:
            self._winograd = nn_winograd.transform_weights(self.array)
        return self._winograd

    def winograd_nhwc(self, nr: int) -> np.ndarray:
        """The fused channels-last conv's packed transformed weight for panels of ``nr``
        channels (`nn_winograd.pack_nhwc`)."""
        if self._winograd_nhwc is None or self._winograd_nhwc[0] != nr:
            self._winograd_nhwc = (nr, nn_winograd.pack_nhwc(self.array, nr))
        return self._winograd_nhwc[1]

    def taps(self) -> np.ndarray:
        """(kernel offsets, M, C/group) contiguous: one (M, C) matrix per offset."""
        if self._taps is None:
            w = self.array
            self._taps = np.ascontiguousarray(
                w.reshape(w.shape[0], w.shape[1], -1).transpose(2, 0, 1)
            )
        return self._taps

    def direct(self, lanes: int) -> np.ndarray:
        """The weight packed for the compiled direct conv at ``lanes`` (`pack_direct`)."""
        got = self._direct
        if got is None or got[0] != lanes:
            got = self._direct = (lanes, pack_direct(self.array, lanes))
        return got[1]

    def depthwise_tile(
        self, kernel: Sequence[int], phase: int, stride: int, width: int
    ) -> np.ndarray:
        """The depthwise weights (*kernel, C) at kernel columns phase, phase+stride, ...,
        repeated ``width`` times along the channels: the weight operand of the
        channels-last einsum (_depthwise_phase_sums).  Kept per (phase, stride, width):
        tiling it on every call cost 3-6 us plus a fresh 0.1-0.4 MB array that the einsum
        then read from a cold cache (einsum 10-15% slower on MobileNetV3's layers)."""
        key = (phase, stride, width)
        tile = self._tiles.get(key)
        if tile is None:
            if len(self._tiles) >= _TILES_KEPT:  # a model fed many image sizes
                self._tiles.clear()
            wk = self.taps().reshape(math.prod(kernel), -1).reshape(*kernel, -1)
            tile = _tile_columns(wk, phase, stride, width)
            self._tiles[key] = tile
        return tile


# Tiled depthwise weights one ConvWeight keeps (one per stride phase and output width).
_TILES_KEPT = 8


def _tile_columns(wk: np.ndarray, phase: int, stride: int, width: int) -> np.ndarray:
    """wk (*kernel, C) at kernel columns phase::stride, tiled ``width`` times along C."""
    return np.tile(wk[..., phase::stride, :], (1,) * (wk.ndim - 1) + (width,))


def conv_geometry(
    x: np.ndarray,
    w: np.ndarray,
    auto_pad: str,
    dilations: Sequence[int] | None,
    kernel_shape: Sequence[int] | None,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    rank = x.ndim - 2
    if rank < 1:
        raise ExecutionError(f"conv input must have rank >= 3, got shape {x.shape}")
    # The same conv node sees the same shapes and attributes on every run: its geometry
    # is looked up (~1 us) instead of worked out again (~4 us, a 1x1 conv's whole
    # product on a small image costs about as much).  Invalid attributes raise on every
    # call, as the lookup only holds successes.
    geometry = _geometry(
        x.shape[2:],
        w.shape[2:],
        auto_pad,
        None if dilations is None else tuple(dilations),
        None if kernel_shape is None else tuple(kernel_shape),
        None if pads is None else tuple(pads),
        None if strides is None else tuple(strides),
    )
    kernel, st, dil, pd, out = geometry
    return list(kernel), list(st), list(dil), list(pd), list(out)


@lru_cache(maxsize=1024)
def _geometry(
    spatial: tuple[int, ...],
    w_spatial: tuple[int, ...],
    auto_pad: str,
    dilations: tuple[int, ...] | None,
    kernel_shape: tuple[int, ...] | None,
    pads: tuple[int, ...] | None,
    strides: tuple[int, ...] | None,
) -> tuple[tuple[int, ...], ...]:
    rank = len(spatial)
    kernel = spatial_list(kernel_shape, rank, 0) if kernel_shape else list(w_spatial)
    st = spatial_list(strides, rank, 1)
    dil = spatial_list(dilations, rank, 1)
    pd = conv_pads(spatial, kernel, st, dil, auto_pad, pads)
    out = pool_output_shape(spatial, kernel, st, dil, pd, False)
    return tuple(kernel), tuple(st), tuple(dil), tuple(pd), tuple(out)


def conv_core(
    x: np.ndarray,
    w: np.ndarray,
    group: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
    bias: np.ndarray | None = None,
    packed: ConvWeight | None = None,
    addend: np.ndarray | None = None,
) -> np.ndarray:
    """Zero-padded grouped convolution of same-dtype float arrays plus the optional
    per-channel ``bias`` (M,) and ``addend`` (an array of the output's shape: a residual
    connection); a fresh (N, M, *out_shape).  ``packed`` is ``w`` wrapped with its
    repacked forms, when the caller keeps one."""
    y, added = _conv_dispatch(
        x, w, group, kernel, strides, dilations, pads, out_shape, bias, packed, addend
    )
    if bias is not None and not added:
        y += bias.reshape((1, -1) + (1,) * len(kernel))
    if addend is not None and not added:
        y += addend
    return y


# Kernel area from which a conv whose kernel equals its stride (unpadded: a ViT's patch
# embedding) runs as one product over its patches (`_patch_conv`, and channels-last
# nn_conv_nhwc._Patches), measured there against the direct kernel: 16x16 patches win
# (ViT-tiny's 3 -> 192 at 224 px: 398 against 623 us), 8x8 ties, 4x4 and 2x2 lose.
PATCH_AREA = 144


def _patch_conv(
    x: np.ndarray, w: np.ndarray, kernel: Sequence[int], out_shape: Sequence[int]
) -> np.ndarray:
    """A conv whose kernel equals its stride, unpadded: the image cut into its patches
    (rows of C*kh*kw values in the weight's (C, kh, kw) order, one copy), times the
    weight as a (C*kh*kw, M) matrix, as (N, M, H', W') (the bias is the caller's)."""
    n = x.shape[0]
    m = w.shape[0]
    oh, ow = out_shape
    rows = patch_rows(x, kernel, out_shape).reshape(n * oh * ow, -1)
    wt = w.reshape(m, -1).T  # a transposed view: BLAS reads it as is
    y = _packed_patches(rows, w)
    if y is None:
        y = np.matmul(rows, wt)
    y = y.reshape(n, oh * ow, m)
    return np.ascontiguousarray(y.transpose(0, 2, 1)).reshape(n, m, oh, ow)


def _packed_patches(rows: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """rows @ the (C*kh*kw, M) weight by the compiled GEMM with the constant weight
    packed once (math_linalg.few_rows_by_packed_weight), for products packed_gemm.use_for
    takes (None otherwise): OpenBLAS packs the weight on every call, which for a ViT's
    patch embedding on a small image (36 patches of 768 values) was two thirds of the
    conv (124 against 78 us, 96 px, 3 -> 128 channels)."""
    if rows.dtype != np.float32 or w.dtype != np.float32 or rows.shape[0] < packed_gemm.MIN_ROWS:
        return None  # (fewer patches keep OpenBLAS's product)
    return few_rows_by_packed_weight(rows, w.reshape(w.shape[0], -1), more_rows=True, source=w)


def patch_rows(x: np.ndarray, kernel: Sequence[int], out_shape: Sequence[int]) -> np.ndarray:
    """The (N, H', W', C*kh*kw) patches of ``x`` (any layout) for a conv whose kernel
    equals its stride, each in the weight's (C, kh, kw) order: one contiguous copy (the
    edge rows and columns that fill no whole patch left out)."""
    n, c = x.shape[:2]
    (kh, kw), (oh, ow) = kernel, out_shape
    cut = x[:, :, : oh * kh, : ow * kw].reshape(n, c, oh, kh, ow, kw)
    return np.ascontiguousarray(cut.transpose(0, 2, 4, 1, 3, 5)).reshape(n, oh, ow, -1)


# Input channels from which a strided 1-D conv runs as a 2-D one: wav2vec2's raw-audio
# stem (1 -> 512, k10 s5) stays on the 1-D path's im2col (1264 against 1361 us).
_PLANAR_MIN_STRIDED_CHANNELS = 4


def planar_routing() -> bool:
    """Whether a float32 1-D conv runs as a 2-D one (`_planar_dispatch`;
    ONNXVIZ_PLANAR_CONV=off: never, for measuring against the 1-D paths)."""
    return os.environ.get("ONNXVIZ_PLANAR_CONV", "auto").strip().lower() != "off"


def planar_weight(w: np.ndarray) -> np.ndarray:
    """A 1-D conv weight (M, C, k) as (M, C, 1, k): the same view object call after call
    for a constant weight, so the packed forms keyed by the weight's identity are made
    once (`_weight_cache`), a fresh view otherwise."""
    m, cg, k = w.shape
    return _weight_cache.derived(  # type: ignore[no-any-return]
        "conv_planar", [w], (), lambda: w.reshape(m, cg, 1, k)
    )


def _planar_dispatch(
    x: np.ndarray,
    w: np.ndarray,
    group: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
    bias: np.ndarray | None,
    packed: ConvWeight | None,
    addend: np.ndarray | None,
) -> tuple[np.ndarray, bool]:
    """A float32 1-D conv as the 2-D conv of height 1 it is, `_conv_dispatch`'s result
    for it.  The 2-D routes (the compiled direct and depthwise kernels) beat the 1-D
    ones (shifted GEMMs, im2col) on the convs of time-series and speech models.  Measured
    on a Zen 3 core, one thread, us, 1-D -> as 2-D (onnxruntime): 16 -> 64 channels k3
    over 4 x 256 steps 206 -> 128 (101), 64 channels k3 dilated 2 or 8 423 -> 360 (336),
    8 -> 32 k5 over 8 x 128 230 -> 62 (56), 32 channels k7 658 -> 296 (309), Whisper's 80
    -> 384 k3 over 3000 frames 7299 -> 6865 (6716); its strided 384-channel conv and
    wav2vec2's wide strided ones tie (16500 -> 16922, 29847 -> 30089)."""
    n, c, length = x.shape
    m = w.shape[0]
    (out,) = out_shape
    planar = None if packed is None else packed.planar()
    y, added = _conv_dispatch(
        x.reshape(n, c, 1, length),
        planar_weight(w) if planar is None else planar.array,
        group,
        (1, kernel[0]),
        (1, strides[0]),
        (1, dilations[0]),
        (0, pads[0], 0, pads[1]),
        (1, out),
        bias,
        planar,
        None if addend is None else addend.reshape(n, m, 1, out),  # the output's shape
    )
    return y.reshape(n, m, out), added


def _conv_dispatch(
    x: np.ndarray,
    w: np.ndarray,
    group: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
    bias: np.ndarray | None,
    packed: ConvWeight | None = None,
    addend: np.ndarray | None = None,
) -> tuple[np.ndarray, bool]:
    """The conv by the fastest path for its shape; True when ``bias`` and ``addend`` are
    both already in.  A path that writes the bias but knows no addend adds the addend
    itself (`_plus`) before it says True: a True that left the addend out dropped the
    residual of every fused Conv -> Add on the flat-layout paths (issue 13)."""
    n, c = x.shape[:2]
    m = w.shape[0]
    rank = len(kernel)
    if c % group or m % group or w.shape[1] * group != c:
        raise ExecutionError(
            f"conv channels do not fit: input {c}, weight {tuple(w.shape)}, group {group}"
        )
    cg, mg = c // group, m // group
    if (
        rank == 1
        and group == 1
        and x.dtype == np.float32
        and w.dtype == np.float32
        and (c >= _PLANAR_MIN_STRIDED_CHANNELS or strides[0] == 1)
        and planar_routing()
    ):
        return _planar_dispatch(
            x, w, group, kernel, strides, dilations, pads, out_shape, bias, packed, addend
        )
    k_size = math.prod(kernel)
    p_size = math.prod(out_shape)
    if group == 1 and rank == 2 and _patch_product(kernel, strides, dilations, pads):
        return _patch_conv(x, w, kernel, out_shape), False
    if group > 1 and cg > 1 and _view_product(kernel, strides, pads) and x.flags.c_contiguous:
        # A grouped 1x1 conv (ShuffleNet's), stride 1, unpadded: each group's channels are
        # one contiguous slab of an NCHW image, so the batched product over (image, group)
        # reads x in place; the im2col below copied the whole image first.  The same
        # products of the same values, so the same bits (bias added by the caller).
        y = np.matmul(w.reshape(group, mg, cg), x.reshape(n, group, cg, p_size))
        return y.reshape(n, m, *out_shape), False
    if group == 1 and _view_product(kernel, strides, pads):
        # 1x1, stride 1, no padding: a plain product on a view.
        y = np.empty((n, m, p_size), dtype=x.dtype)
        added = _products_with_bias(
            w.reshape(m, c), x.reshape(n, c, p_size), y, bias, addend, source=w
        )
        return y.reshape(n, m, *out_shape), added
    if group == 1 and x.dtype == np.float32:
        rows = _direct_route(n, c, m, kernel, strides, dilations, pads, out_shape)
        if rows is not None:
            direct = _native_direct_nchw(
                x, w, bias, addend, packed, kernel, strides, dilations, pads, out_shape, rows
            )
            if direct is not None:
                return direct
        elif w.dtype == np.float32 and nn_winograd.fused_pays(
            n, c, m, kernel, strides, dilations, pads, out_shape
        ):
            # Of the shapes the direct kernel does not run, the fused conv's: what
            # `_direct_route` left to it (nn_winograd.nchw_pays) and the others it takes.
            fused = _fused_winograd_nchw(x, w, packed, bias, pads, out_shape)
            if fused is not None:
                return _plus(fused, addend), True
    if packed is not None and nn_winograd.fits(
        c, m, group, kernel, strides, dilations, pads, out_shape
    ):
        # Constant weights only: their transform is made once (ConvWeight.winograd).
        y = nn_winograd.winograd_conv(x, packed.winograd(), bias, pads, out_shape)
        return _plus(y, addend), True
    if cg == 1 and m == group > 1 and rank <= 2 and min(pads) >= 0:
        got = _native_depthwise_nchw(
            x, w, bias, packed, kernel, strides, dilations, pads, out_shape
        )
        if got is not None:
            return _plus(got, addend), True
    stride1 = all(s == 1 for s in strides) and min(pads) >= 0
    padded = [s + pads[i] + pads[i + rank] for i, s in enumerate(x.shape[2:])]
    if (
        cg == 1
        and m == group > 1
        and min(pads) >= 0
        and channels_last_pays(c, out_shape, strides, dilations)
    ):
        y = _depthwise_channels_last(x, w, packed, kernel, strides, dilations, pads, out_shape)
        return _plus(_nchw_with_bias(y, bias), addend), True
    if cg == 1 and group > 1 and min(pads) >= 0:
        phase_rows = [-(-p // s) for p, s in zip(padded[1:], strides[1:])]
        if math.prod(phase_rows) <= 1.15 * math.prod(out_shape[1:]):
            layout = _FlatLayout(x, pads, kernel, dilations, out_shape, strides)
            return _plus(_depthwise_flat(layout, w, group, bias), addend), True
    if group == 1 and stride1:
        wide = math.prod(padded[1:]) * out_shape[0]
        if n * p_size >= 1024 and wide <= 1.1 * p_size:
            layout = _FlatLayout(x, pads, kernel, dilations, out_shape)
            if c < _FEW_CHANNELS:
                return _plus(_flat_im2col_conv(layout, w, bias), addend), True
            return _plus(_shifted_conv(layout, w, bias, packed), addend), True
    strided = any(s > 1 for s in strides) and min(pads) >= 0
    few = c < _FEW_CHANNELS
    if group == 1 and strided and k_size > 1 and (c >= 16 or few) and n * p_size >= 1024:
        phase_rows = [-(-p // s) for p, s in zip(padded[1:], strides[1:])]
        if math.prod(phase_rows) <= 1.15 * math.prod(out_shape[1:]):
            layout = _FlatLayout(x, pads, kernel, dilations, out_shape, strides)
            if few:
                return _plus(_flat_im2col_conv(layout, w, bias), addend), True
            return _plus(_shifted_conv(layout, w, bias, packed), addend), True
    xp = pad_spatial(x, pads[:rank], pads[rank:])
    if cg == 1 and group > 1:
        return depthwise(xp, w, group, kernel, strides, dilations, out_shape), False
    cols = window_view(xp, kernel, strides, dilations, out_shape)
    # im2col copy: (N, G, Cg*K, P), innermost axis the output positions (contiguous reads
    # for stride 1), then one batched GEMM per group.
    col = scratch("conv_col", (n, group, cg * k_size, p_size), x.dtype)
    col.reshape(cols.shape)[...] = cols
    wg = w.reshape(group, mg, cg * k_size)
    if group == 1:
        y = np.empty((n, m, p_size), dtype=x.dtype)
        added = _products_with_bias(wg[0], col[:, 0], y, bias, addend, source=w)
        return y.reshape(n, m, *out_shape), added
    y = np.matmul(wg[None], col)
    return y.reshape(n, m, *out_shape), False


# Activation codes of the compiled conv kernels (native/activations.h; 4: SiLU, y *
# sigmoid(y) by the Sigmoid kernel's float32 sigmoid).
ACT_NONE, ACT_RELU, ACT_CLIP, ACT_HARDSWISH, ACT_SILU = 0, 1, 2, 3, 4


def native_depthwise(
    xl: np.ndarray,
    wk: np.ndarray,
    bias: np.ndarray | None,
    addend: np.ndarray | None,
    out: np.ndarray,
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    act: tuple[int, float, float] = (ACT_NONE, math.nan, math.nan),
) -> bool:
    """The compiled float32 depthwise conv (native/_depthwise.c) of the channels-last
    (N, H, W, C) ``xl`` with the (kh, kw, C) weights ``wk``, plus ``bias`` (C,) and
    ``addend`` (N, H', W', C) (each or None), then the activation ``act`` (code, Clip's
    low, high bound; NaN: none), into ``out`` (N, H', W', C); every array C-contiguous
    float32.  False (nothing written) when the kernel is off or not built.

    Its numbers are those of `depthwise` (a multiply, then an add, per kernel offset in
    row-major order) plus the bias, bit for bit, at every instruction-set level: a tap
    in the zero padding is skipped, which adds an exact zero there."""
    module = native.load("depthwise")
    if module is None:
        return False
    n, h, wd, c = xl.shape
    kh, kw = wk.shape[:2]
    module.conv_nhwc(
        xl,
        wk,
        bias,
        addend,
        out,
        (n, h, wd, c),
        (kh, kw),
        tuple(out.shape[1:3]),
        tuple(strides),
        tuple(dilations),
        (pads[0], pads[1]),
        *act,
    )
    return True


def pack_direct(w: np.ndarray, lanes: int) -> np.ndarray:
    """The (M, C, KH, KW) float32 weight as the compiled direct conv reads it
    (native/_conv.c): [ceil(M / lanes)][KH][KW][C][lanes], the last block's missing
    output channels zero, so one tap's ``lanes`` output channels are one vector load
    (64-byte aligned, `aligned_empty`: one cache line; standalone, one thread, us:
    ResNet-50's 28 px 128-channel 3x3 1439 -> 1342, 3x3/2 56 px 1581 -> 1434, a 7 px
    256-channel one 408 -> 345, with the output aligned too)."""
    m, c, kh, kw = w.shape
    blocks = -(-m // lanes)
    wp = np.zeros((blocks * lanes, c, kh, kw), dtype=np.float32)
    wp[:m] = w
    packed = aligned_empty((blocks, kh, kw, c, lanes))
    packed[...] = wp.reshape(blocks, lanes, c, kh, kw).transpose(0, 3, 4, 2, 1)
    return packed


def direct_lanes() -> int | None:
    """The vector width the compiled direct conv's weight is packed for at this
    process's level, or None when the kernel is off or not built."""
    module = native.load("conv")
    return None if module is None else int(module.lanes())


def native_direct(
    xl: np.ndarray,
    wp: np.ndarray,
    lanes: int,
    m: int,
    kernel: Sequence[int],
    bias: np.ndarray | None,
    addend: np.ndarray | None,
    out: np.ndarray,
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    act: tuple[int, float, float] = (ACT_NONE, math.nan, math.nan),
    x_first: bool = False,
    out_first: bool = False,
) -> bool:
    """The compiled float32 direct conv (native/_conv.c) of the channels-last
    (N, H, W, C) ``xl`` with the weight ``wp`` packed by `pack_direct` for ``lanes``,
    plus ``bias`` (M,) and ``addend`` (N, H', W', M) (each or None), then ``act``, into
    ``out`` (N, H', W', M); every array C-contiguous float32.  ``x_first``: the input is
    (N, C, H, W) instead (the kernel transposes the rows it reads, or with C <= 4 copies
    them channel by channel into phase planes); ``out_first``: the
    addend and the output are (N, M, H', W') (written plane by plane): no whole-array
    transposing copy either way.
    False (nothing written) when the kernel is off or not built.  Sums in float32 in
    (ky, kx, c) order with fused multiply-adds: within float32 rounding of numpy's
    paths, not their bits."""
    module = native.load("conv")
    if module is None:
        return False
    n, c, h, wd = xl.shape if x_first else (xl.shape[0], xl.shape[3], *xl.shape[1:3])
    oh, ow = out.shape[2:4] if out_first else out.shape[1:3]
    module.conv_nhwc(
        xl,
        wp,
        bias,
        addend,
        out,
        (n, h, wd, c),
        (m, kernel[0], kernel[1]),
        (oh, ow),
        tuple(strides),
        tuple(dilations),
        (pads[0], pads[1]),
        *act,
        lanes,
        int(x_first) | 2 * int(out_first),
    )
    return True


# The blocked direct conv's (native/_conv.c `conv_blocked`) output-channel group and
# input-channel chunk.
BLOCKED_GROUP, BLOCKED_CHUNK = 64, 16


def aligned_empty(shape: Sequence[int], align: int = 64) -> np.ndarray:
    """An uninitialized C-contiguous float32 array of ``shape`` whose data starts at a
    multiple of ``align`` bytes.  numpy's (malloc's) large blocks start 16 or 32 bytes
    past one, so every 64-byte vector a kernel loads from them spans two cache lines."""
    count = math.prod(shape) * 4
    raw = np.empty(count + align, dtype=np.uint8)
    start = -raw.ctypes.data % align
    return raw[start : start + count].view(np.float32).reshape(tuple(shape))


# Bytes from which a compiled conv's or GEMM's output is aligned (`out_empty`).
ALIGNED_OUTPUT_BYTES = 1 << 18


def out_empty(shape: Sequence[int]) -> np.ndarray:
    """A fresh float32 output for a compiled conv or GEMM: 64-byte aligned from
    ALIGNED_OUTPUT_BYTES on, so its vector stores (and the next conv's loads of it) each
    touch one cache line.  In the models, one thread, numpy's outputs against these,
    alternated in one process, ratio to onnxruntime: ResNet-50 1.120 -> 1.073, its
    torchvision export 1.111 -> 1.095, ResNet-18 w32 1.117 -> 1.085, UNet 1.096 ->
    1.074, UNet (torch) 1.086 -> 1.057, Inception v2 1.301 -> 1.278.  Smaller outputs
    stay numpy's: finding the address costs about 2 us (ndarray.ctypes), which on
    MobileNetV3-small's 34 small convs (10-200 KB outputs, in L2 anyway) was 4% of
    its run."""
    if math.prod(shape) * 4 < ALIGNED_OUTPUT_BYTES:
        return np.empty(tuple(shape), dtype=np.float32)
    return aligned_empty(shape)


def pack_blocked(w: np.ndarray) -> np.ndarray:
    """The (M, C, KH, KW) float32 weight as the compiled blocked conv reads it: per group
    of 64 output channels (its last one padded with zero channels to a multiple of 16)
    and per chunk of 16 input channels (the last one may have fewer), the block
    [KH][KW][chunk's channels][group's channels]; groups then chunks, one flat array
    starting at a multiple of 64 bytes (`aligned_empty`: its vector loads each one cache
    line)."""
    m, c, kh, kw = w.shape
    parts = []
    for m0 in range(0, m, BLOCKED_GROUP):
        count = min(BLOCKED_GROUP, m - m0)
        group = np.zeros((-(-count // 16) * 16, c, kh, kw), dtype=np.float32)
        group[:count] = w[m0 : m0 + count]
        rows = group.transpose(1, 2, 3, 0)  # (C, KH, KW, group)
        for c0 in range(0, c, BLOCKED_CHUNK):
            parts.append(rows[c0 : c0 + BLOCKED_CHUNK].transpose(1, 2, 0, 3).reshape(-1))
    packed = aligned_empty((sum(p.size for p in parts),))
    np.concatenate(parts, out=packed)
    return packed


def native_blocked(
    xl: np.ndarray,
    wb: np.ndarray,
    m: int,
    kernel: Sequence[int],
    bias: np.ndarray | None,
    addend: np.ndarray | None,
    out: np.ndarray,
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    act: tuple[int, float, float] = (ACT_NONE, math.nan, math.nan),
) -> bool:
    """`native_direct`'s conv (channels-last ``xl``, ``addend`` and ``out`` only) by the
    compiled blocked kernel (native/_conv.c `conv_blocked`: the reduction cut into
    chunks of 16 input channels so a weight block of 64 output channels stays in L1 while
    every pixel reads it), the weight ``wb`` packed by `pack_blocked`.  False (nothing
    written) when the kernel is off or not built.  Sums in float32, chunk by chunk in
    (ky, kx, c) order: within float32 rounding of the other paths, not their bits."""
    module = native.load("conv")
    if module is None:
        return False
    n, h, wd, c = xl.shape
    module.conv_blocked(
        xl,
        wb,
        bias,
        addend,
        out,
        (n, h, wd, c),
        (m, kernel[0], kernel[1]),
        tuple(out.shape[1:3]),
        tuple(strides),
        tuple(dilations),
        (pads[0], pads[1]),
        *act,
    )
    return True


def direct_routing() -> bool:
    """Whether plain convs may run the compiled direct conv (ONNXVIZ_DIRECT_CONV=off:
    never, for measuring against the paths it replaces; the kernel also needs
    ONNXVIZ_NATIVE on)."""
    return os.environ.get("ONNXVIZ_DIRECT_CONV", "auto").strip().lower() != "off"


def direct_nchw_pays(
    c: int,
    m: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
) -> bool:
    """Whether a plain (one group) 2-D float32 conv of channels-first input and output
    runs faster by the direct kernel than by the numpy paths below: a kernel larger than
    1x1, or a strided 1x1, and then where benchmarks/bench_direct_conv.py measured it
    ahead (one thread, AVX-512, us, current path -> direct reading and writing NCHW):

    * not a Winograd conv (strided, 7x7 stems, images over 64 px, few channels), at most
      128 input channels: ResNet-18 w32 stem 3576 -> 1911, 3x3/2 56 px 32->64 679 ->
      363, 1x1/2 32->64 137 -> 128, 64->128 109 -> 89, 128->256 108 -> 69; ResNet-50
      3x3/2 56 px 128 ch 3688 -> 3044; UNet 16 ch 128 px 1951 -> 1344.  Wider ones
      lose or tie (ResNet-50 3x3/2 28 px 256 ch 3118 -> 3273, 1x1/2 56 px 256->512
      2173 -> 4164: a GEMM's blocking wins there);
    * a Winograd conv only with few channels on a small image (c * m <= 32 * 32, or
      <= 64 * 64 at up to 28x28 outputs): 56 px 32 ch 989 -> 744, 28 px 64 ch 734 ->
      661; Winograd's 2.25x fewer products win wider (ResNet-50 56 px 64 ch 2568 ->
      2913, 14 px 256 ch 2122 -> 2791).

    Inside a channels-last chain (nn_conv_nhwc) the direct kernel runs every plain conv:
    no row transposes or plane writes there, and the chain keeps its layout.

    Those were the first kernel's numbers.  Measured again at AVX-512 on a Zen 4 core
    (bench_direct_conv.py, us, Winograd -> direct NCHW): up to 32 x 32 outputs of up to
    64 x 64 channels and up to 16 x 16 of up to 128 x 128 the direct kernel is ahead or
    level alone (64 ch at 32 px 734 -> 687, 96 -> 32 at 32 px 499 -> 509, 64 ch at 16 px
    207 -> 171, 128 -> 64 at 16 px 339 -> 326) and ahead in a model, where Winograd's
    transformed tiles leave the caches to the next node (the diffusion UNet at 32 px,
    bench_families, 1.37-1.47x -> 1.32-1.34x of onnxruntime's time, its dynamo export
    1.38-1.40x -> 1.26-1.30x; at 64 px level); wider or larger ones keep Winograd (128 ->
    64 at 32 px 1223 -> 1331, ResNet-50's 64 ch at 56 px 1727 -> 2074).

    At AVX2 the Winograd convs on the images `direct_rows_pays` was measured to take
    from Winograd (up to 16 x 16 outputs, or 32 x 32 with c * m <= 64 * 64) run this NCHW
    form instead of those rows: on a Zen 3 core, one thread, medians of 30-40 alternated
    calls, us, rows -> NCHW form (onnxruntime's one-node Conv): 64 ch at 32 px 1574 ->
    1298 (1314), 96 -> 32 at 32 px 1133 -> 951 (1038), 64 ch at 16 px 346 -> 309 (335),
    128 -> 64 at 16 px 646 -> 595 (654), 128 ch at 16 px 1358 -> 1204 (1362), 256 -> 128
    at 16 px 2476 -> 2465 (2411): the rows' copies in and out and their output's pages
    cost more than the NCHW form's strided reads.  Whole diffusion UNets at 32 px,
    alternated runs: 0.938-0.949 of the time before (an A/A control 0.974), their dynamo
    export 0.934-0.967 (A/A 0.995), 64 px 0.989; the same bits (the same kernel and
    sums).  Strided convs wider than 128 channels keep the rows (256 ch 3x3/2 at 28 px:
    rows 4824, NCHW form 5382).

    Later, with the NCHW form held (fusion.ConvChain._hold_nchw), up to 64 x 64 outputs of
    up to 128 x 64 channels left Winograd too: one conv (bench_direct_conv.py, Zen 3, us,
    Winograd -> NCHW form (onnxruntime)): 64 ch at 64 px 5964 -> 4565 (4376), 96 -> 32 at
    64 px 5254 -> 3315 (3417), 128 -> 64 at 32 px 2774 -> 2162 (2080), at 64 px 10980 ->
    9901 (9954), 64 ch at 48 px 3274 -> 2573 (2509); level or a little behind on some
    (64 ch at 56 px 2595 -> 2768 and 3773 -> 3596 in two runs, 128 -> 64 at 40 px 3037 ->
    3614).  In the 64 px diffusion UNet (its GroupNorms keep the convs NCHW), whole runs
    alternated in one process: Winograd up to 64 x 64 channels -> NCHW form 0.859-0.872
    of the time, then up to 128 x 64 0.949-0.955 more.  Wider ones keep Winograd (128 ch
    at 64 px 17277 -> 18483, at 32 px 4435 -> 4473).

    The same bound at AVX-512, measured on an Emerald Rapids core (one conv between
    Sigmoids, separate processes twice each, ours / onnxruntime's time in the same
    process, Winograd -> NCHW form): 96 -> 32 at 64 px 1.62, 1.62 -> 1.07, 1.12; 64 ch at
    64 px 1.34, 1.52 -> 1.02, 1.17; 32 -> 64 at 64 px 1.64, 1.68 -> 1.15, 1.26; 128 -> 64
    at 64 px 1.20, 1.43 -> 1.00, 1.26; 96 -> 64 at 32 px 1.62, 1.60 -> 1.08, 1.21; level
    at 64 -> 128 (1.06 -> 1.07) and 128 -> 64 at 32 px (1.39, 1.45 -> 1.52, 1.24).  The 64
    px diffusion UNet 1.23-1.34x -> 1.12-1.17x onnxruntime (minimum ratios, three
    alternated pairs of processes)."""
    if len(out_shape) != 2:
        return False
    if math.prod(kernel) == 1 and all(s == 1 for s in strides):
        return False  # the plain product on a view
    if nn_winograd.fits(c, m, 1, kernel, strides, dilations, pads, out_shape):
        pixels = math.prod(out_shape)
        lanes = direct_lanes()
        if lanes == 16 and (
            (pixels <= 64 * 64 and c * m <= 128 * 64) or (pixels <= 16 * 16 and c * m <= 128 * 128)
        ):
            return True  # AVX-512, measured again: see the docstring's last paragraphs
        if lanes == 8 and (
            pixels <= 16 * 16
            or (pixels <= 32 * 32 and c * m <= 64 * 64)
            or (pixels <= 64 * 64 and c * m <= 128 * 64)
        ):
            return True  # AVX2, measured against the rows route and Winograd: the docstring
        return c * m <= 32 * 32 or (c * m <= 64 * 64 and pixels <= 28 * 28)
    return c <= 128


# Input channels from which a plain conv at the AVX2 level runs `_native_direct_nchw` with ``rows``.
ROWS_MIN_CHANNELS = 16


def direct_rows_pays(
    c: int,
    m: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
) -> bool:
    """Whether a plain (one group) 2-D float32 conv of an NCHW input and output that
    `direct_nchw_pays` leaves to the numpy paths (Winograd, shifted slices, im2col) runs
    faster as `_native_direct_nchw` with ``rows``, outside a channels-last chain: at the
    AVX2 level only (8 lanes; AVX-512 keeps the routes measured there), from
    ROWS_MIN_CHANNELS input channels (a stem's few run the NCHW kernel's phase planes),
    and no Winograd conv (strided ones wider than 128 channels, which the NCHW form
    leaves).  The small-image Winograd convs below, a diffusion UNet's, took this route
    until the NCHW form was measured ahead of it (`direct_nchw_pays`): at most 16 x 16
    outputs, or 32 x 32 with c * m <= 64 * 64.  Measured on a Zen 3 core through a
    one-conv model, one thread, medians of 9 alternating rounds, us, Winograd -> rows
    (onnxruntime): 96 -> 32 channels at 32 px 1181 -> 1047 (741), 64 ch at 32 px 1201 ->
    1182 (879), 128 -> 64 at 16 px 536 -> 530 (429), 256 ch at 8 px 1517 -> 1282 (959);
    but 64 ch at 64 px 4366 -> 5338 (3848), 128 ch at 32 px 3926 -> 4864 (3790), 128 -> 64
    at 32 px 2141 -> 1993 then 2243 -> 2378 over two runs.  In a diffusion UNet (GroupNorm
    and SiLU between its convs), sums of per-node minima over 12 alternating runs: 32 px
    11.41 -> 10.07 ms, 64 px 30.22 -> 28.45; the ResNet, UNet, MobileNetV3, Inception and
    QDQ families (their convs in channels-last chains) unchanged."""
    if len(out_shape) != 2 or c < ROWS_MIN_CHANNELS or direct_lanes() != 8:
        return False
    if math.prod(kernel) == 1 and all(s == 1 for s in strides):
        return False  # the plain product on a view
    # A Winograd conv never: the small images that beat Winograd here beat it by the
    # kernel's NCHW form (`direct_nchw_pays`, measured later); the larger keep Winograd.
    return not nn_winograd.fits(c, m, 1, kernel, strides, dilations, pads, out_shape)


def _patch_product(
    kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], pads: Sequence[int]
) -> bool:
    """A conv whose kernel is its stride, of at least PATCH_AREA (`_patch_conv`)."""
    return (
        math.prod(kernel) >= PATCH_AREA
        and list(kernel) == list(strides)
        and not any(pads)
        and all(d == 1 for d in dilations)
    )


def _view_product(kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int]) -> bool:
    """A 1x1, stride 1, unpadded conv: one product on a view of the input."""
    return math.prod(kernel) == 1 and not any(pads) and all(s == 1 for s in strides)


def _fused_winograd_nchw(
    x: np.ndarray,
    w: np.ndarray,
    packed: ConvWeight | None,
    bias: np.ndarray | None,
    pads: Sequence[int],
    out_shape: Sequence[int],
) -> np.ndarray | None:
    """The fused channels-last Winograd conv of the NCHW float32 ``x`` (bias in) as a
    C-contiguous (N, M, H', W'): the image into channels-last and the result back by the
    compiled transposing copies (nn_conv_nhwc's `nhwc` and `planes_copy`), or None when
    the kernel declines (the kernels switched off since routing)."""
    # (nn_conv_nhwc imports this module: its copies are looked up at the call)
    from onnxviz.runtime.kernels.nn_conv_nhwc import nhwc, planes_copy

    n = x.shape[0]
    m = w.shape[0]
    # The packed transformed weight, made once: kept by ``packed`` (a fused run's weight,
    # which may be a folded copy the weight cache does not know) or by the weight cache
    # (a stepped run's initializer), else made for this call.
    nr = nn_winograd.panel_width()
    got = packed.winograd_nhwc(nr) if packed is not None and nr else nn_winograd.packed_nhwc(w)
    if got is None:
        return None
    u = got
    xl = nhwc(x if x.flags.c_contiguous else np.ascontiguousarray(x))
    out = out_empty((n, *out_shape, m))
    b = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
    if not nn_winograd.conv_nhwc(xl, u, m, b, None, out, pads, (ACT_NONE, math.nan, math.nan)):
        return None
    return planes_copy(out.transpose(0, 3, 1, 2))


def _direct_route(
    n: int,
    c: int,
    m: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
) -> bool | None:
    """How a plain NCHW conv of ``n`` images runs the compiled direct conv: False its own
    NCHW form (`direct_nchw_pays`), True through channels-last rows (`direct_rows_pays`),
    None not at all (also where the fused Winograd conv takes it: nn_winograd.nchw_pays)."""
    direct = direct_nchw_pays(c, m, kernel, strides, dilations, pads, out_shape)
    rows = not direct and direct_rows_pays(c, m, kernel, strides, dilations, pads, out_shape)
    geometry = (kernel, strides, dilations, pads, out_shape)
    if nn_winograd.nchw_pays(n, c, m, *geometry, direct or rows):
        return None
    if direct:
        return False
    return True if rows else None


class _DirectCall:
    """The compiled direct conv (native/_conv.c) of one geometry, NCHW in and out: the
    kernel's own NCHW form (``rows`` False: it transposes the rows it reads and writes the
    planes), or through channels-last rows (`_native_direct_nchw` with ``rows``).  Called with the input
    and an addend: the output with the bias and the addend in (an addend the kernel does
    not take, numpy adds after: its broadcasting, its errors)."""

    def __init__(
        self,
        module: Any,
        chan: Any,
        wp: np.ndarray,
        bias: np.ndarray | None,
        lanes: int,
        x_shape: tuple[int, ...],
        m: int,
        kernel: Sequence[int],
        strides: Sequence[int],
        dilations: Sequence[int],
        pads: Sequence[int],
        out_shape: Sequence[int],
        rows: bool,
    ) -> None:
        n, c, h, wd = x_shape
        oh, ow = out_shape
        self.module, self.chan, self.wp, self.lanes, self.rows = module, chan, wp, lanes, rows
        self.b = None if bias is None else np.ascontiguousarray(bias.reshape(-1))
        self.geometry = ((n, h, wd, c), (m, kernel[0], kernel[1]), (oh, ow), tuple(strides),
                         tuple(dilations), (pads[0], pads[1]))  # fmt: skip
        self.rows_in, self.rows_out = (n, h, wd, c), (n, oh, ow, m)
        self.out_shape = (n, m, oh, ow)

    def __call__(
        self, x: np.ndarray, addend: Any, act: tuple[int, float, float] | None = None
    ) -> np.ndarray:
        """``act``: an activation code and bounds (`ACT_RELU`, ...) the kernel applies
        after the bias and the addend, in its epilogue; only without ``addend`` on the
        rows route, where numpy adds the addend after the kernel."""
        f32 = np.dtype(np.float32)
        code, lo, hi = (ACT_NONE, math.nan, math.nan) if act is None else act
        n, h, wd, c = self.rows_in
        if self.rows:
            # The rows in and out are this call's own (64-byte aligned, as out_empty's):
            # fresh ones were page-faulted in on every call, 13-15 us each for a 32 x 32
            # image of 64 channels.
            xl = scratch("conv_rows_in", self.rows_in, f32, aligned=True)
            self.chan.place(np.ascontiguousarray(x), xl, (n, h * wd, c, c, 0), True)
            yl = scratch("conv_rows_out", self.rows_out, f32, aligned=True)
            if act is not None and addend is not None:
                raise ValueError("an activation before the addend numpy adds")
            self.module.conv_nhwc(
                xl, self.wp, self.b, None, yl, *self.geometry, code, lo, hi, self.lanes, 0,
            )  # fmt: skip
            out = out_empty(self.out_shape)
            _, oh, ow, m = self.rows_out
            self.chan.unplace(yl, out, (n, oh * ow, m))
            if addend is not None:
                out += addend
            return out
        add = addend
        if add is not None and (
            type(add) is not np.ndarray
            or add.dtype != f32
            or add.shape != self.out_shape
            or not add.flags.c_contiguous
        ):
            add = None  # added after, by numpy
            if act is not None:
                raise ValueError("an activation before the addend numpy adds")
        out = out_empty(self.out_shape)
        self.module.conv_nhwc(
            np.ascontiguousarray(x), self.wp, self.b, add, out, *self.geometry, code, lo, hi,
            self.lanes, 3,
        )  # fmt: skip
        if addend is not None and add is None:
            out += addend
        return out


def _attrs_geometry(x: np.ndarray, w: np.ndarray, attrs: dict[str, Any]) -> Any | None:
    """`conv_geometry` from a node's attributes, or None where it raises (the layers
    then run the conv and give its error)."""
    try:
        return conv_geometry(
            x, w, attrs.get("auto_pad", "NOTSET"), attrs.get("dilations"),
            attrs.get("kernel_shape"), attrs.get("pads"), attrs.get("strides"),
        )  # fmt: skip
    except ExecutionError:
        return None


def _plain_nchw_geometry(
    x: Any, w: np.ndarray, bias: np.ndarray | None, attrs: dict[str, Any], group: int = 1
) -> Any | None:
    """The geometry of a float32 2-D conv node's NCHW input ``x`` that the prepared calls
    take (of ``group`` groups: channels that fit, no negative pads, a non-empty output),
    or None: the layers run it and give its errors."""
    f32 = np.dtype(np.float32)
    if (
        type(x) is not np.ndarray
        or x.dtype != f32
        or x.ndim != 4
        or w.dtype != f32
        or w.ndim != 4
        or (bias is not None and (bias.dtype != f32 or bias.size != w.shape[0]))
        or attrs.get("group", 1) != group
    ):
        return None
    geometry = _attrs_geometry(x, w, attrs)
    if geometry is None:
        return None
    pads, out_shape = geometry[3], geometry[4]
    if (
        w.shape[1] * group != x.shape[1]
        or w.shape[0] % group
        or min(pads) < 0
        or min(out_shape) < 1
        or x.size == 0
    ):
        return None
    return geometry


def _activates(act: tuple[int, float, float] | None) -> bool:
    """Whether ``act`` (a prepared call's activation argument) asks for one: None and
    ACT_NONE's code ask for none."""
    return act is not None and act[0] != ACT_NONE


def _call_takes(xi: Any, shape: tuple[int, ...], addend: Any, out_shape: tuple[int, ...]) -> bool:
    """Whether a prepared NCHW call takes this input and addend: float32 arrays of the
    input and output shapes it was made for (no addend: None)."""
    return (
        type(xi) is np.ndarray
        and xi.dtype == _F32
        and xi.shape == shape
        and (
            addend is None
            or (type(addend) is np.ndarray and addend.dtype == _F32 and addend.shape == out_shape)
        )
    )


def prepared_nchw(
    x: np.ndarray,
    w: np.ndarray,
    packed: ConvWeight | None,
    bias: np.ndarray | None,
    attrs: dict[str, Any],
) -> Any | None:
    """A conv node's NCHW call made once for inputs like ``x``: ``call(x, addend)`` ->
    the (N, M, H', W') float32 output with the bias and ``addend`` in (or None: not a call
    it takes), running the compiled direct conv exactly as `_conv_dispatch` would for this
    geometry (`_native_direct_nchw` or `_native_direct_nchw` with ``rows``, the same kernel, arguments
    and so bits), without the conv kernel's layers of checks and routing on every call:
    about 20-30 us of a small image's conv (a diffusion UNet's 8 x 8 64-channel 3x3:
    110 us through the layers, 84 in the kernel).  None when another path runs it."""
    geometry = _plain_nchw_geometry(x, w, bias, attrs) if direct_routing() else None
    if geometry is None:
        return None
    kernel, strides, dilations, pads, out_shape = geometry
    n, c = x.shape[:2]
    m = w.shape[0]
    if _patch_product(kernel, strides, dilations, pads) or _view_product(kernel, strides, pads):
        return None  # (_conv_dispatch's first paths)
    rows = _direct_route(n, c, m, kernel, strides, dilations, pads, out_shape)
    if rows is None:
        return None
    lanes = direct_lanes()
    module = native.load("conv")
    chan = native.load("channels") if rows else None
    if lanes is None or module is None or (rows and chan is None):
        return None
    run = _DirectCall(
        module, chan, direct_weight(w, packed, lanes), bias, lanes, x.shape, m, kernel,
        strides, dilations, pads, out_shape, rows,
    )  # fmt: skip
    return _PreparedNchw(run, tuple(x.shape))


class _PreparedNchw:
    """`prepared_nchw`'s call: ``call(x, addend, act=None)`` -> the output, or None (not
    a call it takes); `held` makes its compiled form."""

    def __init__(self, run: _DirectCall, shape: tuple[int, ...]) -> None:
        self.run = run
        self.shape = shape
        self.lanes = run.lanes

    def __call__(
        self, xi: Any, addend: Any, act: tuple[int, float, float] | None = None
    ) -> np.ndarray | None:
        run = self.run
        if not _call_takes(xi, self.shape, addend, run.out_shape):
            return None
        module = native.load("conv")
        if module is None or module is not run.module or module.lanes() != self.lanes:
            return None  # the level changed: the layers decide again
        return run(xi, addend, act)

    def held(
        self,
        act: tuple[int, float, float] | None,
        nargs: int,
        residual: int | None,
        places: tuple[int, ...],
        expect: tuple[Any, ...],
        fallback: Any,
        spread: bool = False,
    ) -> Any:
        """The compiled form of calls like ``self(x, addend, act)`` from a fused node's
        inputs (native/_conv.c's `held` with `x_first` and `out_first`: the same kernel,
        arguments and so bits, without the Python around it), x its first input and the
        addend at ``residual``; None on the rows route (its copies are Python's).  Its
        output is always new: the kernel's plane epilogue may store a sum before it reads
        the addend there, so it never writes over the residual.  With ``spread`` (no
        activation) the residual is one value per item and channel, added after the
        kernel as numpy's broadcast add adds it after ``self(x, None)``."""
        run = self.run
        module = native.load("conv")
        if run.rows or module is None or module is not run.module:
            return None
        (n, h, wd, c), kernel, out_hw, strides, dilations, pads = run.geometry
        code, lo, hi = (ACT_NONE, math.nan, math.nan) if act is None else act
        return module.held(
            run.wp, False, run.lanes, run.b, (n, h, wd, c), kernel, out_hw, strides, dilations,
            pads, code, lo, hi, nargs, -1 if residual is None else residual, places, expect,
            fallback, *native.held_arrays(), True, False, None, True, spread,
        )  # fmt: skip


def prepared_pointwise(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, attrs: dict[str, Any]
) -> Any | None:
    """A 1x1, stride 1, unpadded NCHW conv node's call made once for inputs like ``x``:
    ``call(x, addend, act=None)`` -> the product on a view of the input with the bias and
    ``addend`` in, exactly `_conv_dispatch`'s `_view_product` branch and `conv_core`'s
    additions after it (so the same bits), without the layers of geometry, checks and
    routing on every call: a diffusion UNet's attention projections at 8 x 8 spent as
    long there as in the product.  None (the layers run it) for an activation, an
    addend not of the output's own shape and type, or any other input."""
    geometry = _plain_nchw_geometry(x, w, bias, attrs)
    if geometry is None:
        return None
    kernel, strides, _, pads, out_shape = geometry
    if not _view_product(kernel, strides, pads) or _patch_product(kernel, strides, [1, 1], pads):
        return None
    return _PreparedPointwise(x, w, bias, out_shape)


class _PreparedPointwise:
    """`prepared_pointwise`'s call: ``call(x, addend, act=None)`` -> the output, or None
    (not a call it takes: an activation other than none, another input); `held` makes its
    compiled form where the product runs gemm_left."""

    def __init__(
        self, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, out_shape: Sequence[int]
    ) -> None:
        n, c = x.shape[:2]
        m = w.shape[0]
        self.w, self.w2 = w, w.reshape(m, c)
        self.b = None if bias is None else bias.reshape(-1)
        self.shape, self.p_size = tuple(x.shape), math.prod(out_shape)
        self.out_nchw = (n, m, *out_shape)

    def __call__(
        self, xi: Any, addend: Any, act: tuple[int, float, float] | None = None
    ) -> np.ndarray | None:
        if _activates(act) or not _call_takes(xi, self.shape, addend, self.out_nchw):
            return None
        n, m, c, b = self.out_nchw[0], self.out_nchw[1], self.shape[1], self.b
        y = np.empty((n, m, self.p_size), dtype=np.float32)
        added = _products_with_bias(
            self.w2, xi.reshape(n, c, self.p_size), y, b, addend, source=self.w
        )
        y = y.reshape(self.out_nchw)
        if b is not None and not added:
            y += b.reshape(1, -1, 1, 1)
        if addend is not None and not added:
            y += addend
        return y

    def held(
        self,
        act: tuple[int, float, float] | None,
        nargs: int,
        residual: int | None,
        places: tuple[int, ...],
        expect: tuple[Any, ...],
        fallback: Any,
        spread: bool = False,
    ) -> Any:
        """The compiled form of calls like ``self(x, addend)`` from a fused node's inputs
        (native/_sgemm.c's `pointwise_planes`: gemm_left's sums by the weight
        `_packed_products` packs, so its bits), x its first input and the addend at
        ``residual``, for one image whose product `_packed_products` runs (float32, the
        routing's gemm_left: packed_gemm.use_left_for); None otherwise (several images,
        an activation, a residual of one value per channel: ``spread``)."""
        n, m, h, wd = self.out_nchw
        c = self.shape[1]
        mod = packed_gemm.module()
        if (
            n != 1
            or spread
            or _activates(act)
            or mod is None
            or self.w.dtype != np.float32
            or (self.b is not None and self.b.dtype != np.float32)
            or not packed_gemm.use_left_for(m, c, self.p_size)
        ):
            return None
        p = packed_gemm.packed_rows(self.w2, mod, self.w)
        if p is None:
            return None
        return packed_gemm.held_planes(
            mod, p, self.b, (h, wd), nargs, residual, places, expect, fallback
        )


def prepared_grouped_pointwise(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, attrs: dict[str, Any]
) -> Any | None:
    """A grouped 1x1, stride 1, unpadded NCHW conv node's call made once for inputs like
    ``x`` (ShuffleNet's, more than one channel a group): ``call(x, addend, act=None)`` ->
    `_conv_dispatch`'s batched product over (image, group), then the bias, ``addend``
    and a Relu in one compiled pass over the output (native/_chain.c: numpy's float32
    additions and maximum, in conv_core's and the Relu kernel's order, so their bits).
    The layers added the bias and the Relu as two numpy passes after the product, as
    long as the product itself for ShuffleNet's 136-channel 28 x 28 convs.  None for
    other inputs and activations (the layers run them), or with the compiled chain off."""
    group = int(attrs.get("group", 1))
    if group < 2 or w.ndim != 4 or w.shape[1] < 2 or chain_program.CHAIN is None:
        return None
    geometry = _plain_nchw_geometry(x, w, bias, attrs, group)
    if geometry is None:
        return None
    kernel, strides, _, pads, out_shape = geometry
    if not _view_product(kernel, strides, pads):
        return None
    return _PreparedGroupedPointwise(x, w, bias, group, out_shape)


# The epilogues of `_PreparedGroupedPointwise` by (addend given, Relu): + bias (table 0,
# when the conv has one), + addend (tensor 0), then max(v, 0).
def _grouped_epilogue(bias: bool, addend: bool, relu: bool) -> bytes:
    steps = chain_program.channel_step("Add", True, 0) if bias else b""
    if addend:
        steps += chain_program.tensor_step("Add", True, 0)
    if relu:
        steps += chain_program.program([("Relu", chain_program.NONE, True, 0.0)])
    return steps


class _PreparedGroupedPointwise:
    """`prepared_grouped_pointwise`'s call: ``call(x, addend, act=None)`` -> the output,
    or None (not a call it takes).  No compiled form (`held`): its Python is a few us
    beside a product of tens."""

    def __init__(
        self,
        x: np.ndarray,
        w: np.ndarray,
        bias: np.ndarray | None,
        group: int,
        out_shape: Sequence[int],
    ) -> None:
        n, c = x.shape[:2]
        m = w.shape[0]
        self.shape, p_size = tuple(x.shape), math.prod(out_shape)
        self.out_nchw = (n, m, *out_shape)
        self.wg = w.reshape(group, m // group, c // group)
        self.x_groups = (n, group, c // group, p_size)
        self.y_groups = (n, group, m // group, p_size)
        self.tables = () if bias is None else (np.ascontiguousarray(bias.reshape(-1)),)
        self.channels = (self.tables, m, p_size, False)
        self.programs = {
            (addend, relu): _grouped_epilogue(bias is not None, addend, relu)
            for addend in (False, True)
            for relu in (False, True)
        }

    def __call__(
        self, xi: Any, addend: Any, act: tuple[int, float, float] | None = None
    ) -> np.ndarray | None:
        relu = _activates(act)
        if (
            (relu and act[0] != ACT_RELU)  # type: ignore[index]
            or not _call_takes(xi, self.shape, addend, self.out_nchw)
            or (addend is not None and not addend.flags.c_contiguous)
            or chain_program.CHAIN is None
        ):
            return None
        if not xi.flags.c_contiguous:
            xi = self._planes(xi)
            if xi is None:
                return None
        y = np.empty(self.out_nchw, dtype=np.float32)
        np.matmul(self.wg, xi.reshape(self.x_groups), out=y.reshape(self.y_groups))
        program = self.programs[(addend is not None, relu)]
        if program:
            flat = y.reshape(-1)
            tensors = () if addend is None else (addend.reshape(-1),)
            chain_program.CHAIN.run(flat, flat, program, self.channels, tensors)
        return y

    def _planes(self, xi: np.ndarray) -> np.ndarray | None:
        """A channels-last ``xi`` (ShuffleNet's first grouped conv reads its stem's pooled
        value so) copied into C-contiguous planes by native/_channels.c's `unplace` (the
        same values; the layers' im2col copy of a 1x1 is the same matrix, so the product
        below is theirs); None for other layouts or with the kernel off."""
        chan = native.load("channels")
        n, c, h, wd = self.shape
        last = xi.transpose(0, 2, 3, 1)
        if chan is None or not last.flags.c_contiguous:
            return None
        planes = scratch("conv_grouped_planes", self.shape, _F32)
        chan.unplace(last, planes, (n, h * wd, c))
        return planes


def prepared_depthwise_nchw(
    x: np.ndarray,
    w: np.ndarray,
    packed: ConvWeight | None,
    bias: np.ndarray | None,
    attrs: dict[str, Any],
) -> Any | None:
    """A 2-D depthwise NCHW conv node's call (one channel a group, no multiplier) made
    once for inputs like ``x``: ``call(x, addend, act=None)`` -> `_native_depthwise_nchw`'s
    copies and kernel for this geometry (`_conv_dispatch`'s route for it, so its bits),
    the chain's activation in the kernel's epilogue (its operations: the Relu, Clip or
    HardSwish kernels' values), without the conv kernel's layers: ShuffleNet's 272
    channels of 14 x 14 took 91 us a call, 40 of them the layers around a 25 us kernel.
    None for an addend (the kernel reads it channels-last), a non-contiguous x, or other
    inputs (the layers run them)."""
    if x.ndim != 4 or w.ndim != 4 or w.shape[1] != 1:
        return None
    c = x.shape[1]
    if c < 2 or w.shape[0] != c or int(attrs.get("group", 1)) != c:
        return None
    geometry = _plain_nchw_geometry(x, w, bias, attrs, c)
    depthwise = native.load("depthwise")
    chan = native.load("channels")
    if geometry is None or depthwise is None or chan is None or native.level() is None:
        return None
    kernel, strides, dilations, pads, out_shape = geometry
    wk = _depthwise_taps(w, packed, kernel)
    return _PreparedDepthwiseNchw(x, wk, bias, strides, dilations, pads, out_shape)


class _PreparedDepthwiseNchw:
    """`prepared_depthwise_nchw`'s call: ``call(x, addend, act=None)`` -> the output, or
    None (not a call it takes).  No compiled form (`held`): its copies, when it makes
    them, are another module's."""

    def __init__(
        self,
        x: np.ndarray,
        wk: np.ndarray,
        bias: np.ndarray | None,
        strides: Sequence[int],
        dilations: Sequence[int],
        pads: Sequence[int],
        out_shape: Sequence[int],
    ) -> None:
        n, c, h, wd = x.shape
        oh, ow = out_shape
        self.shape = tuple(x.shape)
        self.out_nchw = (n, c, oh, ow)
        self.wk = wk
        self.w_planes = np.ascontiguousarray(wk.reshape(-1, c).T)  # (C, KH * KW)
        self.planes = (n, c, h, wd)
        self.b = None if bias is None else np.ascontiguousarray(bias.reshape(-1))
        self.in_last, self.out_last = (n, h, wd, c), (n, oh, ow, c)
        self.place_args = (n, h * wd, c, c, 0)
        self.unplace_args = (n, oh * ow, c)
        self.geometry = (
            (n, h, wd, c), (wk.shape[0], wk.shape[1]), (oh, ow), tuple(strides),
            tuple(dilations), (pads[0], pads[1]),
        )  # fmt: skip

    def __call__(
        self, xi: Any, addend: Any, act: tuple[int, float, float] | None = None
    ) -> np.ndarray | None:
        if addend is not None or not _call_takes(xi, self.shape, None, self.out_nchw):
            return None
        chan, depthwise = native.load("channels"), native.load("depthwise")
        if not xi.flags.c_contiguous or chan is None or depthwise is None:
            return None
        code, lo, hi = (ACT_NONE, math.nan, math.nan) if act is None else act
        y = np.empty(self.out_nchw, dtype=_F32)
        if depthwise.conv_nchw(
            xi, self.w_planes, self.b, None, y, self.planes, *self.geometry[1:], code, lo, hi
        ):
            return y
        xl = scratch("conv_dw_in", self.in_last, _F32, aligned=True)
        chan.place(xi, xl, self.place_args, True)
        out = scratch("conv_dw_sum", self.out_last, _F32, aligned=True)
        depthwise.conv_nhwc(xl, self.wk, self.b, None, out, *self.geometry, code, lo, hi)
        chan.unplace(out, y, self.unplace_args)
        return y


def prepared_patches(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, attrs: dict[str, Any]
) -> Any | None:
    """A patch embedding's call made once for inputs like ``x`` (a conv whose kernel
    equals its stride, unpadded, of at least PATCH_AREA: `_conv_dispatch`'s `_patch_conv`
    branch): ``call(x, addend, act=None)`` -> its product with `conv_core`'s bias and
    addend added after it (the same operations, so the same bits), without the layers of
    geometry, checks and routing on every call (a ViT's 3 -> 128 embedding of a 96 px
    image spent longer there than in its product); None (the layers run it) for an
    activation, another input or another conv."""
    geometry = _plain_nchw_geometry(x, w, bias, attrs)
    if geometry is None:
        return None
    kernel, strides, dilations, pads, out_shape = geometry
    if len(kernel) != 2 or not _patch_product(kernel, strides, dilations, pads):
        return None
    return _PreparedPatches(x, w, bias, kernel, out_shape)


class _PreparedPatches:
    """`prepared_patches`' call: ``call(x, addend, act=None)`` -> the output, or None."""

    def __init__(
        self,
        x: np.ndarray,
        w: np.ndarray,
        bias: np.ndarray | None,
        kernel: Sequence[int],
        out_shape: Sequence[int],
    ) -> None:
        self.w, self.kernel, self.out_hw = w, tuple(kernel), tuple(out_shape)
        self.b = None if bias is None else bias.reshape((1, -1, 1, 1))
        self.shape = tuple(x.shape)
        self.out_nchw = (x.shape[0], w.shape[0], *out_shape)

    def __call__(
        self, xi: Any, addend: Any, act: tuple[int, float, float] | None = None
    ) -> np.ndarray | None:
        if _activates(act) or not _call_takes(xi, self.shape, addend, self.out_nchw):
            return None
        y = _patch_conv(xi, self.w, self.kernel, self.out_hw)
        if self.b is not None:
            y += self.b
        if addend is not None:
            y += addend
        return y


def prepared_planar(
    x: np.ndarray,
    w: np.ndarray,
    packed: ConvWeight | None,
    bias: np.ndarray | None,
    attrs: dict[str, Any],
) -> Any | None:
    """`prepared_nchw` for a 1-D conv: ``call(x, addend, act=None)`` running the 2-D conv
    of height 1 that `_planar_dispatch` runs (the same weight, route and kernel, so the
    same bits), or None when that is not the direct kernel.  Through the layers, each of
    a TCN's 1-D convs went conv -> conv_core -> _conv_dispatch -> _planar_dispatch ->
    _conv_dispatch before its kernel."""
    f32 = np.dtype(np.float32)
    if (
        type(x) is not np.ndarray
        or x.ndim != 3
        or x.dtype != f32
        or w.dtype != f32
        or w.ndim != 3
        or attrs.get("group", 1) != 1
        or not planar_routing()
    ):
        return None
    geometry = _attrs_geometry(x, w, attrs)
    if geometry is None:
        return None
    kernel, strides, dilations, pads, out_shape = geometry
    n, c, length = x.shape
    if c < _PLANAR_MIN_STRIDED_CHANNELS and strides[0] != 1:
        return None  # `_conv_dispatch` keeps it on the 1-D paths
    planar = None if packed is None else packed.planar()
    flat = {
        "kernel_shape": [1, kernel[0]], "strides": [1, strides[0]],
        "dilations": [1, dilations[0]], "pads": [0, pads[0], 0, pads[1]],
    }  # fmt: skip
    call2 = prepared_nchw(
        x.reshape(n, c, 1, length),
        planar_weight(w) if planar is None else planar.array,
        planar,
        bias,
        flat,
    )
    if call2 is None:
        return None
    m, shape, out = w.shape[0], tuple(x.shape), out_shape[0]

    def call(
        xi: Any, addend: Any, act: tuple[int, float, float] | None = None
    ) -> np.ndarray | None:
        if type(xi) is not np.ndarray or xi.shape != shape:
            return None
        if addend is not None:
            if type(addend) is not np.ndarray or addend.shape != (n, m, out):
                return None
            addend = addend.reshape(n, m, 1, out)
        y = call2(xi.reshape(n, c, 1, length), addend, act)
        return None if y is None else y.reshape(n, m, out)

    return call


def prepared_direct(
    x: np.ndarray,
    w: np.ndarray,
    packed: ConvWeight | None,
    bias: np.ndarray | None,
    attrs: dict[str, Any],
) -> Any | None:
    """The node's prepared direct call for ``x``'s rank: `prepared_nchw` (2-D) or
    `prepared_planar` (1-D), ``call(x, addend, act=None)``; None for any other input."""
    if type(x) is not np.ndarray:
        return None
    if x.ndim == 4:
        return (
            prepared_pointwise(x, w, bias, attrs)
            or prepared_patches(x, w, bias, attrs)
            or prepared_nchw(x, w, packed, bias, attrs)
            or prepared_grouped_pointwise(x, w, bias, attrs)
            or prepared_depthwise_nchw(x, w, packed, bias, attrs)
        )
    if x.ndim == 3:
        return prepared_planar(x, w, packed, bias, attrs)
    return None


def direct_weight(w: np.ndarray, packed: ConvWeight | None, lanes: int) -> np.ndarray:
    """``w`` packed for the direct conv at ``lanes``: kept by ``packed`` (fused runs) or
    by the weight cache (a constant initializer), else packed for this call."""
    if packed is not None:
        return packed.direct(lanes)
    return _weight_cache.derived(  # type: ignore[no-any-return]
        "conv_direct", [w], (lanes,), lambda: pack_direct(w, lanes)
    )


def _native_direct_nchw(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    addend: np.ndarray | None,
    packed: ConvWeight | None,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
    rows: bool = False,
) -> tuple[np.ndarray, bool] | None:
    """A 2-D float32 plain conv of the channels-first ``x`` by the compiled direct conv,
    reading x and writing the (N, M, H', W') output in their own layout, the bias and
    an (N, M, H', W') float32 addend in its pass: (output, True); None when the kernel
    is off or routed off, or the arrays do not fit it (the numpy paths run).  ``rows``:
    as onnxruntime runs a conv outside its NCHWc chains instead (`direct_rows_pays`):
    x copied into channels-last rows (native/_channels.c `place`, 8 x 8 blocks
    transposed in registers), the kernel rows to rows with the bias, the result copied
    back into planes (`unplace`), then + ``addend``."""
    f32 = np.dtype(np.float32)
    lanes = direct_lanes()
    module = native.load("conv")
    chan = native.load("channels") if rows else None
    if (
        lanes is None
        or module is None
        or (rows and chan is None)
        or x.dtype != f32
        or w.dtype != f32
        or (bias is not None and bias.dtype != f32)
        or min(pads) < 0
        or min(out_shape) < 1
        or x.size == 0
        or not direct_routing()
    ):
        return None
    call = _DirectCall(
        module, chan, direct_weight(w, packed, lanes), bias, lanes, x.shape, w.shape[0],
        kernel, strides, dilations, pads, out_shape, rows,
    )  # fmt: skip
    return call(x, addend), True


def _depthwise_taps(w: np.ndarray, packed: ConvWeight | None, kernel: Sequence[int]) -> np.ndarray:
    """A depthwise weight (C, 1, kh, kw) as the channels-last kernel's (kh, kw, C) taps:
    kept by ``packed`` (fused runs), else transposed for this call."""
    kh, kw = kernel
    c = w.shape[0]
    taps = packed.taps() if packed is not None else None
    if taps is not None:
        return taps.reshape(kh, kw, c)
    return np.ascontiguousarray(w.reshape(c, kh * kw).T).reshape(kh, kw, c)


def _native_depthwise_nchw(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    packed: ConvWeight | None,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
) -> np.ndarray | None:
    """A 1-D or 2-D float32 depthwise conv (one channel per group, no multiplier) of
    the channels-first ``x`` plus ``bias``, by the compiled kernel on channels-last
    copies (a fresh (N, C, *out_shape)); None when the kernel is off or the dtypes are
    not float32 (the numpy paths run)."""
    f32 = np.dtype(np.float32)
    if (
        x.dtype != f32
        or w.dtype != f32
        or (bias is not None and bias.dtype != f32)
        or native.level() is None
        or min(out_shape) < 1
        or x.size == 0
    ):
        return None
    n, c = x.shape[:2]
    shape = (n, c, *out_shape)
    if len(kernel) == 1:  # a 1-D conv is a 2-D one of height 1
        x = x.reshape(n, c, 1, -1)
        kernel, strides, dilations = (1, *kernel), (1, *strides), (1, *dilations)
        pads, out_shape = (0, pads[0], 0, pads[1]), (1, *out_shape)
    kh, kw = kernel
    module = native.load("depthwise")
    if module is not None and x.flags.c_contiguous:
        # Planes read where they lie (native/_depthwise.c's conv_nchw, the same bits as
        # the channels-last kernel below), where it runs this geometry.
        y = np.empty((n, c, *out_shape), dtype=f32)
        b = None if bias is None else np.ascontiguousarray(bias.reshape(-1))
        geometry = ((n, c, *x.shape[2:]), (kh, kw), tuple(out_shape), tuple(strides))
        if module.conv_nchw(
            x, np.ascontiguousarray(w.reshape(c, kh * kw)), b, None, y, *geometry,
            tuple(dilations), (pads[0], pads[1]), ACT_NONE, math.nan, math.nan,
        ):  # fmt: skip
            return y.reshape(shape)
    wk = _depthwise_taps(w, packed, kernel)
    # The layout copies by native/_channels.c (8 x 8 blocks transposed in registers):
    # numpy's strided copies took 100-145 us each for 64 channels at 32 x 32, as long as
    # the conv itself (a ConvNeXt-style block's depthwise conv runs here, between NCHW
    # nodes).  Copies either way: the same values.
    chan = native.load("channels")
    h, wd = x.shape[2:]
    if chan is not None:
        xl = scratch("conv_dw_in", (n, h, wd, c), f32, aligned=True)
        chan.place(np.ascontiguousarray(x), xl, (n, h * wd, c, c, 0), True)
    else:
        xl = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    out = scratch("conv_dw_sum", (n, *out_shape, c), f32, aligned=True)
    b = None if bias is None else np.ascontiguousarray(bias.reshape(-1))
    if not native_depthwise(xl, wk, b, None, out, strides, dilations, pads):
        return None
    y = np.empty((n, c, *out_shape), dtype=f32)
    if chan is not None:
        chan.unplace(out, y, (n, math.prod(out_shape), c))
    else:
        y[...] = np.moveaxis(out, -1, 1)
    return y.reshape(shape)


def _plus(y: np.ndarray, addend: np.ndarray | None) -> np.ndarray:
    """``y`` (a fresh conv output) with the residual ``addend`` added in place."""
    if addend is not None:
        y += addend
    return y


def _products_with_bias(
    w: np.ndarray,
    cols: np.ndarray,
    out: np.ndarray,
    bias: np.ndarray | None,
    addend: np.ndarray | None = None,
    source: np.ndarray | None = None,
) -> bool:
    """out[b] = w @ cols[b] for each batch item; True when ``bias`` (M,) and ``addend``
    (any shape reshaping to out's) are in too.

    Small items (each output below ``blas.SMALL_OUTPUT``): one (batched) product into
    ``out``, then the bias and addend in one pass.  Larger ones with direct BLAS: the
    bias (and addend) written first and the product added onto them inside the GEMM, one
    pass that writes the output instead of a second pass that reads and writes it after
    the product.  ``source``: the conv's weight array that
    ``w`` views; when it is a constant, the float32 products of the shapes where that
    is faster run the compiled GEMM by ``w`` packed once (`_packed_products`)."""
    if source is not None and _packed_products(w, cols, out, bias, addend, source):
        return True
    if (
        (bias is not None or addend is not None)
        and out[0].size < blas.SMALL_OUTPUT
        and out.dtype == w.dtype == cols.dtype
    ):
        # Small items: one (batched) product into the output, then the bias (and
        # addend) in one pass, where item by item each product was a fresh array added
        # onto the prefilled output (blas.gemm's small-output way): a TCN's 1x1 skip
        # conv, 16 -> 64 channels over 4 x 256 steps, 103-106 -> 66 us; 8 x 32 x 128, 32
        # channels, 80-116 -> 56-72; one image: a 64-channel 3x3 at 8 x 8 (im2col)
        # 110-118 -> 79 in a Mul -> Conv -> Relu model's run, a 1x1 32 -> 64 at 16 x 16
        # 75-83 -> 63-65.
        np.matmul(w, cols, out=out)
        if addend is not None and bias is not None:
            np.add(out, np.add(addend.reshape(out.shape), bias[:, None]), out=out)
        elif addend is not None:
            np.add(out, addend.reshape(out.shape), out=out)
        else:
            np.add(out, bias[:, None], out=out)  # type: ignore[index]
        return True
    if (bias is not None or addend is not None) and blas.available():
        if addend is not None and bias is not None:
            np.add(addend.reshape(out.shape), bias[:, None], out=out)
        elif addend is not None:
            out[...] = addend.reshape(out.shape)
        else:
            out[...] = bias[:, None]  # type: ignore[index]
        for b in range(out.shape[0]):
            blas.gemm(w, cols[b], out[b], accumulate=True)
        return True
    for b in range(out.shape[0]):  # 2-D products: numpy's stacked matmul was slower
        blas.gemm(w, cols[b], out[b])
    return False


def _packed_products(
    w: np.ndarray,
    cols: np.ndarray,
    out: np.ndarray,
    bias: np.ndarray | None,
    addend: np.ndarray | None,
    source: np.ndarray,
) -> bool:
    """`_products_with_bias` by the compiled GEMM (kernels/packed_gemm.py, native/
    _sgemm.c's gemm_left): the constant ``w`` packed once, bias and addend added to the
    accumulators; False (nothing written) when it does not apply or does not pay."""
    f32 = np.float32
    if w.dtype != f32 or cols.dtype != f32 or out.dtype != f32 or not out.flags.c_contiguous:
        return False
    if not packed_gemm.use_left_for(w.shape[0], w.shape[1], cols.shape[2]):
        return False
    if not all(cols[b].flags.c_contiguous for b in range(cols.shape[0])):
        return False
    mod = packed_gemm.module()
    if mod is None:
        return False
    p = packed_gemm.packed_rows(w, mod, source)
    if p is None:
        return False
    rows = None if bias is None else np.ascontiguousarray(bias.reshape(-1), dtype=f32)
    add = None
    if addend is not None:
        if addend.dtype != f32:
            return False
        add = np.ascontiguousarray(addend.reshape(out.shape))
    for b in range(out.shape[0]):
        packed_gemm.left_matmul_packed(
            mod, p, cols[b], out[b], bias=rows, addend=None if add is None else add[b]
        )
    return True


@lru_cache(maxsize=256)
def _flat_geometry(
    spatial: tuple[int, ...],
    pads: tuple[int, ...],
    kernel: tuple[int, ...],
    dilations: tuple[int, ...],
    out_rows: int,
    strides: tuple[int, ...],
) -> tuple[tuple[int, ...], int, list[tuple[int, int]], list[tuple[int, ...]], int, int]:
    """_FlatLayout's geometry, computed once per conv shape: (per-phase padded image size,
    wide, (phase, shift) per kernel offset, phases, image length, buffer length)."""
    rank = len(kernel)
    full = [s + pads[i] + pads[i + rank] for i, s in enumerate(spatial)]
    # Per-phase image size (the common, largest one).
    padded = tuple(-(-p // s) for p, s in zip(full, strides))
    flat_len = math.prod(padded)
    wide = out_rows * (flat_len // padded[0])
    steps = [math.prod(padded[a + 1 :]) for a in range(rank)]
    phases = list(product(*(range(s) for s in strides)))
    phase_index = {ph: i for i, ph in enumerate(phases)}
    taps: list[tuple[int, int]] = []
    for off in product(*(range(k) for k in kernel)):
        pos = [o * d for o, d in zip(off, dilations)]
        ph = tuple(p % s for p, s in zip(pos, strides))
        shift = sum((p // s) * step for p, s, step in zip(pos, strides, steps))
        taps.append((phase_index[ph], shift))
    length = max(flat_len, max(t[1] for t in taps) + wide)
    return padded, wide, taps, phases, flat_len, length


class _FlatLayout:
    """The zero-padded input with its spatial axes flattened, plus a zero tail, so that
    each kernel offset of the conv reads one contiguous shifted slice of length ``wide``
    (the output rows on a padded-width grid).  A strided conv is split into its stride
    phases first (x[..., p0::s0, p1::s1, ...]): every kernel offset then falls in one
    phase, again as a plain shifted slice; one extra copy of the input instead of an
    im2col of kernel-size copies."""

    def __init__(
        self,
        x: np.ndarray,
        pads: Sequence[int],
        kernel: Sequence[int],
        dilations: Sequence[int],
        out_shape: Sequence[int],
        strides: Sequence[int] | None = None,
    ) -> None:
        n, c = x.shape[:2]
        rank = len(kernel)
        st = tuple(strides) if strides is not None else (1,) * rank
        self.out_shape = list(out_shape)
        geometry = _flat_geometry(
            tuple(x.shape[2:]), tuple(pads), tuple(kernel), tuple(dilations), out_shape[0], st
        )
        padded, self.wide, self.taps, phases, flat_len, length = geometry
        self.padded = list(padded)
        self.flat = scratch("conv_flat", (n, c, len(phases), length), x.dtype)
        if len(phases) == 1:
            # Zeros only where x does not land (the pad borders and the tail): the
            # reused buffer holds the previous conv's values, and a fill of all of it
            # would be one more pass over the image.
            image = self.flat[:, :, 0, :flat_len].reshape(n, c, *self.padded)
            lead = (slice(None), slice(None))
            for d, size in enumerate(x.shape[2:]):
                before = (slice(None),) * d
                image[(*lead, *before, slice(0, pads[d]))] = 0
                image[(*lead, *before, slice(pads[d] + size, None))] = 0
            self.flat[:, :, 0, flat_len:] = 0
            inner: tuple[Any, ...] = lead + tuple(
                slice(pads[i], pads[i] + s) for i, s in enumerate(x.shape[2:])
            )
            image[inner] = x
            return
        self.flat.fill(0)
        # Each phase straight from x (no padded copy first): phase row i is padded row
        # p + i*s, that is x row p + i*s - pad; rows outside x stay zero.
        for i, ph in enumerate(phases):
            src: list[slice] = []
            dst: list[slice] = []
            for p, s, pad, size in zip(ph, st, pads[:rank], x.shape[2:]):
                first = max(0, -(-(pad - p) // s))  # first phase row inside x
                start = p + first * s - pad
                count = len(range(start, size, s))
                src.append(slice(start, size, s))
                dst.append(slice(first, first + count))
            image = self.flat[:, :, i, :flat_len].reshape(n, c, *self.padded)
            image[(slice(None), slice(None), *dst)] = x[(slice(None), slice(None), *src)]

    def view(self, tap: int) -> np.ndarray:
        phase, shift = self.taps[tap]
        return self.flat[:, :, phase, shift : shift + self.wide]

    def crop(self, grid: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        """(N, M, wide) results on the padded-width grid -> a fresh (N, M, *out_shape),
        plus the per-channel ``bias`` in the same pass when given."""
        n, m = grid.shape[:2]
        full = grid.reshape(n, m, self.out_shape[0], *self.padded[1:])
        index: tuple[Any, ...] = (slice(None), slice(None), slice(None)) + tuple(
            slice(0, o) for o in self.out_shape[1:]
        )
        if bias is None:
            # A copy even when the crop is the whole grid (a 1x1 depthwise conv without
            # padding): the grid is a reused scratch buffer, and handing it out made
            # every such conv's output the same array as the next one's.
            return np.array(full[index], order="C", copy=True)
        out = np.empty((n, m, *self.out_shape), dtype=grid.dtype)
        return np.add(full[index], bias.reshape((1, m) + (1,) * len(self.out_shape)), out=out)


def _shifted_conv(
    layout: _FlatLayout,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    packed: ConvWeight | None = None,
) -> np.ndarray:
    """Conv without im2col: one GEMM per kernel offset on a shifted slice that BLAS
    reads in place (row stride = image size), each product added onto the running sum
    inside the GEMM (beta = 1), in a reused scratch buffer; the crop to the output (with
    the bias) is the only fresh array."""
    n = layout.flat.shape[0]
    taps = (packed or ConvWeight(w)).taps()
    flat = layout.flat
    acc = scratch("conv_acc", (n, w.shape[0], layout.wide), flat.dtype)
    raw = blas.raw_gemm(flat.dtype)
    if raw is not None and taps.dtype == flat.dtype:
        # Addresses computed here once: 9 products per image at a few microseconds each.
        item = flat.itemsize
        m, c = taps.shape[1:]
        t0, f0, a0 = taps.ctypes.data, flat.ctypes.data, acc.ctypes.data
        for b in range(n):
            for k_index, (phase, shift) in enumerate(layout.taps):
                src = f0 + b * flat.strides[0] + phase * flat.strides[2] + shift * item
                raw(
                    m,
                    layout.wide,
                    c,
                    t0 + k_index * taps.strides[0],
                    c,
                    src,
                    flat.strides[1] // item,
                    a0 + b * acc.strides[0],
                    layout.wide,
                    k_index > 0,
                )
        return layout.crop(acc, bias)
    for b in range(n):
        for k_index in range(len(layout.taps)):
            blas.gemm(taps[k_index], layout.view(k_index)[b], acc[b], accumulate=k_index > 0)
    return layout.crop(acc, bias)


# Below this many input channels the per-offset GEMMs of _shifted_conv are too thin
# (K = C); stacking the offsets into one K = C*k GEMM wins (measured on RGB stems).
_FEW_CHANNELS = 8


def _flat_im2col_conv(
    layout: _FlatLayout, w: np.ndarray, bias: np.ndarray | None = None
) -> np.ndarray:
    """Few-channel conv: im2col from the flat layout (one contiguous slice copy per kernel
    offset), then one GEMM with K = k*C, done in column blocks of output positions so
    each block's im2col stays in cache until its GEMM reads it (an RGB 7x7 stem's whole
    im2col is 7.5 MB)."""
    m, c = w.shape[:2]
    n = layout.flat.shape[0]
    k = len(layout.taps)
    wide = layout.wide
    dt = layout.flat.dtype
    wk = np.ascontiguousarray(w.reshape(m, c, k).transpose(0, 2, 1)).reshape(m, k * c)
    if wk.dtype != dt:
        wk = wk.astype(dt)
    acc = scratch("conv_acc", (n, m, wide), dt)
    block = max(256, min(wide, _IM2COL_BLOCK_BYTES // (k * c * dt.itemsize)))
    col = scratch("conv_col", (k, c, block), dt)
    for b in range(n):
        for p0 in range(0, wide, block):
            p1 = min(p0 + block, wide)
            part = col[:, :, : p1 - p0]
            for k_index in range(k):
                part[k_index] = layout.view(k_index)[b, :, p0:p1]
            blas.gemm(wk, part.reshape(k * c, p1 - p0), acc[b, :, p0:p1])
    return layout.crop(acc, bias)


# Bytes of im2col per block in _flat_im2col_conv: half a core's L2 cache (measured in
# the ResNet-50 stem: 1 MB blocks 5.7 ms, one 7.5 MB block 6.5 ms).
_IM2COL_BLOCK_BYTES = 1 << 20


def _depthwise_flat(
    layout: _FlatLayout, w: np.ndarray, group: int, bias: np.ndarray | None = None
) -> np.ndarray:
    """Stride-1 depthwise conv on the flat layout: long contiguous slices per offset."""
    n = layout.flat.shape[0]
    mult = w.shape[0] // group
    wk = w.reshape(group, mult, -1)
    if mult == 1:
        # Per channel, the kernel offsets' shifted rows side by side (one contiguous copy
        # each) and one product of the channel's weights with them: numpy's stacked
        # matmul runs a BLAS product per channel, in C.  Measured 2.4-2.8x faster than a
        # multiply and an add per offset (two passes each) on MobileNet's shapes.  The
        # channels go in blocks whose copies stay in the L2 cache.
        wide = layout.wide
        taps = len(layout.taps)
        dt = layout.flat.dtype
        out = scratch("conv_acc", (n, group, wide), dt)  # crop copies out
        block = max(1, _DEPTHWISE_COL_BYTES // (taps * wide * dt.itemsize))
        col = scratch("conv_col", (min(block, group), taps, wide), dt)
        weights = wk.astype(dt, copy=False)  # (group, 1, taps)
        for b in range(n):
            for c0 in range(0, group, block):
                c1 = min(c0 + block, group)
                part = col[: c1 - c0]
                for k_index in range(taps):
                    part[:, k_index] = layout.view(k_index)[b, c0:c1]
                np.matmul(weights[c0:c1], part, out=out[b, c0:c1, None, :])
        return layout.crop(out, bias)
    windows = [(ph, slice(sh, sh + layout.wide)) for ph, sh in layout.taps]
    grid = _depthwise_blocks(layout.flat, wk, windows, (layout.wide,))
    return layout.crop(grid.reshape(n, group * mult, layout.wide), bias)


# Bytes of the per-channel offset copies in one block of _depthwise_flat: half a core's
# L2 cache.
_DEPTHWISE_COL_BYTES = 512 * 1024


def channels_last_pays(
    channels: int, out_shape: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> bool:
    """Whether the channels-last depthwise conv beats the channels-first one: the deep,
    small-image layers of a MobileNet (measured on MobileNetV3's shapes).  The einsum
    path (stride 1 or dilation 1 along the last axis) is 1.3-5x faster up to 32x32
    outputs and slower from 56x56 on, where the channels-first rows are long and the
    image leaves the cache.  The per-offset path (strided and dilated) is faster from
    about 8 channels per output column on (below, the two layout copies cost more than
    the shorter loops save)."""
    if strides[-1] == 1 or dilations[-1] == 1:
        return channels >= 16 and math.prod(out_shape) <= 1024
    return channels >= 32 and channels >= 8 * out_shape[-1]


def _depthwise_channels_last(
    x: np.ndarray,
    w: np.ndarray,
    packed: ConvWeight | None,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
) -> np.ndarray:
    """Depthwise conv (one input channel per output channel) as a stencil over a padded
    channels-last copy of the input.  The windows of every kernel offset are one strided
    view of that copy.  With stride 1 along the last axis a window row is ``out_w``
    consecutive pixels, so that axis and the channels merge into one contiguous axis of
    out_w*C (the weights tiled to match), and numpy's einsum sums weight x window over
    the kernel axes in one pass over the view: 3-5x faster than the channels-first
    multiply and add per offset on MobileNetV3's 5x5 layers, and no temporary.
    Returns the (N, *out, C) sum in a reused buffer; the caller moves it back to
    channels-first (a fresh array) before the next conv."""
    n, c = x.shape[:2]
    rank = len(kernel)
    spatial = x.shape[2:]
    padded = [s + pads[i] + pads[i + rank] for i, s in enumerate(spatial)]
    taps = packed.taps() if packed is not None else None
    wk = taps.reshape(taps.shape[0], c) if taps is not None else w.reshape(c, -1).T
    wk = wk.reshape(*kernel, c)
    sw = strides[-1]
    if sw > 1 and dilations[-1] == 1:
        # Each stride phase's columns straight from x: one copy of the input in all,
        # instead of the padded image and then a copy of each phase out of it.
        phases = [
            _channels_last_padded(x, pads, padded, (p, sw)) for p in range(min(sw, kernel[-1]))
        ]
        return _depthwise_phase_sums(phases, wk, strides, dilations, out_shape, packed)
    xl = _channels_last_padded(x, pads, padded, None)
    if sw == 1:
        return _depthwise_phase_sums([xl], wk, strides, dilations, out_shape, packed)
    # Strided and dilated along the last axis: a multiply and an add per kernel offset
    # over (N, *out, C) windows.
    wk = wk.reshape(-1, c)
    acc = scratch("conv_dw_sum", (n, *out_shape, c), x.dtype)  # copied out by the caller
    tmp = scratch("conv_nhwc_tmp", acc.shape, x.dtype)
    for k_index, off in enumerate(product(*(range(k) for k in kernel))):
        window = offset_slices([o * d for o, d in zip(off, dilations)], strides, out_shape)
        src = xl[(slice(None), *window)]
        if k_index == 0:
            np.multiply(src, wk[k_index], out=acc)
        else:
            np.multiply(src, wk[k_index], out=tmp)
            acc += tmp
    return acc


def _channels_last_padded(
    x: np.ndarray,
    pads: Sequence[int],
    padded: Sequence[int],
    phase: tuple[int, int] | None,
) -> np.ndarray:
    """x (N, C, *spatial) as its zero-padded channels-last image (N, *padded, C), in a
    reused buffer; with ``phase`` = (p, s) only the image's columns p, p+s, p+2s, ...
    (one stride phase along the last axis).  Only the pad borders are zeroed: the input
    overwrites the rest of the buffer."""
    n, c = x.shape[:2]
    rank = x.ndim - 2
    spatial = x.shape[2:]
    p, s = phase if phase is not None else (0, 1)
    cols = len(range(p, padded[-1], s))
    image = scratch(f"conv_nhwc{p}", (n, *padded[:-1], cols, c), x.dtype)
    # Image column j is padded column p + j*s, that is input column p + j*s - pad.
    pad_w = pads[rank - 1]
    first = max(0, -(-(pad_w - p) // s))  # the first image column inside x
    start = p + first * s - pad_w
    count = min(len(range(start, spatial[-1], s)), cols - first)
    lo = [*pads[: rank - 1], first]
    hi = [*(pads[d] + spatial[d] for d in range(rank - 1)), first + max(count, 0)]
    sizes = [*padded[:-1], cols]
    for d in range(rank):
        before = (slice(None),) * (d + 1)
        if lo[d]:
            image[(*before, slice(0, lo[d]))] = 0
        if hi[d] < sizes[d]:
            image[(*before, slice(hi[d], None))] = 0
    if count > 0:
        source = np.moveaxis(x, 1, -1)[..., start : start + (count - 1) * s + 1 : s, :]
        image[(slice(None), *(slice(a, b) for a, b in zip(lo, hi)))] = source
    return image


def _depthwise_phase_sums(
    images: list[np.ndarray],
    wk: np.ndarray,
    strides: Sequence[int],
    dilations: Sequence[int],
    out_shape: Sequence[int],
    packed: ConvWeight | None = None,
) -> np.ndarray:
    """sum over kernel offsets of wk[offset] * window(offset) for a padded channels-last
    image (N, *padded, C) given as ``images``, its stride phases along the last axis
    (_channels_last_padded; the one whole image for stride 1), and weights ``wk``
    (*kernel, C), by einsum; ``packed``, when given, is the same weight holding its
    tiled forms (ConvWeight.depthwise_tile).

    The last spatial axis and the channels are summed as one contiguous axis of out_w*C
    (the weights tiled out_w times): the windows of one output row are then out_w
    consecutive pixels.  With stride s > 1 along that axis the image is first split into
    its s phases (pixels p, p+s, p+2s, ...: one copy of the input in all): within a
    phase the kernel columns p, p+s, ... read consecutive pixels again, so each phase is
    one einsum over its own columns of the kernel (dilation 1 along that axis)."""
    n, c = images[0].shape[0], images[0].shape[-1]
    rank = images[0].ndim - 2
    dt = images[0].dtype
    kernel = wk.shape[:-1]
    sw, last = strides[-1], out_shape[-1]
    letters = "abcdefghijklmnopqrstuvw"
    o_sub, k_sub = letters[: rank - 1], letters[rank - 1 : 2 * rank - 1]
    subs = f"z{o_sub}{k_sub}y,{k_sub}y->z{o_sub}y"
    total: np.ndarray | None = None
    for phase in range(min(sw, kernel[-1])):
        image = images[phase]
        sub = wk[..., phase::sw, :]
        st = image.strides
        shape = (n, *out_shape[:-1], *sub.shape[:-1], last * c)
        steps = (
            st[0],
            *(st[1 + i] * strides[i] for i in range(rank - 1)),
            *(st[1 + i] * dilations[i] for i in range(rank - 1)),
            st[-2] * (dilations[-1] if sw == 1 else 1),
            st[-1],
        )
        view = np.lib.stride_tricks.as_strided(image, shape, steps, writeable=False)
        if packed is not None:
            tiled = packed.depthwise_tile(kernel, phase, sw, last)
        else:
            tiled = _tile_columns(wk, phase, sw, last)
        # Reused buffers (the caller copies the sum out channels-first): no fresh array
        # per phase.
        if total is None:
            total = scratch("conv_dw_sum", (n, *out_shape[:-1], last * c), dt)
            np.einsum(subs, view, tiled, out=total)
        else:
            part = scratch("conv_dw_part", total.shape, dt)
            np.einsum(subs, view, tiled, out=part)
            total += part
    assert total is not None  # kernel[-1] >= 1
    return total.reshape(n, *out_shape, c)


def _nchw_with_bias(y: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """A channels-last (N, *spatial, C) result as a fresh channels-first array, plus the
    per-channel ``bias`` in the same pass."""
    n, c = y.shape[0], y.shape[-1]
    out = np.empty((n, c, *y.shape[1:-1]), dtype=y.dtype)
    moved = np.moveaxis(y, -1, 1)
    if bias is None:
        out[...] = moved
    else:
        np.add(moved, bias.reshape((1, c) + (1,) * (y.ndim - 2)), out=out)
    return out


def depthwise(
    xp: np.ndarray,
    w: np.ndarray,
    group: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_shape: Sequence[int],
) -> np.ndarray:
    n = xp.shape[0]
    mult = w.shape[0] // group
    wk = w.reshape(group, mult, -1)
    offsets = list(product(*(range(k) for k in kernel)))
    windows = [
        offset_slices([o * d for o, d in zip(off, dilations)], strides, out_shape)
        for off in offsets
    ]
    return _depthwise_blocks(xp, wk, windows, tuple(out_shape)).reshape(n, group * mult, *out_shape)


def _depthwise_blocks(
    xp: np.ndarray,
    wk: np.ndarray,
    windows: Sequence[tuple[Any, ...]],
    out_shape: tuple[int, ...],
) -> np.ndarray:
    """sum_k wk[c, m, k] * xp[n, c, window_k]  ->  (N, C, mult, *out_shape)."""
    n = xp.shape[0]
    group, mult = wk.shape[:2]
    rank = len(out_shape)
    acc = np.empty((n, group, mult, *out_shape), dtype=xp.dtype)
    # Channel blocks small enough (~256 KiB of output) that the running sum and the product
    # stay in cache across all kernel offsets.
    per_channel = n * mult * math.prod(out_shape) * xp.dtype.itemsize
    block = max(1, (256 * 1024) // max(per_channel, 1))
    tmp = np.empty((n, min(block, group), mult, *out_shape), dtype=xp.dtype)
    for c0 in range(0, group, block):
        c1 = min(c0 + block, group)
        out = acc[:, c0:c1]
        t = tmp[:, : c1 - c0]
        bshape = (1, c1 - c0, mult) + (1,) * rank
        for k_index, window in enumerate(windows):
            xs = xp[(slice(None), slice(c0, c1), *window)][:, :, None]
            weight = wk[c0:c1, :, k_index].reshape(bshape)
            if k_index == 0:
                np.multiply(xs, weight, out=out)
            else:
                np.multiply(xs, weight, out=t)
                out += t
    return acc


@kernel("Conv", since=(1, 11, 22))
def conv(
    x: np.ndarray,
    w: np.ndarray | ConvWeight,
    b: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
    addend: np.ndarray | None = None,
) -> np.ndarray:
    """ONNX Conv.  ``addend`` is not an ONNX attribute: the planner's fused Conv -> Add
    (runtime.fusion) passes the residual it adds, same shape and dtype as the output."""
    packed = None
    if isinstance(w, ConvWeight):
        packed, w = w, w.array
    if (
        PREPARED_CALLS
        and group == 1
        and type(x) is np.ndarray
        and x.dtype == _F32
        and w.dtype == _F32
        and x.ndim in (3, 4)
        and (b is None or b.dtype == _F32)
        and _weight_cache.frozen(w)
        and (b is None or _weight_cache.frozen(b))
    ):
        # The same node's call of the compiled direct conv, made once per weight, bias,
        # input shape and attributes (frozen constants only: `_weight_cache`).
        call = _weight_cache.derived(
            "conv_nchw_call",
            [w, b],
            (
                x.shape, auto_pad, _tuple(dilations), _tuple(kernel_shape), _tuple(pads),
                _tuple(strides), packed is not None,
            ),
            lambda: prepared_direct(
                x, w, packed, b,
                {"auto_pad": auto_pad, "dilations": dilations, "kernel_shape": kernel_shape,
                 "pads": pads, "strides": strides},
            ) or _NO_CALL,
        )  # fmt: skip
        if call is not _NO_CALL:
            y = call(x, addend)
            if y is not None:
                return y  # type: ignore[no-any-return]
    kernel, st, dil, pd, out = conv_geometry(x, w, auto_pad, dilations, kernel_shape, pads, strides)
    xc, wc = as_compute(x), as_compute(w)
    if wc.dtype != xc.dtype:
        wc = wc.astype(xc.dtype)
    if wc is not w:
        packed = None  # its forms are of the uncast weight
    bias = None if b is None else as_compute(b).astype(xc.dtype, copy=False).reshape(-1)
    if addend is not None and (
        type(addend) is not np.ndarray
        or addend.dtype != xc.dtype
        or addend.shape != (x.shape[0], wc.shape[0], *out)
    ):
        raise ExecutionError("Conv has no attribute 'addend' (or the residual does not fit)")
    y = conv_core(xc, wc, group, kernel, st, dil, pd, out, bias, packed, addend)
    return y.astype(x.dtype, copy=False)


# Whether conv() keeps each node's prepared direct call (prepared_nchw); off only to
# measure what it saves.
PREPARED_CALLS = True
_F32 = np.dtype(np.float32)
_NO_CALL = object()  # prepared_nchw made no call for these (kept, so not asked again)


def _tuple(v: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if v is None else tuple(v)


def _transpose_pads(
    in_shape: Sequence[int],
    kernel: Sequence[int],
    st: Sequence[int],
    dil: Sequence[int],
    out_pad: Sequence[int],
    auto_pad: str,
    pads: Sequence[int] | None,
    output_shape: Sequence[int] | None,
) -> tuple[list[int], list[int]]:
    rank = len(in_shape)
    full = [
        s * (i - 1) + op + (k - 1) * d + 1
        for i, k, s, d, op in zip(in_shape, kernel, st, dil, out_pad)
    ]
    if output_shape:
        target = list(output_shape)[-rank:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [i * s for i, s in zip(in_shape, st)]
    else:
        pd = [0] * (2 * rank) if auto_pad == "VALID" else spatial_list(pads, 2 * rank, 0)
        return pd, [f - pd[i] - pd[i + rank] for i, f in enumerate(full)]
    begin, end = [], []
    for f, t in zip(full, target):
        total = f - t
        half = total // 2
        if auto_pad == "SAME_UPPER":
            begin.append(half)
            end.append(total - half)
        else:
            begin.append(total - half)
            end.append(half)
    return begin + end, list(target)


def col2im_add(
    cols: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    blocks: Sequence[int],
    full_shape: Sequence[int],
) -> np.ndarray:
    """Sum (N, C, *kernel, *blocks) columns into an image (N, C, *full_shape)."""
    n, c = cols.shape[:2]
    image = np.zeros((n, c, *full_shape), dtype=cols.dtype)
    for offset in product(*(range(k) for k in kernel)):
        start = [o * d for o, d in zip(offset, dilations)]
        target: tuple[Any, ...] = (slice(None), slice(None), *offset_slices(start, strides, blocks))
        source: tuple[Any, ...] = (slice(None), slice(None), *offset)
        image[target] += cols[source]
    return image


@kernel("ConvTranspose", since=(1, 11, 22))
def conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    output_padding: list[int] | None = None,
    output_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    if (
        _COL2IM is not None
        and group == 1
        and output_shape is None
        and auto_pad in ("NOTSET", "VALID")
        and type(x) is np.ndarray
        and type(w) is np.ndarray
        and x.dtype == _F32
        and w.dtype == _F32
        and x.ndim == 4
        and w.ndim == 4
        and w.shape[0] == x.shape[1]
        and strides == [w.shape[2], w.shape[3]]
        and (kernel_shape is None or kernel_shape == strides)
        and (dilations is None or dilations == [1, 1])
        and (pads is None or not any(pads))
        and (output_padding is None or not any(output_padding))
        and (b is None or (type(b) is np.ndarray and b.dtype == _F32 and b.shape == w.shape[1:2]))
    ):
        return _tiled_upsampling(x, w, b)
    return _conv_transpose_any(
        x, w, b, auto_pad, dilations, group, kernel_shape, output_padding, output_shape, pads,
        strides,
    )  # fmt: skip


def _tiled_upsampling(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """A 2-D float32 ConvTranspose whose kernel is its stride, unpadded (a UNet's 2x2/2
    upsampling): `_conv_transpose_any`'s own GEMM and column copy (the same calls, so the
    same bits) without its general geometry, which took half of a small layer's time
    (32 -> 16 channels at 16 x 16: 63 -> 33 us; the copy by `_tile_windows`, the
    general path's own, 2-3 us more than calling the kernel here)."""
    n, c, ih, iw = x.shape
    m, kh, kw = w.shape[1:]
    cols = scratch("conv_t_cols", (n, m * kh * kw, ih * iw), _F32)
    np.matmul(w.reshape(c, m * kh * kw).T, x.reshape(n, c, ih * iw), out=cols)
    return _tile_windows(cols.reshape(n, m, kh, kw, ih, iw), (kh, kw), (ih, iw), b)


def _conv_transpose_any(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    auto_pad: str,
    dilations: list[int] | None,
    group: int,
    kernel_shape: list[int] | None,
    output_padding: list[int] | None,
    output_shape: list[int] | None,
    pads: list[int] | None,
    strides: list[int] | None,
) -> np.ndarray:
    rank = x.ndim - 2
    n, c = x.shape[:2]
    in_shape = list(x.shape[2:])
    kernel = spatial_list(kernel_shape, rank, 0) if kernel_shape else list(w.shape[2:])
    st = spatial_list(strides, rank, 1)
    dil = spatial_list(dilations, rank, 1)
    op = spatial_list(output_padding, rank, 0)
    pd, out = _transpose_pads(in_shape, kernel, st, dil, op, auto_pad, pads, output_shape)
    if w.shape[0] != c or c % group:
        raise ExecutionError(f"ConvTranspose weight {w.shape} does not fit input {x.shape}")
    cg, mg = c // group, w.shape[1]
    k_size = math.prod(kernel)
    p_in = math.prod(in_shape)
    xc = as_compute(x)
    wc = as_compute(w).astype(xc.dtype, copy=False)
    wg = wc.reshape(group, cg, mg * k_size).transpose(0, 2, 1)
    xg = xc.reshape(n, group, cg, p_in)
    # The GEMM's output never escapes (col2im writes a fresh image): a reused buffer, not
    # a fresh array page-faulted in on every call.
    cols = scratch("conv_t_cols", (n, group, mg * k_size, p_in), xc.dtype)
    if group == 1:
        np.matmul(wg[0], xg[:, 0], out=cols[:, 0])
    else:
        np.matmul(wg[None], xg, out=cols)
    cols = cols.reshape(n, group * mg, *kernel, *in_shape)
    full = [s * (i - 1) + (k - 1) * d + 1 for i, k, s, d in zip(in_shape, kernel, st, dil)]
    bias = None if b is None else as_compute(b).astype(cols.dtype, copy=False)
    exact = not any(pd) and list(out) == full  # the full image is the output
    if all(k == s and d == 1 for k, s, d in zip(kernel, st, dil)):
        # Kernel == stride (e.g. 2x2/2 upsampling): the windows tile the image without
        # overlap, so col2im is a copy; with the bias in the same pass when no crop or
        # zero border comes after it.
        image = _tile_windows(cols, kernel, in_shape, bias if exact else None)
        if exact:
            bias = None
    else:
        image = col2im_add(cols, kernel, st, dil, in_shape, full)
    # Output padding and pads: crop (or zero-extend) the full image to the output window.
    y = pad_spatial(
        image, [-p for p in pd[:rank]], [o + p - f for o, p, f in zip(out, pd[:rank], full)]
    )
    y = np.ascontiguousarray(y)  # built from the fresh GEMM output: safe to add in place
    if bias is not None:
        y += bias.reshape((1, -1) + (1,) * rank)
    return y.astype(x.dtype, copy=False)


# The compiled column-to-image copy of a kernel == stride ConvTranspose (native/_col2im.c),
# None when compiled kernels are off or not built.
_COL2IM = native.load("col2im")


def _tile_windows(
    cols: np.ndarray,
    kernel: Sequence[int],
    in_shape: Sequence[int],
    bias: np.ndarray | None,
) -> np.ndarray:
    """(N, M, *kernel, *in_shape) columns whose windows tile the image without overlap
    (kernel == stride, no dilation) as the image (N, M, *(i * k)), plus the per-channel
    ``bias`` when given: one strided copy per kernel offset into the image viewed as
    (N, M, i0, k0, i1, k1, ...).  A single transposing copy of all of it runs numpy's
    innermost loop over a k axis of 2 elements: 5-15x slower on a UNet's 2x2/2
    upsampling."""
    n, m = cols.shape[:2]
    rank = len(kernel)
    if (
        rank == 2
        and _COL2IM is not None
        and cols.dtype == np.float32
        and cols.flags.c_contiguous
        and (bias is None or bias.dtype == np.float32)
    ):
        # One pass in C, the image's rows in order (the same copies and adds).
        (ih, iw), (kh, kw) = in_shape, kernel
        image = np.empty((n, m, ih * kh, iw * kw), dtype=np.float32)
        row = None if bias is None else np.ascontiguousarray(bias.reshape(-1))
        _COL2IM.tile2d(cols, image, n * m, m, ih, iw, kh, kw, row)
        return image
    split = [v for i, k in zip(in_shape, kernel) for v in (i, k)]
    image = np.empty((n, m, *split), dtype=cols.dtype)
    per_channel = None if bias is None else bias.reshape((1, m) + (1,) * rank)
    for offset in product(*(range(k) for k in kernel)):
        place: tuple[Any, ...] = (slice(None), slice(None))
        place += tuple(v for o in offset for v in (slice(None), o))
        target = image[place]
        at: tuple[Any, ...] = (slice(None), slice(None), *offset)
        source = cols[at]
        if per_channel is None:
            target[...] = source
        else:
            np.add(source, per_channel, out=target)
    return image.reshape(n, m, *(i * k for i, k in zip(in_shape, kernel)))


def _integer_conv(
    x: np.ndarray,
    w: np.ndarray,
    x_zp: np.ndarray | None,
    w_zp: np.ndarray | None,
    attrs: dict[str, Any],
) -> np.ndarray:
    """Exact integer conv: by the compiled int8 product (kernels.int8_products) when it
    takes the case, else a float64 GEMM (integer products and sums stay below 2**53)."""
    from onnxviz.runtime.kernels import int8_products  # (it reads this module's layout)

    kernel, st, dil, pd, out = conv_geometry(
        x,
        w,
        attrs.get("auto_pad", "NOTSET"),
        attrs.get("dilations"),
        attrs.get("kernel_shape"),
        attrs.get("pads"),
        attrs.get("strides"),
    )
    if int8_products.module() is not None and x.ndim == 4:
        exact = int8_products.conv(
            x, w, x_zp, w_zp, attrs.get("group", 1), kernel, st, dil, pd, out
        )
        if exact is not None:
            return exact.astype(np.float64)
    xf = x.astype(np.float64)
    wf = w.astype(np.float64)
    if x_zp is not None:
        xf -= np.float64(np.asarray(x_zp).reshape(-1)[0])
    if w_zp is not None:
        zp = np.asarray(w_zp, dtype=np.float64).reshape(-1)
        wf -= zp.reshape((-1,) + (1,) * (w.ndim - 1)) if zp.size > 1 else zp[0]
    return conv_core(xf, wf, attrs.get("group", 1), kernel, st, dil, pd, out)


@kernel("ConvInteger", since=10)
def conv_integer(
    x: np.ndarray,
    w: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    w_zero_point: np.ndarray | None = None,
    **attrs: Any,
) -> np.ndarray:
    return _integer_conv(x, w, x_zero_point, w_zero_point, attrs).astype(np.int32)


@kernel("QLinearConv", since=10)
def qlinear_conv(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray,
    w: np.ndarray,
    w_scale: np.ndarray,
    w_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
    b: np.ndarray | None = None,
    **attrs: Any,
) -> np.ndarray:
    acc = _integer_conv(x, w, x_zero_point, w_zero_point, attrs)
    rank = x.ndim - 2
    if b is not None:
        acc += b.astype(np.float64).reshape((1, -1) + (1,) * rank)
    ws = np.asarray(w_scale, dtype=np.float64).reshape(-1)
    multiplier = (
        np.float64(np.asarray(x_scale).reshape(-1)[0])
        * (ws.reshape((1, -1) + (1,) * rank) if ws.size > 1 else ws[0])
        / np.float64(np.asarray(y_scale).reshape(-1)[0])
    )
    y = np.rint(acc * multiplier) + np.float64(np.asarray(y_zero_point).reshape(-1)[0])
    info = np.iinfo(y_zero_point.dtype)
    return np.clip(y, info.min, info.max).astype(y_zero_point.dtype)
