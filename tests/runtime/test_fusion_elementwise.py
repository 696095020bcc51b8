"""Elementwise chains run block by block in unwatched runs (fusion_elementwise.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime.events import NodeFinished
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.session import Session

pytestmark = pytest.mark.numeric


def _model(
    nodes: list[onnx.NodeProto],
    consts: dict[str, Any],
    shape: list[int],
    dtype: int = TensorProto.FLOAT,
    outputs: tuple[str, ...] = ("y",),
) -> onnx.ModelProto:
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    inits = [numpy_helper.from_array(np.asarray(v, dtype=np_dtype), k) for k, v in consts.items()]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", dtype, shape)],
        [helper.make_tensor_value_info(o, dtype, None) for o in outputs],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _stepped(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for e in Session(model).steps(feeds):
        if isinstance(e, NodeFinished):
            out.update(e.outputs)
    return out


def _gelu_nodes() -> list[onnx.NodeProto]:
    """PyTorch's export of nn.GELU(): x * (erf(x / sqrt 2) + 1) * 0.5."""
    return [
        helper.make_node("Div", ["x", "sqrt2"], ["d"], name="div"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "one"], ["a"], name="add"),
        helper.make_node("Mul", ["x", "a"], ["m"], name="mul"),
        helper.make_node("Mul", ["m", "half"], ["y"], name="half"),
    ]


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_gelu_chain_runs_as_one_node_with_the_plain_result(dtype: int) -> None:
    consts = {"sqrt2": np.sqrt(2.0), "one": 1.0, "half": 0.5}
    shape = [3, 40_000]  # several blocks, the last one partial
    model = _model(_gelu_nodes(), consts, shape, dtype)
    x = np.random.default_rng(1).standard_normal(shape) * 3
    x = x.astype(helper.tensor_dtype_to_np_dtype(dtype))
    x[0, :4] = [np.nan, np.inf, -np.inf, 0.0]
    sess = Session(model)
    y = sess.run({"x": x})["y"]
    assert [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)] == [("Div", "fused")]
    want = _stepped(model, {"x": x})["y"]
    assert y.dtype == want.dtype and y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)  # NaN where want is NaN
    # IEEE as the plain kernels: gelu(-inf) = -inf * 0 is NaN.
    assert np.isnan(y[0, 0]) and y[0, 1] == np.inf and np.isnan(y[0, 2]) and y[0, 3] == 0


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
@pytest.mark.parametrize("half_first", [False, True])
def test_a_gelu_written_with_a_side_branch_runs_as_one_node_with_the_stepped_bits(
    dtype: int, half_first: bool
) -> None:
    """y = (x * 0.5) * (1 + erf(x / sqrt 2)), as the onnx wheel's BERT writes it: the
    x * 0.5 node sits off the chain's path and only its last Mul reads it."""
    nodes = [
        helper.make_node("Mul", ["half", "x"] if half_first else ["x", "half"], ["h"]),
        helper.make_node("Div", ["x", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["h", "a"] if half_first else ["a", "h"], ["y"]),
    ]
    consts = {"sqrt2": np.sqrt(2.0), "one": 1.0, "half": 0.5}
    shape = [3, 40_000]
    model = _model(nodes, consts, shape, dtype)
    x = np.random.default_rng(2).standard_normal(shape) * 3
    x = x.astype(helper.tensor_dtype_to_np_dtype(dtype))
    x[0, :5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    sess = Session(model)
    y = sess.run({"x": x})["y"]
    assert [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)] == [("Div", "fused")]
    want = _stepped(model, {"x": x})["y"]
    np.testing.assert_array_equal(y, want)  # the same steps: the same bits (NaN too)
    # Read by another node too, x * 0.5 is no side value: the chain stops before it.
    model = _model(nodes, consts, shape, dtype, outputs=("y", "h"))
    sess = Session(model)
    got = sess.run({"x": x})
    assert [pn.kind for pn in run_nodes(sess.plan)] == ["kernel", "fused", "kernel"]
    np.testing.assert_array_equal(got["y"], want)


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_gpt2_tanh_gelu_with_its_cube_runs_as_one_node_with_the_stepped_bits(dtype: int) -> None:
    """Hugging Face GPT-2's NewGELU as torch writes it: 0.5 x (1 + tanh(sqrt(2 / pi)
    (x + 0.044715 x ** 3))), the cube a Pow by 3.0 that runs as x * x * x in both paths."""
    nodes = [
        helper.make_node("Pow", ["x", "three"], ["p"]),
        helper.make_node("Mul", ["p", "k"], ["pk"]),
        helper.make_node("Add", ["x", "pk"], ["s"]),
        helper.make_node("Mul", ["s", "c"], ["sc"]),
        helper.make_node("Tanh", ["sc"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["a"]),
        helper.make_node("Mul", ["x", "half"], ["h"]),
        helper.make_node("Mul", ["h", "a"], ["y"]),
    ]
    consts = {"three": 3.0, "k": 0.044715, "c": np.sqrt(2 / np.pi), "one": 1.0, "half": 0.5}
    shape = [2, 40_000]
    model = _model(nodes, consts, shape, dtype)
    x = np.random.default_rng(3).standard_normal(shape) * 4
    x = x.astype(helper.tensor_dtype_to_np_dtype(dtype))
    x[0, :5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    sess = Session(model)
    y = sess.run({"x": x})["y"]
    assert [pn.kind for pn in run_nodes(sess.plan)] == ["fused"]
    stepped = _stepped(model, {"x": x})
    np.testing.assert_array_equal(y, stepped["y"])
    np.testing.assert_array_equal(stepped["p"], (x * x) * x)


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, 1.7])
def test_a_pow_step_by_any_exponent_keeps_the_stepped_bits(exponent: float) -> None:
    """|x| ** e * 0.25 + 1: 2 and 3 are the compiled program's steps, other exponents
    numpy's pow over the blocks; a fed exponent ends the chain before the Pow."""
    nodes = [
        helper.make_node("Abs", ["x"], ["a"]),
        helper.make_node("Pow", ["a", "e"], ["p"]),
        helper.make_node("Mul", ["p", "q"], ["m"]),
        helper.make_node("Add", ["m", "one"], ["y"]),
    ]
    shape = [3, 20_000]
    model = _model(nodes, {"e": exponent, "q": 0.25, "one": 1.0}, shape)
    x = (np.random.default_rng(5).standard_normal(shape) * 6).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    sess = Session(model)
    y = sess.run({"x": x})["y"]
    assert [pn.kind for pn in run_nodes(sess.plan)] == ["fused"]
    np.testing.assert_array_equal(y, _stepped(model, {"x": x})["y"])


def test_shape_arithmetic_is_kept_between_runs_not_chained() -> None:
    """A GPT-2's attention scale 1 / sqrt(head size), from Shape -> Slice -> Cast: the
    Sqrt -> Div of one value is shape arithmetic, kept between runs (shape_memo.py),
    not a chain made again each run; the scores' own chain still forms."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=-1),
        helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Sqrt", ["f"], ["r"], name="sqrt"),
        helper.make_node("Div", ["one", "r"], ["scale"], name="div"),
        helper.make_node("Mul", ["x", "scale"], ["m"]),
        helper.make_node("Tanh", ["m"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["y"]),
    ]
    model = _model(nodes, {"one": 1.0}, [2, 16])
    sess = Session(model)
    for width in (16, 9, 16):
        x = np.random.default_rng(width).standard_normal((2, width)).astype(np.float32)
        np.testing.assert_array_equal(sess.run({"x": x})["y"], _stepped(model, {"x": x})["y"])
    by_label = {pn.label: pn for pn in run_nodes(sess.plan)}
    assert by_label["sqrt"].kind == by_label["div"].kind == "kernel"
    assert [pn.kind for pn in run_nodes(sess.plan)].count("fused") == 1


def test_operands_on_either_side_and_repeated_constants() -> None:
    """(c - x) / (x + c2), then c2 - v, then x * v: constants used twice, the value as
    the second operand, the chain's input read again."""
    nodes = [
        helper.make_node("Sub", ["c", "x"], ["s"]),
        helper.make_node("Div", ["s", "c2"], ["d"]),
        helper.make_node("Sub", ["c2", "d"], ["t"]),
        helper.make_node("Add", ["t", "c"], ["u"]),
        helper.make_node("Mul", ["x", "u"], ["y"]),
    ]
    model = _model(nodes, {"c": 1.5, "c2": 4.0}, [5, 7])
    x = np.random.default_rng(2).standard_normal((5, 7)).astype(np.float32)
    sess = Session(model)
    y = sess.run({"x": x})["y"]
    assert len(run_nodes(sess.plan)) == 1
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, x64 * ((4.0 - (1.5 - x64) / 4.0) + 1.5), rtol=1e-6)


