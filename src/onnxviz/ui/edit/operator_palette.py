"""The operator palette: a searchable list of the operator schemas the model's opset
imports make available, with their documentation; choosing one adds a node."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import onnx.defs
from onnx import NodeProto, helper
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from onnxviz.model.document import Document


def _opsets(doc: Document) -> dict[str, int]:
    return {
        ("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in doc.model.opset_import
    }


@lru_cache(maxsize=1)
def _all_schemas() -> tuple[Any, ...]:
    return tuple(onnx.defs.get_all_schemas_with_history())


def available_schemas(doc: Document) -> list[Any]:
    """For each (domain, op) imported by the model: the newest schema not newer than the
    imported version (the one nodes resolve to); deprecated ones left out."""
    opsets = _opsets(doc)
    best: dict[tuple[str, str], Any] = {}
    for schema in _all_schemas():
        version = opsets.get(schema.domain)
        if version is None or schema.since_version > version:
            continue
        key = (schema.domain, schema.name)
        if key not in best or best[key].since_version < schema.since_version:
            best[key] = schema
    out = [s for s in best.values() if not s.deprecated]
    out.sort(key=lambda s: (s.domain != "", s.domain, s.name.lower()))
    return out


def schema_domain(doc: Document | None, op_type: str) -> str:
    if doc is None:
        return ""
    for s in available_schemas(doc):
        if s.name == op_type:
            return str(s.domain)
    return ""


def _unique(taken: set[str], base: str) -> str:
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def new_node(
    doc: Document, path: str, op_type: str, domain: str = "", inputs: list[str] | None = None
) -> NodeProto:
    """A node of ``op_type`` with fresh unique names; required inputs not given are left
    empty (the validator says so until they are wired)."""
    scope = doc.scope(path)
    schema = None
    opsets = _opsets(doc)
    try:
        schema = onnx.defs.get_schema(op_type, opsets.get(domain, 10_000), domain)
    except Exception:
        schema = None
    taken = set(scope.visible_names())
    for sub in scope.descendants():
        taken.update(sub.definitions)
    labels = {n.name for n in scope.nodes}
    name = _unique(labels, f"{op_type}_new")
    n_out = max(1, sum(1 for o in schema.outputs if o.option != o.option.Optional)) if schema else 1
    outputs = [_unique(taken, f"{name}_out{i}") for i in range(n_out)]
    given = list(inputs or [])
    if schema is not None:
        required = sum(1 for i in schema.inputs if i.option == i.option.Single)
        given += [""] * max(0, required - len(given))
    return helper.make_node(op_type, given, outputs, name=name, domain=domain)


class OperatorPalette(QDialog):
    chosen = Signal(str, str)  # op_type, domain

    def __init__(self, doc: Document, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add operator")
        self.resize(760, 520)
        self.schemas = available_schemas(doc)
        layout = QVBoxLayout(self)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search operators (name, domain or words in the docs)")
        self.search.textChanged.connect(self.filter)
        split = QSplitter(Qt.Orientation.Horizontal)
        self.list = QListWidget()
        self.doc_view = QTextBrowser()
        split.addWidget(self.list)
        split.addWidget(self.doc_view)
        split.setSizes([240, 520])
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Add")
        buttons.accepted.connect(self.accept_current)
        buttons.rejected.connect(self.reject)
        layout.addWidget(self.search)
        layout.addWidget(split, 1)
        layout.addWidget(buttons)
        self.list.currentItemChanged.connect(self._show_doc)
        self.list.itemActivated.connect(lambda _i: self.accept_current())
        self.filter("")

    def filter(self, text: str) -> None:
        words = text.lower().split()
        self.list.clear()
        for s in self.schemas:
            hay = f"{s.name} {s.domain}".lower()
            if words and not all(w in hay for w in words):
                doc = (s.doc or "").lower()
                if not all(w in hay or w in doc for w in words):
                    continue
            label = s.name if not s.domain else f"{s.name}  ({s.domain})"
            item = QListWidgetItem(label)
            item.setData(Qt.ItemDataRole.UserRole, s)
            self.list.addItem(item)
        # exact-name matches first
        if words:
            for i in range(self.list.count()):
                s = self.list.item(i).data(Qt.ItemDataRole.UserRole)
                if s.name.lower() == text.strip().lower():
                    self.list.setCurrentRow(i)
                    return
        if self.list.count():
            self.list.setCurrentRow(0)

    def _show_doc(self, item: QListWidgetItem | None, _prev: Any = None) -> None:
        if item is None:
            self.doc_view.clear()
            return
        s = item.data(Qt.ItemDataRole.UserRole)
        ins = "".join(f"<li><b>{i.name}</b> : {i.type_str}</li>" for i in s.inputs)
        outs = "".join(f"<li><b>{o.name}</b> : {o.type_str}</li>" for o in s.outputs)
        attrs = "".join(
            f"<li><b>{a.name}</b>{' (required)' if a.required else ''}</li>"
            for a in s.attributes.values()
        )
        domain = s.domain or "ai.onnx"
        self.doc_view.setMarkdown(
            f"## {s.name}\n\n*{domain}, since version {s.since_version}*\n\n{s.doc or ''}"
        )
        self.doc_view.append(
            f"<h4>Inputs</h4><ul>{ins}</ul><h4>Outputs</h4><ul>{outs}</ul>"
            + (f"<h4>Attributes</h4><ul>{attrs}</ul>" if attrs else "")
        )

    def current(self) -> tuple[str, str] | None:
        item = self.list.currentItem()
        if item is None:
            return None
        s = item.data(Qt.ItemDataRole.UserRole)
        return str(s.name), str(s.domain)

    def accept_current(self) -> None:
        chosen = self.current()
        if chosen is not None:
            self.chosen.emit(*chosen)
            self.accept()
