"""Elementwise chains with tensor operands (fusion_elementwise: another node's value read
element by element, `_Step.tensor`; native/_chain.c's TENSOR steps), in unwatched runs.

A written-out recurrent cell (torch's LSTMCell and GRUCell stepped by a Python loop, an
Elman RNN) combines its gates elementwise: c' = f * c + i * g, h = o * tanh(c'),
n = tanh(n0 + r * n1), h' = (h - n) * z + n.  Such chains run as one node whose steps
read the other values where they lie.  The unwatched run must give the stepped run's
bits (every step rounds as numpy's ufunc does), whatever the graph: random graphs of
Add, Sub, Mul, Div, Tanh, Sigmoid, Relu and Neg over several values of one shape or
broadcasting ones, float32 and float64, values read twice, kept values in the middle.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.fusion_elementwise import ElementwiseChain
from onnxviz.runtime.kernels import chain_program
from onnxviz.runtime.session import Session

from .differential import assert_stepped_bits

pytestmark = pytest.mark.numeric

_BINARY = ["Add", "Sub", "Mul", "Div"]
_UNARY = ["Tanh", "Sigmoid", "Relu", "Neg"]


def _tensor_chains(session: Session) -> list[ElementwiseChain]:
    return [
        pn.fused
        for pn in run_nodes(session.plan)
        if isinstance(pn.fused, ElementwiseChain) and any(st.tensor for st in pn.fused.steps)
    ]


@st.composite
def tensor_graphs(draw: Any) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=1, max_size=3)))
    feeds: dict[str, np.ndarray] = {}
    for k in range(draw(st.integers(2, 5))):
        # mostly the full shape; sometimes without its leading axes or with ones
        s = shape
        if k and draw(st.integers(0, 3)) == 0:
            s = shape[draw(st.integers(0, len(shape))) :]
        elif k and draw(st.integers(0, 5)) == 0:
            s = tuple(1 if draw(st.booleans()) else d for d in shape)
        feeds[f"in{k}"] = (rng.standard_normal(s) * 2).astype(dtype)
    values = list(feeds)
    shapes = {n: v.shape for n, v in feeds.items()}
    nodes: list[onnx.NodeProto] = []
    outputs: list[str] = []
    for i in range(draw(st.integers(2, 12))):
        y = f"v{i}"
        if draw(st.integers(0, 3)) == 0:
            op = draw(st.sampled_from(_UNARY))
            a = draw(st.sampled_from(values))
            nodes.append(helper.make_node(op, [a], [y]))
            shapes[y] = shapes[a]
        else:
            op = draw(st.sampled_from(_BINARY))
            a, b = draw(st.sampled_from(values)), draw(st.sampled_from(values))
            if op == "Div":
                b = draw(st.sampled_from(list(feeds)))  # inputs: never zero (normal draws)
            nodes.append(helper.make_node(op, [a, b], [y]))
            shapes[y] = np.broadcast_shapes(shapes[a], shapes[b])
        values.append(y)
        if draw(st.integers(0, 5)) == 0:
            outputs.append(y)  # kept in the middle: a chain ends there
    outputs = list(dict.fromkeys([*outputs, values[-1]]))
    # the shapes an exporter declares (value_info), mostly: tensor steps need them
    declared = [
        helper.make_tensor_value_info(v, elem, list(shapes[v]))
        for v in values[len(feeds) :]
        if v not in outputs and draw(st.integers(0, 5))
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, elem, list(v.shape)) for n, v in feeds.items()],
        [helper.make_tensor_value_info(o, elem, None) for o in outputs],
        value_info=declared,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


@settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(tensor_graphs())
def test_random_graphs_of_several_values_give_the_stepped_bits(case: Any) -> None:
    model, feeds = case
    with np.errstate(all="ignore"):
        assert_stepped_bits(model, feeds, runs=3)


def _lstm_cell_model(batch: int, hidden: int) -> onnx.ModelProto:
    """An LSTM cell's gate arithmetic as torch writes it out: the gates' activations, then
    c' = f * c + i * g and h = o * tanh(c')."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Sigmoid", ["gi"], ["i"]),
        helper.make_node("Sigmoid", ["gf"], ["f"]),
        helper.make_node("Tanh", ["gg"], ["g"]),
        helper.make_node("Sigmoid", ["go"], ["o"]),
        helper.make_node("Mul", ["f", "c"], ["fc"]),
        helper.make_node("Mul", ["i", "g"], ["ig"]),
        helper.make_node("Add", ["fc", "ig"], ["c2"]),
        helper.make_node("Tanh", ["c2"], ["tc"]),
        helper.make_node("Mul", ["o", "tc"], ["h2"]),
    ]
    names = ["gi", "gf", "gg", "go", "c"]
    graph = helper.make_graph(
        nodes,
        "lstm_cell",
        [helper.make_tensor_value_info(n, f, [batch, hidden]) for n in names],
        [
            helper.make_tensor_value_info("h2", f, None),
            helper.make_tensor_value_info("c2", f, None),
        ],
        value_info=[
            helper.make_tensor_value_info(n, f, [batch, hidden])
            for n in ("i", "f", "g", "o", "fc", "ig", "tc")
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("batch", [1, 4, 7])
def test_an_lstm_cells_gates_run_as_chains_with_the_stepped_bits(batch: int) -> None:
    rng = np.random.default_rng(batch)
    model = _lstm_cell_model(batch, 130)
    feeds = {
        n: rng.standard_normal((batch, 130)).astype(np.float32)
        for n in ("gi", "gf", "gg", "go", "c")
    }
    session = assert_stepped_bits(model, feeds, runs=3)[0]
    chains = _tensor_chains(session)
    # Mul(f, c) -> Add(., i * g) (c2 is kept: its chain ends there), Tanh -> Mul(o, .)
    assert len(chains) >= 2
    assert len(run_nodes(session.plan)) < len(session.plan.nodes)
    if chain_program.CHAIN is not None:
        assert all(c.native and c.quick is not None for c in chains)


def test_a_held_tensor_chain_hands_on_what_it_cannot_read() -> None:
    """The held call takes float32 C-contiguous tensors of x's shape (or of it without
    leading ones); a tensor that would grow the value, another dtype or a strided one
    goes to the Python call, which broadcasts, copies or runs the nodes one by one: the
    stepped run's bits every time, whatever the model declared."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Tanh", ["s"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "g",
        # declared as one shape (a lying model: b is fed otherwise below)
        [
            helper.make_tensor_value_info("a", f, [1, 4, 33]),
            helper.make_tensor_value_info("b", f, [4, 33]),
        ],
        [helper.make_tensor_value_info("y", f, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(5)
    a = rng.standard_normal((1, 4, 33)).astype(np.float32)
    wide = rng.standard_normal((4, 66)).astype(np.float32)
    for b in (
        rng.standard_normal((4, 33)).astype(np.float32),  # a's shape without its leading 1
        rng.standard_normal((1, 4, 33)).astype(np.float32),
        rng.standard_normal((33,)).astype(np.float32),  # broadcast: a copy
        wide[:, ::2],  # strided
        rng.standard_normal((2, 4, 33)).astype(np.float32),  # grows a: node by node
    ):
        session = assert_stepped_bits(model, {"a": a, "b": b}, runs=3)[0]
        assert len(_tensor_chains(session)) == 1


def test_one_value_read_by_every_step_is_one_tensor_operand() -> None:
    """x + b + b + ... (b a graph input): b is one tensor operand however many steps read
    it, so the chain is not cut every four steps; the stepped bits."""
    f = TensorProto.FLOAT
    nodes, x = [], "x"
    for i in range(20):
        nodes.append(helper.make_node("Add" if i % 2 else "Mul", [x, "b"], [f"v{i}"]))
        x = f"v{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", f, [3, 5]),
            helper.make_tensor_value_info("b", f, [3, 5]),
        ],
        [helper.make_tensor_value_info(x, f, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(8)
    feeds = {n: (rng.standard_normal((3, 5)) * 0.5).astype(np.float32) for n in ("x", "b")}
    session = assert_stepped_bits(model, feeds, runs=3)[0]
    assert len(run_nodes(session.plan)) == 1
    (chain,) = _tensor_chains(session)
    assert chain._tensor_places == [1] and len(chain.steps) == 20


def test_a_value_declared_of_another_shape_is_no_tensor_operand() -> None:
    """An attention mask added to the scores (declared [B, 1, 1, T] beside [B, H, T, T])
    is no tensor operand (the chain would copy it on every run; a squeeze-excite gate's
    Mul belongs to the channels-last fusions), nor is an undeclared value; a mask
    declared of the scores' shape is."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Div", ["s", "d"], ["q"]),
        helper.make_node("Add", ["q", "mask"], ["m"]),
        helper.make_node("Relu", ["m"], ["y"]),
    ]
    rng = np.random.default_rng(9)
    for mask, mask_declared, fused in (
        ([2, 1, 1, 5], True, False),
        ([2, 3, 5, 5], False, False),
        ([2, 3, 5, 5], True, True),
    ):
        graph = helper.make_graph(
            nodes,
            "g",
            [
                helper.make_tensor_value_info("s", f, [2, 3, "t", 5]),
                helper.make_tensor_value_info("d", f, [2, 3, "t", 5]),
                helper.make_tensor_value_info("mask", f, mask if mask_declared else None),
            ],
            [helper.make_tensor_value_info("y", f, None)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        feeds = {
            "s": rng.standard_normal((2, 3, 5, 5)).astype(np.float32),
            "d": rng.uniform(1, 2, (2, 3, 5, 5)).astype(np.float32),
            "mask": rng.standard_normal(mask).astype(np.float32),
        }
        session = assert_stepped_bits(model, feeds, runs=3)[0]
        taken = [[n.op_type for n in c.nodes] for c in _tensor_chains(session)]
        # ("t" against 5: a symbolic axis is not a size, so a declared [2, 3, 5, 5] mask
        # does not match; the third case declares it so too)
        if fused:
            model.graph.input[2].CopyFrom(helper.make_tensor_value_info("mask", f, [2, 3, "t", 5]))
            session = assert_stepped_bits(model, feeds, runs=3)[0]
            taken = [[n.op_type for n in c.nodes] for c in _tensor_chains(session)]
            assert taken == [["Div", "Add", "Relu"]]
        else:
            assert all("Add" not in t for t in taken), taken
