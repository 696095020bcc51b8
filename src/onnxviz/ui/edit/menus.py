"""Edit menus: the canvas context menu's editing part, the properties rows' menu, and
the Edit menu actions (add node, delete, clean up, extract)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from onnx import AttributeProto
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu

from onnxviz.model import commands
from onnxviz.model.attribute_values import attribute_specs, schema_for
from onnxviz.model.types import text_to_type
from onnxviz.present.properties import Row
from onnxviz.present.row_edits import AttrEdit, MetadataEdit, RenameEdit, TypeEdit
from onnxviz.ui.canvas.items import EdgeItem, NodeItem

if TYPE_CHECKING:
    from onnxviz.ui.main_window import MainWindow


def build_edit_actions(window: MainWindow, edit_menu: QMenu) -> list[QAction]:
    def add(text: str, slot: Any, shortcut: str | None = None) -> QAction:
        action = QAction(text, window)
        if shortcut:
            action.setShortcut(shortcut)
        action.triggered.connect(lambda _c=False: slot())
        edit_menu.addAction(action)
        return action

    def delete(mode: str) -> None:
        ref = window.surgery.selected_node_ref()
        if ref is not None:
            graph_path, node_index = ref
            window.surgery.delete_node(graph_path, node_index, mode)

    edit_menu.addSeparator()
    actions = [
        add("&Add Node…", window.surgery.add_node_dialog, "Ctrl+Shift+A"),
        add("&Delete Node (Bypass)", lambda: delete("bypass"), "Del"),
        add("Delete Node with Dead &Ancestors", lambda: delete("ancestors"), "Shift+Del"),
        add("Clean &Up Unused Nodes and Initializers", window.surgery.clean_up),
        add("E&xtract Subgraph…", window.surgery.extract_dialog),
        add("Model &Properties", window.properties.show_model_properties),
    ]
    return actions


def canvas_context_menu(window: MainWindow, pos: Any) -> None:
    """The canvas's right-click menu at ``pos`` (viewport coordinates): navigation
    (expand, open body), then the edits of the item there, then Fit and Back."""
    if window.session.doc is None:
        return
    item = window.view.itemAt(pos)
    menu = QMenu(window)
    window.navigation.fill_context_menu(item, menu)
    canvas_menu(window, item, menu)
    menu.addSeparator()
    menu.addAction(window.actions_.fit)
    if window.navigation.crumbs:
        menu.addAction(window.actions_.back)
    menu.popup(window.view.viewport().mapToGlobal(pos))


def canvas_menu(window: MainWindow, item: Any, menu: QMenu) -> None:
    """Editing entries for the item under the pointer (a node or an edge)."""
    doc = window.session.doc
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
            menu.addAction(
                "Delete (reconnect consumers)", lambda: window.surgery.delete_node(path, index)
            )
            menu.addAction(
                "Delete with dead ancestors",
                lambda: window.surgery.delete_node(path, index, "ancestors"),
            )
            menu.addAction(
                "Delete only this node", lambda: window.surgery.delete_node(path, index, "plain")
            )
            outs = menu.addMenu("Make output a graph output")
            scope = doc.scope(path)
            for name in node.output:
                if name:
                    is_out = name in scope.output_uses
                    outs.addAction(
                        ("Stop exposing " if is_out else "Expose ") + name,
                        partial(window.surgery.make_output, path, name, not is_out),
                    )
        elif d.kind == "output" and d.value:
            menu.addSeparator()
            menu.addAction(
                f"Remove graph output '{d.value}'",
                lambda: window.surgery.make_output(d.graph_path, d.value or "", False),
            )
        menu.addAction("Add node…", lambda: window.surgery.add_node_dialog(d.graph_path))
    elif isinstance(item, EdgeItem):
        e = item.data_edge
        menu.addSeparator()
        insert = menu.addMenu(f"Insert on '{e.value}'")
        for op in ("Relu", "Identity", "Sigmoid", "Cast", "Transpose"):
            insert.addAction(
                op, lambda o=op: window.surgery.insert_on_edge(e.graph_path, e.value, o)
            )
        insert.addAction("Other…", lambda: _insert_other(window, e.graph_path, e.value))
        menu.addAction(
            "Make it a graph output", lambda: window.surgery.make_output(e.graph_path, e.value)
        )
    else:
        path = window.session.presenter.root_path if window.session.presenter else "main"
        menu.addAction("Add node…", lambda: window.surgery.add_node_dialog())
        menu.addAction("Graph properties", lambda: window.properties.show_graph_properties(path))
        menu.addAction("Model properties", window.properties.show_model_properties)
        menu.addAction("Clean up unused nodes and initializers", window.surgery.clean_up)


def _insert_other(window: MainWindow, path: str, value: str) -> None:
    from onnxviz.ui.edit.operator_palette import OperatorPalette

    assert window.session.doc is not None
    palette = OperatorPalette(window.session.doc, window)
    palette.chosen.connect(lambda op, _domain: window.surgery.insert_on_edge(path, value, op))
    window.surgery.palette = palette  # kept alive while it is open
    window.prompter.ask(palette)


def properties_menu(
    window: MainWindow, row: Row | None, subject: tuple[Any, ...] | None, menu: QMenu
) -> None:
    doc = window.session.doc
    if doc is None or subject is None:
        return
    edits = window.edits
    kind = subject[0]
    if kind == "node":
        _, path, index = subject
        node = doc.scope(path).nodes[index]
        if row is not None and isinstance(row.edit, AttrEdit):
            name = row.edit.name
            if any(a.name == name for a in node.attribute):
                menu.addAction(
                    f"Remove attribute '{name}'",
                    lambda: edits.execute(commands.RemoveAttribute(path, index, name)),
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
                    partial(_add_attribute, window, path, index, spec),
                )
        menu.addAction(
            "Add metadata…",
            lambda: _add_metadata(window, (path, index)),
        )
        if row is not None and isinstance(row.edit, RenameEdit):
            value = row.edit.name
            menu.addAction(
                f"Make '{value}' a graph output", lambda: window.surgery.make_output(path, value)
            )
    elif kind == "value":
        _, path, name = subject
        scope = doc.scope(path)
        owner = scope.lookup(name) or scope
        if owner.graph is not None:
            if name in owner.output_uses:
                menu.addAction(
                    "Stop being a graph output",
                    lambda: window.surgery.make_output(owner.path, name, False),
                )
            else:
                menu.addAction(
                    "Make it a graph output", lambda: window.surgery.make_output(owner.path, name)
                )
            if name in owner.initializer_names():
                from onnxviz.model import surgery

                menu.addAction(
                    "Export to .npy…", lambda: window.surgery.export_initializer(owner.path, name)
                )
                menu.addAction(
                    "Replace from .npy…",
                    lambda: window.surgery.replace_initializer(owner.path, name),
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
                    lambda: window.surgery.input_to_initializer(owner.path, name),
                )
    elif kind == "graph":
        _, path = subject
        scope = doc.scope(path)
        if scope.graph is not None:
            menu.addAction("Add input…", lambda: _add_io(window, path, "input"))
            menu.addAction("Add output…", lambda: _add_io(window, path, "output"))
            if row is not None and isinstance(row.edit, TypeEdit):
                name = row.edit.name
                io_kind: Literal["input", "output"] = (
                    "input" if row.key.startswith("input") else "output"
                )
                names = scope.input_names() if io_kind == "input" else scope.output_names()
                pos = names.index(name) if name in names else -1
                menu.addAction(
                    f"Remove {io_kind} '{name}'",
                    lambda: edits.execute(commands.RemoveGraphEntry(path, io_kind, name)),
                )
                if pos > 0:
                    menu.addAction(
                        "Move up",
                        lambda: edits.execute(
                            commands.MoveGraphEntry(path, io_kind, name, pos - 1)
                        ),
                    )
                if 0 <= pos < len(names) - 1:
                    menu.addAction(
                        "Move down",
                        lambda: edits.execute(
                            commands.MoveGraphEntry(path, io_kind, name, pos + 1)
                        ),
                    )
            menu.addAction("Add metadata…", lambda: _add_metadata(window, path))
    elif kind == "model":
        menu.addAction("Add metadata…", lambda: _add_metadata(window, "model"))
        if row is not None and isinstance(row.edit, MetadataEdit):
            target, key = row.edit.target, row.edit.key
            menu.addAction(
                f"Remove metadata '{key}'",
                lambda: edits.execute(commands.SetMetadataProp(target, key, None)),
            )
        menu.addAction(
            "Import an opset…",
            lambda: _import_opset(
                window, window.prompter.text("Import opset", "domain version, e.g. ai.onnx.ml 3")
            ),
        )


def _add_attribute(window: MainWindow, path: str, index: int, spec: Any) -> None:
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
            window.edits.refuse(
                f"'{spec.name}' has no default; set it from a tensor or graph editor"
            )
            return
        kind = spec.type if isinstance(empty[spec.type], list) else None
        attr = helper.make_attribute(spec.name, empty[spec.type], attr_type=kind)
    window.edits.execute(commands.SetAttribute(path, index, attr))


def _add_metadata(window: MainWindow, target: Any) -> None:
    text = window.prompter.text("Add metadata", "key=value")
    if text and "=" in text:
        key, value = text.split("=", 1)
        window.edits.execute(commands.SetMetadataProp(target, key.strip(), value.strip()))


def _add_io(window: MainWindow, path: str, kind: str) -> None:
    from onnx import ValueInfoProto

    text = window.prompter.text(f"Add graph {kind}", "name: type, e.g. x: float32[batch,3,224,224]")
    if not text:
        return
    name, _, type_text = text.partition(":")
    vi = ValueInfoProto(name=name.strip())
    if type_text.strip():
        try:
            vi.type.CopyFrom(text_to_type(type_text.strip()))
        except ValueError as exc:
            window.edits.refuse(str(exc))
            return
    window.edits.execute(commands.AddGraphEntry(path, kind, vi))  # type: ignore[arg-type]


def _import_opset(window: MainWindow, text: str | None) -> None:
    if not text:
        return
    parts = text.split()
    try:
        domain = "" if parts[0] in ("ai.onnx", '""') else parts[0]
        version = int(parts[1])
    except (IndexError, ValueError):
        window.edits.refuse("type a domain and a version, e.g. ai.onnx.ml 3")
        return
    window.edits.execute(commands.SetOpsetImport(domain, version))


def add_compare_actions(window: MainWindow) -> list[QAction]:
    """File > Compare With... and File > Compare With File on Disk (issue #20), placed
    after Export; both open `onnxviz.ui.diff`'s Compare window for the open document."""
    from onnxviz.ui.diff import open_compare_window

    file_menu = next(
        (
            menu
            for a in window.menuBar().actions()
            if a.text().replace("&", "") == "File" and isinstance(menu := a.menu(), QMenu)
        ),
        None,
    )
    if file_menu is None:
        return []

    def compare(with_disk: bool) -> None:
        if window.session.doc is not None:
            compare_window = open_compare_window(
                window, window.session.doc, with_disk=with_disk, prompter=window.prompter
            )
            if compare_window is not None:
                window.compare_window = compare_window

    with_file = QAction("Compare &With…", window)
    with_file.triggered.connect(lambda _c=False: compare(False))
    with_disk = QAction("Compare With File on &Disk", window)
    with_disk.triggered.connect(lambda _c=False: compare(True))
    export = getattr(window.actions_, "export", None)
    actions = file_menu.actions()
    at = actions.index(export) + 1 if export in actions else len(actions)
    before = actions[at] if at < len(actions) else None
    for action in (with_file, with_disk):
        if before is not None:
            file_menu.insertAction(before, action)
        else:
            file_menu.addAction(action)
    return [with_file, with_disk]
