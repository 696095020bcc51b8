"""Level of detail: text drops out when zoomed out (the title last)."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QStyleOptionGraphicsItem

from onnxviz.ui.canvas import lod
from tests.present.models import example

pytestmark = pytest.mark.qt


def _interior_colours(item, scale: float) -> set[int]:  # type: ignore[no-untyped-def]
    rect = item.boundingRect()
    w, h = int(rect.width() * scale) + 4, int(rect.height() * scale) + 4
    image = QImage(w, h, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.scale(scale, scale)
    painter.translate(-rect.x(), -rect.y())
    item.paint(painter, QStyleOptionGraphicsItem(), None)
    painter.end()
    inset = 4
    return {image.pixel(x, y) for x in range(inset, w - inset) for y in range(inset, h - inset)}


def test_text_and_rows_drop_out_when_zoomed_out(window) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("small_cnn.onnx"), background=False)
    item = next(
        n for n in window.graph_scene.nodes.values() if n.data_item.title == "BatchNormalization"
    )
    far = _interior_colours(item, lod.SMALL_TITLE_MIN * 0.8)
    middle = _interior_colours(item, lod.TEXT_MIN * 0.8)
    near = _interior_colours(item, 1.0)

    # text is near-black; the border is mid-grey, the fill light
    def darkest(colours: set[int]) -> int:
        return min(QColor.fromRgba(c).lightness() for c in colours)

    assert darkest(far) > 90  # far out: no text, only fill and border
    # zoomed out: the title alone, at a readable screen size (issue 18: labels stay)
    assert darkest(middle) < 90
    assert darkest(near) < 60  # close up: the title and rows are drawn
    assert len(near) > len(middle) > len(far)
