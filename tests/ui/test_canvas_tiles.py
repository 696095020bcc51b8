"""The canvas keeps its boxes and edges under tiles, and a replaced big scene is emptied
over turns under a cover (ui/canvas/scene.py's docstring says why): what a user relies on
is that nothing of that shows.  Every box and edge is drawn, found under the pointer,
clickable and stacked as before; a tile never hides what it holds; and while a big scene
goes, the old boxes can be neither seen nor clicked."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtWidgets import QApplication

from onnxviz.model.document import Document
from onnxviz.present.presenter import Presenter, display_graph
from onnxviz.present.typeinfo import type_table
from onnxviz.ui.canvas import scene as canvas_scene
from onnxviz.ui.canvas.items import EdgeItem, NodeItem
from onnxviz.ui.canvas.scene import Tile
from onnxviz.ui.run.canvas_overlay import ValueBadge
from tests.present.models import scoped_model

pytestmark = pytest.mark.qt


def _display(model, expand: bool = True):  # type: ignore[no-untyped-def]
    doc = Document.from_model(model)
    presenter = Presenter(doc, types=type_table(doc))
    if expand:
        presenter.expanded |= presenter.all_group_ids()
    return display_graph(presenter)


@pytest.fixture(scope="module")
def expanded():  # type: ignore[no-untyped-def]
    return _display(scoped_model(8))


@pytest.fixture(scope="module")
def medium():  # type: ignore[no-untyped-def]
    from benchmarks.models import transformer_like

    return _display(transformer_like(1500))


def _shown(window, display):  # type: ignore[no-untyped-def]
    gs = window.graph_scene
    gs.show_scene(display)
    gs.finish_filling()
    return gs


def _inside(outer: QRectF, inner: QRectF) -> bool:
    # (a hair of float slack: the rects are unions and translations of the same numbers)
    return outer.adjusted(-1e-6, -1e-6, 1e-6, 1e-6).contains(inner)


def test_every_box_and_edge_lives_in_a_tile_that_covers_it(window, expanded) -> None:  # type: ignore[no-untyped-def]
    gs = _shown(window, expanded)
    assert set(gs.nodes) == set(expanded.items)
    children = [*gs.nodes.values(), *gs.edge_items]
    tiles = set()
    for item in children:
        tile = item.parentItem()
        assert isinstance(tile, Tile)
        tiles.add(tile)
        # the tile promises Qt that its children draw inside it: a broken promise is a
        # box or an edge (or its label) that is not painted when only that part shows
        assert _inside(tile.sceneBoundingRect(), item.sceneBoundingRect()), item
        assert tile.zValue() == item.zValue()  # stacking goes by the tile's z
    assert tiles == set(gs.tiles)
    # at the top: the tiles, the frame-title layer, nothing else of the graph
    tops = [it for it in gs.items() if it.parentItem() is None]
    assert all(isinstance(t, Tile) or t is gs.title_layer for t in tops)
    assert len(tops) < len(children) / 3


def test_moved_labels_and_later_badges_stay_inside_their_tile(window, medium) -> None:  # type: ignore[no-untyped-def]
    gs = _shown(window, medium)
    labelled = [e for e in gs.edge_items if e.show_label]
    assert labelled
    for e in labelled:
        assert _inside(e.parentItem().sceneBoundingRect(), e.mapRectToScene(e.label_rect))
    # a value badge given to an edge after the fill (a run's shapes) grows the tile
    edge = labelled[0]
    badge = ValueBadge(edge, "float32 " + "×".join(["1024"] * 12), lambda: None)
    gs.contain(badge)
    assert _inside(edge.parentItem().sceneBoundingRect(), badge.sceneBoundingRect())


def test_a_value_badge_sits_on_its_edge_even_when_the_label_was_moved(window, medium) -> None:  # type: ignore[no-untyped-def]
    """The scene moves labels that would overlap, sometimes a few hundred px along the
    row: a run's shape badge went with the label and floated in empty space, far from
    its edge (at zoom levels that hide labels, with nothing beside it).  It stays at the
    middle of its edge then; under the label where the label stayed beside the edge."""
    gs = _shown(window, medium)

    def beside(edge, rect) -> bool:  # type: ignore[no-untyped-def]
        x, y = edge.data_edge.label_pos  # the middle of the edge's curve
        return abs(rect.left() - x) <= 8 and abs(rect.top() - y) <= 24

    moved = kept = 0
    for edge in gs.edge_items:
        if not edge.show_label:
            continue
        badge = ValueBadge(edge, "1×32", lambda: None)
        rect = badge.mapRectToScene(badge.boundingRect())
        assert beside(edge, rect), edge.data_edge.value
        x, y = edge.data_edge.label_pos
        label = edge.label_rect
        if abs(label.left() - x - 4) <= 1 and abs(label.top() - y + 7) <= 1:  # where placed
            kept += 1
            assert rect.center().y() > edge.label_rect.bottom()  # under its label
        else:
            moved += 1
    assert moved and kept  # (the fixture's scene has both)


def test_boxes_are_found_and_clicked_through_their_tiles(window, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import onnx

    path = tmp_path / "scoped.onnx"
    onnx.save(scoped_model(8), str(path))
    window.files.open_path(str(path))
    qtbot.waitUntil(window.files.quiet, timeout=20_000)
    window.navigation.expand_all()
    gs = window.graph_scene
    qtbot.waitUntil(lambda: window.work.task is None and not gs.filling, timeout=20_000)
    view = window.view
    boxes = [n for n in gs.nodes.values() if not n.is_frame]
    assert boxes
    covered = 0  # boxes under another tile's rect: the tile comes first in Qt's list
    for node in boxes:
        center = node.sceneBoundingRect().center()
        assert node in gs.items(center)
        view.centerOn(node)
        QApplication.processEvents()
        pos = view.mapFromScene(center)
        covered += isinstance(view.items(pos)[0], Tile)
        hit = view.itemAt(pos)
        while hit is not None and not isinstance(hit, NodeItem):
            hit = hit.parentItem()
        assert hit is node
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=pos)
        assert gs.selectedItems() == [node]
    assert covered, "no box under another tile was tried"
    # a click beside the boxes (inside a tile's rect, on no box) selects nothing
    node = boxes[0]
    view.centerOn(node)
    QApplication.processEvents()
    beside = node.sceneBoundingRect().topRight() + QPointF(25, 0)
    assert not [it for it in gs.items(beside) if isinstance(it, NodeItem)]
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.mapFromScene(beside))
    assert gs.selectedItems() == []


def test_boxes_stack_over_edges_and_frames_under_boxes(window, expanded) -> None:  # type: ignore[no-untyped-def]
    gs = _shown(window, expanded)
    frames = [n for n in gs.nodes.values() if n.is_frame]
    assert frames
    checked = 0
    for node in gs.nodes.values():
        if node.is_frame:
            continue
        center = node.sceneBoundingRect().center()
        # (by bounding rect: a frame is hit by its header only, its body lets clicks by)
        under = gs.items(
            center, Qt.ItemSelectionMode.IntersectsItemBoundingRect, Qt.SortOrder.DescendingOrder
        )
        found = [it for it in under if isinstance(it, NodeItem | EdgeItem)]
        # topmost first: the box itself before any frame around it or edge under it
        assert found[0] is node
        zs = [it.zValue() for it in found]
        assert zs == sorted(zs, reverse=True)
        checked += any(it.is_frame for it in found if isinstance(it, NodeItem))
    assert checked  # boxes inside frames were among them


def test_a_rendered_canvas_shows_every_box(window, expanded) -> None:  # type: ignore[no-untyped-def]
    """Tiles paint nothing of their own, and hide none of their children: an export of
    the whole scene has ink where each box is."""
    from PySide6.QtGui import QImage, QPainter

    gs = _shown(window, expanded)
    rect = gs.sceneRect()
    image = QImage(int(rect.width()), int(rect.height()), QImage.Format.Format_ARGB32)
    image.fill(gs.theme.background)
    painter = QPainter(image)
    gs.render(painter, QRectF(image.rect()), rect)
    painter.end()
    background = gs.theme.background.rgb()
    for node in gs.nodes.values():
        r = node.sceneBoundingRect().translated(-rect.left(), -rect.top())
        cx, cy = int(r.center().x()), int(r.top() + 6)  # the title band, frames included
        assert image.pixel(cx, cy) != background, node.data_item.title


def test_a_replaced_big_scene_is_emptied_over_turns_under_a_cover(  # type: ignore[no-untyped-def]
    window, qtbot, monkeypatch, expanded
) -> None:
    monkeypatch.setattr(canvas_scene, "TEARDOWN_ITEMS", 10)
    monkeypatch.setattr(canvas_scene, "TEARDOWN_SECONDS", 0.0)  # one tile per turn
    gs = _shown(window, expanded)
    view = window.view
    old_box = next(n for n in gs.nodes.values() if not n.is_frame)
    view.centerOn(old_box)
    QApplication.processEvents()
    pos = view.mapFromScene(old_box.sceneBoundingRect().center())
    small = _display(scoped_model(2), expand=False)

    gs.show_scene(small)
    assert gs.emptying and gs.filling
    assert gs.stand_in is not None  # the next scene's overview is painted meanwhile
    assert not view.viewport().updatesEnabled()  # the old items are not painted
    QApplication.processEvents()
    assert gs.emptying, "one turn does not empty it all"
    # a click lands on the old boxes' place: it selects nothing and opens nothing
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert gs.selectedItems() == []

    qtbot.waitUntil(lambda: not gs.emptying and not gs.filling, timeout=10_000)
    assert view.viewport().updatesEnabled()
    assert gs.stand_in is None
    assert set(gs.nodes) == set(small.items)
    graph_items = [it for it in gs.items() if isinstance(it, NodeItem | EdgeItem)]
    assert len(graph_items) == len(gs.nodes) + len(gs.edge_items)  # nothing old is left


def test_finishing_the_fill_of_a_scene_behind_a_teardown_completes_both(  # type: ignore[no-untyped-def]
    window, monkeypatch, expanded
) -> None:
    monkeypatch.setattr(canvas_scene, "TEARDOWN_ITEMS", 10)
    monkeypatch.setattr(canvas_scene, "TEARDOWN_SECONDS", 0.0)
    gs = _shown(window, expanded)
    small = _display(scoped_model(2), expand=False)
    gs.show_scene(small)
    assert gs.emptying
    gs.finish_filling()  # (what a caller reading `nodes` at once does)
    assert not gs.emptying and not gs.filling
    assert set(gs.nodes) == set(small.items)
    assert window.view.viewport().updatesEnabled()


def test_a_scene_shown_far_zoomed_out_is_an_overview_from_its_first_turn(  # type: ignore[no-untyped-def]
    window, monkeypatch, medium
) -> None:
    """A fill at a zoom where the overview is drawn (Collapse All's fit) does not paint
    the detailed boxes made so far at every turn: the overview is there at once."""
    monkeypatch.setattr(canvas_scene, "SLICE_SECONDS", 0.0)
    gs = window.graph_scene
    view = window.view
    assert len(medium.items) + len(medium.edges) > canvas_scene.OVERVIEW_MIN_ITEMS
    view.set_zoom(0.05)
    gs.show_scene(medium)
    view.refresh_detail()
    assert gs.filling
    assert gs.overview_shown
    assert gs.tiles and not any(t.isVisible() for t in gs.tiles)
    gs.finish_filling()
    assert not any(t.isVisible() for t in gs.tiles)
    view.set_zoom(1.0)
    assert not gs.overview_shown and all(t.isVisible() for t in gs.tiles)


def test_the_overview_follows_the_items_made_for_a_scene_too_big_to_sum_up_at_once(  # type: ignore[no-untyped-def]
    window, monkeypatch, medium
) -> None:
    monkeypatch.setattr(canvas_scene, "SLICE_SECONDS", 0.0)
    monkeypatch.setattr(canvas_scene, "STAND_IN_ITEMS", 100)  # the medium scene is "huge"
    gs = window.graph_scene
    window.view.set_zoom(0.05)
    gs.show_scene(medium)
    window.view.refresh_detail()
    assert gs.filling and not gs.overview_shown  # made-so-far: too few for an overview
    gs.finish_filling()
    window.view.refresh_detail()
    assert gs.overview_shown


def test_expand_all_keeps_the_box_in_the_middle_of_the_view_where_it_was(  # type: ignore[no-untyped-def]
    window, qtbot, tmp_path
) -> None:
    """Expand All used to keep the view's point, which was empty canvas once every
    group around it had opened: the user saw a blank canvas."""
    import onnx

    path = tmp_path / "scoped.onnx"
    onnx.save(scoped_model(8), str(path))
    window.files.open_path(str(path))
    qtbot.waitUntil(window.files.quiet, timeout=20_000)
    gs, view, nav = window.graph_scene, window.view, window.navigation
    anchor = nav.item_in_view()
    assert anchor is not None
    before = view.mapFromScene(gs.nodes[anchor].pos())
    nav.expand_all()
    qtbot.waitUntil(lambda: window.work.task is None and not gs.filling, timeout=20_000)
    assert len(gs.nodes) > 20  # the groups opened
    after = view.mapFromScene(gs.nodes[anchor].pos())
    assert abs(after.x() - before.x()) <= 1 and abs(after.y() - before.y()) <= 1
    in_view = [it for it in view.items(view.viewport().rect()) if isinstance(it, NodeItem)]
    assert len(in_view) > 3


def test_a_big_scenes_value_badges_come_over_turns_and_a_newer_update_leaves_none_behind(  # type: ignore[no-untyped-def]
    window, qtbot, monkeypatch, medium
) -> None:
    """A 100k-node run's end made its 1,400 shape badges in one turn: a big scene gets
    them a slice per turn, the same badges as at once, and an update that comes while
    they are made takes away every badge of the one before."""
    from onnxviz.ui.run import canvas_overlay
    from onnxviz.ui.run.canvas_overlay import CanvasOverlay

    gs = _shown(window, medium)
    values = {(e.data_edge.graph_path, e.data_edge.value) for e in gs.edge_items}
    first = {key: "float32[1,8]" for key in values}
    second = {key: "float32[2,8]" for key in list(values)[: len(values) // 2]}

    def badges_on_canvas() -> list:  # type: ignore[type-arg]
        return [it for it in gs.items() if isinstance(it, ValueBadge)]

    monkeypatch.setattr(canvas_overlay, "SYNC_BADGE_EDGES", 10**9)
    at_once = CanvasOverlay(gs, lambda path, name: None)
    at_once.update(set(), None, set(), {}, {}, first)
    expected = sorted((b.parentItem().data_edge.value, b.text) for b in at_once.badges)
    at_once.update(set(), None, set(), {}, {}, {})
    assert expected and not badges_on_canvas()

    monkeypatch.setattr(canvas_overlay, "SYNC_BADGE_EDGES", 10)
    monkeypatch.setattr(canvas_overlay, "MARK_SLICE_SECONDS", 0.0)
    sliced = CanvasOverlay(gs, lambda path, name: None)
    sliced.update(set(), None, set(), {}, {}, first)
    assert sliced.marking  # more to come
    qtbot.waitUntil(lambda: not sliced.marking, timeout=10_000)
    assert sorted((b.parentItem().data_edge.value, b.text) for b in sliced.badges) == expected

    sliced.update(set(), None, set(), {}, {}, first | {next(iter(values)): "int64[3]"})
    QApplication.processEvents()
    assert sliced.marking
    sliced.update(set(), None, set(), {}, {}, second)  # while the one before is made
    qtbot.waitUntil(lambda: not sliced.marking, timeout=10_000)
    assert {b.text for b in sliced.badges} == {"2×8"}
    assert sorted(map(id, badges_on_canvas())) == sorted(map(id, sliced.badges))


def test_a_new_run_over_a_big_finished_one_unmarks_the_boxes_in_view_at_once_the_rest_over_turns(  # type: ignore[no-untyped-def]
    window, qtbot, monkeypatch, medium
) -> None:
    """A new run of a 50k-node model that had run un-ticked every mark in the turn of
    its first progress report (60-66 ms).  The boxes in view change at once, the others
    a slice a turn, every one ends with the state last told, and a newer update while
    they are restyled wins."""
    from onnxviz.ui.run import canvas_overlay
    from onnxviz.ui.run.canvas_overlay import CanvasOverlay
    from onnxviz.ui.run.debugger import Executed

    gs = _shown(window, medium)
    window.view.centerOn(next(iter(gs.nodes.values())))  # (boxes in view)
    overlay = CanvasOverlay(gs, lambda path, name: None)
    everything = list(overlay_keys := {canvas_overlay.node_key(b) for b in gs.nodes.values()})
    assert len(overlay_keys) > canvas_overlay.SYNC_MARKS
    overlay.update(Executed(everything), None, set(), {}, {}, {})
    overlay.finish_marks()
    assert all(m.executed for m in overlay.marks.values())

    monkeypatch.setattr(canvas_overlay, "MARK_SLICE_SECONDS", 0.0)
    first = everything[:3]
    overlay.update(Executed(first), None, set(), {}, {}, {})  # a new run: 3 nodes so far
    in_view = set(overlay._keys_in_view())
    assert in_view and len(in_view) < len(everything) // 2
    marks = overlay.marks
    assert all(marks[k].executed == (k in first) for k in in_view)  # at once
    assert overlay.marking and sum(m.executed for m in marks.values()) > len(everything) // 2
    overlay.update(Executed(everything[:5]), None, set(), {}, {}, {})  # its next report
    qtbot.waitUntil(lambda: not overlay.marking, timeout=10_000)
    assert {k for k, m in marks.items() if m.executed} == set(everything[:5])
