"""Zoomed far out (a fitted BERT), the boxes are too small for text: the view names
them with labels at a readable size that never overlap (issue 18, item 12)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QRectF

from onnxviz.ui.canvas.zoomed_out_labels import Candidate, place_labels

pytestmark = pytest.mark.qt

EXPORTERS = Path(__file__).resolve().parent.parent / "data" / "exporters"
VIEW = QRectF(0, 0, 400, 300)


def _width(text: str) -> float:
    return 7.0 * len(text)


def _cand(item_id: str, x: float, y: float, category: str = "math") -> Candidate:
    return Candidate(item_id, QRectF(x, y, 40, 5), item_id, category)


def test_labels_go_on_the_box_then_beside_it_then_nowhere() -> None:
    same_place = [_cand(f"Op{k}", 100, 100) for k in range(4)]
    placed = {label.item_id: label.rect for label in place_labels(same_place, _width, VIEW)}
    assert len(placed) == 3  # on it, right of it, left of it; the fourth has no room
    centres = sorted(r.center().x() for r in placed.values())
    assert centres[0] < 100 < centres[1] < 140 < centres[2]
    rects = list(placed.values())
    assert not any(a.intersects(b) for i, a in enumerate(rects) for b in rects[i + 1 :])


def test_the_model_structure_is_named_before_the_plumbing() -> None:
    crowd = [_cand("Shape", 100, 100, "shape")] * 3 + [_cand("Conv", 100, 100, "layer")]
    placed = place_labels(crowd, _width, VIEW)
    conv = next(label for label in placed if label.text == "Conv")
    assert conv.rect.center().x() == pytest.approx(120)  # Conv got the place on its box


def test_labels_stay_in_view_and_off_frame_titles() -> None:
    edge = [_cand("Rightmost", 355, 100)]  # centred, it would leave the view
    (label,) = place_labels(edge, _width, VIEW)
    assert VIEW.contains(label.rect) and label.rect.right() <= 355  # left of its box
    title = QRectF(80, 95, 60, 14)
    placed = place_labels([_cand("Mul", 100, 100)], _width, VIEW, [title])
    assert all(not title.intersects(label.rect) for label in placed)


def _dark_in(window, rect) -> int:  # type: ignore[no-untyped-def]
    window.view.viewport().repaint()
    image = window.view.viewport().grab(rect.toRect()).toImage()
    return sum(
        1
        for x in range(image.width())
        for y in range(image.height())
        if image.pixelColor(x, y).lightness() < 90
    )


def test_a_fitted_bert_names_its_operators(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.canvas import lod

    window.resize(1400, 900)
    window.files.open_path(str(EXPORTERS / "optimum_bert.onnx"), background=False)
    window.view.fit()
    assert window.view.zoom() < lod.SMALL_TITLE_MIN  # no box draws its own title here
    labels = window.view.zoomed_out_labels()
    assert len(labels) >= 15
    viewport = QRectF(window.view.viewport().rect())
    rects = [label.rect for label in labels]
    assert all(viewport.contains(r) for r in rects)
    assert not any(a.intersects(b) for i, a in enumerate(rects) for b in rects[i + 1 :])
    nodes = window.graph_scene.nodes
    for label in labels:  # each names its box, and sits on it or next to it
        box = window.view.mapFromScene(nodes[label.item_id].sceneBoundingRect()).boundingRect()
        assert label.text == nodes[label.item_id].data_item.title
        assert abs(label.rect.center().y() - box.center().y()) <= 1
        assert label.rect.left() <= box.right() + 3 and label.rect.right() >= box.left() - 3
    texts = {label.text for label in labels}
    assert {"MatMul", "LayerNormalization"} <= texts
    # drawn: the text's dark pixels are on screen where the label is
    assert _dark_in(window, labels[0].rect.adjusted(2, 2, -2, -2)) > 5
    # where the boxes hold their own titles, no labels over them
    window.view.set_zoom(lod.TEXT_MIN)
    assert window.view.zoomed_out_labels() == []


def test_a_view_of_too_many_boxes_names_none(window, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Past MAX_CANDIDATES boxes in view no labels at all (a huge graph's overview stays
    fast); a big graph seen in part is still labelled, from the scene's index."""
    from onnxviz.ui.canvas import lod
    from onnxviz.ui.canvas import view as view_module

    window.resize(900, 600)
    window.files.open_path(str(EXPORTERS / "optimum_bert.onnx"), background=False)
    cap = len(window.graph_scene.nodes) - 1  # the whole of it is one too many
    monkeypatch.setattr(view_module, "MAX_CANDIDATES", cap)
    view = window.view
    view.fit()
    assert view.zoom() < lod.SMALL_TITLE_MIN and view.zoomed_out_labels() == []
    # a closer look at the top, still too far out for the boxes' own titles
    view.set_zoom(lod.SMALL_TITLE_MIN * 0.9)
    top = min(
        (n for n in window.graph_scene.nodes.values() if not n.is_frame),
        key=lambda n: n.y(),
    )
    view.centerOn(top)
    labels = view.zoomed_out_labels()
    assert 0 < len(labels) <= cap
    visible = view.mapToScene(view.viewport().rect()).boundingRect()
    nodes = window.graph_scene.nodes
    assert all(visible.intersects(nodes[label.item_id].sceneBoundingRect()) for label in labels)
