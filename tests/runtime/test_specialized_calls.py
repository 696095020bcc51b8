"""Specialized calls of unwatched runs (registry.specializer, prepared.py) give the stepped
run's numbers, bit for bit, and take the kernel for anything they were not made for.

A specialized call works out once, when the unwatched node list is made, what its
kernel works out on every call: MatMulNBits' route and dequantized weight, a norm's
parameter rows, Cast's target type, a reduction's axes.  Stepped runs always call the
kernels, so comparing the two runs proves the specialized calls; each test also checks
that the node really got its specialized call (a test of the kernel twice proves
nothing).
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import _weight_cache as wc
from onnxviz.runtime.kernels import contrib_quant, packed_gemm
from onnxviz.runtime.session import Session

from .differential import assert_modes_agree, assert_stepped_bits, stepped_values

pytestmark = pytest.mark.numeric

MS = "com.microsoft"
OPSETS = [helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)]


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[str],
    inits: list[onnx.TensorProto],
    opsets: list[onnx.OperatorSetIdProto] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info(o, 0, None) for o in outputs], inits
    )
    return helper.make_model(graph, opset_imports=opsets or OPSETS)


def _specialized(session: Session) -> dict[str, str]:
    """op type -> how the unwatched node list calls its nodes: "special" where the
    node's call comes from its kernel's specializer."""
    how: dict[str, str] = {}
    for pn in run_nodes(session.plan):
        call = pn.call if pn.call_many is None else pn.call_many
        # A held chain (native/_chain.c: a lone activation's) and a held Reshape
        # (native/_runloop.c) come only from a specializer; a held product
        # (native/_sgemm.c) made by one sits in front of its call.
        held_chain = type(call).__name__ in ("HeldChain", "Reshape")
        call = getattr(call, "fallback", call)
        qual = getattr(call, "__qualname__", "")
        special = held_chain or "specialize" in qual or "_prepared" in qual
        how[pn.op_type] = "special" if special else how.get(pn.op_type, "kernel")
    return how


# -- MatMulNBits ----------------------------------------------------------------------
def _nbits(rng: np.random.Generator, K: int, N: int, block: int) -> list[onnx.TensorProto]:
    kb = (K + block - 1) // block
    b = rng.integers(0, 256, (N, kb, block // 2), dtype=np.uint8)
    scales = (rng.standard_normal((N, kb)) * 0.05).astype(np.float32)
    zp = rng.integers(0, 256, (N, (kb * 4 + 7) // 8), dtype=np.uint8)
    bias = rng.standard_normal(N).astype(np.float32)
    return [
        numpy_helper.from_array(b, "b"),
        numpy_helper.from_array(scales, "s"),
        numpy_helper.from_array(zp, "z"),
        numpy_helper.from_array(bias, "bias"),
    ]


def _nbits_model(K: int, N: int, block: int, *, bias: bool, rng: np.random.Generator) -> Any:
    inits = _nbits(rng, K, N, block)
    ins = ["a", "b", "s", "z", "", "bias"] if bias else ["a", "b", "s", "z"]
    node = helper.make_node(
        "MatMulNBits", ins, ["y"], domain=MS, K=K, N=N, block_size=block, bits=4
    )
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [None, None, K])
    return _model([node], [a], ["y"], inits if bias else inits[:3])


@pytest.mark.parametrize("rows", [1, 3, 7, 8, 30])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("native_min", [None, 0])
def test_matmul_nbits_gives_the_stepped_bits(
    monkeypatch, rows: int, bias: bool, native_min: int | None
) -> None:
    """Every route: the compiled kernel (a weight past NATIVE_MIN_WEIGHTS, up to its row
    limit), BLAS on the kept weight (few rows), the kernel (a prompt's rows)."""
    if native_min is not None:
        monkeypatch.setattr(contrib_quant, "NATIVE_MIN_WEIGHTS", native_min)
    rng = np.random.default_rng(rows)
    model = _nbits_model(96, 40, 32, bias=bias, rng=rng)
    a = rng.standard_normal((1, rows, 96)).astype(np.float32)
    session, _ = assert_stepped_bits(model, {"a": a}, runs=3)
    assert _specialized(session)["MatMulNBits"] == "special"
    wc.clear()


def test_matmul_nbits_takes_a_fed_weight(monkeypatch) -> None:
    """An initializer that is also a graph input, fed: the run multiplies by the fed
    weight, not by the one the specialized call was made for."""
    rng = np.random.default_rng(5)
    model = _nbits_model(64, 24, 16, bias=False, rng=rng)
    b = numpy_helper.to_array(model.graph.initializer[0])
    model.graph.input.append(helper.make_tensor_value_info("b", TensorProto.UINT8, b.shape))
    a = rng.standard_normal((1, 2, 64)).astype(np.float32)
    session = Session(model)
    before = session.run({"a": a})["y"]
    other = rng.integers(0, 256, b.shape, dtype=np.uint8)
    after = session.run({"a": a, "b": other})["y"]
    want = stepped_values(model, {"a": a, "b": other})["y"]
    np.testing.assert_array_equal(after, want)
    assert not np.array_equal(after, before)
    assert _specialized(session)["MatMulNBits"] == "special"
    wc.clear()


def test_matmul_nbits_takes_other_dtypes_through_the_kernel() -> None:
    rng = np.random.default_rng(6)
    model = _nbits_model(32, 16, 16, bias=True, rng=rng)
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    a = rng.standard_normal((3, 32))
    assert_stepped_bits(model, {"a": a})
    wc.clear()


# -- norms ------------------------------------------------------------------------------
def _norm_case(op: str, rng: np.random.Generator, cols: int, outputs: list[str]) -> Any:
    gamma = numpy_helper.from_array(rng.standard_normal(cols).astype(np.float32), "gamma")
    beta = numpy_helper.from_array(rng.standard_normal(cols).astype(np.float32), "beta")
    bias = numpy_helper.from_array(rng.standard_normal(cols).astype(np.float32), "bias")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    skip = helper.make_tensor_value_info("skip", TensorProto.FLOAT, None)
    if op == "LayerNormalization":
        node = helper.make_node(op, ["x", "gamma", "beta"], outputs, epsilon=1e-3)
        return _model([node], [x], [o for o in outputs if o], [gamma, beta])
    if op == "SimplifiedLayerNormalization":
        node = helper.make_node(op, ["x", "gamma"], outputs, epsilon=1e-4)
        return _model([node], [x], [o for o in outputs if o], [gamma])
    if op == "SkipLayerNormalization":
        node = helper.make_node(
            op, ["x", "skip", "gamma", "beta", "bias"], outputs, domain=MS, epsilon=1e-5
        )
        return _model([node], [x, skip], [o for o in outputs if o], [gamma, beta, bias])
    node = helper.make_node(op, ["x", "skip", "gamma", "bias"], outputs, domain=MS)
    return _model([node], [x, skip], [o for o in outputs if o], [gamma, bias])


@pytest.mark.parametrize(
    ("op", "outputs"),
    [
        ("LayerNormalization", ["y"]),
        ("LayerNormalization", ["y", "mean", "inv"]),
        ("SimplifiedLayerNormalization", ["y"]),
        ("SimplifiedLayerNormalization", ["y", "inv"]),
        ("SkipLayerNormalization", ["y", "", "", "sum"]),
        ("SkipLayerNormalization", ["y", "mean", "inv", "sum"]),
        ("SkipSimplifiedLayerNormalization", ["y", "", "", "sum"]),
        ("SkipSimplifiedLayerNormalization", ["y"]),
    ],
)
@pytest.mark.parametrize("shape", [(1, 4, 64), (3, 17), (2, 3, 5, 8)])
def test_norms_give_the_stepped_bits(op: str, outputs: list[str], shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape) * 7 + len(outputs))
    model = _norm_case(op, rng, shape[-1], outputs)
    feeds = {"x": (rng.standard_normal(shape) * 3 + 1).astype(np.float32)}
    if "Skip" in op:
        feeds["skip"] = rng.standard_normal(shape).astype(np.float32)
    session, _ = assert_stepped_bits(model, feeds)
    assert _specialized(session)[op] == ("special" if native.load("norm") else "kernel")


