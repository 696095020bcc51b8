"""The quick check: instant G004 findings for the names one edit touched.

The validator's incremental run re-checks everything an edit can affect, which on big
models takes longer than a keystroke should.  This looks only at the touched names and
reports the commonest breakage, a use of a name nothing defines, with G004's own message
builder (`structure.undefined_input`), so the full result replaces it without a visible
change.

Whether a name is defined comes from the scopes index.  After a structural edit of the
main graph the Document drops its index, and rebuilding it costs half a second at 100k
nodes; so the index from before the edit (`index_before`) is used instead, with the one
node the edit added or removed: node indexes past it moved by one, nothing else changed.
Edits that add or remove several nodes at once are checked on the rebuilt index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from onnx import NodeProto

from onnxviz.check.structure import undefined_input
from onnxviz.model.changes import ChangeSet
from onnxviz.model.diagnostics import Diagnostic
from onnxviz.model.scopes import GraphScope


class _Indexed(Protocol):
    def scopes(self) -> list[GraphScope]: ...


@dataclass(frozen=True)
class IndexBefore:
    """The main graph's index as it was before an edit, and its node count then."""

    scope: GraphScope
    node_count: int


def index_before(doc: _Indexed) -> IndexBefore | None:
    """Take before an edit: the main graph's index, its node labels built (they are
    read after the edit, when the nodes have moved)."""
    main = next((s for s in doc.scopes() if s.path == "main"), None)
    if main is None or main.graph is None:
        return None
    count = len(main.nodes)
    if count:
        main.node_label(0)
    return IndexBefore(main, count)


def quick_check(
    doc: _Indexed, changes: ChangeSet, before: IndexBefore | None = None
) -> list[Diagnostic]:
    """G004 for every use of a name the edit touched that nothing defines now."""
    by_graph: dict[str, set[str]] = {}
    for path, name in changes.names:
        if name:
            by_graph.setdefault(path, set()).add(name)
    out: list[Diagnostic] = []
    if changes.structural and "main" in by_graph and before is not None:
        shifted = _one_node_shift(changes, before)
        if shifted is not None:
            out += _shifted_main_check(before, shifted, sorted(by_graph.pop("main")))
    if not by_graph:
        return out
    scopes = {s.path: s for s in doc.scopes()}
    for path, names in sorted(by_graph.items()):
        scope = scopes.get(path)
        if scope is None:
            continue
        for name in sorted(names):
            if scope.lookup(name) is not None:
                continue
            for ni, k in scope.consumers.get(name, ()):
                out.append(undefined_input(path, scope.node_label(ni), name, k))
    return out


@dataclass(frozen=True)
class _Shift:
    """One node added (delta +1, at `at` in the new numbering) or removed (delta -1, from
    `at` in the old numbering) in the main graph."""

    nodes: Sequence[NodeProto]
    at: int
    delta: int

    def now(self, old_index: int) -> int | None:
        """Where the node at ``old_index`` before the edit is now (None: removed)."""
        if old_index < self.at:
            return old_index
        if self.delta < 0 and old_index == self.at:
            return None
        return old_index + self.delta


def _one_node_shift(changes: ChangeSet, before: IndexBefore) -> _Shift | None:
    graph = before.scope.graph
    assert graph is not None
    touched = [i for p, i in changes.nodes if p == "main"]
    delta = len(graph.node) - before.node_count
    if len(touched) != 1 or abs(delta) != 1:
        return None
    return _Shift(graph.node, touched[0], delta)


def _shifted_main_check(before: IndexBefore, shift: _Shift, names: list[str]) -> list[Diagnostic]:
    scope, nodes = before.scope, shift.nodes
    added = nodes[shift.at] if shift.delta > 0 and shift.at < len(nodes) else None
    out: list[Diagnostic] = []
    for name in names:
        if _defined_after(scope, shift, added, name):
            continue
        users: list[tuple[int, int, str]] = []
        for ni, k in scope.consumers.get(name, ()):
            now = shift.now(ni)
            if now is None or now >= len(nodes):
                continue
            node = nodes[now]
            if k < len(node.input) and node.input[k] == name:
                users.append((now, k, _label_now(scope, shift, added, node, now)))
        if added is not None:
            label = _label_now(scope, shift, added, added, shift.at)
            users += [(shift.at, k, label) for k, x in enumerate(added.input) if x == name]
        out += [undefined_input("main", label, name, k) for _, k, label in sorted(users)]
    return out


def _defined_after(scope: GraphScope, shift: _Shift, added: NodeProto | None, name: str) -> bool:
    """Whether ``name`` is defined in the main graph after the edit: by a definition the
    index knew that is still there, or by the added node."""
    if added is not None and name in added.output:
        return True
    graph = scope.graph
    assert graph is not None
    for d in scope.definitions_of(name):
        if d.kind == "node_output":
            now = shift.now(d.index)
            if now is not None and now < len(shift.nodes) and name in shift.nodes[now].output:
                return True
        elif d.kind == "sparse_initializer":  # a node edit leaves the graph's lists as they were
            sparse = graph.sparse_initializer
            if d.index < len(sparse) and sparse[d.index].values.name == name:
                return True
        else:
            entries = graph.input if d.kind == "input" else graph.initializer
            if d.index < len(entries) and entries[d.index].name == name:
                return True
    return False


def _label_now(
    scope: GraphScope, shift: _Shift, added: NodeProto | None, node: NodeProto, index: int
) -> str:
    """A node's label after the edit: its name when no other node has it, else
    ``#index``.  Name counts come from the index before the edit, with the added node;
    a removed node's name is not known, so a name two nodes had is counted again."""
    name = node.name
    if not name:
        return f"#{index}"
    count = scope.name_count(name)
    if added is not None and added.name == name:
        count += 1
    elif shift.delta < 0 and count == 2:
        count = sum(1 for n in shift.nodes if n.name == name)  # rare: the other may be gone
    return name if count == 1 else f"#{index}"
