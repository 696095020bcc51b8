"""`GraphScene`: the QGraphicsScene that shows one placed `present.Scene`, with the
id -> item maps and the producer/consumer highlighting of the selection.

A big scene (over `SYNC_ITEMS` boxes and edges) is filled in slices of `SLICE_SECONDS`,
one slice per turn of the event loop, so the window keeps answering while tens of
thousands of items are made; ``filling`` is True meanwhile and ``filled`` fires at the end.

Boxes and edges are not top-level items: each is the child of a *tile*, an invisible
item that stands for one stacking level (z value) and one square (`tile_side`) of the
scene where its children start.  At 240k top-level items Qt's own bookkeeping was most of
an expand-all's time: it walks every top-level item whenever one item changes (its
processing of dirty items, after every turn that adds, removes, hovers, selects or marks
anything), and its BSP index re-sorted every item after each turn that added some and
called our Python ``boundingRect`` for each item it indexed.  So the scene keeps no index
(``NoIndex``) and has a few thousand tiles at the top: a tile's rect is the union of its
children's (padded by `TILE_PAD` for run marks and badges) and it promises that they draw
inside it (``ItemContainsChildrenInShape``), so a paint, a hit test or a query looks into
the tiles it touches only, and a change into the tiles that changed.  (Layer parents
spread over the whole scene had made every paint visit every item.)  Stacking is kept: a
tile has its children's z value, and children of one z value stack in the order they were
made, as top-level items did.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QPainter
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsScene,
    QGraphicsSceneContextMenuEvent,
    QGraphicsSceneHelpEvent,
    QGraphicsSceneMouseEvent,
    QStyleOptionGraphicsItem,
    QWidget,
)

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
RELEASE_CELLS = 5_000  # cells of the label grid freed per turn at the end of a fill
KEY_SLICE = 5_000  # sort keys of a sliced fill worked out (then values reordered) per turn
# Side of the square where a tile's children start: a power of two for each scene, about
# `TILE_SQUARES` squares over it, within these bounds.  Every paint and hit test asks each
# tile for its rect (a Python call), and looks into the children of the tiles it touches:
# an expanded 100k-node model (453k x 7.3M px) with 1024-px squares had 32k tiles and
# 108 ms paints; with 16-32k px, 2,400-1,200 tiles and 13-24 ms (its BSP index: 27-31 ms).
TILE_MIN, TILE_MAX = 2048.0, 32768.0
TILE_SQUARES = 400
TILE_PAD = 64.0  # around each child in its tile's rect: a run mark's note, a problem badge
# a scene with more boxes and edges is emptied in slices (clear: ~2 us an item)
TEARDOWN_ITEMS = 20_000
STAND_IN_ITEMS = 30_000  # the overview painted meanwhile, for a next scene up to this size (~50 ms)
TEARDOWN_SECONDS = 0.02  # time given to emptying per event-loop turn


class Tile(QGraphicsItem):
    """The parent of the boxes and edges of one stacking level that start in one square
    of the scene (module docstring).  It paints nothing, takes no clicks and promises
    Qt that its children draw inside its rect, the union of theirs.  The rect grows
    without telling Qt (no ``prepareGeometryChange``): that would repaint all the tile
    covers, and a tile under a frame or a long edge covers the view, at every turn of a
    fill.  The scene keeps no index, so nothing caches the rect: paints and hit tests
    ask it each time."""

    def __init__(self) -> None:
        super().__init__()
        self._box: tuple[float, float, float, float] | None = None  # left, top, right, bottom
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemContainsChildrenInShape, True)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)

    def grow(self, left: float, top: float, right: float, bottom: float) -> None:
        box = self._box
        if box is not None:
            left, top = min(left, box[0]), min(top, box[1])
            right, bottom = max(right, box[2]), max(bottom, box[3])
        self._box = (left, top, right, bottom)

    def boundingRect(self) -> QRectF:
        if self._box is None:
            return QRectF()
        left, top, right, bottom = self._box
        return QRectF(left, top, right - left, bottom - top)

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        pass


class GraphScene(QGraphicsScene):
    rowClicked = Signal(str, str)  # item id, initializer name
    toggleRequested = Signal(str)  # item id of a group / body-holding node
    jumpRequested = Signal(str)  # item id to go to (a proxy's source)
    exporting = Signal()  # an export draws every item next: make what is still to come
    filled = Signal()  # every item of the shown scene exists
    emptyingChanged = Signal(bool)  # a replaced big scene's items are being removed (or done)

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
        # Containers (lists, dicts) whose contents are let go of a slice per turn.
        self._graveyard: list[list[Any] | dict[Any, Any]] = []
        self._graveyard_timer = QTimer(self)
        self._graveyard_timer.setInterval(0)
        self._graveyard_timer.timeout.connect(self._release_some)
        # Every top-level item (tiles among them), in the order it was added (ids: removal
        # is O(1)).
        self._top: dict[int, QGraphicsItem] = {}
        self._tiles: dict[tuple[float, int, int], Tile] = {}
        self._tile_side = TILE_MIN
        self.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.NoIndex)
        # Emptying a big scene: its top-level items still to remove (the last added at
        # the end), the scene to fill after, and what is painted over them meanwhile.
        self._doomed: list[QGraphicsItem] = []
        self._next: tuple[Scene, bool] | None = None
        self._stand_in: OverviewItem | None = None
        self._covered = False  # the views were told to cover the items being removed
        self._teardown_timer = QTimer(self)
        self._teardown_timer.setInterval(0)
        self._teardown_timer.timeout.connect(self._teardown_step)

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.setBackgroundBrush(QBrush(theme.background))
        self.update()

    def addItem(self, item: QGraphicsItem) -> None:
        super().addItem(item)
        if item.parentItem() is None:
            self._top[id(item)] = item

    def removeItem(self, item: QGraphicsItem) -> None:
        self._top.pop(id(item), None)
        super().removeItem(item)

    def show_scene(self, display: Scene, show_labels: bool = True) -> None:
        """Replace everything with the items of ``display`` (a big scene in slices)."""
        if not self._covered:
            self._focus = self._view_focus()
        big = len(self.nodes) + len(self.edge_items) > TEARDOWN_ITEMS or bool(self._doomed)
        self._fill_timer.stop()
        self._fill = None
        if big:
            self._doom_items()
        else:
            self.blockSignals(True)
            super().clear()
            self.blockSignals(False)
            self._top = {}
        # Freeing thousands of item wrappers at once was a 60-200 ms stop after every
        # relayout of a big model: they go a slice per turn (their C++ side is gone),
        # and so do the containers that held them (a dict of 117k lists: 15 ms).
        # `nodes` may be held by a view that watches for a new scene: a copy is buried.
        self._bury(list(self.nodes.values()))
        self._bury(self.edge_items)
        self._bury(self._edges_by_item)
        self._bury(self.frame_titles)
        self._bury(self._tiles)
        if self.title_layer is not None:
            self._bury([self.title_layer])
        self.display = display
        self.overview = None
        self.overview_shown = False
        self._tiles = {}
        self.nodes = {}
        self.frame_titles = {}
        self.title_layer = None
        self.edge_items = []
        self._edges_by_item = {}
        self._highlighted = []
        rect = self.display_rect()
        if self._doomed:
            # A new scene rect makes Qt index the items still in the scene again (a
            # 180 ms turn with 240k): a smaller one waits until they are gone.
            if not self.sceneRect().contains(rect):
                self.setSceneRect(rect.united(self.sceneRect()))
            self._next = (display, show_labels)
            self.filling = True
            small = len(display.items) + len(display.edges) <= STAND_IN_ITEMS
            self._stand_in = OverviewItem(display, MARGIN) if small else None
            if not self._covered:
                self._covered = True
                self.emptyingChanged.emit(True)
            self._teardown_timer.start()
            return
        self.setSceneRect(rect)
        self._start_fill(display, show_labels)

    def display_rect(self) -> QRectF:
        """The shown scene's rect with its margin (the scene rect, but while a replaced
        bigger scene is emptied, which keeps its rect meanwhile)."""
        d = self.display
        if d is None:
            return self.sceneRect()
        return QRectF(-MARGIN, -MARGIN, d.width + 2 * MARGIN, d.height + 2 * MARGIN)

    def _start_fill(self, display: Scene, show_labels: bool) -> None:
        self._tile_side = tile_side(display.width, display.height)
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

    def _place(
        self, item: NodeItem | EdgeItem, x: float, y: float, box: tuple[float, float, float, float]
    ) -> None:
        """Make ``item`` (its scene box: left, top, right, bottom) a child of the tile of
        its stacking level and of the square of (x, y)."""
        z = item.zValue()
        side = self._tile_side
        key = (z, int(x // side), int(y // side))
        tile = self._tiles.get(key)
        if tile is None:
            tile = self._tiles[key] = Tile()
            tile.setZValue(z)
            if self.overview_shown:
                tile.setVisible(False)
            self.addItem(tile)
        item.setParentItem(tile)
        item.tile_key = key  # type: ignore[union-attr]
        self._grow_tile(key, box)

    def _grow_tile(
        self, key: tuple[float, int, int], box: tuple[float, float, float, float]
    ) -> None:
        pad = TILE_PAD
        self._tiles[key].grow(box[0] - pad, box[1] - pad, box[2] + pad, box[3] + pad)

    def contain(self, item: QGraphicsItem) -> None:
        """Grow the rect of the tile that holds ``item`` (a child given to a box or an
        edge after the fill, such as a value badge) so that it covers the item: a tile
        draws nothing outside its rect."""
        key = getattr(item.parentItem(), "tile_key", None)
        if key in self._tiles:
            self._grow_tile(key, _coords(item.sceneBoundingRect()))

    @property
    def tiles(self) -> list[Tile]:
        """The tiles of the shown scene (the parents of its boxes and edges)."""
        return list(self._tiles.values())

    # -- emptying a big scene ---------------------------------------------------------
    # `clear()` of the 100k-node model expanded (240k items) stopped the window for
    # 0.5-0.9 s: every item is taken out of the index and deleted with its Python
    # wrapper.  So the views show a stand-in while the tiles go, the last added first,
    # as many per turn as `TEARDOWN_SECONDS` allow; then the next scene is filled.
    def _doom_items(self) -> None:
        self.blockSignals(True)
        self.clearSelection()
        self.blockSignals(False)
        self._doomed.extend(self._top.values())
        self._top = {}

    def _teardown_step(self) -> None:
        end = time.perf_counter() + TEARDOWN_SECONDS
        doomed = self._doomed
        remove = super().removeItem
        while doomed:
            item = doomed.pop()
            remove(item)
            del item  # (it goes, with its children, with its last Python reference)
            if time.perf_counter() >= end:
                return
        self._teardown_timer.stop()
        self._end_teardown()

    def _end_teardown(self) -> None:
        self._stand_in = None
        if self._covered:
            self._covered = False
            self.emptyingChanged.emit(False)
        pending, self._next = self._next, None
        if pending is not None:
            rect = self.display_rect()
            if rect != self.sceneRect():
                views = self.views()
                centers = [v.mapToScene(v.viewport().rect().center()) for v in views]
                self.setSceneRect(rect)
                for view, center in zip(views, centers, strict=True):
                    view.centerOn(center)
            self._start_fill(*pending)

    @property
    def emptying(self) -> bool:
        """The items of a replaced scene are being removed (the next one is painted as
        an overview over them, and nothing can be clicked)."""
        return bool(self._doomed) or self._covered

    @property
    def stand_in(self) -> OverviewItem | None:
        """While emptying: the overview of the next scene, for the views to paint (None
        for a big one: it would take too long to make)."""
        return self._stand_in

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if self.emptying:
            event.accept()  # the items under the pointer are the replaced scene's
            return
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if self.emptying:
            event.accept()
            return
        super().mouseDoubleClickEvent(event)

    def mouseMoveEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if self.emptying:  # (no hover on the replaced scene's items)
            event.accept()
            return
        super().mouseMoveEvent(event)

    def helpEvent(self, event: QGraphicsSceneHelpEvent) -> None:
        if self.emptying:  # no tooltip of the replaced scene's items
            event.accept()
            return
        super().helpEvent(event)

    def contextMenuEvent(self, event: QGraphicsSceneContextMenuEvent) -> None:
        if self.emptying:
            event.accept()
            return
        super().contextMenuEvent(event)

    def finish_teardown(self) -> None:
        """Empty a scene being emptied now."""
        while self._doomed:
            self._teardown_step()
        if self._covered or self._next is not None:
            self._teardown_timer.stop()
            self._end_teardown()

    def _bury(self, container: list[Any] | dict[Any, Any]) -> None:
        """Let go of what ``container`` holds over the next turns (it is emptied)."""
        if container:
            self._graveyard.append(container)
            self._graveyard_timer.start()

    def _release_some(self) -> None:
        budget = RELEASE_ITEMS
        graveyard = self._graveyard
        while budget > 0 and graveyard:
            container = graveyard[-1]
            n = min(budget, len(container))
            if isinstance(container, dict):
                for _ in range(n):
                    container.popitem()
            else:
                del container[-n:]
            budget -= n
            if not container:
                graveyard.pop()
        if not graveyard:
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
        self._teardown_timer.stop()
        self._doomed = []
        self._next = None
        if self._covered:
            self._end_teardown()
        super().clear()
        self._top = {}
        self._tiles = {}

    def finish_filling(self) -> None:
        """Make the remaining items now (before reading ``nodes`` of a sliced scene)."""
        self.finish_teardown()
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
        if done:
            self._fill_timer.stop()
            self._fill = None
            if self.filling:
                self.filling = False
                # a new dict: views that mark items (the run overlay) see a new scene
                self.nodes = dict(self.nodes)
                self.filled.emit()

    def _fill_items(self, display: Scene, show_labels: bool, sliced: bool) -> Iterator[None]:
        """Make the items, yielding after each slice: frames and boxes first (sliced:
        from the top down, where the first view looks), then the edges."""
        made = 0
        items = list(display.items.values())
        if sliced:
            near = self._nearness(display)
            items = yield from sorted_over_turns(items, near)
        place = self._place
        for item in items:
            node = NodeItem(item)
            place(node, item.x, item.y, (item.x, item.y, item.x + item.width, item.y + item.height))
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
            x, y = edge.points[0]
            place(e, x, y, e.bounds)
            self.edge_items.append(e)
            self._edges_by_item.setdefault(edge.source, []).append(e)
            self._edges_by_item.setdefault(edge.target, []).append(e)
            made += 1
            if made % SLICE_ITEMS == 0:
                yield
        del labelled  # (a turn of its own: 124k pairs at 100k nodes)
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
        # Rects as (left, top, right, bottom) tuples, not QRectF: the grid holds one per
        # box and label, and freeing 300k QRectF wrappers at the fill's end was a 300 ms
        # turn (tuples: 35 ms, and a tuple test costs less than a call into Qt).
        cell = 120.0
        grid: dict[tuple[int, int], list[tuple[float, float, float, float]]] = {}

        def cells(r: tuple[float, float, float, float]) -> list[tuple[int, int]]:
            cols = range(int(r[0] // cell), int(r[2] // cell) + 1)
            rows = range(int(r[1] // cell), int(r[3] // cell) + 1)
            return [(i, j) for i in cols for j in rows]

        def add(r: tuple[float, float, float, float]) -> None:
            for c in cells(r):
                grid.setdefault(c, []).append(r)

        bl, bt, br, bb = _coords(self.sceneRect())

        def free(r: tuple[float, float, float, float]) -> bool:
            # (QRectF.intersects for rects with an area: they overlap in both axes)
            left, top, right, bottom = r
            return not any(
                o[0] < right and left < o[2] and o[1] < bottom and top < o[3]
                for c in cells(r)
                for o in grid.get(c, ())
            )

        for k, node in enumerate(list(self.nodes.values())):
            if k % SLICE_ITEMS == SLICE_ITEMS - 1:
                yield  # (thousands of boxes: one pass over them was a 90 ms turn)
            if not node.is_frame:
                left, top, right, bottom = _coords(node.sceneBoundingRect())
                add((left + 2, top + 2, right - 2, bottom - 2))
            else:  # a frame's title and slot labels; its inside is free for labels
                add(_coords(node.title_band()))
        for k, e in enumerate(self.edge_items):
            if k % SLICE_ITEMS == SLICE_ITEMS - 1:
                yield
            label = e.label_coords
            if not e.show_label or label is None:
                continue
            left, top, right, bottom = label
            for dy in (0.0, 14.0, -14.0, 28.0, -28.0):
                for dx in (0.0, left - right - 8.0):
                    r = (left + dx, top + dy, right + dx, bottom + dy)
                    # a label moved past the scene's edge could never be scrolled to
                    if (dx or dy) and not (bl <= r[0] and r[2] <= br and bt <= r[1] and r[3] <= bb):
                        continue
                    if free(r):
                        add(r)
                        if dx or dy:
                            e.place_label(QRectF(r[0], r[1], r[2] - r[0], r[3] - r[1]))
                            self._grow_tile(e.tile_key, r)  # type: ignore[attr-defined]
                        break
                else:
                    continue
                break
            else:
                e.place_label(None)
        # The grid goes a slice of cells per turn: freeing its 300k boxes at once was
        # the last turn of an expand-all at 100k nodes, 60-100 ms.
        cells_made = list(grid)
        while cells_made:
            yield
            chunk = cells_made[-RELEASE_CELLS:]
            del cells_made[-RELEASE_CELLS:]
            for c in chunk:
                del grid[c]
            del chunk  # (the cells' keys too: 300k small tuples)

    def wants_overview(self, zoom: float) -> bool:
        # The shown scene's size when its overview is quick to make, not the items made
        # so far: a scene still filling far zoomed out (after Collapse All's fit, say) is
        # an overview from its first turn, not a detailed paint of everything made so
        # far at every turn (70-180 ms each).  (A bigger scene's overview would take too
        # long to make in one turn: it follows the items made.)
        count = len(self.nodes) + len(self.edge_items)
        d = self.display
        if d is not None and len(d.items) + len(d.edges) <= STAND_IN_ITEMS:
            count = max(count, len(d.items) + len(d.edges))
        return zoom < OVERVIEW_ZOOM and count > OVERVIEW_MIN_ITEMS

    def set_overview(self, on: bool) -> None:
        """Paint everything with one overview item (on) or with the detailed items."""
        if on == self.overview_shown:
            return
        if on and self.overview is None and self.display is not None:
            # (the stand-in painted while a replaced scene is emptied is this scene's)
            self.overview = self._stand_in or OverviewItem(self.display, MARGIN)
            self.addItem(self.overview)
        self.overview_shown = on
        if self.overview is not None:
            self.overview.setVisible(on)
        for tile in self._tiles.values():  # (their boxes and edges with them)
            tile.setVisible(not on)

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


def tile_side(width: float, height: float) -> float:
    """The side of a scene's tile squares: about `TILE_SQUARES` of them over the scene,
    a power of two between `TILE_MIN` and `TILE_MAX`."""
    side = TILE_MIN
    while side < TILE_MAX and (width / side) * (height / side) > TILE_SQUARES:
        side *= 2
    return side


def _coords(r: QRectF) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) in one call into Qt."""
    coords: tuple[float, float, float, float] = r.getCoords()  # type: ignore[assignment]
    return coords  # (the stubs say object)


def sorted_over_turns(
    values: list[Any], key: Callable[[Any], float]
) -> Generator[None, None, list[Any]]:
    """``values`` sorted by ``key`` (stable, as `sorted`), the keys worked out and then
    the values reordered `KEY_SLICE` at a time, with a yield between two slices: one sort
    of 100k boxes or edges by a Python key was a 100-160 ms turn, and the reordering of
    130k alone 30-55 ms.  (No yield after the last, and none at all when the values fit
    in one slice: the first slice of a fill makes its first items at once.)"""
    keys: list[float] = []
    for start in range(0, len(values), KEY_SLICE):
        if start:
            yield
        keys.extend(map(key, values[start : start + KEY_SLICE]))
    if not values:
        return []
    order = np.argsort(np.asarray(keys, dtype=np.float64), kind="stable").tolist()
    ordered: list[Any] = []
    for start in range(0, len(order), KEY_SLICE):
        if start or len(order) > KEY_SLICE:  # (what fits in one slice takes one turn)
            yield
        ordered.extend([values[i] for i in order[start : start + KEY_SLICE]])
    return ordered
