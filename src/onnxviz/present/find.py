"""Find: node names, op types, value names and initializers in every graph (main,
subgraphs at any depth, function bodies)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from onnxviz.model.document import Document
from onnxviz.model.scope_names import readable_path

FindKind = Literal["node", "op", "value", "initializer", "input", "output"]


@dataclass(frozen=True)
class FindResult:
    kind: FindKind
    graph_path: str
    text: str  # what matched
    node_index: int | None = None  # the node to show (producer or consumer for values)
    value: str | None = None
    # the graph as a reader names it (``Scan#0 > Loop#2 > If#4 (else)``), not its path
    graph_label: str = ""

    def describe(self) -> str:
        label = self.graph_label or self.graph_path
        where = "" if self.graph_path == "main" else f"  [{label}]"
        return f"{self.kind}: {self.text}{where}"


def find(doc: Document, query: str, limit: int = 2000) -> list[FindResult]:
    """Case-insensitive substring search; exact matches come first."""
    q = query.strip().lower()
    if not q:
        return []
    out: list[FindResult] = []
    labels: dict[str, str] = {}
    for scope in doc.scopes():
        path = scope.path
        labels[path] = readable_path(scope)
        for i, node in enumerate(scope.nodes):
            if node.name and q in node.name.lower():
                out.append(FindResult("node", path, node.name, i))
            elif q in node.op_type.lower():
                out.append(FindResult("op", path, f"{node.op_type} ({scope.node_label(i)})", i))
            if len(out) >= limit:
                return _ranked(out, q, labels)
        inits = set(scope.initializer_names())
        for name in scope.input_names():
            if q in name.lower() and name not in inits:
                use = scope.consumers.get(name)
                out.append(FindResult("input", path, name, use[0][0] if use else None, name))
        for name in scope.output_names():
            if q in name.lower():
                prod = scope.producer.get(name)
                out.append(FindResult("output", path, name, prod[0] if prod else None, name))
        for name in inits:
            if q in name.lower():
                use = scope.consumers.get(name)
                out.append(FindResult("initializer", path, name, use[0][0] if use else None, name))
        for name, (ni, _) in scope.producer.items():
            if q in name.lower():
                out.append(FindResult("value", path, name, ni, name))
        # values used here but produced in an outer graph
        for name, uses in scope.consumers.items():
            if name not in scope.definitions and q in name.lower():
                out.append(FindResult("value", path, name, uses[0][0], name))
        if len(out) >= limit:
            break
    return _ranked(out[:limit], q, labels)


def _ranked(results: list[FindResult], q: str, labels: dict[str, str]) -> list[FindResult]:
    def key(r: FindResult) -> tuple[int, int]:
        name = (r.value or r.text).lower()
        return (0 if name == q else 1, r.graph_path.count("/"))

    return [replace(r, graph_label=labels[r.graph_path]) for r in sorted(results, key=key)]