def test_norms_take_the_kernel_for_what_they_were_not_made_for() -> None:
    """A skip that broadcasts, a non-contiguous x, float64 and a fed gamma: the kernel
    (and its numbers)."""
    rng = np.random.default_rng(8)
    model = _norm_case("SkipSimplifiedLayerNormalization", rng, 8, ["y", "", "", "sum"])
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    assert_stepped_bits(model, {"x": x, "skip": rng.standard_normal((3, 8)).astype(np.float32)})
    wide = rng.standard_normal((2, 3, 16)).astype(np.float32)[:, :, ::2]
    assert_stepped_bits(model, {"x": wide, "skip": rng.standard_normal((2, 3, 8), np.float32)})
    model = _norm_case("LayerNormalization", rng, 8, ["y"])
    model.graph.input.append(helper.make_tensor_value_info("gamma", TensorProto.FLOAT, [8]))
    fed = rng.standard_normal(8).astype(np.float32)
    session, got = assert_stepped_bits(model, {"x": x, "gamma": fed})
    plain = Session(model).run({"x": x})["y"]
    assert not np.array_equal(got["y"], plain)


def test_a_norm_over_two_axes_is_not_specialized() -> None:
    rng = np.random.default_rng(9)
    gamma = numpy_helper.from_array(rng.standard_normal((3, 8)).astype(np.float32), "gamma")
    node = helper.make_node("LayerNormalization", ["x", "gamma"], ["y"], axis=-2)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    model = _model([node], [x], ["y"], [gamma])
    session, _ = assert_stepped_bits(model, {"x": rng.standard_normal((2, 3, 8), np.float32)})
    assert _specialized(session)["LayerNormalization"] == "kernel"


# -- Sigmoid, Cast and reductions: random graphs -----------------------------------------
_DTYPES = {
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16,
    TensorProto.INT32: np.int32,
    TensorProto.INT64: np.int64,
    TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8,
    TensorProto.BOOL: np.bool_,
}
_REDUCERS = ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean"]


@st.composite
def small_op_graphs(draw: Any) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A chain of Sigmoid, Tanh, Relu, Cast (to any plain type) and reductions (axes as an
    initializer, a Constant node, an attribute at opset 13, or none), on a random shape
    and dtype with NaNs, infinities and big values in it."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    elem = draw(st.sampled_from([TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64]))
    values = rng.standard_normal(shape) * draw(st.sampled_from([1.0, 40.0, 1e5]))
    if elem == TensorProto.INT64:
        feed = np.asarray(np.round(values)).astype(np.int64)
    else:
        feed = np.asarray(values).astype(_DTYPES[elem])
        if feed.size > 1 and draw(st.booleans()):
            feed.reshape(-1)[0] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    old = draw(st.booleans())  # opset 13: reduction axes as an attribute (but ReduceSum)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    cur, rank, dtype = "x", len(shape), elem
    for i in range(draw(st.integers(1, 5))):
        out = f"v{i}"
        kind = draw(st.sampled_from(["Sigmoid", "Tanh", "Relu", "Cast", "Reduce"]))
        if kind in ("Sigmoid", "Tanh", "Relu") and dtype in (TensorProto.FLOAT, TensorProto.DOUBLE):
            nodes.append(helper.make_node(kind, [cur], [out]))
        elif kind in ("Cast", "Sigmoid", "Tanh", "Relu"):
            to = draw(st.sampled_from(list(_DTYPES)))
            nodes.append(helper.make_node("Cast", [cur], [out], to=to))
            dtype = to
        else:
            if dtype not in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32,
                             TensorProto.INT64):  # fmt: skip
                to = draw(st.sampled_from([TensorProto.FLOAT, TensorProto.INT32]))
                nodes.append(helper.make_node("Cast", [cur], [f"c{i}"], to=to))
                cur, dtype = f"c{i}", to
            op = draw(st.sampled_from(_REDUCERS))
            keep = draw(st.integers(0, 1))
            axes: list[int] = []
            if rank:
                axes = draw(
                    st.lists(
                        st.integers(-rank, rank - 1),
                        max_size=rank,
                        unique_by=lambda a, r=rank: a % r,
                    )
                )
            how = draw(st.sampled_from(["init", "constant", "none"]))
            if old and op != "ReduceSum":
                attrs = {"axes": axes} if axes else {}
                nodes.append(helper.make_node(op, [cur], [out], keepdims=keep, **attrs))
            elif how == "none" or not axes:
                nodes.append(helper.make_node(op, [cur], [out], keepdims=keep))
                axes = []  # no axes: every axis
            elif how == "init":
                inits.append(numpy_helper.from_array(np.array(axes, np.int64), f"a{i}"))
                nodes.append(helper.make_node(op, [cur, f"a{i}"], [out], keepdims=keep))
            else:
                value = numpy_helper.from_array(np.array(axes, np.int64))
                nodes.append(helper.make_node("Constant", [], [f"a{i}"], value=value))
                nodes.append(helper.make_node(op, [cur, f"a{i}"], [out], keepdims=keep))
            if not keep:
                rank -= len(axes) if axes else rank
        cur = out
    x = helper.make_tensor_value_info("x", elem, shape)
    opsets = [helper.make_opsetid("", 13 if old else 18)]
    return _model(nodes, [x], [cur], inits, opsets), {"x": feed}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_op_graphs())
