"""Every pane follows the open document (issue #18 items 2, 3, 5, 10), driven as a user
would: typing in the Properties dock, clicking boxes on the canvas, opening another
model, stepping a run with a pause between the steps."""

from __future__ import annotations

import re
import time

import numpy as np
import onnx
import pytest
from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtWidgets import QApplication

from tests.runtime.engine_models import chain_model
from tests.ui.edit_models import conv_loop_if_model, write
from tests.ui.tables import row_count

pytestmark = pytest.mark.qt

CHAIN_FEEDS = {"x": np.array([1.0, 2.0, 3.0], np.float32)}


def _open(window, path: str) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(path, background=False)
    window.wait_idle()


def _type(qtbot, editor, text: str) -> None:  # type: ignore[no-untyped-def]
    editor.selectAll()
    qtbot.keyClicks(editor, text)
    qtbot.keyClick(editor, Qt.Key.Key_Return)


def _value_row(window, key: str) -> str:  # type: ignore[no-untyped-def]
    return next(r.value for r in window.properties_dock.rows() if r.key == key)


def _click(qtbot, window, item_id: str, y_offset: float = 8.0) -> None:  # type: ignore[no-untyped-def]
    """Click a box on the canvas (its title unless ``y_offset`` says where)."""
    node = window.graph_scene.nodes[item_id]
    window.view.ensureVisible(node, 20, 20)
    rect = node.sceneBoundingRect()
    point = window.view.mapFromScene(rect.center().x(), rect.top() + y_offset)
    qtbot.mouseClick(window.view.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(point))


