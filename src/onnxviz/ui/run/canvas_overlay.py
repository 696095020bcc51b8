"""Run marks on the canvas, drawn by items of our own that we attach to the canvas'
node and edge items as children (so they move, hide and vanish with them):

- `NodeMark`: executed tick, current-node outline, breakpoint dot, and a colour
  (profile heat or compare error): the box's own fill (under its text) and an outline;
- `ValueBadge`: the runtime type of a computed value next to its edge; a click opens
  the tensor inspector.

The canvas rebuilds its items on every layout; `CanvasOverlay` notices a new item map
(``graph_scene.nodes`` is a new dict) and attaches fresh marks.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsSceneMouseEvent,
    QStyleOptionGraphicsItem,
    QWidget,
)

from onnxviz.ui.canvas.items import EdgeItem, NodeItem
from onnxviz.ui.run.compare_colours import edge_colour

BREAKPOINT = QColor(220, 40, 40)
CURRENT = QColor(255, 140, 0)
EXECUTED = QColor(40, 160, 80)
MAX_BADGES = 3000
NOTE_SPILL = 50.0  # the note under a box may be wider than the box


def shape_text(type_text: str) -> str:
    """``float32[1,64,56,56]`` -> ``1×64×56×56`` (dtype dropped: badges stay short)."""
    if "[" in type_text and type_text.endswith("]") and not type_text.startswith("seq"):
        dims = type_text[type_text.index("[") + 1 : -1]
        return "×".join(dims.split(",")) if dims else "scalar"
    return type_text


class NodeMark(QGraphicsItem):
    def __init__(self, node: NodeItem) -> None:
        super().__init__(node)
        self.executed = False
        self.current = False
        self.breakpoint = False
        self.fill: QColor | None = None
        self.note = ""  # short text under the box: time or error
        r = node.boundingRect().adjusted(2, 2, -2, -2)
        # an expanded Loop/If/function frame: mark its header only, not the body inside
        height = min(r.height(), 30.0) if node.is_frame else r.height()
        self._rect = QRectF(0, 0, r.width(), height)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
        self.setZValue(1)

    def boundingRect(self) -> QRectF:
        return self._rect.adjusted(-NOTE_SPILL, -8, NOTE_SPILL, 20)

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        r = self._rect
        if self.fill is not None:
            # The colour itself is the box's fill (`NodeItem.set_tint`: under its
            # text, which keeps its contrast); the mark adds a strong outline.
            pen = QPen(edge_colour(self.fill) or self.fill.darker(135), 3.0)
            pen.setCosmetic(True)
            painter.setPen(pen)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(r.adjusted(-1, -1, 1, 1), 6, 6)
        if self.executed:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(EXECUTED)
            painter.drawRoundedRect(QRectF(r.right() - 7, r.bottom() - 7, 6, 6), 3, 3)
        if self.current:
            pen = QPen(CURRENT, 3.5)
            pen.setCosmetic(True)
            painter.setPen(pen)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(r.adjusted(-3, -3, 3, 3), 7, 7)
        if self.breakpoint:
            painter.setPen(QPen(QColor(255, 255, 255), 1.5))
            painter.setBrush(BREAKPOINT)
            painter.drawEllipse(QRectF(-6, -6, 12, 12))
        if self.note:
            font = QFont()
            font.setPointSizeF(7.0)
            painter.setFont(font)
            painter.setPen(QColor(90, 90, 90))
            painter.drawText(
                QRectF(-NOTE_SPILL, r.bottom() + 1, r.width() + 2 * NOTE_SPILL, 14),
                Qt.AlignmentFlag.AlignCenter,
                self.note,
            )


class ValueBadge(QGraphicsItem):
    def __init__(self, edge: EdgeItem, text: str, on_click: Callable[[], object]) -> None:
        super().__init__(edge)
        self.text = text
        self._on_click = on_click
        font = QFont()
        font.setPointSizeF(7.5)
        font.setBold(True)
        self._font = font
        width = QFontMetricsF(font).horizontalAdvance(text) + 8
        x, y = edge.data_edge.label_pos
        if edge.show_label:
            lr = edge.label_rect
            x, y = lr.left(), lr.bottom() + 1
        else:
            x, y = x + 4, y - 7
        self._rect = QRectF(x, y, width, 13)
        self.setZValue(2)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip(f"{edge.data_edge.value}: {text} (click to inspect)")

    def boundingRect(self) -> QRectF:
        return self._rect.adjusted(-1, -1, 1, 1)

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        painter.setPen(QPen(QColor(30, 110, 200), 1.0))
        painter.setBrush(QBrush(QColor(225, 238, 255)))
        painter.drawRoundedRect(self._rect, 6, 6)
        painter.setFont(self._font)
        painter.setPen(QColor(20, 70, 140))
        painter.drawText(self._rect, Qt.AlignmentFlag.AlignCenter, self.text)

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        event.accept()
        self._on_click()


def node_key(item: NodeItem) -> tuple[str, int] | None:
    d = item.data_item
    if d.node_index is None or d.kind in ("input", "output", "outer", "proxy", "group"):
        return None
    return (d.graph_path, d.node_index)


def parent_paths(path: str) -> list[str]:
    """``main/body:Loop_3/then:If`` -> itself, ``main/body:Loop_3``, ``main``."""
    out = [path]
    while "/" in path:
        path = path.rsplit("/", 1)[0]
        out.append(path)
    return out


class CanvasOverlay:
    """Keeps the run marks of one scene in step with the run panel's state."""

    def __init__(self, scene: object, on_value: Callable[[str, str], object]) -> None:
        self.scene = scene
        self.on_value = on_value
        self.marks: dict[tuple[str, int], NodeMark] = {}
        self.badges: list[ValueBadge] = []
        self._nodes_seen: object = None
        self._marks_made = False
        self._badge_types: dict[tuple[str, str], str] = {}

    def _attach(self) -> bool:
        """Follow a rebuilt scene (its marks are made when first needed); True when it
        was rebuilt."""
        nodes = self.scene.nodes  # type: ignore[attr-defined]
        if nodes is self._nodes_seen:
            return False
        self._nodes_seen = nodes
        self.marks = {}
        self._marks_made = False
        self.badges = []
        self._badge_types = {}
        return True

    def make_marks(self) -> None:
        """One mark per box.  Only once there is something to show: every rebuilt scene
        of a model nobody runs would otherwise pay a child item per box (30 ms for a
        big model's first view, on the UI thread)."""
        if self._marks_made:
            return
        self._marks_made = True
        for item in self.scene.nodes.values():  # type: ignore[attr-defined]
            key = node_key(item)
            if key is not None:
                self.marks[key] = NodeMark(item)

    def follows(self, nodes: object) -> bool:
        """True when the marks are those of the scene's boxes ``nodes`` (a rebuilt
        scene has a new dict of boxes, and needs fresh marks)."""
        return nodes is self._nodes_seen

    def item_for(self, graph_path: str, index: int) -> NodeItem | None:
        self._attach()
        self.make_marks()
        mark = self.marks.get((graph_path, index))
        return mark.parentItem() if mark is not None else None  # type: ignore[return-value]

    def update(
        self,
        executed: set[tuple[str, int]],
        current: tuple[str, int] | None,
        breakpoints: set[tuple[str, int]],
        fills: dict[tuple[str, int], QColor],
        notes: dict[tuple[str, int], str],
        value_types: dict[tuple[str, str], str],
    ) -> None:
        self._attach()
        if not self._marks_made and not (executed or current or breakpoints or fills or notes):
            self._update_badges(value_types)
            return
        self.make_marks()
        for key, mark in self.marks.items():
            state = (
                key in executed,
                key == current,
                key in breakpoints,
                fills.get(key),
                notes.get(key, ""),
            )
            if state != (mark.executed, mark.current, mark.breakpoint, mark.fill, mark.note):
                mark.prepareGeometryChange()
                mark.executed, mark.current, mark.breakpoint, mark.fill, mark.note = state
                box = mark.parentItem()
                if isinstance(box, NodeItem):
                    box.set_tint(mark.fill)
                mark.update()
        self._update_badges(value_types)

    def _opener(self, graph_path: str, name: str) -> Callable[[], object]:
        return lambda: self.on_value(graph_path, name)

    def _update_badges(self, value_types: dict[tuple[str, str], str]) -> None:
        if value_types == self._badge_types:
            return
        for badge in self.badges:
            if badge.scene() is not None:
                badge.scene().removeItem(badge)
        self.badges = []
        self._badge_types = dict(value_types)
        if not value_types:
            return
        seen: set[tuple[str, str]] = set()
        for edge in self.scene.edge_items:  # type: ignore[attr-defined]
            d = edge.data_edge
            key = (d.source, d.value)
            if key in seen or not d.value:
                continue
            for path in parent_paths(d.graph_path):
                text = value_types.get((path, d.value))
                if text is not None:
                    seen.add(key)
                    self.badges.append(
                        ValueBadge(edge, shape_text(text), self._opener(path, d.value))
                    )
                    break
            if len(self.badges) >= MAX_BADGES:
                break