def test_square_of_the_input_starts_a_chain() -> None:
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node("Sqrt", ["sq"], ["y"])]
    model = _model(nodes, {}, [100])
    x = np.linspace(-3, 3, 100, dtype=np.float32)
    sess = Session(model)
    np.testing.assert_allclose(sess.run({"x": x})["y"], np.abs(x), rtol=1e-6)
    assert len(run_nodes(sess.plan)) == 1


def test_broadcasting_operand_runs_the_nodes_one_by_one() -> None:
    nodes = [
        helper.make_node("Mul", ["x", "scale"], ["m"], name="mul"),
        helper.make_node("Tanh", ["m"], ["y"], name="tanh"),
    ]
    model = _model(nodes, {"scale": [[0.5], [2.0], [-1.0]]}, [3, 4])
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    sess = Session(model)
    y = sess.run({"x": x})["y"]
    np.testing.assert_allclose(y, np.tanh(x * np.array([[0.5], [2.0], [-1.0]])), rtol=1e-6)
    assert "main::mul" in sess.node_times  # the fused node stands for the chain


def test_kept_intermediate_ends_the_chain() -> None:
    model = _model(
        _gelu_nodes(), {"sqrt2": np.sqrt(2.0), "one": 1.0, "half": 0.5}, [64], outputs=("y", "e")
    )
    x = np.random.default_rng(4).standard_normal(64).astype(np.float32)
    sess = Session(model)
    out = sess.run({"x": x})
    want = _stepped(model, {"x": x})
    np.testing.assert_allclose(out["e"], want["e"], rtol=1e-6)
    np.testing.assert_allclose(out["y"], want["y"], rtol=1e-6)
    kinds = [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)]
    # Div -> Erf stops at the kept value; the rest starts a chain of its own on e, whose
    # Mul reads x as a tensor operand (x is not that chain's input; x's shape is
    # declared, e's follows from it: shape_flow)
    assert kinds == [("Div", "fused"), ("Add", "fused")]
    assert [st.tensor for st in run_nodes(sess.plan)[1].fused.steps] == [False, True, False]


