"""Navigation in the main window: drill-down views with a breadcrumb, selection and
the properties it shows, jumps (find, outline, properties links), the context menu.

A mixin of `MainWindow` (it uses the window's presenter, scene, view and docks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QPointF
from PySide6.QtGui import QTransform
from PySide6.QtWidgets import QMenu

from onnxviz.model.node_id import parse_item_id
from onnxviz.present.find import FindResult
from onnxviz.present.paths import graph_trail
from onnxviz.present.properties import value_sections
from onnxviz.ui.canvas.items import EdgeItem, NodeItem

if TYPE_CHECKING:
    pass


@dataclass
class Crumb:
    root_path: str
    transform: QTransform
    center: QPointF
    expanded: set[str]


class NavigationMixin:
    # -- drill-down -----------------------------------------------------------------------------
    def open_graph(self, path: str) -> None:
        """Show a subgraph or function body as a view of its own (Back returns)."""
        if self.presenter is None or path == self.presenter.root_path:
            return
        self.crumbs.append(
            Crumb(
                self.presenter.root_path,
                self.view.transform(),
                self.view.mapToScene(self.view.viewport().rect().center()),
                set(self.presenter.expanded),
            )
        )
        self.presenter.set_root(path)
        self.relayout(after=self.view.fit)

    def back(self) -> None:
        if not self.crumbs or self.presenter is None:
            return
        crumb = self.crumbs.pop()
        self.presenter.root_path = crumb.root_path
        self.presenter.expanded = crumb.expanded

        def restore() -> None:
            self.view.setTransform(crumb.transform)
            self.view.refresh_detail()
            self.view.centerOn(crumb.center)
            self.view.zoomChanged.emit(self.view.zoom())

        self.relayout(after=restore)

    def _update_crumbs(self) -> None:
        if self.presenter is None or self.presenter.root_path == "main" and not self.crumbs:
            self.crumb_bar.hide()
        else:
            # the graph shown, with the graphs around it: main › Scan#0 › If#4 (else)
            scope = self.doc.scope(self.presenter.root_path)
            self.crumb_label.setText("  ›  ".join(graph_trail(scope)))
            self.crumb_bar.show()
        self._sync_actions()

    # -- selection, navigation ------------------------------------------------------------------
    def expand_all_bodies(self) -> None:
        """Open every Loop/If/Scan body and function body under the shown graph."""
        if self.presenter is None:
            return
        opened = self.presenter.open_all_bodies()
        self.statusBar().showMessage(
            f"opened {opened} bodies" if opened else "no bodies to open", 4000
        )
        self.relayout()

    def select_item(self, item_id: str, center: bool = True) -> bool:
        if item_id not in self.graph_scene.nodes:
            self.graph_scene.finish_filling()  # a big scene still being filled
        node = self.graph_scene.nodes.get(item_id)
        if node is None:
            return False
        self.view.select_and_show(node, center)
        return True

    def jump_to(self, result: FindResult) -> None:
        """Show a find result: change the root if needed, expand what hides it, select."""
        self.reveal(result.graph_path, result.node_index)

    def reveal(self, graph_path: str, node_index: int | None) -> None:
        if self.presenter is None or self.doc is None:
            return
        target = self.presenter.reveal(graph_path, node_index)
        if target is None:
            # not under the current root: go to the graph's top (main or a function)
            scope = self.doc.scope(graph_path)
            top = scope
            while top.parent is not None:
                top = top.parent
            self.open_graph(top.path)
            target = self.presenter.reveal(graph_path, node_index)
        if target is None:
            return
        self.relayout(after=lambda: self.select_item(target))

    def _outline_activated(self, kind: str, path: str, target: object) -> None:
        if self.doc is None:
            return
        if kind == "node":
            self.reveal(path, int(target))  # type: ignore[call-overload]
        elif kind == "value":
            self.show_value(path, str(target))
        elif kind == "graph":
            self.show_graph_properties(path)

    def show_value(self, path: str, name: str) -> None:
        if self.doc is None or self.presenter is None:
            return
        doc, presenter = self.doc, self.presenter
        self.properties_dock.show_sections(
            value_sections(doc, path, name, presenter.types),
            lambda: value_sections(doc, path, name, presenter.types),
            ("value", path, name),
        )
        self.properties_dock.show()

    def _navigate(self, kind: str, target: str) -> None:
        node = parse_item_id(target) if kind == "node" else None
        if node is not None:
            self.reveal(node.graph_path, node.index)
        elif kind == "value":
            sel = self._selected_node()
            path = sel.data_item.graph_path if sel else "main"
            self.show_value(path, target)

    def _row_clicked(self, item_id: str, name: str) -> None:
        item = self.graph_scene.nodes.get(item_id)
        if item is not None:
            self.show_value(item.data_item.graph_path, name)
            self._row_shown = True

    def _selected_node(self) -> NodeItem | None:
        return self.view.selected_node()

    def _selection_changed(self) -> None:
        if self.doc is None or self.presenter is None or not self.isVisible():
            return
        if getattr(self, "_row_shown", False):
            self._row_shown = False
            return
        for it in self.graph_scene.selectedItems():
            try:
                if isinstance(it, EdgeItem):
                    self.show_value(it.data_edge.graph_path, it.data_edge.value)
                    return
                if isinstance(it, NodeItem):
                    self._show_item_properties(it)
                    return
            except (KeyError, IndexError):
                return

    def _show_item_properties(self, node: NodeItem) -> None:
        assert self.doc is not None and self.presenter is not None
        d = node.data_item
        if d.node_index is not None and d.graph_path in {s.path for s in self.doc.scopes()}:
            self.show_node_properties(d.graph_path, d.node_index)
        elif d.value is not None and d.kind in ("input", "output", "outer"):
            self.show_value(d.graph_path, d.value)
        elif d.kind == "group":
            from onnxviz.present.properties import Row, Section

            rows = [Row("scope", d.id.split("|g:", 1)[-1]), Row("ops", str(d.op_count))]
            rows += [Row("input", n, target=("value", n)) for n in d.group_inputs]
            rows += [Row("output", n, target=("value", n)) for n in d.group_outputs]
            self.properties_dock.show_sections([Section("Group", rows)])

    def _context_menu(self, pos: Any) -> None:
        if self.doc is None or self.presenter is None:
            return
        item = self.view.itemAt(pos)
        menu = QMenu(self)
        if isinstance(item, NodeItem):
            d = item.data_item
            if d.expandable:
                menu.addAction("Collapse" if d.expanded else "Expand", lambda: self.toggle(d.id))
            if d.node_index is not None and d.graph_path in {s.path for s in self.doc.scopes()}:
                scope = self.doc.scope(d.graph_path)
                for child in scope.children:
                    if child.owner_node_index == d.node_index:
                        menu.addAction(
                            f"Open '{child.owner_attribute}' in its own view",
                            lambda p=child.path: self.open_graph(p),
                        )
                node = scope.nodes[d.node_index]
                fn = next(
                    (
                        f
                        for f in self.doc.model.functions
                        if (f.domain, f.name) == (node.domain, node.op_type)
                    ),
                    None,
                )
                if fn is not None:
                    from onnxviz.model.scopes import function_path

                    fn_path = function_path(fn)
                    menu.addAction(
                        "Open the function body in its own view",
                        lambda: self.open_graph(fn_path),
                    )
                elif d.kind == "op" or d.id in self.presenter.schema_expanded:
                    from onnxviz.present.build import schema_function_body

                    if schema_function_body(self.doc.model, node) is not None:
                        shown = d.id in self.presenter.schema_expanded
                        menu.addAction(
                            "Hide the schema function body"
                            if shown
                            else "Expand the schema function body",
                            lambda: self.toggle_schema_body(d.id),
                        )
        from onnxviz.ui.edit.menus import canvas_menu

        canvas_menu(self, item, menu)
        menu.addSeparator()
        menu.addAction(self.actions_.fit)
        if self.crumbs:
            menu.addAction(self.actions_.back)
        menu.popup(self.view.viewport().mapToGlobal(pos))

    def toggle_schema_body(self, item_id: str) -> None:
        if self.presenter is None:
            return
        if item_id in self.presenter.schema_expanded:
            self.presenter.schema_expanded.discard(item_id)
        else:
            self.presenter.schema_expanded.add(item_id)
        self.relayout(anchor=item_id)
