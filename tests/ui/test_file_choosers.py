"""Every file chooser a widget opens goes through the window's Prompter, so a user's
pick (or Cancel) can be scripted: the tensor inspector's Export, the run inputs' file
Browse, a tensor attribute's npy… button and File > Compare With…."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

from tests.model import diff_corpus
from tests.ui.scripted_prompter import ScriptedPrompter

pytestmark = pytest.mark.qt


def test_inspector_export_writes_where_the_user_chose(qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.inspector import InspectorDock

    prompter = ScriptedPrompter()
    dock = InspectorDock(prompter=prompter)
    qtbot.addWidget(dock)
    value = np.arange(12, dtype=np.float32).reshape(3, 4)
    dock.show_value("conv out", value)
    qtbot.mouseClick(dock.inspector.export_button, Qt.MouseButton.LeftButton)  # cancelled
    assert prompter.asked == [("save_file", "Export tensor")]
    assert list(tmp_path.iterdir()) == []
    target = tmp_path / "picked.npy"
    prompter.files = [str(target)]
    qtbot.mouseClick(dock.inspector.export_button, Qt.MouseButton.LeftButton)
    np.testing.assert_array_equal(np.load(target), value)


def test_run_inputs_browse_fills_the_chosen_path(qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.runtime.inputs import spec_of
    from onnxviz.ui.run.inputs_dialog import InputsDialog

    spec = spec_of("x", helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]).type)
    prompter = ScriptedPrompter()
    dialog = InputsDialog([spec], {}, {}, None, prompter)
    qtbot.addWidget(dialog)
    (row,) = dialog.rows
    row.mode.setCurrentIndex(row.mode.findData("file"))
    qtbot.mouseClick(row.browse_button, Qt.MouseButton.LeftButton)  # cancelled
    assert row.path.text() == ""
    prompter.files = [str(tmp_path / "x.npy")]
    qtbot.mouseClick(row.browse_button, Qt.MouseButton.LeftButton)
    assert row.path.text() == str(tmp_path / "x.npy")
    assert [a for a in prompter.asked if a[0] == "open_file"] == [("open_file", "Value for x")] * 2


def test_npy_button_loads_a_constants_tensor_from_the_chosen_file(window, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    start = np.zeros(3, np.float32)
    model = helper.make_model(
        helper.make_graph(
            [
                helper.make_node(
                    "Constant", [], ["c"], name="const", value=numpy_helper.from_array(start)
                ),
                helper.make_node("Add", ["x", "c"], ["y"], name="add"),
            ],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    window.files.open_path(str(path), background=False)
    window.properties.show_node_properties("main", 0)
    box = window.properties_dock.editor("Attributes", "value")
    (button,) = [b for b in box.findChildren(QPushButton) if b.text() == "npy…"]
    wanted = np.array([1.5, -2.0, 4.0], np.float32)
    np.save(tmp_path / "c.npy", wanted)
    window.prompter.files = [str(tmp_path / "c.npy")]
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    node = window.session.doc.model.graph.node[0]
    np.testing.assert_array_equal(numpy_helper.to_array(node.attribute[0].t), wanted)


def test_compare_with_asks_for_the_other_file(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(diff_corpus.mlp(), str(a))
    onnx.save(diff_corpus.mlp(layers=2), str(b))
    window.files.open_path(str(a), background=False)
    compare_with = window.compare_actions[0]
    compare_with.trigger()  # cancelled: no window
    assert window.compare_window is None
    window.prompter.files = [str(b)]
    compare_with.trigger()
    compare = window.compare_window
    assert compare is not None and compare.changes  # one layer fewer
    assert [q for q in window.prompter.asked if q[0] == "open_file"] == [
        ("open_file", "Compare With")
    ] * 2
    compare.close()


def test_compare_with_an_unreadable_file_warns(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    a, bad = tmp_path / "a.onnx", tmp_path / "bad.onnx"
    onnx.save(diff_corpus.mlp(), str(a))
    bad.write_bytes(b"not a model")
    window.files.open_path(str(a), background=False)
    window.prompter.files = [str(bad)]
    window.compare_actions[0].trigger()
    assert window.compare_window is None
    assert window.prompter.warnings and window.prompter.warnings[-1].startswith("Compare: ")
