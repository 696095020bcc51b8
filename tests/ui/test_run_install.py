"""The main window's run panel: menu, shortcuts, toolbar, docks; badges open the
inspector; profile heat; the memory cap and what it dropped."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxviz.ui.canvas.items import EdgeItem
from tests.runtime.engine_models import chain_model, make, vi
from tests.ui.tables import column, row_count

pytestmark = pytest.mark.qt


def _open(window, tmp_path, model):  # type: ignore[no-untyped-def]
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    panel = window.run_panel
    window.files.open_path(path, background=False)
    window.wait_idle()
    return panel


def _run(window, panel, feeds) -> None:  # type: ignore[no-untyped-def]
    assert panel.run(feeds)
    assert panel.controller.wait(30)
    window.wait_idle()


def test_menu_shortcuts_toolbar_and_docks(window) -> None:  # type: ignore[no-untyped-def]
    panel = window.run_panel
    shortcuts = {
        a.text().replace("&", ""): a.shortcut().toString() for a in panel.run_menu.actions()
    }
    assert shortcuts["Run"] == "F5"
    assert shortcuts["Step"] == "F11"
    assert shortcuts["Step Over"] == "F10"
    assert shortcuts["Step Out"] == "Shift+F11"
    assert shortcuts["Toggle Breakpoint"] == "F9"
    assert shortcuts["Stop"] == "Shift+F5"
    assert "Run to Selected Node" in shortcuts and "Break on NaN/Inf" in shortcuts
    assert "Pause" in shortcuts and "Continue" in shortcuts
    menus = [a.text().replace("&", "") for a in window.menuBar().actions()]
    assert menus.count("Run") == 1
    assert panel.toolbar.objectName() == "toolbar.run" and len(panel.toolbar.actions()) >= 7
    assert window.run_dock.widget() is panel.widget
    assert panel.inspector_dock.objectName() == "dock.inspector"
    # nothing to run without a model
    assert not panel.act_run.isEnabled() and not panel.run({})


def test_badges_and_edges_open_the_inspector(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    panel = _open(window, tmp_path, chain_model())
    _run(window, panel, {"x": np.array([1.0, 2.0, 3.0], np.float32)})
    badge = next(b for b in panel.overlay.badges if b.parentItem().data_edge.value == "r")
    badge._on_click()
    ins = panel.inspector_dock.inspector
    np.testing.assert_allclose(ins.array, [2.0, 0.0, 3.5])
    assert not panel.inspector_dock.isHidden()
    edge = next(
        e
        for e in window.graph_scene.edge_items
        if isinstance(e, EdgeItem) and e.data_edge.value == "s"
    )
    window.graph_scene.clearSelection()
    edge.setSelected(True)
    np.testing.assert_allclose(ins.array, [2.0, -3.0, 3.5])


def test_profile_table_and_heat(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    panel = _open(window, tmp_path, chain_model())
    _run(window, panel, {"x": np.array([1.0, 2.0, 3.0], np.float32)})
    table = panel.widget.profile
    assert row_count(table) == 3
    assert set(column(table)) == {"main::add", "main::relu", "main::mul"}
    # slowest first, by the number (the text has 3 decimals: ties there are not ties here)
    totals = [table.model().item_at(r).seconds for r in range(3)]
    assert totals == sorted(totals, reverse=True)
    assert [float(t) for t in column(table, 3)] == [round(t * 1000, 3) for t in totals]
    panel.widget.heat.setChecked(True)
    marks = panel.overlay.marks
    fills = {k: m.fill for k, m in marks.items()}
    assert all(f is not None for f in fills.values())
    slowest = max(panel.controller.debugger.profiler.rows(), key=lambda r: r.seconds)
    # the slowest node is painted the reddest (nodes whose times are within about 1% of
    # it get the same colour: the green channel is an integer)
    reddest = min(f.green() for f in fills.values())
    assert fills[(slowest.graph_path, slowest.index)].green() == reddest
    assert all(m.note.endswith("ms") for m in marks.values())


def test_memory_cap_drops_and_says_so(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui import settings as cfg

    n = 200_000  # 800 kB per value: the second kept value passes a 1 MiB cap
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r1"),
        helper.make_node("Neg", ["a"], ["b"], name="n1"),
        helper.make_node("Abs", ["b"], ["y"], name="a1"),
    ]
    model = make(nodes, [vi("x", TensorProto.FLOAT, [n])], [vi("y", TensorProto.FLOAT, [n])])
    panel = _open(window, tmp_path, model)
    panel.widget.memory_cap.setValue(1)  # the setting, from the Memory tab
    assert cfg.settings().value("run/memory_cap_mb") in (1, "1")
    _run(window, panel, {"x": np.ones(n, np.float32)})
    s = panel.controller.session
    assert s.memory_cap_bytes == 1024 * 1024
    assert s.dropped
    assert column(panel.widget.dropped, 1) == [d.name for d in s.dropped]
    assert "dropped" in panel.widget.tabs.tabText(4)
    assert "dropped" in panel.widget.memory_label.text()


def test_f5_continues_when_paused_and_close_stops(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    panel = _open(window, tmp_path, chain_model())
    panel.set_breakpoint("main::relu", True)
    assert panel.run_or_continue()  # offscreen: random inputs, no dialog
    assert panel.controller.wait(30)
    assert panel.controller.last_pause.reason == "breakpoint"
    assert panel.run_or_continue()  # continues the same run
    assert panel.controller.wait(30)
    assert panel.controller.session.state == "finished"
    assert panel.controller.debugger.hits == {"main::relu": 1}


def test_closing_the_window_stops_the_run(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.ui.test_run_panel import _long_loop_model

    panel = _open(window, tmp_path, _long_loop_model(10_000_000))
    panel.run({"x": np.zeros(1, np.float32)})
    assert panel.controller.busy
    window.close()
    assert panel.controller.wait(5)
    assert panel.controller.session.state == "cancelled"
