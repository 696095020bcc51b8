"""Math / logic / reduction / activation / linear-algebra kernels.

1. Every ONNX backend node-test case whose op under test is one of ours must pass.
2. Old opset forms and dtypes the node tests do not reach, checked against values
   derived by hand or from numpy/math definitions.
3. A few comparisons with onnxruntime on random data.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime.invoke import call_node
from onnxviz.runtime.registry import resolve
from tests.runtime.nodecases import cases_for, check_case

MATH_OPS = [
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "And",
    "ArgMax",
    "ArgMin",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "BitShift",
    "BitwiseAnd",
    "BitwiseNot",
    "BitwiseOr",
    "BitwiseXor",
    "Ceil",
    "Celu",
    "Clip",
    "Cos",
    "Cosh",
    "CumProd",
    "CumSum",
    "Det",
    "Div",
    "Einsum",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "Gemm",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "Hardmax",
    "IsInf",
    "IsNaN",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "LogSoftmax",
    "MatMul",
    "Max",
    "Mean",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Pow",
    "PRelu",
    "Reciprocal",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "Relu",
    "Round",
    "Selu",
    "Shrink",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softmax",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Sub",
    "Sum",
    "SwiGLU",
    "Swish",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Where",
    "Xor",
]

# Cases whose first node is one of our ops but whose graph also needs control flow
# (Range's function body uses Loop): the node-by-node harness cannot run Loop, so these
# go through the Session, which does.
NEEDS_SESSION = {
    "test_range_float_type_positive_delta_expanded",
    "test_range_float16_type_positive_delta_expanded",
    "test_range_bfloat16_type_positive_delta_expanded",
    "test_range_int32_type_negative_delta_expanded",
}


@pytest.mark.parametrize("case", list(cases_for(MATH_OPS)), ids=lambda c: c.name)
def test_node_case(case: Any) -> None:
    if case.name in NEEDS_SESSION:
        from onnxviz.runtime.conformance import run_node_case

        result = run_node_case(case)
        status, detail = result.status, result.detail
    else:
        status, detail = check_case(case)
    assert status == "pass", f"{status}: {detail}"


# ---------------------------------------------------------------- helpers
def run_node(op: str, inputs: list[Any], opset: int, n_outputs: int = 1, **attrs: Any) -> list[Any]:
    """Our kernel's outputs for one node ``op`` at ``opset`` (None inputs are absent)."""
    in_names = [f"x{i}" if v is not None else "" for i, v in enumerate(inputs)]
    node = helper.make_node(op, in_names, [f"y{i}" for i in range(n_outputs)], **attrs)
    with np.errstate(all="ignore"):
        return call_node(node, list(inputs), {"": opset})


def run_one(op: str, inputs: list[Any], opset: int, **attrs: Any) -> Any:
    return run_node(op, inputs, opset, **attrs)[0]


def run_ort(
    op: str, inputs: list[np.ndarray], opset: int, out_type: int | None = None, **attrs: Any
) -> np.ndarray:
    """onnxruntime's output for the same single node (the peer we compare against)."""
    import onnxruntime as ort

    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph_inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in zip(names, inputs)
    ]
    elem = out_type if out_type is not None else helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    graph = helper.make_graph(
        [node], "g", graph_inputs, [helper.make_tensor_value_info("y", elem, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, inputs)))[0]


RNG = np.random.default_rng(1234)


