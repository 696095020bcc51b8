"""Exact 8-bit integer products by the compiled int8 kernel (runtime/native/_int8.c), for
MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv, and the layout plan the QDQ
conv fusion (runtime/fusion_qdq_conv.py) shares.

Each function returns the exact int32 result, or None when the kernel is off, below
AVX2 (its plain-C level is slower than the float64 BLAS path it would replace) or the
operands are not its case; the caller then runs its numpy path, which stays the
definition.  The kernel computes sum_k (W[m,k] - zw[m]) (X[k,n] - zx) with the constant
operand W on the left (packed once per weight array and level through _weight_cache) and
X read through one offset per row; K is at most ``max_k()`` (exact int32: |C| <=
K * 255^2 < 2^31)."""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels import _weight_cache
from onnxviz.runtime.kernels.nn_conv import _flat_geometry
from onnxviz.runtime.kernels.nn_geometry import scratch

_BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


def module() -> ModuleType | None:
    """The compiled int8 kernel when it runs at AVX2 or better, else None."""
    mod = native.load("int8")
    if mod is None or mod.level() < native.AVX2:
        return None
    return mod


def _zero_points(zp: Any, dtype: np.dtype[Any], rows: int) -> np.ndarray | None:
    """One int32 zero point per row of W (None: not a per-tensor or per-row form)."""
    if zp is None:
        return np.zeros(rows, np.int32)
    if type(zp) is not np.ndarray or zp.dtype != dtype or zp.size not in (1, rows):
        return None
    if zp.size != 1 and zp.ndim != 1:
        return None
    return np.ascontiguousarray(np.broadcast_to(zp.astype(np.int32).reshape(-1), (rows,)))


def one_zero_point(zp: Any, dtype: np.dtype[Any]) -> int | None:
    """The zero point when every column has the same one (absent, one value, or a per-column
    vector of equal values, as a symmetric quantizer writes), else None."""
    if zp is None:
        return 0
    if type(zp) is not np.ndarray or zp.dtype != dtype or zp.ndim > 1 or not zp.size:
        return None
    first = int(zp.reshape(-1)[0])
    return first if zp.size == 1 or bool(np.all(zp == zp.reshape(-1)[0])) else None


def packed_columns(mod: ModuleType, b: np.ndarray, zb: int) -> bytes:
    """B [K, N] packed for gemm_rows (its vector operand), kept per weight array, level and
    zero point.  Keyed by B alone with the zero point's value: a caller's fresh
    zero-point array each call (DynamicQuantizeLSTM's per step) must not repack B."""
    k, n = b.shape
    return _weight_cache.derived(  # type: ignore[no-any-return]
        "int8_columns",
        [b],
        (mod.level(), b.dtype.char, b.shape, zb),
        lambda: bytes(
            mod.pack_columns(np.ascontiguousarray(b).view(np.uint8), k, n, b.dtype == np.int8, zb)
        ),
    )


def _scalar_zero_point(zp: Any, dtype: np.dtype[Any]) -> int | None:
    if zp is None:
        return 0
    if type(zp) is not np.ndarray or zp.dtype != dtype or zp.size != 1:
        return None
    return int(zp.reshape(()))


def packed_weight(
    mod: ModuleType,
    kind: str,
    w: np.ndarray,
    w_rows: np.ndarray,
    zp: Any,
    zw: np.ndarray,
    form: str | None = None,
) -> bytes:
    """W [M, K] packed at the kernel's level, kept per (weight array, zero point array);
    with `form`, empty bytes (kept so) when pack_weights chose another form for W."""
    m, k = w_rows.shape

    def build() -> bytes:
        raw = np.ascontiguousarray(w_rows).view(np.uint8)
        packed = bytes(mod.pack_weights(raw, m, k, w_rows.dtype == np.int8, zw))
        return b"" if form is not None and mod.weight_form(packed)[0] != form else packed

    sources = [w] if zp is None else [w, zp]
    # The dtype by its one-letter code: str(dtype) cost 5-7 us on every call.
    return _weight_cache.derived(kind, sources, (mod.level(), w.dtype.char, w.shape), build)  # type: ignore[no-any-return]


