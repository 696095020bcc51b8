"""Graph surgery: each compound edit does what a user expects and undoes in one step."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxviz.check  # noqa: F401  (hands surgery its shape inference, run in the worker)
from onnxviz.errors import EditError
from onnxviz.model import surgery
from onnxviz.model.document import Document
from tests.model.builders import loop_model


def chain_model() -> onnx.ModelProto:
    """x -> Relu(a) -> Neg(b) -> Add(b, w) -> y, plus a dead branch Sigmoid(x) -> Exp."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Neg", ["a"], ["b"], name="neg"),
            helper.make_node("Add", ["b", "w"], ["y"], name="add"),
            helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
            helper.make_node("Exp", ["s"], ["e"], name="exp"),
        ],
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [
            numpy_helper.from_array(np.ones(3, np.float32), "w"),
            numpy_helper.from_array(np.ones(3, np.float32), "unused_w"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]


X = np.array([-1.0, 0.5, 2.0], np.float32)


def _undo_restores(doc: Document, before: bytes) -> None:
    doc.undo()
    assert doc.model.SerializeToString() == before


def test_bypass_reconnects_consumers():
    doc = Document.from_model(chain_model())
    before = doc.model.SerializeToString()
    surgery.bypass_node(doc, "main", 1)  # Neg
    assert [n.name for n in doc.model.graph.node] == ["relu", "add", "sig", "exp"]
    assert list(doc.model.graph.node[1].input) == ["a", "w"]
    onnx.checker.check_model(doc.model)
    np.testing.assert_allclose(_run(doc.model, X), np.maximum(X, 0) + 1)
    _undo_restores(doc, before)


def test_bypass_of_a_graph_output_producer_renames_the_output():
    doc = Document.from_model(chain_model())
    surgery.bypass_node(doc, "main", 2)  # Add produces the graph output
    assert [o.name for o in doc.model.graph.output] == ["b"]
    onnx.checker.check_model(doc.model)


def test_bypass_refused_when_types_differ():
    model = chain_model()
    model.graph.node[1].op_type = "Cast"
    model.graph.node[1].attribute.append(helper.make_attribute("to", TensorProto.INT64))
    model.graph.value_info.extend(
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("b", TensorProto.INT64, [3]),
        ]
    )
    doc = Document.from_model(model)
    with pytest.raises(EditError, match="float32"):
        surgery.bypass_node(doc, "main", 1)
    assert not doc.can_undo


def test_bypass_rewires_uses_in_nested_graphs():
    doc = Document.from_model(loop_model())
    surgery.bypass_node(doc, "main", 0)  # Relu producing 'scale', used inside the body
    body = doc.scope("main/body:loop")
    assert list(body.nodes[1].input) == ["acc_in", "x"]
    assert list(doc.scope("main/body:loop/then_branch:body_if").nodes[0].input) == ["acc_in", "x"]


def test_delete_with_dead_ancestors():
    doc = Document.from_model(chain_model())
    before = doc.model.SerializeToString()
    surgery.delete_with_ancestors(doc, "main", 4)  # Exp: Sigmoid only fed it
    assert [n.name for n in doc.model.graph.node] == ["relu", "neg", "add"]
    _undo_restores(doc, before)
    # Deleting Add kills Neg and Relu too, but not the Sigmoid branch.
    surgery.delete_with_ancestors(doc, "main", 2)
    assert [n.name for n in doc.model.graph.node] == ["sig", "exp"]


def test_insert_on_edge_keeps_order_and_semantics():
    doc = Document.from_model(chain_model())
    before = doc.model.SerializeToString()
    surgery.insert_on_edge(doc, "main", "a", "Relu")
    names = [n.op_type for n in doc.model.graph.node]
    assert names[:3] == ["Relu", "Relu", "Neg"]
    assert list(doc.model.graph.node[2].input) == ["a_relu"]
    onnx.checker.check_model(doc.model)
    np.testing.assert_allclose(_run(doc.model, X), -np.maximum(X, 0) + 1)
    _undo_restores(doc, before)


def test_make_intermediate_an_output_with_its_type():
    doc = Document.from_model(chain_model())
    surgery.make_graph_output(doc, "main", "a")
    out = doc.model.graph.output[1]
    assert out.name == "a" and out.type.tensor_type.elem_type == TensorProto.FLOAT
    res = ort.InferenceSession(doc.model.SerializeToString()).run(["a"], {"x": X})[0]
    np.testing.assert_allclose(res, np.maximum(X, 0))
    with pytest.raises(EditError, match="already an output"):
        surgery.make_graph_output(doc, "main", "a")
    surgery.remove_graph_output(doc, "main", "a")
    assert [o.name for o in doc.model.graph.output] == ["y"]


def test_initializer_to_input_and_back():
    doc = Document.from_model(chain_model())
    surgery.initializer_to_input(doc, "main", "w")
    assert [i.name for i in doc.model.graph.input] == ["x", "w"]
    assert "w" not in [t.name for t in doc.model.graph.initializer]
    surgery.input_to_initializer(
        doc, "main", numpy_helper.from_array(np.full(3, 2.0, np.float32), "w")
    )
    np.testing.assert_allclose(_run(doc.model, X), -np.maximum(X, 0) + 2)


def test_clean_up_removes_dead_nodes_and_initializers():
    doc = Document.from_model(chain_model())
    before = doc.model.SerializeToString()
    assert surgery.unused(doc) == {"main": ([3, 4], ["unused_w"])}
    surgery.clean_up(doc)
    assert [n.name for n in doc.model.graph.node] == ["relu", "neg", "add"]
    assert [t.name for t in doc.model.graph.initializer] == ["w"]
    _undo_restores(doc, before)


def test_extract_between_values():
    doc = Document.from_model(chain_model())
    sub = surgery.extract(doc, ["a"], ["y"])
    onnx.checker.check_model(sub, full_check=True)
    assert [n.name for n in sub.graph.node] == ["neg", "add"]
    out = ort.InferenceSession(sub.SerializeToString()).run(None, {"a": X})[0]
    np.testing.assert_allclose(out, -X + 1)
    with pytest.raises(EditError, match="neither computed"):
        surgery.extract(doc, ["b"], ["e"])