def test_random_small_op_graphs_give_the_stepped_bits(case: Any) -> None:
    model, feeds = case
    assert_stepped_bits(model, feeds)


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh", "Cast", "ReduceSum"])
def test_the_small_ops_get_their_specialized_calls(op: str) -> None:
    if op in ("Sigmoid", "Tanh"):
        node = helper.make_node(op, ["x"], ["y"])
    elif op == "Cast":
        node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32)
    else:
        node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    model = _model([node], [x], ["y"], [axes] if op == "ReduceSum" else [])
    session, _ = assert_stepped_bits(model, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    from onnxviz.runtime.kernels import chain_program

    # (Tanh's call is the compiled chain's step: with the kernels off, the kernel runs)
    want = "special" if op != "Tanh" or chain_program.CHAIN is not None else "kernel"
    assert _specialized(session)[op] == want


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_an_elementwise_chain_of_a_scalar_keeps_its_shape(dtype: int) -> None:
    """Sigmoid -> Tanh of a 0-d input (one fused elementwise chain in unwatched runs)
    gives a 0-d result, as its nodes do (the chain's contiguous copy had given it an
    axis: shape (1,))."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Tanh", ["s"], ["y"])]
    x = helper.make_tensor_value_info("x", dtype, [])
    model = _model(nodes, [x], ["y"], [])
    session, got = assert_stepped_bits(model, {"x": np.array(0.125, dtype=_DTYPES[dtype])})
    assert got["y"].shape == ()
    assert [type(pn.fused).__name__ for pn in run_nodes(session.plan)] == ["ElementwiseChain"]


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh"])
def test_a_held_activation_takes_float32_arrays_and_leaves_the_rest_to_its_kernel(
    op: str,
) -> None:
    """chain_program.held_unary (a lone Tanh's or Sigmoid's call in unwatched runs): a
    float32 array of at least one axis in C, C-contiguous or one dense buffer in another
    axis order (a transpose, a channels-last image), with the kernel's bits (NaN and
    infinities included); a float64 array, one with gaps, a 0-d one, or another call,
    goes to the fallback it was made with."""
    from onnxviz.runtime.kernels import chain_program
    from onnxviz.runtime.registry import resolve

    if chain_program.CHAIN is None:
        pytest.skip("the compiled chain is off here (ONNXVIZ_NATIVE=off): the kernel runs")
    kernel = resolve("", op, 13).fn  # type: ignore[union-attr]
    asked: list[Any] = []

    def fallback(x: Any) -> Any:
        asked.append(x)
        return kernel(x)

    held = chain_program.held_unary(op, fallback)
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((4, 129)) * 6).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    got = held(x)
    assert not asked and got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_array_equal(got, kernel(x))
    np.testing.assert_array_equal(held(x.T), kernel(x.T))  # dense, transposed: in C
    assert not asked
    for other in (x.astype(np.float64), x[:, ::2], np.float32(0.5).reshape(())):
        np.testing.assert_array_equal(held(other), kernel(other))
    assert len(asked) == 3


def test_reduction_axes_computed_at_run_time_are_read_each_run() -> None:
    """Axes from a graph input (writeable, may change between runs) are normalised on
    every call: a second run with other axes reduces over those."""
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    axes = helper.make_tensor_value_info("axes", TensorProto.INT64, [1])
    model = _model([node], [x, axes], ["y"], [])
    session = Session(model)
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    ax = np.array([0], np.int64)
    np.testing.assert_array_equal(session.run({"x": data, "axes": ax})["y"], [[3, 5, 7]])
    ax[0] = 1  # the same array object, other contents
    np.testing.assert_array_equal(session.run({"x": data, "axes": ax})["y"], [[3], [12]])


# -- views by constants: Slice, Reshape, Squeeze, Unsqueeze, Transpose ---------------------
@st.composite
def view_graphs(draw: Any) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A chain of Slice (any steps, negative and out-of-range bounds), Reshape (0 and -1
    entries), Squeeze, Unsqueeze and Transpose, their constants as initializers or
    Constant nodes, ending in a Mul (so the views are read)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    shape = list(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    feed = rng.standard_normal(shape).astype(np.float32)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    cur = "x"

    def const(name: str, values: list[int]) -> None:
        value = np.array(values, np.int64)
        if draw(st.booleans()):
            inits.append(numpy_helper.from_array(value, name))
        else:
            tensor = numpy_helper.from_array(value)
            nodes.append(helper.make_node("Constant", [], [name], value=tensor))

    for i in range(draw(st.integers(1, 5))):
        out, rank = f"v{i}", len(shape)
        op = draw(
            st.sampled_from(
                ["Slice", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Gather", "Split"]
            )
        )
        if op == "Gather" and 0 not in shape:
            # one index, constant: a scalar drops the axis (not the last one left), a
            # one-element list keeps it; negative indices count from the end
            axis = draw(st.integers(-rank, rank - 1))
            dim = shape[axis]
            at = draw(st.integers(-dim, dim - 1))
            scalar = rank > 1 and draw(st.booleans())
            value = np.array(at if scalar else [at], np.int64)
            if draw(st.booleans()):
                inits.append(numpy_helper.from_array(value, f"g{i}"))
            else:
                nodes.append(
                    helper.make_node(
                        "Constant", [], [f"g{i}"], value=numpy_helper.from_array(value)
                    )
                )
            nodes.append(helper.make_node("Gather", [cur, f"g{i}"], [out], axis=axis))
            if scalar:
                del shape[axis]
            else:
                shape[axis] = 1
        elif op == "Split" and shape[-1] >= 2:
            # two parts of the last axis or another (small parts of a later axis are
            # copied contiguous in unwatched runs); the chain goes on with either
            axis = draw(st.integers(0, rank - 1)) if draw(st.booleans()) else rank - 1
            if shape[axis] < 2:
                axis = rank - 1
            first = draw(st.integers(1, shape[axis] - 1))
            const(f"p{i}", [first, shape[axis] - first])
            keep = draw(st.integers(0, 1))
            names = [out, f"o{i}"] if keep == 0 else [f"o{i}", out]
            nodes.append(helper.make_node("Split", [cur, f"p{i}"], names, axis=axis))
            shape[axis] = first if keep == 0 else shape[axis] - first
        elif op in ("Gather", "Split"):
            nodes.append(helper.make_node("Identity", [cur], [out]))
        elif op == "Slice":
            axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
            starts = [draw(st.integers(-7, 7)) for _ in axes]
            ends = [draw(st.sampled_from([-9, -1, 0, 2, 5, 2**62])) for _ in axes]
            steps = [draw(st.sampled_from([1, 2, -1, -2])) for _ in axes]
            for name, values in (("s", starts), ("e", ends), ("a", axes), ("t", steps)):
                const(f"{name}{i}", values)
            nodes.append(
                helper.make_node("Slice", [cur, f"s{i}", f"e{i}", f"a{i}", f"t{i}"], [out])
            )
            index: list[Any] = [slice(None)] * rank
            for a, s0, e0, t0 in zip(axes, starts, ends, steps):
                index[a] = slice(*_python_bounds(s0, e0, t0, shape[a]))
            shape = list(np.empty(shape)[tuple(index)].shape)
        elif op == "Reshape" and 0 in shape:  # (-1 cannot be inferred from 0 elements)
            nodes.append(helper.make_node("Identity", [cur], [out]))
        elif op == "Reshape":
            size = int(np.prod(shape))
            target = [size] if draw(st.booleans()) else [-1]
            if rank > 1 and draw(st.booleans()):
                target = [0, -1]  # keep the first dimension
            const(f"r{i}", target)
            nodes.append(helper.make_node("Reshape", [cur, f"r{i}"], [out]))
            shape = [size] if target != [0, -1] else [shape[0], size // shape[0]]
        elif op == "Squeeze":
            ones = [a for a, d in enumerate(shape) if d == 1]
            if not ones or rank == 1:
                nodes.append(helper.make_node("Identity", [cur], [out]))
            else:
                # (at least one axis stays: the later ops of the chain take rank >= 1)
                axes = draw(
                    st.lists(st.sampled_from(ones), min_size=1, max_size=rank - 1, unique=True)
                )
                const(f"q{i}", [a - rank if draw(st.booleans()) else a for a in axes])
                nodes.append(helper.make_node("Squeeze", [cur, f"q{i}"], [out]))
                shape = [d for a, d in enumerate(shape) if a not in axes]
        elif op == "Unsqueeze":
            axis = draw(st.integers(-rank - 1, rank))
            const(f"u{i}", [axis])
            nodes.append(helper.make_node("Unsqueeze", [cur, f"u{i}"], [out]))
            shape.insert(axis % (rank + 1), 1)
        else:
            perm = draw(st.permutations(list(range(rank))))
            nodes.append(helper.make_node("Transpose", [cur], [out], perm=list(perm)))
            shape = [shape[p] for p in perm]
        cur = out
    nodes.append(helper.make_node("Mul", [cur, cur], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, feed.shape)
    model = _model(nodes, [x], ["y"], inits, [helper.make_opsetid("", 18)])
    return model, {"x": feed}


def _python_bounds(start: int, end: int, step: int, dim: int) -> tuple[Any, Any, int]:
    """ONNX Slice's clamping, for the test's own shape bookkeeping."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim), step
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    return start, None if end < 0 else end, step


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(view_graphs())
def test_random_view_chains_give_the_stepped_bits(case: Any) -> None:
    model, feeds = case
    assert_stepped_bits(model, feeds, runs=3)


