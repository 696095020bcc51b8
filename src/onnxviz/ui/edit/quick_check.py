"""Instant diagnostics for the names an edit touched (plain Python, no Qt).

The validator's incremental run re-checks everything an edit can affect, which on big
models takes longer than a keystroke should.  This check looks only at the touched
names and reports the commonest breakage, a use of a name nothing defines, in the same
words and location as the validator's G004 rule, so the full result replaces it without
a visible change.  After a structural edit of the main graph it reads the GraphProto
directly (the Document's index is rebuilt later, off the critical path)."""

from __future__ import annotations

from onnx import GraphProto

from onnxviz.model.changes import ChangeSet
from onnxviz.model.diagnostics import Diagnostic, Location, Severity
from onnxviz.model.document import Document
from onnxviz.model.scopes import GraphScope


def _g004(path: str, label: str, name: str, k: int) -> Diagnostic:
    return Diagnostic(
        "G004",
        Severity.ERROR,
        f"Input #{k} '{name}' of node '{label}' is not defined in this graph or any outer graph.",
        Location(path, label, name, None, f"input[{k}]"),
    )


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(tag: int, name: str) -> bytes:
    enc = name.encode("utf-8")
    return bytes([tag]) + _varint(len(enc)) + enc


def _main_graph_check(
    graph: GraphProto, names: set[str], before: GraphScope | None
) -> list[Diagnostic]:
    """Without the index.  A name is produced by some node when its NodeProto.output
    encoding (field 2) occurs in the serialized graph; its users are those the index
    from before the edit knew, when they still exist (NodeProto.name, field 3).  A stray
    match inside tensor data only hides a provisional diagnostic, which the validator
    then reports."""
    data = graph.SerializeToString()
    defined = {vi.name for vi in graph.input}
    candidates = [n for n in names if n not in defined]
    if candidates:
        inits = {t.name for t in graph.initializer}
        inits.update(t.values.name for t in graph.sparse_initializer)
        candidates = [n for n in candidates if n not in inits]
    missing = sorted(n for n in candidates if _field(0x12, n) not in data)
    out: list[Diagnostic] = []
    if not missing:
        return out
    if before is None:
        inputs = [n.input for n in graph.node]
        for name in missing:
            for i, ins in enumerate(inputs):
                if name in ins:
                    node = graph.node[i]
                    for k, used in enumerate(node.input):
                        if used == name:
                            out.append(_g004("main", node.name or f"#{i}", name, k))
        return out
    for name in missing:
        for ni, k in before.consumers.get(name, ()):
            label = before.node_label(ni)
            if label.startswith("#") or _field(0x1A, label) in data:
                out.append(_g004("main", label, name, k))
    return out


def quick_check(
    doc: Document, changes: ChangeSet, before: GraphScope | None = None
) -> list[Diagnostic]:
    """``before``: the main graph's index from before the edit (its node labels built),
    which lets a structural edit be checked without re-indexing."""
    by_graph: dict[str, set[str]] = {}
    for path, name in changes.names:
        if name:
            by_graph.setdefault(path, set()).add(name)
    out: list[Diagnostic] = []
    if changes.structural:
        # only the main graph is read without the index; nested graphs wait for it
        main = by_graph.pop("main", None)
        if main:
            out += _main_graph_check(doc.model.graph, main, before)
        if not by_graph:
            return out
    try:
        scopes = {s.path: s for s in doc.scopes()}
    except Exception:
        return out
    for path, names in sorted(by_graph.items()):
        scope = scopes.get(path)
        if scope is None:
            continue
        for name in sorted(names):
            if scope.lookup(name) is not None:
                continue
            for ni, k in scope.consumers.get(name, ()):
                out.append(_g004(path, scope.node_label(ni), name, k))
    return out
