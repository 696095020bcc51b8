"""Run marks on the canvas, drawn by items of our own that we attach to the canvas'
node and edge items as children (so they move, hide and vanish with them):

- `NodeMark`: executed tick, current-node outline, breakpoint dot, and a colour
  (profile heat or compare error): the box's own fill (under its text) and an outline;
- `ValueBadge`: the runtime type of a computed value next to its edge; a click opens
  the tensor inspector.

The canvas rebuilds its items on every layout; `CanvasOverlay` notices a new item map
(``graph_scene.nodes`` is a new dict) and attaches fresh marks.  On a big scene (over
`SYNC_MARKS` boxes) the boxes in view get theirs at once and the others a slice per turn
of the event loop: 117k marks in one go were a 1.6 s stop after an expand-all of a run
100k-node model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

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
from onnxviz.ui.run.debugger import Executed
from onnxviz.ui.turn_queue import Slices

BREAKPOINT = QColor(220, 40, 40)
CURRENT = QColor(255, 140, 0)
EXECUTED = QColor(40, 160, 80)
MAX_BADGES = 3000
SYNC_BADGE_EDGES = 300  # scenes with more edges get their value badges in slices (1,434
# badges of a 2,861-edge scene in one turn: 190 ms)
SYNC_MARKS = 800  # scenes with more boxes get their marks in slices, the visible first
# (2,860 marks at once after Collapse All of a 100k-node model that had run: 190 ms)
# Time given to making marks or badges per event-loop turn.  Two queued slices can run
# between two ticks of a 10 ms timer (the queue's turn then the timer's), so a slice's
# share is kept small: a 50k-node run's end had a 20 ms badge slice beside the 23 ms
# table fill, 51 ms of UI-thread CPU between ticks, 71 beside a second test worker.
MARK_SLICE_SECONDS = 0.01
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


_BADGE_FONT: tuple[QFont, QFontMetricsF] | None = None


def _badge_font() -> tuple[QFont, QFontMetricsF]:
    """The badges' font and its metrics, made once (a font and metrics per badge were
    most of the 100-250 ms in which a 100k-node run's 1,400 badges were made)."""
    global _BADGE_FONT
    if _BADGE_FONT is None:
        font = QFont()
        font.setPointSizeF(7.5)
        font.setBold(True)
        _BADGE_FONT = (font, QFontMetricsF(font))
    return _BADGE_FONT


