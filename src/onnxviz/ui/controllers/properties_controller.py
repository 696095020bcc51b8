"""The Properties dock follows the canvas selection, row clicks, outline and properties
links, and every change of the model: a node's pane follows the node by its label, a
value's pane follows the value through renames (its own, typed in the pane, included),
and another model resets it to that model's properties."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QMouseEvent

from onnxviz.model.changes import ChangeSet
from onnxviz.model.document import Document
from onnxviz.model.node_id import parse_item_id
from onnxviz.present.properties import (
    Row,
    Section,
    graph_sections,
    model_sections,
    node_sections,
    value_sections,
)
from onnxviz.ui.canvas.items import EdgeItem, NodeItem
from onnxviz.ui.canvas.scene import GraphScene
from onnxviz.ui.canvas.view import GraphView
from onnxviz.ui.controllers.navigation_controller import NavigationController
from onnxviz.ui.doc_session import DocumentSession
from onnxviz.ui.docks.properties_dock import PropertiesDock


class PropertiesController(QObject):
    def __init__(
        self,
        session: DocumentSession,
        dock: PropertiesDock,
        scene: GraphScene,
        view: GraphView,
        navigation: NavigationController,
    ) -> None:
        super().__init__(session)
        self.session = session
        self.dock = dock
        self.graph_scene = scene
        self.view = view
        self.navigation = navigation
        # The value the pane shows, updated when a rename moves it (see `changed`).
        self._value: dict[str, str] | None = None
        # A box's row (a weight) clicked in this press: the pane shows it, not the box.
        self._row_click: str | None = None
        scene.rowClicked.connect(self._row_clicked)
        scene.selectionChanged.connect(self.selection_changed)
        dock.navigate.connect(self._navigate)
        view.viewport().installEventFilter(self)
        session.document_replaced.connect(self._document_replaced)
        session.changed.connect(self._changed)

    def disconnect_scene(self) -> None:
        """Closing: the scene's last selection change must not reach a closed dock."""
        self.graph_scene.selectionChanged.disconnect(self.selection_changed)

    # -- the document -----------------------------------------------------------------------
    def _document_replaced(self, doc: Document | None) -> None:
        self._value = None
        if doc is None:
            self.dock.show_sections([])
        else:
            self.show_model_properties()

    def _changed(self, changes: ChangeSet) -> None:
        doc = self.session.doc
        where = self._value
        subject = self.dock.subject
        if doc is not None and where is not None and subject and subject[0] == "value":
            where["name"] = followed_name(doc, where["path"], where["name"], changes)
        self.dock.refresh()

    # -- what the pane shows ------------------------------------------------------------------
    def _show(self, sections: list[Section], source: Any, subject: tuple[Any, ...]) -> None:
        self._value = None
        self.dock.show_sections(sections, source, subject)
        self.session.selection_changed.emit(subject)

    def show_node_properties(self, path: str, index: int) -> None:
        """Show a node's properties; after edits they follow the node by its label
        (indexes shift when nodes are added or removed before it)."""
        doc, presenter = self.session.doc, self.session.presenter
        assert doc is not None and presenter is not None
        where: dict[str, Any] = {"label": doc.scope(path).node_label(index), "index": index}

        def sections() -> list[Any]:
            scope = doc.scope(path)
            found = scope.node_index(str(where["label"]))
            if found is None:  # renamed itself: same place
                found = int(where["index"])
                if found >= len(scope.nodes):
                    return []
            where.update(label=scope.node_label(found), index=found)
            self.dock.subject = ("node", path, found)
            return node_sections(doc, path, found, presenter.types)

        self._show(
            node_sections(doc, path, index, presenter.types), sections, ("node", path, index)
        )

    def show_value(self, path: str, name: str) -> None:
        doc, presenter = self.session.doc, self.session.presenter
        if doc is None or presenter is None:
            return
        where = {"path": path, "name": name}

        def sections() -> list[Any]:
            self.dock.subject = ("value", path, where["name"])
            return value_sections(doc, path, where["name"], presenter.types)

        self._show(
            value_sections(doc, path, name, presenter.types), sections, ("value", path, name)
        )
        self._value = where
        self.dock.show()

    def show_model_properties(self) -> None:
        doc = self.session.doc
        if doc is not None:
            self._show(model_sections(doc), lambda: model_sections(doc), ("model",))

    def show_graph_properties(self, path: str) -> None:
        doc = self.session.doc
        assert doc is not None
        self._show(graph_sections(doc, path), lambda: graph_sections(doc, path), ("graph", path))

    # -- the canvas -----------------------------------------------------------------------------
    def selection_changed(self) -> None:
        if self.session.doc is None or self.session.presenter is None:
            return
        for item in self.graph_scene.selectedItems():
            try:
                if isinstance(item, EdgeItem):
                    self.show_value(item.data_edge.graph_path, item.data_edge.value)
                    return
                if isinstance(item, NodeItem):
                    if self._row_click != item.data_item.id:
                        self.show_item(item)
                    return
            except (KeyError, IndexError):
                return

    def _row_clicked(self, item_id: str, name: str) -> None:
        item = self.graph_scene.nodes.get(item_id)
        if item is not None:
            self._row_click = item_id
            self.show_value(item.data_item.graph_path, name)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """A click on a box that is already selected brings its properties back after
        the pane moved on (to a weight row, a value, a diagnostic)."""
        if (
            event.type() == QEvent.Type.MouseButtonRelease
            and isinstance(event, QMouseEvent)
            and event.button() == Qt.MouseButton.LeftButton
        ):
            row_click, self._row_click = self._row_click, None
            item = node_at(self.view, event.position().toPoint())
            if (
                item is not None
                and item.isSelected()
                and row_click != item.data_item.id
                and self.dock.subject != self.item_subject(item)
            ):
                self.show_item(item)
        return False

    def item_subject(self, node: NodeItem) -> tuple[Any, ...] | None:
        """What the pane shows for a box (None: a group, shown without a subject)."""
        d = node.data_item
        if d.node_index is not None:
            return ("node", d.graph_path, d.node_index)
        if d.value is not None and d.kind in ("input", "output", "outer"):
            return ("value", d.graph_path, d.value)
        return None

    def show_item(self, node: NodeItem) -> None:
        doc = self.session.doc
        assert doc is not None
        d = node.data_item
        if d.node_index is not None and d.graph_path in {s.path for s in doc.scopes()}:
            self.show_node_properties(d.graph_path, d.node_index)
        elif d.value is not None and d.kind in ("input", "output", "outer"):
            self.show_value(d.graph_path, d.value)
        elif d.kind == "group":
            rows = [Row("scope", d.id.split("|g:", 1)[-1]), Row("ops", str(d.op_count))]
            rows += [Row("input", n, target=("value", n)) for n in d.group_inputs]
            rows += [Row("output", n, target=("value", n)) for n in d.group_outputs]
            self._value = None
            self.dock.show_sections([Section("Group", rows)])

    def _navigate(self, kind: str, target: str) -> None:
        node = parse_item_id(target) if kind == "node" else None
        if node is not None:
            self.navigation.reveal(node.graph_path, node.index)
        elif kind == "value":
            selected = self.view.selected_node()
            path = selected.data_item.graph_path if selected else "main"
            self.show_value(path, target)


def node_at(view: GraphView, pos: Any) -> NodeItem | None:
    """The box under a viewport position (its text and marks count as the box)."""
    item = view.itemAt(pos)
    while item is not None and not isinstance(item, NodeItem):
        item = item.parentItem()
    return item


def followed_name(doc: Document, path: str, name: str, changes: ChangeSet) -> str:
    """The name a value has after ``changes``: itself unless it was renamed, in which
    case the one other name the change touched in the same graph that now exists."""
    try:
        scope = doc.scope(path)
    except KeyError:
        return name
    if scope.lookup(name) is not None:
        return name
    graphs = {p for p, n in changes.names if n == name}
    found = {
        n for p, n in changes.names if p in graphs and n != name and scope.lookup(n) is not None
    }
    return found.pop() if len(found) == 1 else name


__all__ = ["PropertiesController", "followed_name", "node_at"]
