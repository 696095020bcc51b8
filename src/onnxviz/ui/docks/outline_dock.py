"""Outline dock: graphs (nested), inputs, outputs, initializers, nodes and functions as
a tree.  Children are filled when a branch is first opened, so 100k nodes cost nothing
until someone looks."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QDockWidget, QTreeWidget, QTreeWidgetItem, QWidget

from onnxviz.model.document import Document
from onnxviz.model.scope_names import step_label
from onnxviz.model.scopes import GraphScope

ROLE = Qt.ItemDataRole.UserRole
_PENDING = "…"
_INITIALIZER_KINDS = ("initializer", "sparse_initializer")
# A branch lists at most this many entries (a tree of 100k rows takes seconds to build).
MAX_LISTED = 5000
DEFER_NODES = 5000  # bigger main graphs: the tree opens in the next turn of the event loop


class OutlineDock(QDockWidget):
    # kind ("graph"|"node"|"value"|"function"), graph path, node index or value name
    activated = Signal(str, str, object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Outline", parent)
        self.setObjectName("dock.outline")
        self.tree = QTreeWidget()
        self.tree.setHeaderHidden(True)
        self.tree.setUniformRowHeights(True)
        self.tree.itemExpanded.connect(self._fill)
        self.tree.itemActivated.connect(self._activated)
        self.setWidget(self.tree)
        self.doc: Document | None = None
        self._shown = 0  # how many times the tree was rebuilt

    def show_document(self, doc: Document | None) -> None:
        self.doc = doc
        self._shown += 1  # a pending expansion of the tree shown before is dropped
        self.tree.clear()
        if doc is None:
            return
        main = self._graph_item(doc.main_scope, "main graph")
        self.tree.addTopLevelItem(main)
        # every model lists its local functions, small or big
        if doc.model.functions:
            fns = QTreeWidgetItem([f"functions ({len(doc.model.functions)})"])
            self.tree.addTopLevelItem(fns)
            for scope in doc.scopes():
                if scope.kind == "function":
                    fns.addChild(self._graph_item(scope, _function_title(scope)))
        if len(doc.main_scope.nodes) <= DEFER_NODES:
            main.setExpanded(True)
            return
        # A big graph's is opened in the next turn of the event loop: listing its inputs
        # and initializers takes ~100 ms at 100k nodes, which would add to the rest of
        # taking over the new document in one long stop of the UI thread.
        self._shown += 1
        shown = self._shown
        QTimer.singleShot(1, lambda: main.setExpanded(True) if self._shown == shown else None)

    def _graph_item(self, scope: GraphScope, title: str) -> QTreeWidgetItem:
        item = QTreeWidgetItem([f"{title}  ({len(scope.nodes)} nodes)"])
        item.setData(0, ROLE, ("graph", scope.path, None, "branches"))
        item.addChild(QTreeWidgetItem([_PENDING]))
        return item

    def _fill(self, item: QTreeWidgetItem) -> None:
        first = item.child(0) if item.childCount() == 1 else None
        if first is None or first.text(0) != _PENDING or self.doc is None:
            return
        item.takeChild(0)
        kind, path, _, what = item.data(0, ROLE)
        scope = self.doc.scope(path)
        if what == "branches":
            # counts from the index, not lists of names: a big graph's 10^4 initializers
            # are listed (and sorted) only when their branch is opened
            other = scope.other_definitions()
            # one pass over the index (a generator per name cost 75 ms at 100k nodes,
            # one stop of the UI thread)
            initializers = {
                name for name, defs in other.items() for d in defs if d.kind in _INITIALIZER_KINDS
            }
            inputs = [n for n in scope.input_names() if n not in initializers]
            for label, count in (
                ("inputs", len(inputs)),
                ("outputs", len(scope.output_names())),
                ("initializers", len(initializers)),
            ):
                branch = QTreeWidgetItem([f"{label} ({count})"])
                branch.setData(0, ROLE, ("list", path, None, label))
                branch.addChild(QTreeWidgetItem([_PENDING]))
                item.addChild(branch)
            nodes = QTreeWidgetItem([f"nodes ({len(scope.nodes)})"])
            nodes.setData(0, ROLE, ("list", path, None, "nodes"))
            nodes.addChild(QTreeWidgetItem([_PENDING]))
            item.addChild(nodes)
            for child_scope in scope.children:
                # named as the breadcrumbs name it (``Loop#2``, ``If#4 (else)``), not by
                # its path's last step (``body:#2``), with the path in the tooltip
                child = self._graph_item(child_scope, step_label(child_scope))
                child.setToolTip(0, child_scope.path)
                item.addChild(child)
            return
        if what == "nodes":
            count = len(scope.nodes)
            shown = min(count, MAX_LISTED)
            item.addChildren([self._node_item(scope, path, i) for i in range(shown)])
            if count > shown:
                item.addChild(QTreeWidgetItem([f"… {count - shown} more: use Find (Ctrl+F)"]))
            return
        inits = set(scope.initializer_names())
        names = {
            "inputs": [n for n in scope.input_names() if n not in inits],
            "outputs": scope.output_names(),
            "initializers": sorted(inits),
        }[what]
        children = []
        for name in names[:MAX_LISTED]:
            child = QTreeWidgetItem([name])
            child.setData(0, ROLE, ("value", path, name, ""))
            children.append(child)
        item.addChildren(children)
        if len(names) > MAX_LISTED:
            item.addChild(QTreeWidgetItem([f"… {len(names) - MAX_LISTED} more: use Find (Ctrl+F)"]))

    @staticmethod
    def _node_item(scope: GraphScope, path: str, i: int) -> QTreeWidgetItem:
        child = QTreeWidgetItem([f"{scope.nodes[i].op_type}  {scope.node_label(i)}"])
        child.setData(0, ROLE, ("node", path, i, ""))
        return child

    def _activated(self, item: QTreeWidgetItem, column: int) -> None:
        data = item.data(0, ROLE)
        if not data:
            return
        kind, path, target, _ = data
        if kind in ("graph", "node", "value"):
            self.activated.emit(kind, path, target)


def _function_title(scope: GraphScope) -> str:
    """``local.fn.Scale (half)``: the function as its call boxes on the canvas name it."""
    return step_label(scope).removeprefix("function ")