def _rand(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------- registration coverage
def test_every_since_version_of_our_ops_resolves_to_its_own_registration() -> None:
    import onnx.defs

    missing = []
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == "" and schema.name in MATH_OPS:
            spec = resolve("", schema.name, schema.since_version)
            if spec is None or spec.since_version != schema.since_version:
                missing.append(f"{schema.name}-{schema.since_version}")
    assert not missing, missing


def test_every_schema_attribute_is_a_kernel_parameter() -> None:
    """A node may set any attribute its schema declares; the kernel must accept it."""
    import inspect

    import onnx.defs

    refused = []
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain != "" or schema.name not in MATH_OPS:
            continue
        spec = resolve("", schema.name, schema.since_version)
        assert spec is not None
        params = inspect.signature(spec.fn).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            continue
        refused += [
            f"{schema.name}-{schema.since_version}:{a}"
            for a in schema.attributes
            if a not in params
        ]
    assert not refused, refused


def test_rank_zero_inputs() -> None:
    s = np.array(3.0, dtype=np.float32)
    assert run_one("ReduceSum", [s, np.array([0], np.int64)], 13).shape == ()
    assert run_one("ReduceMax", [s], 11, axes=[0]) == 3.0
    assert run_one("Softmax", [s], 13) == 1.0
    assert run_one("MatMul", [np.ones(3, np.float32), np.ones(3, np.float32)], 13).shape == ()


# ---------------------------------------------------------------- old opset forms
def test_add_opset6_broadcast_along_axis() -> None:
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.array([10, 20, 30], dtype=np.float32)
    out = run_one("Add", [a, b], 6, broadcast=1, axis=1)
    np.testing.assert_array_equal(out, a + b[None, :, None])


def test_add_opset6_suffix_broadcast_without_axis() -> None:
    a = np.ones((2, 3), dtype=np.float32)
    b = np.array([1, 2, 3], dtype=np.float32)
    np.testing.assert_array_equal(run_one("Sub", [a, b], 6, broadcast=1), a - b)


def test_mul_opset1_without_broadcast_rejects_different_shapes() -> None:
    a = np.ones((2, 3), dtype=np.float32)
    b = np.ones((3,), dtype=np.float32)
    with pytest.raises(ExecutionError):
        run_one("Mul", [a, b], 1, consumed_inputs=[0, 0])


def test_opset1_consumed_inputs_is_accepted_and_ignored() -> None:
    x = np.array([-1.5, 2.0], dtype=np.float32)
    np.testing.assert_array_equal(run_one("Abs", [x], 1, consumed_inputs=[0]), np.abs(x))
    np.testing.assert_array_equal(run_one("Relu", [x], 1, consumed_inputs=[0]), [0.0, 2.0])


def test_pow_and_comparisons_opset1_broadcast_axis() -> None:
    a = np.full((2, 3), 2.0, dtype=np.float32)
    b = np.array([1.0, 3.0], dtype=np.float32)
    np.testing.assert_array_equal(
        run_one("Pow", [a, b], 1, broadcast=1, axis=0), [[2, 2, 2], [8, 8, 8]]
    )
    eq = run_one("Equal", [a.astype(np.int32), np.array([2], np.int32)], 1, broadcast=1)
    assert eq.dtype == np.bool_ and eq.all()
    t = np.array([[True, False], [True, True]])
    out = run_one("And", [t, np.array([True, False])], 1, broadcast=1, axis=1)
    np.testing.assert_array_equal(out, [[True, False], [True, False]])


def test_softmax_before_13_flattens_to_2d_at_axis() -> None:
    x = _rand(2, 3, 4)
    out11 = run_one("Softmax", [x], 11, axis=1)
    rows = x.reshape(2, 12)
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out11, (e / e.sum(axis=1, keepdims=True)).reshape(x.shape), 1e-6)
    out13 = run_one("Softmax", [x], 13, axis=1)
    np.testing.assert_allclose(out13.sum(axis=1), 1.0, rtol=1e-6)
    assert not np.allclose(out11, out13)


def test_logsoftmax_and_hardmax_default_axis_differ_by_opset() -> None:
    x = _rand(2, 3, 4)
    ls1 = run_one("LogSoftmax", [x], 1)  # default axis 1, 2-D coercion
    np.testing.assert_allclose(np.exp(ls1).reshape(2, 12).sum(axis=1), 1.0, rtol=1e-5)
    hm = run_one("Hardmax", [x], 11)
    flat = hm.reshape(2, 12)
    assert (flat.sum(axis=1) == 1).all()
    np.testing.assert_array_equal(flat.argmax(axis=1), x.reshape(2, 12).argmax(axis=1))