@pytest.mark.parametrize("op", ["Slice", "Reshape", "Squeeze", "Unsqueeze"])
def test_a_fed_constant_takes_the_kernel(op: str) -> None:
    """The view ops' constants as initializers that are also graph inputs: a feed of
    other values gives those values' view, each run."""
    x = np.arange(24, dtype=np.float32).reshape(2, 1, 12)
    consts = {
        "Slice": ("c", np.array([1], np.int64), np.array([3], np.int64)),
        "Reshape": ("c", np.array([2, 12], np.int64), np.array([24], np.int64)),
        "Squeeze": ("c", np.array([1], np.int64), np.array([-2], np.int64)),
        "Unsqueeze": ("c", np.array([0], np.int64), np.array([3], np.int64)),
    }
    name, value, other = consts[op]
    if op == "Slice":
        ends = numpy_helper.from_array(np.array([100], np.int64), "e")
        axes = numpy_helper.from_array(np.array([2], np.int64), "a")
        node = helper.make_node("Slice", ["x", "c", "e", "a"], ["y"])
        inits = [numpy_helper.from_array(value, "c"), ends, axes]
    else:
        node = helper.make_node(op, ["x", "c"], ["y"])
        inits = [numpy_helper.from_array(value, "c")]
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)
    ci = helper.make_tensor_value_info(name, TensorProto.INT64, value.shape)
    model = _model([node], [xi, ci], ["y"], inits, [helper.make_opsetid("", 18)])
    session = Session(model)
    for feeds in ({"x": x}, {"x": x, "c": other}, {"x": x}):
        got = session.run(feeds)["y"]
        want = stepped_values(model, feeds)["y"]
        np.testing.assert_array_equal(got, want)
        assert got.shape == want.shape
    assert _specialized(session)[op] == "special"


def test_gather_of_one_constant_index_is_a_view_and_refuses_what_the_kernel_refuses() -> None:
    """Gather by a constant index of one element (an unrolled loop's x[t]): its
    specialized call gives the stepped values as a view of the data; an index out of
    range raises the kernel's error in both runs."""
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    for index, axis in ((np.array(-1, np.int64), 1), (np.array([2], np.int32), 2)):
        inits = [numpy_helper.from_array(index, "i")]
        node = helper.make_node("Gather", ["x", "i"], ["g"], axis=axis)
        model = _model([node, helper.make_node("Neg", ["g"], ["y"])], [xi], ["y"], inits)
        session, got = assert_stepped_bits(model, {"x": x})
        assert _specialized(session)["Gather"] == "special"
        want = np.take(x, index, axis=axis)
        np.testing.assert_array_equal(got["y"], -want)
    inits = [numpy_helper.from_array(np.array(4, np.int64), "i")]
    model = _model([helper.make_node("Gather", ["x", "i"], ["y"], axis=2)], [xi], ["y"], inits)
    session = Session(model)
    assert _specialized(session)["Gather"] == "special"
    with pytest.raises(Exception, match="Gather"):
        session.run({"x": x})
    with pytest.raises(Exception, match="Gather"):
        stepped_values(model, {"x": x})


def test_small_split_parts_of_a_later_axis_are_contiguous_copies() -> None:
    """An LSTM cell's gates: a [4, 512] product split in four along axis 1.  Unwatched,
    each part is a C-contiguous copy (every reader takes the compiled paths), the
    stepped run's values; a part of a big array stays a view."""
    for rows, copies in ((4, True), (64, False)):  # 64 x 512: past the copy bound
        x = np.random.default_rng(rows).standard_normal((rows, 512)).astype(np.float32)
        xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
        outs = ["a", "b", "c", "d"]
        node = helper.make_node("Split", ["x"], outs, axis=1, num_outputs=4)
        model = _model([node], [xi], outs, [], [helper.make_opsetid("", 18)])
        session, got = assert_stepped_bits(model, {"x": x})
        assert _specialized(session)["Split"] == "special"
        for k, name in enumerate(outs):
            np.testing.assert_array_equal(got[name], x[:, 128 * k : 128 * (k + 1)])
            assert got[name].flags.c_contiguous == copies
            assert np.shares_memory(got[name], x) != copies


@pytest.mark.parametrize(
    ("shape", "axis", "sizes"),
    [((4, 512), 1, [100, 412]), ((2, 6, 3, 5), 1, [1, 0, 5]), ((3, 4, 10), 2, [5, 5]),
     ((2, 3, 4), 0, [1, 1])],
)  # fmt: skip
def test_small_splits_of_any_lengths_give_the_stepped_parts(
    shape: tuple[int, ...], axis: int, sizes: list[int]
) -> None:
    """Parts of unequal and zero lengths, along a middle or the first axis, of float32
    and int64 values: the stepped run's parts, contiguous."""
    for dtype, elem in ((np.float32, TensorProto.FLOAT), (np.int64, TensorProto.INT64)):
        x = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
        if axis == 0:
            x = x[: sum(sizes)]
        outs = [f"p{k}" for k in range(len(sizes))]
        split = numpy_helper.from_array(np.array(sizes, np.int64), "sizes")
        node = helper.make_node("Split", ["x", "sizes"], outs, axis=axis)
        xi = helper.make_tensor_value_info("x", elem, None)
        model = _model([node], [xi], outs, [split], [helper.make_opsetid("", 18)])
        session, got = assert_stepped_bits(model, {"x": x})
        assert _specialized(session)["Split"] == "special"
        assert all(got[o].flags.c_contiguous for o in outs)


