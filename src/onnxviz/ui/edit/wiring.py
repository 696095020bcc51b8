"""Wiring by dragging on the canvas: Alt+drag from a node (or a graph input pill) to
another node, then pick which of the target's inputs reads the dragged value.  The
result is one RewireInput command through the edit controller."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, QLineF, QObject, QPoint, Qt
from PySide6.QtGui import QMouseEvent, QPen
from PySide6.QtWidgets import QGraphicsLineItem, QMenu

from onnxviz.model import commands
from onnxviz.ui.canvas.items import NodeItem

if TYPE_CHECKING:
    from onnxviz.ui.main_window import MainWindow


def source_values(window: MainWindow, item: NodeItem) -> list[str]:
    """Values a drag from this item can carry: a node's outputs or a pill's value."""
    d = item.data_item
    if window.session.doc is None:
        return []
    if d.kind == "op" and d.node_index is not None:
        try:
            node = window.session.doc.scope(d.graph_path).nodes[d.node_index]
        except (KeyError, IndexError):
            return []
        return [o for o in node.output if o]
    if d.kind in ("input", "outer") and d.value:
        return [d.value]
    return []


def wire_choices(
    window: MainWindow, source: NodeItem, target: NodeItem
) -> list[tuple[str, int, str]]:
    """(value, target input index, label) pairs a drop can make."""
    td = target.data_item
    if window.session.doc is None or td.kind != "op" or td.node_index is None:
        return []
    try:
        scope = window.session.doc.scope(td.graph_path)
        node = scope.nodes[td.node_index]
    except (KeyError, IndexError):
        return []
    out = []
    for value in source_values(window, source):
        if scope.lookup(value) is None:
            continue  # not visible from the target's graph
        for k, current in enumerate(node.input):
            out.append((value, k, f"input {k} ({current or 'absent'}) ← {value}"))
    return out


def wire(window: MainWindow, target: NodeItem, value: str, k: int) -> bool:
    td = target.data_item
    assert td.node_index is not None
    return window.edits.execute(commands.RewireInput(td.graph_path, td.node_index, k, value))


class WireDrag(QObject):
    """Event filter on the canvas viewport for Alt+drag wiring."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.source: NodeItem | None = None
        self.line: QGraphicsLineItem | None = None

    def eventFilter(self, obj: Any, event: QEvent) -> bool:
        t = event.type()
        if t == QEvent.Type.MouseButtonPress:
            return self._press(event)  # type: ignore[arg-type]
        if t == QEvent.Type.MouseMove and self.source is not None:
            self._move(event)  # type: ignore[arg-type]
            return True
        if t == QEvent.Type.MouseButtonRelease and self.source is not None:
            self._release(event)  # type: ignore[arg-type]
            return True
        return False

    def _press(self, event: QMouseEvent) -> bool:
        if (
            event.button() != Qt.MouseButton.LeftButton
            or not event.modifiers() & Qt.KeyboardModifier.AltModifier
        ):
            return False
        item = self._node_at(event.position().toPoint())
        if item is None or not source_values(self.window, item):
            return False
        self.source = item
        start = item.sceneBoundingRect().center()
        self.line = QGraphicsLineItem(QLineF(start, start))
        pen = QPen(self.window.graph_scene.theme.selection, 2.0, Qt.PenStyle.DashLine)
        pen.setCosmetic(True)
        self.line.setPen(pen)
        self.line.setZValue(1000)
        self.window.graph_scene.addItem(self.line)
        return True

    def _move(self, event: QMouseEvent) -> None:
        if self.line is not None:
            end = self.window.view.mapToScene(event.position().toPoint())
            self.line.setLine(QLineF(self.line.line().p1(), end))

    def _release(self, event: QMouseEvent) -> None:
        source, self.source = self.source, None
        if self.line is not None:
            self.window.graph_scene.removeItem(self.line)
            self.line = None
        target = self._node_at(event.position().toPoint())
        if source is None or target is None or target is source:
            return
        self.drop(
            source, target, self.window.view.viewport().mapToGlobal(event.position().toPoint())
        )

    def drop(self, source: NodeItem, target: NodeItem, where: QPoint | None = None) -> None:
        choices = wire_choices(self.window, source, target)
        if not choices:
            self.window.edits.refuse(
                "nothing to wire there: drop on an operator whose graph sees it"
            )
            return
        if len(choices) == 1 or where is None:
            value, k, _ = choices[0]
            wire(self.window, target, value, k)
            return
        menu = QMenu(self.window)
        for value, k, label in choices:
            menu.addAction(label, partial(wire, self.window, target, value, k))
        menu.popup(where)
        self.menu = menu

    def _node_at(self, pos: QPoint) -> NodeItem | None:
        for item in self.window.view.items(pos):
            if isinstance(item, NodeItem) and not item.is_frame:
                return item
        return None