def test_reduce_axes_attribute_and_input_forms() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    by_attr = run_one("ReduceSum", [x], 11, axes=[0, -1], keepdims=0)
    by_input = run_one("ReduceSum", [x, np.array([0, -1], np.int64)], 13, keepdims=0)
    np.testing.assert_array_equal(by_attr, x.sum(axis=(0, 2)))
    np.testing.assert_array_equal(by_input, by_attr)
    mean17 = run_one("ReduceMean", [x], 17, axes=[1])
    mean18 = run_one("ReduceMean", [x, np.array([1], np.int64)], 18)
    np.testing.assert_allclose(mean17, x.mean(axis=1, keepdims=True))
    np.testing.assert_array_equal(mean17, mean18)
    # No axes at all: every axis.
    assert run_one("ReduceMax", [x], 18, keepdims=0) == 23


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_reduce_mean_is_numpys_mean_to_the_bit(dtype: Any) -> None:
    # ReduceMean takes np.mean's own steps (the sum, then the division by the count)
    # without its checks: the same bits over random shapes, axes and keepdims, the
    # empty set of axes, every axis, and empty inputs (NaN, as numpy's 0 / 0).
    rng = np.random.default_rng(7)
    for _ in range(200):
        shape = tuple(int(n) for n in rng.integers(0, 6, rng.integers(1, 5)))
        x = (rng.standard_normal(shape) * 10 ** rng.uniform(-3, 3)).astype(dtype)
        keep = int(rng.integers(0, 2))
        picked = {int(a) for a in rng.integers(0, len(shape), rng.integers(0, len(shape) + 1))}
        axes = [a - len(shape) * int(rng.integers(0, 2)) for a in sorted(picked)]
        if axes:
            got = run_one("ReduceMean", [x, np.array(axes, np.int64)], 18, keepdims=keep)
            norm = tuple(sorted(a % len(shape) for a in axes))
        else:
            got = run_one("ReduceMean", [x], 18, keepdims=keep)
            norm = None
        acc = np.float32 if dtype == np.float16 else dtype  # float16 sums in float32
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's "Mean of empty slice"
            want = np.mean(x.astype(acc), axis=norm, keepdims=bool(keep), dtype=acc).astype(dtype)
        assert got.dtype == x.dtype and got.shape == np.shape(want)
        np.testing.assert_array_equal(got, want)


def test_reduce_noop_with_empty_axes_still_runs_the_elementwise_steps() -> None:
    x = np.array([[1.0, -2.0], [3.0, 4.0]], dtype=np.float32)
    empty = np.array([], dtype=np.int64)
    np.testing.assert_array_equal(run_one("ReduceSum", [x, empty], 13, noop_with_empty_axes=1), x)
    np.testing.assert_array_equal(
        run_one("ReduceSumSquare", [x, empty], 18, noop_with_empty_axes=1), x * x
    )
    np.testing.assert_allclose(
        run_one("ReduceLogSum", [np.abs(x), None], 18, noop_with_empty_axes=1), np.log(np.abs(x))
    )
    np.testing.assert_array_equal(
        run_one("ReduceL1", [x, empty], 18, noop_with_empty_axes=1), np.abs(x)
    )


def test_reduce_empty_set_identities() -> None:
    z = np.zeros((2, 0, 3), dtype=np.int32)
    axes = np.array([1], np.int64)
    np.testing.assert_array_equal(run_one("ReduceMax", [z, axes], 20), np.full((2, 1, 3), -(2**31)))
    np.testing.assert_array_equal(
        run_one("ReduceMin", [z, axes], 20), np.full((2, 1, 3), 2**31 - 1)
    )
    np.testing.assert_array_equal(run_one("ReduceProd", [z, axes], 18), np.ones((2, 1, 3)))
    zf = z.astype(np.float32)
    assert np.isneginf(run_one("ReduceLogSumExp", [zf, axes], 28)).all()
    assert np.isposinf(run_one("ReduceMin", [zf, axes], 18)).all()


