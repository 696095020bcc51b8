"""Diff colours on a canvas, drawn as overlay items over the canvas's own boxes and
edges (the canvas items stay untouched): green for added, red for removed, amber for
changed, violet for fused groups; after a numeric diff, edges tinted by their error."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsPathItem, QGraphicsRectItem

from onnxviz.ui.canvas.items import EdgeItem
from onnxviz.ui.canvas.scene import GraphScene

COLORS = {
    "added": QColor("#2e9d4f"),
    "removed": QColor("#d23c3c"),
    "changed": QColor("#e69a1c"),
    "fused": QColor("#8a4fd0"),
}
Z_MARK = 50.0


def error_color(ratio: float | None) -> QColor:
    """Edge colour for max_abs / tolerance: blue-grey (not judged), green (well within),
    amber (near), red (beyond)."""
    if ratio is None:
        return QColor("#7a8aa0")
    if ratio <= 0.5:
        return QColor("#2e9d4f")
    if ratio <= 1.0:
        return QColor("#e0b020")
    return QColor("#d23c3c")


class NodeMark(QGraphicsRectItem):
    """A coloured frame and wash over one node box."""

    def __init__(self, rect: QRectF, kind: str) -> None:
        super().__init__(rect.adjusted(-4, -4, 4, 4))
        self.kind = kind
        color = COLORS[kind]
        pen = QPen(color, 3.0)
        pen.setCosmetic(True)
        if kind == "fused":
            pen.setStyle(Qt.PenStyle.DashLine)
        self.setPen(pen)
        wash = QColor(color)
        wash.setAlpha(40)
        self.setBrush(QBrush(wash))
        self.setZValue(Z_MARK)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)


class EdgeMark(QGraphicsPathItem):
    def __init__(self, edge: EdgeItem, color: QColor, tooltip: str) -> None:
        pts = edge.data_edge.points
        path = QPainterPath(QPointF(*pts[0]))
        for k in range(1, len(pts) - 2, 3):
            path.cubicTo(QPointF(*pts[k]), QPointF(*pts[k + 1]), QPointF(*pts[k + 2]))
        if len(pts) == 2:
            path.lineTo(QPointF(*pts[1]))
        super().__init__(path)
        pen = QPen(color, 3.0)
        pen.setCosmetic(True)
        self.setPen(pen)
        self.setZValue(Z_MARK - 1)
        self.setToolTip(tooltip)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)


class Marks:
    """The overlay of one scene: node marks by item id, edge marks."""

    def __init__(self, scene: GraphScene) -> None:
        self.scene = scene
        self.nodes: dict[str, NodeMark] = {}
        self.edges: list[EdgeMark] = []

    def mark_node(self, item_id: str, kind: str) -> None:
        item = self.scene.nodes.get(item_id)
        if item is None or item_id in self.nodes:
            return
        mark = NodeMark(item.sceneBoundingRect(), kind)
        self.scene.addItem(mark)
        self.nodes[item_id] = mark

    def clear_edges(self) -> None:
        for mark in self.edges:
            self.scene.removeItem(mark)
        self.edges = []

    def mark_edge(self, edge: EdgeItem, color: QColor, tooltip: str) -> None:
        if len(edge.data_edge.points) < 2:
            return
        mark = EdgeMark(edge, color, tooltip)
        self.scene.addItem(mark)
        self.edges.append(mark)
