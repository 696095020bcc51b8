"""Channels-last (NHWC) convolutions for unwatched runs (runtime.fusion_layout).

A channels-last value is still an (N, C, H, W) array as far as every other kernel and
the caller are concerned: it is the (N, C, H, W) *view* of a contiguous (N, H, W, C)
buffer (``y.transpose(0, 3, 1, 2)``), so any reader gets the right numbers whatever its
layout preference (numpy's elementwise ops even keep the layout: their results follow
the operands' memory order).  What the layout changes is the cost of these kernels:

* depthwise conv (one input channel per group): the compiled kernel (float32), else the
  padded channels-last image summed over the kernel offsets by one einsum per stride
  phase, whose innermost axis is a whole output row times the channels (out_w * C
  consecutive floats) and whose weights are the per-channel rows tiled to match; no
  transposing copy in or out when the neighbours are channels-last too;
* pointwise conv (1x1, one group): a single GEMM [N*H*W, C] @ [C, M] onto the bias (and
  the residual), reading the channels-last input in place and writing a channels-last
  output; float32 with one OpenBLAS thread by the compiled GEMM (kernels/packed_gemm.py:
  the weight packed once, bias, residual and a Relu or Clip in its epilogue);
* grouped 1x1 conv, stride 1 (ShuffleNet's): per group one product of its columns of the
  rows, read in place, into its columns of the output (`_GroupedPointwise`);
* plain conv (one group, a kernel larger than 1x1, or a strided 1x1 of few channels):
  the compiled direct conv (native/_conv.c, `_Direct`), float32, when it is built and
  on, with bias, residual and activation in its pass.

`conv_channels_last` takes any layout (an (N, C, H, W) contiguous input costs the one
transposing copy the padding or the GEMM's operand needs anyway) and returns None for a
conv it does not handle, so the caller runs the plain kernel.  The weight forms it reads
(tiled depthwise rows, the transposed pointwise matrix) are made once per constant
weight through kernels._weight_cache.  `activate_in_place` is the activation a fused
conv applies to its fresh output, in either layout.

Measured and left out: plain convs (one group, k > 1) by a channels-last im2col and one
GEMM were slower than nn_conv's Winograd and shifted-slice paths at stride 1 (32
channels at 56 px: 658 against 511 us; 128 at 14 px: 492 against 385 us) and only about
15% faster strided.  The compiled direct conv, which keeps its sums in registers and
writes each output once, beats both (`_Direct`'s numbers), so float32 plain convs run
it; float64 ones and runs with the kernels off keep the plain kernel (which reads a
channels-last input correctly, through its own padding copy).  The depthwise einsum runs at about 8.5 GMAC/s
on one AVX2 core: three loads per multiply-add, no register blocking, which numpy cannot
do better; it kept MobileNetV3's depthwise layers 4-7x slower than onnxruntime's.  So a
float32 depthwise conv runs the compiled kernel (native/_depthwise.c through
nn_conv.native_depthwise) when it is built and on: the input read in place, no padded
image, bias, a channels-last addend and the chain's activation in its one pass; the
einsum stays for float64 and for runs with the kernels off.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels import _weight_cache, blas, nn_winograd, packed_gemm
from onnxviz.runtime.kernels.nn_conv import (
    ACT_CLIP,
    ACT_HARDSWISH,
    ACT_NONE,
    ACT_RELU,
    ACT_SILU,
    PATCH_AREA,
    ConvWeight,
    aligned_empty,
    conv_core,
    conv_geometry,
    direct_lanes,
    direct_routing,
    native_blocked,
    native_depthwise,
    native_direct,
    out_empty,
    pack_blocked,
    pack_direct,
    patch_rows,
)
from onnxviz.runtime.kernels.nn_geometry import scratch

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def is_channels_last(x: Any) -> bool:
    """``x`` is a 4-D array laid out channels-last ((N, H, W, C) contiguous)."""
    return (
        type(x) is np.ndarray
        and x.ndim == 4
        and x.transpose(0, 2, 3, 1).flags.c_contiguous
        and not (x.flags.c_contiguous and x.shape[1] > 1 and x.shape[2] * x.shape[3] > 1)
    )


# Elements from which `nhwc` and `planes_copy` run the compiled copy: below, numpy's
# copy costs less than the call's set-up (128 channels at 7 x 7 px: 4.0 us against 5.0;
# at 14 x 14, 30.8 against 9.1).
_COMPILED_COPY_MIN = 8192


def nhwc(x: np.ndarray) -> np.ndarray:
    """The (N, H, W, C) view of an (N, C, H, W) array (a copy only when ``x`` is not
    channels-last already: a float32 NCHW one by the compiled transposing copy,
    native/_channels.c's place, as `planes_copy` the other way)."""
    xl = x.transpose(0, 2, 3, 1)
    if xl.flags.c_contiguous:
        return xl
    chan = (
        native.load("channels")
        if x.size >= _COMPILED_COPY_MIN and x.dtype == np.float32 and x.flags.c_contiguous
        else None
    )
    if chan is None:
        return np.ascontiguousarray(xl)
    n, c, h, w = x.shape
    out = out_empty((n, h, w, c))
    chan.place(x, out, (n, h * w, c, c, 0), True)
    return out


def planes_copy(y: np.ndarray) -> np.ndarray:
    """A C-contiguous (N, C, H, W) copy of ``y``, the channels-last value a chain's last
    conv computed (fusion_layout.ChannelsLast's NCHW exit).  float32 by the compiled
    transposing copy (native/_channels.c's unplace: blocks of pixels by channels
    transposed in registers), else numpy's.  numpy's element-by-element transposing
    copy took 13x a plain copy's time there: a 1x1 conv's 256 channels at 56 x 56 px
    3.3 ms, against 0.26 ms to copy them; the same values either way."""
    chan = (
        native.load("channels")
        if y.size >= _COMPILED_COPY_MIN and y.dtype == np.float32 and is_channels_last(y)
        else None
    )
    if chan is None:
        return np.ascontiguousarray(y)
    n, c, h, w = y.shape
    out = out_empty(y.shape)
    chan.unplace(nhwc_view(y), out, (n, h * w, c))
    return out


def conv_channels_last(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    attrs: dict[str, Any],
    addend: np.ndarray | None = None,
    relu: bool = False,
) -> np.ndarray | None:
    """Conv(x, w) + bias (+ addend) [then Relu] as a fresh channels-last (N, M, H', W')
    array, for the depthwise and pointwise 2-D convs of float32/float64 inputs whose
    weight (and bias) has the input's dtype; None for any other conv (run the plain
    kernel).  ``attrs`` are the node's Conv attributes.  (One call: a caller that runs
    the same conv again keeps `prepare_channels_last`'s answer instead.)"""
    runner = prepare_channels_last(x, w, bias, attrs)
    return None if runner is None else runner(x, addend, relu)[0]


def prepare_channels_last(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, attrs: dict[str, Any]
) -> ChannelsLastConv | None:
    """The channels-last conv for inputs of ``x``'s shape and dtype with this weight,
    bias and attributes (geometry worked out, weight forms made), or None when this
    module does not handle the conv."""
    if (
        type(x) is not np.ndarray
        or x.ndim != 4
        or x.dtype not in _FLOATS
        or w.dtype != x.dtype
        or w.ndim != 4
        or (bias is not None and (bias.dtype != x.dtype or bias.size != w.shape[0]))
    ):
        return None
    group = int(attrs.get("group", 1))
    c = x.shape[1]
    m = w.shape[0]
    if group < 1 or c % group or m % group or w.shape[1] * group != c:
        return None  # the plain kernel names the mismatch
    kernel, strides, dilations, pads, out_shape = conv_geometry(
        x,
        w,
        attrs.get("auto_pad", "NOTSET"),
        attrs.get("dilations"),
        attrs.get("kernel_shape"),
        attrs.get("pads"),
        attrs.get("strides"),
    )
    if min(pads) < 0 or min(out_shape) < 1 or list(kernel) != list(w.shape[2:]):
        return None
    b = None if bias is None else bias.reshape(-1)
    if (
        group == 1
        and len(kernel) == 2
        and list(kernel) == list(strides)
        and math.prod(kernel) >= _PATCH_AREA
        and not any(pads)
        and all(d == 1 for d in dilations)
    ):
        k = c * math.prod(kernel)
        wt = _weight_cache.derived(
            "conv_nhwc_patches", [w], (), lambda: np.ascontiguousarray(w.reshape(m, k).T)
        )
        return _Patches(x.shape, wt, b, kernel, out_shape)
    strided_few = any(s > 1 for s in strides) and c <= _strided_direct_channels()
    if (
        group == 1
        and kernel == [1, 1]
        and not any(pads)
        and not (
            (strided_few or deep_pointwise_runs_direct(c, m, strides)) and direct_available(x.dtype)
        )
    ):
        # A strided 1x1 of few channels runs the direct kernel below: it reads every
        # second pixel in place, where this GEMM first copies them out
        # (_strided_direct_channels).  Below AVX-512 the deep 1x1s run it too
        # (deep_pointwise_runs_direct).
        wt = _weight_cache.derived(
            "conv_nhwc_pointwise", [w], (), lambda: np.ascontiguousarray(w.reshape(m, c).T)
        )
        return _Pointwise(x.shape, wt, b, strides, out_shape)
    if w.shape[1] == 1 and m == group > 1:
        return _Depthwise(x.shape, w, b, kernel, strides, dilations, pads, out_shape)
    if group > 1 and w.shape[1] > 1 and len(kernel) == 2:
        if list(kernel) == [1, 1] and not any(pads) and all(s == 1 for s in strides):
            return _GroupedPointwise(x.shape, w, b, group, out_shape)
        return _Grouped(x.shape, w, b, group, kernel, strides, dilations, pads, out_shape)
    if group == 1 and len(kernel) == 2 and direct_available(x.dtype):
        lanes = direct_lanes()
        if lanes is not None:
            return _Direct(x.shape, w, lanes, m, b, kernel, strides, dilations, pads, out_shape)
    return None


def _strided_direct_channels() -> int:
    """Input channels up to which a strided 1x1 runs the direct kernel rather than
    `_Pointwise`'s copy of every second pixel and GEMM.  Up to 128 at any width (bench,
    us: 32->64 ch at 56 px 86 -> 48, 64->128 at 28 px 58 -> 46, 128->256 at 14 px 57 ->
    47; from 256 channels the AVX2 GEMM's blocking wins or ties).  At AVX-512 (16 lanes)
    also 256, measured on a Zen 4 core inside ResNet-50 (node minima, us): its 256 -> 512
    at 56 px 1952 -> 1867, the torchvision export's 1938 -> 1876.  Not 512: the direct
    tile's 14 pixels then lie 4 KB apart, on one L1 set, and its 512 -> 1024 at 28 px went
    1921 -> 2392."""
    return 256 if direct_lanes() == 16 else 128


def deep_pointwise_runs_direct(c: int, m: int, strides: Sequence[int]) -> bool:
    """Whether a 1x1 conv of ``c`` input and ``m`` output channels runs the direct kernel
    rather than `_Pointwise`'s GEMM below AVX-512 (8 lanes): a deep reduction (at least
    512 input channels, at most as many outputs, or strided): there the direct kernel's
    6 x 16 AVX2 tile, reading the pixels in place, beats the GEMM's (ours or
    OpenBLAS's), which reach 55-75 GFLOP/s on these shapes where onnxruntime's reach
    85-95; a 1x1 that widens the channels, or a shallower one, loses (256 -> 1024 at
    14 px 1.22 -> 1.42 ms, 256 -> 64 at 56 px 1.34 -> 1.50).  Measured on an AMD Zen 3
    core inside the models (`Session.run`'s node times, one thread, GEMM / direct
    alternated in one process, minima of 8 runs, ms): ResNet-50's 2048 -> 512 at 7 px
    1.83 -> 1.39, 1024 -> 256 at 14 px 1.45 -> 1.16, its strided 1024 -> 2048 3.54 ->
    2.96; the whole run (sum of node minima) ResNet-50 98.4 -> 96.4, its torchvision
    export 99.0 -> 96.7, Inception v2 50.5 -> 48.6.  At AVX-512 the GEMM's 12 x 32 tile
    keeps them all."""
    return (
        direct_lanes() == 8
        and c >= _DEEP_POINTWISE_CHANNELS
        and (m <= c or any(s > 1 for s in strides))
    )


# Input channels from which a 1x1 conv is a deep reduction (deep_pointwise_runs_direct).
_DEEP_POINTWISE_CHANNELS = 512


def direct_available(dtype: Any) -> bool:
    """Whether a plain conv of this dtype runs the compiled direct conv channels-last:
    float32, the kernel built and on, and the routing not switched off."""
    return dtype == np.float32 and direct_routing() and direct_lanes() is not None


# An activation the compiled depthwise kernel applies as it writes its output: (code,
# Clip's low bound, high bound), codes nn_conv.ACT_*, a NaN bound meaning none.
Activation = tuple[int, float, float]
# A max pool a held conv applies to its output (ChannelsLastConv.held): ((kh, kw), (sh,
# sw), (top, left, bottom, right) pads), floor rounding, no dilation.
PoolWindow = tuple[tuple[int, int], tuple[int, int], tuple[int, int, int, int]]


class ChannelsLastConv:
    """A prepared channels-last conv: ``runner(x, addend, relu, act)`` for an x of the
    shape it was prepared for (any layout), an ``addend`` of the output's shape and
    dtype or None; returns the channels-last (N, M, H', W') result and whether the
    activation ``act`` (when given) is in it already (else the caller applies it)."""

    out_shape: tuple[int, ...]  # (N, M, H', W')

    def __call__(
        self,
        x: np.ndarray,
        addend: np.ndarray | None,
        relu: bool,
        act: Activation | None = None,
    ) -> tuple[np.ndarray, bool]:
        y, done = self.run(x, addend, None if relu else act)
        if relu:
            np.maximum(y, 0, out=y)
        return y.transpose(0, 3, 1, 2), done

    def run(
        self, x: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool]:
        """The (N, H', W', M) result, addend included, and whether ``act`` is too."""
        raise NotImplementedError

    def held(
        self,
        x: np.ndarray,
        act: Activation | None,
        nargs: int,
        residual: int | None,
        places: tuple[int, ...],
        expect: tuple[Any, ...],
        fallback: Any,
        inplace: bool = False,
        pool: PoolWindow | None = None,
    ) -> Any:
        """A compiled call that runs this conv, addend and ``act`` for a fused node's
        inputs (``args[0]`` the image, ``args[residual]`` the addend, the constants
        ``expect`` at ``places``) and returns the channels-last result as `__call__`
        does, any other call going to ``fallback``; or None (this runner has none).
        ``inplace``: the caller's slot of the addend dies at the call, so a runner may
        write over an addend nothing else holds.  ``pool``: the call returns the max
        pool with this window of the result instead (a chain ending in a MaxPool; only
        `_Direct` has such a call)."""
        return None

    def run_nchw(
        self, x: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool] | None:
        """The result as a C-contiguous (N, M, H', W') array, addend included, and
        whether ``act`` is too, when this conv writes that layout itself; else None
        (the caller transposes `run`'s)."""
        return None


def nhwc_view(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> its (N, H, W, C) view (no copy; any layout)."""
    return x.transpose(0, 2, 3, 1)


class _Grouped(ChannelsLastConv):
    """Grouped conv of more than one channel a group (ResNeXt's, RegNet's): for each
    group the kernel's windows of its channels gathered from the channels-last image
    into rows of (taps, channels) per output pixel, then one batched product over the
    groups, [G, P, K*Cg] @ [G, K*Cg, Mg], written into the channels-last output with the
    bias and the addend.  Each window tap copies whole runs of a group's channels; the
    plain kernel's im2col gathered them from the image's planes, which a channels-last
    input strides through (RegNet's 24 groups of 16 channels at 7 x 7: 500-620 us a conv
    through it).  The sums run in (tap, channel) order: within float32 rounding of the
    plain kernel's (channel, tap) order."""

    def __init__(
        self,
        x_shape: tuple[int, ...],
        w: np.ndarray,
        bias: np.ndarray | None,
        group: int,
        kernel: Sequence[int],
        strides: Sequence[int],
        dilations: Sequence[int],
        pads: Sequence[int],
        out_shape: Sequence[int],
    ) -> None:
        n, c, h, wd = x_shape
        m = w.shape[0]
        kh, kw = kernel
        self.group, self.cg, self.mg = group, c // group, m // group
        self.kernel, self.strides, self.dilations = tuple(kernel), tuple(strides), tuple(dilations)
        self.pads = tuple(pads)
        self.bias = bias
        self.in_hw = (h, wd)
        self.out_shape = (n, m, *out_shape)
        g, cg, mg = self.group, self.cg, self.mg
        # [G, (ky, kx, channel), Mg]: the rows' order of the gathered windows.
        self.wg = _weight_cache.derived(
            "conv_nhwc_grouped",
            [w],
            (group,),
            lambda: np.ascontiguousarray(
                w.reshape(g, mg, cg, kh, kw).transpose(0, 3, 4, 2, 1).reshape(g, kh * kw * cg, mg)
            ),
        )

    def run(
        self, x: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool]:
        n, m, oh, ow = self.out_shape
        g, cg = self.group, self.cg
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.strides, self.dilations
        top, left, bottom, right = self.pads
        h, wd = self.in_hw
        image = nhwc_view(x)
        if any(self.pads):
            padded = np.zeros((n, h + top + bottom, wd + left + right, g * cg), dtype=x.dtype)
            padded[:, top : top + h, left : left + wd] = image
            image = padded
        # cols[g, n, oy, ox, ky, kx, channel]: a tap's window of every group at once.
        cols = np.empty((g, n, oh, ow, kh, kw, cg), dtype=x.dtype)
        for ky in range(kh):
            for kx in range(kw):
                y0, x0 = ky * dh, kx * dw
                window = image[
                    :, y0 : y0 + (oh - 1) * sh + 1 : sh, x0 : x0 + (ow - 1) * sw + 1 : sw
                ]
                cols[:, :, :, :, ky, kx] = window.reshape(n, oh, ow, g, cg).transpose(3, 0, 1, 2, 4)
        products = np.matmul(cols.reshape(g, n * oh * ow, kh * kw * cg), self.wg)
        return _groups_out(products, (n, oh, ow, m), self.bias, addend), False


def _groups_out(
    products: np.ndarray,
    nhwc_shape: tuple[int, ...],
    bias: np.ndarray | None,
    addend: np.ndarray | None,
) -> np.ndarray:
    """A grouped conv's per-group products [G, rows, Mg] as its channels-last (N, H', W',
    M) output (group g's channels g*Mg..), plus the bias and the addend (any layout)."""
    g, rows, mg = products.shape
    y = np.empty(nhwc_shape, dtype=products.dtype)
    y.reshape(rows, g, mg)[...] = products.transpose(1, 0, 2)
    if bias is not None:
        y += bias
    if addend is not None:
        y += nhwc_view(addend)
    return y


# The activations the packed GEMM's epilogue applies (native/activations.h).
_GEMM_ACTS = frozenset({ACT_RELU, ACT_CLIP, ACT_HARDSWISH, ACT_SILU})


def _gemm_act(act: Activation | None) -> Activation:
    """``act`` when the packed GEMM's epilogue applies it, else none (the caller then
    applies it after)."""
    if act is not None and act[0] in _GEMM_ACTS:
        return act
    return (ACT_NONE, math.nan, math.nan)


class _GroupedPointwise(ChannelsLastConv):
    """Grouped 1x1 conv, stride 1, unpadded (ShuffleNet's): per group one product of its
    channels' rows by its (Cg, Mg) weight, [N*H*W, Cg] @ [Cg, Mg], written into its Mg
    columns of the channels-last output.  Float32 runs the compiled GEMM (packed_gemm)
    per group by the weight packed once: the group's rows are read where they lie (a
    leading dimension of C floats in the channels-last image, or an NCHW image's slab of
    Cg planes read as the transposed operand) and written with a leading dimension of M,
    bias, residual and activation in its epilogue.  The plain kernel's batched product
    wanted NCHW planes and its im2col copied a channels-last image first: ShuffleNet's
    24 -> 112 channels at 56 px (4 groups) took 348 us that way, onnxruntime's 112.
    Float64 or no compiled GEMM: numpy's batched product over the groups, then the bias
    and the addend.  The sums are the GEMM's (within float32 rounding of the plain
    kernel's)."""

    def __init__(
        self,
        x_shape: tuple[int, ...],
        w: np.ndarray,
        bias: np.ndarray | None,
        group: int,
        out_shape: Sequence[int],
    ) -> None:
        n, c = x_shape[:2]
        m = w.shape[0]
        self.group, self.cg, self.mg = group, c // group, m // group
        self.c, self.m = c, m
        self.bias = bias
        self.rows = n * math.prod(out_shape)
        self.nhwc_shape = (n, *out_shape, m)
        self.out_shape = (n, m, *out_shape)
        g, cg, mg = self.group, self.cg, self.mg
        # [G, Cg, Mg]: each group's weight as the right operand of its rows' product.
        self.wg = _weight_cache.derived(
            "conv_nhwc_grouped_pointwise",
            [w],
            (group,),
            lambda: np.ascontiguousarray(w.reshape(g, mg, cg).transpose(0, 2, 1)),
        )
        self._packed: tuple[Any, list[packed_gemm.Packed]] | None = None

    def _packs(self, x: np.ndarray) -> tuple[Any, list[packed_gemm.Packed]] | None:
        """(module, each group's packed weight) when float32 runs the compiled GEMM."""
        if x.dtype != np.float32:
            return None
        mod = packed_gemm.module()
        if mod is None:
            return None
        kept = self._packed
        if kept is not None and kept[0] is mod:
            return kept
        packs = [packed_gemm.packed(self.wg[i], mod, self.wg, i) for i in range(self.group)]
        if any(p is None for p in packs):
            return None
        self._packed = (mod, packs)  # type: ignore[assignment]  # (no None: checked)
        return self._packed

    def run(
        self, x: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool]:
        route = self._packs(x)
        if route is None:
            return self._product(x, addend), False
        mod, packs = route
        g, cg, mg, c, m, rows = self.group, self.cg, self.mg, self.c, self.m, self.rows
        # An NCHW image's group is a slab of Cg planes (one image: the planes of every
        # image are not one slab), read as the transposed operand.
        transposed = x.shape[0] == 1 and x.flags.c_contiguous
        flat_x = (x if transposed else nhwc(x)).reshape(-1)
        out = out_empty(self.nhwc_shape)
        flat_out = out.reshape(-1)
        flat_add = None if addend is None else nhwc(addend).reshape(-1)
        code, lo, hi = _gemm_act(act)
        bias = self.bias
        for i in range(g):
            p = packs[i]
            mod.gemm(
                flat_x[i * cg * rows :] if transposed else flat_x[i * cg :],
                rows if transposed else c,
                rows, cg, p.data, p.offset, p.n, p.nr,
                flat_out[i * mg :], m,
                None if bias is None else bias[i * mg : (i + 1) * mg],
                None if flat_add is None else flat_add[i * mg :], m,
                code, lo, hi, False, transposed,
            )  # fmt: skip
        return out, code != ACT_NONE

    def _product(self, x: np.ndarray, addend: np.ndarray | None) -> np.ndarray:
        a = nhwc_view(x).reshape(self.rows, self.group, self.cg).transpose(1, 0, 2)
        return _groups_out(np.matmul(a, self.wg), self.nhwc_shape, self.bias, addend)


class _Pointwise(ChannelsLastConv):
    """1x1 conv: [N*H'*W', C] @ [C, M], written onto the bias and residual."""

    def __init__(
        self,
        x_shape: tuple[int, ...],
        wt: np.ndarray,
        bias: np.ndarray | None,
        strides: Sequence[int],
        out_shape: Sequence[int],
    ) -> None:
        n, c = x_shape[:2]
        self.wt = wt
        self.bias = bias
        self.strided = any(s > 1 for s in strides)
        self.strides = tuple(strides)
        self.rows = n * math.prod(out_shape)
        self.nhwc_shape = (n, *out_shape, wt.shape[1])
        self.out_shape = (n, wt.shape[1], *out_shape)
        self.c = c
        self._packed: tuple[Any, packed_gemm.Packed] | None = None
        self._w_mc: np.ndarray | None = None  # the weight as [M, C], for run_nchw

    def run(
        self, x: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool]:
        route = self._packed_route(x)
        if route is not None:
            return self._packed_product(*route, x, addend, act)
        return self._product(x, addend), False

    def run_nchw(
        self, x: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool] | None:
        """A chain's NCHW exit with at most PLANES_MAX_OUT output channels (a UNet's or a
        segmentation head's mask): the planes written straight from the channels-last rows
        (native/_pointwise.c), or None.  The packed GEMM filled a panel of 16 channels
        for 2 and the result then went through a transposing copy: a UNet's 16 -> 2 head
        at 128x128, 334-500 us in its run, onnxruntime's 90."""
        m = self.wt.shape[1]
        if (
            _POINTWISE is None
            or m > PLANES_MAX_OUT
            or addend is not None
            or self.strided
            or x.dtype != np.float32
            or not is_channels_last(x)
            or (self.bias is not None and self.bias.dtype != np.float32)
        ):
            return None
        if self._w_mc is None:
            self._w_mc = np.ascontiguousarray(self.wt.T, dtype=np.float32)
        n, c = x.shape[:2]
        out = np.empty(self.out_shape, dtype=np.float32)
        _POINTWISE.planes(nhwc_view(x), self._w_mc, self.bias, out, n, self.rows // n, c, m)
        return out, False

    def _packed_route(self, x: np.ndarray) -> tuple[Any, packed_gemm.Packed] | None:
        """(module, packed weight) when this conv of ``x`` runs the compiled GEMM: float32,
        more than a few rows, the routing's choice (packed_gemm.use_for); else None."""
        if x.dtype != np.float32 or self.rows <= _FEW_ROWS:
            return None
        mod = packed_gemm.module()
        if mod is None or not packed_gemm.use_for(self.rows, self.c, self.wt.shape[1]):
            return None
        p = self._packed_for(mod)
        return None if p is None else (mod, p)

    def held(
        self,
        x: np.ndarray,
        act: Activation | None,
        nargs: int,
        residual: int | None,
        places: tuple[int, ...],
        expect: tuple[Any, ...],
        fallback: Any,
        inplace: bool = False,
        pool: PoolWindow | None = None,
    ) -> Any:
        """A compiled call of this conv for a fused node's inputs like these
        (packed_gemm.held_pointwise), or None where `run` would not take the packed
        product (a strided conv, few rows, another routing) or would leave ``act`` to the
        caller."""
        code = ACT_NONE if act is None else act[0]
        if pool is not None or self.strided or (code != ACT_NONE and code not in _GEMM_ACTS):
            return None
        route = self._packed_route(x)
        if route is None:
            return None
        n, _, h, w = self.out_shape
        return packed_gemm.held_pointwise(
            *route,
            self.bias,
            (n, h, w),
            (ACT_NONE, math.nan, math.nan) if act is None else act,
            nargs,
            residual,
            places,
            expect,
            fallback,
            inplace,
        )

    def _packed_for(self, mod: Any) -> packed_gemm.Packed | None:
        """The packed weight for ``mod`` (a forced level loads another module), kept on
        the runner: the weight cache's lookup per call was a few percent of
        MobileNetV3's run.  ``self.wt`` is frozen when packed (packed_gemm.packed)."""
        kept = self._packed
        if kept is not None and kept[0] is mod:
            return kept[1]
        p = packed_gemm.packed(self.wt, mod)
        if p is not None:
            self._packed = (mod, p)
        return p

    def _packed_product(
        self,
        mod: Any,
        p: packed_gemm.Packed,
        x: np.ndarray,
        addend: np.ndarray | None,
        act: Activation | None,
    ) -> tuple[np.ndarray, bool]:
        """The compiled GEMM by the packed weight: bias, residual and a Relu, Clip,
        HardSwish or SiLU applied before its accumulators are stored (no pass of their own).  A
        single NCHW image is read as the transposed operand (the kernel copies it tile by
        tile: Inception's 1x1 convs after a Concat paid a whole transposing copy)."""
        transposed = x.shape[0] == 1 and not self.strided and x.flags.c_contiguous
        if transposed:
            a = x.reshape(self.c, self.rows)
        else:
            xl = x.transpose(0, 2, 3, 1)
            if self.strided:
                xl = xl[:, :: self.strides[0], :: self.strides[1], :]
            a = (np.ascontiguousarray(xl) if self.strided else nhwc(x)).reshape(self.rows, self.c)
        out = out_empty(self.nhwc_shape)
        flat = out.reshape(self.rows, -1)
        d = None
        if addend is not None:
            d = nhwc(addend).reshape(flat.shape)
        code, lo, hi = _gemm_act(act)
        packed_gemm.matmul_packed(
            mod,
            a,
            p,
            flat,
            bias=self.bias,
            addend=d,
            act=code,
            lo=lo,
            hi=hi,
            a_transposed=transposed,
        )
        return out, code != ACT_NONE

    def _product(self, x: np.ndarray, addend: np.ndarray | None) -> np.ndarray:
        xl = x.transpose(0, 2, 3, 1)
        if self.strided:
            xl = xl[:, :: self.strides[0], :: self.strides[1], :]
        a = (np.ascontiguousarray(xl) if self.strided else nhwc(x)).reshape(self.rows, self.c)
        bias = self.bias
        if self.rows <= _FEW_ROWS:
            # A squeeze-excite block's 1x1 conv on one pixel: the product and one add,
            # no GEMM set-up (a fresh product is cheaper than writing onto the bias).
            y = np.matmul(a, self.wt)
            if bias is not None:
                y += bias
            if addend is not None:
                y += nhwc_view(addend).reshape(y.shape)
            return y.reshape(self.nhwc_shape)
        out = np.empty(self.nhwc_shape, dtype=x.dtype)
        flat = out.reshape(self.rows, -1)
        if addend is None and bias is None:
            np.matmul(a, self.wt, out=flat)
            return out
        if addend is not None:
            if bias is not None:
                np.add(nhwc_view(addend), bias, out=out)
            else:
                out[...] = nhwc_view(addend)
        else:
            flat[...] = bias
        blas.gemm(a, self.wt, flat, accumulate=True)
        return out


# Output rows up to which a pointwise conv is one plain product (SE blocks' 1x1 convs).
_FEW_ROWS = 16
# The compiled few-channel 1x1 conv into NCHW planes (native/_pointwise.c), None when the
# kernels are off or not built; it takes convs of up to PLANES_MAX_OUT output channels.
_POINTWISE = native.load("pointwise")
PLANES_MAX_OUT = 8


# Kernel area from which a kernel == stride conv runs `_Patches` (nn_conv.PATCH_AREA;
# bench, one thread, us, patches / direct): 16x16 patches of 3 channels to 192 at 224
# px 398 / 623, to 768 1475 / 2268, to 128 at 96 px 63 / 76; 8x8 ties (242 / 227), and
# 4x4 and 2x2 lose (64 -> 128 at 56 px, 4x4: 622 / 499; 2x2: 745 / 277), the patch
# copy's inner loop being kw floats long.
_PATCH_AREA = PATCH_AREA


class _Patches(_Pointwise):
    """Conv whose kernel equals its stride, unpadded, undilated, with a large kernel (a
    ViT's patch embedding): the image cut into its patches, one copy into channels-last
    rows of C*kh*kw values in the weight's (C, kh, kw) order, then the pointwise conv's
    GEMM by the weight as a (C*kh*kw, M) matrix (packed, bias, residual and activation
    in its epilogue).  The direct kernel ran ViT-tiny's 16x16/16 patches of 3 channels
    at 34 GMAC/s (844 us in the model)."""

    def __init__(
        self,
        x_shape: tuple[int, ...],
        wt: np.ndarray,
        bias: np.ndarray | None,
        kernel: Sequence[int],
        out_shape: Sequence[int],
    ) -> None:
        n, c = x_shape[:2]
        self.kernel = tuple(kernel)
        self.out_hw = tuple(out_shape)
        super().__init__((n, c * math.prod(kernel), *out_shape), wt, bias, (1, 1), out_shape)

    def run(
        self, x: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool]:
        rows = patch_rows(x, self.kernel, self.out_hw)
        return super().run(rows.transpose(0, 3, 1, 2), addend, act)

    def held(
        self,
        x: np.ndarray,
        act: Activation | None,
        nargs: int,
        residual: int | None,
        places: tuple[int, ...],
        expect: tuple[Any, ...],
        fallback: Any,
        inplace: bool = False,
        pool: PoolWindow | None = None,
    ) -> Any:
        """None: the pointwise conv's held call reads its rows from the image in place,
        where these rows are the patches, copied first (the call would take no image)."""
        return None


class _Depthwise(ChannelsLastConv):
    """Depthwise conv of any stride, dilation and padding.

    The padded image is split along its width into the stride's phases (columns p,
    p+s, p+2s, ...; one phase for stride 1).  Kernel column j reads phase (j*d) % s
    at phase column (j*d) // s + ow, so within one phase consecutive outputs read
    consecutive pixels, and the kernel columns of one phase are evenly spaced: each
    phase is one einsum over (kernel rows, its kernel columns) whose innermost axis is
    out_w * C contiguous values (the weights tiled out_w times to match)."""

    def __init__(
        self,
        x_shape: tuple[int, ...],
        w: np.ndarray,
        bias: np.ndarray | None,
        kernel: Sequence[int],
        strides: Sequence[int],
        dilations: Sequence[int],
        pads: Sequence[int],
        out_shape: Sequence[int],
    ) -> None:
        n, c, h, wd = x_shape
        kh, kw = kernel
        # The bias repeated along an output row: added to (N, H', W' * C) rows, a long
        # inner loop instead of one of C (10.8 -> 7.3 us at 96 channels of 28x28).
        self.bias_row = None if bias is None else np.tile(bias, out_shape[1])
        self.pads = tuple(pads)
        self.strides = tuple(strides)
        self.dilations = tuple(dilations)
        self.kh = kh
        self.oh, self.ow = out_shape
        self.out_shape = (n, c, self.oh, self.ow)
        self.padded_w = wd + pads[1] + pads[3]
        self.w = w
        self.bias = None if bias is None else np.ascontiguousarray(bias)
        self.kernel = (kh, kw)
        self._taps: np.ndarray | None = None
        self._phases: list[tuple[int, int, int, np.ndarray]] | None = None
        # Pixels between a phase's kernel columns (they are sw / gcd(sw, dw) apart).
        self.column_step = dilations[1] // math.gcd(strides[1], dilations[1])

    def phases(self) -> list[tuple[int, int, int, np.ndarray]]:
        """Per stride phase of the einsum path: (phase, its first column's shift, its
        kernel columns, tiled weights); made on the first numpy run."""
        if self._phases is None:
            sw, dw = self.strides[1], self.dilations[1]
            phases = []
            for phase in range(sw):
                columns = [j for j in range(self.kernel[1]) if (j * dw) % sw == phase]
                if columns:
                    tiled = _tiled_weights(self.w, self.kernel, dw, sw, phase, self.ow)
                    phases.append((phase, (columns[0] * dw) // sw, len(columns), tiled))
            self._phases = phases
        return self._phases

    def run(
        self, x: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool]:
        if x.dtype == np.float32:
            y = self._run_native(x, addend, act)
            if y is not None:
                return y
        return self._einsum(x, addend), False

    def _einsum(self, x: np.ndarray, addend: np.ndarray | None) -> np.ndarray:
        n, c = x.shape[:2]
        oh, ow, kh = self.oh, self.ow, self.kh
        sh, sw = self.strides
        dh = self.dilations[0]
        xl = nhwc_view(x)
        out = np.empty((n, oh, ow * c), dtype=x.dtype)
        first = True
        for phase, shift, count, tiled in self.phases():
            image = _phase_image(xl, self.pads, phase, sw, self.padded_w)
            st = image.strides
            view = np.lib.stride_tricks.as_strided(
                image[:, :, shift:, :],
                (n, oh, kh, count, ow * c),
                (st[0], st[1] * sh, st[1] * dh, st[2] * self.column_step, st[3]),
                writeable=False,
            )
            if first:
                np.einsum("zakby,kby->zay", view, tiled, out=out)
                first = False
            else:
                part = scratch("conv_nhwc_part", out.shape, out.dtype)
                np.einsum("zakby,kby->zay", view, tiled, out=part)
                out += part
        if self.bias_row is not None:
            out += self.bias_row
        y = out.reshape(n, oh, ow, c)
        if addend is not None:
            y += nhwc_view(addend)
        return y

    def held(
        self,
        x: np.ndarray,
        act: Activation | None,
        nargs: int,
        residual: int | None,
        places: tuple[int, ...],
        expect: tuple[Any, ...],
        fallback: Any,
        inplace: bool = False,
        pool: PoolWindow | None = None,
    ) -> Any:
        """The compiled call of `run` on a channels-last ``x`` (native/_depthwise.c's
        `held`, the residual channels-last), once `_run_native` has made the weight's
        taps; or None: another dtype, the kernels off, a pool."""
        module = native.load("depthwise")
        if pool is not None or module is None or x.dtype != np.float32 or self._taps is None:
            return None
        n, c, h, w = x.shape
        code, lo, hi = (ACT_NONE, math.nan, math.nan) if act is None else act
        return module.held(
            self._taps, self.bias, (n, h, w, c), self.kernel, (self.oh, self.ow), self.strides,
            self.dilations, (self.pads[0], self.pads[1]), code, lo, hi, nargs,
            -1 if residual is None else residual, tuple(places), tuple(expect), fallback,
            *native.held_arrays(),
        )  # fmt: skip

    def _run_native(
        self, x: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool] | None:
        """The compiled kernel's (N, H', W', C) result (sum, bias, addend, in that order,
        then ``act`` when the addend is in the kernel's pass too) and whether ``act`` is
        in it, or None when the kernel is off.  It reads the channels-last input in
        place (an NCHW one through one transposing copy) and skips the padding: no
        padded image."""
        if native.level() is None:
            return None
        n, c = x.shape[:2]
        xl = nhwc(x)
        wk = self._taps
        if wk is None:  # (kh, kw, C): the per-offset channel rows the kernel reads
            kh, kw = self.kernel
            wk = self._taps = np.ascontiguousarray(self.w.reshape(c, kh * kw).T).reshape(kh, kw, c)
        add = None
        if addend is not None:
            add = nhwc_view(addend)
            if not add.flags.c_contiguous:
                add = None  # added below, after the bias, as on the numpy path
        out = np.empty((n, self.oh, self.ow, c), dtype=x.dtype)
        # The activation comes after the addend: in the kernel only when the addend is.
        fused = act is not None and (addend is None or add is not None)
        if not native_depthwise(
            xl,
            wk,
            self.bias,
            add,
            out,
            self.strides,
            self.dilations,
            self.pads,
            act if fused and act is not None else (ACT_NONE, math.nan, math.nan),
        ):
            return None
        if addend is not None and add is None:
            out += nhwc_view(addend)
        return out, fused


# Input x output channels from which a Winograd-fitting conv runs Winograd, not the
# direct kernel, in a channels-last chain (see _Direct), by the kernel's vector width:
# at AVX2 (8 lanes) the direct kernel's unrolled channel loop (_conv.c sums8) beat
# Winograd on ResNet-50's 256-channel 3x3s (Zen 3, 14 px: 3008 against 3350 us;
# onnxruntime 3157) and tied on its 512-channel ones; whole runs alternated in one
# process, Winograd from 512 x 512 against from 256 x 256: ResNet-50 0.958, its torch
# export 0.954 of the time.  AVX-512 keeps the threshold it was measured at.
_WINOGRAD_CM = {8: 512 * 512, 16: 256 * 256}

# The blocked direct kernel (native/_conv.c conv_blocked) runs a conv of at least this
# many input and output channels whose output rows are at most this wide, at AVX-512
# (see _Direct).
_BLOCKED_MIN_CHANNELS = 128
_BLOCKED_MAX_WIDTH = 16


def blocked_pays(c: int, m: int, kernel: Sequence[int], out_shape: Sequence[int]) -> bool:
    """Whether a plain 2-D conv of channels-last input and output runs the blocked direct
    kernel rather than `_Direct`'s others: AVX-512 (16 lanes), the routing not switched
    off (ONNXVIZ_BLOCKED_CONV=off), a kernel larger than 1x1, many channels, narrow
    output rows (`_Direct`'s numbers)."""
    return (
        direct_lanes() == 16
        and os.environ.get("ONNXVIZ_BLOCKED_CONV", "auto").strip().lower() != "off"
        and math.prod(kernel) > 1
        and min(c, m) >= _BLOCKED_MIN_CHANNELS
        and out_shape[-1] <= _BLOCKED_MAX_WIDTH
    )


class _Direct(ChannelsLastConv):
    """Plain conv (one group, any kernel, stride, dilation and padding) by the compiled
    direct kernel (native/_conv.c): the channels-last input read in place (an NCHW one
    through the kernel's own row transposes), weight packed once, bias, a channels-last
    addend and the chain's activation in its one pass.

    benchmarks/bench_direct_conv.py, one thread, AVX-512, us (nn_conv's path on NCHW ->
    this on NHWC): ResNet-18 w32 stem 7x7/2 3686 -> 1641, 3x3 56 px 32 ch 1014 -> 551,
    28 px 64 ch 761 -> 506, 14 px 128 ch 818 -> 465, 7 px 256 ch 1585 -> 748, the 3x3/2
    ones 684 -> 349, 562 -> 347, 594 -> 318; UNet 16 ch 128 px 1885 -> 974, 32 ch 64 px
    1494 -> 890.  It loses where Winograd's 2.25x fewer products pay at 128+ channels
    (ResNet-50 28 px 128 ch 2115 -> 2473, 14 px 256 ch 2039 -> 2662); up to 256 x 256
    channels it runs all the same, so the chain keeps its layout (Winograd there hands
    back NCHW and its readers pay transposing copies), from there on Winograd runs.

    At AVX-512 a conv of at least 128 input and output channels whose output rows are at
    most 16 pixels wide runs the blocked kernel instead (`blocked_pays`; _conv.c
    conv_blocked: 64 output channels x 16 input channels of weights kept in L1 while
    every pixel reads them, the next block prefetched), Winograd's shapes included.
    Its weight and output start at a multiple of 64 bytes (`aligned_empty`).  Inside the
    models (`Session.run`'s node times, one thread, off/on alternated in one process,
    ms): ResNet-50's 14 px 256-channel 3x3s 2.0-2.2 -> 1.5-1.7 (they ran Winograd), its
    7 px 512-channel ones 2.3 -> 1.5-1.7; torchvision's 3x3/2 of 512 channels 2.6 ->
    1.7-1.8, of 256 channels 1.8 -> 1.7 (onnxruntime's NCHWc kernels: 1.5-1.6 and
    1.9-2.0 for the stride-1 ones).  On 28-pixel rows it tied inside the models
    (ResNet-50's 128-channel 3x3s and torchvision's 3x3/2 56 -> 28 px: within noise,
    one of them 1.7 -> 1.8), so the tiles above keep those."""

    def __init__(
        self,
        x_shape: tuple[int, ...],
        w: np.ndarray,
        lanes: int,
        m: int,
        bias: np.ndarray | None,
        kernel: Sequence[int],
        strides: Sequence[int],
        dilations: Sequence[int],
        pads: Sequence[int],
        out_shape: Sequence[int],
    ) -> None:
        n = x_shape[0]
        self.w = w
        self._wp: np.ndarray | None = None
        self.lanes = lanes
        self.m = m
        self.bias = None if bias is None else np.ascontiguousarray(bias)
        self.kernel = tuple(kernel)
        self.strides = tuple(strides)
        self.dilations = tuple(dilations)
        self.pads = tuple(pads)
        self.nhwc_shape = (n, *out_shape, m)
        self.out_shape = (n, m, *out_shape)
        # Where Winograd's 2.25x fewer products beat the direct kernel by more than the
        # layout costs, the conv runs Winograd on the channels-last input and hands out
        # its NCHW result: from 256 x 256 channels at AVX-512 (ResNet-50's 14 px layers,
        # 2122 us against 2841 direct), from 512 x 512 at AVX2 (`_WINOGRAD_CM`).  Below
        # it the direct kernel stays: the chain keeps its layout (a threshold of 128 x 128
        # put UNet's and ResNet-18's 128-channel layers on Winograd and cost those models
        # 3-7% in bench_families; ResNet-50 did not move either way then, its time in its
        # 1x1 GEMMs).
        c = x_shape[1]
        self.winograd: ConvWeight | None = None
        self.blocked: np.ndarray | None = None
        self.fused_winograd: np.ndarray | None = None
        if nn_winograd.fused_pays(n, c, m, kernel, strides, dilations, pads, out_shape):
            self.fused_winograd = nn_winograd.packed_nhwc(w)
        elif blocked_pays(c, m, kernel, out_shape):
            self.blocked = _weight_cache.derived("conv_blocked", [w], (), lambda: pack_blocked(w))
        elif c * m >= _WINOGRAD_CM.get(lanes, 256 * 256) and nn_winograd.fits(
            c, m, 1, kernel, strides, dilations, pads, out_shape
        ):
            self.winograd = ConvWeight(w)
        if self.blocked is None and self.fused_winograd is None:
            self._direct_weight()

    def held(
        self,
        x: np.ndarray,
        act: Activation | None,
        nargs: int,
        residual: int | None,
        places: tuple[int, ...],
        expect: tuple[Any, ...],
        fallback: Any,
        inplace: bool = False,
        pool: PoolWindow | None = None,
    ) -> Any:
        """The compiled call of `run` on an ``x`` laid out as this one (native/_conv.c's
        `held`): channels-last, the blocked kernel where `run` takes it, else the direct
        one; C-contiguous NCHW (a stem reading the model's input), the direct kernel
        reading it through its row transposes, as `_run` does.  The residual
        channels-last; with ``inplace`` the direct kernel's results go over a residual
        nothing else holds (the blocked kernel stores partial sums first: never).  With
        ``pool`` (no residual) it returns the max pool of that result, computed band by
        band of output rows while they are in cache.  None: Winograd, another dtype or
        layout, the kernels off."""
        if self.fused_winograd is not None:
            if pool is not None or not is_channels_last(x) or x.dtype != np.float32:
                return None  # `_run` takes these (the pool: the chain's own call)
            return nn_winograd.held_nhwc(
                self.fused_winograd, self.m, self.bias, x.shape, self.out_shape[2:],
                self.pads, act, nargs, residual, places, expect, fallback, inplace,
            )  # fmt: skip
        module = native.load("conv")
        if module is None or self.winograd is not None or x.dtype != np.float32:
            return None
        x_first = not is_channels_last(x)
        if x_first and not x.flags.c_contiguous:
            return None  # `_run` copies such an x first
        blocked = self.blocked is not None and not x_first
        weight = self.blocked if blocked else self._direct_weight()
        n, c, h, w = x.shape
        code, lo, hi = (ACT_NONE, math.nan, math.nan) if act is None else act
        return module.held(
            weight, blocked, 0 if blocked else self.lanes, self.bias, (n, h, w, c),
            (self.m, *self.kernel), tuple(self.out_shape[2:]), self.strides, self.dilations,
            (self.pads[0], self.pads[1]), code, lo, hi, nargs,
            -1 if residual is None else residual, tuple(places), tuple(expect), fallback,
            *native.held_arrays(), x_first, inplace and not blocked, pool,
        )  # fmt: skip

    def _direct_weight(self) -> np.ndarray:
        """The weight packed for the direct kernel's tiles (`pack_direct`, made once per
        weight); a conv routed to the blocked kernel makes it only when a call needs
        those tiles (an NCHW output or a non-contiguous input): not both forms of
        ResNet-50's 45 MB of wide 3x3 weights."""
        wp = self._wp
        if wp is None:
            w, lanes = self.w, self.lanes
            wp = _weight_cache.derived("conv_direct", [w], (lanes,), lambda: pack_direct(w, lanes))
            self._wp = wp
        return wp  # type: ignore[no-any-return]

    def run(
        self, x: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool]:
        return self._run(x, addend, act, False)

    def run_nchw(
        self, x: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool] | None:
        # A chain's exit: the kernel writes the planes, no transposing copy after.
        y, done = self._run(x, addend, act, True)
        return np.ascontiguousarray(y.transpose(0, 3, 1, 2)), done

    def _core(
        self, x: np.ndarray, addend: np.ndarray | None, packed: ConvWeight | None = None
    ) -> np.ndarray:
        """The (N, M, H', W') conv by nn_conv's own paths (Winograd with ``packed``), bias
        and ``addend`` in."""
        return conv_core(
            x,
            self.w,
            1,
            self.kernel,
            self.strides,
            self.dilations,
            self.pads,
            self.out_shape[2:],
            self.bias,
            packed=packed,
            addend=addend,
        )

    def _run(
        self, x: np.ndarray, addend: np.ndarray | None, act: Activation | None, planes: bool
    ) -> tuple[np.ndarray, bool]:
        """(N, H', W', M) result (a view of (N, M, H', W') planes when ``planes``)."""
        if self.winograd is not None:
            return nhwc_view(self._core(x, addend, self.winograd)), False
        xl = nhwc_view(x)
        if self.fused_winograd is not None and x.dtype == np.float32:
            # An NCHW input (a chain entered from an NCHW value) by the compiled
            # transposing copy, and at a chain's NCHW exit the result copied into planes
            # the same way: the direct kernel's NCHW reads and writes cost more than the
            # copies save it (an FPN's 128-channel 3x3 after its upsampling, 56 px: 8 ms
            # direct, 4 ms so).
            got = self._run_winograd(xl if xl.flags.c_contiguous else nhwc(x), addend, act)
            if got is not None:
                if planes:
                    return nhwc_view(planes_copy(got[0].transpose(0, 3, 1, 2))), got[1]
                return got
        if self.blocked is not None and not planes and xl.flags.c_contiguous:
            got = self._run_blocked(xl, addend, act)
            if got is not None:
                return got
        first = False
        if not xl.flags.c_contiguous:
            if x.flags.c_contiguous:
                xl, first = x, True  # the kernel transposes the rows it reads
            else:
                xl = nhwc(x)
        add = None
        if addend is not None:
            add = addend if planes else nhwc_view(addend)
            if not add.flags.c_contiguous:
                add = None  # added below, after the bias
        out = out_empty(self.out_shape if planes else self.nhwc_shape)
        fused = act is not None and (addend is None or add is not None)
        done = native_direct(
            xl,
            self._direct_weight(),
            self.lanes,
            self.m,
            self.kernel,
            self.bias,
            add,
            out,
            self.strides,
            self.dilations,
            self.pads,
            act if fused and act is not None else (ACT_NONE, math.nan, math.nan),
            x_first=first,
            out_first=planes,
        )
        if planes:
            out = nhwc_view(out)
        if not done:  # the kernels were switched off since prepare (tests do)
            return nhwc(self._core(x, addend)), False
        if addend is not None and add is None:
            out += nhwc_view(addend)
        return out, fused

    def _run_winograd(
        self, xl: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool] | None:
        """The fused Winograd conv's (N, H', W', M) result of the channels-last ``xl`` and
        whether ``act`` is in it, or None when the kernels are off."""
        if xl.dtype != np.float32:
            return None
        add = None if addend is None else nhwc_view(addend)
        if add is not None and not add.flags.c_contiguous:
            add = None  # added below, after the bias
        out = out_empty(self.nhwc_shape)
        fused = act is not None and (addend is None or add is not None)
        assert self.fused_winograd is not None
        if not nn_winograd.conv_nhwc(
            xl,
            self.fused_winograd,
            self.m,
            self.bias,
            add,
            out,
            self.pads,
            act if fused and act is not None else (ACT_NONE, math.nan, math.nan),
        ):
            return None
        if addend is not None and add is None:
            out += nhwc_view(addend)
        return out, fused

    def _run_blocked(
        self, xl: np.ndarray, addend: np.ndarray | None, act: Activation | None
    ) -> tuple[np.ndarray, bool] | None:
        """The blocked kernel's (N, H', W', M) result of the channels-last ``xl`` and
        whether ``act`` is in it, or None when the kernels are off."""
        add = None if addend is None else nhwc_view(addend)
        if add is not None and not add.flags.c_contiguous:
            add = None  # added below, after the bias
        out = aligned_empty(self.nhwc_shape)  # its partial sums go out and back per chunk
        fused = act is not None and (addend is None or add is not None)
        assert self.blocked is not None
        if not native_blocked(
            xl,
            self.blocked,
            self.m,
            self.kernel,
            self.bias,
            add,
            out,
            self.strides,
            self.dilations,
            self.pads,
            act if fused and act is not None else (ACT_NONE, math.nan, math.nan),
        ):
            return None
        if addend is not None and add is None:
            out += nhwc_view(addend)
        return out, fused


def _phase_image(
    xl: np.ndarray, pads: Sequence[int], phase: int, stride: int, padded_w: int
) -> np.ndarray:
    """The zero-padded (N, H+pads, cols, C) image of padded columns phase, phase+stride,
    ... of the channels-last view ``xl``, in a reused buffer (only the borders zeroed)."""
    n, h, wd, c = xl.shape
    top, left, bottom = pads[0], pads[1], pads[2]
    rows = h + top + bottom
    cols = len(range(phase, padded_w, stride))
    image = scratch(f"conv_nhwc_phase{phase}", (n, rows, cols, c), xl.dtype)
    # Image column j is padded column phase + j*stride, input column that minus left.
    lo = max(0, -(-(left - phase) // stride))
    start = phase + lo * stride - left
    count = min(len(range(start, wd, stride)), cols - lo) if start < wd else 0
    hi = lo + max(count, 0)
    if top:
        image[:, :top] = 0
    if bottom:
        image[:, top + h :] = 0
    if lo:
        image[:, top : top + h, :lo] = 0
    if hi < cols:
        image[:, top : top + h, hi:] = 0
    if count > 0:
        image[:, top : top + h, lo:hi] = xl[:, :, start : start + (count - 1) * stride + 1 : stride]
    return image


def _tiled_weights(
    w: np.ndarray, kernel: Sequence[int], dilation: int, stride: int, phase: int, width: int
) -> np.ndarray:
    """The depthwise weights (kernel rows, phase's kernel columns, width * C): each
    kernel position's per-channel row repeated ``width`` times (made once per weight)."""
    kh, kw = kernel

    def build() -> np.ndarray:
        c = w.shape[0]
        rows = w.reshape(c, kh, kw).transpose(1, 2, 0)  # (kh, kw, C)
        columns = [j for j in range(kw) if (j * dilation) % stride == phase]
        return np.ascontiguousarray(np.tile(rows[:, columns, :], (1, 1, width)))

    return _weight_cache.derived(  # type: ignore[no-any-return]
        "conv_nhwc_depthwise", [w], (dilation, stride, phase, width), build
    )


# Activations a fused conv applies to its fresh output in place (runtime.fusion): the
# same operations, in the same order, as their kernels in math_activation, so the
# numbers are those of the stepped run, without the kernel's fresh arrays.
FUSED_ACTIVATIONS = frozenset({"Relu", "HardSwish", "HardSigmoid"})


def activate_in_place(y: np.ndarray, op_type: str, attrs: dict[str, Any]) -> None:
    """Apply ``op_type`` (one of FUSED_ACTIVATIONS, with its node's attributes) to the
    float array ``y``, which nobody else holds, in place (NCHW or channels-last).  A
    float32 HardSwish runs the compiled one-pass kernel (native/_activation.c, the same
    operations) when it is on."""
    dense = y if y.flags.c_contiguous else y.transpose(0, 2, 3, 1)
    if not dense.flags.c_contiguous:
        dense = y  # some other layout: numpy still computes it right
    if op_type == "Relu":
        _relu_rows(dense)
    elif op_type == "HardSwish":
        if dense.dtype == np.float32 and dense.flags.c_contiguous:
            module = native.load("activation")
            if module is not None:  # the same steps in one pass (native/_activation.c)
                module.activate(dense, ACT_HARDSWISH, math.nan, math.nan)
                return
        gate = scratch("conv_activation_gate", dense.shape, dense.dtype)
        np.multiply(dense, 1.0 / 6.0, out=gate)
        gate += 0.5
        np.clip(gate, 0, 1, out=gate)
        dense *= gate
    elif op_type == "HardSigmoid":
        dense *= float(attrs.get("alpha", 0.2))
        dense += float(attrs.get("beta", 0.5))
        np.clip(dense, 0, 1, out=dense)
    else:
        raise ValueError(f"not a fused activation: {op_type}")


# Row length of `_relu_rows`' zero row (4 KB of float32: stays in L1).
_ROW = 1024
_ZERO_ROWS = {np.dtype(t): np.zeros(_ROW, dtype=t) for t in (np.float32, np.float64)}


def _relu_rows(x: np.ndarray) -> None:
    """max(x, 0) in place, bit for bit np.maximum's (NaN kept, -0 -> +0), for a
    contiguous float array: against a row of zeros instead of the scalar 0.  numpy 2.4's
    maximum with a broadcast scalar runs a loop 3-4x slower than with two contiguous
    operands (800k float32: 240 us against 80 us; 47k: 15 against 6 us)."""
    zero = _ZERO_ROWS.get(x.dtype)
    if zero is None or not x.flags.c_contiguous:
        np.maximum(x, x.dtype.type(0), out=x)
        return
    flat = x.reshape(-1)
    whole = flat.size - flat.size % _ROW
    if whole:
        rows = flat[:whole].reshape(-1, _ROW)
        np.maximum(rows, zero, out=rows)
    if whole < flat.size:
        tail = flat[whole:]
        np.maximum(tail, zero[: tail.size], out=tail)
