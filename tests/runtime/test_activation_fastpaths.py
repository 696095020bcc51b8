"""Activation fast paths: max/min against a row of the constant (math_activation
.bounded_into) in the Relu and Clip kernels, the in-place Relu, the conv chains' Relu and
Clip (ReLU6), and Sigmoid -> Mul (SiLU) as one elementwise chain.  Each must give the
plain path's bits: the operations and their order are unchanged."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels.math_activation import (
    bounded_into,
    celu,
    clip,
    elu,
    mish,
    prelu,
    relu,
    select,
    selu,
    shrink,
    sigmoid,
    softplus,
    thresholded_relu,
)
from onnxviz.runtime.session import Session
from tests.runtime.differential import assert_modes_agree, stepped_values

pytestmark = pytest.mark.numeric

_SPECIAL = [np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 6.0, -6.0, 1e-40, -1e-40]


def _bits(a: np.ndarray) -> np.ndarray:
    """The array's raw bytes as unsigned integers (NaN payloads and signed zeros count)."""
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind == "f" else a


def _bits_any_nan(a: np.ndarray) -> np.ndarray:
    """_bits with every NaN the same: which NaN a product of two NaNs keeps depends on
    the order the compiler gives its operands (the compiled chain's and numpy's differ;
    native/_chain.c: bit for bit, NaN signs aside)."""
    return _bits(np.where(np.isnan(a), a.dtype.type(np.nan), a))


def _sample(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.asarray(rng.standard_normal(shape) * 10).astype(dtype)
    if np.dtype(dtype).kind == "f" and x.size:
        flat = x.reshape(-1)
        k = min(flat.size, len(_SPECIAL))
        flat[:k] = np.asarray(_SPECIAL[:k]).astype(dtype)
        rng.shuffle(flat)
    return x


# Sizes around the row length (16384) and its multiples, 0-d and empty arrays.
_SHAPES = [(), (0,), (7,), (3, 5), (16384,), (16385,), (2, 16384), (3, 20000), (1, 8, 57, 61)]


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.int8])
@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum])
def test_bounded_into_gives_the_scalar_ufuncs_bits(shape, dtype, ufunc) -> None:
    x = _sample(shape, dtype, seed=len(shape))
    for value in (0, 3, -2.5, np.nan) if np.dtype(dtype).kind == "f" else (0, 3, -2):
        want = ufunc(x, np.asarray(value).astype(x.dtype))
        got = bounded_into(ufunc, x, value, np.empty_like(x))
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(_bits(got), _bits(want))
        inplace = x.copy()
        assert bounded_into(ufunc, inplace, value, inplace) is inplace
        np.testing.assert_array_equal(_bits(inplace), _bits(want))


def test_bounded_into_on_strided_views_and_channels_last() -> None:
    x = _sample((2, 6, 30, 40), np.float32, seed=3)
    for view in (x[:, ::2], x.transpose(0, 2, 3, 1), x[..., ::-1]):
        got = bounded_into(np.maximum, view, 0, np.empty(view.shape, np.float32))
        np.testing.assert_array_equal(_bits(got), _bits(np.maximum(view, np.float32(0))))


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int8])
def test_relu_kernel_is_numpys_maximum_with_zero(shape, dtype) -> None:
    x = _sample(shape, dtype, seed=11)
    got = relu(x)
    want = np.maximum(x, 0)
    assert type(got) is np.ndarray and got.shape == x.shape and got.dtype == x.dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))
    if x.dtype.kind == "f" and x.size:
        assert not np.signbit(got[got == 0]).any()  # -0 -> +0, as max(-0, 0) gives


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize(
    "lo, hi", [(0.0, 6.0), (None, 1.5), (-1.0, None), (2.0, -2.0), (np.nan, 1.0), (0.0, np.inf)]
)
def test_clip_kernel_is_max_then_min(shape, lo, hi) -> None:
    x = _sample(shape, np.float32, seed=5)
    f32 = np.float32
    want = x
    if lo is not None:
        want = np.maximum(want, f32(lo))
    if hi is not None:
        want = np.minimum(want, f32(hi))
    got = clip(
        x, None if lo is None else np.array(lo, f32), None if hi is None else np.array(hi, f32)
    )
    assert got.shape == x.shape and got.dtype == x.dtype
    np.testing.assert_array_equal(_bits(got), _bits(np.asarray(want)))


