"""shape_flow.complete_shapes: the shapes a graph does not declare, carried from those it
does through the ops whose output shape follows from their inputs' (for the tensor
operands of elementwise chains); anything it cannot work out stays unknown."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.fusion_elementwise import ElementwiseChain
from onnxviz.runtime.plan import PlanContext, compile_graph
from onnxviz.runtime.shape_flow import complete_shapes

from .differential import assert_stepped_bits

F = TensorProto.FLOAT


def _shapes(nodes: list[onnx.NodeProto], inputs: dict[str, list[Any]], inits: dict[str, Any]):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(nodes[-1].output[0], F, None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()],
    )
    plan = compile_graph(graph, "main", PlanContext(opsets={"": 17}, functions={}))
    constants = dict(plan.constants)
    known = complete_shapes(plan.nodes, plan.shapes, constants)
    return {name: known.get(slot) for name, slot in plan.slots.items()}


def test_the_ops_carry_their_shapes() -> None:
    w = np.zeros((384, 64), np.float32)
    got = _shapes(
        [
            helper.make_node("Gather", ["x", "t"], ["xt"], axis=0),  # scalar index: axis goes
            helper.make_node("Gather", ["x", "t1"], ["xt1"], axis=1),  # [1]: the axis stays
            helper.make_node("Gemm", ["xt", "w"], ["g"], transB=1),
            helper.make_node("Split", ["g", "sizes"], ["a", "b", "c"], axis=1),
            helper.make_node("Split", ["g"], ["p", "q"], axis=1),  # even halves
            helper.make_node("Add", ["a", "h"], ["s"]),
            helper.make_node("Sigmoid", ["s"], ["r"]),
            helper.make_node("Mul", ["r", "row"], ["m"]),  # broadcast of a [128] row
            helper.make_node("Unsqueeze", ["m", "ax0"], ["u"]),
            helper.make_node("Squeeze", ["u", "ax0"], ["v"]),
            helper.make_node("MatMul", ["v", "k"], ["mm"]),
            helper.make_node("Add", ["mm", "other"], ["bad"]),  # 5 against 7: unknown
            helper.make_node("Relu", ["bad"], ["y"]),
        ],
        {"x": [32, "batch", 64], "h": ["batch", 128], "row": [128], "other": [7]},
        {
            "t": np.array(3, np.int64),
            "t1": np.array([0], np.int64),
            "w": w,
            "sizes": np.array([128, 128, 128], np.int64),
            "ax0": np.array([0], np.int64),
            "k": np.zeros((128, 5), np.float32),
        },
    )
    assert got["xt"] == ("batch", 64) and got["xt1"] == (32, 1, 64)
    assert got["g"] == ("batch", 384)
    assert got["a"] == got["b"] == got["c"] == ("batch", 128)
    assert got["p"] == got["q"] == ("batch", 192)
    assert got["s"] == got["r"] == got["m"] == ("batch", 128)
    assert got["u"] == (1, "batch", 128) and got["v"] == ("batch", 128)
    assert got["mm"] == ("batch", 5)
    assert got["bad"] is None and got["y"] is None


def test_what_it_cannot_work_out_stays_unknown() -> None:
    got = _shapes(
        [
            helper.make_node("Split", ["x"], ["a", "b"], axis=0),  # 5 in two: uneven
            helper.make_node("Split", ["x", "n"], ["c", "d"], axis=1),  # sizes fed at run time
            helper.make_node("Add", ["x", "z"], ["s"]),  # z undeclared
            helper.make_node("Squeeze", ["x", "ax"], ["q"]),  # axis 1 is not 1
            helper.make_node("Reshape", ["x", "shape"], ["y"]),  # not an op it follows
        ],
        {"x": [5, 6], "n": [2], "z": None},
        {"ax": np.array([1], np.int64), "shape": np.array([30], np.int64)},
    )
    assert got["a"] is got["b"] is got["c"] is got["d"] is None
    assert got["s"] is None and got["q"] is None and got["y"] is None


@pytest.mark.parametrize("batch", [1, 3])
def test_a_gru_cell_exported_without_value_info_gets_its_tensor_chains(batch: int) -> None:
    """A GRU cell as TorchScript writes it (Gemm, Split, the gates; no value_info): the
    gate arithmetic's tensor operands are known from the declared input and the
    constants, so it runs as chains, with the stepped run's bits."""
    hidden, n_in = 16, 8
    rng = np.random.default_rng(batch)
    inits = {
        "wi": rng.standard_normal((3 * hidden, n_in)).astype(np.float32) * 0.3,
        "wh": rng.standard_normal((3 * hidden, hidden)).astype(np.float32) * 0.3,
        "bi": rng.standard_normal(3 * hidden).astype(np.float32),
        "bh": rng.standard_normal(3 * hidden).astype(np.float32),
        "t": np.array(0, np.int64),
    }
    nodes = [
        helper.make_node("Gather", ["x", "t"], ["xt"], axis=0),
        helper.make_node("Gemm", ["xt", "wi", "bi"], ["gi"], transB=1),
        helper.make_node("Gemm", ["h", "wh", "bh"], ["gh"], transB=1),
        helper.make_node("Split", ["gi"], ["r0", "z0", "n0"], axis=1),
        helper.make_node("Split", ["gh"], ["r1", "z1", "n1"], axis=1),
        helper.make_node("Add", ["r1", "r0"], ["ra"]),
        helper.make_node("Sigmoid", ["ra"], ["r"]),
        helper.make_node("Add", ["z1", "z0"], ["za"]),
        helper.make_node("Sigmoid", ["za"], ["z"]),
        helper.make_node("Mul", ["n1", "r"], ["nr"]),
        helper.make_node("Add", ["n0", "nr"], ["na"]),
        helper.make_node("Tanh", ["na"], ["n"]),
        helper.make_node("Sub", ["h", "n"], ["d"]),
        helper.make_node("Mul", ["d", "z"], ["dz"]),
        helper.make_node("Add", ["dz", "n"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "gru_cell",
        [
            helper.make_tensor_value_info("x", F, [4, batch, n_in]),
            helper.make_tensor_value_info("h", F, [batch, hidden]),
        ],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {
        "x": rng.standard_normal((4, batch, n_in)).astype(np.float32),
        "h": rng.standard_normal((batch, hidden)).astype(np.float32),
    }
    session, _ = assert_stepped_bits(model, feeds, runs=3)
    chains = [
        pn.fused
        for pn in run_nodes(session.plan)
        if isinstance(pn.fused, ElementwiseChain) and any(st.tensor for st in pn.fused.steps)
    ]
    assert sum(len(c.nodes) for c in chains) >= 7, [[n.op_type for n in c.nodes] for c in chains]
