"""A new user on a 1280x720 screen runs a torch-exported model (issue 18, tried again on
fresh models): the Run dock appears without taking most of the height from the canvas,
and its Values table shows numbers next to long torch value names."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.ui.clicks import select_box
from tests.ui.tables import cell_text, cell_tooltip, row_count

pytestmark = pytest.mark.qt


def _torch_named_chain(layers: int = 4) -> onnx.ModelProto:
    """Relu/Neg layers with value names as long as torch writes them."""
    nodes, previous = [], "pixels"
    for k in range(layers):
        out = f"/model/encoder/stages/stages.{k}/block/pointwise_conv/Relu_output_{k}"
        nodes.append(helper.make_node("Relu" if k % 2 else "Neg", [previous], [out]))
        previous = out
    nodes.append(helper.make_node("Identity", [previous], ["logits"]))
    t = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "chain",
        [t("pixels", TensorProto.FLOAT, [1, 3, 4, 4])],
        [t("logits", TensorProto.FLOAT, [1, 3, 4, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _open(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "chain.onnx")
    onnx.save(_torch_named_chain(), path)
    window.files.open_path(path, background=False)


def test_the_run_dock_leaves_the_canvas_most_of_a_small_window(window, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    window.resize(1280, 720)
    _open(window, tmp_path)
    before = window.view.height()
    window.actions_.run_panel.trigger()  # Run > Show Run Panel
    dock = window.run_dock
    qtbot.waitUntil(lambda: dock.isVisible())
    qtbot.wait(50)  # the share is set after the dock layout placed the dock
    assert dock.height() <= max(0.5 * window.height(), dock.minimumSizeHint().height())
    assert window.view.height() >= 0.4 * before
    assert window.height() == 720


def test_the_values_table_shows_numbers_next_to_long_names(window, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    window.resize(1280, 720)
    _open(window, tmp_path)
    panel = window.run_panel
    window.diagnostics_dock.show()  # the two share the bottom of the window
    window.actions_.run_panel.trigger()
    qtbot.waitUntil(lambda: window.run_dock.isVisible())
    pixels = np.arange(48, dtype=np.float32).reshape(1, 3, 4, 4) - 20
    assert panel.run({"pixels": pixels})
    assert panel.controller.wait(30)
    window.wait_idle()
    table = panel.widget.values
    qtbot.waitUntil(lambda: row_count(table) > 0)
    qtbot.wait(50)
    viewport = table.viewport().width()
    header = table.horizontalHeader()
    names = header.sectionSize(0)
    assert names <= 0.5 * viewport
    # the type column and the start of the min column are on screen
    assert header.sectionPosition(2) + 20 <= viewport
    row = next(
        r
        for r in range(row_count(table))
        if cell_text(table, r).startswith("/model/encoder/stages/stages.3")
    )
    name = cell_text(table, row)
    assert table.fontMetrics().horizontalAdvance(name) > names  # elided on screen ...
    assert cell_tooltip(table, row) == name  # ... and whole in its tooltip
    # its min, as numpy works it out along the chain
    expected = pixels
    for k in range(4):
        expected = np.maximum(expected, 0) if k % 2 else -expected
    assert float(cell_text(table, row, 2)) == float(expected.min())
    row2 = next(r for r in range(row_count(table)) if "stages.2" in cell_text(table, r))
    assert float(cell_text(table, row2, 2)) == float((-np.maximum(-pixels, 0)).min())


def test_inspecting_a_value_after_a_run_keeps_the_window_on_a_720_screen(
    window, qtbot, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    window.resize(1280, 720)
    _open(window, tmp_path)
    panel = window.run_panel
    window.diagnostics_dock.show()
    pixels = np.arange(48, dtype=np.float32).reshape(1, 3, 4, 4) - 20
    assert panel.run({"pixels": pixels})  # shows the Run dock
    assert panel.controller.wait(30)
    window.wait_idle()
    assert panel.inspect_value("main", "logits")
    window.inspector_dock.show()
    window.inspector_dock.raise_()
    qtbot.waitUntil(lambda: window.inspector_dock.isVisible())
    qtbot.wait(50)
    assert window.minimumSizeHint().height() <= 720
    assert window.height() == 720
    inspector = window.inspector_dock.inspector
    assert inspector.hist.isVisible() and inspector.hist.height() >= 90


def test_an_input_choice_shows_the_start_of_a_long_value_name(window, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt

    window.resize(1280, 720)
    _open(window, tmp_path)
    select_box(window, "Relu")
    editor = window.properties_dock.editor("Inputs", "X")
    qtbot.waitUntil(editor.isVisible)
    line = editor.lineEdit()
    name = window.session.doc.main_scope.nodes[1].input[0]
    assert line.text().startswith(name)
    assert line.fontMetrics().horizontalAdvance(line.text()) > line.width()  # it cannot all show
    assert line.cursorPosition() == 0  # so its start, the name, is what shows
    assert editor.toolTip() == line.text()
    # choosing another value with the keyboard shows that one's start too
    before = editor.currentIndex()
    editor.setFocus()
    qtbot.keyClick(editor, Qt.Key.Key_Up if before else Qt.Key.Key_Down)
    assert editor.currentIndex() != before and line.cursorPosition() == 0
