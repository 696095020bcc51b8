"""Channels-last (NHWC) convolutions for unwatched runs (runtime.fusion_layout).

A channels-last value is still an (N, C, H, W) array as far as every other kernel and
the caller are concerned: it is the (N, C, H, W) *view* of a contiguous (N, H, W, C)
buffer (``y.transpose(0, 3, 1, 2)``), so any reader gets the right numbers whatever its
layout preference (numpy's elementwise ops even keep the layout: their results follow
the operands' memory order).  What the layout changes is the cost of these kernels:

* depthwise conv (one input channel per group): the padded channels-last image is
  summed over the kernel offsets by one einsum per stride phase, whose innermost axis
  is a whole output row times the channels (out_w * C consecutive floats) and whose
  weights are the per-channel rows tiled to match; no transposing copy in or out when
  the neighbours are channels-last too;
* pointwise conv (1x1, one group): a single GEMM [N*H*W, C] @ [C, M] onto the bias (and
  the residual), reading the channels-last input in place and writing a channels-last
  output.

`conv_channels_last` takes any layout (an (N, C, H, W) contiguous input costs the one
transposing copy the padding or the GEMM's operand needs anyway) and returns None for a
conv it does not handle, so the caller runs the plain kernel.  The weight forms it reads
(tiled depthwise rows, the transposed pointwise matrix) are made once per constant
weight through kernels._weight_cache.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxviz.runtime.kernels import _weight_cache, blas
from onnxviz.runtime.kernels.nn_conv import conv_geometry
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


def nhwc(x: np.ndarray) -> np.ndarray:
    """The (N, H, W, C) view of an (N, C, H, W) array (a copy only when ``x`` is not
    channels-last already)."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


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
    kernel).  ``attrs`` are the node's Conv attributes."""
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
    n, c = x.shape[:2]
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
    if addend is not None and (
        type(addend) is not np.ndarray
        or addend.dtype != x.dtype
        or addend.shape != (n, m, *out_shape)
    ):
        return None
    if group == 1 and kernel == [1, 1] and not any(pads):
        y = _pointwise(x, w, bias, strides, out_shape, addend)
    elif w.shape[1] == 1 and m == group > 1:
        y = _depthwise(x, w, bias, kernel, strides, dilations, pads, out_shape)
        if addend is not None:
            y += nhwc_view(addend)
    else:
        return None
    if relu:
        np.maximum(y, 0, out=y)
    return y.transpose(0, 3, 1, 2)


def nhwc_view(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> its (N, H, W, C) view (no copy; any layout)."""
    return x.transpose(0, 2, 3, 1)


def _pointwise(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    strides: Sequence[int],
    out_shape: Sequence[int],
    addend: np.ndarray | None,
) -> np.ndarray:
    """1x1 conv: [N*H'*W', C] @ [C, M], written onto the bias and residual."""
    n, c = x.shape[:2]
    m = w.shape[0]
    xl = nhwc_view(x)
    if any(s > 1 for s in strides):
        xl = xl[:, :: strides[0], :: strides[1], :]
    rows = n * math.prod(out_shape)
    a = np.ascontiguousarray(xl).reshape(rows, c)
    wt = _weight_cache.derived(
        "conv_nhwc_pointwise", [w], (), lambda: np.ascontiguousarray(w.reshape(m, c).T)
    )
    out = np.empty((n, *out_shape, m), dtype=x.dtype)
    flat = out.reshape(rows, m)
    if addend is None and bias is None:
        np.matmul(a, wt, out=flat)
        return out
    if addend is not None:
        if bias is not None:
            np.add(nhwc_view(addend), bias.reshape(-1), out=out)
        else:
            out[...] = nhwc_view(addend)
    else:
        flat[...] = bias.reshape(-1)  # type: ignore[union-attr]
    blas.gemm(a, wt, flat, accumulate=True)
    return out


def _depthwise(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    out_shape: Sequence[int],
) -> np.ndarray:
    """Depthwise conv of any stride, dilation and padding: a fresh (N, H', W', C).

    The padded image is split along its width into the stride's phases (columns p,
    p+s, p+2s, ...; one phase for stride 1).  Kernel column j reads phase (j*d) % s
    at phase column (j*d) // s + ow, so within one phase consecutive outputs read
    consecutive pixels, and the kernel columns of one phase are evenly spaced: each
    phase is one einsum over (kernel rows, its kernel columns) whose innermost axis is
    out_w * C contiguous values (the weights tiled out_w times to match)."""
    n, c, h, wd = x.shape
    kh, kw = kernel
    sh, sw = strides
    dh, dw = dilations
    oh, ow = out_shape
    padded_w = wd + pads[1] + pads[3]
    step = sw // math.gcd(sw, dw)  # kernel columns apart within one phase
    xl = nhwc_view(x)
    out = np.empty((n, oh, ow * c), dtype=x.dtype)
    first = True
    for phase in range(sw):
        columns = [j for j in range(kw) if (j * dw) % sw == phase]
        if not columns:
            continue
        image = _phase_image(xl, pads, phase, sw, padded_w)
        st = image.strides
        view = np.lib.stride_tricks.as_strided(
            image[:, :, (columns[0] * dw) // sw :, :],
            (n, oh, kh, len(columns), ow * c),
            (st[0], st[1] * sh, st[1] * dh, st[2] * (step * dw // sw), st[3]),
            writeable=False,
        )
        tiled = _tiled_weights(w, kernel, dw, sw, phase, ow)
        if first:
            np.einsum("zakby,kby->zay", view, tiled, out=out)
            first = False
        else:
            part = scratch("conv_nhwc_part", out.shape, out.dtype)
            np.einsum("zakby,kby->zay", view, tiled, out=part)
            out += part
    y = out.reshape(n, oh, ow, c)
    if bias is not None:
        y += bias.reshape(-1)
    return y


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
