"""The main window: opening models, expanding, finding, drilling down, exporting."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import onnx
import pytest
from PySide6.QtCore import QPointF, Qt

from onnxviz.ui.canvas.items import EdgeItem, NodeItem
from tests.present.models import example, scan_model, scoped_model

pytestmark = pytest.mark.qt

LIGHT = sorted(
    glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/*.onnx"))
)


def _ops(window) -> list[NodeItem]:  # type: ignore[no-untyped-def]
    return [n for n in window.graph_scene.nodes.values() if n.data_item.kind in ("op", "container")]


@pytest.mark.parametrize("path", LIGHT, ids=[os.path.basename(p) for p in LIGHT])
def test_light_models_open_and_draw_every_node(window, path: str) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(path, background=False)
    model = window.session.doc.model
    ops = _ops(window)
    assert len(ops) == len(model.graph.node)
    titles = sorted(n.data_item.title for n in ops)
    assert titles == sorted(n.op_type for n in model.graph.node)
    edges = [e for e in window.graph_scene.items() if isinstance(e, EdgeItem)]
    assert len(edges) >= len(model.graph.node) - 1
    # every edge ends at the box it names (the route's last point is on the target's border)
    for e in edges[:200]:
        target = (
            window.graph_scene.nodes[e.data_edge.target].sceneBoundingRect().adjusted(-3, -3, 3, 3)
        )
        assert target.contains(QPointF(*e.data_edge.points[-1]))
    assert window.status_line.summary_label.text().startswith(os.path.basename(path))


def test_no_model_opens_the_bundled_example_with_start_page(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.examples import example_path

    window.files.open_path(example_path(), example=True)
    qtbot.waitUntil(lambda: window.session.doc is not None, timeout=20000)
    assert window.start_page.isVisible()
    assert window.session.doc.display_name == "small_cnn.onnx"
    assert len(_ops(window)) == len(window.session.doc.model.graph.node)


def test_recent_files_and_failure_sentence(window, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui import settings

    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a model")
    window.files.open_path(str(bad))
    qtbot.waitUntil(lambda: window.work.task is None, timeout=20000)
    assert window.session.doc is None
    assert (
        window.last_error and "Traceback" not in window.last_error and "\n" not in window.last_error
    )
    good = example("small_cnn.onnx")
    window.files.open_path(good)
    qtbot.waitUntil(lambda: window.session.doc is not None, timeout=20000)
    assert settings.recent_files()[0] == os.path.abspath(good)
    assert [a.toolTip() for a in window.actions_.recent_menu.actions()][0] == os.path.abspath(good)
    # Two recent files of one name are told apart by their folders, in the menu and on
    # the start page; a file that is gone says so.
    twin = tmp_path / "other" / "small_cnn.onnx"
    twin.parent.mkdir()
    twin.write_bytes(Path(good).read_bytes())
    window.files.open_path(str(twin))
    qtbot.waitUntil(lambda: settings.recent_files()[0] == str(twin), timeout=20000)
    twin.unlink()
    window.refresh_recent()
    window.start_page.set_recent(settings.recent_files())
    menu = [a.text() for a in window.actions_.recent_menu.actions() if a.toolTip()]
    page = [
        window.start_page.recent.item(i).text() for i in range(window.start_page.recent.count())
    ]
    assert menu[:2] == page[:2]
    assert menu[0] == "small_cnn.onnx (missing) — other", menu
    assert menu[1].startswith("small_cnn.onnx — ") and "missing" not in menu[1], menu


def test_expand_and_collapse_subgraph(window) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("loop_with_if.onnx"), background=False)
    loop = next(n for n in _ops(window) if n.data_item.title == "Loop")
    count = len(window.graph_scene.nodes)
    window.navigation.toggle(loop.data_item.id)
    frame = window.graph_scene.nodes[loop.data_item.id]
    assert frame.is_frame
    inside = [
        n for n in window.graph_scene.nodes.values() if n.data_item.parent == frame.data_item.id
    ]
    assert inside
    for n in inside:
        assert frame.sceneBoundingRect().contains(n.sceneBoundingRect())
    window.navigation.toggle(loop.data_item.id)
    assert len(window.graph_scene.nodes) == count


def test_collapse_and_expand_name_scope_group(window) -> None:  # type: ignore[no-untyped-def]
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "onnxviz_scoped_test.onnx")
    onnx.save(scoped_model(3), path)
    window.files.open_path(path, background=False)
    gid = "main|g:/encoder/layer.2"
    assert window.graph_scene.nodes[gid].is_frame
    before = len(window.graph_scene.nodes)
    window.navigation.toggle(gid)
    box = window.graph_scene.nodes[gid]
    assert not box.is_frame and box.data_item.op_count == 6
    assert len(window.graph_scene.nodes) < before
    window.navigation.collapse_all()
    assert all(not n.is_frame for n in window.graph_scene.nodes.values())
    window.navigation.expand_all()
    assert window.graph_scene.nodes[gid].is_frame


def test_find_value_in_nested_body_and_jump(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("loop_with_if.onnx"), background=False)
    dock = window.find_dock
    dock.query.setText("then_add")
    results = dock.run_query()
    assert results and results[0].graph_path.endswith("then_branch:maybe_add")
    dock.results.setCurrentRow(0)
    dock._activated(dock.results.item(0))
    qtbot.waitUntil(lambda: bool(window.graph_scene.selectedItems()), timeout=10000)
    selected = window.graph_scene.selectedItems()[0]
    assert isinstance(selected, NodeItem) and selected.data_item.title == "Add"
    assert selected.data_item.graph_path.endswith("then_branch:maybe_add")
    # it is on screen
    visible = window.navigation.visible_rect()
    assert visible.intersects(selected.sceneBoundingRect())
    # its producers/consumers are highlighted
    assert window.graph_scene.highlighted_ids()


def test_selection_shows_properties_and_highlights_neighbours(window) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("small_cnn.onnx"), background=False)
    relu = next(n for n in _ops(window) if n.data_item.title == "Relu")
    relu.setSelected(True)
    keys = [r.key for r in window.properties_dock.rows()]
    assert "op_type" in keys and "since_version" in keys
    neighbours = window.graph_scene.highlighted_ids()
    assert len(neighbours) == 2  # its producer and its consumer
    edge = next(e for e in window.graph_scene.edge_items if e.data_edge.target == relu.data_item.id)
    window.graph_scene.clearSelection()
    edge.setSelected(True)
    assert {r.key for r in window.properties_dock.rows()} >= {"type", "producer", "consumer"}


def test_initializer_row_click_opens_the_tensor(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("small_cnn.onnx"), background=False)
    conv = next(n for n in _ops(window) if n.data_item.title == "Conv")
    name = conv.data_item.rows[0].name
    window.graph_scene.rowClicked.emit(conv.data_item.id, name)
    rows = {r.key: r.value for r in window.properties_dock.rows()}
    assert rows["name"] == name and "min" in rows and "dtype" in rows


def test_drill_down_and_back_restores_view(window) -> None:  # type: ignore[no-untyped-def]
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "onnxviz_scan_test.onnx")
    onnx.save(scan_model(), path)
    window.files.open_path(path, background=False)
    window.view.set_zoom(0.77)
    window.view.centerOn(10, 20)
    zoom = window.view.zoom()
    window.navigation.open_graph("main/body:scan")
    assert window.crumb_bar.isVisible() or not window.crumb_bar.isHidden()
    assert {n.data_item.kind for n in window.graph_scene.nodes.values()} >= {"outer", "op"}
    window.navigation.back()
    assert window.session.presenter.root_path == "main"
    assert abs(window.view.zoom() - zoom) < 1e-6
    assert window.crumb_bar.isHidden()


def test_keyboard_navigation_moves_between_nodes(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("small_cnn.onnx"), background=False)
    window.view.setFocus()
    qtbot.keyClick(window.view, Qt.Key.Key_Down)
    first = window.view.selected_node()
    assert first is not None
    qtbot.keyClick(window.view, Qt.Key.Key_Down)
    second = window.view.selected_node()
    assert second is not None and second is not first
    assert second.sceneBoundingRect().center().y() > first.sceneBoundingRect().center().y()


def test_zoom_and_fit(window) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("small_cnn.onnx"), background=False)
    window.view.actual_size()
    assert window.view.zoom() == pytest.approx(1.0)
    window.view.zoom_in()
    assert window.view.zoom() == pytest.approx(1.25)
    window.view.fit()
    view_rect = window.navigation.visible_rect()
    scene_rect = window.graph_scene.sceneRect()
    assert view_rect.adjusted(-2, -2, 2, 2).contains(
        scene_rect
    ) or window.view.zoom() == pytest.approx(1.0)


def test_view_options_relayout(window) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("small_cnn.onnx"), background=False)
    window.actions_.names.setChecked(True)
    conv = next(n for n in _ops(window) if n.data_item.title == "Conv")
    assert (
        conv.data_item.subtitle
        == window.session.doc.model.graph.node[conv.data_item.node_index].name
    )
    window.actions_.left_right.setChecked(True)
    src = window.graph_scene.nodes["main|in:image"].pos()
    dst = window.graph_scene.nodes["main|out:probabilities"].pos()
    assert dst.x() > src.x()
    window.actions_.shapes.setChecked(False)
    assert not any(e.show_label for e in window.graph_scene.edge_items)


def test_dark_theme(window) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("small_cnn.onnx"), background=False)
    window.theme.set_mode("dark")
    assert window.graph_scene.theme.name == "dark"
    assert window.graph_scene.backgroundBrush().color().lightness() < 60
    window.theme.set_mode("light")
    assert window.graph_scene.backgroundBrush().color().lightness() > 200


def test_function_body_opens_as_its_own_view(window) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("with_functions.onnx"), background=False)
    fn = window.session.doc.model.functions[0]
    window.navigation.open_graph(f"function:{fn.domain}:{fn.name}")
    ops = sorted(n.data_item.title for n in _ops(window))
    assert ops == sorted(n.op_type for n in fn.node)
    pills = {
        n.data_item.value for n in window.graph_scene.nodes.values() if n.data_item.kind == "input"
    }
    assert pills == set(fn.input)
    window.navigation.back()
    assert window.session.presenter.root_path == "main"


def test_window_geometry_and_docks_are_restored(qtbot) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.main_window import MainWindow
    from tests.ui.scripted_prompter import ScriptedPrompter

    first = MainWindow(prompter=ScriptedPrompter())
    qtbot.addWidget(first)
    first.show()
    first.resize(701, 503)  # within the offscreen screen: restoreGeometry clamps to it
    first.outline_dock.hide()
    first.close()
    second = MainWindow(prompter=ScriptedPrompter())
    qtbot.addWidget(second)
    second.show()
    assert second.size().width() == 701 and second.size().height() == 503
    assert second.outline_dock.isHidden()
    second.close()


def test_find_a_value_inside_a_nested_body_and_jump(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("loop_with_if.onnx"), background=False)
    dock = window.find_dock
    dock.query.setText("then_out")
    results = dock.run_query()
    value = next(r for r in results if r.kind in ("value", "output") and r.value == "then_out")
    assert value.graph_path.endswith("then_branch:maybe_add")
    window.navigation.jump_to(value)
    qtbot.waitUntil(lambda: window.view.selected_node() is not None, timeout=10000)
    node = window.view.selected_node()
    body = window.session.doc.scope(value.graph_path)
    assert node.data_item.graph_path == value.graph_path
    assert "then_out" in body.nodes[node.data_item.node_index].output
    # the Loop and the If around it were expanded to show it
    frames = [n for n in window.graph_scene.nodes.values() if n.is_frame]
    assert {f.data_item.title for f in frames} >= {"Loop", "If"}


def test_edits_and_undo_redraw_the_graph(window) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("small_cnn.onnx"), background=False)
    doc = window.session.doc
    old = doc.model.graph.node[0].output[0]
    doc.rename_value(old, "renamed_value")
    values = {e.data_edge.value for e in window.graph_scene.edge_items}
    assert "renamed_value" in values and old not in values
    assert window.actions_.undo.isEnabled()
    assert window.windowTitle().startswith("small_cnn.onnx *")
    window.edits.undo()
    values = {e.data_edge.value for e in window.graph_scene.edge_items}
    assert old in values and "renamed_value" not in values
    window.edits.redo()
    assert "renamed_value" in {e.data_edge.value for e in window.graph_scene.edge_items}


def test_find_inside_a_function_body_opens_it(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("with_functions.onnx"), background=False)
    dock = window.find_dock
    dock.query.setText("sigmoid")
    hit = next(r for r in dock.run_query() if r.graph_path.startswith("function:"))
    window.navigation.jump_to(hit)
    qtbot.waitUntil(lambda: window.view.selected_node() is not None, timeout=10000)
    assert window.session.presenter.root_path == hit.graph_path
    assert window.view.selected_node().data_item.title == "Sigmoid"
    assert window.navigation.crumbs  # Back returns to the main graph
