"""`GraphScene`: the QGraphicsScene that shows one placed `present.Scene`, with the
id -> item maps and the producer/consumer highlighting of the selection."""

from __future__ import annotations

from PySide6.QtCore import QObject, QRectF, Signal
from PySide6.QtGui import QBrush
from PySide6.QtWidgets import QGraphicsScene

from onnxviz.present.scene import Scene
from onnxviz.ui.canvas.items import EdgeItem, NodeItem
from onnxviz.ui.canvas.overview import OVERVIEW_MIN_ITEMS, OVERVIEW_ZOOM, OverviewItem
from onnxviz.ui.theme import LIGHT, Theme

MARGIN = 40.0


class GraphScene(QGraphicsScene):
    rowClicked = Signal(str, str)  # item id, initializer name
    toggleRequested = Signal(str)  # item id of a group / body-holding node
    jumpRequested = Signal(str)  # item id to go to (a proxy's source)

    def __init__(self, theme: Theme = LIGHT, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.display: Scene | None = None
        self.nodes: dict[str, NodeItem] = {}
        self.edge_items: list[EdgeItem] = []
        self._edges_by_item: dict[str, list[EdgeItem]] = {}
        self._highlighted: list[NodeItem | EdgeItem] = []
        self.overview: OverviewItem | None = None
        self.overview_shown = False
        self.setBackgroundBrush(QBrush(theme.background))
        self.selectionChanged.connect(self._on_selection)

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.setBackgroundBrush(QBrush(theme.background))
        self.update()

    def show_scene(self, display: Scene, show_labels: bool = True) -> None:
        """Replace everything with the items of ``display``."""
        self.blockSignals(True)
        self.clear()
        self.blockSignals(False)
        self.display = display
        self.overview = None
        self.overview_shown = False
        self.nodes = {}
        self.edge_items = []
        self._edges_by_item = {}
        self._highlighted = []
        for item in display.items.values():
            node = NodeItem(item)
            self.addItem(node)
            self.nodes[item.id] = node
        labelled: set[tuple[str, str]] = set()
        for edge in display.edges:
            if not edge.points:
                continue
            # a value that fans out is labelled once, not on every branch
            key = (edge.source, edge.value)
            e = EdgeItem(edge, show_labels and key not in labelled)
            labelled.add(key)
            self.addItem(e)
            self.edge_items.append(e)
            self._edges_by_item.setdefault(edge.source, []).append(e)
            self._edges_by_item.setdefault(edge.target, []).append(e)
        self._spread_labels()
        self.setSceneRect(
            QRectF(-MARGIN, -MARGIN, display.width + 2 * MARGIN, display.height + 2 * MARGIN)
        )

    def _spread_labels(self) -> None:
        """Keep edge labels from overlapping each other and boxes: try a few nudges
        along the edge, else drop the label (the tooltip still tells)."""
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

        def free(r: QRectF) -> bool:
            return not any(o.intersects(r) for c in cells(r) for o in grid.get(c, ()))

        for node in self.nodes.values():
            if not node.is_frame:
                add(node.sceneBoundingRect().adjusted(2, 2, -2, -2))
        for e in self.edge_items:
            if not e.show_label:
                continue
            base = e.label_rect
            for dy in (0.0, 14.0, -14.0, 28.0, -28.0):
                for dx in (0.0, -base.width() - 8.0):
                    r = base.translated(dx, dy)
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

    def _mark(self, it: NodeItem | EdgeItem) -> None:
        it.highlighted = True
        it.update()
        self._highlighted.append(it)

    def highlighted_ids(self) -> set[str]:
        return {it.data_item.id for it in self._highlighted if isinstance(it, NodeItem)}