# -- recurrent layers ---------------------------------------------------------------------
def _recurrent_model(
    op: str, direction: str, bias: bool, states: bool, outputs: list[str], rng: Any
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    gates = 4 if op == "LSTM" else 3
    dirs, hidden, n_in, steps, batch = (2 if direction == "bidirectional" else 1), 9, 5, 4, 3
    inits = [
        numpy_helper.from_array(rng.standard_normal((dirs, gates * hidden, n_in), np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((dirs, gates * hidden, hidden), np.float32), "R"),
    ]  # fmt: skip
    ins = ["x", "W", "R", "B" if bias else ""]
    if bias:
        b = rng.standard_normal((dirs, 2 * gates * hidden), np.float32)
        inits.append(numpy_helper.from_array(b, "B"))
    feeds = {"x": rng.standard_normal((steps, batch, n_in), np.float32)}
    graph_ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, feeds["x"].shape)]
    if states:
        ins += ["", "h0"] + (["c0"] if op == "LSTM" else [])
        for name in ins[5:]:
            feeds[name] = rng.standard_normal((dirs, batch, hidden), np.float32)
            graph_ins.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    attrs: dict[str, Any] = {"hidden_size": hidden, "direction": direction}
    if op == "GRU":
        attrs["linear_before_reset"] = int(bias)
    node = helper.make_node(op, ins, outputs, **attrs)
    model = _model([node], graph_ins, [o for o in outputs if o], inits)
    return model, feeds


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize(("bias", "states"), [(False, False), (True, True), (True, False)])
@pytest.mark.parametrize("outputs", [["y"], ["y", "yh"], ["", "yh"], ["y", "yh", "yc"]])
@pytest.mark.parametrize("one_thread", [True, False])
def test_recurrent_layers_give_the_stepped_bits(
    op: str, direction: str, bias: bool, states: bool, outputs: list[str], one_thread: bool
) -> None:
    """(With one BLAS thread the input projections of 2 rows or more run the packed
    GEMM, nn_rnn._project.)"""
    if op == "GRU" and len(outputs) > 2:
        outputs = outputs[:2]
    rng = np.random.default_rng(len(direction) + 3 * bias + 5 * states + len(outputs))
    model, feeds = _recurrent_model(op, direction, bias, states, outputs, rng)
    with threadpool_limits(1) if one_thread else contextlib.nullcontext():
        session, _ = assert_stepped_bits(model, feeds)
    compiled = native.load("recurrent") is not None
    assert _specialized(session)[op] == ("special" if compiled else "kernel")


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_recurrent_layers_take_the_kernel_for_a_fed_weight_and_padding(op: str) -> None:
    rng = np.random.default_rng(11)
    model, feeds = _recurrent_model(op, "forward", True, False, ["y", "yh"], rng)
    r = numpy_helper.to_array(model.graph.initializer[1])
    model.graph.input.append(helper.make_tensor_value_info("R", TensorProto.FLOAT, r.shape))
    session = Session(model)
    for extra in ({}, {"R": rng.standard_normal(r.shape, np.float32)}, {}):
        got = session.run({**feeds, **extra})
        want = stepped_values(model, {**feeds, **extra})
        for name in ("y", "yh"):
            np.testing.assert_array_equal(got[name], want[name])
    # sequence_lens from the caller: the kernel's padded loops
    node = model.graph.node[0]
    while len(node.input) < 5:
        node.input.append("")
    node.input[4] = "lens"
    model.graph.input.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [3]))
    lens = {"lens": np.array([4, 2, 1], np.int32)}
    assert_stepped_bits(model, {**feeds, **lens})


# -- products by a constant matrix ---------------------------------------------------------
@pytest.mark.parametrize("rows", [1, 3, 8, 37, 130])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("one_thread", [True, False])
def test_products_by_a_constant_give_the_stepped_bits(
    rows: int, with_bias: bool, one_thread: bool
) -> None:
    """MatMul by an initializer (its specialized call) and MatMul + Add of a constant row
    (the fused GEMM onto the bias, its packed weight kept by the node) give the stepped
    run's bits, run after run; a fed weight or bias (an initializer that is also a graph
    input) is the one multiplied by.  With one BLAS thread the products of 8 rows or
    more run the packed GEMM (packed_gemm.use_for), else OpenBLAS."""
    with threadpool_limits(1) if one_thread else contextlib.nullcontext():
        _products(rows, with_bias)


def _products(rows: int, with_bias: bool) -> None:
    rng = np.random.default_rng(rows)
    w = rng.standard_normal((64, 48)).astype(np.float32)
    bias = rng.standard_normal(48).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y" if not with_bias else "p"])]
    inits = [numpy_helper.from_array(w, "w")]
    if with_bias:
        nodes.append(helper.make_node("Add", ["p", "b"], ["y"]))
        inits.append(numpy_helper.from_array(bias, "b"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    model = _model(nodes, [x], ["y"], inits, [helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((2, rows, 64)).astype(np.float32)}
    session, _ = assert_stepped_bits(model, feeds, runs=3)
    if not with_bias:  # (the packed GEMM is compiled: off, MatMul keeps its kernel)
        packed = packed_gemm.module() is not None
        assert _specialized(session)["MatMul"] == ("special" if packed else "kernel")
    # The constants as graph inputs too: fed, the run takes the fed ones.
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [64, 48]))
    if with_bias:
        model.graph.input.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [48]))
    session = Session(model)
    other = {"w": rng.standard_normal((64, 48)).astype(np.float32)}
    if with_bias:
        other["b"] = rng.standard_normal(48).astype(np.float32)
    for extra in ({}, other, {}, other):
        got = session.run({**feeds, **extra})["y"]
        want = stepped_values(model, {**feeds, **extra})["y"]
        np.testing.assert_array_equal(got, want)


def test_a_node_its_maker_cannot_read_runs_the_kernel_and_its_error() -> None:
    """A MatMulNBits without its K attribute: the maker cannot make a call (it reads
    K), so the node keeps its kernel, and the run fails with the kernel's error naming
    the node, not an internal error of the node list."""
    rng = np.random.default_rng(12)
    model = _nbits_model(32, 16, 16, bias=False, rng=rng)
    del model.graph.node[0].attribute[:]
    model.graph.node[0].attribute.extend([helper.make_attribute("N", 16)])
    session = Session(model)
    with pytest.raises(Exception) as failed:
        session.run({"a": rng.standard_normal((1, 2, 32)).astype(np.float32)})
    assert "MatMulNBits" in str(failed.value) and "interpreter failed" not in str(failed.value)


# -- DynamicQuantizeLinear and a nearest Resize by constant scales ----------------------
def _dynamic_quantize_model() -> onnx.ModelProto:
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    return _model([node], [x], ["q", "s", "z"], [])


@pytest.mark.parametrize(
    "x",
    [
        np.random.default_rng(1).standard_normal((3, 40)).astype(np.float32),
        np.random.default_rng(2).uniform(0.5, 3.0, (2, 3, 5)).astype(np.float32),  # all > 0
        -np.random.default_rng(3).uniform(0.5, 3.0, (7,)).astype(np.float32),  # all < 0
        np.zeros((4, 4), np.float32),  # the pass declines: the kernel's scale 1
        np.array([1.0, np.nan, -2.0], np.float32),  # a NaN: the kernel's steps
        np.random.default_rng(4).standard_normal((6, 8)).astype(np.float32)[:, ::2],  # strided
        np.random.default_rng(5).standard_normal((2, 3)).astype(np.float64),  # the kernel's cast
        np.array(2.5, np.float32),  # one value
    ],
    ids=["normal", "positive", "negative", "zeros", "nan", "strided", "float64", "scalar"],
)
def test_dynamic_quantize_gives_the_stepped_bits(x: np.ndarray) -> None:
    model = _dynamic_quantize_model()
    if x.dtype != np.float32:  # an input of another type: the model says float64
        model.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    session, got = assert_stepped_bits(model, {"x": x})
    assert _specialized(session)["DynamicQuantizeLinear"] == "special"
    assert got["q"].dtype == np.uint8 and got["s"].shape == () and got["z"].shape == ()


