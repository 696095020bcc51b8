"""A refused edit reads as one clear sentence: the place it names is not repeated
(issue 18 item 9: "...already defined in graph 'main' (graph 'main')")."""

from __future__ import annotations

import pytest
from onnx import TensorProto
from onnx import helper as h

from onnxviz.errors import EditError
from onnxviz.model import commands as C
from onnxviz.model.document import Document


def _model():  # type: ignore[no-untyped-def]
    body = h.make_graph(
        [h.make_node("Neg", ["x"], ["inner"])],
        "body",
        [],
        [h.make_tensor_value_info("inner", TensorProto.FLOAT, [2])],
    )
    g = h.make_graph(
        [
            h.make_node("Relu", ["x"], ["r"]),
            h.make_node("Abs", ["r"], ["a"]),
            h.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body),
        ],
        "main",
        [
            h.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            h.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _refusal(command: C.Command) -> str:
    doc = Document.from_model(_model())
    with pytest.raises(EditError) as info:
        doc.execute(command)
    return str(info.value)


@pytest.mark.parametrize(
    "command",
    [
        C.RenameValue("main", "r", "a"),
        C.AddNode("main", h.make_node("Neg", ["x"], ["r"])),
        C.AddGraphEntry("main", "initializer", h.make_tensor("a", TensorProto.FLOAT, [1], [0.0])),
    ],
    ids=["rename", "add node", "add initializer"],
)
def test_the_graph_is_named_once(command: C.Command) -> None:
    text = _refusal(command)
    assert "already defined in graph 'main'" in text
    assert text.count("graph 'main'") == 1, text


def test_a_different_place_is_still_added() -> None:
    # refused in a branch because the name lives in main: both places say something
    doc = Document.from_model(_model())
    branch = doc.scope("main/then_branch:#2").path
    with pytest.raises(EditError) as info:
        doc.execute(C.RenameValue(branch, "inner", "r"))
    text = str(info.value)
    # each graph as the breadcrumbs name it, the path kept for the Location
    assert "graph 'main'" in text and "graph 'main > If#2 (then)'" in text, text
    assert info.value.graph_path == branch


def test_a_node_named_in_the_message_is_not_repeated() -> None:
    error = EditError("node 'conv1' has no input 3", graph_path="main", node="conv1")
    assert str(error) == "node 'conv1' has no input 3 (graph 'main')"
    assert str(EditError("no such input", node="conv1")) == "no such input (node 'conv1')"