def test_reduce_integer_sum_keeps_type_and_wraps() -> None:
    x = np.array([100, 100], dtype=np.int8)
    out = run_one("ReduceSum", [x], 11, keepdims=0)
    assert out.dtype == np.int8 and out == np.int8(-56)


def test_clip_before_11_uses_attributes_and_11_uses_optional_inputs() -> None:
    x = np.array([-5.0, 0.5, 5.0], dtype=np.float32)
    np.testing.assert_array_equal(run_one("Clip", [x], 6, min=-1.0, max=1.0), [-1, 0.5, 1])
    np.testing.assert_array_equal(run_one("Clip", [x], 6), x)  # defaults: +-FLT_MAX
    hi = np.array(2.0, np.float32)
    np.testing.assert_array_equal(run_one("Clip", [x, None, hi], 11), [-5, 0.5, 2])
    xi = np.array([-100, 3, 100], dtype=np.int8)
    np.testing.assert_array_equal(run_one("Clip", [xi, np.array(0, np.int8)], 13), [0, 3, 100])


def test_gemm_legacy_broadcast_and_optional_c() -> None:
    a, b = _rand(3, 4), _rand(4, 5)
    c = _rand(5)
    out6 = run_one("Gemm", [a, b, c], 6, broadcast=1, alpha=2.0, beta=0.5)
    np.testing.assert_allclose(out6, 2 * a @ b + 0.5 * c, rtol=1e-5, atol=1e-6)
    out11 = run_one("Gemm", [a.T.copy(), b, None], 11, transA=1)
    np.testing.assert_allclose(out11, a @ b, rtol=1e-5, atol=1e-6)


def test_prelu_opset6_per_channel_slope() -> None:
    x = -np.ones((1, 3, 2, 2), dtype=np.float32)
    slope = np.array([0.1, 0.2, 0.3], dtype=np.float32)
    out = run_one("PRelu", [x, slope], 6)
    np.testing.assert_allclose(out[0, :, 0, 0], -slope)


def test_argmax_opset1_and_select_last_index() -> None:
    x = np.array([[1, 3, 3], [2, 2, 0]], dtype=np.int32)
    np.testing.assert_array_equal(run_one("ArgMax", [x], 1, axis=1, keepdims=0), [1, 0])
    last = run_one("ArgMax", [x], 12, axis=1, keepdims=0, select_last_index=1)
    assert last.dtype == np.int64
    np.testing.assert_array_equal(last, [2, 1])
    np.testing.assert_array_equal(
        run_one("ArgMin", [x], 13, axis=0, select_last_index=1), [[0, 1, 1]]
    )


# ---------------------------------------------------------------- semantics and dtypes
def test_integer_div_truncates_toward_zero() -> None:
    a = np.array([7, -7, 7, -7, 0], dtype=np.int32)
    b = np.array([2, 2, -2, -2, 3], dtype=np.int32)
    np.testing.assert_array_equal(run_one("Div", [a, b], 14), [3, -3, -3, 3, 0])
    big = np.array([-(2**62) - 1], dtype=np.int64)
    assert run_one("Div", [big, np.array([3], np.int64)], 14)[0] == -(
        (2**62 + 1) // 3
    )  # exact, truncated


def test_integer_mod_floor_and_fmod() -> None:
    a = np.array([7, -7, 7, -7], dtype=np.int16)
    b = np.array([3, 3, -3, -3], dtype=np.int16)
    np.testing.assert_array_equal(run_one("Mod", [a, b], 13), [1, 2, -2, -1])
    np.testing.assert_array_equal(run_one("Mod", [a, b], 13, fmod=1), [1, -1, 1, -1])


def test_pow_integer_base_with_negative_and_float_exponents() -> None:
    base = np.array([2, 2, 1, -1], dtype=np.int32)
    out = run_one("Pow", [base, np.array([3, -1, -5, -3], np.int64)], 15)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [8, 0, 1, -1])
    f = run_one("Pow", [np.array([4], np.int64), np.array([0.5], np.float32)], 15)
    assert f.dtype == np.int64 and f[0] == 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("exp_dtype", [np.float32, np.int64])
