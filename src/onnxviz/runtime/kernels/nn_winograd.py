"""3x3 stride-1 convolution by Winograd's minimal filtering F(2x2, 3x3).

Each 2x2 block of outputs is computed from a 4x4 tile of the input with 16 multiplies
per input/output channel pair instead of 36: with the tile transformed (V = B^T d B) and
the weights transformed once (U = G g G^T), the products are 16 GEMMs U_k (M, C) @ V_k
(C, tiles), and the output block is A^T m A.  The transform matrices have entries
0, +-1 and +-1/2 only, so the rounding error stays within a few units of the direct
product's (tests compare both against float64).

Numpy cannot gather 4x4 tiles cheaply, so the input is split into its four
(row parity, column parity) phase images, flattened per channel with one spare row and
column: every tile element is then the same phase image read at a fixed flat offset,
and the whole input transform is 24 long contiguous 1-D array operations.  Positions in
the spare column are computed and dropped.

The 16 smaller GEMMs beat the direct conv's work only where their column count is
moderate (see `fits`); on big images the transforms' memory traffic eats the gain, on
tiny ones the GEMMs get too thin.  The weight transform is done once per constant
weight (nn_conv.ConvWeight), never per call.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels import _weight_cache, blas
from onnxviz.runtime.kernels.nn_geometry import scratch

_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])

# Output sizes (per spatial axis) where F(2x2, 3x3) measured faster than the direct paths
# on ResNet/Inception shapes (14x14 to 28x28 images with 64 to 512 channels): 15-20 %;
# and on 48x48 to 64x64 images with 32 to 128 channels (UNet levels, ResNet stage 1):
# 14-33 % faster under both Haswell and SkylakeX OpenBLAS kernels.  From about 80x80 on
# the transforms' traffic wins (0.9-1.1x at 80-96, 1.3-1.6x slower at 128x128).
_MIN_OUT, _MAX_OUT = 12, 64
_MIN_CHANNELS = 32


def fits(
    c: int,
    m: int,
    group: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
) -> bool:
    """Whether this conv should run by `winograd_conv`."""
    return (
        len(kernel) == 2
        and tuple(kernel) == (3, 3)
        and group == 1
        and all(s == 1 for s in strides)
        and all(d == 1 for d in dilations)
        and min(pads) >= 0
        and max(pads) <= 2
        and c >= _MIN_CHANNELS
        and m >= _MIN_CHANNELS
        and all(_MIN_OUT <= o <= _MAX_OUT for o in out_shape)
        and blas.raw_gemm(np.dtype(np.float32)) is not None
    )


def transform_weights(w: np.ndarray) -> np.ndarray:
    """U = G g G^T for every (output, input) channel pair of a (M, C, 3, 3) weight, as
    (16, M, C) contiguous (U_k for tile element k = 4 * row + column), in float64 then
    rounded once to w's dtype."""
    m, c = w.shape[:2]
    u = np.einsum("ik,mckl,jl->ijmc", _G, w.astype(np.float64), _G)
    return np.ascontiguousarray(u.reshape(16, m, c).astype(w.dtype))