def _resize_model(roi: bool, scales: list[float], **attrs: Any) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(scales, np.float32), "scales")]
    if roi:
        inits.append(numpy_helper.from_array(np.zeros(0, np.float32), "roi"))
    node = helper.make_node(
        "Resize", ["x", "roi" if roi else "", "scales"], ["y"], mode="nearest", **attrs
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    return _model([node], [x], ["y"], inits)


@pytest.mark.parametrize(
    "roi, scales, attrs",
    [
        (False, [1.0, 1.0, 2.0, 2.0], {}),  # a UNet's 2x upsampling (the compiled copy)
        (True, [1.0, 1.0, 3.0, 2.0], {"coordinate_transformation_mode": "asymmetric"}),
        (False, [1.0, 2.0, 1.0, 1.0], {}),  # repeats of a leading axis (numpy's copies)
        (False, [1.0, 1.0, 1.5, 2.0], {}),  # not whole repeats: the general steps
        (True, [1.0, 1.0, 2.0, 2.0], {"nearest_mode": "ceil"}),
    ],
)
def test_a_nearest_resize_by_constant_scales_gives_the_stepped_bits(
    roi: bool, scales: list[float], attrs: dict[str, Any]
) -> None:
    model = _resize_model(roi, scales, **attrs)
    rng = np.random.default_rng(6)
    for shape in [(1, 3, 4, 5), (2, 2, 3, 3)]:  # the shape may change between runs
        session, _ = assert_stepped_bits(
            model, {"x": rng.standard_normal(shape).astype(np.float32)}
        )
        assert _specialized(session)["Resize"] == "special"
    ints = {"x": rng.integers(-5, 5, (1, 2, 3, 3)).astype(np.int32)}
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32
    assert_stepped_bits(model, ints)


def test_a_linear_resize_or_one_by_sizes_keeps_the_kernel() -> None:
    linear = _resize_model(False, [1.0, 1.0, 2.0, 2.0])
    linear.graph.node[0].attribute[0].s = b"linear"
    feeds = {"x": np.random.default_rng(7).standard_normal((1, 2, 3, 3)).astype(np.float32)}
    session, _ = assert_stepped_bits(linear, feeds)
    assert _specialized(session)["Resize"] == "kernel"
    sized = _resize_model(True, [])
    sized.graph.node[0].input[2] = ""
    sized.graph.node[0].input.append("sizes")
    sized.graph.initializer.append(
        numpy_helper.from_array(np.array([1, 2, 6, 6], np.int64), "sizes")
    )
    session, _ = assert_stepped_bits(sized, feeds)
    assert _specialized(session)["Resize"] == "kernel"


def test_a_fed_scale_takes_the_resize_kernel() -> None:
    """The scales initializer overridden by a feed: another object than the one the call
    was made for, so the kernel runs with the fed scales."""
    model = _resize_model(False, [1.0, 1.0, 2.0, 2.0])
    model.graph.input.append(helper.make_tensor_value_info("scales", TensorProto.FLOAT, [4]))
    x = np.random.default_rng(8).standard_normal((1, 2, 3, 3)).astype(np.float32)
    session = Session(model)
    other = np.array([1.0, 1.0, 3.0, 1.0], np.float32)
    for feeds in ({"x": x}, {"x": x, "scales": other}, {"x": x}):
        got = session.run(feeds)["y"]
        np.testing.assert_array_equal(got, stepped_values(model, feeds)["y"])
    assert _specialized(session)["Resize"] == "special"
    np.testing.assert_array_equal(session.run({"x": x, "scales": other})["y"], x.repeat(3, 2))


def test_gather_from_a_constant_table_gives_the_stepped_bits_and_the_kernels_errors() -> None:
    """An embedding (a constant table gathered by the run's ids, int32 or int64, negative
    ones, 2-D ids, another axis): its specialized call gives the stepped values; an id out
    of range raises the kernel's error, and the next run is fine."""
    table = np.arange(5 * 4, dtype=np.float32).reshape(5, 4)
    for axis, ids in ((0, np.array([[1, -1, 4]], np.int64)), (1, np.array([3, 0], np.int32))):
        ii = helper.make_tensor_value_info("i", helper.np_dtype_to_tensor_dtype(ids.dtype), None)
        inits = [numpy_helper.from_array(table, "t")]
        model = _model(
            [helper.make_node("Gather", ["t", "i"], ["y"], axis=axis)], [ii], ["y"], inits
        )
        session, got = assert_stepped_bits(model, {"i": ids})
        assert _specialized(session)["Gather"] == "special"
        np.testing.assert_array_equal(got["y"], np.take(table, ids, axis=axis))
        bad = np.full_like(ids, 9)
        with pytest.raises(Exception, match="Gather"):
            session.run({"i": bad})
        np.testing.assert_array_equal(session.run({"i": ids})["y"], got["y"])
    uint = helper.make_tensor_value_info("i", TensorProto.UINT8, None)  # the kernel's route
    model = _model([helper.make_node("Gather", ["t", "i"], ["y"])], [uint], ["y"],
                   [numpy_helper.from_array(table, "t")])  # fmt: skip
    assert_stepped_bits(model, {"i": np.array([4, 0], np.uint8)})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_by_a_run_time_scalar_index_is_a_view_with_the_kernels_errors(axis: int) -> None:
    """x[t] with t computed in the run (a scripted loop's counter), int32 or int64,
    negative or not, along any axis: the stepped values, a view of x when the index is
    a 0-d integer in range; a 1-D index and an index out of range take the kernel (its
    values, its error), and the next run is fine."""
    x = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    dim = x.shape[axis]
    for index_type, np_type in ((TensorProto.INT64, np.int64), (TensorProto.INT32, np.int32)):
        ii = helper.make_tensor_value_info("t", index_type, None)
        model = _model(
            [helper.make_node("Gather", ["x", "t"], ["y"], axis=axis)], [xi, ii], ["y"], []
        )
        session = Session(model)
        assert _specialized(session)["Gather"] == "special"
        for t in (0, dim - 1, -1, -dim):
            feeds = {"x": x, "t": np.array(t, np_type)}
            got = session.run(feeds)["y"]
            want = stepped_values(model, feeds)["y"]
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
            assert np.shares_memory(got, x)  # (a view: the kernel's take copies)
        rows = {"x": x, "t": np.array([1, -1], np_type)}
        np.testing.assert_array_equal(session.run(rows)["y"], stepped_values(model, rows)["y"])
        with pytest.raises(Exception, match="Gather"):
            session.run({"x": x, "t": np.array(dim, np_type)})
        np.testing.assert_array_equal(session.run({"x": x, "t": np.array(1, np_type)})["y"],
                                      np.take(x, 1, axis=axis))  # fmt: skip


def test_concat_gives_the_stepped_values_and_the_kernels_errors() -> None:
    """Concat's specialized call: numpy's concatenation along the axis (a KV cache's past
    and new rows, a negative axis, three inputs); inputs of different ranks raise the
    kernel's error."""
    a = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    b = -np.arange(8, dtype=np.float32).reshape(1, 2, 1, 4)
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "ab"]
    for axis in (2, -2):
        model = _model([helper.make_node("Concat", ["a", "b", "a"], ["y"], axis=axis)], ins,
                       ["y"], [])  # fmt: skip
        session, got = assert_stepped_bits(model, {"a": a, "b": b})
        assert _specialized(session)["Concat"] == "special"
        np.testing.assert_array_equal(got["y"], np.concatenate([a, b, a], axis=2))
        with pytest.raises(Exception, match="Concat|dimensions"):
            session.run({"a": a, "b": b[0]})


