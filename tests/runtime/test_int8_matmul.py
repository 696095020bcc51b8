"""Dynamic-quantized MatMuls (onnxruntime.quantization.quantize_dynamic's graphs): the
row-major int8 product (native/_int8.c's pack_columns/gemm_rows), DynamicQuantizeLinear's
compiled pass, the Cast -> Mul -> Add pass, and the fused chain
(fusion_int8_matmul.IntegerMatMulScaled), each against exact or stepped numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.fusion_int8_matmul import IntegerMatMulScaled
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.kernels.quantize import dynamic_quantize_linear
from onnxviz.runtime.session import Session
from tests.runtime.differential import (
    assert_integer_matmuls_exact,
    assert_modes_agree,
    stepped_values,
)
from tests.runtime.native_modules import at_level, compiled

_LEVELS = [lv for lv in native.levels() if lv >= native.AVX2]
_ALL_LEVELS = [*native.levels(), None]  # None: the kernels off, the numpy steps


def _codes(rng: np.random.Generator, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.skipif(not _LEVELS, reason="the int8 products need AVX2")
@settings(max_examples=80, deadline=None)
@given(
    m=st.integers(1, 40),
    k=st.integers(1, 700),
    n=st.integers(1, 90),
    batch=st.sampled_from([(), (2,), (2, 3)]),
    a_signed=st.booleans(),
    b_signed=st.booleans(),
    zb_form=st.sampled_from(["none", "one", "equal columns", "columns"]),
    frozen=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matmul_integer_product_is_exact_at_every_level(
    m: int,
    k: int,
    n: int,
    batch: tuple[int, ...],
    a_signed: bool,
    b_signed: bool,
    zb_form: str,
    frozen: bool,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    a_type, b_type = (np.int8 if a_signed else np.uint8), (np.int8 if b_signed else np.uint8)
    a = _codes(rng, a_type, (*batch, m, k))
    b = _codes(rng, b_type, (k, n))
    za = _codes(rng, a_type, ())
    zb = {
        "none": None,
        "one": _codes(rng, b_type, ()),
        "equal columns": np.full(n, _codes(rng, b_type, ()), b_type),
        "columns": _codes(rng, b_type, (n,)),
    }[zb_form]
    if frozen:  # an initializer's arrays: packed once and kept
        b.flags.writeable = False
        if zb is not None:
            zb.flags.writeable = False
    want = (a.astype(np.int64) - za.astype(np.int64)) @ (
        b.astype(np.int64) - (0 if zb is None else zb.astype(np.int64))
    )
    for level in _LEVELS:
        with at_level("int8", level):
            for _ in range(2):  # the second call uses the kept packed form
                got = int8_products.matmul(a, b, za, zb)
                assert got is not None and got.dtype == np.int32
                np.testing.assert_array_equal(got, want, err_msg=f"level {level}")


def _int8_at_its_level() -> Any:
    """_int8 as native.load gives it: at the level at_level set."""
    mod = native.load("int8")
    assert mod is not None
    return mod


def _quantized_weights(
    rng: np.random.Generator, dtype: Any, shape: tuple[int, int], spread: float, extremes: int
) -> np.ndarray:
    """Codes as a quantizer writes them: around the type's middle, a bell of ``spread``
    codes, and ``extremes`` codes at the type's ends (a per-channel weight's largest)."""
    info = np.iinfo(dtype)
    middle = 0 if info.min < 0 else 128
    codes = np.clip(np.round(rng.normal(middle, spread, shape)), info.min, info.max)
    flat = codes.reshape(-1)
    flat[rng.integers(0, flat.size, extremes)] = rng.choice([info.min, info.max], extremes)
    return codes.astype(dtype)


@pytest.mark.skipif(not _LEVELS, reason="the int8 products need AVX2")
@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 30),
    k=st.integers(1, 600),
    n=st.integers(1, 70),
    a_signed=st.booleans(),
    b_signed=st.booleans(),
    spread=st.sampled_from([3.0, 20.0, 40.0]),
    extremes=st.integers(0, 40),
    seed=st.integers(0, 2**16),
)
def test_quantized_weights_products_are_exact_in_every_form(
    m: int,
    k: int,
    n: int,
    a_signed: bool,
    b_signed: bool,
    spread: float,
    extremes: int,
    seed: int,
) -> None:
    """Weights shaped like real quantized ones take AVX2's quads (vpmaddubsw, pairs of B
    cut below the int16 bound and corrected after); the product is exact whatever the
    form, with any zero points and A's full range."""
    compiled("int8")
    rng = np.random.default_rng(seed)
    a_type, b_type = (np.int8 if a_signed else np.uint8), (np.int8 if b_signed else np.uint8)
    a = _codes(rng, a_type, (m, k))
    b = _quantized_weights(rng, b_type, (k, n), spread, extremes)
    za, zb = _codes(rng, a_type, ()), _codes(rng, b_type, ())
    want = (a.astype(np.int64) - za.astype(np.int64)) @ (b.astype(np.int64) - int(zb))
    # B's pairs of k (2i, 2i + 1) per column as signed bytes, those that can reach the
    # int16 bound: both of one sign, |b0| + |b1| > 128
    signed = b.astype(np.int64) - (0 if b_signed else 128)
    b0, b1 = signed[0 : k - 1 : 2], signed[1:k:2]
    cut = int(np.count_nonzero((np.abs(b0) + np.abs(b1) > 128) & ((b0 < 0) == (b1 < 0))))
    for level in _LEVELS:
        with at_level("int8", level):
            mod = _int8_at_its_level()
            columns = mod.pack_columns(b.view(np.uint8).reshape(-1), k, n, b_signed, int(zb))
            form, fixes = mod.column_form(columns)
            if level == native.AVX2:
                # the quads while few of B's values are a cut pair's
                quads = cut * mod.quads_limit() <= k * n
                assert (form, fixes) == (("quads", cut) if quads else ("byte pairs", 0))
            out = np.empty((m, n), np.int32)
            mod.gemm_rows(a.view(np.uint8).reshape(-1), m, a_signed, int(za), columns, out)
            np.testing.assert_array_equal(out, want, err_msg=f"level {level} {form} {fixes}")