def test_pow_by_two_and_three_gives_onnxruntimes_products(dtype: Any, exp_dtype: Any) -> None:
    """onnxruntime computes x ** 2 and x ** 3 as x * x and x * x * x (float16 in float32,
    rounded once): the same bits here, for negative bases and the special values too."""
    x = (np.random.default_rng(4).standard_normal(3000) * 5).astype(dtype)
    x[:5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    wide = x.astype(np.float32) if dtype == np.float16 else x
    for e, want in ((2, wide * wide), (3, (wide * wide) * wide)):
        for exp in (np.array(e, exp_dtype), np.array([e], exp_dtype)):
            out = run_one("Pow", [x, exp], 15)
            assert out.dtype == dtype and out.shape == x.shape
            np.testing.assert_array_equal(out, want.astype(dtype))
            assert np.signbit(out[4]) == (e == 3)  # (-0) ** 3 is -0, (-0) ** 2 is +0
    # A one-element exponent of higher rank still broadcasts the base's shape out.
    out = run_one("Pow", [np.array(-2.0, dtype), np.array([[3.0]], np.float32)], 15)
    assert out.shape == (1, 1) and out[0, 0] == -8


def test_bfloat16_arithmetic_rounds_once_to_bfloat16() -> None:
    bf = ml_dtypes.bfloat16
    a = np.array([1.0, 2.5, -3.0], dtype=bf)
    b = np.array([0.00390625, 1.0, 2.0], dtype=bf)
    out = run_one("Add", [a, b], 14)
    assert out.dtype == bf
    np.testing.assert_array_equal(out, (a.astype(np.float32) + b.astype(np.float32)).astype(bf))
    r = run_one("Relu", [a], 14)
    assert r.dtype == bf and r.astype(np.float32).tolist() == [1.0, 2.5, 0.0]
    sm = run_one("Softmax", [a], 13)
    assert sm.dtype == bf and abs(float(sm.astype(np.float32).sum()) - 1) < 1e-2
    mm = run_one("MatMul", [a.reshape(1, 3), b.reshape(3, 1)], 13)
    assert mm.dtype == bf


def test_erf_matches_math_erf_in_double_precision() -> None:
    x = np.concatenate([np.linspace(-7, 7, 4001), [0.0, -0.0, np.inf, -np.inf, 1e-300]])
    out = run_one("Erf", [x], 13)
    expected = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(out, expected, rtol=4e-16, atol=0)
    assert np.isnan(run_one("Erf", [np.array([np.nan])], 13)[0])
    assert run_one("Erf", [x.astype(np.float16)], 13).dtype == np.float16


def test_softmax_is_stable_for_huge_and_infinite_inputs() -> None:
    x = np.array([[1000.0, 1000.0, -np.inf], [-1e30, 0.0, 1e30]], dtype=np.float32)
    out = run_one("Softmax", [x], 13)
    np.testing.assert_allclose(out, [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    ls = run_one("LogSoftmax", [x], 13)
    np.testing.assert_allclose(ls[0, :2], np.log(0.5), rtol=1e-6)


def test_sigmoid_extremes_saturate_without_nan() -> None:
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0], dtype=np.float32)
    out = run_one("Sigmoid", [x], 13)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, [0.0, 1.9287498e-22, 0.5, 1.0, 1.0], rtol=1e-6)


def test_cumsum_reverse_exclusive_on_inner_axis() -> None:
    x = np.arange(1, 7, dtype=np.int32).reshape(2, 3)
    out = run_one("CumSum", [x, np.array(1, np.int64)], 14, reverse=1, exclusive=1)
    np.testing.assert_array_equal(out, [[5, 3, 0], [11, 6, 0]])
    p = run_one("CumProd", [x.astype(np.float32), np.array(-1, np.int32)], 26, reverse=1)
    np.testing.assert_array_equal(p, [[6, 6, 3], [120, 30, 6]])