class ValueBadge(QGraphicsItem):
    def __init__(self, edge: EdgeItem, text: str, on_click: Callable[[], object]) -> None:
        super().__init__(edge)
        self.text = text
        self._on_click = on_click
        self._font, metrics = _badge_font()
        width = metrics.horizontalAdvance(text) + 8
        x, y = edge.data_edge.label_pos  # the middle of the edge's curve
        lr = edge.label_rect if edge.show_label else None
        if lr is not None and abs(lr.left() - x - 4) <= 1 and abs(lr.top() - y + 7) <= 1:
            x, y = lr.left(), lr.bottom() + 1  # under its label, beside the edge
        else:
            # No label, or one the scene moved away to keep labels apart (up to a few
            # hundred px): the badge stays on its edge, or it floats in empty space.
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
        # what `update` was last told: marks made later start from it
        self._shown: tuple[Any, ...] = (set(), None, set(), {}, {})
        self._executed_from: Executed | None = None  # the run state `_shown` was made from
        self._unmarked: Iterator[NodeItem] | None = None  # a big scene's boxes still to mark
        self._timer = Slices(self._mark_some)
        # marks whose state changed, waiting for a slice (`_restyle_some`)
        self._restyle: list[tuple[str, int]] = []
        self._restyle_timer = Slices(self._restyle_some)
        self._by_key: dict[tuple[str, int], NodeItem] | None = None  # boxes by node, lazily
        # A big scene's value badges, made a slice per turn; the old ones still to take
        # away (one list: a newer update takes over what an older one had left).
        self._badging: Iterator[None] | None = None
        self._stale_badges: list[ValueBadge] = []
        self._badge_timer = Slices(self._badge_some)

    def _attach(self) -> bool:
        """Follow a rebuilt scene (its marks are made when first needed); True when it
        was rebuilt."""
        nodes = self.scene.nodes  # type: ignore[attr-defined]
        if nodes is self._nodes_seen:
            return False
        self._nodes_seen = nodes
        self.marks = {}
        self._marks_made = False
        self._unmarked = None
        self._timer.stop()
        self._restyle = []  # (fresh marks are made from the state last told)
        self._restyle_timer.stop()
        self._by_key = None
        self.badges = []
        self._badge_types = {}
        self._badging = None
        self._stale_badges = []
        self._badge_timer.stop()
        return True

    def make_marks(self) -> None:
        """One mark per box.  Only once there is something to show: every rebuilt scene
        of a model nobody runs would otherwise pay a child item per box (30 ms for a
        big model's first view, on the UI thread)."""
        if self._marks_made:
            return
        self._marks_made = True
        boxes: dict[str, NodeItem] = self.scene.nodes  # type: ignore[attr-defined]
        if len(boxes) <= SYNC_MARKS:
            for item in boxes.values():
                self._mark(item)
            return
        for item in self._boxes_in_view():
            self._mark(item)
        self._unmarked = iter(list(boxes.values()))
        self._timer.start()

    def _mark(self, item: NodeItem) -> None:
        key = node_key(item)
        if key is None or key in self.marks:
            return
        mark = self.marks[key] = NodeMark(item)
        self._show(key, mark)

    def _mark_some(self) -> None:
        """A slice of a big scene's remaining marks (the timer's turn): batches of 50
        until `MARK_SLICE_SECONDS` have gone, at least one."""
        boxes = self._unmarked
        end = time.perf_counter() + MARK_SLICE_SECONDS
        while boxes is not None:
            for _ in range(50):
                item = next(boxes, None)
                if item is None:
                    self._unmarked = None
                    self._timer.stop()
                    return
                self._mark(item)
            if time.perf_counter() >= end:
                return

    @property
    def marking(self) -> bool:
        """A big scene's marks or value badges are still being made (or its marks
        restyled), a slice per turn."""
        return self._unmarked is not None or self._badging is not None or bool(self._restyle)

    def finish_marks(self) -> None:
        """Make the marks and badges still to come now (an export draws every box)."""
        while self._unmarked is not None:
            self._mark_some()
        while self._restyle:
            self._restyle_some()
        while self._badging is not None:
            self._badge_some()

    def follows(self, nodes: object) -> bool:
        """True when the marks are those of the scene's boxes ``nodes`` (a rebuilt
        scene has a new dict of boxes, and needs fresh marks)."""
        return nodes is self._nodes_seen

    def item_for(self, graph_path: str, index: int) -> NodeItem | None:
        self._attach()
        self.make_marks()
        mark = self.marks.get((graph_path, index))
        if mark is not None:
            return mark.parentItem()  # type: ignore[return-value]
        if self._unmarked is None:
            return None
        if self._by_key is None:  # a box whose mark is still to come
            found = ((node_key(b), b) for b in self.scene.nodes.values())  # type: ignore[attr-defined]
            self._by_key = {k: b for k, b in found if k is not None}
        return self._by_key.get((graph_path, index))

    def update(
        self,
        executed: Executed | set[tuple[str, int]],
        current: tuple[str, int] | None,
        breakpoints: set[tuple[str, int]],
        fills: dict[tuple[str, int], QColor],
        notes: dict[tuple[str, int], str],
        value_types: dict[tuple[str, str], str],
    ) -> None:
        """Show the run state: ``executed`` (an `Executed` look: later looks at the same
        run cost only what ran since), the ``current`` node, breakpoints, colours and
        notes, and a badge for each of ``value_types`` (kept, not copied: the caller
        gives a dict of its own)."""
        self._attach()
        if not self._marks_made and not (executed or current or breakpoints or fills or notes):
            self._update_badges(value_types)
            return
        old_executed, old_current, old_breakpoints, old_fills, old_notes = self._shown
        # A later look at the same run: only the nodes run since (a diff of two 100k
        # sets on every progress report was 20-40 ms).  The set grows in place.
        later = isinstance(executed, Executed)
        added = executed.added_since(self._executed_from) if later else None  # type: ignore[union-attr]
        self._executed_from = executed if later else None  # type: ignore[assignment]
        if added is not None:
            now = old_executed
            now.update(added)
            changed = set(added)
        else:
            now = set(executed)  # a copy: a caller may fill the same set again
            changed = old_executed ^ now
        self._shown = (now, current, set(breakpoints), dict(fills), dict(notes))
        self.make_marks()  # (new marks start from the state just told)
        # Only the marks whose state changed are visited: every mark on each progress
        # report of a run was 65-140 ms with a 100k-node model's marks.
        changed |= old_breakpoints ^ breakpoints
        changed |= {k for k in (old_current, current) if k is not None}
        for table, before in ((fills, old_fills), (notes, old_notes)):
            if table or before:
                changed.update(
                    k for k in table.keys() | before.keys() if table.get(k) != before.get(k)
                )
        marks = self.marks
        if len(changed) > SYNC_MARKS:
            # A new run over a finished one of a big model un-ticks every mark: 50k in
            # one turn were 60-66 ms.  The boxes in view now, the rest a slice a turn
            # (`_restyle_some`: a mark always takes the state last told, however late).
            self._restyle.extend(changed)
            changed = {k for k in self._keys_in_view() if k in changed}
            self._restyle_timer.start()
        for key in changed:
            mark = marks.get(key)
            if mark is not None:
                self._show(key, mark)
        self._update_badges(value_types)

    def _boxes_in_view(self) -> Iterator[NodeItem]:
        """The boxes the views show now."""
        for view in self.scene.views():  # type: ignore[attr-defined]
            seen = view.mapToScene(view.viewport().rect()).boundingRect()
            for item in self.scene.items(seen):  # type: ignore[attr-defined]
                if isinstance(item, NodeItem):
                    yield item

    def _keys_in_view(self) -> list[tuple[str, int]]:
        """The nodes of the boxes the views show now."""
        return [k for item in self._boxes_in_view() if (k := node_key(item)) is not None]

    def _restyle_some(self) -> None:
        """A slice of the marks still to take the state `update` was last told (the
        timer's turn): batches of 200 until `MARK_SLICE_SECONDS` have gone."""
        keys, marks = self._restyle, self.marks
        end = time.perf_counter() + MARK_SLICE_SECONDS
        while keys:
            for key in keys[-200:]:
                mark = marks.get(key)
                if mark is not None:
                    self._show(key, mark)
            del keys[-200:]
            if time.perf_counter() >= end:
                return
        self._restyle_timer.stop()

    def _show(self, key: tuple[str, int], mark: NodeMark) -> None:
        """Give ``mark`` the state `update` was last told for its node."""
        executed, current, breakpoints, fills, notes = self._shown
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

    def _opener(self, graph_path: str, name: str) -> Callable[[], object]:
        return lambda: self.on_value(graph_path, name)

    def _update_badges(self, value_types: dict[tuple[str, str], str]) -> None:
        if value_types == self._badge_types:
            return
        self._badge_types = value_types  # (the caller's own: a copy was 5 ms at 100k)
        self._stale_badges.extend(self.badges)
        self.badges = []
        steps = self._badge_steps(self._badge_types)
        edges = self.scene.edge_items  # type: ignore[attr-defined]
        if len(edges) <= SYNC_BADGE_EDGES:
            for _ in steps:
                pass
            return
        # A 100k-node run's end made 1,400 badges over 124k edges in one turn.  All in
        # later turns: this one takes over the run's end already.
        self._badging = steps
        self._badge_timer.start()

    def _badge_some(self) -> None:
        """A slice of the badges still to make (the timer's turn)."""
        steps = self._badging
        end = time.perf_counter() + MARK_SLICE_SECONDS
        while steps is not None:  # (at least one step a turn)
            if next(steps, StopIteration) is StopIteration:
                self._badging = None
                self._badge_timer.stop()
                return
            if time.perf_counter() >= end:
                return

    def _badge_steps(self, value_types: dict[tuple[str, str], str]) -> Iterator[None]:
        """Take the old badges away, then badge each value of ``value_types`` once, on
        the first of its edges; yields every 10 old badges, 50 edges or new badge (50
        badges between two looks at the clock were a 45 ms slice)."""
        stale = self._stale_badges
        while stale:
            for badge in stale[-10:]:
                if badge.scene() is not None:
                    badge.scene().removeItem(badge)
            del stale[-10:]
            yield
        if not value_types:
            return
        seen: set[tuple[str, str]] = set()
        for k, edge in enumerate(self.scene.edge_items):  # type: ignore[attr-defined]
            if k % 50 == 49:
                yield
            d = edge.data_edge
            key = (d.source, d.value)
            if key in seen or not d.value:
                continue
            for path in parent_paths(d.graph_path):
                text = value_types.get((path, d.value))
                if text is not None:
                    seen.add(key)
                    badge = ValueBadge(edge, shape_text(text), self._opener(path, d.value))
                    self.scene.contain(badge)  # type: ignore[attr-defined]
                    self.badges.append(badge)
                    yield
                    break
            if len(self.badges) >= MAX_BADGES:
                return
