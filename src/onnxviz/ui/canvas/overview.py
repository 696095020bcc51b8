"""The overview: when the whole of a big graph is on screen, one item paints every box
(one `drawRects` per colour) and every edge (one path of straight segments between
route points) instead of thousands of items each paying a Python call per frame.

`GraphScene.set_overview` swaps it in below `OVERVIEW_ZOOM` for scenes with more than
`OVERVIEW_MIN_ITEMS` items."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem, QWidget

if TYPE_CHECKING:
    from onnxviz.present.scene import Scene
    from onnxviz.ui.theme import Theme

OVERVIEW_ZOOM = 0.3
OVERVIEW_MIN_ITEMS = 600


class OverviewItem(QGraphicsItem):
    """Made from the placed scene's data, not from canvas items: it is whole while a big
    scene is still being filled, and it stands in for a scene not made yet."""

    def __init__(self, display: Scene, margin: float = 0.0) -> None:
        super().__init__()
        self._bounds = QRectF(
            -margin, -margin, display.width + 2 * margin, display.height + 2 * margin
        )
        self._boxes: dict[str, list[QRectF]] = {}
        self._frames: list[QRectF] = []
        for d in display.items.values():
            rect = QRectF(d.x, d.y, d.width, d.height)
            if d.expanded and d.blocks:  # a frame (as `NodeItem.is_frame`)
                self._frames.append(rect)
                continue
            key = d.category if d.kind in ("op", "container") else d.kind
            self._boxes.setdefault(key, []).append(rect)
        path = QPainterPath()
        for edge in display.edges:
            pts = edge.points
            if not pts:
                continue
            path.moveTo(QPointF(*pts[0]))
            for k in range(3, len(pts), 3):
                path.lineTo(QPointF(*pts[k]))
        self._edges = path
        self.setZValue(-1)

    def boundingRect(self) -> QRectF:
        return self._bounds

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        self.draw(painter, self.scene().theme)  # type: ignore[attr-defined]

    def draw(self, painter: QPainter, theme: Theme) -> None:
        """Paint the overview in scene coordinates (also when it is in no scene)."""
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        pen = QPen(theme.group_border, 1)
        pen.setCosmetic(True)
        painter.setPen(pen)
        painter.setBrush(theme.frame_fill)
        if self._frames:
            painter.drawRects(self._frames)
        edge_pen = QPen(theme.edge, 1)
        edge_pen.setCosmetic(True)
        painter.setPen(edge_pen)
        painter.setBrush(QColor(0, 0, 0, 0))
        painter.drawPath(self._edges)
        border = QPen(theme.node_border, 1)
        border.setCosmetic(True)
        painter.setPen(border)
        fills = {
            "input": theme.input_fill,
            "output": theme.output_fill,
            "outer": theme.outer_fill,
            "proxy": theme.outer_fill,
            "group": theme.group_fill,
        }
        for key, rects in self._boxes.items():
            painter.setBrush(fills.get(key) or theme.category(key))
            painter.drawRects(rects)
        painter.restore()
