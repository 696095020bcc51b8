"""Editors for the properties dock: one per editable row, chosen from the row's edit
target (see `present.properties.EDIT_KINDS`) and, for attributes, the schema type.

Typed text is checked on every keystroke: an invalid value turns the editor red with
the reason (tooltip and the dock's message line) and is never applied.  A valid value
is applied when editing finishes, as one command through the edit controller."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from onnx import AttributeProto
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QWidget,
)

from onnxviz.errors import EditError
from onnxviz.model import commands
from onnxviz.model.attribute_values import (
    AttributeTextError,
    attribute_specs,
    attribute_text,
    parse_attribute,
    parse_untyped,
    schema_for,
)
from onnxviz.model.scope_names import readable_graph_path
from onnxviz.model.types import text_to_type, type_to_text
from onnxviz.present.properties import Row
from onnxviz.present.row_edits import (
    AttrEdit,
    DocEdit,
    InputEdit,
    MetadataEdit,
    ModelFieldEdit,
    NodeFieldEdit,
    OpsetEdit,
    RenameEdit,
    RowEdit,
    TypeEdit,
)
from onnxviz.ui.prompter import Prompter

if TYPE_CHECKING:
    from onnxviz.model.document import Document
    from onnxviz.ui.edit.controller import EditController

A = AttributeProto
INVALID_STYLE = "background: #ffd6d6; color: #7a0000;"

# text -> command; raises ValueError/EditError with the reason when the text is invalid
Parser = Callable[[str], commands.Command]


def _int_text(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{what} must be an integer, not '{text}'") from None


def current_text(doc: Document, edit: RowEdit, row: Row) -> str:
    """What the editor starts with (the full value, not the shortened display)."""
    if isinstance(edit, AttrEdit):
        node = doc.scope(edit.path).nodes[edit.node_index]
        for a in node.attribute:
            if a.name == edit.name:
                return attribute_text(a)
        opsets = {o.domain: o.version for o in doc.model.opset_import}
        spec = attribute_specs(schema_for(node, opsets), node.op_type).get(edit.name)
        return attribute_text(spec.default) if spec is not None and spec.default else ""
    if isinstance(edit, TypeEdit):
        g = doc.scope(edit.path).graph
        if g is not None:
            for vi in (*g.input, *g.output, *g.value_info):
                if vi.name == edit.name and vi.HasField("type"):
                    return type_to_text(vi.type)
        return "" if row.value == "unknown" else row.value
    if isinstance(edit, InputEdit):
        return str(doc.scope(edit.path).nodes[edit.node_index].input[edit.k])
    return row.value


def parser_for(doc: Document, edit: RowEdit) -> Parser:
    if isinstance(edit, ModelFieldEdit):
        field = edit.field
        if field == "doc_string":
            return lambda t: commands.SetDocString("model", t)
        if field in ("ir_version", "model_version"):
            return lambda t: commands.SetModelField(field, _int_text(t, field))
        return lambda t: commands.SetModelField(field, t)
    if isinstance(edit, OpsetEdit):
        domain = edit.domain

        def opset(t: str) -> commands.Command:
            v = _int_text(t, "an opset version")
            if v < 1:
                raise ValueError("an opset version is at least 1")
            return commands.SetOpsetImport(domain, v)

        return opset
    if isinstance(edit, MetadataEdit):
        target, key = edit.target, edit.key
        return lambda t: commands.SetMetadataProp(target, key, t)
    if isinstance(edit, DocEdit):
        doc_target = edit.target
        return lambda t: commands.SetDocString(doc_target, t)
    if isinstance(edit, NodeFieldEdit):
        node_field = edit
        return lambda t: commands.SetNodeField(
            node_field.path, node_field.node_index, node_field.field, t
        )
    if isinstance(edit, AttrEdit):
        _, path, index, name, attr_type, choices = edit

        def attr(t: str) -> commands.Command:
            if attr_type:
                value = parse_attribute(name, t, attr_type, choices)
            else:
                value = parse_untyped(name, t)
            return commands.SetAttribute(path, index, value)

        return attr
    if isinstance(edit, InputEdit):
        _, path, index, k = edit

        def rewire(t: str) -> commands.Command:
            name = t.strip()
            if name and doc.scope(path).lookup(name) is None:
                raise ValueError(
                    f"no value named '{name}' is visible in graph "
                    f"'{readable_graph_path(doc, path)}'"
                )
            return commands.RewireInput(path, index, k, name)

        return rewire
    if isinstance(edit, RenameEdit):
        _, path, old = edit

        def rename(t: str) -> commands.Command:
            cmd = commands.RenameValue(path, old, t.strip())
            cmd.check(doc)  # the command's own reasons, before anything changes
            return cmd

        return rename
    if isinstance(edit, TypeEdit):
        _, path, name = edit

        def settype(t: str) -> commands.Command:
            return commands.SetValueType(path, name, text_to_type(t) if t.strip() else None)

        return settype
    raise ValueError(f"cannot edit {edit.kind}")


class FieldEditor(QLineEdit):
    """A line editor that validates as you type and applies on Enter / focus out."""

    problem = Signal(str)  # "" when the text is valid

    def __init__(self, controller: EditController, row: Row, parser: Parser, text: str) -> None:
        super().__init__(text)
        self.controller, self.row, self.parser = controller, row, parser
        self.original = text
        self.error = ""
        self.error_place: tuple[str | None, str | None] = (None, None)
        self.textEdited.connect(self.check)
        self.editingFinished.connect(self.commit)

    def check(self, text: str | None = None) -> commands.Command | None:
        text = self.text() if text is None else text
        try:
            cmd = self.parser(text)
        except (AttributeTextError, ValueError, EditError) as exc:
            # where the problem is, for the refusal's Location (a rename in a branch
            # is located in that branch, not in main)
            self.mark(str(exc), getattr(exc, "graph_path", None), getattr(exc, "node", None))
            return None
        self.mark("")
        return cmd

    def mark(self, reason: str, graph_path: str | None = None, node: str | None = None) -> None:
        self.error = reason
        self.error_place = (graph_path, node)
        self.setStyleSheet(INVALID_STYLE if reason else "")
        self.setToolTip(reason)
        self.problem.emit(reason)

    def commit(self) -> bool:
        if self.text() == self.original:
            self.mark("")
            return False
        cmd = self.check()
        if cmd is None:
            # typed and confirmed but invalid: say so in the diagnostics dock too
            self.controller.refuse(self.error, *self.error_place)
            return False
        self.original = self.text()
        if not self.controller.execute(cmd):
            refusal = self.controller.refusal
            self.mark(refusal.message if refusal else "refused")
            return False
        return True


class ChoiceEditor(QComboBox):
    """Enum attributes and input rewiring: a list to pick from (editable for names)."""

    problem = Signal(str)

    def __init__(
        self,
        controller: EditController,
        row: Row,
        parser: Parser,
        text: str,
        choices: list[tuple[str, str]],
        editable: bool,
    ) -> None:
        super().__init__()
        self.controller, self.row, self.parser = controller, row, parser
        self.setEditable(editable)
        for value, label in choices:
            self.addItem(label, value)
        index = self.findData(text)
        if index < 0:
            self.addItem(text, text)
            index = self.count() - 1
        self.setCurrentIndex(index)
        self.original = text
        self.error = ""
        self.activated.connect(lambda _i: self.commit())
        line = self.lineEdit() if editable else None
        if line is not None:
            line.editingFinished.connect(self.commit)
            # a choice reads "name  type": show its start (the name), not its end
            # ("t_output_0  bool[]"), and the whole of it in the tooltip
            self.currentIndexChanged.connect(lambda _i: self._show_start())
            self._show_start()

    def _show_start(self) -> None:
        line = self.lineEdit()
        if line is not None:
            line.setCursorPosition(0)
            self.setToolTip(self.currentText())

    def value(self) -> str:
        if self.isEditable():
            text = self.currentText()
            data = self.currentData()
            label = self.itemText(self.currentIndex())
            return str(data) if data is not None and text == label else text.split("  ")[0]
        return str(self.currentData())

    def commit(self) -> bool:
        text = self.value()
        if text == self.original:
            return False
        try:
            cmd = self.parser(text)
        except (AttributeTextError, ValueError, EditError) as exc:
            self.error = str(exc)
            self.setStyleSheet(INVALID_STYLE)
            self.setToolTip(self.error)
            self.problem.emit(self.error)
            self.controller.refuse(
                self.error, getattr(exc, "graph_path", None), getattr(exc, "node", None)
            )
            return False
        self.original = text
        self.error = ""
        self.setStyleSheet("")
        self.problem.emit("")
        ok = self.controller.execute(cmd)
        if not ok and self.controller.refusal is not None:
            self.problem.emit(self.controller.refusal.message)
        return ok


def _visible_names(doc: Document, path: str, types: Any) -> list[tuple[str, str]]:
    scope = doc.scope(path)
    out: list[tuple[str, str]] = [("", "(absent)")]
    for name in sorted(scope.visible_names()):
        vt = types.lookup(scope, name) if types is not None else None
        out.append((name, f"{name}  {vt.text}" if vt else name))
    return out


def make_editor(
    controller: EditController,
    row: Row,
    types: Any = None,
    open_graph: Any = None,
    prompter: Prompter | None = None,
) -> QWidget | None:
    """The editor widget for a row, or None when the row is read-only.  ``prompter``
    asks for files (a tensor attribute's npy… button)."""
    doc = controller.doc
    edit = row.edit
    if doc is None or edit is None:
        return None
    try:
        text = current_text(doc, edit, row)
        parser = parser_for(doc, edit)
    except (KeyError, IndexError, ValueError):
        return None
    if isinstance(edit, AttrEdit):
        attr_type, choices = edit.attr_type, edit.choices
        if row.note == "default" and attr_type == A.TENSOR:
            return None  # a default tensor: add the attribute from the row menu
        if attr_type in (A.GRAPH, A.GRAPHS):
            return _graph_button(doc, edit, open_graph)
        if choices:
            return ChoiceEditor(
                controller, row, parser, text, [(c, c) for c in choices], editable=False
            )
        if attr_type == A.TENSOR:
            return _tensor_editor(controller, row, parser, text, edit, prompter or Prompter())
    if isinstance(edit, InputEdit):
        return ChoiceEditor(
            controller, row, parser, text, _visible_names(doc, edit.path, types), editable=True
        )
    return FieldEditor(controller, row, parser, text)


def row_editor_factory(
    controller: EditController, session: Any, open_graph: Any, prompter: Prompter
) -> Callable[[Row], QWidget | None]:
    """The Properties dock's editor factory: `make_editor` with the open document's
    type table (``session.presenter``'s, as it is when a row is shown)."""

    def editor(row: Row) -> QWidget | None:
        presenter = session.presenter
        types = presenter.types if presenter is not None else None
        return make_editor(controller, row, types, open_graph, prompter)

    return editor


def _graph_button(doc: Document, edit: AttrEdit, open_graph: Any) -> QWidget:
    index, name = edit.node_index, edit.name
    scope = doc.scope(edit.path)
    child = next(
        (c for c in scope.children if c.owner_node_index == index and c.owner_attribute == name),
        None,
    )
    target = child.path if child is not None else None
    count = len(child.nodes) if child is not None else 0
    button = QPushButton(f"Open ({count} node{'s' if count != 1 else ''})")
    button.setToolTip(f"Show the subgraph '{name}' in its own view")
    button.setEnabled(target is not None and open_graph is not None)
    if target is not None and open_graph is not None:
        button.clicked.connect(lambda: open_graph(target))
    return button


def _tensor_editor(
    controller: EditController,
    row: Row,
    parser: Parser,
    text: str,
    edit: AttrEdit,
    prompter: Prompter,
) -> QWidget:
    box = QWidget()
    layout = QHBoxLayout(box)
    layout.setContentsMargins(0, 0, 0, 0)
    line = FieldEditor(controller, row, parser, text)
    line.setPlaceholderText("e.g. float32 [1.0, 2.0]")
    load = QPushButton("npy…")
    load.setToolTip("Load the tensor from a .npy file")

    def from_file() -> None:
        path = prompter.open_file("Tensor from .npy", "", "NumPy (*.npy)")
        if path:
            load_attribute_tensor(controller, edit, path)

    load.clicked.connect(from_file)
    layout.addWidget(line, 1)
    layout.addWidget(load)
    box.problem = line.problem  # type: ignore[attr-defined]
    return box


def load_attribute_tensor(controller: EditController, edit: AttrEdit, path: str) -> bool:
    import numpy as np

    from onnxviz.model.tensors import from_array

    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        controller.refuse(f"cannot read {path}: {exc}")
        return False
    from onnx import helper

    attr = helper.make_attribute(edit.name, from_array(arr, edit.name))
    return controller.execute(commands.SetAttribute(edit.path, edit.node_index, attr))
