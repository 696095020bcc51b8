"""Editing in the main window: graph surgery from the canvas and the properties dock,
canvas and title refresh after each change, diagnostics badges and navigation, the
unsaved-work prompt, Save As with the external-data choice, crash recovery.

A mixin of `MainWindow` (it uses the window's document, presenter, scene, docks)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMenu,
    QMessageBox,
)

from onnxviz.model import commands as C
from onnxviz.model import surgery
from onnxviz.model.changes import ChangeSet
from onnxviz.model.diagnostics import Diagnostic
from onnxviz.present.properties import Row, graph_sections, model_sections, node_sections
from onnxviz.ui.canvas.items import NodeItem

OFFSCREEN = os.environ.get("QT_QPA_PLATFORM") == "offscreen"
# After an edit of a model with more nodes than this, the canvas is re-laid out in a
# worker thread (the window stays responsive; the old drawing shows until then).
BACKGROUND_EDIT_NODES = 3000
EXTERNAL_CHOICES = [
    ("keep", "Keep external data where it is"),
    ("embed", "Embed all tensors in the model file"),
    ("external", "Write big tensors to a data file next to the model"),
]


class EditingMixin:
    # -- after each change -------------------------------------------------------------------
    def document_changed(self, changes: ChangeSet) -> None:
        from onnxviz.present.typeinfo import type_table

        if self.doc is None or self.presenter is None:
            return
        presenter = self.presenter
        if changes.structural:
            presenter.group_trees = {}
        try:
            self.doc.scope(presenter.root_path)
        except KeyError:  # the viewed subgraph is gone (undo of its creation, ...)
            presenter.root_path = "main"
            self.crumbs = []
        old_types = presenter.types
        presenter.types = type_table(self.doc)
        if not presenter.types.complete:
            if old_types is not None:  # keep the last inferred texts until new ones come
                for path, values in old_types.by_graph.items():
                    entries = presenter.types.by_graph.setdefault(path, {})
                    for name, vt in values.items():
                        entries.setdefault(name, vt)
            previous = getattr(self, "inference_task", None)
            if previous is not None and not previous.done:
                previous.cancel()  # its model is out of date
            self._start_inference()
        if self._in_place(changes):
            self._refresh_in_place()
        else:
            big = sum(len(s.nodes) for s in self.doc.scopes()) > BACKGROUND_EDIT_NODES
            self.relayout(background=True if big else None)
        if changes.structural or changes.reindex or changes.names:
            self.outline_dock.show_document(self.doc)
            self.find_dock.set_document(self.doc)
        self.properties_dock.refresh()
        self.update_title()
        self._sync_actions()

    @staticmethod
    def _in_place(changes: ChangeSet) -> bool:
        """Edits that do not move boxes or edges: attribute, type, doc, metadata, model
        fields.  Everything that adds, removes or rewires re-lays out."""
        return not changes.structural and not changes.reindex and not _renames(changes)

    def _refresh_in_place(self) -> None:
        """Edge labels (shapes) follow the new types; boxes stay where they are."""
        if self.presenter is None or self.presenter.types is None or self.doc is None:
            return
        types = self.presenter.types
        scopes = {s.path: s for s in self.doc.scopes()}
        for edge in self.graph_scene.edge_items:
            d = edge.data_edge
            scope = scopes.get(d.graph_path)
            if scope is None:
                continue
            vt = types.lookup(scope, d.value)
            text = vt.text if vt else ""
            if text != d.label:
                d.label, d.inferred = text, bool(vt and vt.inferred)
                edge.setToolTip(f"{d.value}: {text}" if text else d.value)
                edge.update()

    def update_title(self) -> None:
        if self.doc is None:
            self.setWindowTitle("onnxviz")
            return
        dirty = " *" if self.doc.is_modified else ""
        self.setWindowTitle(f"{self.doc.display_name}{dirty} — onnxviz")

    def sync_undo_labels(self) -> None:
        a = self.actions_
        doc = self.doc
        a.undo.setText(f"&Undo {doc.undo_label}" if doc and doc.undo_label else "&Undo")
        a.redo.setText(f"&Redo {doc.redo_label}" if doc and doc.redo_label else "&Redo")
        has = doc is not None
        for action in getattr(a, "edit_actions", []):
            action.setEnabled(has)

    # -- diagnostics on the canvas ------------------------------------------------------------
    def show_diagnostic_badges(self, diagnostics: list[Diagnostic]) -> None:
        counts: dict[str, list[str]] = {}
        if self.doc is not None:
            from onnxviz.check.validator import diagnostics_by_node

            for node, found in diagnostics_by_node(self.doc, diagnostics).items():
                counts[node.item_id] = [f"{d.severity.value} {d.code}: {d.message}" for d in found]
        self.badges = counts
        for item_id, node in self.graph_scene.nodes.items():
            node.set_problems(counts.get(item_id, []))

    def locate_diagnostic(self, d: Diagnostic) -> None:
        """Select and reveal the node of a diagnostic, and show its field."""
        if self.doc is None:
            return
        loc = d.location
        path = loc.graph_path or "main"
        try:
            self.doc.scope(path)
        except KeyError:
            return
        node = self.doc.find_node(loc.node, path) if loc.node else None
        if node is not None:
            index = node.index
            self.reveal(path, index)
            self.show_node_properties(path, index)
            field = ""
            if loc.attribute:
                field = f"attribute:{loc.attribute}"
            elif loc.field and loc.field.startswith(("input[", "output[")):
                kind, _, rest = loc.field.partition("[")
                field = f"{kind}:{rest.rstrip(']')}"
            if field:
                self.properties_dock.focus_field(field)
        elif loc.value:
            self.show_value(path, loc.value)
        elif path == "main":
            self.show_model_properties()

    # -- properties ----------------------------------------------------------------------------
    def show_node_properties(self, path: str, index: int) -> None:
        """Show a node's properties; after edits they follow the node by its label
        (indexes shift when nodes are added or removed before it)."""
        assert self.doc is not None and self.presenter is not None
        doc, presenter = self.doc, self.presenter
        where = {"label": doc.scope(path).node_label(index), "index": index}

        def sections() -> list[Any]:
            scope = doc.scope(path)
            found = scope.node_index(str(where["label"]))
            if found is None:  # renamed itself: same place
                found = int(where["index"])
                if found >= len(scope.nodes):
                    return []
            where.update(label=scope.node_label(found), index=found)
            self.properties_dock.subject = ("node", path, found)
            return node_sections(doc, path, found, presenter.types)

        self.properties_dock.show_sections(
            node_sections(doc, path, index, presenter.types), sections, ("node", path, index)
        )

    def show_model_properties(self) -> None:
        if self.doc is None:
            return
        doc = self.doc
        self.properties_dock.show_sections(
            model_sections(doc), lambda: model_sections(doc), ("model",)
        )

    def show_graph_properties(self, path: str) -> None:
        assert self.doc is not None
        doc = self.doc
        self.properties_dock.show_sections(
            graph_sections(doc, path), lambda: graph_sections(doc, path), ("graph", path)
        )

    def make_row_editor(self, row: Row) -> Any:
        from onnxviz.ui.edit.editors import make_editor

        return make_editor(
            self.edits,
            row,
            self.presenter.types if self.presenter else None,
            self.open_graph,
        )

    def fill_row_menu(self, row: Row | None, menu: QMenu) -> None:
        from onnxviz.ui.edit.menus import properties_menu

        properties_menu(self, row, self.properties_dock.subject, menu)

    # -- surgery ---------------------------------------------------------------------------------
    def selected_node_ref(self) -> tuple[str, int] | None:
        node = self.view.selected_node()
        if node is None or node.data_item.node_index is None:
            return None
        return node.data_item.graph_path, node.data_item.node_index

    def delete_node(self, path: str, index: int, mode: str = "bypass") -> bool:
        if mode == "bypass":
            return self.edits.execute(lambda doc: surgery.bypass_node(doc, path, index))
        if mode == "ancestors":
            return self.edits.execute(lambda doc: surgery.delete_with_ancestors(doc, path, index))
        return self.edits.execute(C.RemoveNode(path, index))

    def insert_on_edge(
        self, path: str, value: str, op_type: str, consumer: tuple[int, int] | None = None
    ) -> bool:
        domain = self._domain_of(op_type)
        return self.edits.execute(
            lambda doc: surgery.insert_on_edge(
                doc, path, value, op_type, consumer=consumer, domain=domain
            )
        )

    def _domain_of(self, op_type: str) -> str:
        from onnxviz.ui.edit.palette import schema_domain

        return schema_domain(self.doc, op_type) if self.doc is not None else ""

    def make_output(self, path: str, value: str, on: bool = True) -> bool:
        if on:
            return self.edits.execute(lambda doc: surgery.make_graph_output(doc, path, value))
        return self.edits.execute(lambda doc: surgery.remove_graph_output(doc, path, value))

    def add_node_dialog(self, path: str | None = None) -> None:
        from onnxviz.ui.edit.palette import OperatorPalette

        if self.doc is None:
            return
        path = path or (self.presenter.root_path if self.presenter else "main")
        palette = OperatorPalette(self.doc, self)
        palette.chosen.connect(lambda op, domain: self.add_node(path, op, domain))
        palette.open()
        self.palette = palette

    def add_node(self, path: str, op_type: str, domain: str = "", inputs: Any = None) -> bool:
        from onnxviz.ui.edit.palette import new_node

        if self.doc is None:
            return False
        node = new_node(self.doc, path, op_type, domain, list(inputs or []))
        ok = self.edits.execute(C.AddNode(path, node))
        if ok:
            self.statusBar().showMessage(
                f"added {op_type} '{node.name}': wire its inputs in the properties panel", 8000
            )
        return ok

    def clean_up(self) -> bool:
        return self.edits.execute(surgery.clean_up)

    def extract_dialog(self) -> None:
        if self.doc is None:
            return
        scope = self.doc.main_scope
        dialog = QDialog(self)
        dialog.setWindowTitle("Extract subgraph")
        form = QFormLayout(dialog)
        ins = QLineEdit(", ".join(scope.input_names()))
        outs = QLineEdit(", ".join(scope.output_names()))
        form.addRow(QLabel("Values separated by commas (main graph)."))
        form.addRow("Inputs", ins)
        form.addRow("Outputs", outs)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(dialog.accept)
        buttons.rejected.connect(dialog.reject)
        form.addRow(buttons)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Save extracted model", "", "ONNX (*.onnx)")
        if path:
            self.extract_to(_names(ins.text()), _names(outs.text()), path)

    def extract_to(self, inputs: list[str], outputs: list[str], path: str) -> bool:
        from onnxviz.errors import OnnxvizError
        from onnxviz.model import io

        assert self.doc is not None
        try:
            model = surgery.extract(self.doc, inputs, outputs)
            io.save(model, path, source_dir=self.doc.base_dir, external_data="embed")
        except OnnxvizError as exc:
            self.edits.refuse(str(exc))
            return False
        self.statusBar().showMessage(f"extracted {len(model.graph.node)} nodes to {path}", 8000)
        return True

    # -- initializers --------------------------------------------------------------------------
    def export_initializer(self, path: str, name: str, target: str | None = None) -> bool:
        assert self.doc is not None
        tensor = _initializer(self.doc, path, name)
        if tensor is None:
            return False
        if target is None:
            target, _ = QFileDialog.getSaveFileName(self, "Export tensor", f"{name}.npy", "*.npy")
            if not target:
                return False
        np.save(target, np.asarray(self.doc.tensor_array(tensor)))
        return True

    def replace_initializer(self, path: str, name: str, source: str | None = None) -> bool:
        from onnxviz.model.tensors import from_array

        if source is None:
            source, _ = QFileDialog.getOpenFileName(self, "Replace from .npy", "", "*.npy")
            if not source:
                return False
        try:
            arr = np.load(source, allow_pickle=False)
        except (OSError, ValueError) as exc:
            self.edits.refuse(f"cannot read {source}: {exc}")
            return False
        return self.edits.execute(C.ReplaceInitializer(path, from_array(arr, name)))

    def input_to_initializer(self, path: str, name: str, source: str | None = None) -> bool:
        from onnxviz.model.tensors import from_array

        if source is None:
            source, _ = QFileDialog.getOpenFileName(self, "Initializer data", "", "*.npy")
            if not source:
                return False
        try:
            arr = np.load(source, allow_pickle=False)
        except (OSError, ValueError) as exc:
            self.edits.refuse(f"cannot read {source}: {exc}")
            return False
        tensor = from_array(arr, name)
        return self.edits.execute(lambda d: surgery.input_to_initializer(d, path, tensor))

    # -- saving, closing, recovery --------------------------------------------------------------
    def maybe_save(self) -> bool:
        """Before closing unsaved work: save, discard or cancel.  True: go on."""
        if self.doc is None or not self.doc.is_modified:
            return True
        if OFFSCREEN and not getattr(self, "prompt_in_tests", False):
            return True
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("Unsaved changes")
        box.setText(f"Save the changes to {self.doc.display_name}?")
        box.setStandardButtons(
            QMessageBox.StandardButton.Save
            | QMessageBox.StandardButton.Discard
            | QMessageBox.StandardButton.Cancel
        )
        answer = box.exec()
        if answer == QMessageBox.StandardButton.Cancel:
            return False
        if answer == QMessageBox.StandardButton.Save:
            self.save()
            return not self.doc.is_modified
        return True

    def ask_external_mode(self) -> str | None:
        dialog = QDialog(self)
        dialog.setWindowTitle("Tensor data")
        form = QFormLayout(dialog)
        combo = QComboBox()
        for value, label in EXTERNAL_CHOICES:
            combo.addItem(label, value)
        form.addRow("Weights", combo)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(dialog.accept)
        buttons.rejected.connect(dialog.reject)
        form.addRow(buttons)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return None
        return str(combo.currentData())

    def offer_recovery(self) -> None:
        """At start: snapshots left by a crashed session can be restored."""
        from onnxviz.model.recovery import pending

        entries = pending()
        if not entries or OFFSCREEN:
            return
        entry = entries[0]
        source = entry.source or "an unsaved model"
        answer = QMessageBox.question(
            self,
            "Recover unsaved edits",
            f"onnxviz did not close cleanly. Restore the unsaved edits to {source}"
            + (f" (last edit: {entry.last_edit})" if entry.last_edit else "")
            + "?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.restore_recovery(entry)
        else:
            entry.discard()

    def restore_recovery(self, entry: Any) -> None:
        from onnxviz.ui.workers import Opened, build_opened

        doc = entry.restore()
        opened: Opened = build_opened(doc, self.options)
        self._adopt(opened, doc.path or "", example=False)
        entry.discard()
        self.edits.autosave_now()
        self.update_title()


def _renames(changes: ChangeSet) -> bool:
    """A value rename touches names and the nodes that use them (a type edit touches
    names only, an attribute edit nodes only)."""
    return bool(changes.names) and bool(changes.nodes)


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _initializer(doc: Any, path: str, name: str) -> Any:
    scope = doc.scope(path)
    if scope.graph is None:
        return None
    return next((t for t in scope.graph.initializer if t.name == name), None)


def ask_text(parent: Any, title: str, label: str, text: str = "") -> str | None:
    value, ok = QInputDialog.getText(parent, title, label, QLineEdit.EchoMode.Normal, text)
    return value if ok else None


__all__ = ["EditingMixin", "NodeItem", "ask_text"]
