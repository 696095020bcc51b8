"""Editing in the window: property editors, surgery, undo/redo, save, live validation."""

from __future__ import annotations

import onnx
import pytest
from onnx import AttributeProto

from onnxviz.check import validate
from onnxviz.model.document import Document
from tests.ui.edit_models import conv_loop_if_model, write

pytestmark = pytest.mark.qt


@pytest.fixture
def opened(window, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ONNXVIZ_RECOVERY_DIR", str(tmp_path / "recovery"))
    path = write(conv_loop_if_model(), str(tmp_path / "m.onnx"))
    window.files.open_path(path, background=False)
    window.wait_idle()
    return window


def _node_index(window, name: str, path: str = "main") -> int:  # type: ignore[no-untyped-def]
    index = window.session.doc.scope(path).node_index(name)
    assert index is not None
    return index


def _select_node(window, name: str, path: str = "main"):  # type: ignore[no-untyped-def]
    window.properties.show_node_properties(path, _node_index(window, name, path))
    return window.properties_dock


def _attr(window, node: str, name: str):  # type: ignore[no-untyped-def]
    n = window.session.doc.scope("main").nodes[_node_index(window, node)]
    return next(a for a in n.attribute if a.name == name)


def _type_and_commit(editor, text: str) -> None:  # type: ignore[no-untyped-def]
    editor.setText(text)
    editor.textEdited.emit(text)
    editor.editingFinished.emit()


def test_edit_conv_strides_in_the_properties_dock(opened) -> None:  # type: ignore[no-untyped-def]
    w = opened
    dock = _select_node(w, "conv")
    editor = dock.editor("Attributes", "strides")
    assert editor.text() == "1, 1"
    _type_and_commit(editor, "2, 2")
    assert list(_attr(w, "conv", "strides").ints) == [2, 2]
    assert w.session.doc.undo_label == "Set attribute 'strides'"
    assert w.actions_.undo.text() == "&Undo Set attribute 'strides'"
    assert w.windowTitle().startswith("m.onnx *")
    # shapes on edges follow inference: conv_out is now 1x4x4x4
    w.edits.wait_validated()
    label = [e.data_edge.label for e in w.graph_scene.edge_items if e.data_edge.value == "conv_out"]
    assert label and "4,4]" in label[0].replace(" ", "")


def test_invalid_attribute_text_is_marked_and_never_applied(opened) -> None:  # type: ignore[no-untyped-def]
    w = opened
    before = w.session.doc.model.SerializeToString()
    dock = _select_node(w, "conv")
    editor = dock.editor("Attributes", "kernel_shape")
    editor.setText("3,x")
    editor.textEdited.emit("3,x")
    assert "'x' is not an integer" in editor.error
    assert "'x' is not an integer" in dock.message.text()
    editor.editingFinished.emit()
    assert w.session.doc.model.SerializeToString() == before
    assert not w.session.doc.can_undo


def test_enum_attribute_gets_a_choice_list_and_graph_attribute_a_button(opened) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtWidgets import QComboBox, QPushButton

    w = opened
    dock = _select_node(w, "conv")
    auto_pad = dock.editor("Attributes", "auto_pad")
    # not set on the node: the default shows, and picking another value sets it
    assert isinstance(auto_pad, QComboBox)
    assert [auto_pad.itemText(i) for i in range(auto_pad.count())] == [
        "NOTSET",
        "SAME_UPPER",
        "SAME_LOWER",
        "VALID",
    ]
    assert auto_pad.currentText() == "NOTSET"
    auto_pad.setCurrentIndex(1)
    auto_pad.activated.emit(1)
    assert _attr(w, "conv", "auto_pad").s == b"SAME_UPPER"
    assert w.session.doc.undo_label == "Set attribute 'auto_pad'"
    dock = _select_node(w, "branch")
    button = dock.editor("Attributes", "then_branch")
    assert isinstance(button, QPushButton) and button.isEnabled()
    assert button.text() == "Open (1 node)"
    button.click()
    w.wait_idle()
    assert w.session.presenter.root_path.endswith("then_branch:branch")


def test_rename_a_value_used_inside_a_loop_body(opened) -> None:  # type: ignore[no-untyped-def]
    w = opened
    w.properties.show_value("main", "relu_out")
    editor = w.properties_dock.editor("Value", "name")
    _type_and_commit(editor, "activation")
    body = w.session.doc.scope("main").children[0]
    assert "activation" in body.nodes[1].input
    assert w.session.doc.undo_label == "Rename 'relu_out' → 'activation'"
    w.edits.wait_validated()
    assert not [d for d in w.edits.diagnostics if d.severity.value == "error"]


def test_rename_to_an_existing_name_is_refused_with_reason(opened, qtbot) -> None:  # type: ignore[no-untyped-def]
    w = opened
    w.properties.show_value("main", "relu_out")
    editor = w.properties_dock.editor("Value", "name")
    editor.setText("conv_out")
    editor.textEdited.emit("conv_out")
    assert "already defined" in editor.error
    editor.editingFinished.emit()
    assert not w.session.doc.can_undo


def test_rewire_an_input_with_the_name_picker(opened) -> None:  # type: ignore[no-untyped-def]
    w = opened
    dock = _select_node(w, "relu")
    picker = dock.editor("Inputs", "X")
    names = [picker.itemData(i) for i in range(picker.count())]
    assert {"x", "conv_out", "W"} <= set(names)
    assert "acc_in" not in names  # a loop body's name is not visible in main
    picker.setCurrentIndex(names.index("x"))
    picker.activated.emit(picker.currentIndex())
    assert w.session.doc.main_scope.nodes[1].input[0] == "x"


def test_surgery_insert_bypass_output_symbolic_then_undo_redo_save(opened, tmp_path) -> None:  # type: ignore[no-untyped-def]
    w = opened
    original = w.session.doc.model.SerializeToString()
    assert w.surgery.delete_node("main", _node_index(w, "relu"), "bypass")
    scope = w.session.doc.main_scope
    assert "relu" not in {n.name for n in scope.nodes}
    assert scope.nodes[1].op_type == "Loop" and scope.nodes[1].input[2] == "conv_out"
    assert "conv_out" in scope.children[0].nodes[1].input  # the body's use followed
    assert w.surgery.insert_on_edge("main", "conv_out", "Relu")
    scope = w.session.doc.main_scope
    assert [n.op_type for n in scope.nodes[:3]] == ["Conv", "Relu", "Loop"]
    assert scope.nodes[2].input[2] == scope.nodes[1].output[0]
    assert w.surgery.make_output("main", "conv_out")
    assert "conv_out" in w.session.doc.main_scope.output_names()
    # make the batch dim of x symbolic in the graph properties
    w.properties.show_graph_properties("main")
    editor = w.properties_dock.editor("Inputs and outputs", "input x")
    _type_and_commit(editor, "float32[batch,3,8,8]")
    dim = w.session.doc.model.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_param == "batch"
    w.edits.wait_validated()
    assert not [d for d in w.edits.diagnostics if d.severity.value == "error"]
    # save and reopen; the saved model passes the checker and our validator
    saved = str(tmp_path / "saved.onnx")
    assert w.files.save_to(saved)
    assert not w.windowTitle().startswith("saved.onnx *")
    onnx.checker.check_model(onnx.load(saved), full_check=True)
    reopened = Document.open(saved)
    assert not [d for d in validate(reopened) if d.severity.value == "error"]
    assert reopened.model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    # undo everything: byte-identical; redo everything: the saved model again
    steps = 0
    while w.session.doc.can_undo:
        w.edits.undo()
        steps += 1
    assert steps == 4
    assert w.session.doc.model.SerializeToString() == original
    while w.session.doc.can_redo:
        w.edits.redo()
    assert w.session.doc.model.SerializeToString() == reopened.model.SerializeToString()
    assert not w.session.doc.is_modified


def test_deleting_a_used_producer_shows_the_diagnostic_and_badge(opened) -> None:  # type: ignore[no-untyped-def]
    w = opened
    assert w.surgery.delete_node("main", _node_index(w, "conv"), "plain")
    codes = {d.code for d in w.diagnostics_dock.diagnostics}
    assert "G004" in codes  # at once, from the quick check
    w.edits.wait_validated()
    g004 = [d for d in w.edits.diagnostics if d.code == "G004"]
    assert g004 and g004[0].location.node == "relu"
    w.wait_idle()
    relu_id = f"main#{_node_index(w, 'relu')}"
    assert w.graph_scene.nodes[relu_id].problems
    # clicking the diagnostic selects the node and shows its properties
    w.diagnostics.locate(g004[0])
    w.wait_idle()
    assert w.properties_dock.subject == ("node", "main", _node_index(w, "relu"))
    assert w.properties_dock.focused_field == "input:0"
    assert w.view.selected_node().data_item.node_index == _node_index(w, "relu")


def test_attribute_parsing_rules() -> None:
    from onnxviz.model.attribute_values import AttributeTextError, parse_attribute

    A = AttributeProto
    assert list(parse_attribute("k", "[3, 3]", A.INTS).ints) == [3, 3]
    assert list(parse_attribute("k", "", A.INTS).ints) == []
    assert parse_attribute("k", "", A.INTS).type == A.INTS
    assert parse_attribute("a", "0.5", A.FLOAT).f == 0.5
    with pytest.raises(AttributeTextError, match="item 2, 'x' is not an integer"):
        parse_attribute("k", "3,x", A.INTS)
    with pytest.raises(AttributeTextError, match="not one of"):
        parse_attribute("auto_pad", "SAME", A.STRING, ("NOTSET", "VALID"))
    t = parse_attribute("value", "int32 [[1, 2], [3, 4]]", A.TENSOR).t
    assert list(t.dims) == [2, 2] and t.data_type == onnx.TensorProto.INT32
