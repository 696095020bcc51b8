"""The Compare window: two models side by side in synced canvas views, their
differences coloured, a changes list that jumps, the properties of a matched pair
side by side, and (after "Compare Numbers") edges coloured by error with a button to
the first divergence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QPointF, Qt, QTimer
from PySide6.QtGui import QAction, QBrush, QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QToolBar,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from onnxviz.errors import OnnxvizError
from onnxviz.model.diff import ModelDiff, NodeRef, diff
from onnxviz.model.scope_names import readable_graph_path
from onnxviz.ui.canvas.items import NodeItem
from onnxviz.ui.canvas.scene import GraphScene
from onnxviz.ui.canvas.view import GraphView
from onnxviz.ui.diff.marks import COLORS, Marks, error_color
from onnxviz.ui.diff.pair_rows import node_rows, tensor_rows

EXPAND_ALL_BELOW = 3000  # nodes: small models open fully, so every change is visible
NodeKey = tuple[str, int]  # (graph path, node index)


@dataclass
class Change:
    kind: str  # changed | added | removed | fused
    a: list[NodeRef]
    b: list[NodeRef]
    details: list[Any]
    # a graph path of side A / B as the breadcrumbs name it (``main > Loop#2``)
    where_a: Callable[[str], str] = str
    where_b: Callable[[str], str] = str

    @property
    def text(self) -> str:
        def names(refs: list[NodeRef]) -> str:
            text = ", ".join(f"{r.label} ({r.op_type})" for r in refs[:3]) + (
                f" +{len(refs) - 3}" if len(refs) > 3 else ""
            )
            # a node in a body says which body: "#1 (ReduceSum)" alone could be anywhere
            graph = refs[0].graph if refs else "main"
            where = self.where_a if refs is self.a else self.where_b
            return text if graph == "main" else f"{text} in {where(graph)}"

        side = names(self.a) if self.a else names(self.b)
        if self.kind == "fused":
            return f"fused: {names(self.a)}  ⇄  {names(self.b)}"
        return f"{self.kind}: {side}"


def _detail_text(d: Any) -> str:
    if d.what == "body":
        # "body: 2 changes inside", not "body body: main/body:#0 → main/body:#0 (2 ...)":
        # the change's own text already says which node holds the body
        inside = d.b.rpartition(" (")[2].rstrip(")") if d.b.endswith(")") else d.b
        return f"{d.name}: {inside}"
    return f"{d.what} {d.name}: {d.a} → {d.b}"


class DiffPane(QWidget):
    """One side: a title and a canvas of one model."""

    def __init__(self, doc: Any, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        from onnxviz.present.options import ViewOptions
        from onnxviz.present.presenter import Presenter, display_graph
        from onnxviz.present.typeinfo import type_table
        from onnxviz.ui.theme import TextMetrics

        self.doc = doc
        presenter = Presenter(doc, options=ViewOptions(), types=type_table(doc))
        total = doc.node_count
        if total <= EXPAND_ALL_BELOW:
            presenter.expanded |= presenter.all_group_ids() | presenter.all_body_ids()
            presenter.expanded |= presenter.all_group_ids()  # groups of opened bodies
        else:
            presenter.expanded |= presenter.default_expansion()
        self.display = display_graph(presenter, measure=TextMetrics())
        self.scene = GraphScene(parent=self)
        self.scene.show_scene(self.display)
        self.view = GraphView(self.scene)
        self.marks = Marks(self.scene)
        self.item_of: dict[NodeKey, str] = {}
        self.key_of: dict[str, NodeKey] = {}
        for item in self.display.items.values():
            if item.node_index is None or item.kind not in ("op", "container"):
                continue
            key = (item.graph_path, item.node_index)
            if key not in self.item_of or item.kind == "op":
                self.item_of[key] = item.id
            self.key_of[item.id] = key
        self.title = QLabel(title)
        self.title.setStyleSheet("font-weight: bold; padding: 2px 4px")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.title)
        layout.addWidget(self.view)

    def node_item(self, key: NodeKey) -> NodeItem | None:
        item_id = self.item_of.get(key)
        return None if item_id is None else self.scene.nodes.get(item_id)

    def show_node(self, key: NodeKey | None, select: bool = True) -> None:
        item = self.node_item(key) if key is not None else None
        if item is None:
            return
        if select:
            self.scene.blockSignals(True)
            self.scene.clearSelection()
            item.setSelected(True)
            self.scene.blockSignals(False)
            self.scene.refresh_highlight()
        if self.view.zoom() < 0.6:  # a jump lands where the text reads
            self.view.set_zoom(1.0)
        self.view.centerOn(item)

    def selected_key(self) -> NodeKey | None:
        for it in self.scene.selectedItems():
            if isinstance(it, NodeItem):
                return self.key_of.get(it.data_item.id)
        return None

    def key_near_center(self) -> NodeKey | None:
        center = self.view.mapToScene(self.view.viewport().rect().center())
        best, best_d = None, float("inf")
        for item_id, key in self.key_of.items():
            node = self.scene.nodes.get(item_id)
            if node is None or node.is_frame:
                continue
            d = (node.sceneBoundingRect().center() - QPointF(center)).manhattanLength()
            if d < best_d:
                best, best_d = key, d
        return best


class CompareWindow(QMainWindow):
    def __init__(
        self,
        doc_a: Any,
        doc_b: Any,
        *,
        title_a: str | None = None,
        title_b: str | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.doc_a, self.doc_b = doc_a, doc_b
        name_a = title_a or doc_a.display_name
        name_b = title_b or doc_b.display_name
        self.setWindowTitle(f"Compare {name_a} with {name_b}")
        self.result: ModelDiff = diff(doc_a, doc_b)
        self.numeric: Any = None
        self.inspectors: list[Any] | None = None
        self.tensor_dock: Any = None
        self.a = DiffPane(doc_a, f"A: {name_a}")
        self.b = DiffPane(doc_b, f"B: {name_b}")
        self._pairs_ab: dict[NodeKey, NodeKey] = {}
        self._pairs_ba: dict[NodeKey, NodeKey] = {}
        self.changes: list[Change] = []
        self._collect()
        self._syncing = False
        self._build_ui()
        self._mark()
        self._fill_changes()
        self.resize(1400, 900)

    # -- the diff as the window uses it -----------------------------------------------
    def _where_a(self, path: str) -> str:
        return readable_graph_path(self.doc_a, path)

    def _where_b(self, path: str) -> str:
        return readable_graph_path(self.doc_b, path)

    def _collect(self) -> None:
        for g in self.result.graphs():
            for ia, ib in g.matches:
                self._pairs_ab[(g.path_a, ia)] = (g.path_b, ib)
                self._pairs_ba[(g.path_b, ib)] = (g.path_a, ia)
            where = {"where_a": self._where_a, "where_b": self._where_b}
            self.changes += [Change("changed", [c.a], [c.b], c.details, **where) for c in g.changed]
            self.changes += [Change("removed", [n], [], [], **where) for n in g.removed]
            self.changes += [Change("added", [], [n], [], **where) for n in g.added]
            for f in g.fused:
                self.changes.append(Change("fused", f.a, f.b, [], **where))
                for x in f.a:
                    self._pairs_ab[(x.graph, x.index)] = (f.b[0].graph, f.b[0].index)
                for y in f.b:
                    self._pairs_ba[(y.graph, y.index)] = (f.a[0].graph, f.a[0].index)

    def _mark(self) -> None:
        for ch in self.changes:
            for ref in ch.a:
                item = self.a.item_of.get((ref.graph, ref.index))
                if item:
                    self.a.marks.mark_node(item, ch.kind)
            for ref in ch.b:
                item = self.b.item_of.get((ref.graph, ref.index))
                if item:
                    self.b.marks.mark_node(item, ch.kind)

    # -- widgets ------------------------------------------------------------------------
    def _build_ui(self) -> None:
        bar = QToolBar("Compare")
        bar.setMovable(False)
        self.addToolBar(bar)
        self.prev_action = QAction("◀ Previous Change", self)
        self.next_action = QAction("Next Change ▶", self)
        self.numbers_action = QAction("Compare Numbers", self)
        self.first_action = QAction("First Divergence", self)
        self.first_action.setEnabled(False)
        self.prev_action.triggered.connect(lambda: self.step_change(-1))
        self.next_action.triggered.connect(lambda: self.step_change(1))
        self.numbers_action.triggered.connect(self.compare_numbers)
        self.first_action.triggered.connect(self.show_first_divergence)
        for action in (self.prev_action, self.next_action, self.numbers_action, self.first_action):
            bar.addAction(action)
        # The summary sits under the toolbar, not in it: in a toolbar it went into the
        # overflow menu of a 1024-wide window, out of sight.
        self.summary = QLabel(self._summary_text())
        self.summary.setWordWrap(True)
        self.summary.setStyleSheet("padding: 2px 8px")
        self.legend = QLabel(error_legend())
        self.legend.setStyleSheet("padding: 2px 8px")
        self.legend.setToolTip(
            "An edge after Compare Numbers: the error the nodes making its value add "
            "(B's nodes run on A's values of their inputs), against the tolerance"
        )
        self.legend.hide()

        views = QSplitter(Qt.Orientation.Horizontal)
        views.addWidget(self.a)
        views.addWidget(self.b)
        views.setSizes([700, 700])
        views.setStretchFactor(0, 1)
        views.setStretchFactor(1, 1)
        self.change_list = QTreeWidget()
        self.change_list.setHeaderLabels(["Change", "Details"])
        self.change_list.setRootIsDecorated(False)
        self.change_list.currentItemChanged.connect(self._on_change_picked)
        self.props = QTableWidget(0, 3)
        self.props.setHorizontalHeaderLabels(["Field", "A", "B"])
        self.props.horizontalHeader().setStretchLastSection(True)
        self.props.verticalHeader().setVisible(False)
        self.props.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        lower = QSplitter(Qt.Orientation.Horizontal)
        lower.addWidget(self.change_list)
        lower.addWidget(self.props)
        lower.setSizes([560, 840])
        main = QSplitter(Qt.Orientation.Vertical)
        main.addWidget(views)
        main.addWidget(lower)
        main.setSizes([620, 280])
        info = QHBoxLayout()
        info.setContentsMargins(0, 0, 0, 0)
        info.addWidget(self.summary, 1)
        info.addWidget(self.legend)
        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addLayout(info)
        column.addWidget(main, 1)
        self.setCentralWidget(central)

        for src, dst in ((self.a, self.b), (self.b, self.a)):
            src.view.zoomChanged.connect(lambda z, d=dst: self._sync_zoom(d, z))
            src.scene.selectionChanged.connect(lambda s=src, d=dst: self._sync_selection(s, d))
            for bar_ in (src.view.horizontalScrollBar(), src.view.verticalScrollBar()):
                bar_.valueChanged.connect(lambda _v, s=src, d=dst: self._schedule_scroll(s, d))
        self._scroll_timer = QTimer(self)
        self._scroll_timer.setSingleShot(True)
        self._scroll_timer.setInterval(40)
        self._scroll_timer.timeout.connect(self._sync_scroll)
        self._scroll_pending: tuple[DiffPane, DiffPane] | None = None

    def _summary_text(self) -> str:
        c = self.result.counts()
        text = (
            f"{c['changed']} changed · {c['added']} added · {c['removed']} removed · "
            f"{c['fused']} fused · {c['weights_changed']} weights differ · "
            f"{c['renamed_values']} renamed"
        )
        if self.result.model:
            text += f" · {len(self.result.model)} model fields differ"
        if self.numeric is not None:
            first = self.numeric.first
            text += " · numbers: " + ("all within" if first is None else f"part at {first.a}")
        return text

    def _fill_changes(self) -> None:
        self.change_list.clear()
        for d in self.result.model:
            item = QTreeWidgetItem([f"model: {d.what} {d.name}", f"{d.a or '-'} → {d.b or '-'}"])
            item.setData(0, Qt.ItemDataRole.UserRole, None)
            self.change_list.addTopLevelItem(item)
        for k, ch in enumerate(self.changes):
            details = "; ".join(_detail_text(d) for d in ch.details)
            item = QTreeWidgetItem([ch.text, details])
            item.setToolTip(0, ch.text)  # the Details column is often out of sight
            item.setToolTip(1, details)
            item.setForeground(0, QBrush(COLORS[ch.kind]))
            item.setData(0, Qt.ItemDataRole.UserRole, k)
            self.change_list.addTopLevelItem(item)
        for g in self.result.graphs():
            for w in g.changed_weights:
                stats = (
                    f"max abs {w.max_abs:.3g}, {100 * w.fraction_changed:.2f}% changed"
                    if w.fraction_changed is not None
                    else w.note
                )
                item = QTreeWidgetItem([f"weight: {w.a}", stats])
                item.setData(0, Qt.ItemDataRole.UserRole, None)
                self.change_list.addTopLevelItem(item)
        self.change_list.resizeColumnToContents(0)

    # -- syncing --------------------------------------------------------------------------
    def counterpart(self, src: DiffPane, key: NodeKey) -> NodeKey | None:
        return (self._pairs_ab if src is self.a else self._pairs_ba).get(key)

    def _sync_zoom(self, dst: DiffPane, zoom: float) -> None:
        if self._syncing or abs(dst.view.zoom() - zoom) < 1e-9:
            return
        self._syncing = True
        try:
            dst.view.set_zoom(zoom)
        finally:
            self._syncing = False

    def _sync_selection(self, src: DiffPane, dst: DiffPane) -> None:
        if self._syncing:
            return
        try:
            key = src.selected_key()
        except RuntimeError:  # the window is going away: its scenes are gone
            return
        if key is None:
            return
        self._syncing = True
        try:
            other = self.counterpart(src, key)
            if other is not None:
                dst.show_node(other)
            self._show_pair(key if src is self.a else other, other if src is self.a else key)
        finally:
            self._syncing = False

    def _schedule_scroll(self, src: DiffPane, dst: DiffPane) -> None:
        if self._syncing:
            return
        self._scroll_pending = (src, dst)
        self._scroll_timer.start()

    def _sync_scroll(self) -> None:
        if self._scroll_pending is None:
            return
        src, dst = self._scroll_pending
        self._scroll_pending = None
        key = src.key_near_center()
        other = self.counterpart(src, key) if key is not None else None
        item = dst.node_item(other) if other is not None else None
        if item is None:
            return
        self._syncing = True
        try:
            dst.view.centerOn(item)
        finally:
            self._syncing = False

    # -- changes --------------------------------------------------------------------------
    def step_change(self, delta: int) -> None:
        count = self.change_list.topLevelItemCount()
        if not count:
            return
        picked = self.change_list.currentItem()
        current = self.change_list.indexOfTopLevelItem(picked) if picked is not None else -1
        row = (current + delta) % count if current >= 0 else (0 if delta > 0 else count - 1)
        target = self.change_list.topLevelItem(row)
        if target is not None:
            self.change_list.setCurrentItem(target)

    def _on_change_picked(self, item: QTreeWidgetItem | None, _prev: Any = None) -> None:
        if item is None:
            return
        k = item.data(0, Qt.ItemDataRole.UserRole)
        if k is None:
            return
        self.jump_to(self.changes[int(k)])

    def jump_to(self, ch: Change) -> None:
        ka = (ch.a[0].graph, ch.a[0].index) if ch.a else None
        kb = (ch.b[0].graph, ch.b[0].index) if ch.b else None
        self._syncing = True
        try:
            if ka is not None:
                self.a.show_node(ka)
            if kb is not None:
                self.b.show_node(kb)
        finally:
            self._syncing = False
        self._show_pair(ka, kb, ch.details)

    def _node(self, doc: Any, key: NodeKey | None) -> Any:
        if key is None:
            return None
        try:
            graph_path, node_index = key
            return doc.scope(graph_path).nodes[node_index]
        except (KeyError, IndexError):
            return None

    def _show_pair(self, ka: NodeKey | None, kb: NodeKey | None, details: Any = None) -> None:
        if details is None:
            details = next(
                (
                    ch.details
                    for ch in self.changes
                    if ch.kind == "changed"
                    and ka is not None
                    and ch.a
                    and (ch.a[0].graph, ch.a[0].index) == ka
                ),
                [],
            )
        rows = node_rows(self._node(self.doc_a, ka), self._node(self.doc_b, kb), details)
        self.set_rows(rows)

    def set_rows(self, rows: list[tuple[str, str, str, bool]]) -> None:
        self.props.setRowCount(len(rows))
        wash = QColor(COLORS["changed"])
        wash.setAlpha(70)
        for r, (label, va, vb, differs) in enumerate(rows):
            for c, text in enumerate((label, va, vb)):
                cell = QTableWidgetItem(text)
                cell.setToolTip(text)  # a long value is cut at the column's width
                if differs:
                    cell.setBackground(QBrush(wash))
                self.props.setItem(r, c, cell)
        self.props.resizeColumnsToContents()
        # A long list of values must not push B's column out of sight.
        cap = max(160, self.props.viewport().width() // 3)
        for c in (1, 2):
            self.props.setColumnWidth(c, min(self.props.columnWidth(c), cap))

    # -- numbers ------------------------------------------------------------------------
    def compare_numbers(self, feeds: dict[str, Any] | None = None) -> None:
        """Run both models on random inputs (seed 0; or ``feeds``) and colour the edges
        by error."""
        from onnxviz.runtime.model_diff import numeric_diff

        try:
            if not feeds:
                feeds = _random_feeds(self.doc_a)
            self.numeric = numeric_diff(self.doc_a, self.doc_b, self.result, feeds)
        except OnnxvizError as exc:
            self.statusBar().showMessage(f"Cannot compare the numbers: {exc}")
            return
        self._color_edges()
        self.legend.show()
        self.first_action.setEnabled(self.numeric.first is not None)
        self.summary.setText(self._summary_text())
        first = self.numeric.first
        self.statusBar().showMessage(
            "The numbers agree within the tolerance"
            if first is None
            else f"First divergence: {first.a} (node {first.node_a}): "
            f"{_judged_text(first)} — press First Divergence to see it"
        )

    def _color_edges(self) -> None:
        assert self.numeric is not None
        by_a = self.numeric.by_value_a()
        by_b: dict[str, Any] = {}
        for vc in self.numeric.values:
            by_b[vc.b] = vc
            by_b.setdefault(self.result.main.value_map.get(vc.a, vc.b), vc)
        for pane, table in ((self.a, by_a), (self.b, by_b)):
            pane.marks.clear_edges()
            for edge in pane.scene.edge_items:
                if edge.data_edge.graph_path != "main":
                    continue
                vc = table.get(edge.data_edge.value)
                if vc is None or vc.max_abs is None:
                    continue
                # Coloured by the error judged (what the value's own nodes add), so
                # red is where the models part, not everything downstream of it.
                judged = vc.max_abs if vc.local_abs is None else vc.local_abs
                ratio = judged / vc.tolerance if vc.tolerance else None
                tip = f"{vc.a}: {_judged_text(vc)}" + ("" if vc.tolerance else " (not judged)")
                pane.marks.mark_edge(edge, error_color(ratio), tip)

    def show_first_divergence(self) -> None:
        if self.numeric is None or self.numeric.first is None:
            return
        first = self.numeric.first
        ga = self.doc_a.scope("main")
        gb = self.doc_b.scope("main")
        ia = ga.node_index(first.node_a)
        ib = gb.node_index(first.node_b) if first.node_b else None
        self._syncing = True
        try:
            if ia is not None:
                self.a.show_node(("main", ia))
            if ib is not None:
                self.b.show_node(("main", ib))
        finally:
            self._syncing = False
        # The numbers that explain the verdict first, then the two tensors.
        rows = [("value", first.a, first.b, False)]
        if first.local_abs is not None:
            rows.append(("error its nodes add", f"{first.local_abs:.6g}", "", True))
        if first.tolerance is not None:
            rows.append(("tolerance", f"{first.tolerance:.6g}", "", False))
        rows.append(("max abs error", f"{first.max_abs:.6g}", "", first.local_abs is None))
        if first.quant_step is not None:
            rows.append(("quantization step", f"{first.quant_step:.6g}", "", False))
        if first.region_step is not None and first.region_step != first.quant_step:
            rows.append(("coarsest step of its nodes", f"{first.region_step:.6g}", "", False))
        if first.note:
            rows.append(("note", first.note, "", False))
        if self.numeric.first_values is not None:
            rows += tensor_rows(*self.numeric.first_values)
            self.inspect(first.a, first.b, *self.numeric.first_values)
        self.set_rows(rows)
        self.statusBar().showMessage(
            f"First divergence: {first.a} (node {first.node_a}): {_judged_text(first)}"
        )

    def inspect(self, name_a: str, name_b: str, va: Any, vb: Any) -> None:
        """Both tensors, and their difference when the shapes agree, in tensor
        inspectors (tabs of a dock on the right)."""
        import numpy as np
        from PySide6.QtWidgets import QDockWidget, QTabWidget

        from onnxviz.ui.inspector import TensorInspector

        if self.inspectors is None:
            dock = QDockWidget("Tensors", self)
            dock.setObjectName("dock.diff_tensors")
            tabs = QTabWidget()
            self.inspectors = [TensorInspector(), TensorInspector(), TensorInspector()]
            for widget, label in zip(self.inspectors, ("A", "B", "B − A")):
                tabs.addTab(widget, label)
            dock.setWidget(tabs)
            self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
            # A quarter of the window: the two graphs stay the larger part.
            self.resizeDocks([dock], [max(260, self.width() // 4)], Qt.Orientation.Horizontal)
            self.tensor_dock = dock
        self.inspectors[0].show_value(f"A: {name_a}", va)
        self.inspectors[1].show_value(f"B: {name_b}", vb)
        same = isinstance(va, np.ndarray) and isinstance(vb, np.ndarray) and va.shape == vb.shape
        if same and va.dtype.kind in "biuf" and vb.dtype.kind in "biuf":
            delta = vb.astype(np.float64) - va.astype(np.float64)
            self.inspectors[2].show_value(f"B − A: {name_a}", delta)
        self.tensor_dock.show()


def _judged_text(vc: Any) -> str:
    """The error a value is judged by, its tolerance, and the end-to-end error."""
    if vc.local_abs is None:
        own = f"max abs {vc.max_abs:.3g}"
    else:
        own = f"its nodes add {vc.local_abs:.3g}"
    tol = "" if vc.tolerance is None else f" (tolerance {vc.tolerance:.3g})"
    end = "" if vc.local_abs is None else f"; end to end {vc.max_abs:.3g}"
    return own + tol + end


def error_legend() -> str:
    """Rich text: what the edge colours of a numeric diff mean."""
    swatches = [
        (error_color(0.0), "within"),
        (error_color(0.9), "near"),
        (error_color(2.0), "beyond tolerance"),
        (error_color(None), "not judged"),
    ]
    return "Edges: " + " ".join(
        f'<span style="color:{c.name()}">■</span> {label}' for c, label in swatches
    )


def _random_feeds(doc: Any) -> dict[str, Any]:
    import numpy as np

    from onnxviz.runtime.inputs import FeedRecipe, build_feed, input_specs
    from onnxviz.runtime.session import feed_inputs

    specs = input_specs(feed_inputs(doc.model))
    rng = np.random.default_rng(0)
    return {s.name: build_feed(s, FeedRecipe(), {}, rng) for s in specs}
