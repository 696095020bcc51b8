"""Edit menus: the canvas context menu's editing part, the properties rows' menu, and
the Edit menu actions (add node, delete, clean up, extract)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from onnx import AttributeProto
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu

from onnxviz.model import commands as C
from onnxviz.model.attribute_values import attribute_specs, schema_for
from onnxviz.model.types import text_to_type
from onnxviz.present.properties import Row
from onnxviz.ui.canvas.items import EdgeItem, NodeItem

if TYPE_CHECKING:
    from onnxviz.ui.main_window import MainWindow


def build_edit_actions(w: MainWindow, edit_menu: QMenu) -> list[QAction]:
    def add(text: str, slot: Any, shortcut: str | None = None) -> QAction:
        action = QAction(text, w)
        if shortcut:
            action.setShortcut(shortcut)
        action.triggered.connect(lambda _c=False: slot())
        edit_menu.addAction(action)
        return action

    def delete(mode: str) -> None:
        ref = w.selected_node_ref()
        if ref is not None:
            w.delete_node(ref[0], ref[1], mode)

    edit_menu.addSeparator()
    actions = [
        add("&Add Node…", w.add_node_dialog, "Ctrl+Shift+A"),
        add("&Delete Node (Bypass)", lambda: delete("bypass"), "Del"),
        add("Delete Node with Dead &Ancestors", lambda: delete("ancestors"), "Shift+Del"),
        add("Clean &Up Unused Nodes and Initializers", w.clean_up),
        add("E&xtract Subgraph…", w.extract_dialog),
        add("Model &Properties", w.show_model_properties),
    ]
    return actions


def canvas_menu(w: MainWindow, item: Any, menu: QMenu) -> None:
    """Editing entries for the item under the pointer (a node or an edge)."""
    doc = w.doc
    if doc is None:
        return
    if isinstance(item, NodeItem):
        d = item.data_item
        if d.kind == "op" and d.node_index is not None:
            path, index = d.graph_path, d.node_index
            try:
                node = doc.scope(path).nodes[index]
            except (KeyError, IndexError):
                return
            menu.addSeparator()
            menu.addAction("Delete (reconnect consumers)", lambda: w.delete_node(path, index))
            menu.addAction(
                "Delete with dead ancestors", lambda: w.delete_node(path, index, "ancestors")
            )
            menu.addAction("Delete only this node", lambda: w.delete_node(path, index, "plain"))
            outs = menu.addMenu("Make output a graph output")
            scope = doc.scope(path)
            for name in node.output:
                if name:
                    is_out = name in scope.output_uses
                    outs.addAction(
                        ("Stop exposing " if is_out else "Expose ") + name,
                        partial(w.make_output, path, name, not is_out),
                    )
        elif d.kind == "output" and d.value:
            menu.addSeparator()
            menu.addAction(
                f"Remove graph output '{d.value}'",
                lambda: w.make_output(d.graph_path, d.value or "", False),
            )
        menu.addAction("Add node…", lambda: w.add_node_dialog(d.graph_path))
    elif isinstance(item, EdgeItem):
        e = item.data_edge
        menu.addSeparator()
        insert = menu.addMenu(f"Insert on '{e.value}'")
        for op in ("Relu", "Identity", "Sigmoid", "Cast", "Transpose"):
            insert.addAction(op, lambda o=op: w.insert_on_edge(e.graph_path, e.value, o))
        insert.addAction("Other…", lambda: _insert_other(w, e.graph_path, e.value))
        menu.addAction("Make it a graph output", lambda: w.make_output(e.graph_path, e.value))
    else:
        path = w.presenter.root_path if w.presenter else "main"
        menu.addAction("Add node…", lambda: w.add_node_dialog())
        menu.addAction("Graph properties", lambda: w.show_graph_properties(path))
        menu.addAction("Model properties", w.show_model_properties)
        menu.addAction("Clean up unused nodes and initializers", w.clean_up)


def _insert_other(w: MainWindow, path: str, value: str) -> None:
    from onnxviz.ui.edit.palette import OperatorPalette

    assert w.doc is not None
    palette = OperatorPalette(w.doc, w)
    palette.chosen.connect(lambda op, _domain: w.insert_on_edge(path, value, op))
    w.surgery.palette = palette  # kept alive while it is open
    w.prompter.ask(palette)


def properties_menu(
    w: MainWindow, row: Row | None, subject: tuple[Any, ...] | None, menu: QMenu
) -> None:
    doc = w.doc
    if doc is None or subject is None:
        return
    edits = w.edits
    kind = subject[0]
    if kind == "node":
        _, path, index = subject
        node = doc.scope(path).nodes[index]
        if row is not None and row.edit is not None and row.edit[0] == "attr":
            name = row.edit[3]
            if any(a.name == name for a in node.attribute):
                menu.addAction(
                    f"Remove attribute '{name}'",
                    lambda: edits.execute(C.RemoveAttribute(path, index, name)),
                )
        opsets = {o.domain or "": o.version for o in doc.model.opset_import}
        specs = attribute_specs(schema_for(node, opsets), node.op_type)
        given = {a.name for a in node.attribute}
        missing = [s for n, s in sorted(specs.items()) if n not in given]
        if missing:
            sub = menu.addMenu("Add attribute")
            for spec in missing:
                sub.addAction(
                    spec.name + (" (required)" if spec.required else ""),
                    partial(_add_attribute, w, path, index, spec),
                )
        menu.addAction(
            "Add metadata…",
            lambda: _add_metadata(w, (path, index)),
        )
        if row is not None and row.edit is not None and row.edit[0] == "rename":
            value = row.edit[2]
            menu.addAction(f"Make '{value}' a graph output", lambda: w.make_output(path, value))
    elif kind == "value":
        _, path, name = subject
        scope = doc.scope(path)
        owner = scope.lookup(name) or scope
        if owner.graph is not None:
            if name in owner.output_uses:
                menu.addAction(
                    "Stop being a graph output", lambda: w.make_output(owner.path, name, False)
                )
            else:
                menu.addAction("Make it a graph output", lambda: w.make_output(owner.path, name))
            if name in owner.initializer_names():
                from onnxviz.model import surgery

                menu.addAction("Export to .npy…", lambda: w.export_initializer(owner.path, name))
                menu.addAction(
                    "Replace from .npy…", lambda: w.replace_initializer(owner.path, name)
                )
                menu.addAction(
                    "Turn into a graph input",
                    lambda: edits.execute(
                        lambda d: surgery.initializer_to_input(d, owner.path, name)
                    ),
                )
            elif name in owner.input_names():
                menu.addAction(
                    "Turn into an initializer from .npy…",
                    lambda: w.input_to_initializer(owner.path, name),
                )
    elif kind == "graph":
        path = subject[1]
        scope = doc.scope(path)
        if scope.graph is not None:
            menu.addAction("Add input…", lambda: _add_io(w, path, "input"))
            menu.addAction("Add output…", lambda: _add_io(w, path, "output"))
            if row is not None and row.edit is not None and row.edit[0] == "type":
                name = row.edit[2]
                io_kind = "input" if row.key.startswith("input") else "output"
                names = scope.input_names() if io_kind == "input" else scope.output_names()
                pos = names.index(name) if name in names else -1
                menu.addAction(
                    f"Remove {io_kind} '{name}'",
                    lambda: edits.execute(C.RemoveGraphEntry(path, io_kind, name)),  # type: ignore[arg-type]
                )
                if pos > 0:
                    menu.addAction(
                        "Move up",
                        lambda: edits.execute(C.MoveGraphEntry(path, io_kind, name, pos - 1)),  # type: ignore[arg-type]
                    )
                if 0 <= pos < len(names) - 1:
                    menu.addAction(
                        "Move down",
                        lambda: edits.execute(C.MoveGraphEntry(path, io_kind, name, pos + 1)),  # type: ignore[arg-type]
                    )
            menu.addAction("Add metadata…", lambda: _add_metadata(w, path))
    elif kind == "model":
        menu.addAction("Add metadata…", lambda: _add_metadata(w, "model"))
        if row is not None and row.edit is not None and row.edit[0] == "metadata":
            key = row.edit[2]
            menu.addAction(
                f"Remove metadata '{key}'",
                lambda: edits.execute(C.SetMetadataProp(row.edit[1], key, None)),  # type: ignore[index]
            )
        menu.addAction(
            "Import an opset…",
            lambda: _import_opset(
                w, w.prompter.text("Import opset", "domain version, e.g. ai.onnx.ml 3")
            ),
        )


def _add_attribute(w: MainWindow, path: str, index: int, spec: Any) -> None:
    from onnx import helper

    if spec.default is not None:
        attr = AttributeProto()
        attr.CopyFrom(spec.default)
        attr.name = spec.name
    else:
        empty = {
            AttributeProto.INT: 0,
            AttributeProto.FLOAT: 0.0,
            AttributeProto.STRING: "",
            AttributeProto.INTS: [],
            AttributeProto.FLOATS: [],
            AttributeProto.STRINGS: [],
        }
        if spec.type not in empty:
            w.edits.refuse(f"'{spec.name}' has no default; set it from a tensor or graph editor")
            return
        kind = spec.type if isinstance(empty[spec.type], list) else None
        attr = helper.make_attribute(spec.name, empty[spec.type], attr_type=kind)
    w.edits.execute(C.SetAttribute(path, index, attr))


def _add_metadata(w: MainWindow, target: Any) -> None:
    text = w.prompter.text("Add metadata", "key=value")
    if text and "=" in text:
        key, value = text.split("=", 1)
        w.edits.execute(C.SetMetadataProp(target, key.strip(), value.strip()))


def _add_io(w: MainWindow, path: str, kind: str) -> None:
    from onnx import ValueInfoProto

    text = w.prompter.text(f"Add graph {kind}", "name: type, e.g. x: float32[batch,3,224,224]")
    if not text:
        return
    name, _, type_text = text.partition(":")
    vi = ValueInfoProto(name=name.strip())
    if type_text.strip():
        try:
            vi.type.CopyFrom(text_to_type(type_text.strip()))
        except ValueError as exc:
            w.edits.refuse(str(exc))
            return
    w.edits.execute(C.AddGraphEntry(path, kind, vi))  # type: ignore[arg-type]


def _import_opset(w: MainWindow, text: str | None) -> None:
    if not text:
        return
    parts = text.split()
    try:
        domain = "" if parts[0] in ("ai.onnx", '""') else parts[0]
        version = int(parts[1])
    except (IndexError, ValueError):
        w.edits.refuse("type a domain and a version, e.g. ai.onnx.ml 3")
        return
    w.edits.execute(C.SetOpsetImport(domain, version))


def add_compare_actions(w: MainWindow) -> list[QAction]:
    """File > Compare With... and File > Compare With File on Disk (issue #20), placed
    after Export; both open `onnxviz.ui.diff`'s Compare window for the open document."""
    from onnxviz.ui.diff import open_compare_window

    file_menu = next(
        (
            menu
            for a in w.menuBar().actions()
            if a.text().replace("&", "") == "File" and isinstance(menu := a.menu(), QMenu)
        ),
        None,
    )
    if file_menu is None:
        return []

    def compare(with_disk: bool) -> None:
        if w.doc is not None:
            window = open_compare_window(w, w.doc, with_disk=with_disk)
            if window is not None:
                w.compare_window = window

    with_file = QAction("Compare &With…", w)
    with_file.triggered.connect(lambda _c=False: compare(False))
    with_disk = QAction("Compare With File on &Disk", w)
    with_disk.triggered.connect(lambda _c=False: compare(True))
    export = getattr(w.actions_, "export", None)
    actions = file_menu.actions()
    at = actions.index(export) + 1 if export in actions else len(actions)
    before = actions[at] if at < len(actions) else None
    for action in (with_file, with_disk):
        if before is not None:
            file_menu.insertAction(before, action)
        else:
            file_menu.addAction(action)
    return [with_file, with_disk]
