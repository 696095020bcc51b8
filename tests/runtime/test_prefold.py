"""Constant folding when the unwatched node list is made (runtime/prefold.py).

* A TorchScript-style graph whose Split sizes, Reshape shape and Squeeze/Unsqueeze axes
  come from Constant nodes (and a chain of foldable nodes after them): the foldable nodes
  are folded before the first run, read-only, and the nodes reading them get their
  specialized calls; every run gives the stepped run's bits.
* A foldable node whose kernel raises is left to the run, which fails naming it.
* A feed overriding an initializer (IR 3) still makes the run compute the nodes that
  read it, and the specialized calls take the fed values' path.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.session import Session

from .differential import stepped_values

F = onnx.TensorProto.FLOAT
I64 = onnx.TensorProto.INT64


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(value, name + "_v"), name=name
    )


def _model() -> onnx.ModelProto:
    nodes = [
        _const("sizes", np.array([4, 4, 8], np.int64)),
        _const("shape_a", np.array([2, 2], np.int64)),
        _const("axes", np.array([0], np.int64)),
        # A foldable chain after a Constant: Concat of two Constants.
        _const("lead", np.array([1], np.int64)),
        helper.make_node("Concat", ["lead", "shape_a"], ["shape_b"], axis=0, name="cat"),
        helper.make_node("Split", ["x", "sizes"], ["p", "q", "r"], axis=1, name="split"),
        helper.make_node("Reshape", ["p", "shape_b"], ["p3"], name="reshape"),
        helper.make_node("Squeeze", ["p3", "axes"], ["p2"], name="squeeze"),
        helper.make_node("Unsqueeze", ["q", "axes"], ["q3"], name="unsqueeze"),
        helper.make_node("Relu", ["r"], ["y_r"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "prefold",
        [helper.make_tensor_value_info("x", F, [1, 16])],
        [helper.make_tensor_value_info(n, F, None) for n in ("p2", "q3", "y_r")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_constant_fed_nodes_get_their_specialized_calls_and_the_stepped_bits() -> None:
    model = _model()
    x = np.arange(16, dtype=np.float32).reshape(1, 16) - 5
    stepped = stepped_values(model, {"x": x})
    session = Session(model)
    nodes = run_nodes(session.plan)  # made, and folded, before any run
    folded = {pn.label: pn.folded for pn in session.plan.nodes if pn.folded is not None}
    assert {"sizes", "shape_a", "axes", "lead", "cat"} <= set(folded)
    np.testing.assert_array_equal(folded["cat"][0], [1, 2, 2])
    assert all(not v.flags.writeable for outs in folded.values() for v in outs)
    calls = {pn.op_type: (pn.call_many or pn.call) for pn in nodes}
    for op in ("Split", "Reshape", "Squeeze", "Unsqueeze"):
        # (a specializer's closure, or a held call in C: Reshape's with the compiled loop)
        qual = getattr(calls[op], "__qualname__", type(calls[op]).__name__)
        assert any(k in qual for k in ("special", "_prepared", "by_", "Reshape")), (op, qual)
    for _ in range(3):
        got = session.run({"x": x})
        for name in ("p2", "q3", "y_r"):
            np.testing.assert_array_equal(got[name], stepped[name])
            assert got[name].flags.writeable or not np.shares_memory(got[name], x)


def test_a_foldable_node_that_fails_is_left_to_the_run() -> None:
    nodes = [
        _const("shape", np.array([5, 5], np.int64)),
        helper.make_node("Reshape", ["c", "shape"], ["bad"], name="bad_reshape"),
        helper.make_node("Add", ["x", "bad"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [5, 5])],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=[numpy_helper.from_array(np.ones(6, np.float32), "c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = Session(model)
    run_nodes(session.plan)
    assert next(pn for pn in session.plan.nodes if pn.label == "bad_reshape").folded is None
    with pytest.raises(ExecutionError, match="bad_reshape"):
        session.run({"x": np.ones((5, 5), np.float32)})


def test_a_fed_initializer_still_reaches_the_nodes_that_read_it() -> None:
    nodes: list[Any] = [
        helper.make_node("Neg", ["n"], ["m"], name="neg"),
        helper.make_node("Concat", ["m", "m"], ["sizes"], axis=0, name="cat"),
        helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=0, name="split"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", F, [6]),
            helper.make_tensor_value_info("n", I64, [1]),
        ],
        [helper.make_tensor_value_info(v, F, None) for v in ("a", "b")],
        initializer=[numpy_helper.from_array(np.array([-3], np.int64), "n")],
    )
    model = helper.make_model(graph, ir_version=3, opset_imports=[helper.make_opsetid("", 13)])
    x = np.arange(6, dtype=np.float32)
    session = Session(model)
    for _ in range(2):
        got = session.run({"x": x})
        np.testing.assert_array_equal(got["a"], x[:3])
    with pytest.raises(ExecutionError):  # -(-1) twice is 2 of 6: Split refuses
        session.run({"x": x, "n": np.array([-1], np.int64)})
    x4 = np.arange(4, dtype=np.float32)
    got = session.run({"x": x4, "n": np.array([-2], np.int64)})
    np.testing.assert_array_equal(got["a"], x4[:2])
    np.testing.assert_array_equal(got["b"], x4[2:])
    np.testing.assert_array_equal(session.run({"x": x})["b"], x[3:])