@pytest.mark.skipif(native.AVX2 not in _LEVELS, reason="the quads are the AVX2 level's")
@pytest.mark.parametrize("a_signed", [False, True])
@pytest.mark.parametrize("b_signed", [False, True])
def test_quads_at_the_int16_bound_and_the_largest_k(a_signed: bool, b_signed: bool) -> None:
    """Every pair of B at |b0| + |b1| = 128 (no cut) by A's largest unsigned byte, at
    the largest K: vpmaddubsw's pair sums reach 255 * 128 = 32640 and must not saturate,
    and the zero points' terms bring the int32 sums to about 2^31."""
    k, n, m = compiled("int8").max_k(), 19, 7
    a_type, b_type = (np.int8 if a_signed else np.uint8), (np.int8 if b_signed else np.uint8)
    shift = 0 if b_signed else 128  # B's signed byte is the code minus 128 for uint8
    pairs = np.array([[-128, 0], [127, 1], [-64, -64], [64, 64], [0, -128], [1, 127]])
    signed_b = np.resize(pairs, (k // 2, n, 2)).transpose(0, 2, 1).reshape(k, n)
    b = (signed_b + shift).astype(b_type)
    top = np.iinfo(a_type).max  # A's unsigned byte 255: uint8 255, int8 127 (+128)
    a = np.full((m, k), top, a_type)
    a[1::2] = np.iinfo(a_type).min  # odd rows the unsigned byte 0
    for za, zb in [(0, shift), (np.iinfo(a_type).min, np.iinfo(b_type).min)]:
        want = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
        with at_level("int8", native.AVX2):
            mod = _int8_at_its_level()
            columns = mod.pack_columns(b.view(np.uint8).reshape(-1), k, n, b_signed, zb)
            assert mod.column_form(columns) == ("quads", 0)
            out = np.empty((m, n), np.int32)
            mod.gemm_rows(a.view(np.uint8).reshape(-1), m, a_signed, za, columns, out)
        np.testing.assert_array_equal(out, want)


@pytest.mark.skipif(native.AVX2 not in _LEVELS, reason="the quads are the AVX2 level's")
@pytest.mark.parametrize("a_signed", [False, True])
@pytest.mark.parametrize("b_signed", [False, True])
def test_quads_keep_pairs_of_opposite_signs_uncut(a_signed: bool, b_signed: bool) -> None:
    """A pair of B of opposite signs is never cut, however large (|b0| + |b1| up to 255):
    its sum lies between 255 * b0 and 255 * b1.  A's unsigned bytes 255 and 0 within a
    pair, either way round, and both 255, take each such pair to both ends of that range
    (-32640 and 32385) at the largest K."""
    k, n = compiled("int8").max_k(), 13
    a_type, b_type = (np.int8 if a_signed else np.uint8), (np.int8 if b_signed else np.uint8)
    shift = 0 if b_signed else 128
    pairs = np.array([[-128, 127], [127, -128], [-128, 1], [1, -128], [-1, 127], [100, -100]])
    signed_b = np.resize(pairs, (k // 2, n, 2)).transpose(0, 2, 1).reshape(k, n)
    b = (signed_b + shift).astype(b_type)
    top, bottom = np.iinfo(a_type).max, np.iinfo(a_type).min  # unsigned bytes 255 and 0
    a = np.full((4, k), top, a_type)
    a[0, 1::2] = a[1, 0::2] = a[3] = bottom
    for za, zb in [(0, shift), (bottom, np.iinfo(b_type).min), (top, np.iinfo(b_type).max)]:
        want = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
        with at_level("int8", native.AVX2):
            mod = _int8_at_its_level()
            columns = mod.pack_columns(b.view(np.uint8).reshape(-1), k, n, b_signed, zb)
            assert mod.column_form(columns) == ("quads", 0)
            out = np.empty((4, n), np.int32)
            mod.gemm_rows(a.view(np.uint8).reshape(-1), 4, a_signed, za, columns, out)
        np.testing.assert_array_equal(out, want)


@pytest.mark.skipif(native.AVX2 not in _LEVELS, reason="the quads are the AVX2 level's")
def test_quads_keep_to_their_limit_of_cut_pairs() -> None:
    """As many cut pairs as the limit allows keeps the quads (and the corrections make
    the product exact); one more and B stays byte pairs."""
    rng = np.random.default_rng(5)
    with at_level("int8", native.AVX2):
        mod = _int8_at_its_level()
        k, n, m = 128, 4 * mod.quads_limit() // 128, 9
        b = np.zeros((k, n), np.int8)
        pairs = [(2 * i, j) for i in range(k // 2) for j in range(n)]
        cut = pairs[:: len(pairs) // (k * n // mod.quads_limit())]
        for kk, j in cut:
            # a pair of one sign over the bound (one of opposite signs never reaches it)
            sign = rng.choice([-1, 1])
            b[kk, j] = -128 if sign < 0 else 127
            b[kk + 1, j] = rng.integers(1, 127) * sign
        a = _codes(rng, np.uint8, (m, k))
        columns = mod.pack_columns(b.view(np.uint8).reshape(-1), k, n, True, 0)
        assert mod.column_form(columns) == ("quads", len(cut))
        out = np.empty((m, n), np.int32)
        mod.gemm_rows(a.reshape(-1), m, False, 3, columns, out)
        np.testing.assert_array_equal(out, (a.astype(np.int64) - 3) @ b.astype(np.int64))
        kk, j = next(p for p in pairs if p not in cut)
        b[kk, j], b[kk + 1, j] = 100, 100
        columns = mod.pack_columns(b.view(np.uint8).reshape(-1), k, n, True, 0)
        assert mod.column_form(columns) == ("byte pairs", 0)
        mod.gemm_rows(a.reshape(-1), m, False, 3, columns, out)
        np.testing.assert_array_equal(out, (a.astype(np.int64) - 3) @ b.astype(np.int64))


@pytest.mark.skipif(native.AVX2 not in _LEVELS, reason="the quads are the AVX2 level's")
def test_quads_corrections_outside_the_product_are_refused() -> None:
    compiled("int8")
    k, n = 512, 5  # 2560 values: one cut pair is within the limit
    b = np.zeros((k, n), np.int8)
    b[0, 1], b[1, 1] = 127, 127  # one cut pair: a correction at (k 0 or 1, column 1)
    a = np.ones((2, k), np.uint8)
    with at_level("int8", native.AVX2):
        mod = _int8_at_its_level()
        columns = bytearray(mod.pack_columns(b.view(np.uint8).reshape(-1), k, n, True, 0))
        assert mod.column_form(bytes(columns)) == ("quads", 1)
        for not_columns in (b"ICO", bytes(64), bytes(columns[:0])):
            with pytest.raises(ValueError):
                mod.column_form(not_columns)
        out = np.empty((2, n), np.int32)
        mod.gemm_rows(a.reshape(-1), 2, False, 0, bytes(columns), out)
        np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))
        header, column_sums = 48, 16 * 4  # 12 int32, then one panel's 16 column sums
        for field, bad in ((0, k), (1, n), (0, -1)):
            broken = bytearray(columns)
            at = header + column_sums + 4 * field
            broken[at : at + 4] = np.int32(bad).tobytes()
            with pytest.raises(ValueError):
                mod.gemm_rows(a.reshape(-1), 2, False, 0, bytes(broken), out)


@pytest.mark.skipif(not _LEVELS, reason="the int8 products need AVX2")
@pytest.mark.parametrize("a_signed", [False, True])
def test_whole_tiles_of_later_k_blocks_add_onto_the_product(a_signed: bool) -> None:
    # Enough rows of A that K is cut into blocks (more than 4 row panels), whole tiles in
    # every block (rows and columns multiples of every level's tile) and partial ones at
    # the edge: each later block's tile is added onto C, not stored over it.
    rng = np.random.default_rng(11)
    a_type = np.int8 if a_signed else np.uint8
    for m, k, n in [(48, 1100, 64), (53, 1030, 70)]:
        a = _codes(rng, a_type, (m, k))
        b = _codes(rng, np.int8, (k, n))
        za = _codes(rng, a_type, ())
        want = (a.astype(np.int64) - za.astype(np.int64)) @ b.astype(np.int64)
        for level in _LEVELS:
            with at_level("int8", level):
                got = int8_products.matmul(a, b, za, None)
                assert got is not None
                np.testing.assert_array_equal(got, want, err_msg=f"level {level} {m}x{k}x{n}")


@pytest.mark.skipif(not _LEVELS, reason="the int8 products need AVX2")
@pytest.mark.parametrize("a_signed", [False, True])
@pytest.mark.parametrize("b_signed", [False, True])
@pytest.mark.parametrize("m", [1, 5, 7])
def test_row_products_at_the_largest_k_and_magnitudes(
    m: int, a_signed: bool, b_signed: bool
) -> None:
    # Every |a - za| and |b - zb| 255 at the largest K: the product's sums and the zero
    # point's row term (AVX2's bytes form keeps B's zero point out of the pairs) come to
    # about 2^31 and must still be exact; a panel's last rows run their own kernel.
    mod = compiled("int8")
    k = mod.max_k()
    a_type, b_type = (np.int8 if a_signed else np.uint8), (np.int8 if b_signed else np.uint8)
    a_lo, a_hi = np.iinfo(a_type).min, np.iinfo(a_type).max
    b_lo, b_hi = np.iinfo(b_type).min, np.iinfo(b_type).max
    a = np.full((m, k), a_lo, a_type)
    a[1::2] = a_hi  # odd rows the other extreme
    b = np.full((k, 19), b_hi, b_type)
    b[:, ::3] = b_lo
    for za, zb in [(a_hi, b_lo), (a_hi, b_hi)]:  # row 0 at 255 from za, both column kinds
        want = (a.astype(np.int64) - int(za)) @ (b.astype(np.int64) - int(zb))
        assert np.abs(want).max() == 255 * 255 * k
        for level in _LEVELS:
            with at_level("int8", level):
                got = int8_products.matmul(a, b, np.array(za, a_type), np.array(zb, b_type))
                assert got is not None
                np.testing.assert_array_equal(got, want, err_msg=f"level {level}")


def test_gemm_rows_checks_its_buffers() -> None:
    mod = compiled("int8")
    b = np.arange(12, dtype=np.uint8).reshape(3, 4)
    columns = mod.pack_columns(b.reshape(-1), 3, 4, False, 7)
    a = np.zeros((2, 3), np.uint8)
    out = np.empty((2, 4), np.int32)
    mod.gemm_rows(a.reshape(-1), 2, False, 0, columns, out)
    np.testing.assert_array_equal(out, np.zeros((2, 3), np.int64) @ (b.astype(np.int64) - 7))
    with pytest.raises(ValueError, match="does not fit"):
        mod.gemm_rows(a.reshape(-1), 3, False, 0, columns, out)  # 3 rows of A: 2 there
    with pytest.raises(ValueError, match="does not fit"):
        mod.gemm_rows(a.reshape(-1), 2, False, 0, columns, np.empty((1, 4), np.int32))
    with pytest.raises(ValueError, match="zero point"):
        mod.gemm_rows(a.reshape(-1), 2, True, 200, columns, out)
    with pytest.raises(ValueError, match="not packed columns"):
        mod.gemm_rows(a.reshape(-1), 2, False, 0, columns[:-4], out)
    with pytest.raises(ValueError, match="zero point"):
        mod.pack_columns(b.reshape(-1), 3, 4, False, 300)
    with pytest.raises(ValueError, match="shorter"):
        mod.pack_columns(b.reshape(-1), 4, 4, False, 0)
    levels = native.levels()
    if len(levels) > 1:
        # Columns packed at the top level, called at the lowest (whatever level this
        # process runs at: at ONNXVIZ_NATIVE=generic `columns` above are the lowest's).
        with at_level("int8", levels[-1]):
            top = native.load("int8").pack_columns(b.reshape(-1), 3, 4, False, 7)
        with at_level("int8", levels[0]):
            native.load("int8")  # (sets the module's level)
            with pytest.raises(ValueError, match="another level"):
                mod.gemm_rows(a.reshape(-1), 2, False, 0, top, out)


def _ort_dynamic_quantize() -> ort.InferenceSession:
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    graph = helper.make_graph(
        [node],
        "dql",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [
            helper.make_tensor_value_info("y", TensorProto.UINT8, None),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.UINT8, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


_ORT_DQL = _ort_dynamic_quantize()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 200),
    sign=st.sampled_from(["both", "positive", "negative"]),
    magnitude=st.floats(-4, 4),
    seed=st.integers(0, 2**16),
)
def test_dynamic_quantize_is_onnxruntimes_at_every_level(
    n: int, sign: str, magnitude: float, seed: int
) -> None:
    """onnxruntime computes the range, scale and zero point in float32 steps, as the
    operator's definition does; so do we, bit for bit, compiled or not."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 10.0**magnitude).astype(np.float32)
    x = {"both": x, "positive": np.abs(x), "negative": -np.abs(x)}[sign]
    want = _ORT_DQL.run(None, {"x": x})
    for level in _ALL_LEVELS:
        with at_level("int8", level):
            got = dynamic_quantize_linear(x)
        for g, w, name in zip(got, want, ("codes", "scale", "zero point")):
            assert g.dtype == w.dtype and g.shape == w.shape, (level, name)
            np.testing.assert_array_equal(g, w, err_msg=f"level {level}: {name}")


@pytest.mark.parametrize("level", _ALL_LEVELS)
def test_dynamic_quantize_of_zeros_and_nan(level: int | None) -> None:
    with at_level("int8", level):
        y, s, z = dynamic_quantize_linear(np.zeros((3, 5), np.float32))
        assert not y.any() and s == 1 and z == 0 and y.shape == (3, 5)
        x = np.array([1.0, np.nan, -2.0], np.float32)
        with np.errstate(invalid="ignore"):
            y, s, z = dynamic_quantize_linear(x)  # the numpy steps: no error, no crash
        assert y.shape == (3,) and y.dtype == np.uint8


@pytest.mark.parametrize("bias", [True, False])
def test_scale_columns_is_cast_mul_add_in_float32(bias: bool) -> None:
    mod = compiled("int8")
    rng = np.random.default_rng(3)
    acc = rng.integers(-(2**30), 2**30, (7, 45)).astype(np.int32)
    scale = rng.standard_normal(45).astype(np.float32)
    b = rng.standard_normal(45).astype(np.float32)
    want = acc.astype(np.float32) * scale
    if bias:
        want = want + b
    for level in native.levels():
        with at_level("int8", level):
            out = np.empty((7, 45), np.float32)
            mod.scale_columns(acc.reshape(-1), 7, 45, scale, b if bias else b"", out.reshape(-1))
            np.testing.assert_array_equal(out, want, err_msg=f"level {level}")


# ---- the fused chain, against the stepped run ----------------------------------------


def _scaled_chain_model(
    k: int,
    n: int,
    x_shape: list[int],
    scale_shape: list[int] | None,
    scale_first: bool,
    bias_shape: list[int] | None,
    bias_first: bool,
    bias_fed: bool,
    b_signed: bool,
    seed: int,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add], quantize_dynamic's
    chain, with the shapes and operand orders given."""
    rng = np.random.default_rng(seed)
    b_type = np.int8 if b_signed else np.uint8
    inits = [
        numpy_helper.from_array(_codes(rng, b_type, (k, n)), "w"),
        numpy_helper.from_array(_codes(rng, b_type, ()), "w_zero"),
        numpy_helper.from_array(
            (rng.random(scale_shape or []) * 0.01 + 0.001).astype(np.float32), "w_scale"
        ),
    ]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("Mul", ["xs", "w_scale"], ["scales"]),
        helper.make_node("MatMulInteger", ["xq", "w", "xz", "w_zero"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["scales", "accf"] if scale_first else ["accf", "scales"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    out = "y"
    if bias_shape is not None:
        bias = rng.standard_normal(bias_shape).astype(np.float32)
        if bias_fed:
            inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, bias_shape))
            feeds["bias"] = bias
        else:
            inits.append(numpy_helper.from_array(bias, "bias"))
        nodes.append(helper.make_node("Add", ["bias", "y"] if bias_first else ["y", "bias"], ["z"]))
        out = "z"
    graph = helper.make_graph(
        nodes, "dynamic", inputs, [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)]
    )
    graph.initializer.extend(inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, feeds


def _fused(model: onnx.ModelProto) -> int:
    plan = Session(model).plan
    return sum(isinstance(pn.fused, IntegerMatMulScaled) for pn in run_nodes(plan))


@settings(max_examples=40, deadline=None)
@given(
    k=st.integers(1, 300),
    n=st.integers(1, 70),
    x_shape=st.sampled_from([[5], [1, 5], [2, 3, 5], [9, 17]]),
    scale_form=st.sampled_from(["scalar", "one", "columns", "1xcolumns", "rows"]),
    scale_first=st.booleans(),
    bias_form=st.sampled_from(["none", "columns", "one", "rowsxcolumns"]),
    bias_first=st.booleans(),
    bias_fed=st.booleans(),
    b_signed=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fused_chain_gives_the_stepped_runs_numbers(
    k: int,
    n: int,
    x_shape: list[int],
    scale_form: str,
    scale_first: bool,
    bias_form: str,
    bias_first: bool,
    bias_fed: bool,
    b_signed: bool,
    seed: int,
) -> None:
    """Bit for bit, whichever operand order the nodes take and whatever shapes their
    scale and bias have (the shapes the pass does not take run the nodes)."""
    x_shape = [*x_shape[:-1], k]
    rows = x_shape[-2] if len(x_shape) > 1 else 1
    scale_shape = {
        "scalar": [],
        "one": [1],
        "columns": [n],
        "1xcolumns": [1, n],
        "rows": [rows, 1],
    }[scale_form]
    bias_shape = {"none": None, "columns": [n], "one": [1], "rowsxcolumns": [rows, n]}[bias_form]
    model, feeds = _scaled_chain_model(
        k, n, x_shape, scale_shape, scale_first, bias_shape, bias_first, bias_fed, b_signed, seed
    )
    if len(x_shape) == 1 and len(scale_shape) == 2:
        return  # MatMulInteger of a vector: a 1-D product the Mul would broadcast up
    for level in _ALL_LEVELS:
        with at_level("int8", level):
            values = assert_modes_agree(model, feeds, rtol=0.0)
    assert assert_integer_matmuls_exact(model, values) == 1
    assert _fused(model) == 1


def test_a_nan_in_the_input_runs_the_nodes() -> None:
    model, feeds = _scaled_chain_model(16, 8, [4, 16], [8], False, [8], False, False, True, seed=5)
    feeds["x"][1, 3] = np.nan
    assert_modes_agree(model, feeds, rtol=0.0)


_SCALE_SHAPES = {"scalar": [], "columns": [33], "1xcolumns": [1, 33]}
_BIAS_SHAPES = {"none": None, "columns": [33], "one": [1]}


@pytest.mark.skipif(not _LEVELS, reason="the held call runs the int8 products (AVX2)")
@pytest.mark.parametrize("b_signed", [True, False])
@pytest.mark.parametrize("scale_form", sorted(_SCALE_SHAPES))
@pytest.mark.parametrize("bias_form", sorted(_BIAS_SHAPES))
def test_held_call_runs_later_inputs_as_the_steps(
    monkeypatch: pytest.MonkeyPatch, b_signed: bool, scale_form: str, bias_form: str
) -> None:
    """From the second run the node loop calls the chain's compiled call (`quick`,
    native/_int8.c's held_rows_scaled): it takes every later run with the same constants,
    inputs of other ranges and row counts among them, and gives the stepped run's
    numbers bit for bit, without the Python call."""
    model, feeds = _scaled_chain_model(
        200, 33, [2, 9, 200], _SCALE_SHAPES[scale_form], False, _BIAS_SHAPES[bias_form],
        True, False, b_signed, seed=11,
    )  # fmt: skip
    out = model.graph.output[0].name
    python_calls = []
    python_call = IntegerMatMulScaled.__call__

    def counted(self: IntegerMatMulScaled, ex: Any, ins: list[Any]) -> list[Any]:
        python_calls.append(1)
        return python_call(self, ex, ins)

    monkeypatch.setattr(IntegerMatMulScaled, "__call__", counted)
    rng = np.random.default_rng(12)
    for level in _LEVELS:
        with at_level("int8", level):
            session = Session(model)
            session.run(feeds)
            (chain,) = [
                pn.fused
                for pn in run_nodes(session.plan)
                if isinstance(pn.fused, IntegerMatMulScaled)
            ]
            assert chain.quick is not None, f"level {level}"
            python_calls.clear()
            for shape, spread, shift in (
                ([2, 9, 200], 1.0, 0.0), ([1, 40, 200], 30.0, 5.0), ([3, 1, 200], 1e-3, -2e-3)
            ):  # fmt: skip
                x = (rng.standard_normal(shape) * spread + shift).astype(np.float32)
                got = session.run({"x": x})[out]
                want = stepped_values(model, {"x": x})[out]
                np.testing.assert_array_equal(got, want, err_msg=f"level {level}, {shape}")
            assert not python_calls, f"level {level}: the held call declined a run"


@pytest.mark.skipif(
    int8_products.module() is None,
    reason="the held call runs the int8 products (AVX2 or better, the kernels on)",
)
def test_held_call_declines_what_it_was_not_made_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Called with anything but its case (A of another byte type, layout or width, a zero
    point of another type, a scale of another length or type, another B), the held call
    answers None (the node loop then makes the Python call) and writes nothing."""
    model, feeds = _scaled_chain_model(64, 24, [5, 64], [24], False, [24], False, False, True, 3)
    seen: list[list[Any]] = []
    python_call = IntegerMatMulScaled.__call__

    def recorded(self: IntegerMatMulScaled, ex: Any, ins: list[Any]) -> list[Any]:
        seen.append(list(ins))
        return python_call(self, ex, ins)

    monkeypatch.setattr(IntegerMatMulScaled, "__call__", recorded)
    session = Session(model)
    session.run(feeds)
    (chain,) = [
        pn.fused for pn in run_nodes(session.plan) if isinstance(pn.fused, IntegerMatMulScaled)
    ]
    ins = seen[0]
    a_at, b_at, za_at = chain.product_places[:3]
    want = python_call(chain, None, ins)[0]  # type: ignore[arg-type]
    np.testing.assert_array_equal(chain.quick(*ins), want)

    def call_with(at: int, value: Any) -> Any:
        args = list(ins)
        args[at] = value
        return chain.quick(*args)

    a = ins[a_at]
    wide = np.zeros((5, 65), a.dtype)
    assert call_with(a_at, a.view(np.int8)) is None
    assert call_with(a_at, np.asfortranarray(a)) is None
    assert call_with(a_at, wide[:, :64]) is None  # not C-contiguous
    assert call_with(a_at, wide) is None
    assert call_with(a_at, a[0]) is None  # one row: a 1-D product
    assert call_with(za_at, ins[za_at].view(np.int8)) is None
    assert call_with(chain.scale_place, np.ones(25, np.float32)) is None
    assert call_with(chain.scale_place, np.ones(24, np.float64)) is None
    assert call_with(chain.scale_place, np.ones((1, 1, 24), np.float32)) is None  # a 3-D result
    assert call_with(b_at, ins[b_at].copy()) is None
    assert chain.quick(*ins, None) is None
    np.testing.assert_array_equal(chain.quick(*ins), want)


# ---- what quantize_dynamic writes --------------------------------------------------------


def _float_mlp(seed: int, hidden: int, layers: int, tails: bool = False) -> onnx.ModelProto:
    """An MLP of Gaussian weights, or with ``tails`` Laplace ones (a trained layer's
    shape: most weights small, a few large)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "x"
    for i in range(layers):
        draw = rng.laplace if tails else rng.normal
        w = (draw(0.0, 1.0, (hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
        b = rng.standard_normal(hidden).astype(np.float32) * 0.1
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [
            helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
        ]
        x = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, hidden])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 16, hidden])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
def test_quantize_dynamic_models_run_fused_as_stepped(
    tmp_path: Path, per_channel: bool, weight_type: str
) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dst = tmp_path / "float.onnx", tmp_path / "dynamic.onnx"
    onnx.save(_float_mlp(7, 96, 3), src)
    quantize_dynamic(
        str(src), str(dst), per_channel=per_channel, weight_type=getattr(QuantType, weight_type)
    )
    model = onnx.load(dst)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 16, 96)).astype(np.float32)}
    for level in _ALL_LEVELS:
        with at_level("int8", level):
            values = assert_modes_agree(model, feeds, rtol=0.0)
        assert assert_integer_matmuls_exact(model, values) == 3, f"level {level}"

    if _LEVELS:
        assert _fused(model) == 3


def _trained_like_dynamic(tmp_path: Path) -> onnx.ModelProto:
    """quantize_dynamic's form of a 256-wide MLP of Laplace weights (a trained layer's
    shape: most weights small, a few large)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dst = tmp_path / "float.onnx", tmp_path / "dynamic.onnx"
    onnx.save(_float_mlp(3, 256, 2, tails=True), src)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    return onnx.load(dst)


def _int8_weights(model: onnx.ModelProto) -> list[np.ndarray]:
    return [
        numpy_helper.to_array(t)
        for t in model.graph.initializer
        if t.data_type == TensorProto.INT8 and len(t.dims) == 2
    ]


def test_quantize_dynamic_model_of_trained_like_weights_runs_the_quads(tmp_path: Path) -> None:
    """Trained-like weights quantize to codes whose pairs rarely reach the int16 bound:
    at AVX2 the products run as quads (with a few corrections), and the fused run is
    the stepped one, integer for integer."""
    model = _trained_like_dynamic(tmp_path)
    feeds = {"x": np.random.default_rng(2).standard_normal((2, 16, 256)).astype(np.float32)}
    for level in _ALL_LEVELS:
        with at_level("int8", level):
            values = assert_modes_agree(model, feeds, rtol=0.0)
        assert assert_integer_matmuls_exact(model, values) == 2, f"level {level}"
    if native.AVX2 in _LEVELS:
        with at_level("int8", native.AVX2):
            mod = _int8_at_its_level()
            forms = [
                mod.column_form(mod.pack_columns(w.view(np.uint8).reshape(-1), *w.shape, True, 0))
                for w in _int8_weights(model)
            ]
        assert len(forms) == 2 and all(form == "quads" and fixes > 0 for form, fixes in forms)


def test_trained_like_weights_by_int8_activations_are_exact(tmp_path: Path) -> None:
    """The same weights by int8 activations (moved by +128 for vpmaddubsw's unsigned
    side, the zero point's terms after): exact at every level."""
    rng = np.random.default_rng(4)
    for w in _int8_weights(_trained_like_dynamic(tmp_path)):
        a = _codes(rng, np.int8, (37, w.shape[0]))
        want = (a.astype(np.int64) + 5) @ w.astype(np.int64)
        for level in _LEVELS:
            with at_level("int8", level):
                got = int8_products.matmul(a, w, np.array(-5, np.int8), None)
                assert got is not None
                np.testing.assert_array_equal(got, want, err_msg=f"level {level}")


def test_a_transposed_quantized_input_takes_the_held_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A quantized A that reaches the product as Transpose's view (a quantized embedding
    permuted to (tokens, batch, hidden) before a TorchScript attention's projection):
    the held call takes it copied to C order, from the second run without the Python
    route's product, with the stepped run's bits on every run.  Where there is no held
    call (the int8 products off or below AVX2: int8_products.module() is None) the
    nodes run, with the same bits."""
    held = int8_products.module() is not None
    model, feeds = _scaled_chain_model(32, 96, [2, 7, 32], [96], False, [96], True, False, True, 7)
    graph = model.graph
    mm = next(n for n in graph.node if n.op_type == "MatMulInteger")
    graph.node.insert(
        list(graph.node).index(mm), helper.make_node("Transpose", ["xq"], ["xq_t"], perm=[1, 0, 2])
    )
    mm.input[0] = "xq_t"
    out = graph.output[0].name
    products: list[int] = []
    python_product = int8_products.matmul

    def counted(*args: Any) -> Any:
        products.append(1)
        return python_product(*args)

    monkeypatch.setattr(int8_products, "matmul", counted)
    session = Session(model)
    rng = np.random.default_rng(8)
    for run in range(3):
        x = rng.standard_normal((2, 7, 32)).astype(np.float32)
        products.clear()
        got = session.run({"x": x})[out]
        if run and held:  # (the first run makes the held call through the Python route)
            assert not products, f"run {run}: the Python route ran the product"
        np.testing.assert_array_equal(got, stepped_values(model, {"x": x})[out], err_msg=str(run))
    assert _fused(model) == 1