def test_a_matmul_of_two_computed_values_gives_the_stepped_bits() -> None:
    """An exported attention's products (4-D by 4-D, K^T as a transposed view), and
    operands the batched product does not take (float64, a 2-D right side): the
    specialized call gives the stepped run's bits on each."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 4, 3, 8)).astype(np.float32)
    k = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    for elem, dtype in ((TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64)):
        ins = [helper.make_tensor_value_info(n, elem, None) for n in ("q", "k")]
        nodes = [
            helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", ["q", "kt"], ["s"]),
            helper.make_node("MatMul", ["s", "k"], ["y"]),
        ]
        model = _model(nodes, ins, ["y"], [])
        session, _ = assert_stepped_bits(model, {"q": q.astype(dtype), "k": k.astype(dtype)})
        from onnxviz.runtime.kernels import math_linalg

        batched = math_linalg._BMM is not None  # (kernels off: the kernel runs them)
        assert _specialized(session)["MatMul"] == ("special" if batched else "kernel")
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("q", "w")]
    model = _model([helper.make_node("MatMul", ["q", "w"], ["y"])], ins, ["y"], [])
    assert_stepped_bits(model, {"q": q, "w": k[0, 0]})


@pytest.mark.parametrize("shape", [(2, 8, 5, 7), (3, 8, 33), (4, 8)])
def test_a_standalone_batch_norm_gives_the_stepped_bits_and_numpys_affine(shape) -> None:
    """An inference BatchNormalization of initializer parameters (not after a conv: a
    TCN's or an MLP's): its factor and offset made once, then x * a + b (the compiled
    pass: numpy's two roundings) on every run, the stepped run's bits; a strided input
    and a fed variance take the kernel with the same numbers."""
    rng = np.random.default_rng(6)
    c = shape[1]
    params = {
        "s": rng.uniform(0.5, 2, c), "b": rng.standard_normal(c),
        "m": rng.standard_normal(c), "v": rng.uniform(0.1, 3, c),
    }  # fmt: skip
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in params.items()]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    model = _model([node], [xi], ["y"], inits, [helper.make_opsetid("", 15)])
    x = rng.standard_normal(shape).astype(np.float32)
    session, got = assert_stepped_bits(model, {"x": x})
    assert _specialized(session)["BatchNormalization"] == "special"
    f32 = {k: v.astype(np.float32) for k, v in params.items()}
    a = f32["s"] / np.sqrt(f32["v"] + np.float32(1e-3))
    b = f32["b"] - f32["m"] * a
    axes = (1, -1) + (1,) * (len(shape) - 2)
    np.testing.assert_array_equal(got["y"], x * a.reshape(axes) + b.reshape(axes))
    if len(shape) > 2:
        strided = np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)
        assert_stepped_bits(model, {"x": strided})
    if len(shape) == 4:  # channels-last (a Concat's value): the compiled pass over its rows
        last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        _, got = assert_stepped_bits(model, {"x": last})
        np.testing.assert_array_equal(got["y"], x * a.reshape(axes) + b.reshape(axes))


def test_a_grouped_pointwise_conv_gives_the_per_group_products() -> None:
    """A grouped 1x1 conv (ShuffleNet's, group 4) is each group's weight times its slab
    of channels (the batched product on the image in place): numpy's per-group products
    bit for bit, plus the bias, in stepped and unwatched runs alike."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 32, 6, 5)).astype(np.float32)
    w = rng.standard_normal((48, 8, 1, 1)).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=4, kernel_shape=[1, 1])
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    _, got = assert_stepped_bits(_model([node], [xi], ["y"], inits), {"x": x})
    products = np.matmul(w.reshape(4, 12, 8), x.reshape(2, 4, 8, 30)).reshape(2, 48, 6, 5)
    np.testing.assert_array_equal(got["y"], products + b.reshape(1, 48, 1, 1))


@pytest.mark.parametrize("shape", [(2, 6, 9, 7), (1, 6, 40), (1, 6, 1, 1)])
def test_instance_norm_scale_and_shift_give_numpys_bits(monkeypatch, shape) -> None:
    """InstanceNormalization's per-channel scale and bias: the compiled pass (a Mul and an
    Add by per-channel tables) gives numpy's two in-place passes' bits."""
    from onnxviz.runtime.kernels import chain_program, nn_norm

    rng = np.random.default_rng(8)
    x = rng.standard_normal(shape).astype(np.float32)
    scale = rng.uniform(0.5, 2, shape[1]).astype(np.float32)
    bias = rng.standard_normal(shape[1]).astype(np.float32)
    got = nn_norm.instance_norm(x, scale, bias, epsilon=1e-3)
    monkeypatch.setattr(chain_program, "CHAIN", None)  # numpy's passes
    want = nn_norm.instance_norm(x, scale, bias, epsilon=1e-3)
    np.testing.assert_array_equal(got, want)


class _Taken:
    """Counts the calls of a prepared conv call class that gave a result (not None: the
    prepared call ran, the layers did not)."""

    def __init__(self, monkeypatch: Any, cls: type, method: str = "__call__") -> None:
        self.count = 0
        real = getattr(cls, method)

        def counted(obj: Any, *args: Any, **kwargs: Any) -> Any:
            got = real(obj, *args, **kwargs)
            self.count += got is not None
            return got

        monkeypatch.setattr(cls, method, counted)


def _grouped_pointwise_model(tail: str, channels_last_input: bool) -> onnx.ModelProto:
    """Conv (group 4, 1x1, 32 -> 48 channels) [+ residual] [-> Relu]; with
    ``channels_last_input`` after a stem conv -> Relu -> MaxPool (a ShuffleNet's start),
    which the layout planner runs channels-last."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((48, 8, 1, 1)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "b"),
    ]
    nodes, source = [], "x"
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)]
    if channels_last_input:
        stem = rng.standard_normal((32, 3, 3, 3)).astype(np.float32) * 0.3
        inits.append(numpy_helper.from_array(stem, "ws"))
        nodes += [
            helper.make_node("Conv", ["x", "ws"], ["s"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["s"], ["sr"]),
            helper.make_node(
                "MaxPool", ["sr"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
            ),
        ]
        source = "p"
    nodes.append(helper.make_node("Conv", [source, "w", "b"], ["y"], group=4, kernel_shape=[1, 1]))
    last = "y"
    if "residual" in tail:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
        nodes.append(helper.make_node("Add", ["y", "r"], ["yr"]))
        last = "yr"
    if "relu" in tail:
        nodes.append(helper.make_node("Relu", [last], ["out"]))
        last = "out"
    return _model(nodes, inputs, [last], inits)


@pytest.mark.parametrize("tail", ["none", "relu", "residual", "residual relu"])
def test_a_grouped_pointwise_chain_adds_its_bias_residual_and_relu_in_one_pass(
    monkeypatch, tail: str
) -> None:
    """A grouped 1x1 conv chain (ShuffleNet's, group 4) runs as its prepared call: the
    batched product, then the bias, the residual and the Relu in one compiled pass, with
    the stepped run's bits (the conv kernel's product and numpy's additions and max)."""
    from onnxviz.runtime.kernels import nn_conv

    taken = _Taken(monkeypatch, nn_conv._PreparedGroupedPointwise)
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((2, 32, 9, 7)).astype(np.float32)}
    if "residual" in tail:
        feeds["r"] = rng.standard_normal((2, 48, 9, 7)).astype(np.float32)
    feeds["x"][0, 3, 2, 2] = np.nan  # a NaN goes through the product and the Relu
    assert_stepped_bits(_grouped_pointwise_model(tail, False), feeds)
    assert taken.count >= 2 if native.load("chain") is not None else taken.count == 0


def test_a_grouped_pointwise_conv_reads_a_channels_last_input_in_place(monkeypatch) -> None:
    """ShuffleNet's first grouped conv reads its stem's pooled value, which runs
    channels-last: the channels-last kernel (nn_conv_nhwc._GroupedPointwise) reads each
    group's columns of its rows in place, within float32 rounding of the layers' numbers
    (the layers' im2col copy and batched product sum in another order)."""
    from onnxviz.runtime.kernels import nn_conv_nhwc

    rows = _Taken(monkeypatch, nn_conv_nhwc._GroupedPointwise, "run")
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((1, 3, 40, 40)).astype(np.float32)}
    assert_modes_agree(_grouped_pointwise_model("relu", True), feeds)
    if native.load("conv") is not None:  # (kernels off: the stem writes NCHW)
        assert rows.count >= 2


