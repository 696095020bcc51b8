"""Frame titles at a fixed screen size when zoomed far out, all painted by one item.

The title of an expanded group or body (layers.0, attention, Loop body) stays readable
while the zoom is too small for the frame's own header text: a fitted BERT still says
which layer is where.  Nested frames that start at nearly the same height (encoder >
layer.0 > attention) stack their titles below their parent's, up to
`FrameTitle.MAX_STACK` deep, instead of covering it.

They were an item each, ignoring the view's scale.  Qt cannot index such items, so every
paint asked each one for its bounding rect: with the 15,708 frames of an expanded
100k-node model, 50 ms per paint before anything was drawn.  Now a `FrameTitle` is plain
data and one `FrameTitleLayer` over the whole scene draws the titles of the frames in
the exposed area.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QTransform
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem, QWidget

from onnxviz.ui.canvas import lod
from onnxviz.ui.canvas.items import Z_NODE, NodeItem, title_font_px

if TYPE_CHECKING:
    from collections.abc import Iterator


_NOWHERE = QPainterPath()


class FrameTitle:
    """One expanded frame's far-out title: where it goes at a zoom, and its drawing."""

    MAX_W = 220.0  # screen px
    MAX_STACK = 4

    def __init__(self, frame: NodeItem) -> None:
        self.frame = frame
        self.text = frame.data_item.title
        font, metrics = title_font_px(int(lod.SMALL_TITLE_PX))
        self._font, self._metrics = font, metrics
        self.plate_h = metrics.height() + 2
        self._width = min(math.ceil(metrics.horizontalAdvance(self.text)) + 8, self.MAX_W)
        self._shown: tuple[int, str, float] = (-1, "", 0.0)  # room -> elided text, width

    def pos(self) -> QPointF:
        """The frame's top-left corner in the scene, where the title hangs from."""
        return self.frame.pos()

    def shows_at(self, zoom: float) -> bool:
        return zoom < lod.TEXT_MIN and self.frame.data_item.width * zoom >= lod.FRAME_TITLE_MIN_W

    def drop(self, zoom: float, depth: int = 0) -> float | None:
        """Screen px below the frame's top where the title goes (under the titles of
        enclosing frames that start at nearly the same height); None: too deep."""
        # the scene's titles (not kept here: a cycle would hold a replaced scene's items)
        titles = getattr(self.frame.scene(), "frame_titles", {})
        parent = titles.get(self.frame.data_item.parent or "")
        if parent is None or not parent.shows_at(zoom):
            return 0.0
        if depth >= self.MAX_STACK:
            return None
        above = parent.drop(zoom, depth + 1)
        if above is None:
            return None
        gap = (self.frame.y() - parent.frame.y()) * zoom
        return max(0.0, above + parent.plate_h - gap)

    def plate(self, zoom: float) -> QRectF | None:
        """Where the title is drawn, in screen px from the frame's top-left corner (at
        most this wide: the text is elided to it); None when it is not drawn."""
        if not self.shows_at(zoom):
            return None
        drop = self.drop(zoom)
        if drop is None or drop > self.plate_h * self.MAX_STACK:
            return None
        return QRectF(0, drop, min(self._width, self.frame.data_item.width * zoom), self.plate_h)

    def draw(self, painter: QPainter, where: QRectF) -> None:
        """Paint the title at ``where`` (`plate`), the painter in screen px with the
        frame's corner at the origin."""
        room = int(where.width())
        if self._shown[0] != room:  # elide once per width, not on every frame
            text = self._metrics.elidedText(self.text, Qt.TextElideMode.ElideRight, room - 5)
            self._shown = (room, text, self._metrics.horizontalAdvance(text) + 6)
        _, shown, plate_w = self._shown
        if len(shown) < 2:
            return
        theme = self.frame.graph_scene.theme
        plate = QColor(theme.background)
        plate.setAlpha(215)
        box = QRectF(0, where.y(), plate_w, self.plate_h)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(plate)
        painter.drawRoundedRect(box, 2, 2)
        painter.setPen(theme.text)
        painter.setFont(self._font)
        painter.drawText(box, Qt.AlignmentFlag.AlignCenter, shown)


class FrameTitleLayer(QGraphicsItem):
    """The one scene item that paints every frame's far-out title, above the boxes.

    It covers the scene, takes no mouse buttons and has no shape, so clicks, hovers and
    rubber bands go to the boxes under it.  A paint looks only at frames wide enough to
    name themselves at the painter's zoom (kept sorted by width) whose corner lies in
    the exposed area, or so near it that their title reaches in."""

    def __init__(self, rect: QRectF) -> None:
        super().__init__()
        self._rect = QRectF(rect)
        self._by_width: list[tuple[float, float, float, FrameTitle]] = []  # (-w, x, y, t)
        self._sorted = True
        self._reach = 0.0  # screen px a title reaches below its frame's corner, at most
        self.setZValue(Z_NODE + 50)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemUsesExtendedStyleOption, True)

    def add(self, title: FrameTitle) -> None:
        corner = title.pos()
        self._by_width.append((-title.frame.data_item.width, corner.x(), corner.y(), title))
        self._sorted = False
        self._reach = max(self._reach, title.plate_h * (FrameTitle.MAX_STACK + 1))

    def boundingRect(self) -> QRectF:
        return self._rect

    def shape(self) -> QPainterPath:
        return _NOWHERE  # never under the mouse (asked at every hover and click)

    def plates(self, zoom: float, seen: QRectF) -> Iterator[tuple[FrameTitle, QRectF]]:
        """(title, `FrameTitle.plate`) of every title drawn at ``zoom`` that reaches into
        ``seen`` (scene coordinates)."""
        if zoom >= lod.TEXT_MIN or not self._by_width:
            return
        if not self._sorted:
            self._by_width.sort(key=lambda entry: entry[0])
            self._sorted = True
        # only frames at least this wide name themselves: a prefix of the sorted list
        widest = bisect.bisect_right(self._by_width, (-lod.FRAME_TITLE_MIN_W / zoom, math.inf))
        left = seen.left() - FrameTitle.MAX_W / zoom
        top = seen.top() - self._reach / zoom
        right, bottom = seen.right(), seen.bottom()
        for _, x, y, title in self._by_width[:widest]:
            if left <= x <= right and top <= y <= bottom:
                where = title.plate(zoom)
                if where is not None:
                    yield title, where

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        world = painter.worldTransform()
        zoom = world.m11()
        drawn = list(self.plates(zoom, option.exposedRect))  # type: ignore[attr-defined]
        if not drawn:
            return
        painter.save()
        for title, where in drawn:
            corner = world.map(title.pos())
            painter.setTransform(QTransform.fromTranslate(round(corner.x()), round(corner.y())))
            title.draw(painter, where)
        painter.restore()
