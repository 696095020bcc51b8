"""Graph surgery asked for from the canvas, menus and the Properties dock: delete,
insert on an edge, graph outputs, add a node, clean up, extract, initializers from and
to .npy files.  Each one is a single edit through the `EditController`."""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from onnxviz.errors import OnnxvizError
from onnxviz.model import commands, surgery
from onnxviz.model.document import Document
from onnxviz.ui.canvas.view import GraphView
from onnxviz.ui.doc_session import DocumentSession
from onnxviz.ui.edit.controller import EditController
from onnxviz.ui.prompter import Prompter


class SurgeryController(QObject):
    def __init__(
        self,
        session: DocumentSession,
        edits: EditController,
        view: GraphView,
        prompter: Prompter,
        parent: QWidget,
    ) -> None:
        super().__init__(session)
        self.session = session
        self.edits = edits
        self.view = view
        self.prompter = prompter
        self.parent_widget = parent
        self.palette: Any = None  # the open operator palette

    @property
    def doc(self) -> Document | None:
        return self.session.doc

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
        return self.edits.execute(commands.RemoveNode(path, index))

    def insert_on_edge(
        self, path: str, value: str, op_type: str, consumer: tuple[int, int] | None = None
    ) -> bool:
        from onnxviz.ui.edit.operator_palette import schema_domain

        domain = schema_domain(self.doc, op_type) if self.doc is not None else ""
        return self.edits.execute(
            lambda doc: surgery.insert_on_edge(
                doc, path, value, op_type, consumer=consumer, domain=domain
            )
        )

    def make_output(self, path: str, value: str, on: bool = True) -> bool:
        if on:
            return self.edits.execute(lambda doc: surgery.make_graph_output(doc, path, value))
        return self.edits.execute(lambda doc: surgery.remove_graph_output(doc, path, value))

    def add_node_dialog(self, path: str | None = None) -> None:
        from onnxviz.ui.edit.operator_palette import OperatorPalette

        if self.doc is None:
            return
        presenter = self.session.presenter
        where = path or (presenter.root_path if presenter else "main")
        palette = OperatorPalette(self.doc, self.parent_widget)
        palette.chosen.connect(lambda op, domain: self.add_node(where, op, domain))
        self.palette = palette
        self.prompter.ask(palette)

    def add_node(self, path: str, op_type: str, domain: str = "", inputs: Any = None) -> bool:
        from onnxviz.ui.edit.operator_palette import new_node

        if self.doc is None:
            return False
        node = new_node(self.doc, path, op_type, domain, list(inputs or []))
        ok = self.edits.execute(commands.AddNode(path, node))
        if ok:
            self.session.status(
                f"added {op_type} '{node.name}': wire its inputs in the properties panel", 8000
            )
        return ok

    def clean_up(self) -> bool:
        return self.edits.execute(surgery.clean_up)

    def extract_dialog(self) -> None:
        if self.doc is None:
            return
        scope = self.doc.main_scope
        answers = self.prompter.form(
            "Extract subgraph",
            "Values separated by commas (main graph).",
            [
                ("Inputs", ", ".join(scope.input_names())),
                ("Outputs", ", ".join(scope.output_names())),
            ],
        )
        if answers is None:
            return
        inputs, outputs = answers
        chosen = self.prompter.save_file("Save extracted model", "", "ONNX (*.onnx)")
        if chosen is not None:
            path, _filter = chosen
            self.extract_to(names(inputs), names(outputs), path)

    def extract_to(self, inputs: list[str], outputs: list[str], path: str) -> bool:
        from onnxviz.model import io

        assert self.doc is not None
        try:
            model = surgery.extract(self.doc, inputs, outputs)
            io.save(model, path, source_dir=self.doc.base_dir, external_data="embed")
        except OnnxvizError as exc:
            self.edits.refuse(str(exc))
            return False
        self.session.status(f"extracted {len(model.graph.node)} nodes to {path}", 8000)
        return True

    # -- initializers --------------------------------------------------------------------------
    def export_initializer(self, path: str, name: str, target: str | None = None) -> bool:
        assert self.doc is not None
        tensor = initializer(self.doc, path, name)
        if tensor is None:
            return False
        if target is None:
            chosen = self.prompter.save_file("Export tensor", f"{name}.npy", "*.npy")
            if chosen is None:
                return False
            target = chosen[0]
        np.save(target, np.asarray(self.doc.tensor_array(tensor)))
        return True

    def _load_npy(self, title: str, source: str | None) -> np.ndarray | None:
        if source is None:
            source = self.prompter.open_file(title, "", "*.npy")
            if source is None:
                return None
        try:
            return np.load(source, allow_pickle=False)
        except (OSError, ValueError) as exc:
            self.edits.refuse(f"cannot read {source}: {exc}")
            return None

    def replace_initializer(self, path: str, name: str, source: str | None = None) -> bool:
        from onnxviz.model.tensors import from_array

        arr = self._load_npy("Replace from .npy", source)
        if arr is None:
            return False
        return self.edits.execute(commands.ReplaceInitializer(path, from_array(arr, name)))

    def input_to_initializer(self, path: str, name: str, source: str | None = None) -> bool:
        from onnxviz.model.tensors import from_array

        arr = self._load_npy("Initializer data", source)
        if arr is None:
            return False
        tensor = from_array(arr, name)
        return self.edits.execute(lambda d: surgery.input_to_initializer(d, path, tensor))


def names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def initializer(doc: Document, path: str, name: str) -> Any:
    scope = doc.scope(path)
    if scope.graph is None:
        return None
    return next((t for t in scope.graph.initializer if t.name == name), None)
