"""The compiled exact int8 product (runtime/native/_int8.c) and the QDQ conv fusion that
runs on it (runtime/fusion_qdq_conv.py).

The kernel is checked at every level this machine can run (``native.levels()``: the
plain-C and AVX2 paths too on an AVX-512 machine) against exact int64 numpy arithmetic,
never against onnxruntime (whose AVX2 u8s8 kernels saturate).  The fusion is checked bit
for bit against a numpy reference of what it computes (the exact integer product,
rescaled in float64, then the output quantizer's float32 steps), and against the stepped
float32 run within its stated bound: one quantization step, only where the exact value
is within float32 rounding of a rounding boundary."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import product
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.session import Session
from tests.data.exporters import feeds_of, path_of
from tests.runtime.differential import stepped_values

pytestmark = [
    pytest.mark.numeric,
    pytest.mark.skipif(not native.built("int8"), reason="the int8 kernel was not compiled"),
]


def _module() -> Any:
    from onnxviz.runtime.native import _int8  # type: ignore[attr-defined]

    return _int8


@pytest.fixture(autouse=True)
def _restore_level() -> Any:
    yield
    if native.built("int8"):
        _module().set_level(native.level() if native.level() is not None else 0)


def _bytes(rng: np.random.Generator, signed: bool, shape: Any, extreme: bool) -> np.ndarray:
    dtype = np.int8 if signed else np.uint8
    info = np.iinfo(dtype)
    if extreme:
        return rng.choice(np.array([info.min, info.max], dtype=dtype), size=shape)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


def _product(
    level: int,
    w: np.ndarray,
    zw: np.ndarray,
    x: np.ndarray,
    zx: int,
    rowoff: np.ndarray | None = None,
    colstride: int = 1,
    n: int | None = None,
) -> np.ndarray:
    mod = _module()
    mod.set_level(level)
    m, k = w.shape
    packed = mod.pack_weights(w.view(np.uint8), m, k, w.dtype == np.int8, zw.astype(np.int32))
    if rowoff is None:
        rowoff = np.arange(k, dtype=np.int64) * x.shape[1]
        n = x.shape[1]
    assert n is not None
    out = np.full((m, n), -7, np.int32)
    mod.gemm(
        packed, x.view(np.uint8).reshape(-1), rowoff, colstride, n, x.dtype == np.int8, zx, out
    )
    return out


def _bell(rng: np.random.Generator, signed: bool, shape: Any, spread: float) -> np.ndarray:
    """Codes as a quantizer writes a weight: a bell of ``spread`` codes around the
    type's middle, each row's largest at the type's end (per-channel scales)."""
    dtype = np.int8 if signed else np.uint8
    info = np.iinfo(dtype)
    middle = 0 if signed else 128
    codes = np.clip(np.round(rng.normal(middle, spread, shape)), info.min, info.max)
    codes[..., 0] = info.max
    return codes.astype(dtype)


def _cut_pairs(w: np.ndarray) -> int:
    """How many of W's row pairs (k, k + 1), k even, can reach the int16 bound as signed
    bytes (the corrections the AVX2 quads need): both of one sign, |w0| + |w1| > 128."""
    signed = w.astype(np.int64) - (0 if w.dtype == np.int8 else 128)
    k = w.shape[1]
    w0, w1 = signed[:, 0 : k - 1 : 2], signed[:, 1:k:2]
    return int(np.count_nonzero((np.abs(w0) + np.abs(w1) > 128) & ((w0 < 0) == (w1 < 0))))


