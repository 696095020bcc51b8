"""Editing: merged undo steps, model fields, initializers, palette, clean up, extract,
recovery after a crash, the unsaved-work prompt, save with external data."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

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


def _commit(editor, text: str) -> None:  # type: ignore[no-untyped-def]
    editor.setText(text)
    editor.textEdited.emit(text)
    editor.editingFinished.emit()


def test_consecutive_edits_of_one_field_merge_into_one_undo_step(opened) -> None:  # type: ignore[no-untyped-def]
    w = opened
    w.properties.show_node_properties("main", 0)
    editor = w.properties_dock.editor("Attributes", "strides")
    _commit(editor, "2, 2")
    w.edits.wait_validated()
    editor = w.properties_dock.editor("Attributes", "strides")
    _commit(editor, "3, 3")
    w.edits.undo()
    strides = next(a for a in w.session.doc.main_scope.nodes[0].attribute if a.name == "strides")
    assert list(strides.ints) == [1, 1]
    assert not w.session.doc.can_undo and not w.session.doc.is_modified
    assert not w.windowTitle().startswith("m.onnx *")


def test_model_fields_opset_and_metadata(opened) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.model.commands import SetMetadataProp

    w = opened
    w.properties.show_model_properties()
    dock = w.properties_dock
    _commit(dock.editor("Model", "producer_name"), "my-tool")
    assert w.session.doc.model.producer_name == "my-tool"
    w.edits.wait_validated()
    ir = w.properties_dock.editor("Model", "ir_version")
    ir.setText("x")
    ir.textEdited.emit("x")
    assert "must be an integer" in ir.error
    _commit(w.properties_dock.editor("Model", "opset ai.onnx"), "18")
    assert w.session.doc.model.opset_import[0].version == 18
    assert w.edits.execute(SetMetadataProp("model", "author", "me"))
    w.edits.wait_validated()
    _commit(w.properties_dock.editor("Metadata", "author"), "you")
    assert w.session.doc.model.metadata_props[0].value == "you"
    # node-level metadata and doc strings
    assert w.edits.execute(SetMetadataProp(("main", 1), "note", "checked"))
    w.properties.show_node_properties("main", 1)
    _commit(w.properties_dock.editor("Node", "doc"), "the activation")
    assert w.session.doc.main_scope.nodes[1].doc_string == "the activation"
    assert w.properties_dock.editor("Node", "metadata note").text() == "checked"


def test_initializer_export_replace_and_turn_into_input(opened, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.model import surgery

    w = opened
    out = str(tmp_path / "W.npy")
    assert w.surgery.export_initializer("main", "W", out)
    weights = np.load(out)
    assert weights.shape == (4, 3, 3, 3)
    np.save(out, weights * 2)
    assert w.surgery.replace_initializer("main", "W", out)
    replaced = w.session.doc.tensor_array(w.session.doc.model.graph.initializer[0])
    assert np.allclose(replaced, weights * 2)
    assert w.edits.execute(lambda d: surgery.initializer_to_input(d, "main", "B"))
    assert "B" in w.session.doc.main_scope.input_names()
    w.edits.wait_validated()
    assert not [d for d in w.edits.diagnostics if d.severity.value == "error"]
    # and back, with data from a file
    bias = str(tmp_path / "B.npy")
    np.save(bias, np.arange(4, dtype=np.float32))
    assert w.surgery.input_to_initializer("main", "B", bias)
    assert "B" not in w.session.doc.main_scope.input_names()
    assert "B" in w.session.doc.main_scope.initializer_names()


def test_palette_adds_a_node_and_the_validator_names_what_is_missing(opened) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.edit.operator_palette import OperatorPalette

    w = opened
    palette = OperatorPalette(w.session.doc, w)
    palette.search.setText("sigmoid")
    assert palette.current() == ("Sigmoid", "")
    assert "Sigmoid" in palette.doc_view.toPlainText()
    palette.chosen.connect(lambda op, domain: w.surgery.add_node("main", op, domain))
    palette.accept_current()
    node = w.session.doc.main_scope.nodes[-1]
    assert node.op_type == "Sigmoid" and list(node.input) == [""]
    w.edits.wait_validated()
    assert any(d.location.node == node.name for d in w.edits.diagnostics)
    # wire it with the picker, then clean up removes it again (its output is unused)
    w.properties.show_node_properties("main", len(w.session.doc.main_scope.nodes) - 1)
    picker = w.properties_dock.editor("Inputs", "X")
    picker.setCurrentIndex(picker.findData("conv_out"))
    picker.activated.emit(picker.currentIndex())
    assert w.session.doc.main_scope.nodes[-1].input[0] == "conv_out"
    assert w.surgery.clean_up()
    assert "Sigmoid" not in {n.op_type for n in w.session.doc.main_scope.nodes}


def test_extract_between_values_into_a_new_model(opened, tmp_path) -> None:  # type: ignore[no-untyped-def]
    w = opened
    target = str(tmp_path / "part.onnx")
    assert w.surgery.extract_to(["x"], ["relu_out"], target)
    part = onnx.load(target)
    onnx.checker.check_model(part, full_check=True)
    assert [n.op_type for n in part.graph.node] == ["Conv", "Relu"]
    assert not w.surgery.extract_to(["conv_out"], ["y"], target)  # 'trip' is needed, not given
    assert "cannot extract" in w.diagnostics_dock.diagnostics[0].message


def test_recovery_snapshot_restores_unsaved_edits(opened, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.model.recovery import pending

    w = opened
    assert w.surgery.make_output("main", "relu_out")
    w.edits.autosave_now()
    w.edits.wait_autosaved()  # (written by a thread)
    entries = pending()
    assert len(entries) == 1 and entries[0].last_edit == "Make 'relu_out' an output"
    # a new session after a crash restores it as unsaved work on the same file
    w.edits.attach(None)
    w.files.restore_recovery(entries[0])
    assert "relu_out" in w.session.doc.main_scope.output_names()
    assert w.session.doc.path == str(tmp_path / "m.onnx")
    assert w.windowTitle().startswith("m.onnx *")
    assert len(pending()) == 1  # the restored, still unsaved, state is snapshotted again
    assert w.files.save_to(w.session.doc.path)
    assert pending() == []


def test_closing_unsaved_work_asks_first(opened) -> None:  # type: ignore[no-untyped-def]
    w = opened
    assert w.surgery.make_output("main", "relu_out")
    w.prompter.unsaved = "cancel"
    w.close()
    assert w.isVisible() and w.session.doc is not None
    w.files.close_model()
    assert w.session.doc is not None
    assert [kind for kind, _name in w.prompter.asked] == ["unsaved", "unsaved"]
    w.prompter.unsaved = "discard"
    w.files.close_model()
    assert w.session.doc is None


def test_save_as_with_external_data(opened, tmp_path) -> None:  # type: ignore[no-untyped-def]
    w = opened
    w.properties.show_value("main", "relu_out")
    _commit(w.properties_dock.editor("Value", "name"), "act")
    target = str(tmp_path / "out" / "ext.onnx")
    os.makedirs(os.path.dirname(target))
    # threshold: the 432-byte weight goes external only with a small threshold
    w.session.doc.save(target, external_data="external", threshold=64)
    assert os.listdir(os.path.dirname(target)) != ["ext.onnx"]
    again = Document.open(target)
    assert "act" in again.scope("main").children[0].nodes[1].input
    assert np.allclose(again.tensor_array(again.model.graph.initializer[0]).shape, (4, 3, 3, 3))


def test_alt_drag_from_an_input_pill_to_a_node_wires_it(opened, qtbot) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt

    w = opened
    w.view.fit()
    nodes = w.graph_scene.nodes
    source = nodes["main|in:x"]
    relu_index = w.session.doc.main_scope.node_index("relu")
    target = nodes[f"main#{relu_index}"]
    viewport = w.view.viewport()
    start = w.view.mapFromScene(source.sceneBoundingRect().center())
    end = w.view.mapFromScene(target.sceneBoundingRect().center())
    qtbot.mousePress(viewport, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.AltModifier, start)
    qtbot.mouseMove(viewport, end)
    qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.AltModifier, end)
    assert w.session.doc.main_scope.nodes[relu_index].input[0] == "x"
    assert w.session.doc.undo_label == "Rewire input 0 to 'x'"


def test_edit_a_node_inside_a_loop_body(opened) -> None:  # type: ignore[no-untyped-def]
    w = opened
    body = w.session.doc.scope("main").children[0].path
    index = w.session.doc.scope(body).node_index("body_add")
    w.properties.show_node_properties(body, index)
    _commit(w.properties_dock.editor("Node", "name"), "accumulate")
    assert w.session.doc.scope(body).nodes[index].name == "accumulate"
    picker = w.properties_dock.editor("Inputs", "B")
    names = [picker.itemData(i) for i in range(picker.count())]
    assert {"acc_in", "relu_out", "x"} <= set(names)  # own names and the outer ones
