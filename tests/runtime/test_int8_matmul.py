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
from tests.runtime.differential import assert_integer_matmuls_exact, assert_modes_agree
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
        with at_level("int8", levels[0]):
            native.load("int8")  # (sets the module's level)
            with pytest.raises(ValueError, match="another level"):
                mod.gemm_rows(a.reshape(-1), 2, False, 0, columns, out)


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


# ---- what quantize_dynamic writes --------------------------------------------------------


def _float_mlp(seed: int, hidden: int, layers: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "x"
    for i in range(layers):
        w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
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
    assert assert_integer_matmuls_exact(model, values) == 3
    if _LEVELS:
        assert _fused(model) == 3