def test_clip_bound_of_shape_one_keeps_numpys_broadcast() -> None:
    x = np.float32(-3.0).reshape(())
    got = clip(x, np.array([0.0], np.float32), None)
    assert got.shape == (1,) and got[0] == 0.0  # a (1,) bound broadcasts a 0-d input
    x8 = np.arange(-5, 5, dtype=np.int8)
    np.testing.assert_array_equal(clip(x8, np.int8(-2), np.int8(3)), np.clip(x8, -2, 3))


@pytest.mark.parametrize("shape", [(7,), (5000,), (3, 40000), (2, 3, 50, 70)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_select_is_numpys_where_bit_for_bit(shape, dtype) -> None:
    a = _sample(shape, dtype, seed=30)
    b = _sample(shape, dtype, seed=31)
    cond = _sample(shape, np.float32, seed=32) < 0.5
    np.testing.assert_array_equal(_bits(select(cond, a, b)), _bits(np.where(cond, a, b)))
    np.testing.assert_array_equal(_bits(select(cond, a, None)), _bits(np.where(cond, a, 0.0)))
    # Views that are not contiguous (a transposed operand, a strided mask).
    at = a.T.copy().T
    np.testing.assert_array_equal(_bits(select(cond, at, b)), _bits(np.where(cond, at, b)))


# The kernels as they were written with np.where: the select-based ones give their bits.
_WHERE_FORMS = {
    "elu": (
        lambda x: elu(x, alpha=0.7),
        lambda x: np.where(x >= 0, x, np.expm1(np.minimum(x, 0)) * 0.7),
    ),
    "selu": (
        lambda x: selu(x),
        lambda x: (
            np.where(x > 0, x, np.expm1(np.minimum(x, 0)) * 1.67326319217681884765625)
            * 1.05070102214813232421875
        ),
    ),
    "celu": (
        lambda x: celu(x, alpha=0.6),
        lambda x: np.maximum(x, 0) + np.minimum(np.expm1(x / 0.6) * 0.6, 0),
    ),
    "thresholded": (
        lambda x: thresholded_relu(x, alpha=0.5),
        lambda x: np.where(x > 0.5, x, 0.0),
    ),
    "shrink": (
        lambda x: shrink(x, bias=0.25, lambd=0.75),
        lambda x: np.where(x < -0.75, x + 0.25, np.where(x > 0.75, x - 0.25, 0.0)),
    ),
}


@pytest.mark.parametrize("name", sorted(_WHERE_FORMS))
@pytest.mark.parametrize("shape", [(), (9,), (3, 40000)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_select_based_activations_keep_the_where_forms_bits(name, shape, dtype) -> None:
    kernel_fn, where_form = _WHERE_FORMS[name]
    x = _sample(shape, dtype, seed=33) * 0.3
    with np.errstate(all="ignore"):
        want = np.asarray(where_form(x)).astype(dtype)
        got = kernel_fn(x)
    assert got.shape == x.shape and got.dtype == x.dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("slope_shape", [(1,), (8, 1, 1), (8, 30, 40), (1, 8, 1, 40)])
def test_prelu_keeps_the_where_forms_bits(slope_shape) -> None:
    x = _sample((2, 8, 30, 40), np.float32, seed=34)
    slope = np.random.default_rng(35).uniform(-1, 2, slope_shape).astype(np.float32)
    want = np.where(x < 0, x * slope, x)
    np.testing.assert_array_equal(_bits(prelu(x, slope)), _bits(want))


def _softplus_exact(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)) in extended precision where it matters (float64 logaddexp of
    float64 values: within an ulp of float64, far below float32's)."""
    with np.errstate(invalid="ignore"):
        return np.logaddexp(0.0, x.astype(np.longdouble)).astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softplus_is_within_a_few_ulp_of_log1p_exp(dtype) -> None:
    rng = np.random.default_rng(21)
    x = np.concatenate(
        [
            rng.standard_normal(50000) * 3,
            rng.uniform(-120, 120, 50000),
            np.linspace(-1e-3, 1e-3, 1001),
            [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.7, -745.0, 1e-30, -1e-30],
        ]
    ).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = softplus(x)
    want = _softplus_exact(x)
    assert got.dtype == x.dtype
    assert np.isnan(got[np.isnan(x)]).all()
    assert got[x == np.inf].tolist() == [np.inf] and got[x == -np.inf].tolist() == [0.0]
    fin = np.isfinite(x)
    ulp = np.spacing(np.abs(want[fin]).astype(dtype)).astype(np.float64)
    # Subnormal results (x below about -87 in float32): absolute error in the last bit.
    err = np.abs(got[fin].astype(np.float64) - want[fin]) / ulp
    assert err.max() <= 4, err.max()
    assert (got[fin] >= 0).all()


def test_mish_is_x_tanh_softplus() -> None:
    x = (np.random.default_rng(22).standard_normal(30000) * 10).astype(np.float32)
    want = x.astype(np.float64) * np.tanh(_softplus_exact(x))
    np.testing.assert_allclose(mish(x), want, rtol=4e-7, atol=1e-37)
    x16 = x.astype(np.float16)  # evaluated in float32, rounded once to float16
    half = mish(x16)
    assert half.dtype == np.float16
    want16 = x16.astype(np.float64) * np.tanh(_softplus_exact(x16))
    np.testing.assert_allclose(half, want16, rtol=1e-3, atol=1e-7)


# --- in-place Relu and the conv chains ------------------------------------------------


def _model(nodes, inputs, inits, opset: int = 17, outputs=("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_in_place_relu_of_a_dead_value_gives_the_kernels_bits() -> None:
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("Sub", ["sq", "x"], ["d"]),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    x = _sample((3, 40000), np.float32, seed=8)
    model = _model(nodes, [("x", [3, 40000])], {})
    got = Session(model, fuse_ops=False).run({"x": x})["y"]
    want = stepped_values(model, {"x": x})["y"]
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize(
    "op, bounds",
    [
        ("Sigmoid", None),
        ("Tanh", None),
        ("Clip", (0.0, 6.0)),
        ("Clip", (None, 0.5)),
        ("Clip", (1.0, -1.0)),
        ("Clip", (np.nan, 2.0)),
    ],
)
def test_in_place_sigmoid_tanh_and_clip_give_the_kernels_bits(monkeypatch, op, bounds) -> None:
    import onnxviz.runtime.inplace as inplace_module

    calls: list[str] = []
    for name in ("clip_into", "sigmoid_into", "tanh_into"):
        real = getattr(inplace_module, name)
        monkeypatch.setattr(
            inplace_module, name, lambda *a, _r=real, _n=name: calls.append(_n) or _r(*a)
        )
    inits: dict[str, np.ndarray] = {}
    ins = ["d"]
    if bounds is not None:
        for name, v in zip(("lo", "hi"), bounds):
            if v is None:
                ins.append("")
            else:
                inits[name] = np.array(v, np.float32)
                ins.append(name)
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("Sub", ["sq", "x"], ["d"]),
        helper.make_node(op, ins, ["y"]),
    ]
    x = _sample((3, 40000), np.float32, seed=8) * 20
    model = _model(nodes, [("x", [3, 40000])], inits)
    got = Session(model, fuse_ops=False).run({"x": x})["y"]
    assert calls == [op.lower() + "_into"]  # the dead input was reused
    want = stepped_values(model, {"x": x})["y"]
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_in_place_clip_leaves_bounds_of_another_type_to_the_kernel() -> None:
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("Clip", ["sq", "lo"], ["y"]),
    ]
    model = _model(nodes, [("x", [3, 40000]), ("lo", [1, 1, 1])], {})
    x = _sample((3, 40000), np.float32, seed=8)
    lo = np.full((1, 1, 1), 2.0, np.float32)  # more axes than x: the result grows one
    got = Session(model, fuse_ops=False).run({"x": x, "lo": lo})["y"]
    assert got.shape == (1, 3, 40000)
    np.testing.assert_array_equal(_bits(got), _bits(stepped_values(model, {"x": x, "lo": lo})["y"]))


def _conv_clip_model(bounds: str, opset: int = 13, bias: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(4)
    inits = {"w": (rng.standard_normal((16, 8, 3, 3)) * 0.5).astype(np.float32)}
    conv_ins = ["x", "w"]
    if bias:
        inits["b"] = rng.standard_normal(16).astype(np.float32)
        conv_ins.append("b")
    inputs = [("x", [1, 8, 20, 20])]
    attrs: dict[str, Any] = {}
    clip_ins = ["c"]
    if opset < 11:
        attrs = {"min": 0.0, "max": 6.0} if bounds == "both" else {"max": 1.0}
    elif bounds == "both":
        inits["lo"], inits["hi"] = np.array(0.0, np.float32), np.array(6.0, np.float32)
        clip_ins += ["lo", "hi"]
    elif bounds == "max_only":
        inits["hi"] = np.array(1.0, np.float32)
        clip_ins += ["", "hi"]
    elif bounds == "fed_min":
        inits["hi"] = np.array(6.0, np.float32)
        inputs.append(("lo", []))
        clip_ins += ["lo", "hi"]
    nodes = [
        helper.make_node("Conv", conv_ins, ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", clip_ins, ["y"], **attrs),
    ]
    return _model(nodes, inputs, inits, opset)


@pytest.mark.parametrize(
    "bounds, opset, bias",
    [("both", 13, True), ("max_only", 13, False), ("both", 6, True), ("max_only", 6, True)],
)
def test_conv_then_clip_runs_as_one_node(bounds: str, opset: int, bias: bool) -> None:
    model = _conv_clip_model(bounds, opset, bias)
    x = _sample((1, 8, 20, 20), np.float32, seed=2)
    x[np.isnan(x) | np.isinf(x)] = 1.0  # finite conv inputs: NaN bounds are tested above
    sess = Session(model)
    assert [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)] == [("Conv", "fused")]
    stepped = assert_modes_agree(model, {"x": x})
    got = sess.run({"x": x})["y"]
    lo = 0.0 if bounds == "both" else -np.inf
    hi = 6.0 if bounds == "both" else 1.0
    assert got.min() >= lo and got.max() <= hi and (got == hi).any()
    # The clip itself is the kernel's: applying it to the stepped conv output again
    # changes nothing, and values strictly inside the bounds are the conv's.
    inside = (stepped["c"] > lo) & (stepped["c"] < hi)
    np.testing.assert_allclose(got[inside], stepped["c"][inside], rtol=2e-5, atol=1e-4)


def test_clip_with_a_fed_bound_is_not_folded_into_the_conv() -> None:
    model = _conv_clip_model("fed_min")
    x = _sample((1, 8, 20, 20), np.float32, seed=3)
    x[~np.isfinite(x)] = 0.0
    sess = Session(model)
    kinds = [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)]
    assert kinds == [("Conv", "fused"), ("Clip", "kernel")]
    got = sess.run({"x": x, "lo": np.array(-0.5, np.float32)})["y"]
    assert got.min() >= -0.5 and (got == -0.5).any()


def test_conv_clip_with_a_bound_of_another_type_runs_the_nodes() -> None:
    """A float64 bound on a float32 conv: the chain runs the nodes, so the Clip kernel
    reports the type mismatch as the stepped run does (or clips the same)."""
    model = _conv_clip_model("both")
    for init in model.graph.initializer:
        if init.name == "hi":
            init.CopyFrom(numpy_helper.from_array(np.array(6.0), "hi"))
    x = np.ones((1, 8, 20, 20), np.float32)
    got = Session(model).run({"x": x})["y"]
    want = stepped_values(model, {"x": x})["y"]
    np.testing.assert_array_equal(got, want)


def test_clip_bound_with_more_axes_than_a_1d_conv_broadcasts_asstepped_values() -> None:
    """A (1, 1, 1, 1) bound after a 1-D conv: numpy broadcasting makes the Clip's result
    4-D; the fused chain must not clip in place and keep 3 axes."""
    rng = np.random.default_rng(13)
    inits = {
        "w": rng.standard_normal((4, 3, 3)).astype(np.float32),
        "hi": np.full((1, 1, 1, 1), 0.5, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1]),
        helper.make_node("Clip", ["c", "", "hi"], ["y"]),
    ]
    model = _model(nodes, [("x", [1, 3, 30])], inits)
    x = rng.standard_normal((1, 3, 30)).astype(np.float32)
    got = Session(model).run({"x": x})["y"]
    want = stepped_values(model, {"x": x})["y"]
    assert got.shape == want.shape == (1, 1, 4, 30)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("alpha", [0.1, 1.0, 1.5, -0.5])
def test_conv_then_leaky_relu_runs_as_one_node(alpha: float) -> None:
    rng = np.random.default_rng(12)
    inits = {"w": (rng.standard_normal((16, 8, 3, 3)) * 0.5).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c"], ["y"], alpha=alpha),
    ]
    model = _model(nodes, [("x", [2, 8, 20, 20])], inits)
    x = rng.standard_normal((2, 8, 20, 20)).astype(np.float32)
    sess = Session(model)
    assert [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)] == [("Conv", "fused")]
    stepped = assert_modes_agree(model, {"x": x})
    c, got = stepped["c"], sess.run({"x": x})["y"]
    # The activation applied to the conv's values: where the conv's sign is clear, the
    # fused result is c or alpha * c exactly as the kernel picks.
    want = np.where(c < 0, c * np.float32(alpha), c) if alpha <= 1 else np.minimum(c * alpha, c)
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=2e-5, atol=1e-4)
    assert (np.signbit(got) == np.signbit(stepped["y"]))[np.abs(c) > 1e-3].all()


# --- Sigmoid / SiLU and Relu in elementwise chains --------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_kernel_gives_the_reciprocal_formulas_bits(dtype) -> None:
    """1 / (1 + exp(-x)) with the division by the scalar 1: the bits of np.reciprocal;
    float32 with the compiled chain on: its Sigmoid step (vector_math.h's sigmoid, within
    3 ulp of the exact value: test_native_chain.py), the same limits."""
    from onnxviz.runtime.kernels import chain_program, math_activation

    x = _sample((3, 30000), dtype, seed=9) * 20  # past exp's overflow both ways
    with np.errstate(over="ignore"):
        want = np.reciprocal(np.exp(-x) + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning leaks out of the kernel
        got = sigmoid(x)
    if dtype == np.float32 and chain_program.CHAIN is not None:
        step = np.empty_like(x)
        chain_program.CHAIN.run(np.ascontiguousarray(x), step, math_activation._SIGMOID)
        np.testing.assert_array_equal(_bits(got), _bits(step))
        np.testing.assert_allclose(got, want.astype(dtype), rtol=4e-7, atol=1e-37)
    else:
        np.testing.assert_array_equal(_bits(got), _bits(want.astype(dtype)))
    assert got[x == -np.inf].tolist() == [0.0] and got[x == np.inf].tolist() == [1.0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_silu_unwatched_gives_the_stepped_bits(dtype) -> None:
    tp = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", tp, [3, 30000])],
        [helper.make_tensor_value_info("y", tp, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = _sample((3, 30000), dtype, seed=9) * 20
    got = Session(model).run({"x": x})["y"]
    want = stepped_values(model, {"x": x})["y"]
    np.testing.assert_array_equal(_bits_any_nan(got), _bits_any_nan(want))


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 4),
    cols=st.integers(1, 40000),
    scale=st.sampled_from([0.1, 1.0, 50.0]),
    seed=st.integers(0, 2**16),
)
def test_random_relu_chains_match_the_stepped_bits(rows, cols, scale, seed) -> None:
    """Mul by -1 (makes -0 of +0) -> Relu -> Sub x -> Relu -> Sigmoid as one chain: the
    stepped bits (signed zeros; NaN signs aside) in the fused run."""
    nodes = [
        helper.make_node("Mul", ["x", "k"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("Sub", ["r", "x"], ["d"]),
        helper.make_node("Relu", ["d"], ["e"]),
        helper.make_node("Sigmoid", ["e"], ["y"]),
    ]
    model = _model(nodes, [("x", [rows, cols])], {"k": np.array(-1.0, np.float32)})
    x = (_sample((rows, cols), np.float32, seed) * scale).astype(np.float32)
    sess = Session(model)
    got = sess.run({"x": x})["y"]
    assert [pn.kind for pn in run_nodes(sess.plan)] == ["fused"]
    want = stepped_values(model, {"x": x})
    np.testing.assert_array_equal(_bits_any_nan(got), _bits_any_nan(want["y"]))
    e = Session(model.__class__.FromString(_with_output(model, "e"))).run({"x": x})["e"]
    np.testing.assert_array_equal(_bits_any_nan(e), _bits_any_nan(want["e"]))


def _with_output(model: onnx.ModelProto, name: str) -> bytes:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return m.SerializeToString()


# --- the benchmark stacks against onnxruntime -------------------------------------------


@pytest.mark.parametrize("key", ["mnv2_clip", "yolo_leaky", "yolo_mish"])
def test_activation_benchmark_stacks_give_onnxruntimes_numbers(key: str) -> None:
    """benchmarks/bench_activations.py's stacks (Clip, LeakyRelu, Mish after convs): the
    fused unwatched run equals the stepped one and onnxruntime's."""
    import os
    import sys

    import onnxruntime as ort

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks"))
    import bench_activations

    model, feeds = bench_activations.MODELS[key][1]()
    stepped = assert_modes_agree(model, feeds)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    name = model.graph.output[0].name
    (theirs,) = sess.run([name], feeds)
    ours = Session(model).run(feeds)[name]
    scale = float(np.abs(theirs).max())
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_allclose(stepped[name], theirs, rtol=1e-4, atol=1e-5 * scale)


def test_relu_of_a_view_cut_along_its_last_axis_is_numpys_bits() -> None:
    """A causal conv's output cut by a Slice (a view whose last axis is contiguous) goes
    row by row against the constant's row: np.maximum's bits, NaN and -0 included."""
    buf = np.random.default_rng(5).standard_normal((4, 64, 260)).astype(np.float32)
    buf[0, 0, :6] = [np.nan, -0.0, 0.0, -np.inf, np.inf, -1e-45]
    for view in (buf[:, :, :256], buf[:, 3:40, 2:200], buf[:, ::2, :], buf[..., :63]):
        got = relu(view)
        want = np.maximum(view, np.float32(0))
        assert got.flags.c_contiguous and got.shape == view.shape
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
    out = np.empty((4, 64, 256), np.float32)  # Clip's bounds go the same way
    bounded_into(np.minimum, buf[:, :, :256], 0.5, out)
    np.testing.assert_array_equal(out, np.minimum(buf[:, :, :256], np.float32(0.5)))


@pytest.mark.parametrize(
    ("domain", "attrs", "dtype"),
    [
        ("", {}, np.float32),
        ("", {"approximate": "tanh"}, np.float32),
        ("", {}, np.float64),
        ("com.microsoft", {}, np.float32),
        ("com.microsoft", {}, np.float16),
    ],
)
@pytest.mark.parametrize("layout", ["c", "transposed", "gapped"])
def test_gelu_unwatched_held_call_gives_the_kernels_bits(domain, attrs, dtype, layout) -> None:
    """A Gelu node's unwatched call is the kernel's compiled pass held in C (float32, C
    order or one dense buffer in another axis order; the rest go to the kernel): every
    run gives the stepped run's bits, whatever the input's layout and dtype."""
    from onnxviz.runtime.kernels import chain_program
    from tests.runtime.differential import assert_stepped_bits

    base = _sample((6, 40), np.float32, seed=3) * 4
    x = {"c": base, "transposed": base.T, "gapped": base[:, ::2]}[layout].astype(dtype)
    tp = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["y"], domain=domain, **attrs)],
        "g",
        [helper.make_tensor_value_info("x", tp, list(x.shape))],
        [helper.make_tensor_value_info("y", tp, None)],
    )
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    session, got = assert_stepped_bits(model, {"x": x}, runs=3)
    (pn,) = run_nodes(session.plan)
    if chain_program.CHAIN is not None:
        assert type(pn.call).__name__ == "HeldChain"
    assert got["y"].dtype == dtype