def matmul(a: Any, b: Any, a_zero: Any, b_zero: Any) -> np.ndarray | None:
    """(A - za) @ (B - zb) in int32 for A [..., M, K], B [K, N] (8-bit each; za one
    value, zb one value or one per column), or None."""
    mod = module()
    if (
        mod is None
        or type(a) is not np.ndarray
        or type(b) is not np.ndarray
        or a.dtype not in _BYTES
        or b.dtype not in _BYTES
        or a.ndim < 2
        or b.ndim != 2
        or a.shape[-1] != b.shape[0]
        or not a.size
        or not b.size
        or b.shape[0] > mod.max_k()
    ):
        return None
    k, n = b.shape
    za = _scalar_zero_point(a_zero, a.dtype)
    if za is None:
        return None
    a2 = np.ascontiguousarray(a).reshape(-1, k)
    m = a2.shape[0]
    zb_one = one_zero_point(b_zero, b.dtype)
    if zb_one is not None:
        # A in the kernel's broadcast role, B (constant, packed once) in its vector role:
        # C comes out row-major, with no transpose of A or C (the first way below
        # measured 5x slower on a BERT layer's 128 x 768 x 768).
        columns = packed_columns(mod, b, zb_one)
        out = np.empty((m, n), np.int32)
        mod.gemm_rows(a2.view(np.uint8).reshape(-1), m, a.dtype == np.int8, za, columns, out)
        return out.reshape(*a.shape[:-1], n)
    zb = _zero_points(b_zero, b.dtype, n)
    if zb is None:
        return None
    packed = packed_weight(mod, "int8_matmul", b, b.T, b_zero, zb)
    # W = B^T [N, K]; X = A^T: X[k, i] = A[i, k] (row offset k, column stride K).
    out = np.empty((n, m), np.int32)
    rowoff = np.arange(k, dtype=np.int64)
    mod.gemm(packed, a2.view(np.uint8).reshape(-1), rowoff, k, m, a.dtype == np.int8, za, out)
    return np.ascontiguousarray(out.T).reshape(*a.shape[:-1], n)


def layout_plan(
    shape: tuple[int, ...],
    kernel: list[int],
    strides: list[int],
    dilations: list[int],
    pads: list[int],
    out: list[int],
) -> tuple[tuple[int, ...], int, int, int, int, np.ndarray]:
    """The flat layout of a 2-D conv input (nn_conv._FlatLayout's geometry) as
    `quantize_layout` writes it: (phase image size, phases, bytes per phase, bitmask of
    the phases a kernel offset reads, output grid width, byte offset of each (channel,
    kernel offset) row in one image)."""
    c = shape[1]
    padded, wide, taps, phases, _flat_len, length = _flat_geometry(
        tuple(shape[2:]), tuple(pads), tuple(kernel), tuple(dilations), out[0], tuple(strides)
    )
    used = 0
    for phase, _shift in taps:
        used |= 1 << phase
    tap_offsets = np.array([phase * length + shift for phase, shift in taps], dtype=np.int64)
    channel = np.arange(c, dtype=np.int64) * (len(phases) * length)
    per_channel = (channel[:, None] + tap_offsets[None, :]).reshape(-1)
    return padded, len(phases), length, used, wide, per_channel


def conv(
    x: Any,
    w: Any,
    x_zero: Any,
    w_zero: Any,
    group: int,
    kernel: list[int],
    strides: list[int],
    dilations: list[int],
    pads: list[int],
    out: list[int],
) -> np.ndarray | None:
    """The exact int32 conv sum (x - zx) * (w - zw[m]) of 8-bit x (N, C, H, W) and w
    (M, C, kh, kw), zero-padded in the float sense (x's padding is zx), or None."""
    mod = module()
    if (
        mod is None
        or type(x) is not np.ndarray
        or type(w) is not np.ndarray
        or x.dtype not in _BYTES
        or w.dtype not in _BYTES
        or x.ndim != 4
        or w.ndim != 4
        or group != 1
        or x.shape[1] != w.shape[1]
        or not x.size
        or not w.size
        or min(pads) < 0
        or min(out) <= 0
        or strides[0] * strides[1] > 64
    ):
        return None
    m = w.shape[0]
    k = math.prod(w.shape[1:])
    zx = _scalar_zero_point(x_zero, x.dtype)
    zw = _zero_points(w_zero, w.dtype, m)
    if zx is None or zw is None or k > mod.max_k():
        return None
    packed = packed_weight(mod, "int8_conv", w, w.reshape(m, k), w_zero, zw)
    n, c, h, wd = x.shape
    phase_hw, phases, length, used, wide, per_channel = layout_plan(
        x.shape, kernel, strides, dilations, pads, out
    )
    flat = scratch("conv_flat", (n, c, phases, length), np.uint8)
    signed = x.dtype == np.int8
    # The integers go through quantize_layout as floats with scale 1 and zero point 0:
    # rint(v / 1) + 0 is v itself for every 8-bit v, so this is a plain copy into the
    # padded phases (padded with zx, the integer whose value is 0).
    values = x.astype(np.float32)
    mod.quantize_layout(
        values, n, c, h, wd, np.float32(1), 0, signed, pads[0], pads[1], strides[0],
        strides[1], phase_hw[0], phase_hw[1], length, zx % 256, used, flat,
    )  # fmt: skip
    acc = scratch("int8_acc", (m, wide), np.int32)
    y = np.empty((n, m, *out), np.int32)
    rows, width = out[0], wide // out[0]
    for b in range(n):
        offsets = per_channel + b * (c * phases * length) if b else per_channel
        mod.gemm(packed, flat, offsets, 1, wide, signed, zx, acc)
        y[b] = acc.reshape(m, rows, width)[:, :, : out[1]]
    return y
