"""What a new user meets in the docks and on the canvas (issue 18, widget-level items):
each test drives the clicks a user would and checks what they then see."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from tests.ui.clicks import select_box, tree_items

pytestmark = pytest.mark.qt

EXPORTERS = Path(__file__).resolve().parent.parent / "data" / "exporters"


@pytest.mark.parametrize("width", [1400, 1024])
def test_properties_of_a_torch_conv_keep_the_values_in_view(window, qtbot, width: int) -> None:  # type: ignore[no-untyped-def]
    window.resize(width, 640 if width < 1400 else 900)
    window.files.open_path(str(EXPORTERS / "torch_dynamo_cnn.onnx"), background=False)
    select_box(window, "Conv")
    dock = window.properties_dock
    tree = dock.tree
    qtbot.waitUntil(lambda: tree.viewport().width() > 0)
    viewport = tree.viewport().width()
    names = tree.header().sectionSize(0)
    # values get most of the width; nothing scrolls sideways
    assert names <= viewport * 0.5
    assert tree.header().sectionSize(1) >= viewport * 0.5
    assert tree.horizontalScrollBar().maximum() == 0 or not tree.horizontalScrollBar().isVisible()
    # the long metadata keys sit in one collapsed group
    group = next(i for i in tree_items(tree) if i.text(0).startswith("metadata ("))
    keys = [group.child(j).toolTip(0) for j in range(group.childCount())]
    assert "metadata pkg.onnxscript.rewriter.rule_name" in keys or any(
        k.startswith("metadata pkg.torch.onnx") for k in keys
    )
    assert not group.isExpanded()
    assert group.text(0) == f"metadata ({group.childCount()})"
    # a name too long for its column is elided on screen and whole in its tooltip
    longest = max(keys, key=len)
    item = next(group.child(j) for j in range(group.childCount()))
    assert item.toolTip(0).startswith("metadata ")
    assert tree.fontMetrics().horizontalAdvance(longest) > names  # it had to elide
    # an editor sits in the value column, inside the viewport, and still edits
    editor = dock.editor("Attributes", "strides")
    rect = editor.geometry()
    assert rect.left() >= names - 2 and rect.right() <= viewport + 2
    editor.setText("1, 1")
    editor.textEdited.emit("1, 1")
    editor.editingFinished.emit()
    conv = window.session.doc.main_scope.nodes[
        next(i for i, n in enumerate(window.session.doc.main_scope.nodes) if n.op_type == "Conv")
    ]
    assert list(next(a for a in conv.attribute if a.name == "strides").ints) == [1, 1]


def test_focusing_a_metadata_field_opens_its_group(window) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(str(EXPORTERS / "torch_dynamo_cnn.onnx"), background=False)
    node = select_box(window, "Conv")
    assert node is not None
    dock = window.properties_dock
    row = next(r for r in dock.rows() if r.key.startswith("metadata "))
    assert dock.focus_field(row.field)
    group = next(i for i in tree_items(dock.tree) if i.text(0).startswith("metadata ("))
    assert group.isExpanded()
    assert dock.tree.currentItem().parent() is group
    assert dock.tree.currentItem().data(0, Qt.ItemDataRole.UserRole) is row


def _checked_model(tmp_path: Path, perm: list[int]) -> str:
    """Relu -> Transpose with a declared output [2,3] (a perm of [1,0] contradicts it),
    a loosely declared intermediate (warning) and dotted names (notes)."""
    import onnx
    from onnx import TensorProto
    from onnx import helper as h

    g = h.make_graph(
        [
            h.make_node("Relu", ["x"], ["r.1"], name="relu"),
            h.make_node("Transpose", ["r.1"], ["y.1"], perm=perm, name="flip"),
        ],
        "main",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [h.make_tensor_value_info("y.1", TensorProto.FLOAT, [2, 3])],
        value_info=[h.make_tensor_value_info("r.1", TensorProto.FLOAT, [2, 4])],
    )
    path = str(tmp_path / "checked.onnx")
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), path)
    return path


def test_declared_shape_clash_after_an_edit_is_badged_on_the_edited_node(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(_checked_model(tmp_path, [0, 1]), background=False)
    window.edits.wait_validated()
    assert not [d for d in window.diagnostics_dock.diagnostics if d.code == "T005"]
    # the user selects the Transpose and types a new perm
    flip = select_box(window, "Transpose")
    editor = window.properties_dock.editor("Attributes", "perm")
    editor.setText("1, 0")
    editor.textEdited.emit("1, 0")
    editor.editingFinished.emit()
    window.edits.wait_validated()
    window.wait_idle()
    clash = next(d for d in window.diagnostics_dock.diagnostics if d.code == "T005")
    assert clash.location.node == "flip" and clash.location.value == "y.1"
    flip = window.graph_scene.nodes[flip.data_item.id]
    assert any("T005" in p for p in flip.problems)  # the badge is on the edited node
    row = next(
        window.diagnostics_dock.tree.topLevelItem(i)
        for i in range(window.diagnostics_dock.tree.topLevelItemCount())
        if window.diagnostics_dock.tree.topLevelItem(i).text(1) == "T005"
    )
    assert "node flip" in row.text(3) and "value y.1" in row.text(3)
    window.graph_scene.clearSelection()
    window.diagnostics_dock.tree.itemClicked.emit(row, 2)
    assert [n.data_item.title for n in window.graph_scene.selectedItems()] == ["Transpose"]


def test_diagnostics_list_errors_first_and_the_message_gets_the_width(
    window, tmp_path, qtbot
) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(_checked_model(tmp_path, [1, 0]), background=False)
    window.edits.wait_validated()
    dock = window.diagnostics_dock
    qtbot.waitUntil(dock.isVisible)
    tree = dock.tree
    severities = [tree.topLevelItem(i).text(0) for i in range(tree.topLevelItemCount())]
    assert {"error", "warning", "info"} <= set(severities)
    rank = {"error": 0, "warning": 1, "info": 2}
    assert [rank[s] for s in severities] == sorted(rank[s] for s in severities)
    # alone in the bottom area: every column, the message the widest
    header = tree.header()
    assert not tree.isColumnHidden(3)
    assert header.sectionSize(2) >= 0.5 * tree.viewport().width()
    # next to the Run dock the area is shared: the message keeps most of what is left
    window.run_dock.show()
    qtbot.waitUntil(lambda: window.run_dock.isVisible())
    qtbot.wait(50)
    width = tree.viewport().width()
    shown = [c for c in range(4) if not tree.isColumnHidden(c)]
    assert 2 in shown and 1 in shown  # the code (with its severity dot) and the message
    assert header.sectionSize(2) >= 0.6 * width
    first = tree.topLevelItem(0)
    assert "error" in first.toolTip(2) and "node flip" in first.toolTip(2)
    said = [
        f"{n} {word}" + ("" if n == 1 else "s")
        for n, word in zip(
            (severities.count(s) for s in ("error", "warning", "info")),
            ("error", "warning", "note"),
        )
    ]
    assert dock.summary.text() == " · ".join(said)


def test_empty_inspector_says_nothing_is_selected(qtbot) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from onnxviz.ui.inspector import InspectorDock

    dock = InspectorDock()
    qtbot.addWidget(dock)
    dock.show()
    ins = dock.inspector
    assert "nothing selected" in ins.hist.empty_text
    assert "nothing selected" in ins.header.text()
    assert "finite" not in ins.hist.empty_text
    # a tensor of only NaN says so; clearing goes back to nothing selected
    dock.show_value("bad", np.full((2, 2), np.nan, np.float32))
    assert ins.hist.empty_text == "no finite values"
    dock.clear()
    assert "nothing selected" in ins.hist.empty_text and ins.array is None


@pytest.mark.parametrize("tab", [1, 2])
def test_channel_grid_and_heatmap_fit_the_dock_then_zoom(qtbot, tab: int) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from onnxviz.ui.inspector import InspectorDock

    dock = InspectorDock()
    qtbot.addWidget(dock)
    dock.resize(420, 360)
    dock.show()
    ins = dock.inspector
    rng = np.random.default_rng(0)
    # 64 channels of 28x28 (8 a row) and a 300-column slice: both wider than the dock
    dock.show_value("feature map", rng.standard_normal((1, 64, 28, 28)).astype(np.float32))
    if tab == 1:
        dock.show_value("wide", rng.standard_normal((40, 300)).astype(np.float32))
    ins.tabs.setCurrentIndex(tab)
    view = ins.heat_label if tab == 1 else ins.channels_label
    qtbot.waitUntil(lambda: view.viewport().width() > 0 and view.isVisible())
    qtbot.wait(20)
    shown = view.pixmap().size()
    room = view.viewport().size()
    # the whole picture is in view at first: every column of the grid
    assert shown.width() <= room.width() and shown.height() <= room.height()
    assert shown.width() >= room.width() * 0.9 or shown.height() >= room.height() * 0.9
    assert view.horizontalScrollBar().maximum() == 0
    # the user zooms in with the wheel or "+": the picture grows and scrolls
    view.setFocus()
    for _ in range(4):
        qtbot.keyClick(view, Qt.Key.Key_Plus)
    assert view.pixmap().width() > shown.width() * 2
    assert view.horizontalScrollBar().maximum() > 0
    # resizing keeps the user's zoom; a double-click fits again
    zoomed = view.pixmap().size()
    dock.resize(500, 400)
    qtbot.wait(20)
    assert view.pixmap().size() == zoomed
    qtbot.mouseDClick(view.viewport(), Qt.MouseButton.LeftButton)
    assert view.pixmap().width() <= view.viewport().width()


def test_toolbars_show_icons_with_text_and_shortcut_in_tooltips(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtWidgets import QToolBar, QToolButton

    from onnxviz.ui.icons import plain_text

    window.files.open_path(str(EXPORTERS / "torch_dynamo_cnn.onnx"), background=False)
    qtbot.wait(10)
    bars = window.findChildren(QToolBar)
    assert {b.objectName() for b in bars} >= {"toolbar.main", "toolbar.run"}
    for bar in bars:
        for action in bar.actions():
            if action.isSeparator():
                continue
            assert not action.icon().isNull(), plain_text(action)
            button = bar.widgetForAction(action)
            assert isinstance(button, QToolButton)
            assert button.toolButtonStyle() == Qt.ToolButtonStyle.ToolButtonIconOnly
            tip = action.toolTip()
            assert plain_text(action).split()[0].lower() in tip.lower(), tip  # says what it does
            keys = action.shortcut().toString()
            if keys:
                assert keys in tip, (tip, keys)
    # the shortcuts still work: Ctrl+1 is actual size, Ctrl+0 fits
    window.view.setFocus()
    window.view.set_zoom(0.3)
    qtbot.keyClick(window.view, Qt.Key.Key_1, Qt.KeyboardModifier.ControlModifier)
    assert window.view.zoom() == pytest.approx(1.0)
    # a toolbar click does what the menu item does
    zoom = window.view.zoom()
    zoom_out = window.findChild(QToolBar, "toolbar.main").widgetForAction(window.actions_.zoom_out)
    qtbot.mouseClick(zoom_out, Qt.MouseButton.LeftButton)
    assert window.view.zoom() < zoom


def _band_pixel(window, node, y: float):  # type: ignore[no-untyped-def]
    window.view.viewport().repaint()
    p = window.view.mapFromScene(node.mapToScene(node.boundingRect().width() - 12, y))
    return window.view.viewport().grab().toImage().pixelColor(p.x(), p.y())


def test_hovering_a_weight_row_lights_it_and_a_click_there_shows_the_tensor(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.present.options import LINE_H, ROW_H, TITLE_H

    window.files.open_path(str(EXPORTERS / "torch_dynamo_cnn.onnx"), background=False)
    window.view.actual_size()
    conv = next(n for n in window.graph_scene.nodes.values() if n.data_item.title == "Conv")
    window.view.centerOn(conv)
    d = conv.data_item
    top = TITLE_H + (LINE_H if d.subtitle else 0.0) + 2
    w_y, title_y = top + ROW_H / 2, TITLE_H / 2
    viewport = window.view.viewport()

    def at(y: float):  # type: ignore[no-untyped-def]
        return window.view.mapFromScene(conv.mapToScene(conv.boundingRect().width() / 3, y))

    def move(y: float) -> None:
        # the pointer moves over the viewport (sent to it: another test's window left
        # at that screen position must not take the event)
        from PySide6.QtCore import QEvent, QPointF
        from PySide6.QtGui import QMouseEvent
        from PySide6.QtWidgets import QApplication

        local = QPointF(at(y))
        event = QMouseEvent(
            QEvent.Type.MouseMove,
            local,
            QPointF(viewport.mapToGlobal(local.toPoint())),
            Qt.MouseButton.NoButton,
            Qt.MouseButton.NoButton,
            Qt.KeyboardModifier.NoModifier,
        )
        QApplication.sendEvent(viewport, event)

    before = _band_pixel(window, conv, w_y)
    move(title_y)
    move(w_y)
    qtbot.waitUntil(lambda: conv.hover_row == 0)
    assert _band_pixel(window, conv, w_y) != before  # the W row is lit
    assert d.rows[0].name in conv.toolTip() and "tensor" in conv.toolTip()
    # on the title nothing is lit, and the tooltip says a click shows the node
    move(title_y)
    qtbot.waitUntil(lambda: conv.hover_row is None)
    assert _band_pixel(window, conv, w_y) == before
    assert "node" in conv.toolTip()
    # the clicks do what the highlight promised
    qtbot.mouseClick(viewport, Qt.MouseButton.LeftButton, pos=at(w_y))
    rows = {r.key: r.value for r in window.properties_dock.rows()}
    assert rows.get("name") == d.rows[0].name and "dtype" in rows
    window.graph_scene.clearSelection()  # (a click on a selected node is item 3's)
    qtbot.mouseClick(viewport, Qt.MouseButton.LeftButton, pos=at(title_y))
    assert conv.isSelected()
    assert {"op_type", "since_version"} <= {r.key for r in window.properties_dock.rows()}


@pytest.mark.parametrize("size", [(1400, 900), (1024, 640)])
@pytest.mark.parametrize("name", ["optimum_bert", "torch_dynamo_transformer", "torch_dynamo_cnn"])
def test_the_first_view_is_readable_without_zooming(window, qtbot, name: str, size) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.canvas import lod

    window.resize(*size)
    qtbot.wait(10)
    window.files.open_path(str(EXPORTERS / f"{name}.onnx"), background=False)
    window.wait_idle()
    # box text is drawn at this zoom, and the graph's start is in view
    assert window.view.zoom() >= lod.TEXT_MIN
    visible = window.navigation.visible_rect()
    inputs = [n for n in window.graph_scene.nodes.values() if n.data_item.kind == "input"]
    assert any(visible.intersects(n.sceneBoundingRect()) for n in inputs)
    ops = [
        n
        for n in window.graph_scene.nodes.values()
        if n.data_item.kind == "op" and visible.contains(n.sceneBoundingRect())
    ]
    assert len(ops) >= 3  # several whole boxes, titles readable


def _dark_in(window, rect) -> int:  # type: ignore[no-untyped-def]
    window.view.viewport().repaint()
    image = window.view.viewport().grab(rect).toImage()
    return sum(
        1
        for x in range(image.width())
        for y in range(image.height())
        if image.pixelColor(x, y).lightness() < 90
    )


def test_fitted_transformer_still_names_its_groups(window) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QRect

    from onnxviz.ui.canvas import lod

    window.files.open_path(str(EXPORTERS / "optimum_bert.onnx"), background=False)
    window.view.fit()
    zoom = window.view.zoom()
    assert zoom < lod.TEXT_MIN  # the frames' own header text is not drawn
    titles = list(window.graph_scene.frame_titles.values())
    frames = [n for n in window.graph_scene.nodes.values() if n.is_frame]
    assert frames and len(titles) == len(frames)
    wide = [t for t in titles if t.shows_at(zoom)]
    assert wide
    drops = {t.text: t.drop(zoom) for t in wide}
    for title in wide:
        drop = title.drop(zoom)
        if drop is None:  # nested deeper than the stack: not drawn
            continue
        corner = window.view.mapFromScene(title.pos())
        rect = QRect(corner.x() + 1, corner.y() + round(drop) + 2, 24, 8)
        assert _dark_in(window, rect) > 5, title.text  # its name, at a readable size
    # nested frames starting together (encoder > layer.0 > attention) stack their
    # titles, each below its parent's instead of over it
    stacked = sorted(d for d in drops.values() if d is not None)
    assert len(set(round(d) for d in stacked)) >= 3, drops


def test_canvas_badges_say_how_bad_and_notes_stay_in_the_dock(window) -> None:  # type: ignore[no-untyped-def]
    """A genai export: every contrib op has a note (O021, runs in onnxruntime only) and
    one value a warning (T009): the notes get no badge on the canvas (a red dot on each
    MatMulNBits read as a broken model), the warning an amber one; an error stays red."""
    window.files.open_path(str(EXPORTERS / "ort_genai_phi3_int4_past.onnx"), background=False)
    window.edits.wait_validated()
    window.wait_idle()
    found = window.diagnostics_dock.diagnostics
    assert any(d.code == "O021" for d in found) and any(d.code == "T009" for d in found)
    nodes = window.session.doc.main_scope.nodes
    contrib = [f"main#{i}" for i, n in enumerate(nodes) if n.op_type == "MatMulNBits"]
    assert contrib and not any(window.navigation.badges.get(i) for i in contrib)
    badged = [b for b in window.graph_scene.nodes.values() if b.problems]
    assert badged and all(not b._badge.error for b in badged)  # warnings only: amber
    # an error at a node: red
    badged[0].set_problems(["error G004: broken", "warning T009: loose"])
    assert badged[0]._badge.error
