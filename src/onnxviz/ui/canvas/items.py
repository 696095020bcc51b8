"""Light custom graphics items: node boxes, pills, group boxes and frames, edges.

Items read their look from the scene's theme and paint according to `lod`; nothing is
cached per item beyond the path of an edge, so 100k items stay cheap."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QFontMetricsF,
    QPainter,
    QPainterPath,
    QPainterPathStroker,
    QPen,
    QPolygonF,
)
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsSceneHoverEvent,
    QGraphicsSceneMouseEvent,
    QStyleOptionGraphicsItem,
    QWidget,
)

from onnxviz.present.options import GROUP_HEADER, LINE_H, PAD_X, ROW_H, SLOT_LABEL_H, TITLE_H
from onnxviz.present.scene import DisplayEdge, DisplayItem
from onnxviz.ui.canvas import lod
from onnxviz.ui.theme import italic_font, text_font, title_font

if TYPE_CHECKING:
    from onnxviz.ui.canvas.scene import GraphScene

Z_FRAME = 0.0
Z_EDGE = 100.0
Z_NODE = 200.0
HOVER_ALPHA = 70  # of the selection colour behind a hovered weight row

_TITLE_FONT = None
_TEXT_FONT = None
_ITALIC_FONT = None


_METRICS: dict[bool, QFontMetricsF] = {}


def _label_metrics(italic: bool) -> QFontMetricsF:
    fm = _METRICS.get(italic)
    if fm is None:
        _, text, ital = _fonts()
        fm = _METRICS[italic] = QFontMetricsF(ital if italic else text)
    return fm


_SMALL_TITLES: dict[int, tuple[QFont, QFontMetricsF]] = {}


def title_font_px(px: int) -> tuple[QFont, QFontMetricsF]:
    found = _SMALL_TITLES.get(px)
    if found is None:
        font = QFont(_fonts()[0])
        font.setPixelSize(px)
        found = _SMALL_TITLES[px] = (font, QFontMetricsF(font))
    return found


def _small_title(painter: QPainter, rect: QRectF, text: str, level: float) -> None:
    """The title at a fixed screen size when the zoom makes the box text unreadable:
    `lod.SMALL_TITLE_PX` screen pixels, smaller (down to `lod.SMALL_TITLE_MIN_PX`) to
    fit the box, else elided."""
    room = rect.width() - 2
    px = max(1, round(lod.SMALL_TITLE_PX / level))
    font, metrics = title_font_px(px)
    wide = metrics.horizontalAdvance(text)
    if wide > room:
        floor = max(1, round(lod.SMALL_TITLE_MIN_PX / level))
        font, metrics = title_font_px(max(floor, int(px * room / wide)))
    shown = metrics.elidedText(text, Qt.TextElideMode.ElideRight, room)
    if len(shown) < 2:  # not even one letter and the ellipsis
        return
    painter.setFont(font)
    painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, shown)


def _fonts():  # type: ignore[no-untyped-def]
    global _TITLE_FONT, _TEXT_FONT, _ITALIC_FONT
    if _TITLE_FONT is None:
        _TITLE_FONT, _TEXT_FONT, _ITALIC_FONT = title_font(), text_font(), italic_font()
    return _TITLE_FONT, _TEXT_FONT, _ITALIC_FONT


def luminance(c: QColor) -> float:
    """WCAG relative luminance (0 black .. 1 white)."""

    def channel(v: float) -> float:
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF())


def ink_on(fill: QColor) -> QColor:
    """Near-black or near-white, whichever contrasts more with ``fill`` (a saturated
    red takes black: 5.6:1 against white's 3.8:1)."""
    return QColor("#1b1b1b") if luminance(fill) > 0.18 else QColor("#f4f4f4")


class NodeItem(QGraphicsItem):
    """Any box: operator, pill, collapsed group, proxy, or frame of an expanded item."""

    def __init__(self, data: DisplayItem) -> None:
        super().__init__()
        self.data_item = data
        self.highlighted = False
        self.is_frame = data.expanded and bool(data.blocks)
        self.setPos(data.x, data.y)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsSelectable, True)
        self.setZValue(Z_FRAME + data.depth if self.is_frame else Z_NODE)
        self.setToolTip(_tooltip(data))
        # Boxes with weight rows answer hovering: a click on a row shows the tensor, a
        # click elsewhere the node, and the hovered row lights up to say which.
        self.setAcceptHoverEvents(bool(data.rows) and not self.is_frame)
        self.hover_row: int | None = None

        self.problems: list[str] = []
        self._badge: ProblemBadge | None = None
        # A run colour (profile heat, compare error) painted as the box's own fill, so
        # the text drawn over it keeps its contrast; None: the category colour.
        self.tint: QColor | None = None

    def set_tint(self, color: QColor | None) -> None:
        if color != self.tint:
            self.tint = color
            self.update()

    def set_problems(self, problems: list[str]) -> None:
        """Diagnostics located at this node ("<severity> <code>: <message>"): a badge at
        the top right corner."""
        if problems == self.problems:
            return
        self.problems = problems
        if not problems:
            badge = self._badge
            if badge is not None:
                scene = badge.scene()
                if scene is not None:
                    scene.removeItem(badge)  # (removal also detaches it from this node)
                else:
                    # PySide6's stub says an item, but None is Qt's "no parent"
                    badge.setParentItem(None)  # type: ignore[arg-type]
                self._badge = None
            return
        if self._badge is None:
            self._badge = ProblemBadge(self)
            self._badge.setPos(self._rect.width() - 4, -10)
        self._badge.set_text(problems)

    # -- geometry ---------------------------------------------------------------------
    def boundingRect(self) -> QRectF:
        d = self.data_item
        return QRectF(-2.0, -2.0, d.width + 4.0, d.height + 4.0)

    @property
    def _rect(self) -> QRectF:
        # Made when asked, not kept: a kept QRectF is one more entry in Shiboken's table
        # of wrappers per box (EdgeItem's docstring says what that table's growth costs).
        d = self.data_item
        return QRectF(0.0, 0.0, d.width, d.height)

    def shape(self) -> QPainterPath:
        path = QPainterPath()
        if self.is_frame:
            # Only the header and the border are "the frame": clicks inside go through
            # to the background (pan) or the items within.
            path.addRect(QRectF(0, 0, self._rect.width(), self._header_height()))
            return path
        path.addRect(self._rect)
        return path

    def title_band(self) -> QRectF:
        """A frame's header and its slot labels ("body", "then_branch"), in scene
        coordinates: the text there must not sit under an edge's label."""
        d = self.data_item
        height = self._header_height() + (SLOT_LABEL_H if d.kind != "group" and d.blocks else 0)
        return self.mapRectToScene(QRectF(0, 0, self._rect.width(), height))

    def _header_height(self) -> float:
        d = self.data_item
        if d.kind == "group":
            return GROUP_HEADER
        return TITLE_H + (LINE_H if d.subtitle else 0.0)

    @property
    def graph_scene(self) -> GraphScene:
        return self.scene()  # type: ignore[return-value]

    # -- painting -----------------------------------------------------------------------
    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        theme = self.graph_scene.theme
        d = self.data_item
        # on a run colour (light tints, or heat) the text takes the ink that reads on it,
        # whatever the theme's text colour
        ink = theme.text if self.tint is None else ink_on(self.tint)
        muted = theme.muted if self.tint is None else ink
        level = lod.level(painter)
        selected = self.isSelected()
        border = (
            theme.selection
            if selected
            else theme.highlight
            if self.highlighted
            else theme.node_border
        )
        pen = QPen(border, 2.0 if (selected or self.highlighted) else 1.0)
        pen.setCosmetic(level < 1.0)
        kind = d.kind
        r = self._rect
        if self.is_frame:
            self._paint_frame(painter, level, pen)
            return
        if kind in ("input", "output", "outer"):
            fill = {"input": theme.input_fill, "output": theme.output_fill}.get(
                kind, theme.outer_fill
            )
            if kind == "outer":
                pen.setStyle(Qt.PenStyle.DashLine)
            painter.setPen(pen)
            painter.setBrush(fill)
            radius = r.height() / 2
            painter.drawRoundedRect(r, radius, radius)
            if level >= lod.TEXT_MIN:
                title, text, _ = _fonts()
                painter.setFont(text)
                painter.setPen(theme.text)
                painter.drawText(r, Qt.AlignmentFlag.AlignCenter, d.title)
            return
        if kind == "proxy":
            painter.setPen(pen)
            painter.setBrush(theme.outer_fill)
            painter.drawRoundedRect(r, 3, 3)
            return
        if kind == "group":
            # a collapsed group: a stacked box
            painter.setPen(pen)
            painter.setBrush(self.tint if self.tint is not None else theme.group_fill)
            if level >= lod.ARROW_MIN:
                painter.drawRoundedRect(r.adjusted(4, -4, 4, -4), 5, 5)
            painter.drawRoundedRect(r, 5, 5)
            if lod.SMALL_TITLE_MIN <= level < lod.TEXT_MIN:
                painter.setPen(ink)
                _small_title(painter, r, d.title, level)
            if level >= lod.TEXT_MIN:
                title, text, _ = _fonts()
                painter.setPen(ink)
                painter.setFont(title)
                painter.drawText(
                    QRectF(0, 3, r.width(), TITLE_H), Qt.AlignmentFlag.AlignCenter, d.title
                )
                painter.setFont(text)
                painter.setPen(muted)
                painter.drawText(
                    QRectF(0, TITLE_H, r.width(), LINE_H), Qt.AlignmentFlag.AlignCenter, d.subtitle
                )
            return
        # operator
        painter.setPen(pen)
        painter.setBrush(self.tint if self.tint is not None else theme.category(d.category))
        painter.drawRoundedRect(r, 5, 5)
        if level < lod.TEXT_MIN:
            if level >= lod.SMALL_TITLE_MIN:
                painter.setPen(ink)
                _small_title(painter, r, d.title, level)
            return
        title, text, _ = _fonts()
        painter.setPen(ink)
        painter.setFont(title)
        painter.drawText(QRectF(0, 0, r.width(), TITLE_H), Qt.AlignmentFlag.AlignCenter, d.title)
        y = TITLE_H
        if d.subtitle:
            painter.setFont(text)
            painter.setPen(muted)
            painter.drawText(
                QRectF(PAD_X / 2, y - 3, r.width() - PAD_X, LINE_H),
                Qt.AlignmentFlag.AlignCenter,
                d.subtitle,
            )
            y += LINE_H
        if d.rows and level >= lod.ROW_MIN:
            painter.setPen(QPen(theme.node_border, 0.5))
            painter.drawLine(QPointF(0, y), QPointF(r.width(), y))
            painter.setFont(text)
            y += 2
            if self.hover_row is not None:
                band = QColor(theme.selection)
                band.setAlpha(HOVER_ALPHA)
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(band)
                painter.drawRoundedRect(
                    QRectF(2, y + self.hover_row * ROW_H, r.width() - 4, ROW_H), 2, 2
                )
            painter.setPen(ink)
            for row in d.rows:
                painter.drawText(
                    QRectF(PAD_X, y, r.width() - PAD_X, ROW_H),
                    Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                    f"{row.label} ⟨{row.shape}⟩",
                )
                y += ROW_H
        if d.expandable:
            self._paint_marker(painter, "+")

    def _paint_marker(self, painter: QPainter, sign: str) -> None:
        theme = self.graph_scene.theme
        painter.setPen(QPen(theme.muted, 1))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        box = QRectF(self._rect.width() - 13, 3, 10, 10)
        painter.drawRect(box)
        painter.drawLine(
            QPointF(box.left() + 2, box.center().y()), QPointF(box.right() - 2, box.center().y())
        )
        if sign == "+":
            painter.drawLine(
                QPointF(box.center().x(), box.top() + 2),
                QPointF(box.center().x(), box.bottom() - 2),
            )

    def _paint_frame(self, painter: QPainter, level: float, pen: QPen) -> None:
        theme = self.graph_scene.theme
        d = self.data_item
        r = self._rect
        header = self._header_height()
        if d.kind == "group":
            painter.setPen(
                QPen(
                    theme.group_border if not pen.width() > 1 else pen.color(),
                    pen.widthF(),
                    Qt.PenStyle.DashLine,
                )
            )
            painter.setBrush(theme.frame_fill)
            painter.drawRoundedRect(r, 8, 8)
        else:
            fill = QColor(theme.category(d.category))
            fill.setAlpha(60)
            painter.setPen(pen)
            painter.setBrush(fill)
            painter.drawRoundedRect(r, 8, 8)
            head = QColor(self.tint if self.tint is not None else theme.category(d.category))
            painter.setBrush(head)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.drawRoundedRect(QRectF(1, 1, r.width() - 2, header - 1), 7, 7)
        if level < lod.TEXT_MIN:
            return  # a `FrameTitle` names the frame at this zoom
        title, text, _ = _fonts()
        ink = theme.text if self.tint is None or d.kind == "group" else ink_on(self.tint)
        painter.setPen(ink)
        painter.setFont(title)
        if d.kind == "group":
            painter.drawText(
                QRectF(PAD_X, 2, r.width() - 2 * PAD_X, header - 2),
                Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                d.title,
            )
        else:
            painter.drawText(
                QRectF(0, 0, r.width(), TITLE_H), Qt.AlignmentFlag.AlignCenter, d.title
            )
            if d.subtitle:
                painter.setFont(text)
                painter.setPen(theme.muted if ink is theme.text else ink)
                painter.drawText(
                    QRectF(0, TITLE_H - 3, r.width(), LINE_H),
                    Qt.AlignmentFlag.AlignCenter,
                    d.subtitle,
                )
            painter.setFont(text)
            painter.setPen(theme.muted)
            for blk in d.blocks:
                painter.drawText(
                    QRectF(blk.x - d.x, header, blk.width, SLOT_LABEL_H),
                    Qt.AlignmentFlag.AlignCenter,
                    blk.label,
                )
        self._paint_marker(painter, "-")

    # -- interaction ----------------------------------------------------------------------
    def row_at(self, y: float) -> str | None:
        k = self.row_index_at(y)
        return None if k is None else self.data_item.rows[k].name

    def row_index_at(self, y: float) -> int | None:
        d = self.data_item
        top = TITLE_H + (LINE_H if d.subtitle else 0.0) + 2
        if not d.rows or y < top:
            return None
        k = int((y - top) // ROW_H)
        return k if 0 <= k < len(d.rows) else None

    def _hover_at(self, pos: QPointF | None) -> None:
        k = self.row_index_at(pos.y()) if pos is not None else None
        if k == self.hover_row:
            return
        self.hover_row = k
        d = self.data_item
        if k is None:
            self.setToolTip(_tooltip(d) + ("\nclick: the node's properties" if pos else ""))
            self.unsetCursor()
        else:
            row = d.rows[k]
            self.setToolTip(f"{row.label}: {row.name} ⟨{row.shape}⟩\nclick: show the tensor")
            self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.update()

    def hoverEnterEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        self._hover_at(event.pos())
        super().hoverEnterEvent(event)

    def hoverMoveEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        self._hover_at(event.pos())
        super().hoverMoveEvent(event)

    def hoverLeaveEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        self._hover_at(None)
        self.setToolTip(_tooltip(self.data_item))
        super().hoverLeaveEvent(event)

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        super().mousePressEvent(event)
        pos = event.pos()
        if self.data_item.expandable and pos.x() > self._rect.width() - 16 and pos.y() < 16:
            self.graph_scene.toggleRequested.emit(self.data_item.id)
            return
        name = self.row_at(pos.y())
        if name is not None:
            self.graph_scene.rowClicked.emit(self.data_item.id, name)

    def mouseDoubleClickEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        d = self.data_item
        if d.kind == "proxy" and d.value:
            self.graph_scene.jumpRequested.emit(d.value)
        elif d.expandable:
            self.graph_scene.toggleRequested.emit(d.id)
        else:
            super().mouseDoubleClickEvent(event)


def _tooltip(d: DisplayItem) -> str:
    if d.kind == "group":
        lines = [f"{d.title}: {d.op_count} ops"]
        if d.group_inputs:
            lines.append(
                "inputs: "
                + ", ".join(d.group_inputs[:8])
                + (" …" if len(d.group_inputs) > 8 else "")
            )
        if d.group_outputs:
            lines.append(
                "outputs: "
                + ", ".join(d.group_outputs[:8])
                + (" …" if len(d.group_outputs) > 8 else "")
            )
        return "\n".join(lines)
    if d.kind == "proxy":
        source = f"{d.title} ({d.value})" if d.title else str(d.value)
        return f"continues from {source}; double-click to jump there"
    if d.kind in ("input", "output", "outer"):
        what = {"input": "graph input", "output": "graph output"}.get(
            d.kind, "value from an outer graph"
        )
        if d.missing:
            what = "value defined nowhere"
        return f"{d.value}: {what}"
    return d.title + (f"\n{d.subtitle}" if d.subtitle else "")


class ProblemBadge(QGraphicsItem):
    """A dot with the number of problems at a node (tooltip: the messages): red when one
    is an error, amber for warnings only."""

    SIZE = 14.0
    ERROR = QColor("#d32f2f")
    WARNING = QColor("#e08600")

    def __init__(self, parent: QGraphicsItem) -> None:
        super().__init__(parent)
        self.count = 0
        self.error = True
        self.setZValue(10)

    def set_text(self, problems: list[str]) -> None:
        self.count = len(problems)
        self.error = any(p.startswith("error") for p in problems)
        shown = problems[:12] + ([f"… {len(problems) - 12} more"] if len(problems) > 12 else [])
        self.setToolTip("\n".join(shown))
        self.update()

    def boundingRect(self) -> QRectF:
        return QRectF(0, 0, self.SIZE, self.SIZE)

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        painter.setPen(QPen(QColor("#ffffff"), 1.0))
        painter.setBrush(self.ERROR if self.error else self.WARNING)
        painter.drawEllipse(self.boundingRect())
        if lod.level(painter) >= lod.TEXT_MIN:
            _, text, _ = _fonts()
            painter.setFont(text)
            painter.drawText(
                self.boundingRect(),
                Qt.AlignmentFlag.AlignCenter,
                str(self.count) if self.count < 10 else "!",
            )


class EdgeItem(QGraphicsItem):
    """An edge: its curve, arrow head and label.  The curve and the arrow are Qt objects
    made at the first paint (or hit test), not with the item: a big model's edges are
    mostly never painted, and every Qt object a Python object holds is one more entry in
    Shiboken's table of wrappers, whose growth past a size doubling was a 80-160 ms stop
    while an expanded 100k-node model filled."""

    def __init__(self, data: DisplayEdge, show_label: bool) -> None:
        super().__init__()
        self.data_edge = data
        self.highlighted = False
        self.show_label = show_label and bool(data.label)
        pts = data.points
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        # The hull of the control points holds the curve (and, with the margin, the
        # arrow head): (left, top, right, bottom).
        self._hull = (min(xs) - 6.0, min(ys) - 6.0, max(xs) + 6.0, max(ys) + 6.0)
        self._path: QPainterPath | None = None
        self._arrow: QPolygonF | None = None
        self._label: tuple[float, float, float, float] | None = None
        if self.show_label:
            fm_w = _label_metrics(data.inferred).horizontalAdvance(data.label) + 6
            lx, ly = data.label_pos
            self._label = (lx + 4, ly - 7, lx + 4 + fm_w, ly + 7)
        self._bounds = self._outline()  # (left, top, right, bottom): a QRectF when asked
        self.setZValue(Z_EDGE)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsSelectable, True)
        self.setToolTip(
            f"{data.value}"
            + (f": {data.label}" + (" (inferred)" if data.inferred else "") if data.label else "")
        )

    def _outline(self) -> tuple[float, float, float, float]:
        left, top, right, bottom = self._hull
        if self._label is not None:
            left, top = min(left, self._label[0]), min(top, self._label[1])
            right, bottom = max(right, self._label[2]), max(bottom, self._label[3])
        return left, top, right, bottom

    def _curve(self) -> QPainterPath:
        path = self._path
        if path is None:
            pts = self.data_edge.points
            path = QPainterPath(QPointF(*pts[0]))
            for k in range(1, len(pts) - 2, 3):
                path.cubicTo(QPointF(*pts[k]), QPointF(*pts[k + 1]), QPointF(*pts[k + 2]))
            if len(pts) == 2:
                path.lineTo(QPointF(*pts[1]))
            self._path = path
        return path

    def _head(self) -> QPolygonF:
        arrow = self._arrow
        if arrow is None:
            pts = self.data_edge.points
            end = QPointF(*pts[-1])
            prev = QPointF(*pts[-2]) if len(pts) > 1 else QPointF(pts[0][0], pts[0][1] - 1)
            arrow = self._arrow = _arrow(prev, end)
        return arrow

    @property
    def label_rect(self) -> QRectF:
        """Where the label is drawn (an empty rect when there is none)."""
        if self._label is None:
            return QRectF()
        left, top, right, bottom = self._label
        return QRectF(left, top, right - left, bottom - top)

    @property
    def label_coords(self) -> tuple[float, float, float, float] | None:
        """The label's (left, top, right, bottom), None when there is none."""
        return self._label

    def place_label(self, rect: QRectF | None) -> None:
        """Move the label (the scene avoids overlaps) or drop it (None)."""
        self.prepareGeometryChange()
        if rect is None:
            self.show_label = False
            self._label = None
        else:
            self._label = (rect.left(), rect.top(), rect.right(), rect.bottom())
        self._bounds = self._outline()

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """The item's (left, top, right, bottom): curve, arrow head and label."""
        return self._bounds

    def boundingRect(self) -> QRectF:
        left, top, right, bottom = self._bounds
        return QRectF(left, top, right - left, bottom - top)

    def shape(self) -> QPainterPath:
        stroker = QPainterPathStroker()
        stroker.setWidth(6)
        return stroker.createStroke(self._curve())

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        theme = self.scene().theme  # type: ignore[attr-defined]
        level = lod.level(painter)
        d = self.data_edge
        color = (
            theme.selection
            if self.isSelected()
            else theme.highlight
            if self.highlighted
            else theme.edge
        )
        pen = QPen(color, 2.0 if (self.highlighted or self.isSelected()) else 1.0)
        pen.setCosmetic(True)
        if d.kind == "captured":
            pen.setStyle(Qt.PenStyle.DashLine)
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawPath(self._curve())
        if level >= lod.ARROW_MIN:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(color)
            painter.drawPolygon(self._head())
        if self.show_label and level >= lod.LABEL_MIN:
            _, text, italic = _fonts()
            painter.setFont(italic if d.inferred else text)
            painter.setPen(theme.edge_label)
            painter.drawText(
                self.label_rect,
                Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                d.label,
            )


def _arrow(prev: QPointF, end: QPointF) -> QPolygonF:
    dx, dy = end.x() - prev.x(), end.y() - prev.y()
    length = (dx * dx + dy * dy) ** 0.5 or 1.0
    ux, uy = dx / length, dy / length
    size = 7.0
    base = QPointF(end.x() - ux * size, end.y() - uy * size)
    nx, ny = -uy * size * 0.45, ux * size * 0.45
    return QPolygonF(
        [end, QPointF(base.x() + nx, base.y() + ny), QPointF(base.x() - nx, base.y() - ny)]
    )


def brush(color: QColor) -> QBrush:
    return QBrush(color)