def test_einsum_implicit_output_orders_upper_before_lower_and_allows_spaces() -> None:
    a, b = _rand(2, 3), _rand(4, 2)
    out = run_one("Einsum", [a, b], 12, equation="ba, Ab")
    np.testing.assert_allclose(out, np.einsum("ba,Ab->Aa", a, b), rtol=1e-5)
    x = _rand(2, 3, 4, 4)
    tr = run_one("Einsum", [x], 12, equation="...ii->...i")
    np.testing.assert_allclose(tr, np.diagonal(x, axis1=-2, axis2=-1))


def test_bitshift_out_of_range_shifts_follow_opset28() -> None:
    x = np.array([1, 200, 255], dtype=np.uint8)
    np.testing.assert_array_equal(
        run_one("BitShift", [x, np.array([8, 9, 1], np.uint8)], 11, direction="LEFT"), [0, 0, 254]
    )
    s = np.array([-128, 64, -1], dtype=np.int8)
    np.testing.assert_array_equal(
        run_one("BitShift", [s, np.array([9, -1, 3], np.int8)], 28, direction="RIGHT"), [-1, 0, -1]
    )
    with pytest.raises(ExecutionError):
        run_one("BitShift", [x, x], 11, direction="UP")


def test_variadic_ops_broadcast_and_do_not_touch_inputs() -> None:
    a = np.ones((2, 1), dtype=np.float32)
    b = np.arange(3, dtype=np.float32)
    c = np.full((2, 3), 5.0, dtype=np.float32)
    before = [v.copy() for v in (a, b, c)]
    np.testing.assert_array_equal(run_one("Sum", [a, b, c], 13), a + b + c)
    np.testing.assert_array_equal(run_one("Max", [a, b, c], 13), np.full((2, 3), 5.0))
    np.testing.assert_allclose(run_one("Mean", [a, b, c], 13), (a + b + c) / 3)
    for v, w in zip((a, b, c), before):
        np.testing.assert_array_equal(v, w)
    h = [np.full(4, 0.1, np.float16)] * 7
    np.testing.assert_allclose(run_one("Mean", h, 13).astype(np.float32), 0.1, rtol=1e-3)


def test_in_place_kernels_leave_inputs_unchanged() -> None:
    x = _rand(3, 4)
    keep = x.copy()
    c = _rand(3, 5)
    keep_c = c.copy()
    for op, ins, opset, attrs in [
        ("Softsign", [x], 22, {}),
        ("Clip", [x, np.array(-0.5, np.float32), np.array(0.5, np.float32)], 13, {}),
        ("Gemm", [x, _rand(4, 5), c], 13, {"alpha": 2.0, "beta": 3.0}),
        ("HardSwish", [x], 22, {}),
        ("Gelu", [x], 20, {"approximate": "tanh"}),
        ("Softmax", [x], 13, {}),
    ]:
        run_one(op, ins, opset, **attrs)
        np.testing.assert_array_equal(x, keep, err_msg=op)
    np.testing.assert_array_equal(c, keep_c)


def test_where_and_comparisons_on_strings() -> None:
    s = np.array(["a", "b", "c"], dtype=object)
    t = np.array(["a", "x", "c"], dtype=object)
    eq = run_one("Equal", [s, t], 19)
    np.testing.assert_array_equal(eq, [True, False, True])
    w = run_one("Where", [eq, s, t], 16)
    assert w.dtype == object and w.tolist() == ["a", "x", "c"]


def test_isinf_on_float8_and_integer_shrink() -> None:
    f8 = np.array([1.0, np.inf, -np.inf], dtype=ml_dtypes.float8_e5m2)
    np.testing.assert_array_equal(run_one("IsInf", [f8], 20, detect_positive=0), [0, 0, 1])
    xi = np.array([-3, -1, 0, 1, 3], dtype=np.int32)
    out = run_one("Shrink", [xi], 9, lambd=1.5, bias=1.0)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [-2, 0, 0, 0, 2])


def test_det_batched_and_bad_shape() -> None:
    x = _rand(4, 3, 3).astype(np.float64)
    np.testing.assert_allclose(run_one("Det", [x], 22), np.linalg.det(x))
    with pytest.raises(ExecutionError):
        run_one("Det", [_rand(2, 3)], 22)


