"""MatMulNBits' dequantization (kernels/contrib_quant.dequantize_nbits) is the op's
definition, element by element and bit for bit, for every layout the schema allows: 2, 4
and 8 bits; block sizes 16 to 128; K a multiple of the block or not (a padded last
block); no zero point (the middle code), packed uint8 zero points, zero points in the
scales' type; no g_idx, g_idx in the default order, and act-order g_idx; float32 and
float16 scales.  And the product through it, with or without the weight cache, is the
float64 product of those weights."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxviz.runtime.kernels import _weight_cache as wc
from onnxviz.runtime.kernels import contrib_quant, packed_gemm
from onnxviz.runtime.kernels.contrib_quant import dequantize_nbits, matmul_nbits

pytestmark = pytest.mark.numeric


def _definition(
    b: np.ndarray,
    scales: np.ndarray,
    zp: np.ndarray | None,
    g_idx: np.ndarray | None,
    K: int,
    N: int,
    block: int,
    bits: int,
) -> np.ndarray:
    """One element at a time, as the schema words it: the code of feature k of column n
    is bits-wide, packed low bits first in the bytes of its block; its block is
    k // block (or g_idx[k]); w = (code - zero_point) * scale in float32."""
    per = 8 // bits
    mask = (1 << bits) - 1
    kb = (K + block - 1) // block
    blob = block * bits // 8
    flat_b = b.reshape(N, kb, blob)
    sc = scales.reshape(N, kb)
    w = np.empty((N, K), np.float32)
    for n in range(N):
        for k in range(K):
            byte = int(flat_b[n, k // block, (k % block) // per])
            code = (byte >> (bits * (k % per))) & mask
            blk = k // block if g_idx is None else int(g_idx[k])
            if zp is None:
                z = np.float32(1 << (bits - 1))
            elif zp.dtype == np.uint8:
                zrow = zp.reshape(N, -1)
                z = np.float32((int(zrow[n, blk // per]) >> (bits * (blk % per))) & mask)
            else:
                z = np.float32(zp.reshape(N, kb)[n, blk])
            w[n, k] = (np.float32(code) - z) * np.float32(sc[n, blk])
    return w


def _case(
    rng: np.random.Generator,
    bits: int,
    block: int,
    K: int,
    N: int,
    zp_kind: str,
    g_kind: str,
    scale_type: Any = np.float32,
) -> tuple[np.ndarray, ...]:
    kb = (K + block - 1) // block
    b = rng.integers(0, 256, (N, kb, block * bits // 8)).astype(np.uint8)
    scales = (rng.random(N * kb) * 0.2 - 0.1).astype(scale_type)
    zp: np.ndarray | None = None
    if zp_kind == "uint8":
        per = 8 // bits
        zp = rng.integers(0, 256, N * ((kb + per - 1) // per)).astype(np.uint8)
    elif zp_kind == "float":
        zp = rng.integers(0, 1 << bits, N * kb).astype(scale_type)
    g_idx: np.ndarray | None = None
    if g_kind == "default":
        g_idx = (np.arange(K) // block).astype(np.int32)
    elif g_kind == "act_order":
        g_idx = rng.permutation(np.arange(K) // block).astype(np.int32)
    return b, scales, zp, g_idx


LAYOUTS = list(
    itertools.product(
        (2, 4, 8),
        (16, 32, 128),
        (64, 100),
        ("none", "uint8", "float"),
        ("none", "default", "act_order"),
    )
)


@pytest.mark.parametrize(("bits", "block", "K", "zp_kind", "g_kind"), LAYOUTS)
def test_dequantization_is_the_definition_bit_for_bit(
    bits: int, block: int, K: int, zp_kind: str, g_kind: str
) -> None:
    rng = np.random.default_rng([bits, block, K, len(zp_kind), len(g_kind)])
    N = 5
    b, scales, zp, g_idx = _case(rng, bits, block, K, N, zp_kind, g_kind)
    want = _definition(b, scales, zp, g_idx, K, N, block, bits)
    got = dequantize_nbits(b, scales, zp, g_idx, K, N, block, bits)
    assert got.shape == (N, K) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    # The [K, N] rows the product reads
    got_t = dequantize_nbits(b, scales, zp, g_idx, K, N, block, bits, transposed=True)
    assert got_t.flags.c_contiguous
    np.testing.assert_array_equal(got_t, want.T)


@pytest.mark.parametrize("zp_kind", ["none", "uint8", "float"])
def test_float16_scales_and_zero_points(zp_kind: str) -> None:
    rng = np.random.default_rng(3)
    b, scales, zp, _ = _case(rng, 4, 32, 96, 4, zp_kind, "none", np.float16)
    got = dequantize_nbits(b, scales, zp, None, 96, 4, 32, 4)
    np.testing.assert_array_equal(got, _definition(b, scales, zp, None, 96, 4, 32, 4))


def test_a_weight_longer_than_a_chunk_is_dequantized_in_pieces(monkeypatch) -> None:
    # Chunks of 16 rows (the least), the last one partial.
    monkeypatch.setattr(contrib_quant, "_CHUNK_ELEMENTS", 3 * 64)
    rng = np.random.default_rng(4)
    for bits, zp_kind, g_kind in [
        (4, "uint8", "none"),
        (2, "none", "act_order"),
        (8, "float", "none"),
    ]:
        b, scales, zp, g = _case(rng, bits, 32, 64, 37, zp_kind, g_kind)
        want = _definition(b, scales, zp, g, 64, 37, 32, bits)
        for transposed in (False, True):
            got = dequantize_nbits(b, scales, zp, g, 64, 37, 32, bits, transposed=transposed)
            np.testing.assert_array_equal(got, want.T if transposed else want)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("cached", [False, True])
def test_the_product_is_the_float64_product_of_the_definitions_weights(
    monkeypatch, bits: int, cached: bool
) -> None:
    # The numpy path and its float32 form (the compiled kernel: test_native_nbits).
    monkeypatch.setattr(contrib_quant, "_NBITS", None)
    rng = np.random.default_rng(bits)
    K, N, block = 100, 24, 32
    b, scales, zp, _ = _case(rng, bits, block, K, N, "uint8", "none")
    w = _definition(b, scales, zp, None, K, N, block, bits).astype(np.float64)
    bias = rng.standard_normal(N).astype(np.float32)
    a = rng.standard_normal((2, 3, K)).astype(np.float32)
    wc.clear()
    if cached:  # read-only views over bytes, as a model's initializers are held
        b, scales, zp = (
            np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape) for x in (b, scales, zp)
        )
    attrs = {"K": K, "N": N, "block_size": block, "bits": bits}
    for _ in range(2):  # the second call reads the stored weight when cached
        y = matmul_nbits(a, b, scales, zp, None, bias, **attrs)
        # float32 rounding of a K-term sum: bounded by the sum of the terms' magnitudes
        bound = np.abs(a.astype(np.float64)) @ np.abs(w.T) + np.abs(bias)
        assert np.all(np.abs(y - (a.astype(np.float64) @ w.T + bias)) <= 1e-5 * bound)
    assert (wc.stored_bytes() > 0) == cached
    wc.clear()


@pytest.mark.parametrize("m", [1, 5])
def test_a_weight_the_cache_will_not_keep_multiplies_chunk_by_chunk(monkeypatch, m: int) -> None:
    # Frozen (an initializer) but past the memory bound, and big: no form is stored, and
    # the product, made a few rows of the weight at a time, is the definition's.
    monkeypatch.setattr(wc, "CAP_BYTES", 4 * 1024)
    monkeypatch.setattr(contrib_quant, "_STREAM_ELEMENTS", 7 * 64)
    monkeypatch.setattr(contrib_quant, "_STREAM_MIN_BYTES", 1024)
    # Not the small products' route (the packed form, test_small_weights_*): the [K, N]
    # form of a weight this size is what this test is about.
    monkeypatch.setattr(packed_gemm, "SMALL_MACS", 0)
    rng = np.random.default_rng(m)
    K, N, block = 64, 37, 16
    b, scales, zp, g = _case(rng, 4, block, K, N, "uint8", "act_order")
    b, scales, zp, g = (
        np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape) for x in (b, scales, zp, g)
    )
    w = _definition(b, scales, zp, g, K, N, block, 4).astype(np.float64)
    a = rng.standard_normal((m, K)).astype(np.float32)
    wc.clear()
    attrs = {"K": K, "N": N, "block_size": block, "bits": 4}
    y = matmul_nbits(a, b, scales, zp, g, None, **attrs)
    bound = np.abs(a.astype(np.float64)) @ np.abs(w.T)
    assert np.all(np.abs(y - a.astype(np.float64) @ w.T) <= 1e-5 * bound)
    assert wc.stored_bytes() == 0
    # With room, the same call stores the [K, N] form and gives the same numbers.
    monkeypatch.setattr(wc, "CAP_BYTES", 1 << 20)
    np.testing.assert_allclose(
        matmul_nbits(a, b, scales, zp, g, None, **attrs), y, rtol=1e-6, atol=1e-6
    )
    assert wc.stored_bytes() == K * N * 4
    wc.clear()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([2, 4, 8]),
    st.sampled_from([16, 32, 64]),
    st.integers(1, 150),
    st.integers(1, 40),
    st.integers(1, 10),
    st.sampled_from(["none", "uint8", "float"]),
    st.sampled_from(["none", "default", "act_order"]),
    st.sampled_from(["kept", "whole", "streamed"]),
    st.integers(0, 2**16),
)
def test_every_path_of_the_product_is_the_definitions(
    bits, block, K, N, m, zp_kind, g_kind, path, seed
) -> None:
    """Random layouts and row counts through each way the product is made: the kept
    [K, N] form (few-row BLAS blocks included), the whole weight made on the call, and
    chunk by chunk; each within float32 rounding of the definition's weights in float64."""
    rng = np.random.default_rng(seed)
    b, scales, zp, g = _case(rng, bits, block, K, N, zp_kind, g_kind)
    w = _definition(b, scales, zp, g, K, N, block, bits).astype(np.float64)
    if path == "kept":  # read-only views over bytes, as a model's initializers are held
        b, scales = (np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape) for x in (b, scales))
        zp, g = (
            None if x is None else np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape)
            for x in (zp, g)
        )
    a = rng.standard_normal((m, K)).astype(np.float32)
    wc.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(contrib_quant, "_NBITS", None)  # the numpy paths (native: test_native_nbits)
        if path == "streamed":
            mp.setattr(contrib_quant, "_STREAM_MIN_BYTES", 0)
            mp.setattr(contrib_quant, "_STREAM_ELEMENTS", int(rng.integers(1, 4)) * K)
        try:
            y = matmul_nbits(a, b, scales, zp, g, None, K=K, N=N, block_size=block, bits=bits)
            assert (wc.stored_bytes() > 0) == (path == "kept")
        finally:
            wc.clear()
    bound = np.abs(a.astype(np.float64)) @ np.abs(w.T)
    assert np.all(np.abs(y - a.astype(np.float64) @ w.T) <= 1e-5 * bound + 1e-30)