def test_the_value_pane_follows_renames_typed_in_it(window, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _open(window, write(conv_loop_if_model(), str(tmp_path / "m.onnx")))
    window.properties.show_value("main", "relu_out")
    producer = _value_row(window, "producer")
    _type(qtbot, window.properties_dock.editor("Value", "name"), "act")
    assert "act" in window.session.doc.main_scope.definitions
    # the pane shows the renamed value, still defined by the same node
    assert window.properties_dock.subject == ("value", "main", "act")
    assert _value_row(window, "name") == "act"
    assert _value_row(window, "producer") == producer
    # a second rename typed in the same pane is the value's, not refused
    _type(qtbot, window.properties_dock.editor("Value", "name"), "act2")
    assert window.edits.refusal is None
    assert "act2" in window.session.doc.main_scope.definitions
    assert _value_row(window, "name") == "act2"
    # undo brings the pane back with the name
    window.edits.undo()
    assert _value_row(window, "name") == "act"


def test_clicking_the_selected_node_again_brings_its_properties_back(
    window, qtbot, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    _open(window, write(conv_loop_if_model(), str(tmp_path / "m.onnx")))
    conv = next(i for i, n in window.graph_scene.nodes.items() if n.data_item.title == "Conv")
    _click(qtbot, window, conv)
    index = window.graph_scene.nodes[conv].data_item.node_index
    assert window.properties_dock.subject == ("node", "main", index)
    # the pane moves on: a value, then the node's own weight row
    window.properties.show_value("main", "relu_out")
    assert window.properties_dock.subject[0] == "value"
    _click(qtbot, window, conv)
    assert window.properties_dock.subject == ("node", "main", index)
    node = window.graph_scene.nodes[conv]
    rows = node.data_item.rows
    assert rows, "the Conv box shows its weight rows"
    height = int(node.boundingRect().height())
    ys = [y for y in range(height) if node.row_at(y) == rows[-1].name]
    row_y = (ys[0] + ys[-1]) / 2  # the middle of the last row
    _click(qtbot, window, conv, row_y)
    assert window.properties_dock.subject == ("value", "main", rows[-1].name)
    _click(qtbot, window, conv)
    assert window.properties_dock.subject == ("node", "main", index)


def test_opening_another_model_clears_every_trace_of_the_old_one(window, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    first = str(tmp_path / "chain.onnx")
    onnx.save(chain_model(), first)
    _open(window, first)
    panel = window.run_panel
    assert panel.run(CHAIN_FEEDS)
    assert panel.controller.wait(30)
    window.wait_idle()
    assert panel.inspect_value("main", "r")
    inspector = window.inspector_dock.inspector
    assert inspector.array is not None and inspector.header.text()
    assert panel.widget.frames.count() > 0 and row_count(panel.widget.values) > 0
    panel.compare()
    panel.wait_compare()
    assert panel.widget.compare_status.text()
    window.edits.refuse("no such thing")
    assert "edit refused" in window.statusBar().currentMessage()
    _open(window, write(conv_loop_if_model(), str(tmp_path / "other.onnx")))
    assert inspector.array is None and "nothing selected" in inspector.header.text()
    assert panel.widget.frames.count() == 0 and row_count(panel.widget.values) == 0
    assert panel.widget.compare_status.text() == ""
    assert panel.status_text() == "not started"
    assert window.statusBar().currentMessage() == ""


def test_a_stepped_run_reports_compute_time_not_the_time_spent_paused(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "chain.onnx")
    onnx.save(chain_model(), path)
    _open(window, path)
    panel = window.run_panel
    assert panel.run(CHAIN_FEEDS, mode="step")
    assert panel.controller.wait(30)
    paused = 1.0
    time.sleep(paused)  # the user looks at the paused run
    assert panel.continue_()
    assert panel.controller.wait(30)
    window.wait_idle()
    text = panel.status_text()
    found = re.match(r"finished: ([0-9.]+) ms of compute", text)
    assert found, text
    assert float(found.group(1)) < paused * 1000
    assert float(found.group(1)) == pytest.approx(panel.controller.compute_seconds * 1000, abs=0.1)


def test_a_newly_opened_model_is_editable_in_the_properties_dock_at_once(
    window, qtbot, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    _open(window, write(conv_loop_if_model(), str(tmp_path / "m.onnx")))
    assert window.properties_dock.subject == ("model",)
    editor = window.properties_dock.editor("Model", "doc")
    assert editor is not None  # the pane was built with the edit pipeline attached
    _type(qtbot, editor, "my model")
    assert window.session.doc.model.doc_string == "my model"
    assert window.windowTitle().startswith("m.onnx *")


def test_help_shows_where_the_log_file_is(window, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtGui import QDesktopServices

    monkeypatch.setenv("ONNXVIZ_LOG_DIR", str(tmp_path / "logs"))
    opened: list[str] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()))
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    action = next(a for a in help_menu.actions() if a.text() == "Open &Log Folder")
    action.trigger()
    assert opened == [str(tmp_path / "logs")]
    assert str(tmp_path / "logs") in window.statusBar().currentMessage()


def test_internal_errors_go_to_the_log_file(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import logging

    from onnxviz.ui.log_file import setup_logging

    monkeypatch.setenv("ONNXVIZ_LOG_DIR", str(tmp_path / "logs"))
    root = logging.getLogger("onnxviz")
    before = list(root.handlers)
    try:
        path = setup_logging()
        assert path == str(tmp_path / "logs" / "onnxviz.log")
        try:
            raise ValueError("a bug in an edit")
        except ValueError:
            logging.getLogger("onnxviz.ui.edit.controller").exception("an edit failed")
        for handler in root.handlers:
            handler.flush()
        with open(path, encoding="utf-8") as log:
            text = log.read()
        assert "an edit failed" in text and "ValueError: a bug in an edit" in text
    finally:
        for handler in root.handlers:
            if handler not in before:
                root.removeHandler(handler)
                handler.close()


def test_editing_the_model_under_a_paused_run_stops_it(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.model import commands

    path = str(tmp_path / "chain.onnx")
    onnx.save(chain_model(), path)
    _open(window, path)
    panel = window.run_panel
    panel.set_breakpoint("main::relu", True)
    assert panel.run(CHAIN_FEEDS, mode="step")
    assert panel.controller.wait(30)
    window.wait_idle()
    assert panel.status_text().startswith("paused")
    assert row_count(panel.widget.values) > 0
    assert window.edits.execute(commands.SetDocString("main", "edited while paused"))
    window.wait_idle()
    assert panel.controller.session is None and panel.status_text() == "not started"
    assert panel.widget.frames.count() == 0 and row_count(panel.widget.values) == 0
    assert "the run was stopped" in window.statusBar().currentMessage()
    assert panel.controller.breakpoints == {"main::relu"}  # the user's breakpoints stay
    # a new run of the edited model stops at the kept breakpoint
    assert panel.run(CHAIN_FEEDS)
    assert panel.controller.wait(30)
    window.wait_idle()
    assert panel.status_text().startswith("breakpoint hit at main::relu")


def test_a_model_replaced_by_another_leaves_memory(window, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every background job of the first model (its open, its validation after an edit,
    its shape inference, a run and a compare) has reported: none may keep the model
    alive once another one is open (a user opening model after model ran out of memory)."""
    import gc
    import weakref

    first = str(tmp_path / "chain.onnx")
    onnx.save(chain_model(), first)
    window.files.open_path(first, background=True)
    window.wait_idle()
    window.edits.wait_validated()
    window.navigation.start_inference()
    assert window.navigation.inference_task is not None
    qtbot.waitUntil(lambda: window.navigation.inference_task.done, timeout=30_000)
    window.properties.show_value("main", "r")
    _type(qtbot, window.properties_dock.editor("Value", "name"), "renamed")
    window.edits.wait_validated()
    panel = window.run_panel
    assert panel.run(CHAIN_FEEDS)
    assert panel.controller.wait(30)
    panel.compare()
    panel.wait_compare()
    window.wait_idle()
    old = weakref.ref(window.session.doc)
    old_validator = weakref.ref(window.session.validator)
    old_presenter = weakref.ref(window.session.presenter)
    window.files.open_path(
        write(conv_loop_if_model(), str(tmp_path / "other.onnx")), background=True
    )
    window.wait_idle()
    window.edits.wait_validated()
    assert window.session.doc is not None and window.session.doc.path.endswith("other.onnx")
    # as the application's own event loop does between turns
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()
    assert old() is None and old_validator() is None and old_presenter() is None
