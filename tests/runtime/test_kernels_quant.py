"""Quantization kernels: ONNX node cases and onnxruntime on random data (per-tensor,
per-axis, blocked, 4-bit and float8 types, saturate), plus the formula for the types
onnxruntime does not run (2-bit, float4)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from onnxviz.errors import ExecutionError
from tests.runtime.datakernels_helpers import (
    QUANT_OPS,
    assert_same,
    case_params,
    judge_case,
    run_ort,
    run_ours,
)

pytestmark = pytest.mark.numeric

KNOWN_FAILURES: dict[str, str] = {}
RNG = np.random.default_rng(7)


@pytest.mark.parametrize("case", case_params(QUANT_OPS, KNOWN_FAILURES))
def test_node_case(case: object) -> None:
    judge_case(case)


def _x(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 4).astype(np.float32)


INT_TYPES = [np.uint8, np.int8, np.uint16, np.int16, ml_dtypes.int4, ml_dtypes.uint4]


@pytest.mark.parametrize("qtype", INT_TYPES, ids=lambda t: np.dtype(t).name)
def test_quantize_dequantize_per_tensor_and_per_axis(qtype: type) -> None:
    x = _x(3, 4, 5)
    lo = 0 if np.dtype(qtype).name.startswith("u") else -2
    for scale, zp, axis in (
        (np.array(0.07, np.float32), np.array(lo + 2, qtype), 1),
        (RNG.uniform(0.02, 0.2, 4).astype(np.float32), np.arange(lo, lo + 4).astype(qtype), 1),
        (RNG.uniform(0.02, 0.2, 5).astype(np.float32), np.full(5, lo + 1, qtype), -1),
    ):
        ours = run_ours("QuantizeLinear", [x, scale, zp], 21, axis=axis)[0]
        assert_same(ours, run_ort("QuantizeLinear", [x, scale, zp], 21, axis=axis)[0])
        back = run_ours("DequantizeLinear", [ours, scale, zp], 21, axis=axis)[0]
        assert_same(back, run_ort("DequantizeLinear", [ours, scale, zp], 21, axis=axis)[0])


@pytest.mark.parametrize("qtype", [np.int8, ml_dtypes.int4, ml_dtypes.uint4])
def test_blocked_quantization(qtype: type) -> None:
    x = _x(4, 7)
    scale = RNG.uniform(0.1, 0.5, (4, 3)).astype(np.float32)  # ceil(7 / 3) blocks
    zp = np.ones((4, 3), qtype)
    kw = {"axis": 1, "block_size": 3}
    ours = run_ours("QuantizeLinear", [x, scale, zp], 21, **kw)[0]
    assert_same(ours, run_ort("QuantizeLinear", [x, scale, zp], 21, **kw)[0])
    back = run_ours("DequantizeLinear", [ours, scale, zp], 21, **kw)[0]
    assert_same(back, run_ort("DequantizeLinear", [ours, scale, zp], 21, **kw)[0])
    with pytest.raises(ExecutionError):
        run_ours("QuantizeLinear", [x, scale[:, :2], zp[:, :2]], 21, **kw)


FLOAT8 = [
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e4m3fnuz,
    ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e5m2fnuz,
]


@pytest.mark.parametrize("qtype", FLOAT8, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("saturate", [0, 1])
def test_float8_quantization_saturate(qtype: type, saturate: int) -> None:
    big = float(ml_dtypes.finfo(qtype).max)
    x = np.concatenate([_x(20), np.array([big * 4, -big * 4, np.inf, -np.inf, 0.0], np.float32)])
    scale = np.array(0.5, np.float32)
    zp = np.zeros((), qtype)
    ours = run_ours("QuantizeLinear", [x, scale, zp], 21, saturate=saturate)[0]
    theirs = run_ort("QuantizeLinear", [x, scale, zp], 21, saturate=saturate)[0]
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours.astype(np.float32), theirs.astype(np.float32))
    back = run_ours("DequantizeLinear", [ours, scale, zp], 21)[0]
    assert_same(back, run_ort("DequantizeLinear", [ours, scale, zp], 21)[0])


def test_output_dtype_without_zero_point_and_default_uint8() -> None:
    x = _x(6)
    scale = np.array(0.1, np.float32)
    (y,) = run_ours("QuantizeLinear", [x, scale], 21, output_dtype=TensorProto.INT8)
    assert_same(y, run_ort("QuantizeLinear", [x, scale], 21, output_dtype=TensorProto.INT8)[0])
    (u,) = run_ours("QuantizeLinear", [x, scale], 13)
    assert u.dtype == np.uint8
    assert_same(u, run_ort("QuantizeLinear", [x, scale], 13)[0])
    (v10,) = run_ours("QuantizeLinear", [x, scale, np.array(10, np.uint8)], 10)
    assert_same(v10, run_ort("QuantizeLinear", [x, scale, np.array(10, np.uint8)], 10)[0])


def test_float16_scale_sets_the_precision() -> None:
    # The spec divides in the scale's type; onnxruntime divides in float32 instead (it
    # differs by one on some ties), so the expected values are computed here in float16.
    x = _x(50).astype(np.float16)
    scale = np.array(0.013, np.float16)
    zp = np.array(3, np.int8)
    (q,) = run_ours("QuantizeLinear", [x, scale, zp], 21)
    expected = np.clip(np.rint(x / scale).astype(np.float32) + 3, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(q, expected)
    (y,) = run_ours("DequantizeLinear", [q, scale, zp], 21)
    assert y.dtype == np.float16
    assert_same(y, run_ort("DequantizeLinear", [q, scale, zp], 21)[0])
    (y32,) = run_ours("DequantizeLinear", [q, scale, zp], 23, output_dtype=TensorProto.FLOAT)
    assert y32.dtype == np.float32


def test_two_bit_and_float4_follow_the_formula() -> None:
    x = np.array([-10.0, -1.2, -0.4, 0.0, 0.6, 1.0, 1.6, 9.0], np.float32)
    scale = np.array(0.5, np.float32)
    (i2,) = run_ours("QuantizeLinear", [x, scale, np.zeros((), ml_dtypes.int2)], 25)
    assert i2.dtype == ml_dtypes.int2
    np.testing.assert_array_equal(i2.astype(np.int8), np.clip(np.rint(x / 0.5), -2, 1))
    (u2,) = run_ours("QuantizeLinear", [x, scale, np.ones((), ml_dtypes.uint2)], 25)
    np.testing.assert_array_equal(u2.astype(np.int8), np.clip(np.rint(x / 0.5) + 1, 0, 3))
    (f4,) = run_ours("QuantizeLinear", [x, scale, np.zeros((), ml_dtypes.float4_e2m1fn)], 25)
    # float4 e2m1 values: 0, 0.5, 1, 1.5, 2, 3, 4, 6 (saturating at 6).
    assert f4.astype(np.float32).tolist() == [-6, -2, -1, 0, 1, 2, 3, 6]
    (back,) = run_ours("DequantizeLinear", [f4, scale, np.zeros((), f4.dtype)], 25)
    assert back.tolist() == [-3, -1, -0.5, 0, 0.5, 1, 1.5, 3]


def test_dynamic_quantize_against_onnxruntime() -> None:
    for x in (_x(30), np.abs(_x(8)), -np.abs(_x(8)), np.zeros(4, np.float32)):
        ours = run_ours("DynamicQuantizeLinear", [x], 11, n_outputs=3)
        theirs = run_ort("DynamicQuantizeLinear", [x], 11, n_outputs=3)
        for a, b in zip(ours, theirs):
            assert_same(a, b)


def test_matmul_integer_against_onnxruntime_and_per_row_zero_points() -> None:
    a = RNG.integers(0, 255, (2, 5, 300)).astype(np.uint8)
    b = RNG.integers(-128, 127, (300, 4)).astype(np.int8)
    bzp = RNG.integers(-5, 5, 4).astype(np.int8)
    per_col = [a, b, np.array(3, np.uint8), bzp]
    # The full int8 range against exact int64 arithmetic: onnxruntime's AVX2 u8s8
    # kernels (no VNNI) add product pairs in saturating int16 and are off there.
    exact = (a.astype(np.int64) - 3) @ (b.astype(np.int64) - bzp)
    (y,) = run_ours("MatMulInteger", per_col, 10)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, exact)
    # onnxruntime where it is exact by construction: |b| <= 64 keeps 2 * 255 * |b| in int16.
    narrow = [a, (b // 2).astype(np.int8), np.array(3, np.uint8), bzp]
    assert_same(run_ours("MatMulInteger", narrow, 10)[0], run_ort("MatMulInteger", narrow, 10)[0])
    # onnxruntime only takes a scalar zero point for A; per-row is checked on the formula.
    azp = RNG.integers(0, 255, 5).astype(np.uint8)
    (y,) = run_ours("MatMulInteger", [a[0], b, azp, bzp], 10)
    expected = (a[0].astype(np.int64) - azp[:, None]) @ (b.astype(np.int64) - bzp)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, expected)


def _qlinear_args(per_row: bool) -> list[np.ndarray]:
    a = RNG.integers(0, 255, (6, 40)).astype(np.uint8)
    b = RNG.integers(0, 255, (40, 3)).astype(np.uint8)
    a_s = RNG.uniform(0.01, 0.05, 6 if per_row else ()).astype(np.float32)
    a_z = RNG.integers(100, 150, 6 if per_row else ()).astype(np.uint8)
    b_s = RNG.uniform(0.01, 0.05, 3 if per_row else ()).astype(np.float32)
    b_z = RNG.integers(100, 150, 3 if per_row else ()).astype(np.uint8)
    return [a, a_s, a_z, b, b_s, b_z, np.array(0.2, np.float32), np.array(128, np.uint8)]


def test_qlinear_matmul_against_onnxruntime() -> None:
    args = _qlinear_args(per_row=False)
    ours = run_ours("QLinearMatMul", args, 21)[0]
    theirs = run_ort("QLinearMatMul", args, 21)[0]
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    # onnxruntime requantizes with its own fused float path; allow one rounding step.
    assert np.abs(ours.astype(np.int32) - theirs.astype(np.int32)).max() <= 1


def test_qlinear_matmul_per_row_and_column_follows_the_formula() -> None:
    a, a_s, a_z, b, b_s, b_z, y_s, y_z = _qlinear_args(per_row=True)
    (y,) = run_ours("QLinearMatMul", [a, a_s, a_z, b, b_s, b_z, y_s, y_z], 10)
    real = ((a - a_z[:, None].astype(np.float64)) * a_s[:, None]) @ (
        (b - b_z.astype(np.float64)) * b_s
    )
    expected = np.clip(np.rint(real / 0.2) + 128, 0, 255)
    assert y.dtype == np.uint8
    assert np.abs(y - expected).max() <= 1


@pytest.mark.parametrize("opset", [10, 13, 19, 21, 23, 25])
def test_every_opset_form_against_onnxruntime(opset: int) -> None:
    x = _x(2, 3, 4)
    per_axis = opset >= 13
    scale = RNG.uniform(0.05, 0.2, 3 if per_axis else ()).astype(np.float32)
    zp = RNG.integers(-3, 3, 3 if per_axis else ()).astype(np.int8)
    q = run_ours("QuantizeLinear", [x, scale, zp], opset)[0]
    assert_same(q, run_ort("QuantizeLinear", [x, scale, zp], opset)[0])
    d = run_ours("DequantizeLinear", [q, scale, zp], opset)[0]
    assert_same(d, run_ort("DequantizeLinear", [q, scale, zp], opset)[0])
    if not per_axis:
        with pytest.raises(ExecutionError):
            run_ours("QuantizeLinear", [x, np.ones(3, np.float32), np.zeros(3, np.int8)], opset)


@pytest.mark.parametrize("opset", [10, 13, 21])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("with_zero", [True, False])
def test_a_constant_per_tensor_dequantize_gives_the_kernels_bits(opset, dtype, with_zero) -> None:
    """Unwatched runs of a DequantizeLinear with constant per-tensor scale and zero point
    take its specialized call (quantize._dequantize_specializer): the stepped run's bits
    on every run, whatever x holds; another dtype of x goes to the kernel's error."""
    import onnx
    from onnx import helper, numpy_helper

    from onnxviz.runtime.fusion import run_nodes
    from onnxviz.runtime.session import Session
    from tests.runtime.differential import stepped_values

    info = np.iinfo(dtype)
    inits = [numpy_helper.from_array(np.array(0.0371, np.float32), "s")]
    ins = ["x", "s"]
    if with_zero:
        inits.append(numpy_helper.from_array(np.array(info.min + 100, dtype), "z"))
        ins.append("z")
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ins, ["y"])],
        "dq",
        [helper.make_tensor_value_info("x", elem, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    sess = Session(model)
    rng = np.random.default_rng(opset)
    for shape in ((2, 7, 32), (5,), (3, 3)):
        x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        got = sess.run({"x": x})["y"]
        want = stepped_values(model, {"x": x})["y"]
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    (pn,) = run_nodes(sess.plan)
    assert "_dequantize_specializer" in pn.call.__qualname__
    with pytest.raises(ExecutionError):
        sess.run({"x": np.zeros(3, np.int32)})