# ---------------------------------------------------------------- against onnxruntime
ORT_CASES: list[tuple[str, list[np.ndarray], int, dict[str, Any]]] = [
    ("MatMul", [_rand(2, 3, 64, 32), _rand(32, 48)], 13, {}),
    (
        "Gemm",
        [_rand(16, 32), _rand(24, 32), _rand(24)],
        13,
        {"transB": 1, "alpha": 0.5, "beta": 2.0},
    ),
    ("Softmax", [_rand(4, 5, 6) * 30], 13, {"axis": 1}),
    ("Softmax", [_rand(4, 5, 6) * 30], 11, {"axis": 1}),
    ("LogSoftmax", [_rand(4, 5, 6) * 30], 13, {}),
    ("ReduceMean", [_rand(3, 4, 5), np.array([0, 2], np.int64)], 18, {"keepdims": 0}),
    ("ReduceLogSumExp", [_rand(3, 4, 5) * 40, np.array([1], np.int64)], 18, {}),
    ("ReduceL2", [_rand(3, 4, 5)], 13, {"axes": [2]}),
    ("Gelu", [_rand(200)], 20, {"approximate": "none"}),
    ("Gelu", [_rand(200)], 20, {"approximate": "tanh"}),
    ("Erf", [_rand(300) * 3], 13, {}),
    ("Einsum", [_rand(2, 3, 4), _rand(2, 4, 5)], 12, {"equation": "bij,bjk->bik"}),
    (
        "Div",
        [RNG.integers(-50, 50, 40).astype(np.int32), RNG.integers(1, 9, 40).astype(np.int32)],
        14,
        {},
    ),
    (
        "Mod",
        [RNG.integers(-50, 50, 40).astype(np.int64), RNG.integers(1, 9, 40).astype(np.int64)],
        13,
        {},
    ),
    ("CumSum", [_rand(4, 6), np.array(1, np.int64)], 14, {"reverse": 1, "exclusive": 1}),
    ("Mish", [_rand(100) * 10], 18, {}),
    ("Softplus", [_rand(100) * 50], 1, {}),
    ("HardSwish", [_rand(100) * 5], 14, {}),
    ("Selu", [_rand(100)], 6, {}),
    ("Sigmoid", [_rand(100) * 20], 13, {}),
    ("Hardmax", [_rand(3, 7)], 13, {}),
    ("Pow", [np.abs(_rand(50)) + 0.1, _rand(50)], 15, {}),
    ("MatMul", [_rand(3, 4, 5, dtype=np.float16), _rand(5, 6, dtype=np.float16)], 13, {}),
    ("MatMul", [RNG.integers(-9, 9, (3, 4)), RNG.integers(-9, 9, (2, 4, 3))], 13, {}),
    (
        "Gemm",
        [
            _rand(3, 4, dtype=np.float16),
            _rand(4, 6, dtype=np.float16),
            _rand(1, 6, dtype=np.float16),
        ],
        13,
        {"beta": 0.5},
    ),
    (
        "ReduceSum",
        [_rand(3, 4, 5, dtype=np.float16), np.array([0, 2], np.int64)],
        13,
        {"keepdims": 0},
    ),
    ("ReduceProd", [RNG.integers(-5, 5, (3, 4)), np.array([1], np.int64)], 18, {}),
    (
        "PRelu",
        [RNG.integers(-9, 9, (3, 4)).astype(np.int32), RNG.integers(-3, 3, 4).astype(np.int32)],
        16,
        {},
    ),
    ("Relu", [RNG.integers(-9, 9, 20).astype(np.int8)], 14, {}),
    ("Round", [np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, 2.6, -2.6], np.float32)], 11, {}),
    ("Hardmax", [np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32)], 13, {}),
    ("Sigmoid", [_rand(40, dtype=np.float16) * 10], 13, {}),
    ("ReduceLogSumExp", [_rand(3, 4, dtype=np.float16) * 5], 13, {"axes": [1]}),
]