def _exact(w: np.ndarray, zw: np.ndarray, x: np.ndarray, zx: int) -> np.ndarray:
    want = (w.astype(np.int64) - zw.astype(np.int64)[:, None]) @ (x.astype(np.int64) - zx)
    assert np.abs(want).max(initial=0) < 2**31
    return want


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 40),
    k=st.one_of(st.integers(1, 70), st.integers(500, 1100)),
    n=st.integers(1, 80),
    w_signed=st.booleans(),
    x_signed=st.booleans(),
    extreme=st.booleans(),
    zero_points=st.sampled_from(["extreme", "random", "zero"]),
    seed=st.integers(0, 2**16),
)
def test_product_is_exact_at_every_level(
    m: int,
    k: int,
    n: int,
    w_signed: bool,
    x_signed: bool,
    extreme: bool,
    zero_points: str,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    w = _bytes(rng, w_signed, (m, k), extreme)
    x = _bytes(rng, x_signed, (k, n), extreme)
    lo_w, hi_w = (-128, 127) if w_signed else (0, 255)
    lo_x, hi_x = (-128, 127) if x_signed else (0, 255)
    if zero_points == "extreme":
        zw = rng.choice(np.array([lo_w, hi_w]), size=m)
        zx = int(rng.choice([lo_x, hi_x]))
    elif zero_points == "random":
        zw = rng.integers(lo_w, hi_w + 1, size=m)
        zx = int(rng.integers(lo_x, hi_x + 1))
    else:
        zw, zx = np.zeros(m, np.int64), 0
    want = _exact(w, zw, x, zx)
    for level in native.levels():
        got = _product(level, w, zw, x, zx)
        np.testing.assert_array_equal(got, want, err_msg=f"level {level}")


@settings(max_examples=50, deadline=None)
@given(
    m=st.integers(1, 40),
    k=st.one_of(st.integers(1, 70), st.integers(500, 1100)),
    n=st.integers(1, 80),
    colstride=st.sampled_from([1, 2]),
    w_signed=st.booleans(),
    x_signed=st.booleans(),
    spread=st.sampled_from([4.0, 25.0, 45.0]),
    zero_points=st.sampled_from(["random", "zero"]),
    seed=st.integers(0, 2**16),
)
def test_quantized_weights_products_are_exact_in_every_form(
    m: int,
    k: int,
    n: int,
    colstride: int,
    w_signed: bool,
    x_signed: bool,
    spread: float,
    zero_points: str,
    seed: int,
) -> None:
    """Weights shaped like quantized ones take AVX2's quads (vpmaddubsw, W's pairs cut
    below the int16 bound, the rest added along the pixels after): exact at every level,
    X read through offsets and a column stride, any zero points."""
    rng = np.random.default_rng(seed)
    w = _bell(rng, w_signed, (m, k), spread)
    x = _bytes(rng, x_signed, (k, n * colstride), False)
    lo_w, hi_w = (-128, 127) if w_signed else (0, 255)
    zw = rng.integers(lo_w, hi_w + 1, size=m) if zero_points == "random" else np.zeros(m, int)
    zx = int(rng.integers(-128, 128)) + (0 if x_signed else 128) if zero_points == "random" else 0
    want = _exact(w, zw, x[:, ::colstride], zx)
    rowoff = np.arange(k, dtype=np.int64) * x.shape[1]
    mod = _module()
    for level in native.levels():
        got = _product(level, w, zw, x, zx, rowoff, colstride, n)
        np.testing.assert_array_equal(got, want, err_msg=f"level {level}")
        if level == native.AVX2:
            packed = mod.pack_weights(w.view(np.uint8), m, k, w_signed, zw.astype(np.int32))
            cut = _cut_pairs(w)
            quads = cut * mod.weight_quads_limit() <= m * k
            assert mod.weight_form(packed) == (("quads", cut) if quads else ("int16", 0))


@pytest.mark.skipif(native.AVX2 not in native.levels(), reason="the quads are AVX2's")
@pytest.mark.parametrize("w_signed", [False, True])
@pytest.mark.parametrize("x_signed", [False, True])
def test_weight_quads_at_the_int16_bound_and_the_largest_k(w_signed: bool, x_signed: bool) -> None:
    """Every pair of W at |w0| + |w1| = 128 (no cut) by X's largest unsigned byte at
    the largest K: vpmaddubsw's pair sums reach 255 * 128 and must not saturate, and the
    zero points' terms bring the sums to about 2^31."""
    mod = _module()
    k, m, n = mod.max_k(), 7, 21
    shift = 0 if w_signed else 128
    pairs = np.array([[-128, 0], [127, 1], [-64, -64], [64, 64], [0, -128], [1, 127], [3, -125]])
    w = (np.resize(pairs, (m, k // 2, 2)).reshape(m, k) + shift).astype(
        np.int8 if w_signed else np.uint8
    )
    x_type = np.int8 if x_signed else np.uint8
    x = np.full((k, n), np.iinfo(x_type).max, x_type)  # X's unsigned byte 255
    x[:, 1::2] = np.iinfo(x_type).min  # odd columns the unsigned byte 0
    for zw, zx in [
        (np.full(m, shift), 0),
        (np.full(m, np.iinfo(w.dtype).min), -5 + 128 * (not x_signed)),
    ]:
        want = _exact(w, zw, x, zx)
        mod.set_level(native.AVX2)
        packed = mod.pack_weights(w.view(np.uint8), m, k, w_signed, zw.astype(np.int32))
        assert mod.weight_form(packed) == ("quads", 0)
        np.testing.assert_array_equal(_product(native.AVX2, w, zw, x, zx), want)


@pytest.mark.skipif(native.AVX2 not in native.levels(), reason="the quads are AVX2's")
@pytest.mark.parametrize("w_signed", [False, True])
@pytest.mark.parametrize("x_signed", [False, True])
def test_weight_quads_keep_pairs_of_opposite_signs_uncut(w_signed: bool, x_signed: bool) -> None:
    """A pair of W of opposite signs is never cut, however large: its sum lies between
    255 * w0 and 255 * w1.  X's unsigned bytes 255 and 0 within a pair, either way round,
    and both 255, take each such pair to both ends of that range at the largest K."""
    mod = _module()
    k, m = mod.max_k(), 6
    shift = 0 if w_signed else 128
    pairs = np.array([[-128, 127], [127, -128], [-128, 1], [1, -128], [-1, 127], [100, -100]])
    w = (np.resize(pairs, (m, k // 2, 2)).reshape(m, k) + shift).astype(
        np.int8 if w_signed else np.uint8
    )
    x_type = np.int8 if x_signed else np.uint8
    top, bottom = np.iinfo(x_type).max, np.iinfo(x_type).min  # unsigned bytes 255 and 0
    x = np.full((k, 20), top, x_type)  # (20 pixels: a 16-wide panel and a tail)
    x[1::2, 0::4] = x[0::2, 1::4] = x[:, 3::4] = bottom
    for zw, zx in [(np.full(m, shift), 0), (np.full(m, np.iinfo(w.dtype).max), int(bottom))]:
        want = _exact(w, zw, x, zx)
        mod.set_level(native.AVX2)
        packed = mod.pack_weights(w.view(np.uint8), m, k, w_signed, zw.astype(np.int32))
        assert mod.weight_form(packed) == ("quads", 0)
        np.testing.assert_array_equal(_product(native.AVX2, w, zw, x, zx), want)


@pytest.mark.skipif(native.AVX2 not in native.levels(), reason="the quads are AVX2's")
def test_weight_quads_corrections_outside_the_weights_are_refused() -> None:
    mod = _module()
    mod.set_level(native.AVX2)
    m, k, n = 3, 64, 40  # (40 pixels: the corrections' 16-wide steps and their tail)
    w = np.zeros((m, k), np.int8)
    w[1, 4], w[1, 5] = 127, 127  # one cut pair: a correction at (row 1, k 4 or 5)
    packed = bytearray(mod.pack_weights(w.view(np.uint8), m, k, True, np.zeros(m, np.int32)))
    assert mod.weight_form(bytes(packed)) == ("quads", 1)
    for not_weights in (b"INT", bytes(64), b""):
        with pytest.raises(ValueError):
            mod.weight_form(not_weights)
    x = np.random.default_rng(1).integers(0, 256, (k, n)).astype(np.uint8)
    out = np.empty((m, n), np.int32)
    rowoff = np.arange(k, dtype=np.int64) * n
    mod.gemm(bytes(packed), x.reshape(-1), rowoff, 1, n, False, 0, out)
    np.testing.assert_array_equal(out, w.astype(np.int64) @ x.astype(np.int64))
    mp, kq = 6, k // 4  # one panel of 6 rows, 16 k quads
    at = 36 + 4 * (2 * mp + mp * kq)  # after the header, the row sums, zero points, panel
    for field, bad in ((0, m), (1, k), (1, -1)):
        broken = bytearray(packed)
        broken[at + 4 * field : at + 4 * field + 4] = np.int32(bad).tobytes()
        with pytest.raises(ValueError):
            mod.gemm(bytes(broken), x.reshape(-1), rowoff, 1, n, False, 0, out)


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 20),
    k=st.integers(1, 300),
    n=st.integers(1, 150),
    slack=st.integers(0, 70),
    x_signed=st.booleans(),
    zx=st.integers(-128, 127),
    seed=st.integers(0, 2**16),
)
def test_last_partial_panel_read_whole_when_the_buffer_holds_it(
    m: int, k: int, n: int, slack: int, x_signed: bool, zx: int, seed: int
) -> None:
    """A last panel of fewer than 32 columns is packed by the vector code, reading past
    N, when every row's read stays inside x (a conv's flat layout has such slack): the
    bytes past N (random here) never reach the product, and the zero point's row term
    the accumulators start from is the same exact correction."""
    rng = np.random.default_rng(seed)
    w = _bytes(rng, True, (m, k), False)
    zw = np.zeros(m, np.int64)  # (a weight zero point makes the column sums: scalar code)
    zx = zx if x_signed else zx + 128
    buf = _bytes(rng, x_signed, (k * n + slack,), False)
    x = buf[: k * n].reshape(k, n)
    want = _exact(w, zw, x, zx)
    rowoff = np.arange(k, dtype=np.int64) * n
    for level in native.levels():
        mod = _module()
        mod.set_level(level)
        packed = mod.pack_weights(w.view(np.uint8), m, k, True, zw.astype(np.int32))
        out = np.full((m, n), -7, np.int32)
        mod.gemm(packed, buf.view(np.uint8), rowoff, 1, n, x_signed, zx, out)
        np.testing.assert_array_equal(out, want, err_msg=f"level {level}")


@pytest.mark.parametrize("zero_points", [(0, 0), (-100, 37)])
@pytest.mark.parametrize("x_signed", [False, True])
def test_many_column_blocks_and_k_blocks(zero_points: tuple[int, int], x_signed: bool) -> None:
    """K and N large enough that X is packed in several column blocks (about 256 KB
    each) and K runs in several cache blocks, at every level; the zero points of W
    nonzero or zero (the byte form's column sums, or none)."""
    rng = np.random.default_rng(11)
    m, k, n = 21, 2001, 709
    w = _bytes(rng, True, (m, k), False)
    x = _bytes(rng, x_signed, (k, n), False)
    zw = np.full(m, zero_points[0])
    zw[::3] = 0
    zx = zero_points[1] if x_signed else abs(zero_points[1])
    want = _exact(w, zw, x, zx)
    for level in native.levels():
        np.testing.assert_array_equal(_product(level, w, zw, x, zx), want, err_msg=str(level))


@pytest.mark.parametrize("signs", [(True, False), (True, True), (False, False), (False, True)])
def test_largest_k_with_the_largest_products(signs: tuple[bool, bool]) -> None:
    """K = max_k with every |w - zw| and |x - zx| at 255 (or 128 and 255): the largest
    sums the kernel accepts, exact at every level (no int16 or int32 saturation)."""
    w_signed, x_signed = signs
    k = _module().max_k()
    m, n = 9, 35
    w = np.full((m, k), -128 if w_signed else 255, np.int8 if w_signed else np.uint8)
    w[1::2] = 127 if w_signed else 0
    zw = np.array([127 if w_signed else 0, -128 if w_signed else 255] * 5)[:m]
    x = np.full((k, n), 127 if x_signed else 255, np.int8 if x_signed else np.uint8)
    x[:, ::3] = -128 if x_signed else 0
    zx = -128 if x_signed else 0
    want = _exact(w, zw, x, zx)
    assert np.abs(want).max() > 2**30  # the edge of the int32 range really is reached
    for level in native.levels():
        np.testing.assert_array_equal(_product(level, w, zw, x, zx), want, err_msg=str(level))


@settings(max_examples=25, deadline=None)
@given(
    k=st.integers(1, 40), n=st.integers(1, 50), stride=st.integers(1, 4), seed=st.integers(0, 999)
)
def test_rows_read_through_offsets_and_column_stride(
    k: int, n: int, stride: int, seed: int
) -> None:
    """X[k, p] = x[rowoff[k] + p * colstride]: rows anywhere (shifted, repeated, out of
    order), as a conv's flat layout or a transposed operand hands them."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 20))
    span = (n - 1) * stride + 1
    buf = _bytes(rng, False, (span + 300,), False)
    rowoff = rng.integers(0, 300, size=k).astype(np.int64)
    x = np.stack([buf[o : o + span : stride] for o in rowoff])
    w = _bytes(rng, True, (m, k), False)
    zw = rng.integers(-5, 5, size=m)
    want = _exact(w, zw, x, 17)
    for level in native.levels():
        got = _product(level, w, zw, buf, 17, rowoff, stride, n)
        np.testing.assert_array_equal(got, want, err_msg=str(level))


def test_wrong_sizes_raise() -> None:
    mod = _module()
    w = np.zeros((4, 10), np.uint8)
    zw = np.zeros(4, np.int32)
    for level in native.levels():
        mod.set_level(level)
        with pytest.raises(ValueError):
            mod.pack_weights(w, 4, 11, True, zw)  # w shorter than M*K
        with pytest.raises(ValueError):
            mod.pack_weights(w, 4, 10, True, zw[:3])  # a zero point missing
        with pytest.raises(ValueError):
            mod.pack_weights(np.zeros(mod.max_k() + 1, np.uint8), 1, mod.max_k() + 1, True, zw)
        with pytest.raises(ValueError):
            mod.pack_weights(w, 0, 10, True, zw)
        with pytest.raises(ValueError):  # a zero point outside int8 (the bound needs it)
            mod.pack_weights(w, 4, 10, True, np.array([0, 0, 0, 200], np.int32))
        with pytest.raises(ValueError):  # ... outside uint8
            mod.pack_weights(w, 4, 10, False, np.array([0, -1, 0, 0], np.int32))
        packed = mod.pack_weights(w, 4, 10, True, zw)
        x = np.zeros(10 * 6, np.uint8)
        off = np.arange(10, dtype=np.int64) * 6
        out = np.zeros((4, 6), np.int32)
        mod.gemm(packed, x, off, 1, 6, False, 0, out)
        bad_calls: list[tuple[Any, ...]] = [
            (packed, x, off, 1, 7, False, 0, out),  # the last row reads past x
            (packed, x[:-1], off, 1, 6, False, 0, out),
            (packed, x, off - 1, 1, 6, False, 0, out),  # a negative offset
            (packed, x, off[:-1], 1, 6, False, 0, out),  # K offsets expected
            (packed, x, off, 2, 6, False, 0, out),  # the stride reads past x
            (packed, x, off, 0, 6, False, 0, out),
            (packed, x, off, 1, 6, False, 0, np.zeros((4, 5), np.int32)),
            (packed, x, off, 1, 6, False, 256, out),  # zero point outside uint8
            (packed, x, off, 1, 6, True, 128, out),  # ... outside int8
            (packed[:-1], x, off, 1, 6, False, 0, out),
            (b"\0" * len(packed), x, off, 1, 6, False, 0, out),
        ]
        for args in bad_calls:
            with pytest.raises(ValueError):
                mod.gemm(*args)
        other = [lv for lv in native.levels() if lv != level]
        if other:
            mod.set_level(other[0])
            with pytest.raises(ValueError):  # packed for another level's layout
                mod.gemm(packed, x, off, 1, 6, False, 0, out)
            mod.set_level(level)
    acc = np.zeros((2, 12), np.int32)
    scale = np.ones(2, np.float32)
    with pytest.raises(ValueError):
        mod.rescale_qdq(
            acc, 2, 3, 4, 5, scale, b"", False, False, 1.0, 0, 1.0, 0, np.zeros(24, np.float32)
        )
    with pytest.raises(ValueError):
        mod.rescale_qdq(
            acc, 2, 3, 4, 3, scale[:1], b"", False, False, 1.0, 0, 1.0, 0, np.zeros(24, np.float32)
        )
    with pytest.raises(ValueError):
        mod.rescale_qdq(
            acc, 2, 3, 4, 3, scale, b"", False, False, 1.0, 0, 1.0, 0, np.zeros(17, np.float32)
        )
    with pytest.raises(ValueError):
        mod.rescale_qdq(
            acc, 2, 3, 4, 3, scale, b"", False, True, 1.0, 200, 1.0, 0, np.zeros(18, np.float32)
        )
    with pytest.raises(ValueError):
        mod.quantize(np.zeros(8, np.float32), 1.0, 0, False, np.zeros(7, np.uint8))
    big = 2**39  # sizes whose products overflow 64 bits must not wrap to the buffers' sizes
    with pytest.raises(ValueError):
        mod.quantize_layout(
            np.zeros(16, np.float32), big, big, 2, 2, 1.0, 0, False, 0, 0, 1, 1, 2, 2, 4, 0, 1,
            np.zeros(64, np.uint8),
        )  # fmt: skip
    with pytest.raises(ValueError):
        mod.quantize_layout(
            np.zeros(16, np.float32), 1, 4, 2, 2, 1.0, 0, False, 0, 0, 1, 1, big, big, 4, 0, 1,
            np.zeros(16, np.uint8),
        )  # fmt: skip
    with pytest.raises(ValueError):
        mod.qdq(np.zeros(8, np.float32), 1.0, 0, 1.0, 0, False, np.zeros(7, np.float32))
    with pytest.raises(ValueError):
        mod.qdq(np.zeros(8, np.float32), 1.0, 0, 1.0, -1, False, np.zeros(8, np.float32))


def _quantize_steps(x: np.ndarray, scale: np.float32, zp: int, dtype: Any) -> np.ndarray:
    """QuantizeLinear's float32 steps as the numpy kernel takes them (kernels/quantize)."""
    info = np.iinfo(dtype)
    t = np.divide(x, scale, dtype=np.float32)
    np.rint(t, out=t)
    t += np.float32(zp)
    np.clip(t, info.min, info.max, out=t)
    return t


def _rescale_quantize(v: np.ndarray, scale: np.float32, zp: int, dtype: Any) -> np.ndarray:
    """The fused conv's output quantizer (rescale_qdq, rescale_q): QuantizeLinear's float32
    steps with the division taken as a product by float32(1 / scale)."""
    info = np.iinfo(dtype)
    t = np.multiply(v, np.float32(1) / np.float32(scale), dtype=np.float32)
    np.rint(t, out=t)
    t += np.float32(zp)
    np.clip(t, info.min, info.max, out=t)
    return t


@pytest.mark.parametrize("signed", [False, True])
def test_quantize_is_the_kernels_float32_steps(signed: bool) -> None:
    rng = np.random.default_rng(3)
    scale = np.float32(0.037)
    ties = (np.arange(-300, 300) + 0.5).astype(np.float32) * scale
    x = np.concatenate(
        [
            rng.normal(0, 5, 5000).astype(np.float32),
            ties,
            np.array([np.inf, -np.inf, 0.0, -0.0, 1e5, -1e5, 2e5, 3.1e5, -3.1e5, 1e30], np.float32),
        ]
    )
    dtype = np.int8 if signed else np.uint8
    zp = -7 if signed else 131
    want = _quantize_steps(x, scale, zp, dtype).astype(dtype)
    t = _quantize_steps(x, scale, zp, dtype)
    t -= np.float32(zp)
    t *= np.float32(0.04)
    for level in native.levels():
        _module().set_level(level)
        out = np.empty(x.size, np.uint8)
        assert _module().quantize(x, scale, zp, signed, out) == 0
        np.testing.assert_array_equal(out.view(dtype), want, err_msg=str(level))
        y = np.empty(x.size, np.float32)
        assert _module().qdq(x, scale, zp, np.float32(0.04), zp, signed, y) == 0
        np.testing.assert_array_equal(y, t, err_msg=str(level))
        assert not np.signbit(y[y == 0]).any()  # integers have no -0 (stepping's values)
        for n in (1, 7, 15, 16, 17, 33):  # the vector loops' tails
            part = np.empty(n, np.float32)
            assert _module().qdq(x[:n].copy(), scale, zp, np.float32(0.04), zp, signed, part) == 0
            np.testing.assert_array_equal(part, t[:n], err_msg=f"{level}: {n}")
        bad = x.copy()
        bad[10] = np.nan
        assert _module().quantize(bad, scale, zp, signed, out) == -1
        assert _module().qdq(bad, scale, zp, np.float32(0.04), zp, signed, y) == -1


@settings(max_examples=40, deadline=None)
@given(
    h=st.integers(1, 19),
    w=st.integers(1, 41),
    pad=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    signed=st.booleans(),
    seed=st.integers(0, 999),
)
def test_quantize_layout_is_quantize_then_the_padded_phases(
    h: int, w: int, pad: tuple[int, int], stride: tuple[int, int], signed: bool, seed: int
) -> None:
    """quantize_layout = quantize, pad with the fill byte, split into stride phases
    (nn_conv._FlatLayout's layout), for the phases it is asked for; bytes_layout of the
    quantized bytes is the same layout."""
    rng = np.random.default_rng(seed)
    n, c = 2, 3
    x = rng.normal(0, 3, (n, c, h, w)).astype(np.float32)
    dtype = np.int8 if signed else np.uint8
    zp, fill = (-3, 253) if signed else (140, 140)
    q = _quantize_steps(x, np.float32(0.05), zp, dtype).astype(dtype).view(np.uint8)
    s0, s1 = stride
    ph_h = -(-(h + 2 * pad[0]) // s0)
    ph_w = -(-(w + 2 * pad[1]) // s1)
    big = np.full((n, c, ph_h * s0 + s0, ph_w * s1 + s1), fill, np.uint8)
    big[:, :, pad[0] : pad[0] + h, pad[1] : pad[1] + w] = q
    length = ph_h * ph_w + 5
    used = int(rng.integers(1, 2 ** (s0 * s1)))
    for level in native.levels():
        _module().set_level(level)
        out = np.full((n, c, s0 * s1, length), 77, np.uint8)
        status = _module().quantize_layout(
            x, n, c, h, w, np.float32(0.05), zp, signed, pad[0], pad[1], s0, s1, ph_h, ph_w,
            length, fill, used, out,
        )  # fmt: skip
        assert status == 0
        from_bytes = np.full((n, c, s0 * s1, length), 77, np.uint8)
        _module().bytes_layout(
            q, n, c, h, w, pad[0], pad[1], s0, s1, ph_h, ph_w, length, fill, used, from_bytes
        )
        np.testing.assert_array_equal(from_bytes, out, err_msg=f"level {level}")
        for p0, p1 in product(range(s0), range(s1)):
            phase = p0 * s1 + p1
            got = out[:, :, phase]
            if not (used >> phase) & 1:
                assert (got == 77).all()  # left alone
                continue
            want = big[:, :, p0 : p0 + ph_h * s0 : s0, p1 : p1 + ph_w * s1 : s1]
            np.testing.assert_array_equal(got[..., : ph_h * ph_w].reshape(want.shape), want)
            assert (got[..., ph_h * ph_w :] == fill).all()
    with pytest.raises(ValueError):  # out one byte short
        _module().quantize_layout(
            x, n, c, h, w, np.float32(0.05), zp, signed, pad[0], pad[1], s0, s1, ph_h, ph_w,
            length, fill, used, np.zeros(n * c * s0 * s1 * length - 1, np.uint8),
        )  # fmt: skip
    with pytest.raises(ValueError):  # x is not N*C*H*W floats
        _module().quantize_layout(
            x[:1], n, c, h, w, np.float32(0.05), zp, signed, pad[0], pad[1], s0, s1, ph_h,
            ph_w, length, fill, used, out,
        )  # fmt: skip
    with pytest.raises(ValueError):  # floats where bytes go
        _module().bytes_layout(
            x, n, c, h, w, pad[0], pad[1], s0, s1, ph_h, ph_w, length, fill, used, out
        )


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize(
    "grid",
    [(3, 37, 35), (7, 9, 7), (1, 12, 5)],  # rows of 4 vectors and a tail; short rows
)
def test_rescale_qdq_is_float32_steps_then_the_quantizers(
    relu: bool, grid: tuple[int, int, int]
) -> None:
    rng = np.random.default_rng(5)
    m = 5
    rows, width, keep = grid
    acc = rng.integers(-(2**31), 2**31, size=(m, rows, width)).astype(np.int32)
    acc[:, 0] = rng.integers(-3000, 3000, size=(m, width))
    scale = (rng.uniform(1e-6, 1e-3, m) * rng.choice([1e-4, 1.0], m)).astype(np.float32)
    bias = rng.normal(0, 0.1, m).astype(np.float32)
    qs, dqs = np.float32(0.02), np.float32(0.021)
    # float32(acc) * s + b, each step rounded in float32 (numpy's separate ufuncs: no FMA)
    v = acc[:, :, :keep].astype(np.float32) * scale[:, None, None] + bias[:, None, None]
    if relu:
        v = np.maximum(v, np.float32(0))
    t = _rescale_quantize(v, qs, 9, np.uint8)
    t -= np.float32(11)
    t *= dqs
    codes = {}
    for signed, zp in ((False, 9), (True, -7)):
        dtype = np.int8 if signed else np.uint8
        codes[signed] = _rescale_quantize(v, qs, zp, dtype).astype(dtype)
    for level in native.levels():
        _module().set_level(level)
        y = np.empty((m, rows, keep), np.float32)
        status = _module().rescale_qdq(
            acc, m, rows, width, keep, scale, bias, relu, False, qs, 9, dqs, 11, y
        )
        assert status == 0
        np.testing.assert_array_equal(y, t, err_msg=str(level))
        # rescale_q: the same value quantized, its codes written as bytes.
        for signed, zp in ((False, 9), (True, -7)):
            b = np.full((m, rows, keep), 99, np.int8 if signed else np.uint8)
            status = _module().rescale_q(
                acc, m, rows, width, keep, scale, bias, relu, signed, qs, zp, b
            )
            assert status == 0
            np.testing.assert_array_equal(b, codes[signed], err_msg=f"{level} {signed}")
        # Not finite: a scale, a bias, 1 / qs (a subnormal qs) -> -1, the nodes run.
        for bad_scale, bad_bias, bad_qs in (
            (np.nan, 0.0, qs),
            (np.inf, 0.0, qs),
            (1.0, np.nan, qs),
            (1.0, 0.0, np.float32(1e-40)),
        ):
            s2, b2 = scale.copy(), bias.copy()
            s2[-1] *= np.float32(bad_scale)
            b2[0] += np.float32(bad_bias)
            b = np.empty((m, rows, keep), np.uint8)
            got = _module().rescale_q(acc, m, rows, width, keep, s2, b2, relu, False, bad_qs, 9, b)
            assert got == -1


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 70),
    k=st.sampled_from([3, 27, 288, 1100]),
    grid=st.sampled_from([(1, 5, 5), (7, 9, 7), (3, 40, 37), (56, 58, 56), (40, 40, 40)]),
    w_signed=st.booleans(),
    x_signed=st.booleans(),
    codes=st.booleans(),
    relu=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gemm_rescale_is_gemm_then_the_rescale(
    m: int,
    k: int,
    grid: tuple[int, int, int],
    w_signed: bool,
    x_signed: bool,
    codes: bool,
    relu: bool,
    seed: int,
) -> None:
    """The product rescaled block by block in cache gives gemm's C through rescale_q or
    rescale_qdq, bit for bit, at every level: short rows (the grid buffer), rows with
    columns to drop, rows without, blocks that end inside a row, weights with zero points
    (the column term), more than one block of C."""
    rows, width, keep = grid
    n = rows * width
    rng = np.random.default_rng(seed)
    # uniform codes (the int16 form at AVX2) or a bell (the quads, corrections per block)
    w = _bell(rng, w_signed, (m, k), 30.0) if seed % 2 else _bytes(rng, w_signed, (m, k), False)
    zw = rng.integers(0, 256, m) if not w_signed else np.zeros(m, np.int64)
    x = _bytes(rng, x_signed, (k, n), False)
    zx = int(rng.integers(-20, 20)) + (0 if x_signed else 128)
    scale = rng.uniform(1e-5, 3e-4, m).astype(np.float32)
    bias = rng.normal(0, 0.5, m).astype(np.float32)
    qs, qz = np.float32(rng.uniform(0.02, 0.1)), int(rng.integers(0, 256))
    dqs, dqz = np.float32(rng.uniform(0.02, 0.1)), int(rng.integers(0, 256))
    rowoff = np.arange(k, dtype=np.int64) * n
    mod = _module()
    for level in native.levels():
        acc = _product(level, w, zw, x, zx)
        packed = mod.pack_weights(w.view(np.uint8), m, k, w_signed, zw.astype(np.int32))
        if codes:
            want = np.empty((m, rows, keep), np.uint8)
            assert (
                mod.rescale_q(acc, m, rows, width, keep, scale, bias, relu, False, qs, qz, want)
                == 0
            )
        else:
            want = np.empty((m, rows, keep), np.float32)
            status = mod.rescale_qdq(
                acc, m, rows, width, keep, scale, bias, relu, False, qs, qz, dqs, dqz, want
            )
            assert status == 0
        got = np.full_like(want, 77)
        status = mod.gemm_rescale(
            packed, x.view(np.uint8).reshape(-1), rowoff, 1, n, x_signed, zx, rows, width, keep,
            scale, bias, relu, False, qs, qz, dqs, dqz, codes, got,
        )  # fmt: skip
        assert status == 0
        np.testing.assert_array_equal(got, want, err_msg=f"level {level}")


@pytest.mark.parametrize("level_name", ["AVX2", "AVX512_VNNI"])
@settings(max_examples=30, deadline=None)
@given(
    c=st.sampled_from([1, 3, 4, 13, 64]),
    m=st.integers(1, 40),
    kernel=st.sampled_from([1, 3, 5]),
    stride=st.sampled_from([1, 2]),
    hw=st.sampled_from([(5, 7), (12, 12), (19, 9)]),
    x_signed=st.booleans(),
    w_zero=st.booleans(),
    codes=st.booleans(),
    batch=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_the_grouped_channel_input_gives_the_packed_products_rescale(
    level_name: str,
    c: int,
    m: int,
    kernel: int,
    stride: int,
    hw: tuple[int, int],
    x_signed: bool,
    w_zero: bool,
    codes: bool,
    batch: int,
    seed: int,
) -> None:
    """A conv's flat layout in channel groups read where it lies (VNNI: interleave4's
    bytes; AVX2: interleave2's int16 pairs, the codes less zx; then gemm_rescale4) gives
    gemm_rescale's bits on the planar layout: any channel count (the last group padded),
    kernel offsets across stride phases, both code types, weight zero points (AVX2's int16
    form subtracts them), codes or floats out, every image of a batch."""
    from onnxviz.runtime.fusion_qdq_conv import _FourChannels, four_channel_rows
    from onnxviz.runtime.kernels.int8_products import layout_plan

    mod = _module()
    level = getattr(native, level_name)
    if level not in native.levels():
        pytest.skip(f"this CPU has no {level_name} level")
    mod.set_level(level)
    size = 4 if level == native.AVX512_VNNI else 2
    rng = np.random.default_rng(seed)
    h, w_ = hw
    pad = kernel // 2
    out = [(h + 2 * pad - kernel) // stride + 1, (w_ + 2 * pad - kernel) // stride + 1]
    phase_hw, phases, length, used, wide, per_channel = layout_plan(
        (batch, c, h, w_), [kernel, kernel], [stride, stride], [1, 1], [pad] * 4, out
    )
    x = _bytes(rng, x_signed, (batch, c, h, w_), False)
    zd = int(rng.integers(-20, 20)) + (0 if x_signed else 128)
    flat = np.zeros((batch, c, phases, length), np.uint8)
    geometry = (pad, pad, stride, stride, *phase_hw, length, zd % 256, used)
    mod.bytes_layout(x.view(np.uint8), batch, c, h, w_, *geometry, flat)
    if w_zero and size == 2:  # uint8 weights, a zero point per output channel
        w = rng.integers(0, 256, (m, c, kernel, kernel)).astype(np.uint8)
        zw = rng.integers(0, 256, m).astype(np.int32)
    else:
        w = rng.integers(-127, 128, (m, c, kernel, kernel)).astype(np.int8)
        zw = np.zeros(m, np.int32)
    w_signed = w.dtype == np.int8
    packed = mod.pack_weights(w.view(np.uint8).reshape(-1), m, c * kernel * kernel, w_signed, zw)
    rows4 = four_channel_rows(w, size)
    packed4 = mod.pack_weights(rows4.view(np.uint8).reshape(-1), m, rows4.shape[1], w_signed, zw)
    four = _FourChannels.of(packed4, c, phases, length, per_channel, size)
    scale = rng.uniform(1e-5, 3e-4, m).astype(np.float32)
    bias = rng.normal(0, 0.5, m).astype(np.float32)
    rescale = (out[0], wide // out[0], out[1], scale, bias, True, False, np.float32(0.05))
    rescale += (int(rng.integers(0, 256)), np.float32(0.04), int(rng.integers(0, 256)), codes)
    x4 = np.full(batch * four.words + 64, 0xDEADBEEF, np.uint32)  # (the slack: any bytes)
    if size == 4:
        mod.interleave4(flat, batch, c, phases * length, x_signed, x4)
    else:
        mod.interleave2(flat, batch, c, phases * length, x_signed, zd, x4)
    quads = size == 2 and mod.weight_form(packed4)[0] != "int16"
    for b in range(batch):
        dtype = np.uint8 if codes else np.float32
        want = np.empty((m, out[0], out[1]), dtype)
        offsets = per_channel + b * c * phases * length
        args = (packed, flat.reshape(-1), offsets, 1, wide, x_signed, zd)
        assert mod.gemm_rescale(*args, *rescale, want) == 0
        got = np.empty_like(want)
        args4 = (four.packed, x4[b * four.words :], four.rows, wide, x_signed, zd)
        if quads:  # the AVX2 pairs hold the int16 form only
            with pytest.raises(ValueError):
                mod.gemm_rescale4(*args4, *rescale, got)
            return
        assert mod.gemm_rescale4(*args4, *rescale, got) == 0
        np.testing.assert_array_equal(got, want, err_msg=f"image {b}")


@pytest.mark.parametrize("signed", [False, True])
def test_interleave2_pairs_channels_less_the_zero_point(signed: bool) -> None:
    """interleave2's word of position j in group g: channel 2g's code less zx in the low
    int16, channel 2g+1's in the high one, 0 for a channel past the last; every length
    (the vector body and its tail) of every image."""
    mod = _module()
    rng = np.random.default_rng(3)
    for level in native.levels():
        mod.set_level(level)
        for channels, plane in [(1, 5), (2, 16), (3, 37), (5, 64), (4, 33)]:
            images = 2
            x = _bytes(rng, signed, (images, channels, plane), True)
            zx = -3 if signed else 200
            dst = np.full(images * ((channels + 1) // 2) * plane, 0xDEADBEEF, np.uint32)
            mod.interleave2(x.view(np.uint8), images, channels, plane, signed, zx, dst)
            v = x.astype(np.int64) - zx
            if channels % 2:
                v = np.concatenate([v, np.full((images, 1, plane), 0)], axis=1)
            lo, hi = v[:, 0::2] & 0xFFFF, v[:, 1::2] & 0xFFFF
            if channels % 2:
                hi[:, -1] = 0
            want = (lo | hi << 16).astype(np.uint32).reshape(-1)
            np.testing.assert_array_equal(dst, want, err_msg=f"level {level} {channels} x {plane}")
    with pytest.raises(ValueError):  # dst shorter than the pairs' words
        mod.interleave2(np.zeros(12, np.uint8), 1, 3, 4, False, 0, np.zeros(7, np.uint32))
    with pytest.raises(ValueError):  # a zero point outside the codes' type
        mod.interleave2(np.zeros(12, np.uint8), 1, 3, 4, False, 256, np.zeros(8, np.uint32))


def test_the_four_channel_product_checks_its_operands() -> None:
    mod = _module()
    if native.AVX512_VNNI not in native.levels():
        pytest.skip("the four-channel product runs at the VNNI level")
    mod.set_level(native.AVX512_VNNI)
    w = np.ones((4, 8), np.int8)
    packed = mod.pack_weights(w.view(np.uint8).reshape(-1), 4, 8, True, np.zeros(4, np.int32))
    rows = np.array([0, 12], np.int64)
    x4 = np.full(24 + 32, 0x01010101, np.uint32)  # every byte 1
    y = np.empty((4, 3, 4), np.uint8)
    tail = (np.ones(4, np.float32), b"", False, False, np.float32(0.1), 0, np.float32(0.1), 0)
    assert mod.gemm_rescale4(packed, x4, rows, 12, False, 0, 3, 4, 4, *tail, True, y) == 0
    np.testing.assert_array_equal(y, np.full((4, 3, 4), 80, np.uint8))  # 8 * 1 / 0.1
    with pytest.raises(ValueError):  # a row whose last panel reads past x4
        mod.gemm_rescale4(
            packed, x4, np.array([0, 25], np.int64), 12, False, 0, 3, 4, 4, *tail, True, y
        )
    with pytest.raises(ValueError):  # one row per k group
        mod.gemm_rescale4(packed, x4, rows[:1], 12, False, 0, 3, 4, 4, *tail, True, y)
    zp = mod.pack_weights(w.view(np.uint8).reshape(-1), 4, 8, True, np.ones(4, np.int32))
    with pytest.raises(ValueError):  # weight zero points: their column term needs packing
        mod.gemm_rescale4(zp, x4, rows, 12, False, 0, 3, 4, 4, *tail, True, y)
    mod.set_level(native.AVX2)
    packed2 = mod.pack_weights(w.view(np.uint8).reshape(-1), 4, 8, True, np.zeros(4, np.int32))
    with pytest.raises(ValueError):  # another level (weights of VNNI's packing)
        mod.gemm_rescale4(packed, x4, rows, 12, False, 0, 3, 4, 4, *tail, True, y)
    mod.set_level(native.AVX512_VNNI)
    with pytest.raises(ValueError):  # another level (the AVX2 pairs' packing)
        mod.gemm_rescale4(packed2, x4, rows, 12, False, 0, 3, 4, 4, *tail, True, y)
    with pytest.raises(ValueError):  # src shorter than its planes
        mod.interleave4(np.zeros(10, np.uint8), 1, 3, 4, False, np.zeros(16, np.uint8))


def test_the_pairs_product_checks_its_operands() -> None:
    """At the AVX2 level gemm_rescale4 reads interleave2's pairs with the int16 form's
    weights (zero points and all); the quads form, a row read past the pairs, or a
    wrong row count raise."""
    mod = _module()
    if native.AVX2 not in native.levels():
        pytest.skip("the pairs product runs at the AVX2 level")
    mod.set_level(native.AVX2)
    w = np.full((4, 8), 200, np.uint8)  # (w - zw) = 100: every same-sign pair cut, int16
    zw = np.full(4, 100, np.int32)
    packed = mod.pack_weights(w.reshape(-1), 4, 8, False, zw)
    assert mod.weight_form(packed)[0] == "int16"
    rows = np.array([0, 12, 24, 36], np.int64)  # four k pairs
    x2 = np.full(48 + 16, 0x00010001, np.uint32)  # every int16 1
    y = np.empty((4, 3, 4), np.uint8)
    tail = (np.ones(4, np.float32), b"", False, False, np.float32(10.0), 0, np.float32(1), 0)
    assert mod.gemm_rescale4(packed, x2, rows, 12, False, 0, 3, 4, 4, *tail, True, y) == 0
    np.testing.assert_array_equal(y, np.full((4, 3, 4), 80, np.uint8))  # 8 * 100 / 10
    with pytest.raises(ValueError):  # a row whose last panel reads past x2
        bad = np.array([0, 12, 24, 49], np.int64)
        mod.gemm_rescale4(packed, x2, bad, 12, False, 0, 3, 4, 4, *tail, True, y)
    with pytest.raises(ValueError):  # one row per k pair
        mod.gemm_rescale4(packed, x2, rows[:2], 12, False, 0, 3, 4, 4, *tail, True, y)
    small = mod.pack_weights(np.ones(32, np.uint8), 4, 8, True, np.zeros(4, np.int32))
    assert mod.weight_form(small)[0] == "quads"
    with pytest.raises(ValueError):  # the quads form reads bytes, not pairs
        mod.gemm_rescale4(small, x2, rows[:2], 12, False, 0, 3, 4, 4, *tail, True, y)


def test_gemm_rescale_checks_its_operands() -> None:
    mod = _module()
    w = np.ones((4, 6), np.int8)
    packed = mod.pack_weights(w.view(np.uint8), 4, 6, True, np.zeros(4, np.int32))
    x = np.ones(6 * 12, np.uint8)
    rowoff = np.arange(6, dtype=np.int64) * 12
    scale, bias = np.ones(4, np.float32), np.zeros(4, np.float32)
    y = np.empty((4, 3, 4), np.uint8)
    args = (packed, x, rowoff, 1, 12, False, 0)
    tail = (scale, bias, False, False, np.float32(0.1), 0, np.float32(0.1), 0, True, y)
    assert mod.gemm_rescale(*args, 3, 4, 4, *tail) == 0
    np.testing.assert_array_equal(y, np.full((4, 3, 4), 60, np.uint8))  # 6 * 1 / 0.1
    with pytest.raises(ValueError):  # rows * width is not N
        mod.gemm_rescale(*args, 3, 5, 4, *tail)
    with pytest.raises(ValueError):  # keep > width
        mod.gemm_rescale(*args, 3, 4, 5, *tail)
    with pytest.raises(ValueError):  # y too short
        mod.gemm_rescale(*args, 3, 4, 4, *tail[:-1], np.empty(47, np.uint8))
    with pytest.raises(ValueError):  # one scale missing
        mod.gemm_rescale(*args, 3, 4, 4, scale[:3], *tail[1:])
    with pytest.raises(ValueError):  # not packed weights
        mod.gemm_rescale(b"nope", *args[1:], 3, 4, 4, *tail)
    nan_bias = bias.copy()
    nan_bias[2] = np.nan
    assert mod.gemm_rescale(*args, 3, 4, 4, scale, nan_bias, *tail[2:]) == -1


def test_the_rescale_quantizer_multiplies_by_the_reciprocal() -> None:
    """v * float32(1 / qs) where it differs from v / qs: qs = float32(2 / 13) puts the
    quotient of odd integers on a tie that the product misses by an ulp."""
    acc = np.arange(-70, 70, dtype=np.int32).reshape(1, 1, 140)
    one, none = np.ones(1, np.float32), np.zeros(1, np.float32)
    qs = np.float32(2 / 13)
    v = acc.astype(np.float32)
    want = _rescale_quantize(v, qs, 128, np.uint8).astype(np.uint8)
    assert (want != _quantize_steps(v, qs, 128, np.uint8)).sum() >= 4
    for level in native.levels():
        _module().set_level(level)
        for relu in (False, True):
            got = np.empty((1, 1, 140), np.uint8)
            assert (
                _module().rescale_q(acc, 1, 1, 140, 140, one, none, relu, False, qs, 128, got) == 0
            )
            expected = np.where(v < 0, 128, want) if relu else want
            np.testing.assert_array_equal(got, expected, err_msg=f"level {level} relu {relu}")


# ---- the QDQ conv fusion --------------------------------------------------------------


def _qdq_conv_model(
    rng: np.random.Generator,
    c: int,
    m: int,
    kernel: int,
    stride: int,
    pad: int,
    x_signed: bool,
    w_signed: bool,
    relu: bool,
    per_channel: bool,
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """x -> Q -> DQ -> Conv(DQ(W), DQ(B)) [-> Relu] -> Q -> DQ, as onnxruntime.quantization
    writes it; returns the model and its parameters."""
    xt = np.int8 if x_signed else np.uint8
    wt = np.int8 if w_signed else np.uint8
    xs = np.float32(rng.uniform(0.01, 0.05))
    xz = np.array(rng.integers(-20, 20) if x_signed else rng.integers(0, 255), xt)
    if rng.integers(2):  # a bell of codes (the AVX2 quads) or uniform ones (int16 pairs)
        w = _bell(rng, w_signed, (m, c * kernel * kernel), 30.0).reshape(m, c, kernel, kernel)
    else:
        w = _bytes(rng, w_signed, (m, c, kernel, kernel), False)
    ws = rng.uniform(0.002, 0.02, m if per_channel else 1).astype(np.float32)
    wz = np.zeros(ws.shape, wt) if w_signed else rng.integers(100, 150, ws.shape).astype(wt)
    if not per_channel:
        ws, wz = ws.reshape(()), wz.reshape(())
    bs = (xs * np.broadcast_to(ws, (m,))).astype(np.float32)
    bq = rng.integers(-3000, 3000, m).astype(np.int32)
    os_ = np.float32(rng.uniform(0.02, 0.08))
    oz = np.array(rng.integers(0, 60), np.uint8)
    inits = {
        "xs": np.array(xs),
        "xz": xz,
        "w": w,
        "ws": ws,
        "wz": wz,
        "b": bq,
        "bs": bs,
        "bz": np.zeros(m, np.int32),
        "os": np.array(os_),
        "oz": oz,
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="xq"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="xd"),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], name="wd", axis=0),
        helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], name="bd", axis=0),
        helper.make_node(
            "Conv",
            ["xd", "wd", "bd"],
            ["y0"],
            name="conv",
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
        ),
    ]
    last = "y0"
    if relu:
        nodes.append(helper.make_node("Relu", ["y0"], ["y1"], name="relu"))
        last = "y1"
    nodes += [
        helper.make_node("QuantizeLinear", [last, "os", "oz"], ["yq"], name="yq"),
        helper.make_node("DequantizeLinear", ["yq", "os", "oz"], ["y"], name="y"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model, inits


def _integer_reference(
    x: np.ndarray, p: dict[str, Any], kernel: int, stride: int, pad: int, relu: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(the fusion's output by its definition in numpy, the exact value before the output
    quantizer in float64)."""
    xdtype = p["xz"].dtype
    t = _quantize_steps(x, p["xs"].astype(np.float32), int(p["xz"]), xdtype).astype(np.int64)
    t -= int(p["xz"])
    n, c, h, wd = x.shape
    tp = np.pad(t, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kernel) // stride + 1, (wd + 2 * pad - kernel) // stride + 1
    cols = np.stack(
        [
            tp[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
            for i, j in product(range(kernel), range(kernel))
        ],
        axis=2,
    ).reshape(n, c * kernel * kernel, oh * ow)
    w = p["w"]
    m = w.shape[0]
    wz = np.broadcast_to(p["wz"].astype(np.int64).reshape(-1), (m,))
    wi = w.reshape(m, -1).astype(np.int64) - wz[:, None]
    acc = np.einsum("mk,nkp->nmp", wi, cols)
    assert np.abs(acc).max() < 2**31
    ws = np.broadcast_to(p["ws"].reshape(-1), (m,))
    # The node's float32 steps: s = float32(sx * sw), then float32(acc) * s + b.
    scale = (np.float32(p["xs"]) * ws).astype(np.float32)
    bias = p["b"].astype(np.float32) * p["bs"]  # the dequantizer's float32 bias
    v = acc.astype(np.float32) * scale[None, :, None] + bias[None, :, None]
    real = np.float64(p["xs"]) * ws.astype(np.float64)
    exact = acc * real[None, :, None] + bias.astype(np.float64)[None, :, None]
    if relu:
        v = np.maximum(v, np.float32(0))
        exact = np.maximum(exact, 0)
    q = _rescale_quantize(v, p["os"].astype(np.float32), int(p["oz"]), np.uint8)
    y = (q - np.float32(p["oz"])) * p["os"].astype(np.float32)
    return y.reshape(n, m, oh, ow), exact.reshape(n, m, oh, ow)


@contextmanager
def _process_level(level: int | None) -> Iterator[None]:
    """The compiled kernels at ``level`` (None: off) for the block, as ONNXVIZ_NATIVE
    would set them for a whole process."""
    before = native._LEVEL
    native._LEVEL = level
    try:
        yield
    finally:
        native._LEVEL = before


def _uses_integer_conv(model: onnx.ModelProto) -> int:
    return sum(type(pn.fused).__name__ == "QdqConv" for pn in run_nodes(Session(model).plan))


def _grouped_input_pays(level: int, w: np.ndarray, wz: np.ndarray, stride: int) -> bool:
    """Whether a conv reads its input in channel groups where it lies
    (fusion_qdq_conv._FourChannels): kernels of more than one offset whose channels fill
    their groups but for an eighth; at VNNI (groups of 4) with no weight zero points; at
    AVX2 (int16 pairs) for unit strides (the phases' reads ran slower than the packing)
    and weights that pack_weights holds in the int16 form (not the quads)."""
    from onnxviz.runtime.fusion_qdq_conv import four_channel_rows

    m, c, kh, kw = w.shape
    size = {native.AVX512_VNNI: 4, native.AVX2: 2}.get(level)
    if size is None or kh * kw < 2 or -(-c // size) * size * 8 > c * 9:
        return False
    if size == 4:
        return not np.any(wz)
    mod = _module()
    rows = four_channel_rows(w, 2)
    zw = np.ascontiguousarray(np.broadcast_to(wz.astype(np.int32), (m,)))
    raw = rows.view(np.uint8).reshape(-1)
    packed = mod.pack_weights(raw, m, rows.shape[1], w.dtype == np.int8, zw)
    return stride == 1 and bool(mod.weight_form(packed)[0] == "int16")


@settings(max_examples=30, deadline=None)
@given(
    shape=st.sampled_from(
        [  # (c, m, kernel, stride, pad, image)
            (3, 8, 7, 2, 3, 30),
            (16, 24, 3, 1, 1, 12),
            (13, 40, 3, 2, 1, 17),
            (32, 17, 1, 1, 0, 9),
            (24, 33, 1, 2, 0, 14),
            (5, 9, 5, 1, 2, 11),
            (40, 70, 3, 1, 0, 6),
        ]
    ),
    x_signed=st.booleans(),
    w_signed=st.booleans(),
    relu=st.booleans(),
    per_channel=st.booleans(),
    batch=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_qdq_conv_fusion_is_the_integer_definition(
    shape: tuple[int, ...],
    x_signed: bool,
    w_signed: bool,
    relu: bool,
    per_channel: bool,
    batch: int,
    seed: int,
) -> None:
    """The fused chain's output is, bit for bit, the exact integer conv rescaled in
    float64 and quantized by the output quantizer's float32 steps; the stepped float32
    run differs from it by at most one quantization step, and only where the exact value
    sits within float32 rounding of a rounding boundary."""
    c, m, kernel, stride, pad, image = shape
    rng = np.random.default_rng(seed)
    model, p = _qdq_conv_model(
        rng, c, m, kernel, stride, pad, x_signed, w_signed, relu, per_channel
    )
    x = rng.normal(0, 1.5, (batch, c, image, image)).astype(np.float32)
    want, exact = _integer_reference(x, p, kernel, stride, pad, relu)
    stepped = stepped_values(model, {"x": x})["y"]
    levels = [lv for lv in native.levels() if lv >= native.AVX2]
    for level in levels:  # below AVX2 the fusion is not made (fusion_qdq_conv.int8_module)
        with _process_level(level):
            assert _uses_integer_conv(model) == 1
            session = Session(model)
            got = session.run({"x": x})["y"]
            conv = next(pn.fused for pn in run_nodes(session.plan) if pn.op_type == "Conv")
            grouped = _grouped_input_pays(level, p["w"], p["wz"], stride)
            assert (conv._ready.four is not None) == grouped, f"level {level}"
        np.testing.assert_array_equal(got, want, err_msg=f"level {level}")
    with _process_level(None):  # off: the nodes as they are, the stepped values
        assert _uses_integer_conv(model) == 0
        # (stepped with the kernels off too: the direct conv's float sums, which the
        # stepped run uses when they are on, round differently from the numpy path's)
        stepped_off = stepped_values(model, {"x": x})["y"]
        np.testing.assert_array_equal(Session(model).run({"x": x})["y"], stepped_off)
    step = np.float32(p["os"])
    differ = want != stepped
    # In quantization steps (the float difference of two grid values is itself rounded).
    moved = np.rint(want.astype(np.float64) / step) - np.rint(stepped.astype(np.float64) / step)
    assert np.abs(moved).max() <= 1
    if differ.any():
        # Only on a boundary: the exact value (in output steps) within float32 rounding
        # of a half step (K products of about 2^-24 relative error each, bound generously).
        k = c * kernel * kernel
        pos = exact[differ] / np.float64(step) + float(p["oz"])
        distance = np.abs(pos - np.floor(pos) - 0.5)
        assert distance.max() < 1e-5 * k, distance.max()


def _two_conv_model(
    seed: int, c: int, m1: int, m2: int, kernel2: int, stride2: int, x_signed: bool, both: bool
) -> tuple[onnx.ModelProto, dict[str, Any], dict[str, Any]]:
    """Two QDQ convs, the second reading the first one's output pair (as
    onnxruntime.quantization writes consecutive convs); ``both``: that float is also a
    graph output."""
    rng = np.random.default_rng(seed)
    first, p1 = _qdq_conv_model(rng, c, m1, 3, 1, 1, x_signed, True, True, True)
    second, p2 = _qdq_conv_model(
        rng, m1, m2, kernel2, stride2, kernel2 // 2, x_signed, True, False, True
    )
    # The second conv's input pair is the first one's output pair.
    p2 = {**p2, "xs": p1["os"], "xz": p1["oz"]}
    rename = {n: n + "2" for n in p2 if n not in ("xs", "xz")}
    nodes = list(first.graph.node)
    for node in second.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and node.input[0] in ("x", "xq"):
            continue  # its input pair: the first conv's
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = node.name + "2"
        for k, name in enumerate(copy.input):
            copy.input[k] = "y" if name == "xd" else rename.get(name, name + "2")
        for k, name in enumerate(copy.output):
            copy.output[k] = name + "2"
        nodes.append(copy)
    inits = list(first.graph.initializer) + [
        numpy_helper.from_array(np.asarray(v), rename[k]) for k, v in p2.items() if k in rename
    ]
    outputs = [helper.make_tensor_value_info("y2", TensorProto.FLOAT, None)]
    if both:
        outputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), p1, p2


@settings(max_examples=25, deadline=None)
@given(
    shape=st.sampled_from(
        [(8, 16, 12, 3, 1), (5, 24, 9, 3, 2), (16, 8, 33, 1, 1), (8, 40, 6, 1, 2)]
    ),
    x_signed=st.booleans(),
    both=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_consecutive_qdq_convs_pass_the_codes(
    shape: tuple[int, ...], x_signed: bool, both: bool, seed: int
) -> None:
    """When only the second conv reads the first one's output pair, the first writes its
    quantized codes and the second reads them as they are (no float image between): the
    same values, bit for bit, as the integer definition applied twice; a float that is
    also a graph output keeps the pair."""
    c, m1, m2, kernel2, stride2 = shape
    model, p1, p2 = _two_conv_model(seed, c, m1, m2, kernel2, stride2, x_signed, both)
    rng = np.random.default_rng(seed + 1)
    x = rng.normal(0, 1.5, (1, c, 11, 11)).astype(np.float32)
    y1, _ = _integer_reference(x, p1, 3, 1, 1, True)
    want, _ = _integer_reference(y1, p2, kernel2, stride2, kernel2 // 2, False)
    levels = [lv for lv in native.levels() if lv >= native.AVX2]
    if not levels:
        pytest.skip("the int8 kernel needs AVX2")
    for level in levels:
        with _process_level(level):
            fused = [pn.fused for pn in run_nodes(Session(model).plan)]
            convs = [f for f in fused if type(f).__name__ == "QdqConv"]
            assert [(f.codes_in, f.codes_out) for f in convs] == (
                [(False, False), (False, False)] if both else [(False, True), (True, False)]
            )
            session = Session(model)
            for _ in range(2):  # the first call, then the converted arguments (_again)
                got = session.run({"x": x})
                np.testing.assert_array_equal(got["y2"], want, err_msg=f"level {level}")
                if both:
                    np.testing.assert_array_equal(got["y"], y1)
    # A NaN: the first conv runs its nodes one by one, as stepping, and writes their
    # codes; the second reads them (its integer product, so not necessarily the stepped
    # float conv's values: the integer definition of the first conv's stepped output).
    x[0, 0, 0, 0] = np.nan
    with_first, _, _ = _two_conv_model(seed, c, m1, m2, kernel2, stride2, x_signed, True)
    with _process_level(levels[-1]):  # (the same float conv kernels both ways)
        got = Session(model).run({"x": x})["y2"]
        first = stepped_values(with_first, {"x": x})["y"]
    want, _ = _integer_reference(first, p2, kernel2, stride2, kernel2 // 2, False)
    np.testing.assert_array_equal(got, want)


def test_qdq_conv_later_calls_follow_their_parameters_and_shapes() -> None:
    """From its second call the node reuses its converted arguments (QdqConv._again) only
    for the same parameter objects and an input of the same shape: a scale fed per run,
    an image of another size, a NaN and a level change all give their own integer
    definition (or the stepped values), never the previous call's."""
    rng = np.random.default_rng(7)
    model, p = _qdq_conv_model(rng, 8, 12, 3, 1, 1, False, True, True, True)
    # The output quantizer's scale as a graph input: a new object each run.
    graph = model.graph
    kept = [t for t in graph.initializer if t.name != "os"]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    graph.input.append(helper.make_tensor_value_info("os", TensorProto.FLOAT, []))
    levels = [lv for lv in native.levels() if lv >= native.AVX2]
    if not levels:
        pytest.skip("the int8 kernel needs AVX2")
    with _process_level(levels[-1]):
        session = Session(model)
        assert _uses_integer_conv(model) == 1
        for image, scale in ((10, 0.05), (10, 0.05), (10, 0.03), (13, 0.03), (10, 0.07)):
            x = rng.normal(0, 1.5, (1, 8, image, image)).astype(np.float32)
            os_ = np.array(scale, np.float32)
            want, _ = _integer_reference(x, {**p, "os": os_}, 3, 1, 1, True)
            got = session.run({"x": x, "os": os_})["y"]
            np.testing.assert_array_equal(got, want, err_msg=f"{image} px, scale {scale}")
        x[0, 0, 0, 0] = np.nan
        got = session.run({"x": x, "os": os_})["y"]
        np.testing.assert_array_equal(got, stepped_values(model, {"x": x, "os": os_})["y"])
    if len(levels) > 1:  # the same session at another level: its own packed weights
        x = rng.normal(0, 1.5, (1, 8, 10, 10)).astype(np.float32)
        want, _ = _integer_reference(x, {**p, "os": os_}, 3, 1, 1, True)
        with _process_level(levels[0]):
            np.testing.assert_array_equal(session.run({"x": x, "os": os_})["y"], want)


def test_committed_qdq_model_native_on_and_off() -> None:
    """onnxruntime.quantization's per-channel QDQ CNN (tests/data/exporters): every conv
    runs as an integer product when the kernel is on, and its outputs are the numpy
    path's within one quantization step of the final DequantizeLinear (a value on a
    rounding boundary inside the net may land on the other side, see the module
    docstring of fusion_qdq_conv)."""
    name = "ort_quantization_qdq_per_channel_cnn"
    model = onnx.load(str(path_of(name)))
    feeds = feeds_of(name)
    convs = sum(n.op_type == "Conv" for n in model.graph.node)
    stepped = stepped_values(model, feeds)
    with _process_level(None):
        assert _uses_integer_conv(model) == 0
        off = Session(model).run(feeds)
        # (stepped with the kernels off too: its float convs then take the numpy path,
        # where the compiled direct conv's sums round differently)
        stepped_off = stepped_values(model, feeds)
    for out in model.graph.output:
        np.testing.assert_array_equal(off[out.name], stepped_off[out.name])
    if max(native.levels()) < native.AVX2:
        return  # no level the fusion runs at on this CPU: the numpy path only
    with _process_level(max(native.levels())):
        assert _uses_integer_conv(model) == convs
        got = Session(model).run(feeds)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for out in model.graph.output:
        maker = next(n for n in model.graph.node if out.name in n.output)
        step = float(np.max(inits[maker.input[1]]))
        diff = np.abs(got[out.name] - stepped[out.name])
        assert diff.max() <= step * (1 + 1e-4), out.name
        assert np.mean(diff == 0) >= 0.5
    assert math.isfinite(float(np.sum(got[model.graph.output[0].name])))


# ---- MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv on the kernel -------------


def _both_ways(call: Any) -> tuple[list[Any], Any]:
    """``call()`` at every level the int8 products run at (AVX2 up), and with the
    compiled kernels off (the numpy definition)."""
    with _process_level(None):
        off = call()
    return [_at(level, call) for level in native.levels() if level >= native.AVX2], off


def _at(level: int, call: Any) -> Any:
    with _process_level(level):
        return call()


@settings(max_examples=30, deadline=None)
@given(
    batch=st.sampled_from([(), (2,), (2, 3)]),
    m=st.integers(1, 30),
    k=st.integers(1, 300),
    n=st.integers(1, 45),
    a_signed=st.booleans(),
    b_signed=st.booleans(),
    per_column=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_integer_matmul_kernels_on_the_product(
    batch: tuple[int, ...],
    m: int,
    k: int,
    n: int,
    a_signed: bool,
    b_signed: bool,
    per_column: bool,
    seed: int,
) -> None:
    from onnxviz.runtime.kernels.quantize import matmul_integer, qlinear_matmul

    rng = np.random.default_rng(seed)
    a = _bytes(rng, a_signed, (*batch, m, k), bool(seed % 3 == 0))
    b = _bytes(rng, b_signed, (k, n), bool(seed % 5 == 0))
    za = _bytes(rng, a_signed, (), False)
    zb = _bytes(rng, b_signed, (n,) if per_column else (), False)
    want = (a.astype(np.int64) - za.astype(np.int64)) @ (b.astype(np.int64) - zb.astype(np.int64))
    if max(native.levels()) >= native.AVX2:  # the product really runs (no quiet fallback)
        assert _at(max(native.levels()), lambda: int8_products.matmul(a, b, za, zb)) is not None
    got, off = _both_ways(lambda: matmul_integer(a, b, za, zb))
    np.testing.assert_array_equal(off, want)
    for g in got:
        assert g.dtype == np.int32
        np.testing.assert_array_equal(g, want)
    scales = [np.array(0.02, np.float32), np.array(0.003, np.float32), np.array(0.5, np.float32)]
    yz = np.array(7, np.uint8)

    def q() -> np.ndarray:
        return qlinear_matmul(a, scales[0], za, b, scales[1], zb, scales[2], yz)

    got_q, off_q = _both_ways(q)
    for g in got_q:
        np.testing.assert_array_equal(g, off_q)


@settings(max_examples=30, deadline=None)
@given(
    shape=st.sampled_from(
        [  # (c, m, kernel, stride, pads, dilation, image)
            (3, 8, 3, 1, (1, 1, 1, 1), 1, 9),
            (5, 6, 3, 2, (0, 1, 2, 0), 1, 11),
            (4, 7, 2, 1, (0, 0, 0, 0), 2, 8),
            (16, 9, 1, 1, (0, 0, 0, 0), 1, 6),
            (6, 10, 5, 3, (2, 2, 2, 2), 1, 13),
        ]
    ),
    x_signed=st.booleans(),
    w_signed=st.booleans(),
    per_channel=st.booleans(),
    batch=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_integer_conv_kernels_on_the_product(
    shape: tuple[Any, ...],
    x_signed: bool,
    w_signed: bool,
    per_channel: bool,
    batch: int,
    seed: int,
) -> None:
    """ConvInteger and QLinearConv give the numpy path's values exactly (the padding is
    the zero point's integer, value 0)."""
    from onnxviz.runtime.kernels.nn_conv import conv_integer, qlinear_conv

    c, m, kernel, stride, pads, dilation, image = shape
    rng = np.random.default_rng(seed)
    x = _bytes(rng, x_signed, (batch, c, image, image), bool(seed % 3 == 0))
    w = _bytes(rng, w_signed, (m, c, kernel, kernel), bool(seed % 4 == 0))
    xz = _bytes(rng, x_signed, (), False)
    wz = _bytes(rng, w_signed, (m,) if per_channel else (), False)
    attrs = {
        "kernel_shape": [kernel, kernel],
        "strides": [stride, stride],
        "pads": list(pads),
        "dilations": [dilation, dilation],
    }
    if max(native.levels()) >= native.AVX2:  # the product really runs (no quiet fallback)
        out = (image + pads[0] + pads[2] - dilation * (kernel - 1) - 1) // stride + 1
        geometry = ([kernel] * 2, [stride] * 2, [dilation] * 2, list(pads), [out, out])
        exact = _at(max(native.levels()), lambda: int8_products.conv(x, w, xz, wz, 1, *geometry))
        assert exact is not None
    got, off = _both_ways(lambda: conv_integer(x, w, xz, wz, **attrs))
    assert off.dtype == np.int32
    for g in got:
        assert g.dtype == np.int32
        np.testing.assert_array_equal(g, off)
    ws = rng.uniform(0.001, 0.01, m if per_channel else 1).astype(np.float32)
    args = (np.array(0.03, np.float32), xz, w, ws, wz, np.array(0.2, np.float32))

    def q() -> np.ndarray:
        return qlinear_conv(x, *args, np.array(3, np.uint8), **attrs)

    got_q, off_q = _both_ways(q)
    for g in got_q:
        np.testing.assert_array_equal(g, off_q)


@pytest.mark.parametrize("shape", [(1, 8, 768), (3, 5), (1,), (2, 0, 3), (4, 33)])
def test_dynamic_quantize_linear_is_its_numpy_steps_at_every_level(shape: tuple[int, ...]) -> None:
    """DynamicQuantizeLinear's bytes come from the compiled quantize pass when the module is
    on: the kernel's numpy steps' bytes, scale and zero point at every level, ties (values
    exactly half a step) included; a NaN and the infinities (no finite scale) keep the
    numpy steps."""
    from onnxviz.runtime.kernels.quantize import dynamic_quantize_linear

    _module()
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    if x.size > 4:
        scale = np.float32((max(x.max(), 0) - min(x.min(), 0)) / 255.0)
        x.flat[:4] = np.array([0.5, 1.5, -2.5, -0.0], np.float32) * scale  # ties
    cases = [x]
    if x.size > 4:
        for special in (np.nan, np.inf):
            for at in (1, 9, -1):  # either vector of the first 16, or the scalar tail's last
                y = x.copy()
                y.flat[at] = special
                cases.append(y)
        # the range's ends last of all (the tail past the vectors), and at a second vector
        for lo_at, hi_at in [(-1, -2), (9, 10)]:
            y = x.copy()
            y.flat[lo_at], y.flat[hi_at] = -100.0, 100.0
            cases.append(y)
    for case in cases:
        with _process_level(None), np.errstate(all="ignore"):
            want = dynamic_quantize_linear(case)
        for level in native.levels():
            with _process_level(level), np.errstate(all="ignore"):
                got = dynamic_quantize_linear(case)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape
                np.testing.assert_array_equal(g, w, err_msg=f"level {level}")
