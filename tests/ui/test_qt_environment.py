"""The Qt environment itself: a PySide6 build that cannot repaint for long, or a machine
without fonts (text drawn as boxes), must fail here rather than in front of a user."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontDatabase, QFontMetricsF, QImage, QPainter
from PySide6.QtWidgets import QGraphicsItem, QGraphicsScene

pytestmark = pytest.mark.qt


class _Box(QGraphicsItem):
    """A custom item like the canvas's node boxes: several void-returning calls per paint."""

    def __init__(self) -> None:
        super().__init__()
        self.paints = 0

    def boundingRect(self) -> QRectF:
        return QRectF(0, 0, 40, 20)

    def paint(self, painter: QPainter, option: object, widget: object = None) -> None:
        self.paints += 1
        painter.setPen(QColor(30, 30, 30))
        painter.setBrush(QColor(200, 220, 255))
        painter.drawRoundedRect(self.boundingRect(), 4, 4)
        painter.drawText(self.boundingRect(), Qt.AlignmentFlag.AlignCenter, "Conv")


def test_custom_item_survives_20000_repaints(qapp: object) -> None:
    # PySide6 6.12.0 on Python < 3.12 dropped a reference to None on every void call and
    # aborted ("none_dealloc") within a few thousand repaints.
    scene = QGraphicsScene()
    item = _Box()
    scene.addItem(item)
    image = QImage(48, 24, QImage.Format.Format_ARGB32)
    none_refs_before = sys.getrefcount(None)
    for _ in range(20_000):
        painter = QPainter(image)
        scene.render(painter)
        painter.end()
    assert item.paints == 20_000
    # The refcount of None must not have drifted down by about one per call.
    assert sys.getrefcount(None) > none_refs_before - 1000


def test_fonts_render_real_glyphs(qapp: object) -> None:
    families = QFontDatabase.families()
    assert families, "no font installed: install fonts-dejavu-core (text would draw as boxes)"
    font = QFont()
    metrics = QFontMetricsF(font)
    assert metrics.inFont("A") and metrics.inFont("0")

    # Two different letters must draw different pixels (a missing font draws the same box).
    def glyph(text: str) -> bytes:
        image = QImage(40, 40, QImage.Format.Format_Grayscale8)
        image.fill(255)
        painter = QPainter(image)
        painter.setFont(font)
        painter.drawText(QRectF(0, 0, 40, 40), Qt.AlignmentFlag.AlignCenter, text)
        painter.end()
        return bytes(image.constBits())

    assert glyph("A") != glyph("W")
    assert glyph("A") != glyph(" ")