@pytest.mark.parametrize(
    ("op", "inputs", "opset", "attrs"),
    ORT_CASES,
    ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(ORT_CASES)],
)
def test_matches_onnxruntime(
    op: str, inputs: list[np.ndarray], opset: int, attrs: dict[str, Any]
) -> None:
    ours = run_one(op, inputs, opset, **attrs)
    theirs = run_ort(op, inputs, opset, **attrs)
    assert ours.dtype == theirs.dtype
    assert ours.shape == theirs.shape
    tol = 1e-3 if ours.dtype == np.float16 else 2e-5
    np.testing.assert_allclose(
        ours.astype(np.float64), theirs.astype(np.float64), rtol=tol, atol=tol / 10
    )


@pytest.mark.parametrize("alpha", [0.01, 0.0, 1.0, 2.5, -0.5])
def test_leaky_relu_any_alpha(alpha: float) -> None:
    x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0, np.nan], dtype=np.float32)
    expected = np.where(x < 0, np.float32(alpha) * x, x)
    np.testing.assert_array_equal(run_one("LeakyRelu", [x], 16, alpha=alpha), expected)


# ---------------------------------------------------------------- every allowed input type
_BOOL_OUT = {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "IsNaN", "IsInf"}
_BOOL_OUT |= {"And", "Or", "Xor", "Not"}
_EXTRA_INPUTS: dict[str, list[Any]] = {  # inputs after the first; default: copies of it
    "CumSum": [np.array(1, np.int64)],
    "CumProd": [np.array(1, np.int64)],
}
_ATTRS: dict[str, dict[str, Any]] = {
    "BitShift": {"direction": "LEFT"},
    "Einsum": {"equation": "ij,jk->ik"},  # with two operands, see _EXTRA_INPUTS
}


def _typed_params() -> list[Any]:
    """(op, since_version, dtype) for every version of our ops and every input type that
    version's schema allows for its first input."""
    import onnx.defs
    from onnx import helper as h

    out = []
    for schema in onnx.defs.get_all_schemas_with_history():
        op = schema.name
        if schema.domain != "" or op not in MATH_OPS or op == "Where":
            continue  # Where (condition + two values) is covered by node and string tests
        first = schema.inputs[0].type_str
        allowed = next((c for c in schema.type_constraints if c.type_param_str == first), None)
        for type_str in allowed.allowed_type_strs if allowed else [first]:
            name = type_str[len("tensor(") : -1].upper()
            if name == "STRING":
                continue
            dtype = h.tensor_dtype_to_np_dtype(getattr(TensorProto, name))
            version = schema.since_version
            out.append(pytest.param(op, version, dtype, id=f"{op}-{version}-{name}"))
    return out


@pytest.mark.parametrize(("op", "version", "dtype"), _typed_params())
def test_every_version_and_allowed_type_runs_and_keeps_its_type(
    op: str, version: int, dtype: np.dtype
) -> None:
    import onnx.defs

    base = [[True, False], [False, True]] if dtype == np.bool_ else [[1, 2], [3, 1]]
    x = np.array(base).astype(dtype)
    schema = onnx.defs.get_schema(op, version)
    rest = [x] * (max(schema.min_input, 1) - 1) if op != "Einsum" else [x]
    inputs = [x, *_EXTRA_INPUTS.get(op, rest)]
    out = run_one(op, inputs, version, **_ATTRS.get(op, {}))
    if op in _BOOL_OUT:
        expected = np.dtype(np.bool_)
    elif op in ("ArgMax", "ArgMin"):
        expected = np.dtype(np.int64)
    else:
        expected = np.dtype(dtype)
    assert out.dtype == expected


def test_clip_on_a_scalar_with_both_bounds() -> None:
    # 0-d inputs: numpy returns scalars from ufuncs, which broke the in-place second bound.
    from onnxviz.runtime.kernels.math_activation import clip

    x = np.array(5.0, np.float32)
    out = clip(x, np.array(0.0, np.float32), np.array(3.0, np.float32))
    assert out.shape == () and out.dtype == np.float32 and float(out) == 3.0
