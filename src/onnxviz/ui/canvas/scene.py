"""`GraphScene`: the QGraphicsScene that shows one placed `present.Scene`, with the
id -> item maps and the producer/consumer highlighting of the selection.

A big scene (over `SYNC_ITEMS` boxes and edges) is filled in slices of `SLICE_SECONDS`,
one slice per turn of the event loop, so the window keeps answering while tens of
thousands of items are made; ``filling`` is True meanwhile and ``filled`` fires at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, QPointF, QRectF, QSizeF, QTimer, Signal
from PySide6.QtGui import QBrush
from PySide6.QtWidgets import QGraphicsScene

from onnxviz.present.scene import Scene
from onnxviz.ui.canvas.frame_titles import FrameTitle, FrameTitleLayer
from onnxviz.ui.canvas.items import EdgeItem, NodeItem
from onnxviz.ui.canvas.overview import OVERVIEW_MIN_ITEMS, OVERVIEW_ZOOM, OverviewItem
from onnxviz.ui.theme import LIGHT, Theme

MARGIN = 40.0
SYNC_ITEMS = 500  # scenes with up to this many items are filled at once (~15 ms)
SLICE_ITEMS = 40  # items made between two looks at the clock when filling in slices
SLICE_SECONDS = 0.02  # time given to filling per event-loop turn
RELEASE_ITEMS = 300  # wrappers of a replaced scene's items freed per event-loop turn
KEY_SLICE = 15_000  # sort keys of a sliced fill worked out per turn


class GraphScene(QGraphicsScene):
    rowClicked = Signal(str, str)  # item id, initializer name
    toggleRequested = Signal(str)  # item id of a group / body-holding node
    jumpRequested = Signal(str)  # item id to go to (a proxy's source)
    exporting = Signal()  # an export draws every item next: make what is still to come
    filled = Signal()  # every item of the shown scene exists

    def __init__(self, theme: Theme = LIGHT, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.display: Scene | None = None
        self.nodes: dict[str, NodeItem] = {}
        self.frame_titles: dict[str, FrameTitle] = {}  # frame item id -> its far-out title
        self.title_layer: FrameTitleLayer | None = None  # paints them all
        self.edge_items: list[EdgeItem] = []
        self._edges_by_item: dict[str, list[EdgeItem]] = {}
        self._highlighted: list[NodeItem | EdgeItem] = []
        self.overview: OverviewItem | None = None
        self.overview_shown = False
        self.setBackgroundBrush(QBrush(theme.background))
        self.selectionChanged.connect(self._on_selection)
        self.filling = False
        self._fill: Iterator[None] | None = None
        self._focus: QPointF | None = None
        self._fill_timer = QTimer(self)
        self._fill_timer.setInterval(0)
        self._fill_timer.timeout.connect(self._fill_step)
        # The Python wrappers of a replaced scene's items, let go of a slice per turn.
        self._graveyard: list[object] = []
        self._graveyard_timer = QTimer(self)
        self._graveyard_timer.setInterval(0)
        self._graveyard_timer.timeout.connect(self._release_some)

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.setBackgroundBrush(QBrush(theme.background))
        self.update()

    def show_scene(self, display: Scene, show_labels: bool = True) -> None:
        """Replace everything with the items of ``display`` (a big scene in slices)."""
        self._focus = self._view_focus()
        self.blockSignals(True)
        self.clear()
        self.blockSignals(False)
        # Freeing thousands of item wrappers at once was a 60-200 ms stop after every
        # relayout of a big model: they go a slice per turn (their C++ side is gone).
        self._graveyard.extend(self.nodes.values())
        self._graveyard.extend(self.edge_items)
        if self.title_layer is not None:
            self._graveyard.append(self.title_layer)
        if self._graveyard:
            self._graveyard_timer.start()
        self.display = display
        self.overview = None
        self.overview_shown = False
        self.nodes = {}
        self.frame_titles = {}
        self.title_layer = None
        self.edge_items = []
        self._edges_by_item = {}
        self._highlighted = []
        self.setSceneRect(
            QRectF(-MARGIN, -MARGIN, display.width + 2 * MARGIN, display.height + 2 * MARGIN)
        )
        sliced = len(display.items) + len(display.edges) > SYNC_ITEMS
        fill = self._fill_items(display, show_labels, sliced)
        if not sliced:
            for _ in fill:
                pass
            self.filling = False
            self.filled.emit()
            return
        self.filling = True
        self._fill = fill
        self._fill_step()  # the first slice now: the view has something to show at once
        if self.filling:
            self._fill_timer.start()

    def _release_some(self) -> None:
        del self._graveyard[-RELEASE_ITEMS:]
        if not self._graveyard:
            self._graveyard_timer.stop()

    def item_pos(self, item_id: str) -> QPointF | None:
        """Scene position of an item's box, also while a sliced fill has not made it."""
        node = self.nodes.get(item_id)
        if node is not None:
            return node.pos()
        data = self.display.items.get(item_id) if self.display is not None else None
        return QPointF(data.x, data.y) if data is not None else None

    def clear(self) -> None:
        """Remove every item, and stop a fill in progress."""
        self._fill_timer.stop()
        self._fill = None
        self.filling = False
        super().clear()

    def finish_filling(self) -> None:
        """Make the remaining items now (before reading ``nodes`` of a sliced scene)."""
        while self.filling:
            self._fill_step()

    def _fill_step(self) -> None:
        fill = self._fill
        end = time.perf_counter() + SLICE_SECONDS
        done = fill is None
        while not done:  # at least one slice per turn
            done = next(fill, StopIteration) is StopIteration  # type: ignore[arg-type]
            if time.perf_counter() >= end:
                break
        # Qt indexes new items when a query needs them or its index timer fires every
        # 2 s: then thousands at once, each asking our Python boundingRect, a 0.4 s stop
        # during an expand-all at 100k nodes.  A tiny query indexes this turn's items now.
        self.items(QRectF(self.sceneRect().topLeft(), QSizeF(1, 1)))
        if done:
            self._fill_timer.stop()
            self._fill = None
            if self.filling:
                self.filling = False
                # a new dict: views that mark items (the run overlay) see a new scene
                self.nodes = dict(self.nodes)
                if self.overview is not None:  # made from the items of that time
                    self.removeItem(self.overview)
                    self.overview = None
                    if self.overview_shown:
                        self.overview_shown = False
                        self.set_overview(True)
                self.filled.emit()

    def _fill_items(self, display: Scene, show_labels: bool, sliced: bool) -> Iterator[None]:
        """Make the items, yielding after each slice: frames and boxes first (sliced:
        from the top down, where the first view looks), then the edges."""
        made = 0
        items = list(display.items.values())
        if sliced:
            near = self._nearness(display)
            items = yield from sorted_over_turns(items, near)
        for item in items:
            node = NodeItem(item)
            if self.overview_shown:
                node.setVisible(False)
            self.addItem(node)
            self.nodes[item.id] = node
            if node.is_frame:  # its name, readable when zoomed far out
                if self.title_layer is None:
                    self.title_layer = FrameTitleLayer(self.sceneRect())
                    self.addItem(self.title_layer)
                title = self.frame_titles[item.id] = FrameTitle(node)
                self.title_layer.add(title)
            made += 1
            if made % SLICE_ITEMS == 0:
                yield
        labelled: set[tuple[str, str]] = set()
        edges = display.edges
        if sliced:
            edges = yield from sorted_over_turns(edges, lambda e: near(display.items[e.source]))
        for edge in edges:
            if not edge.points:
                continue
            # a value that fans out is labelled once, not on every branch
            key = (edge.source, edge.value)
            e = EdgeItem(edge, show_labels and key not in labelled)
            labelled.add(key)
            if self.overview_shown:
                e.setVisible(False)
            self.addItem(e)
            self.edge_items.append(e)
            self._edges_by_item.setdefault(edge.source, []).append(e)
            self._edges_by_item.setdefault(edge.target, []).append(e)
            made += 1
            if made % SLICE_ITEMS == 0:
                yield
        yield from self._spread_labels()

    def _view_focus(self) -> QPointF | None:
        """Where the view looks in the scene shown now (None: no scene shown)."""
        views = self.views()
        if self.display is None or not views:
            return None
        center = views[0].mapToScene(views[0].viewport().rect().center())
        return center if self.sceneRect().contains(center) else None

    def _nearness(self, display: Scene):  # type: ignore[no-untyped-def]
        """Sort key of items for a sliced fill: the part the view shows first (where it
        looked in the scene before, as after expanding a group; else the top)."""
        focus = self._focus
        cx, cy = (focus.x(), focus.y()) if focus is not None else (display.width / 2, 0.0)
        return lambda it: abs(it.x + it.width / 2 - cx) + abs(it.y + it.height / 2 - cy)

    def _spread_labels(self) -> Iterator[None]:
        """Keep edge labels from overlapping each other and boxes: try a few nudges
        along the edge, else drop the label (the tooltip still tells).  Yields now and
        then (a generator: sliced filling goes on through it)."""
        cell = 120.0
        grid: dict[tuple[int, int], list[QRectF]] = {}

        def cells(r: QRectF) -> list[tuple[int, int]]:
            # The rect's edges read once: each QRectF getter is a Python-to-C++ call.
            cols = range(int(r.left() // cell), int(r.right() // cell) + 1)
            rows = range(int(r.top() // cell), int(r.bottom() // cell) + 1)
            return [(i, j) for i in cols for j in rows]

        def add(r: QRectF) -> None:
            for c in cells(r):
                grid.setdefault(c, []).append(r)

        bounds = self.sceneRect()

        def free(r: QRectF) -> bool:
            return not any(o.intersects(r) for c in cells(r) for o in grid.get(c, ()))

        for k, node in enumerate(list(self.nodes.values())):
            if k % SLICE_ITEMS == SLICE_ITEMS - 1:
                yield  # (thousands of boxes: one pass over them was a 90 ms turn)
            if not node.is_frame:
                add(node.sceneBoundingRect().adjusted(2, 2, -2, -2))
            else:  # a frame's title and slot labels; its inside is free for labels
                add(node.title_band())
        for k, e in enumerate(self.edge_items):
            if k % SLICE_ITEMS == SLICE_ITEMS - 1:
                yield
            if not e.show_label:
                continue
            base = e.label_rect
            for dy in (0.0, 14.0, -14.0, 28.0, -28.0):
                for dx in (0.0, -base.width() - 8.0):
                    r = base.translated(dx, dy)
                    # a label moved past the scene's edge could never be scrolled to
                    if (dx or dy) and not bounds.contains(r):
                        continue
                    if free(r):
                        add(r)
                        if dx or dy:
                            e.place_label(r)
                        break
                else:
                    continue
                break
            else:
                e.place_label(None)

    def wants_overview(self, zoom: float) -> bool:
        count = len(self.nodes) + len(self.edge_items)
        return zoom < OVERVIEW_ZOOM and count > OVERVIEW_MIN_ITEMS

    def set_overview(self, on: bool) -> None:
        """Paint everything with one overview item (on) or with the detailed items."""
        if on == self.overview_shown:
            return
        if on and self.overview is None:
            self.overview = OverviewItem(self)
            self.addItem(self.overview)
        self.overview_shown = on
        if self.overview is not None:
            self.overview.setVisible(on)
        for node in self.nodes.values():
            node.setVisible(not on)
        for edge in self.edge_items:
            edge.setVisible(not on)

    def edges_at(self, item_id: str) -> list[EdgeItem]:
        return self._edges_by_item.get(item_id, [])

    # -- highlighting -----------------------------------------------------------------
    def _clear_highlight(self) -> None:
        for it in self._highlighted:
            it.highlighted = False
            it.update()
        self._highlighted = []

    def _on_selection(self) -> None:
        self._clear_highlight()
        for sel in self.selectedItems():
            if isinstance(sel, NodeItem):
                for e in self.edges_at(sel.data_item.id):
                    self._mark(e)
                    d = e.data_edge
                    other = d.source if d.target == sel.data_item.id else d.target
                    if other in self.nodes:
                        self._mark(self.nodes[other])
            elif isinstance(sel, EdgeItem):
                d = sel.data_edge
                for end in (d.source, d.target):
                    if end in self.nodes:
                        self._mark(self.nodes[end])

    def refresh_highlight(self) -> None:
        """Highlight the neighbours of the selection now (for a selection set while the
        scene's signals were blocked)."""
        self._on_selection()

    def _mark(self, it: NodeItem | EdgeItem) -> None:
        it.highlighted = True
        it.update()
        self._highlighted.append(it)

    def highlighted_ids(self) -> set[str]:
        return {it.data_item.id for it in self._highlighted if isinstance(it, NodeItem)}


def sorted_over_turns(
    values: list[Any], key: Callable[[Any], float]
) -> Generator[None, None, list[Any]]:
    """``values`` sorted by ``key`` (stable, as `sorted`), the keys worked out
    `KEY_SLICE` at a time with a yield between two: one sort of 100k boxes or edges by a
    Python key was a 100-160 ms turn.  (No yield after the last: the first slice of a
    fill makes its first items at once.)"""
    keys: list[float] = []
    for start in range(0, len(values), KEY_SLICE):
        if start:
            yield
        keys.extend(map(key, values[start : start + KEY_SLICE]))
    order = np.argsort(np.asarray(keys, dtype=np.float64), kind="stable")
    return [values[i] for i in order.tolist()]