def winograd_conv(
    x: np.ndarray,
    u: np.ndarray,
    bias: np.ndarray | None,
    pads: Sequence[int],
    out_shape: Sequence[int],
) -> np.ndarray:
    """The conv of ``x`` (N, C, H, W) with transformed weights ``u`` (16, M, C), zero
    padding ``pads`` (ONNX order), plus ``bias``; a fresh (N, M, *out_shape)."""
    n, c = x.shape[:2]
    m = u.shape[1]
    oh, ow = out_shape
    th, tw = -(-oh // 2), -(-ow // 2)
    out = np.empty((n, m, 2 * th, 2 * tw), dtype=x.dtype)
    for b in range(n):
        _one_image(x[b], u, bias, pads[0], pads[1], th, tw, out[b])
    if oh != 2 * th or ow != 2 * tw:
        return np.ascontiguousarray(out[:, :, :oh, :ow])
    return out


def _one_image(
    x: np.ndarray,
    u: np.ndarray,
    bias: np.ndarray | None,
    pad_top: int,
    pad_left: int,
    th: int,
    tw: int,
    out: np.ndarray,
) -> None:
    c = x.shape[0]
    m = u.shape[1]
    dt = x.dtype
    width = tw + 1  # a phase image row: the tiles' columns plus the spare one
    plane = (th + 1) * width  # a phase image of one channel (plus the spare row)
    q = c * plane
    module = native.load("winograd") if dt == np.float32 else None
    # (a channels-last image, the (C, H, W) view of an (H, W, C) buffer, is read as is)
    readable = x.flags.c_contiguous or x.transpose(1, 2, 0).flags.c_contiguous
    if module is not None and out.flags.c_contiguous and readable:
        _one_image_native(module, x, u, bias, pad_top, pad_left, th, tw, out)
        return
    # The padded input at row 2i + rp, column 2j + cp is phase[rp, cp][i, j].
    phase = scratch("wino_phase", (2, 2, q + width + 2), dt)
    phase.fill(0)
    for rp in (0, 1):
        r0 = (rp - pad_top) % 2  # first input row landing on padded row parity rp
        i0 = (r0 + pad_top) // 2
        for cp in (0, 1):
            c0 = (cp - pad_left) % 2
            j0 = (c0 + pad_left) // 2
            src = x[:, r0::2, c0::2]
            rows, cols = min(src.shape[1], th + 1 - i0), min(src.shape[2], width - j0)
            image = phase[rp, cp, :q].reshape(c, th + 1, width)
            image[:, i0 : i0 + rows, j0 : j0 + cols] = src[:, :rows, :cols]
    # Input transform, rows then columns: tile row r of column parity cp is
    # phase[r % 2, cp] read at offset (r // 2) * width; tile column j is the column
    # parity j % 2 read at offset j // 2.
    rows_t = scratch("wino_rows", (4, 2, q + 1), dt)
    for cp in (0, 1):
        d0, d2 = phase[0, cp, : q + 1], phase[0, cp, width : width + q + 1]
        d1, d3 = phase[1, cp, : q + 1], phase[1, cp, width : width + q + 1]
        np.subtract(d0, d2, out=rows_t[0, cp])
        np.add(d1, d2, out=rows_t[1, cp])
        np.subtract(d2, d1, out=rows_t[2, cp])
        np.subtract(d1, d3, out=rows_t[3, cp])
    v = scratch("wino_v", (16, q), dt)
    for i in range(4):
        e0, o1 = rows_t[i, 0, :q], rows_t[i, 1, :q]
        e2, o3 = rows_t[i, 0, 1 : q + 1], rows_t[i, 1, 1 : q + 1]
        np.subtract(e0, e2, out=v[4 * i])
        np.add(o1, e2, out=v[4 * i + 1])
        np.subtract(e2, o1, out=v[4 * i + 2])
        np.subtract(o1, o3, out=v[4 * i + 3])
    # (the spare row is only read by the shifted slices above)
    prods = _products(u, v, c, th, width)
    cols = th * width
    if bias is not None:
        prods[5] += bias[:, None]  # m11 reaches all four outputs with sign +1
    # Output transform A^T m A, rows then columns, into the 2x2 blocks of out.
    half = scratch("wino_half", (2, 4, m, cols), dt)
    np.add(prods[0:4], prods[4:8], out=half[0])
    half[0] += prods[8:12]
    np.subtract(prods[4:8], prods[8:12], out=half[1])
    half[1] -= prods[12:16]
    blocks: Any = out.reshape(m, th, 2, tw, 2)
    y = scratch("wino_y", (m, cols), dt)
    grid = y.reshape(m, th, width)[:, :, :tw]
    for a in (0, 1):
        np.add(half[a, 0], half[a, 1], out=y)
        y += half[a, 2]
        blocks[:, :, a, :, 0] = grid
        np.subtract(half[a, 1], half[a, 2], out=y)
        y -= half[a, 3]
        blocks[:, :, a, :, 1] = grid


def _products(u: np.ndarray, v: np.ndarray, c: int, th: int, width: int) -> np.ndarray:
    """The 16 GEMMs U_k (M, C) @ V_k (C, tiles) of transformed weights ``u`` (16, M, C)
    and tiles ``v`` (16, C * (th + 1) * width, a channel's tile rows ``width`` apart),
    over the first ``th`` tile rows: (16, M, th * width) in a scratch buffer."""
    m, dt = u.shape[1], v.dtype
    plane, cols = (th + 1) * width, th * width
    prods = scratch("wino_m", (16, m, cols), dt)
    raw = blas.raw_gemm(dt)
    if raw is not None and u.dtype == dt:
        u0, v0, p0 = u.ctypes.data, v.ctypes.data, prods.ctypes.data
        for k in range(16):
            raw(m, cols, c, u0 + k * u.strides[0], c, v0 + k * v.strides[0], plane,
                p0 + k * prods.strides[0], cols, False)  # fmt: skip
    else:
        vk = v.reshape(16, c, th + 1, width)[:, :, :th].reshape(16, c, cols)
        np.matmul(u.astype(dt, copy=False), vk, out=prods)
    return prods


def _one_image_native(
    module: Any,
    x: np.ndarray,
    u: np.ndarray,
    bias: np.ndarray | None,
    pad_top: int,
    pad_left: int,
    th: int,
    tw: int,
    out: np.ndarray,
) -> None:
    """`_one_image` with both transforms compiled (native/_winograd.c): each one pass
    through memory where numpy made 36 array operations and the phase and output
    copies; the same adds and subtracts in the same order, so the same numbers."""
    c, h, w = x.shape
    m = u.shape[1]
    width = tw + 1
    plane = (th + 1) * width
    v = scratch("wino_v", (16, c * plane), x.dtype)
    last = not x.flags.c_contiguous  # then (H, W, C) in memory (the caller checked)
    module.input(x.transpose(1, 2, 0) if last else x, c, h, w, pad_top, pad_left, th, tw, v, last)
    prods = _products(u, v, c, th, width)
    b = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
    module.output(prods, m, th, tw, b, out)


# ---- The fused channels-last conv (native/_winograd.c conv_nhwc, AVX-512) -----------------


def _l2_bytes() -> int:
    """This core's L2 cache in bytes (Linux's sysfs), within 256 KB .. 4 MB; 1 MB where
    it does not say."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            with open(os.path.join(base, entry, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(base, entry, "size")) as f:
                text = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
            got = int(text.rstrip("KM")) * scale
            return min(max(got, 256 << 10), 4 << 20)
    except (OSError, ValueError):
        pass
    return 1 << 20


# A tile block's transform buffers (V: 16 x tiles x C floats, m: 16 x tiles x M) are kept
# to about the L2's size: the block's 16 products then read them from L2, and the
# transformed weight (16/9 of the direct kernel's) is read once per block, so fewer and
# larger blocks pay once it is large.  Node times in ResNet-50 (Emerald Rapids, 2 MB
# L2), us, by the buffers' bound 1 / 2 / 4 MB: 64 channels at 56 px 1000-1095 /
# 1008-1090 / 1095-1379; 128 at 28 px 973-1006 / 1007-1156 / 977-1316; 256 at 14 px
# (a 4 MB weight) 1462-1729 / 1152-1257 / 1149-1471.
_BLOCK_BYTES = _l2_bytes()


# The fused conv from this many input and output channels and this many 2 x 2 output
# tiles in a call (`fused_pays`); an NCHW conv the direct kernel's NCHW form takes, from
# this many multiply-adds per tap (`nchw_pays`).
_FUSED_MIN_CHANNELS = 32
_FUSED_MIN_TILES = 36
_NCHW_OVER_DIRECT_WORK = 1 << 24


def fused_pays(
    n: int,
    c: int,
    m: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
) -> bool:
    """Whether a plain 2-D float32 conv of ``n`` images runs the fused channels-last
    F(2x2, 3x3) conv (`conv_nhwc`) inside a channels-last chain (nn_conv_nhwc._Direct)
    rather than the direct kernels: AVX-512 or AVX2 (the compiled direct conv's 16 or 8
    lanes; the fused conv has no generic level), the routing not switched off
    (ONNXVIZ_WINOGRAD_NHWC=off), 3x3, stride 1, no dilation, pads 0..2, at least 32
    input and output channels and 36 output tiles (12 x 12 outputs of one image: fewer
    do not pay for the transformed weight's reads, 16/9 of the direct kernel's).

    Alone, one thread, channels-last in and out, bias and Relu, us, fused / direct
    (Emerald Rapids): 64 ch at 56 px 879 / 1373, 128 at 28 px 813 / 1329, 256 at 14 px
    841 / 1482 (the blocked kernel), 32 at 64 px 471 / 510, 32 at 128 px 2180 / 2812,
    64 at 128 px 6600 / 11735; 16 ch at 128 px 1306 / 1049 and 16 at 64 px 260 / 170
    (below the bound); 512 at 7 px 1264 / 1428 alone but 2.7-2.9 / 1.5-1.7 ms inside
    ResNet-50, its 16 MB weight read from memory each run (below the tile bound).  The
    AVX2 code on the same core, fused / direct (its 8-lane kernels): 64 ch at 56 px 1981
    / 3454, 128 at 28 px 1818 / 3323, 256 at 14 px 1986 / 3364, 32 at 64 px 1000 / 1234,
    32 at 128 px 3979 / 5025, 48 at 28 px 231 / 394; 512 at 7 px 3448 / 4028."""
    conv = native.load("conv")
    return (
        conv is not None
        and int(conv.lanes()) in (8, 16)
        and os.environ.get("ONNXVIZ_WINOGRAD_NHWC", "auto").strip().lower() != "off"
        and tuple(kernel) == (3, 3)
        and all(s == 1 for s in strides)
        and all(d == 1 for d in dilations)
        and min(pads) >= 0
        and max(pads) <= 2
        and min(c, m) >= _FUSED_MIN_CHANNELS
        and len(out_shape) == 2
        and n * -(-out_shape[0] // 2) * -(-out_shape[1] // 2) >= _FUSED_MIN_TILES
        and native.load("winograd") is not None
    )


def nchw_pays(
    n: int,
    c: int,
    m: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
    direct: bool,
) -> bool:
    """Whether a plain NCHW float32 conv runs the fused conv between two compiled
    transposing copies (nn_conv._fused_winograd_nchw): `fused_pays`, and where the direct
    kernel would run it (``direct``: nn_conv.direct_nchw_pays or direct_rows_pays, whose
    compiled call saves the Python the fused conv's route still has) only from 2^24 multiply-adds
    per tap (N x C x M x output pixels).  Alone, one thread, us, the route before / this
    (copies included): 128 ch at 56 px 5615 / 3944 and at 28 px 1475 / 959 (the NCHW
    Winograd); against the direct NCHW form 64 ch at 64 px 2841 / 2148, but 96 -> 32 at
    64 px 1635 / 1452, 64 -> 32 1027 / 1012, 64 ch at 32 px 489 / 451, 128 -> 64 at 32
    px 964 / 939, which inside a diffusion UNet (its GroupNorms keep them NCHW) ran
    slower the fused way (96 -> 32 at 64 px 1558 -> 1771, 64 ch at 16 px 100 -> 200)."""
    if direct and n * c * m * math.prod(out_shape) < _NCHW_OVER_DIRECT_WORK:
        return False
    return fused_pays(n, c, m, kernel, strides, dilations, pads, out_shape)


def pack_nhwc(w: np.ndarray, nr: int) -> np.ndarray:
    """The (M, C, 3, 3) weight's U = G g G^T (`transform_weights`) as conv_nhwc reads it:
    per tile element k, panels of ``nr`` output channels (the kernel's `panel_width` at
    its level: 32 at AVX-512, 16 at AVX2; the last zero-padded), each C rows of ``nr``
    floats, [16][panels][C][nr], from a 64-byte boundary."""
    m, c = w.shape[:2]
    panels = -(-m // nr)
    u = np.zeros((16, panels * nr, c), dtype=np.float32)
    u[:, :m] = transform_weights(np.asarray(w, dtype=np.float32))
    packed = u.reshape(16, panels, nr, c).transpose(0, 1, 3, 2)
    raw = np.empty(packed.size + 16, dtype=np.float32)
    start = (-raw.ctypes.data % 64) // 4
    out = raw[start : start + packed.size].reshape(packed.shape)
    out[...] = packed
    return out


def panel_width() -> int:
    """The fused conv's panel width at this process's level (0: no fused conv here)."""
    module = native.load("winograd")
    return 0 if module is None else int(module.panel_width())


def packed_nhwc(w: np.ndarray) -> np.ndarray | None:
    """`pack_nhwc` of ``w`` for this level's panels, made once per constant weight (the
    weight cache's), or None when the fused conv does not run here."""
    nr = panel_width()
    if not nr:
        return None
    return _weight_cache.derived(  # type: ignore[no-any-return]
        "winograd_nhwc", [w], (nr,), lambda: pack_nhwc(w, nr)
    )


def block_tiles(c: int, m: int, tiles: int) -> int:
    """Output tiles per block of conv_nhwc for C input and M output channels, ``tiles``
    in all: `_BLOCK_BYTES` of transform buffers, the blocks of one size as nearly as can
    be (a last block of a few tiles runs the products on a few rows)."""
    cp, mp = -(-c // 16) * 16, -(-m // 32) * 32  # (AVX2's 16-wide panels: at most this)
    most = max(12, _BLOCK_BYTES // (64 * (cp + mp)))
    blocks = -(-tiles // most)
    return -(-tiles // blocks)


def conv_nhwc(
    x: np.ndarray,
    u: np.ndarray,
    m: int,
    bias: np.ndarray | None,
    addend: np.ndarray | None,
    out: np.ndarray,
    pads: Sequence[int],
    act: tuple[int, float, float],
) -> bool:
    """``out`` (N, H', W', M) = act(conv(x) + bias + addend) for the channels-last
    C-contiguous float32 ``x`` (N, H, W, C), ``u`` from `pack_nhwc`, ``addend`` laid out
    as ``out`` (or None), zero padding ``pads`` (ONNX order, each 0..2), ``act`` an
    activations.h code with its bounds; whether it ran (False below AVX-512 or with the
    kernels off: nothing written)."""
    module = native.load("winograd")
    if module is None:
        return False
    n, h, w, c = x.shape
    ho, wo = out.shape[1:3]
    tiles = block_tiles(c, m, n * -(-ho // 2) * -(-wo // 2))
    code, lo, hi = act
    shape, size, pad = (n, h, w, c), (ho, wo), (pads[0], pads[1])
    nr = u.shape[-1]
    return bool(
        module.conv_nhwc(x, shape, u, nr, m, bias, addend, out, size, pad, code, lo, hi, tiles)
    )


def held_nhwc(
    u: np.ndarray,
    m: int,
    bias: np.ndarray | None,
    x_shape: Sequence[int],
    out_shape: Sequence[int],
    pads: Sequence[int],
    act: tuple[int, float, float] | None,
    nargs: int,
    residual: int | None,
    places: tuple[int, ...],
    expect: tuple[Any, ...],
    fallback: Any,
    inplace: bool = False,
) -> Any:
    """`conv_nhwc` as a fused chain's compiled call (native/_winograd.c's `held`): the
    chain's arguments (x (N, C, H, W) channels-last, the constants ``expect`` at
    ``places``, the residual at ``residual``) to a fresh channels-last result (with
    ``inplace``, over a residual nothing else holds), every call it does not take to
    ``fallback``; None where ``u``'s panels are not this level's or
    the kernels are off."""
    module = native.load("winograd")
    if module is None or int(module.panel_width()) != u.shape[-1]:
        return None
    n, c, h, w = x_shape
    ho, wo = out_shape
    code, lo, hi = (0, float("nan"), float("nan")) if act is None else act
    return module.held(
        u, u.shape[-1], bias, (n, h, w, c), m, (ho, wo), (pads[0], pads[1]), code, lo, hi,
        block_tiles(c, m, n * -(-ho // 2) * -(-wo // 2)), nargs,
        -1 if residual is None else residual, tuple(places), tuple(expect), fallback,
        *native.held_arrays(), inplace,
    )  # fmt: skip