def test_value_read_again_after_an_earlier_last_use_is_not_overwritten() -> None:
    """The GELU as written by hand: Div -> Erf -> Add is a chain, and Mul(h, 0.5) sits
    between its nodes.  Node by node, that Mul was h's last use (so it could write into
    h in place); the fused chain reads h later, so the Mul must not (found on BERT)."""
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["h"], name="bias"),  # h: an intermediate
        helper.make_node("Div", ["h", "sqrt2"], ["d"], name="div"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Mul", ["h", "half"], ["hh"], name="half"),
        helper.make_node("Add", ["e", "one"], ["a"], name="add"),
        helper.make_node("Mul", ["hh", "a"], ["g"], name="gelu"),
        # 0.5 used again later (as the next layer's GELU would): not dead at "half".
        helper.make_node("Mul", ["g", "half"], ["y"], name="again"),
    ]
    consts = {"bias": 0.25, "sqrt2": np.sqrt(2.0), "half": 0.5, "one": 1.0}
    model = _model(nodes, consts, [4, 3000])
    x = np.random.default_rng(5).standard_normal((4, 3000)).astype(np.float32)
    sess = Session(model)
    y = sess.run({"x": x})["y"]
    nodes_run = run_nodes(sess.plan)
    assert any(pn.kind == "fused" for pn in nodes_run)
    # Every in-place mark of the fused list is earned at the node's new position.
    for pn in nodes_run:
        for slot, dead in zip(pn.inputs, pn.inplace_dead or ()):
            assert not dead or slot in pn.free_after, pn.label
    np.testing.assert_allclose(y, _stepped(model, {"x": x})["y"], rtol=1e-6, atol=1e-6)


