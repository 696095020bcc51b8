"""`GraphView`: zoom around the cursor (wheel, pinch, keys), pan by dragging the
background or with the space bar held, fit to window, arrow keys between nodes; zoomed
far out, op-type labels over the boxes (zoomed_out_labels.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from PySide6.QtCore import QEvent, QPoint, QPointF, QRect, QRectF, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetricsF,
    QKeyEvent,
    QMouseEvent,
    QNativeGestureEvent,
    QPainter,
    QPaintEvent,
    QPen,
    QResizeEvent,
    QWheelEvent,
)
from PySide6.QtWidgets import QGraphicsItem, QGraphicsView, QWidget

from onnxviz.ui.canvas import lod
from onnxviz.ui.canvas.items import NodeItem, ink_on
from onnxviz.ui.canvas.scene import GraphScene, Tile
from onnxviz.ui.canvas.zoomed_out_labels import (
    LABEL_PX,
    MAX_CANDIDATES,
    MIN_BOX_PX,
    Candidate,
    Label,
    place_labels,
)
from onnxviz.ui.theme import title_font

MIN_SCALE = 0.005
MAX_SCALE = 8.0


class GraphView(QGraphicsView):
    zoomChanged = Signal(float)

    def __init__(self, scene: GraphScene, parent: QWidget | None = None) -> None:
        super().__init__(scene, parent)
        self.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setResizeAnchor(QGraphicsView.ViewportAnchor.AnchorViewCenter)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.SmartViewportUpdate)
        self.setOptimizationFlag(QGraphicsView.OptimizationFlag.DontAdjustForAntialiasing, True)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.viewport().grabGesture(Qt.GestureType.PinchGesture)
        self._space_pan = False
        self._last_pos: QPointF | None = None  # the pointer, while Space pans
        self.zoomChanged.connect(self._update_overview)
        # zoomed far out: the labels placed for the current view, and what they were
        # placed for (the transform, the viewport and the scene's items)
        self._labels: list[Label] = []
        self._labels_for: tuple[object, ...] | None = None
        font = QFont(title_font())
        font.setPixelSize(LABEL_PX)
        self._label_font = font
        self._label_metrics = QFontMetricsF(font)
        scene.changed.connect(self._forget_labels)
        scene.emptyingChanged.connect(self._emptying)
        self._cover: _Cover | None = None

    def _update_overview(self, zoom: float) -> None:
        self.graph_scene.set_overview(self.graph_scene.wants_overview(zoom))

    def refresh_detail(self) -> None:
        """After the scene changed: pick overview or items for the current zoom."""
        self._update_overview(self.zoom())

    def itemAt(self, pos: QPoint) -> QGraphicsItem | None:  # type: ignore[override]
        """The topmost item at a viewport position, tiles aside: a tile is hit by its
        whole rect (so that Qt looks into its children) and a later tile's rect may lie
        over an earlier tile's box; what a caller wants there is the box, or nothing."""
        for item in self.items(pos):
            if not isinstance(item, Tile):
                return item
        return None

    @property
    def graph_scene(self) -> GraphScene:
        return self.scene()  # type: ignore[return-value]

    # -- labels when zoomed far out ----------------------------------------------------
    def _forget_labels(self, _regions: object = None) -> None:
        self._labels_for = None

    def zoomed_out_labels(self) -> list[Label]:
        """The op-type labels drawn over the boxes at this zoom (none at a zoom where the
        boxes hold their own titles)."""
        if self.zoom() >= lod.SMALL_TITLE_MIN:
            return []
        scene = self.graph_scene
        viewport = QRectF(self.viewport().rect())
        scroll = (self.horizontalScrollBar().value(), self.verticalScrollBar().value())
        key = (self.transform(), scroll, viewport, id(scene.nodes), len(scene.nodes))
        if key == self._labels_for:
            return self._labels
        visible = self.mapToScene(self.viewport().rect()).boundingRect()
        candidates: list[Candidate] = []
        self._labels, self._labels_for = [], key
        pool: Iterable[NodeItem] = scene.nodes.values()
        if len(scene.nodes) > MAX_CANDIDATES:
            # a big graph: skip it when the view likely holds too many boxes to name
            # (without visiting them all), else ask the scene's index for the few
            whole = self.sceneRect()
            seen = visible.intersected(whole)
            area = whole.width() * whole.height()
            if area <= 0 or seen.width() * seen.height() / area * len(scene.nodes) > (
                MAX_CANDIDATES
            ):
                return self._labels
            pool = [it for it in scene.items(seen) if isinstance(it, NodeItem)]
        to_screen = self.viewportTransform()
        least = MIN_BOX_PX / self.zoom()  # scene px: smaller boxes get no label
        for node in pool:
            d = node.data_item
            item_id = d.id
            if node.is_frame or d.kind not in ("op", "group") or d.height < least:
                continue
            if d.width < least or not d.title.strip():
                continue
            rect = node.sceneBoundingRect()
            if not visible.intersects(rect):
                continue
            box = to_screen.mapRect(rect)
            category = "group" if d.kind == "group" else d.category
            candidates.append(Candidate(item_id, box, d.title, category))
            if len(candidates) > MAX_CANDIDATES:
                candidates = []  # too many to name: the overview stays as it is
                break
        zoom = self.zoom()
        titles = []  # the frames' own titles stay readable: labels keep off them
        layer = scene.title_layer
        for title, plate in layer.plates(zoom, visible) if layer is not None else ():
            corner = QPointF(self.mapFromScene(title.pos()))
            titles.append(plate.translated(corner))
        self._labels = place_labels(
            candidates, self._label_metrics.horizontalAdvance, viewport, titles
        )
        self._labels_for = key
        return self._labels

    # -- while a replaced big scene is emptied --------------------------------------
    def _emptying(self, on: bool) -> None:
        """Its items are still in the scene for a second or so: the viewport stops
        painting (it would paint them all at every turn, seconds when zoomed out) and
        a cover paints the next scene's overview; clicks reach nothing meanwhile."""
        if on and self._cover is None:
            self.viewport().setUpdatesEnabled(False)
            self._cover = _Cover(self)
            self._cover.setGeometry(self.viewport().geometry())
            self._cover.show()
        elif not on and self._cover is not None:
            self._cover.hide()
            self._cover.deleteLater()
            self._cover = None
            self.viewport().setUpdatesEnabled(True)
            self.viewport().update()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self._cover is not None:
            self._cover.setGeometry(self.viewport().geometry())

    def scrollContentsBy(self, dx: int, dy: int) -> None:
        super().scrollContentsBy(dx, dy)
        if self._cover is not None:
            self._cover.update()
        if self.zoom() < lod.SMALL_TITLE_MIN:
            # the labels are placed for the whole view: a scrolled copy of the old
            # ones would not match the strip painted for the new view
            self.viewport().update()

    def drawForeground(self, painter: QPainter, rect: QRectF | QRect) -> None:
        super().drawForeground(painter, rect)
        labels = self.zoomed_out_labels()
        if not labels:
            return
        theme = self.graph_scene.theme
        painter.save()
        painter.resetTransform()  # viewport pixels: the labels keep their screen size
        painter.setFont(self._label_font)
        border = QPen(theme.node_border, 1.0)
        for label in labels:
            fill = QColor(
                theme.group_fill if label.category == "group" else theme.category(label.category)
            )
            painter.setPen(border)
            painter.setBrush(fill)
            painter.drawRoundedRect(label.rect, 3, 3)
            painter.setPen(ink_on(fill))
            painter.drawText(label.rect, Qt.AlignmentFlag.AlignCenter, label.text)
        painter.restore()

    # -- zoom -----------------------------------------------------------------------
    def zoom(self) -> float:
        return self.transform().m11()

    def set_zoom(self, factor: float, anchor: QPointF | None = None) -> None:
        factor = min(max(factor, MIN_SCALE), MAX_SCALE)
        ratio = factor / self.zoom()
        if anchor is None:
            self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorViewCenter)
        self._update_overview(factor)
        self.scale(ratio, ratio)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.zoomChanged.emit(self.zoom())

    def zoom_by(self, ratio: float, anchor: QPointF | None = None) -> None:
        self.set_zoom(self.zoom() * ratio, anchor)

    def zoom_in(self) -> None:
        self.zoom_by(1.25)

    def zoom_out(self) -> None:
        self.zoom_by(0.8)

    def actual_size(self) -> None:
        self.set_zoom(1.0)

    def fit(self) -> None:
        rect = self.graph_scene.display_rect()
        if rect.isEmpty():
            return
        self.fitInView(rect, Qt.AspectRatioMode.KeepAspectRatio)
        if self.zoom() > 1.0:
            self.set_zoom(1.0)
        self.zoomChanged.emit(self.zoom())

    def fit_width_top(self) -> None:
        """Readable start: fit when the graph is small, else the top of it at a zoom
        where text shows."""
        rect = self.graph_scene.display_rect()
        view = self.viewport().rect()
        if rect.isEmpty() or view.isEmpty():
            return
        scale = min(view.width() / rect.width(), view.height() / rect.height())
        if scale >= 0.5:
            self.fit()
            return
        scale = max(min(view.width() / rect.width(), 1.0), 0.6)
        self.resetTransform()
        self.scale(scale, scale)
        # start where the graph starts: the topmost (TB) or leftmost (LR) box
        nodes = [n for n in self.graph_scene.nodes.values() if not n.is_frame]
        if nodes:
            lr = self.graph_scene.display is not None and self.graph_scene.display.direction == "LR"
            first = min(nodes, key=lambda n: (n.x(), n.y()) if lr else (n.y(), n.x()))
            c = first.sceneBoundingRect().center()
            half_w, half_h = view.width() / scale / 2, view.height() / scale / 2
            if lr:
                self.centerOn(c.x() - 40 + half_w, c.y())
            else:
                self.centerOn(c.x(), c.y() - 40 + half_h)
        else:
            self.centerOn(QRectF(rect.x(), rect.y(), rect.width(), view.height() / scale).center())
        self.zoomChanged.emit(self.zoom())

    def wheelEvent(self, event: QWheelEvent) -> None:
        if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            super().wheelEvent(event)
            return
        delta = event.angleDelta().y() or event.pixelDelta().y()
        if delta:
            self.zoom_by(math.pow(1.0015, delta), event.position())
        event.accept()

    def viewportEvent(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.NativeGesture:
            gesture: QNativeGestureEvent = event  # type: ignore[assignment]
            if gesture.gestureType() == Qt.NativeGestureType.ZoomNativeGesture:
                self.zoom_by(1.0 + gesture.value(), gesture.position())
                return True
        return super().viewportEvent(event)

    # -- pan with space ----------------------------------------------------------------
    def keyPressEvent(self, event: QKeyEvent) -> None:
        key = event.key()
        if key == Qt.Key.Key_Space and not event.isAutoRepeat():
            self._space_pan = True
            self.viewport().setCursor(Qt.CursorShape.OpenHandCursor)
            return
        arrows = (Qt.Key.Key_Left, Qt.Key.Key_Right, Qt.Key.Key_Up, Qt.Key.Key_Down)
        if key in arrows and self.move_selection(key):
            return
        if key in (Qt.Key.Key_Plus, Qt.Key.Key_Equal):
            self.zoom_in()
            return
        if key == Qt.Key.Key_Minus:
            self.zoom_out()
            return
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            sel = self.selected_node()
            if sel is not None and sel.data_item.expandable:
                self.graph_scene.toggleRequested.emit(sel.data_item.id)
                return
        super().keyPressEvent(event)

    def keyReleaseEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Space and not event.isAutoRepeat():
            self._space_pan = False
            self.viewport().unsetCursor()
            return
        super().keyReleaseEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if self._space_pan and not (event.buttons() & Qt.MouseButton.LeftButton):
            # space held: the pointer drags the canvas without a button
            last = self._last_pos
            pos = event.position()
            if last is not None:
                d = pos - last
                self.horizontalScrollBar().setValue(int(self.horizontalScrollBar().value() - d.x()))
                self.verticalScrollBar().setValue(int(self.verticalScrollBar().value() - d.y()))
            self._last_pos = pos
            return
        self._last_pos = None
        super().mouseMoveEvent(event)

    # -- keyboard navigation --------------------------------------------------------------
    def selected_node(self) -> NodeItem | None:
        for it in self.graph_scene.selectedItems():
            if isinstance(it, NodeItem):
                return it
        return None

    def move_selection(self, key: int) -> bool:
        """Select the nearest box in the direction of an arrow key."""
        current = self.selected_node()
        nodes = [
            n
            for n in self.graph_scene.nodes.values()
            if not n.is_frame and n.data_item.kind != "proxy"
        ]
        if not nodes:
            return False
        if current is None:
            target = min(nodes, key=lambda n: (n.y(), n.x()))
        else:
            c = current.sceneBoundingRect().center()
            best: tuple[float, NodeItem] | None = None
            for n in nodes:
                if n is current:
                    continue
                p = n.sceneBoundingRect().center()
                dx, dy = p.x() - c.x(), p.y() - c.y()
                forward = {
                    Qt.Key.Key_Left: -dx,
                    Qt.Key.Key_Right: dx,
                    Qt.Key.Key_Up: -dy,
                    Qt.Key.Key_Down: dy,
                }[key]  # type: ignore[index]
                side = abs(dy) if key in (Qt.Key.Key_Left, Qt.Key.Key_Right) else abs(dx)
                if forward <= 1:
                    continue
                score = forward + 2 * side
                if best is None or score < best[0]:
                    best = (score, n)
            if best is None:
                return True
            target = best[1]
        self.select_and_show(target)
        return True

    def select_and_show(self, node: NodeItem, center: bool = True) -> None:
        self.graph_scene.clearSelection()
        node.setSelected(True)
        if center:
            if self.zoom() < 0.6:
                self.set_zoom(0.9)
            self.centerOn(node)


class _Cover(QWidget):
    """Over the viewport while a replaced big scene is emptied: the next scene's
    overview, drawn with the view's transform; the pointer goes through to the view
    (scrolling and zooming work, clicks reach nothing)."""

    def __init__(self, view: GraphView) -> None:
        super().__init__(view)
        self.view = view
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents, True)

    def paintEvent(self, event: QPaintEvent) -> None:
        scene = self.view.graph_scene
        painter = QPainter(self)
        painter.fillRect(self.rect(), scene.theme.background)
        stand_in = scene.stand_in
        if stand_in is not None:
            painter.setTransform(self.view.viewportTransform())
            stand_in.draw(painter, scene.theme)
        else:
            painter.setPen(scene.theme.edge)
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "Replacing the canvas…")
        painter.end()