@pytest.mark.parametrize(
    ("shape", "strides", "act"),
    [
        ((1, 24, 40, 36), 1, "Relu"),  # rows of 36: the planes kernel
        ((2, 16, 33, 50), 2, "none"),  # stride 2, rows of 25
        ((1, 40, 14, 14), 1, "Clip"),  # rows of 14: the channels-last kernel and copies
        ((1, 12, 30, 21), 2, "Relu"),  # rows of 11
    ],
)
def test_an_nchw_depthwise_chain_runs_its_prepared_call(
    monkeypatch, shape: tuple[int, ...], strides: int, act: str
) -> None:
    """A depthwise conv between channels-first nodes runs its prepared call (the kernel's
    route without the conv layers), its activation in the kernel: the stepped bits, on
    wide rows by the planes kernel, on narrow ones by the channels-last kernel."""
    from onnxviz.runtime.kernels import nn_conv

    taken = _Taken(monkeypatch, nn_conv._PreparedDepthwiseNchw)
    c = shape[1]
    rng = np.random.default_rng(6)
    inits = [
        numpy_helper.from_array(rng.standard_normal((c, 1, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"),
    ]
    conv = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], group=c, kernel_shape=[3, 3], pads=[1, 1, 1, 1],
        strides=[strides, strides],
    )  # fmt: skip
    nodes = [conv]
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["y"], ["out"]))
    elif act == "Clip":
        inits += [
            numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
            numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
        ]
        nodes.append(helper.make_node("Clip", ["y", "lo", "hi"], ["out"]))
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32) * 3}
    feeds["x"][0, 1, 5, 5] = np.inf
    assert_stepped_bits(_model(nodes, [xi], [nodes[-1].output[0]], inits), feeds)
    kernels = native.load("depthwise") is not None and native.load("channels") is not None
    assert taken.count >= 2 if kernels else taken.count == 0


def test_a_lone_relu_runs_the_compiled_relu_step() -> None:
    """A Relu no chain absorbs (ShuffleNet's after a channel Concat) is the compiled
    chain's held Relu step in unwatched runs: np.maximum(x, 0)'s bits (NaN kept, -0 to
    +0) for float32, the kernel for anything else."""
    nodes = [
        helper.make_node("Concat", ["x", "x"], ["c"], axis=1),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    model = _model(nodes, [xi], ["y"], [])
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 24, 9, 9)).astype(np.float32)
    x.reshape(-1)[:4] = [np.nan, -0.0, np.inf, -np.inf]
    session, got = assert_stepped_bits(model, {"x": x})
    assert np.signbit(got["y"].reshape(-1)[1]) == False  # noqa: E712 (-0 -> +0)
    if native.load("chain") is not None:
        assert _specialized(session)["Relu"] == "special"
    xd = helper.make_tensor_value_info("x", TensorProto.DOUBLE, None)
    wide = np.arange(-6, 6, dtype=np.float64).reshape(1, 2, 2, 3)
    assert_stepped_bits(_model(nodes, [xd], ["y"], []), {"x": wide})  # the kernel's call


def test_a_slice_at_computed_bounds_keeps_its_index_while_they_stay() -> None:
    """HF's rotate_half slices at x.shape[-1] // 2 (Shape arithmetic, kept between runs):
    the Slice's call keeps the last index with the arrays it came from; a new input shape
    or bounds fed at run time (writable arrays, changed between runs) take the kernel."""
    i64 = TensorProto.INT64
    inits = [
        numpy_helper.from_array(np.array(-1, np.int64), "last"),
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array([-1], np.int64), "axis"),
        numpy_helper.from_array(np.array([2**62], np.int64), "big"),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "last"], ["width"], axis=0),
        helper.make_node("Div", ["width", "two"], ["half0"]),
        helper.make_node("Unsqueeze", ["half0", "axis0"], ["half"]),
        helper.make_node("Slice", ["x", "zero", "half", "axis"], ["low"]),
        helper.make_node("Slice", ["x", "half", "big", "axis"], ["high"]),
        helper.make_node("Neg", ["high"], ["neg"]),
        helper.make_node("Concat", ["neg", "low"], ["rot"], axis=-1),
        helper.make_node("Slice", ["x", "start", "end"], ["fed"]),
    ]
    ins = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("start", i64, [1]),
        helper.make_tensor_value_info("end", i64, [1]),
    ]
    model = _model(nodes, ins, ["rot", "fed"], inits)
    rng = np.random.default_rng(11)
    session = Session(model)
    assert "slice_by_identity" in "".join(
        getattr(pn.call, "__qualname__", "") for pn in run_nodes(session.plan)
    )
    start, end = np.array([1], np.int64), np.array([3], np.int64)
    for shape in [(2, 3, 8), (2, 3, 8), (1, 6), (2, 3, 8), (4, 10)]:
        x = rng.standard_normal(shape).astype(np.float32)
        feeds = {"x": x, "start": start, "end": end}
        got = session.run(feeds)
        want = stepped_values(model, feeds)
        half = shape[-1] // 2
        np.testing.assert_array_equal(
            got["rot"], np.concatenate([-x[..., half:], x[..., :half]], -1)
        )
        np.testing.assert_array_equal(got["rot"], want["rot"])
        np.testing.assert_array_equal(got["fed"], x[start[0] : end[0]])
        np.testing.assert_array_equal(got["fed"], want["fed"])
        start[0] = 0  # the same writable array, changed: the next run must read it again
        end[0] += 1