def test_a_fed_scalar_makes_a_new_program_each_run() -> None:
    """The chain keeps its compiled program while its scalars are the same read-only
    constants; a scalar initializer that is also a graph input, fed another value, gives
    that value's result, run after run (and the constant's again when not fed)."""
    consts = {"sqrt2": np.sqrt(2.0), "one": 1.0, "half": 0.5}
    model = _model(_gelu_nodes(), consts, [4, 300])
    model.graph.input.append(helper.make_tensor_value_info("half", TensorProto.FLOAT, []))
    x = np.random.default_rng(2).standard_normal((4, 300)).astype(np.float32)
    sess = Session(model)
    for half in (None, 0.25, 0.75, None, 0.25):
        feeds = {"x": x} if half is None else {"x": x, "half": np.array(half, np.float32)}
        got = sess.run(feeds)["y"]
        want = _stepped(model, feeds)["y"]
        np.testing.assert_array_equal(got, want)
    assert [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)] == [("Div", "fused")]


def test_a_chain_longer_than_the_compiled_program_runs_as_several_compiled_chains() -> None:
    """200 steps of Add, Mul and Tanh by constants: fused into chains of at most the
    compiled program's MAX_STEPS steps (one chain of them all had run numpy's steps one
    by one), every one compiled, with the stepped run's bits."""
    from onnxviz.runtime.kernels import chain_program
    from tests.runtime.differential import assert_stepped_bits

    nodes, consts, cur = [], {}, "x"
    for i in range(200):
        op = ("Add", "Mul", "Tanh")[i % 3]
        ins = [cur] if op == "Tanh" else [cur, f"c{i}"]
        if op != "Tanh":
            consts[f"c{i}"] = 0.5 + (i % 7) / 8
        out = "y" if i == 199 else f"v{i}"
        nodes.append(helper.make_node(op, ins, [out]))
        cur = out
    model = _model(nodes, consts, [3, 5])
    x = np.linspace(-3, 3, 15, dtype=np.float32).reshape(3, 5)
    session, _ = assert_stepped_bits(model, {"x": x})
    chains = [pn.fused for pn in run_nodes(session.plan) if pn.kind == "fused"]
    assert len(chains) >= 200 // chain_program.MAX_STEPS + 1
    assert all(len(c.nodes) <= chain_program.MAX_STEPS for c in chains)
    if chain_program.CHAIN is not None:
        assert all(c.native for c in chains)


def test_a_chain_of_more_per_channel_tables_than_the_program_reads_is_split() -> None:
    """40 Mul/Add steps by per-channel constants ((C, 1, 1): a written-out norm's scales):
    chains of at most MAX_TABLES tables each, all held compiled calls from the second run
    (one chain of 40 had run numpy's steps), with the stepped run's bits."""
    from onnxviz.runtime.kernels import chain_program
    from tests.runtime.differential import assert_stepped_bits

    rng = np.random.default_rng(4)
    nodes, inits, cur = [], [], "x"
    for i in range(40):
        inits.append(
            numpy_helper.from_array((rng.random((8, 1, 1)) + 0.5).astype(np.float32), f"c{i}")
        )
        out = "y" if i == 39 else f"v{i}"
        nodes.append(helper.make_node(("Mul", "Add")[i % 2], [cur, f"c{i}"], [out]))
        cur = out
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    session, _ = assert_stepped_bits(model, {"x": x}, runs=3)
    chains = [pn.fused for pn in run_nodes(session.plan) if pn.kind == "fused"]
    assert len(chains) == 3 and all(len(c.nodes) <= chain_program.MAX_TABLES for c in chains)
    if chain_program.CHAIN is not None:
        assert all(c.quick is not None for c in chains)  # each runs compiled
