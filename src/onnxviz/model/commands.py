"""Edit commands: every change to a Document is one of these.

A command validates first (raising EditError with a reason, the model untouched), then
mutates the ModelProto only through a Journal, so `revert` restores it byte for byte.
`apply` may be called again after `revert` (redo) and does the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from google.protobuf.message import Message
from onnx import (
    AttributeProto,
    GraphProto,
    NodeProto,
    StringStringEntryProto,
    TensorProto,
    TypeProto,
    ValueInfoProto,
)

from onnxviz.errors import EditError
from onnxviz.model.changes import ChangeSet
from onnxviz.model.journal import Journal, Ref, attr_ref, item_ref
from onnxviz.model.scope_names import readable_path
from onnxviz.model.scopes import GraphScope, subgraph_attrs

if TYPE_CHECKING:
    from onnxviz.model.document import Document


class Command:
    """Base class.  Subclasses implement `_apply(doc, journal) -> ChangeSet`."""

    label: str = "Edit"

    def __init__(self) -> None:
        self._journal: Journal | None = None
        self._changes = ChangeSet()

    def apply(self, doc: Document) -> ChangeSet:
        journal = Journal()
        try:
            changes = self._apply(doc, journal)
        except BaseException:
            journal.revert()  # a failure half-way leaves no trace
            raise
        self._journal = journal
        self._changes = changes
        return changes

    def revert(self, doc: Document) -> ChangeSet:
        if self._journal is None:
            raise EditError(f"'{self.label}' was not applied")
        self._journal.revert()
        self._journal = None
        return self._changes

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        raise NotImplementedError

    def merge_key(self) -> tuple[Any, ...] | None:
        """Commands with equal non-None keys, applied in a row, merge into one undo step."""
        return None


def _named(scope: GraphScope) -> str:
    """A graph as the user reads it in refusals (``main > Loop#0 > If#1 (else)``)."""
    return readable_path(scope)


def _at(scope: GraphScope) -> dict[str, str]:
    """An EditError's place: the path to locate it, the readable name to show it."""
    return {"graph_path": scope.path, "graph_label": readable_path(scope)}


def _scope(doc: Document, graph_path: str) -> GraphScope:
    try:
        return doc.scope(graph_path)
    except KeyError:
        raise EditError(f"there is no graph '{graph_path}'") from None


def _node(scope: GraphScope, index: int) -> NodeProto:
    if not 0 <= index < len(scope.nodes):
        raise EditError(f"graph '{_named(scope)}' has no node #{index}", **_at(scope))
    return scope.nodes[index]


def _nodes_ref(doc: Document, path: str) -> Ref:
    return lambda: doc.scope(path).nodes


def _node_ref(doc: Document, path: str, index: int) -> Ref:
    return item_ref(_nodes_ref(doc, path), index)


def _graph_ref(doc: Document, path: str) -> Ref:
    return lambda: doc.scope(path).graph


def _function_ref(doc: Document, path: str) -> Ref:
    return lambda: doc.scope(path).function


def _model_ref(doc: Document) -> Ref:
    return lambda: doc.model


def _graph(scope: GraphScope) -> GraphProto:
    if scope.graph is None:
        raise EditError(
            f"'{_named(scope)}' is a function body; it has no graph inputs, outputs, "
            "initializers or value_info to edit this way",
            **_at(scope),
        )
    return scope.graph


# -- values -------------------------------------------------------------------------


class RenameValue(Command):
    """Rename a value: its definition and every use follow, nested graphs included."""

    def __init__(self, graph_path: str, old: str, new: str) -> None:
        super().__init__()
        self.graph_path, self.old, self.new = graph_path, old, new
        self.label = f"Rename '{old}' → '{new}'"

    def check(self, doc: Document) -> GraphScope:
        """Raise EditError with the reason when this rename cannot be done (nothing
        changes); editors call it to refuse a name before executing."""
        scope = _scope(doc, self.graph_path)
        old, new = self.old, self.new
        where = _at(scope)
        if not new:
            raise EditError("a value name cannot be empty", **where)
        if new == old:
            raise EditError(f"'{old}' already has that name", **where)
        if not scope.defines(old):
            owner = scope.lookup(old)
            if owner is not None:
                raise EditError(
                    f"'{old}' is defined in the enclosing graph '{_named(owner)}'; rename it there",
                    **where,
                )
            raise EditError(f"no value named '{old}' is defined in this graph", **where)
        owner = scope.lookup(new)
        if owner is not None:
            raise EditError(
                f"cannot rename '{old}' to '{new}': that name is already defined in "
                f"graph '{_named(owner)}'",
                **where,
            )
        for sub in scope.descendants():
            if sub.defines(new):
                raise EditError(
                    f"cannot rename '{old}' to '{new}': the nested graph '{_named(sub)}' defines "
                    f"'{new}', which would shadow it",
                    **where,
                )
        if new in scope.free_names:
            raise EditError(
                f"cannot rename '{old}' to '{new}': '{new}' is already used (undefined) in "
                "this graph, so the rename would change what that use refers to",
                **where,
            )
        return scope

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        scope = self.check(doc)
        old, new = self.old, self.new
        touched_graphs = {scope.path}
        touched_nodes: set[tuple[str, int]] = set()
        names = {(scope.path, old), (scope.path, new)}
        renamed_scopes: list[GraphScope] = [scope]
        # Definitions in this graph.
        for d in scope.definitions_of(old):
            if d.kind == "node_output":
                journal.set_item(
                    attr_ref(_node_ref(doc, scope.path, d.index), "output"), d.output_index, new
                )
                touched_nodes.add((scope.path, d.index))
            elif d.kind == "input":
                if scope.graph is not None:
                    journal.set_scalar(
                        item_ref(attr_ref(_graph_ref(doc, scope.path), "input"), d.index),
                        "name",
                        new,
                    )
                else:
                    assert scope.function is not None
                    journal.set_item(
                        attr_ref(_function_ref(doc, scope.path), "input"), d.index, new
                    )
            elif d.kind == "initializer":
                _graph(scope)
                journal.set_scalar(
                    item_ref(attr_ref(_graph_ref(doc, scope.path), "initializer"), d.index),
                    "name",
                    new,
                )
            elif d.kind == "sparse_initializer":
                _graph(scope)
                sparse = item_ref(
                    attr_ref(_graph_ref(doc, scope.path), "sparse_initializer"), d.index
                )
                journal.set_scalar(attr_ref(sparse, "values"), "name", new)
        self._rename_uses(doc, scope, journal, touched_nodes)
        # Nested graphs that see this value (and do not redefine it).
        stack = [c for c in scope.children if old in c.free_names]
        while stack:
            sub = stack.pop()
            if sub.defines(old):
                continue
            touched_graphs.add(sub.path)
            names.add((sub.path, old))
            names.add((sub.path, new))
            self._rename_uses(doc, sub, journal, touched_nodes)
            renamed_scopes.append(sub)
            stack.extend(c for c in sub.children if old in c.free_names)
        if scope.kind == "main":
            self._rename_training_bindings(doc, journal)
        for s in renamed_scopes:
            s.rename_in_index(old, new)
        paths = [s.path for s in renamed_scopes]
        # On undo, patch whatever index the document holds then (it may have been rebuilt).
        journal.on_undo(lambda: doc.rename_in_index(paths, new, old))
        return ChangeSet(
            graphs=frozenset(touched_graphs),
            nodes=frozenset(touched_nodes),
            names=frozenset(names),
        )

    def _rename_uses(
        self, doc: Document, scope: GraphScope, journal: Journal, touched: set[tuple[str, int]]
    ) -> None:
        old, new = self.old, self.new
        path = scope.path
        for ni, ii in scope.consumers.get(old, ()):
            journal.set_item(attr_ref(_node_ref(doc, path, ni), "input"), ii, new)
            touched.add((path, ni))
        if scope.graph is not None:
            graph = _graph_ref(doc, path)
            for oi in scope.output_uses.get(old, ()):
                journal.set_scalar(item_ref(attr_ref(graph, "output"), oi), "name", new)
            for i, vi in enumerate(scope.graph.value_info):
                if vi.name == old:
                    journal.set_scalar(item_ref(attr_ref(graph, "value_info"), i), "name", new)
            for i, qa in enumerate(scope.graph.quantization_annotation):
                if qa.tensor_name == old:
                    annotations = attr_ref(graph, "quantization_annotation")
                    journal.set_scalar(item_ref(annotations, i), "tensor_name", new)
        else:
            assert scope.function is not None
            function = _function_ref(doc, path)
            for i, name in enumerate(scope.function.output):
                if name == old:
                    journal.set_item(attr_ref(function, "output"), i, new)
            for i, vi in enumerate(getattr(scope.function, "value_info", ())):
                if vi.name == old:
                    journal.set_scalar(item_ref(attr_ref(function, "value_info"), i), "name", new)

    def _rename_training_bindings(self, doc: Document, journal: Journal) -> None:
        infos = attr_ref(_model_ref(doc), "training_info")
        for k, info in enumerate(doc.model.training_info):
            for field_name in ("initialization_binding", "update_binding"):
                for j, binding in enumerate(getattr(info, field_name)):
                    if binding.key == self.old:
                        ref = item_ref(attr_ref(item_ref(infos, k), field_name), j)
                        journal.set_scalar(ref, "key", self.new)


class RewireInput(Command):
    """Point one node input at another existing name (or '' to leave it out)."""

    def __init__(self, graph_path: str, node_index: int, input_index: int, name: str) -> None:
        super().__init__()
        self.graph_path, self.node_index, self.input_index, self.name = (
            graph_path,
            node_index,
            input_index,
            name,
        )
        self.label = f"Rewire input {input_index} to '{name}'"

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        scope = _scope(doc, self.graph_path)
        node = _node(scope, self.node_index)
        if not 0 <= self.input_index < len(node.input):
            raise EditError(
                f"node '{scope.node_label(self.node_index)}' has no input {self.input_index}",
                **_at(scope),
            )
        if self.name and scope.lookup(self.name) is None:
            raise EditError(
                f"no value named '{self.name}' is visible in graph '{_named(scope)}'",
                **_at(scope),
                node=scope.node_label(self.node_index),
            )
        old = node.input[self.input_index]
        journal.set_item(
            attr_ref(_node_ref(doc, scope.path, self.node_index), "input"),
            self.input_index,
            self.name,
        )
        return ChangeSet(
            graphs=frozenset({scope.path}),
            nodes=frozenset({(scope.path, self.node_index)}),
            names=frozenset({(scope.path, old), (scope.path, self.name)}),
            reindex=frozenset({scope.path}),
        )


# -- nodes --------------------------------------------------------------------------


def _has_subgraph(attr: AttributeProto) -> bool:
    return attr.HasField("g") or len(attr.graphs) > 0


class SetAttribute(Command):
    """Add or replace one attribute of a node."""

    def __init__(self, graph_path: str, node_index: int, attribute: AttributeProto) -> None:
        super().__init__()
        self.graph_path, self.node_index = graph_path, node_index
        self.attribute = AttributeProto()
        self.attribute.CopyFrom(attribute)
        self.label = f"Set attribute '{attribute.name}'"

    def merge_key(self) -> tuple[Any, ...]:
        return ("attr", self.graph_path, self.node_index, self.attribute.name)

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        scope = _scope(doc, self.graph_path)
        node = _node(scope, self.node_index)
        if not self.attribute.name:
            raise EditError("an attribute needs a name", **_at(scope))
        structural = _has_subgraph(self.attribute)
        attrs = attr_ref(_node_ref(doc, scope.path, self.node_index), "attribute")
        for i, attr in enumerate(node.attribute):
            if attr.name == self.attribute.name:
                structural = structural or _has_subgraph(attr)
                journal.replace_message(item_ref(attrs, i), self.attribute)
                break
        else:
            journal.insert(attrs, len(node.attribute), self.attribute)
        return ChangeSet(
            graphs=frozenset({scope.path}),
            nodes=frozenset({(scope.path, self.node_index)}),
            structural=structural,
        )


class RemoveAttribute(Command):
    def __init__(self, graph_path: str, node_index: int, name: str) -> None:
        super().__init__()
        self.graph_path, self.node_index, self.name = graph_path, node_index, name
        self.label = f"Remove attribute '{name}'"

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        scope = _scope(doc, self.graph_path)
        node = _node(scope, self.node_index)
        for i, attr in enumerate(node.attribute):
            if attr.name == self.name:
                structural = _has_subgraph(attr)
                journal.remove(
                    attr_ref(_node_ref(doc, scope.path, self.node_index), "attribute"), i
                )
                return ChangeSet(
                    graphs=frozenset({scope.path}),
                    nodes=frozenset({(scope.path, self.node_index)}),
                    structural=structural,
                )
        raise EditError(
            f"node '{scope.node_label(self.node_index)}' has no attribute '{self.name}'",
            **_at(scope),
        )


class SetNodeField(Command):
    """Set a node's name, domain, op_type, overload or doc_string."""

    FIELDS = ("name", "domain", "op_type", "overload", "doc_string")

    def __init__(self, graph_path: str, node_index: int, field_name: str, value: str) -> None:
        super().__init__()
        if field_name not in self.FIELDS:
            raise EditError(f"'{field_name}' is not an editable node field")
        self.graph_path, self.node_index, self.field_name, self.value = (
            graph_path,
            node_index,
            field_name,
            value,
        )
        self.label = f"Set node {field_name}"

    def merge_key(self) -> tuple[Any, ...]:
        return ("node", self.graph_path, self.node_index, self.field_name)

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        scope = _scope(doc, self.graph_path)
        node = _node(scope, self.node_index)
        renamed = self.field_name == "name"
        labels_only = renamed and _only_labels_change(scope, node, node.name, self.value)
        journal.set_scalar(_node_ref(doc, scope.path, self.node_index), self.field_name, self.value)
        return ChangeSet(
            graphs=frozenset({scope.path}),
            nodes=frozenset({(scope.path, self.node_index)}),
            # A new name changes labels (node ids) and so subgraph paths below this node;
            # without subgraphs only the graph's labels need refreshing, not its index
            # (a 100k-node re-index held the UI thread for half a second).
            structural=renamed,
            relabel=frozenset({scope.path}) if labels_only else frozenset(),
            index_kept=labels_only,
        )


def _only_labels_change(scope: GraphScope, node: NodeProto, old: str, new: str) -> bool:
    """Whether renaming ``node`` from ``old`` to ``new`` changes no graph path: neither it
    nor a node whose label follows from the same names (duplicates are labelled ``#i``)
    owns a subgraph."""
    if any(subgraph_attrs(node)):
        return False
    shared = {name for name in (old, new) if name and scope.name_count(name) > (name == old)}
    if not shared:
        return True
    return not any(
        n.name in shared and n is not node and any(subgraph_attrs(n)) for n in scope.nodes
    )


class AddNode(Command):
    def __init__(self, graph_path: str, node: NodeProto, index: int | None = None) -> None:
        super().__init__()
        self.graph_path, self.index = graph_path, index
        self.node = NodeProto()
        self.node.CopyFrom(node)
        self.label = f"Add {node.op_type} node"

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        scope = _scope(doc, self.graph_path)
        nodes = scope.nodes
        index = len(nodes) if self.index is None else self.index
        if not 0 <= index <= len(nodes):
            raise EditError(f"node position {index} is out of range", **_at(scope))
        for out in self.node.output:
            if out and scope.lookup(out) is not None:
                raise EditError(
                    f"cannot add the node: its output '{out}' is already defined in graph "
                    f"'{_named(scope.lookup(out))}'",  # type: ignore[arg-type]
                    **_at(scope),
                )
        journal.insert(_nodes_ref(doc, scope.path), index, self.node)
        return ChangeSet(
            graphs=frozenset({scope.path}),
            nodes=frozenset({(scope.path, index)}),
            names=frozenset((scope.path, n) for n in (*self.node.input, *self.node.output) if n),
            structural=True,
        )


class RemoveNode(Command):
    def __init__(self, graph_path: str, node_index: int) -> None:
        super().__init__()
        self.graph_path, self.node_index = graph_path, node_index
        self.label = "Delete node"

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        scope = _scope(doc, self.graph_path)
        node = _node(scope, self.node_index)
        self.label = f"Delete {node.op_type} node '{scope.node_label(self.node_index)}'"
        names = frozenset((scope.path, n) for n in (*node.input, *node.output) if n)
        journal.remove(_nodes_ref(doc, scope.path), self.node_index)
        return ChangeSet(
            graphs=frozenset({scope.path}),
            nodes=frozenset({(scope.path, self.node_index)}),
            names=names,
            structural=True,
        )


# -- graph inputs, outputs, initializers, value types --------------------------------

GraphList = Literal["input", "output", "initializer", "sparse_initializer", "value_info"]


def _entry_name(item: Message) -> str:
    if isinstance(item, TensorProto | ValueInfoProto):
        return item.name
    return item.values.name  # type: ignore[attr-defined]


class AddGraphEntry(Command):
    """Add a graph input, output, initializer, sparse initializer or value_info."""

    def __init__(self, graph_path: str, kind: GraphList, item: Message, index: int | None = None):
        super().__init__()
        self.graph_path, self.kind, self.index = graph_path, kind, index
        self.item = type(item)()
        self.item.CopyFrom(item)
        self.label = f"Add {kind.replace('_', ' ')} '{_entry_name(item)}'"

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        scope = _scope(doc, self.graph_path)
        graph = _graph(scope)
        name = _entry_name(self.item)
        container = getattr(graph, self.kind)
        if any(_entry_name(x) == name for x in container):
            raise EditError(
                f"graph '{_named(scope)}' already has {self.kind.replace('_', ' ')} '{name}'",
                **_at(scope),
            )
        if self.kind in ("initializer", "sparse_initializer"):
            owner = scope.lookup(name)
            if owner is not None and any(d.kind != "input" for d in owner.definitions_of(name)):
                raise EditError(
                    f"'{name}' is already defined in graph '{_named(owner)}'", **_at(scope)
                )
        index = len(container) if self.index is None else self.index
        journal.insert(attr_ref(_graph_ref(doc, scope.path), self.kind), index, self.item)
        return ChangeSet(
            graphs=frozenset({scope.path}),
            names=frozenset({(scope.path, name)}),
            reindex=frozenset({scope.path}),
        )


class RemoveGraphEntry(Command):
    def __init__(self, graph_path: str, kind: GraphList, name: str) -> None:
        super().__init__()
        self.graph_path, self.kind, self.name = graph_path, kind, name
        self.label = f"Remove {kind.replace('_', ' ')} '{name}'"

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        scope = _scope(doc, self.graph_path)
        container = getattr(_graph(scope), self.kind)
        for i, item in enumerate(container):
            if _entry_name(item) == self.name:
                journal.remove(attr_ref(_graph_ref(doc, scope.path), self.kind), i)
                return ChangeSet(
                    graphs=frozenset({scope.path}),
                    names=frozenset({(scope.path, self.name)}),
                    reindex=frozenset({scope.path}),
                )
        raise EditError(
            f"graph '{_named(scope)}' has no {self.kind.replace('_', ' ')} '{self.name}'",
            **_at(scope),
        )


class MoveGraphEntry(Command):
    """Reorder graph inputs or outputs."""

    def __init__(self, graph_path: str, kind: GraphList, name: str, new_index: int) -> None:
        super().__init__()
        self.graph_path, self.kind, self.name, self.new_index = graph_path, kind, name, new_index
        self.label = f"Move {kind} '{name}'"

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        scope = _scope(doc, self.graph_path)
        container = getattr(_graph(scope), self.kind)
        for i, item in enumerate(container):
            if _entry_name(item) == self.name:
                if not 0 <= self.new_index < len(container):
                    raise EditError(f"position {self.new_index} is out of range")
                entries = attr_ref(_graph_ref(doc, scope.path), self.kind)
                saved = journal.remove(entries, i)
                journal.insert(entries, self.new_index, saved)
                return ChangeSet(
                    graphs=frozenset({scope.path}),
                    names=frozenset({(scope.path, self.name)}),
                    reindex=frozenset({scope.path}),
                )
        raise EditError(f"graph '{_named(scope)}' has no {self.kind} '{self.name}'")


class SetValueType(Command):
    """Set the declared type of a value (graph input/output entry, else value_info)."""

    def __init__(self, graph_path: str, name: str, type_proto: TypeProto | None) -> None:
        super().__init__()
        self.graph_path, self.name = graph_path, name
        self.type_proto = None if type_proto is None else TypeProto()
        if type_proto is not None and self.type_proto is not None:
            self.type_proto.CopyFrom(type_proto)
        self.label = f"Set type of '{name}'"

    def merge_key(self) -> tuple[Any, ...]:
        return ("type", self.graph_path, self.name)

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        scope = _scope(doc, self.graph_path)
        graph = _graph(scope)
        found = False
        for kind in ("input", "output", "value_info"):
            for i, vi in enumerate(getattr(graph, kind)):
                if vi.name == self.name:
                    ref = item_ref(attr_ref(_graph_ref(doc, scope.path), kind), i)
                    journal.set_message(ref, "type", self.type_proto)
                    found = True
        if not found:
            if scope.lookup(self.name) is None:
                raise EditError(f"no value named '{self.name}' in graph '{_named(scope)}'")
            if self.type_proto is not None:
                vi = ValueInfoProto(name=self.name)
                vi.type.CopyFrom(self.type_proto)
                journal.insert(
                    attr_ref(_graph_ref(doc, scope.path), "value_info"), len(graph.value_info), vi
                )
        return ChangeSet(graphs=frozenset({scope.path}), names=frozenset({(scope.path, self.name)}))


class ReplaceInitializer(Command):
    """Replace an initializer's data (same name)."""

    def __init__(self, graph_path: str, tensor: TensorProto) -> None:
        super().__init__()
        self.graph_path = graph_path
        self.tensor = TensorProto()
        self.tensor.CopyFrom(tensor)
        self.label = f"Replace initializer '{tensor.name}'"

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        scope = _scope(doc, self.graph_path)
        for i, t in enumerate(_graph(scope).initializer):
            if t.name == self.tensor.name:
                ref = item_ref(attr_ref(_graph_ref(doc, scope.path), "initializer"), i)
                journal.replace_message(ref, self.tensor)
                return ChangeSet(
                    graphs=frozenset({scope.path}), names=frozenset({(scope.path, t.name)})
                )
        raise EditError(f"graph '{_named(scope)}' has no initializer '{self.tensor.name}'")


# -- model-level fields -----------------------------------------------------------------

# Where metadata/doc strings live: "model", a graph path, or (graph path, node index).
Target = str | tuple[str, int]


def _target_message(doc: Document, target: Target) -> tuple[Ref, ChangeSet]:
    """A ref to the model, graph, function or node that ``target`` names."""
    if target == "model":
        return _model_ref(doc), ChangeSet(model_fields=True)
    if isinstance(target, tuple):
        scope = _scope(doc, target[0])
        _node(scope, target[1])
        return _node_ref(doc, scope.path, target[1]), ChangeSet(
            graphs=frozenset({scope.path}), nodes=frozenset({(scope.path, target[1])})
        )
    scope = _scope(doc, target)
    path = scope.path
    if scope.graph is not None:
        return _graph_ref(doc, path), ChangeSet(graphs=frozenset({path}))
    return _function_ref(doc, path), ChangeSet(graphs=frozenset({path}))


class SetMetadataProp(Command):
    """Set (value) or remove (None) one metadata_props entry of a model, graph, node or
    function."""

    def __init__(self, target: Target, key: str, value: str | None) -> None:
        super().__init__()
        self.target, self.key, self.value = target, key, value
        self.label = f"Set metadata '{key}'" if value is not None else f"Remove metadata '{key}'"

    def merge_key(self) -> tuple[Any, ...]:
        return ("meta", self.target, self.key)

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        msg, changes = _target_message(doc, self.target)
        if not hasattr(msg(), "metadata_props"):
            raise EditError("this element has no metadata_props")
        props_ref = attr_ref(msg, "metadata_props")
        props = props_ref()
        for i, entry in enumerate(props):
            if entry.key == self.key:
                if self.value is None:
                    journal.remove(props_ref, i)
                else:
                    journal.set_scalar(item_ref(props_ref, i), "value", self.value)
                return changes
        if self.value is None:
            raise EditError(f"there is no metadata key '{self.key}'")
        entry = StringStringEntryProto(key=self.key, value=self.value)
        journal.insert(props_ref, len(props), entry)
        return changes


class SetDocString(Command):
    def __init__(self, target: Target, text: str) -> None:
        super().__init__()
        self.target, self.text = target, text
        self.label = "Edit documentation"

    def merge_key(self) -> tuple[Any, ...]:
        return ("doc", self.target)

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        msg, changes = _target_message(doc, self.target)
        journal.set_scalar(msg, "doc_string", self.text)
        return changes


class SetModelField(Command):
    """producer_name, producer_version, domain, model_version or ir_version."""

    FIELDS = ("producer_name", "producer_version", "domain", "model_version", "ir_version")

    def __init__(self, field_name: str, value: str | int) -> None:
        super().__init__()
        if field_name not in self.FIELDS:
            raise EditError(f"'{field_name}' is not an editable model field")
        self.field_name, self.value = field_name, value
        self.label = f"Set {field_name}"

    def merge_key(self) -> tuple[Any, ...]:
        return ("model", self.field_name)

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        value: Any = self.value
        if self.field_name in ("ir_version", "model_version"):
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise EditError(f"{self.field_name} must be an integer, not {value!r}") from None
            if value < 0:
                raise EditError(f"{self.field_name} cannot be negative")
        journal.set_scalar(_model_ref(doc), self.field_name, value)
        return ChangeSet(model_fields=True)


class SetOpsetImport(Command):
    """Set the version imported for a domain; None removes the import."""

    def __init__(self, domain: str, version: int | None) -> None:
        super().__init__()
        self.domain, self.version = domain, version
        shown = domain or "ai.onnx"
        self.label = f"Import {shown} {version}" if version is not None else f"Remove {shown}"

    def _apply(self, doc: Document, journal: Journal) -> ChangeSet:
        ops = doc.model.opset_import
        ops_ref = attr_ref(_model_ref(doc), "opset_import")
        for i, entry in enumerate(ops):
            if entry.domain == self.domain:
                if self.version is None:
                    journal.remove(ops_ref, i)
                else:
                    journal.set_scalar(item_ref(ops_ref, i), "version", int(self.version))
                return ChangeSet(model_fields=True, graphs=frozenset(s.path for s in doc.scopes()))
        if self.version is None:
            raise EditError(f"domain '{self.domain}' is not imported")
        from onnx import OperatorSetIdProto

        journal.insert(
            ops_ref, len(ops), OperatorSetIdProto(domain=self.domain, version=int(self.version))
        )
        return ChangeSet(model_fields=True, graphs=frozenset(s.path for s in doc.scopes()))


@dataclass
class MacroCommand(Command):
    """Several commands as one undo step (e.g. bypass-delete a node)."""

    commands: list[Command] = field(default_factory=list)
    label: str = "Edit"

    def __post_init__(self) -> None:
        super().__init__()

    def apply(self, doc: Document) -> ChangeSet:
        done: list[Command] = []
        total = ChangeSet()
        try:
            for cmd in self.commands:
                total = total.merge(doc.apply_unrecorded(cmd))
                done.append(cmd)
        except BaseException:
            for cmd in reversed(done):
                doc.revert_unrecorded(cmd)
            raise
        self._changes = total
        self._journal = Journal()
        return total

    def revert(self, doc: Document) -> ChangeSet:
        for cmd in reversed(self.commands):
            doc.revert_unrecorded(cmd)
        self._journal = None
        return self._changes
