"""Big graphs: the overview item when zoomed out, deferred shape inference."""

from __future__ import annotations

import os

import onnx
import pytest

from tests.present.models import example

pytestmark = pytest.mark.qt


def _expanded_transformer(window, tmp_path):  # type: ignore[no-untyped-def]
    """A 1,500-node transformer-like model opened with every group expanded: a scene
    of over 600 boxes and edges (filled in slices, overview when zoomed out)."""
    from benchmarks.models import transformer_like

    path = str(tmp_path / "t.onnx")
    onnx.save(transformer_like(1500), path)
    window.files.open_path(path, background=False)
    window.navigation.expand_all()
    window.wait_idle()
    return window.graph_scene


@pytest.mark.slow
def test_overview_replaces_items_when_zoomed_out(window, tmp_path) -> None:  # type: ignore[no-untyped-def]

    from onnxviz.ui.canvas.overview import OVERVIEW_ZOOM
    from onnxviz.ui.export import export_any

    scene = _expanded_transformer(window, tmp_path)
    assert len(scene.nodes) + len(scene.edge_items) > 600
    window.view.set_zoom(OVERVIEW_ZOOM / 2)
    assert scene.overview_shown and scene.overview is not None and scene.overview.isVisible()
    assert not any(n.isVisible() for n in scene.nodes.values())
    # exports still draw every item, then the overview comes back
    svg = str(tmp_path / "t.svg")
    export_any(scene, svg)
    with open(svg, encoding="utf-8") as fh:
        assert fh.read().count("MatMul") >= 10
    assert scene.overview_shown
    window.view.set_zoom(1.0)
    assert not scene.overview_shown and all(n.isVisible() for n in scene.nodes.values())


def test_shapes_inferred_after_first_paint_fill_in_labels(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.present.typeinfo import type_table

    window.files.open_path(example("small_cnn.onnx"), background=False)
    doc = window.session.doc
    window.session.presenter.types = type_table(doc, infer=False)
    window.session.presenter.types.complete = False
    window.navigation.relayout()
    inner = [e for e in window.graph_scene.edge_items if e.data_edge.source == "main#0"]
    assert inner and not inner[0].data_edge.label  # not declared in the model
    window.navigation.start_inference()
    qtbot.waitUntil(lambda: window.navigation.inference_task.done, timeout=60000)
    qtbot.waitUntil(lambda: window.work.task is None, timeout=20000)
    inner = [e for e in window.graph_scene.edge_items if e.data_edge.source == "main#0"]
    assert inner[0].data_edge.label.startswith("float32[") and inner[0].data_edge.inferred
    assert os.getpid()  # inference ran in a child process, the window process is intact


@pytest.mark.slow
def test_frame_titles_are_one_item_whose_search_finds_what_each_title_would_draw(
    window, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Qt asked every item that ignores the view's scale for its bounding rect on every
    paint: 15,708 frame titles made each paint of an expanded 100k-node model 50 ms.
    One layer paints them now; its search by width and corner must find exactly the
    titles that draw themselves in the area, at every far-out zoom."""
    from PySide6.QtCore import QRectF
    from PySide6.QtWidgets import QGraphicsItem

    from onnxviz.ui.canvas import lod

    scene = _expanded_transformer(window, tmp_path)
    titles = list(scene.frame_titles.values())
    assert len(titles) > 50
    ignoring = QGraphicsItem.GraphicsItemFlag.ItemIgnoresTransformations
    assert not [i for i in scene.items() if i.flags() & ignoring]
    layer = scene.title_layer
    assert layer is not None and layer.scene() is scene
    whole = scene.sceneRect()
    w, h = whole.width(), whole.height()
    areas = [whole, QRectF(whole.x(), whole.y(), w / 3, h / 5), QRectF(w / 2, h / 2, w / 4, h / 4)]
    for zoom in (0.01, 0.05, 0.1, 0.2, lod.TEXT_MIN * 0.99, lod.TEXT_MIN):
        for area in areas:
            found = {t.frame.data_item.id for t, _ in layer.plates(zoom, area)}
            expected = set()
            for t in titles:
                plate = t.plate(zoom)
                if plate is None:
                    continue
                corner = t.pos()
                drawn = QRectF(corner.x(), corner.y(), plate.right() / zoom, plate.bottom() / zoom)
                if drawn.intersects(area):
                    expected.add(t.frame.data_item.id)
            assert expected <= found, (zoom, area)  # every title that shows is drawn
    assert not list(layer.plates(lod.TEXT_MIN, whole))  # readable zoom: the frames say it


def test_expanding_everything_of_a_mid_size_model_lays_out_in_the_background(
    window, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """The scene shown is small while every group is collapsed; Expand All makes it big.
    Laid out and filled inline, as the small scene suggested, a 3,000-node model stopped
    the window for 237 ms: the relayout now goes by the size it is about to have (and a
    small expansion stays inline, done when the call returns)."""
    from benchmarks.models import transformer_like

    path = str(tmp_path / "t.onnx")
    onnx.save(transformer_like(1500), path)
    window.files.open_path(path, background=False)
    window.navigation.collapse_all()
    window.wait_idle()
    shown = len(window.graph_scene.nodes)
    window.navigation.expand_all()
    assert window.work.task is not None  # a worker thread lays it out
    window.wait_idle()
    assert len(window.graph_scene.nodes) > 3 * shown
    # opening one group of 70 nodes stays inline: open when the call returns
    window.navigation.collapse_all()
    window.wait_idle()
    groups = [n.data_item for n in window.graph_scene.nodes.values() if n.data_item.kind == "group"]
    group = max(groups, key=lambda d: d.op_count)
    window.navigation.toggle(group.id)
    assert window.work.task is None and not window.graph_scene.filling
    assert window.graph_scene.nodes[group.id].is_frame
    assert len(window.graph_scene.nodes) > shown
