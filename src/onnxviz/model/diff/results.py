"""What a model diff found, as plain records with a stable JSON form (README:
"onnxviz diff --json").  Graph paths and node labels are those of
`onnxviz.model.scopes`, so every entry can be opened in the app."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FORMAT = "onnxviz.diff/1"


@dataclass(frozen=True)
class NodeRef:
    graph: str
    label: str
    op_type: str
    index: int

    def to_json(self) -> dict[str, Any]:
        return {"graph": self.graph, "node": self.label, "op_type": self.op_type}


@dataclass
class Detail:
    """One difference of a matched node pair.  ``what``: "attribute", "attribute_added",
    "attribute_removed", "input", "input_count", "output_count", "type", "weight", "body"
    (a change inside a subgraph the node holds), "domain"."""

    what: str
    name: str
    a: str = ""
    b: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "name": self.name, "a": self.a, "b": self.b}


@dataclass
class NodeChange:
    a: NodeRef
    b: NodeRef
    details: list[Detail] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "details": [d.to_json() for d in self.details],
        }


@dataclass
class FusedGroup:
    """Nodes on one side that do the work of several (or one) on the other: a Conv
    against Conv+BatchNormalization, LayerNormalization against its decomposition."""

    a: list[NodeRef]
    b: list[NodeRef]

    @property
    def kind(self) -> str:
        if len(self.a) == 1 and len(self.b) > 1:
            return "1-to-many"
        if len(self.a) > 1 and len(self.b) == 1:
            return "many-to-1"
        return "many-to-many"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "a": [n.to_json() for n in self.a],
            "b": [n.to_json() for n in self.b],
        }


@dataclass
class TensorDiff:
    """How two matched initializers differ.  ``max_abs``/``max_rel``/``fraction_changed``
    are None when the values were not comparable (dtype kinds or shapes differ)."""

    a: str
    b: str
    graph: str
    dtype_a: str
    dtype_b: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]
    max_abs: float | None = None
    max_rel: float | None = None
    fraction_changed: float | None = None
    note: str = ""

    @property
    def equal(self) -> bool:
        return (
            self.dtype_a == self.dtype_b
            and self.shape_a == self.shape_b
            and self.fraction_changed == 0.0
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "graph": self.graph,
            "a": self.a,
            "b": self.b,
            "dtype": [self.dtype_a, self.dtype_b],
            "shape": [list(self.shape_a), list(self.shape_b)],
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "fraction_changed": self.fraction_changed,
            "note": self.note,
        }


@dataclass
class GraphDiff:
    path_a: str
    path_b: str
    matches: list[tuple[int, int]] = field(default_factory=list)
    changed: list[NodeChange] = field(default_factory=list)
    added: list[NodeRef] = field(default_factory=list)
    removed: list[NodeRef] = field(default_factory=list)
    fused: list[FusedGroup] = field(default_factory=list)
    weights: list[TensorDiff] = field(default_factory=list)
    # Value names of A mapped to their counterpart in B (matched node outputs, graph
    # inputs, initializers, fused group outputs).
    value_map: dict[str, str] = field(default_factory=dict)
    io: list[Detail] = field(default_factory=list)  # graph inputs/outputs that differ
    children: list[GraphDiff] = field(default_factory=list)

    @property
    def renamed(self) -> list[tuple[str, str]]:
        return [(a, b) for a, b in self.value_map.items() if a != b]

    @property
    def changed_weights(self) -> list[TensorDiff]:
        return [w for w in self.weights if not w.equal]

    @property
    def equal(self) -> bool:
        return not (
            self.changed
            or self.added
            or self.removed
            or self.fused
            or self.io
            or self.changed_weights
            or any(not c.equal for c in self.children)
        )

    def walk(self) -> list[GraphDiff]:
        out: list[GraphDiff] = []
        stack = [self]
        while stack:
            g = stack.pop()
            out.append(g)
            stack.extend(reversed(g.children))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.path_a,
            "b": self.path_b,
            "equal": self.equal,
            "matched": len(self.matches),
            "changed": [c.to_json() for c in self.changed],
            "added": [n.to_json() for n in self.added],
            "removed": [n.to_json() for n in self.removed],
            "fused": [f.to_json() for f in self.fused],
            "weights": [w.to_json() for w in self.changed_weights],
            "io": [d.to_json() for d in self.io],
            "renamed_values": [{"a": a, "b": b} for a, b in self.renamed],
        }


@dataclass
class ModelDiff:
    path_a: str | None
    path_b: str | None
    model: list[Detail]  # ir_version, opsets, producer, metadata, I/O signatures, functions
    main: GraphDiff
    functions: list[GraphDiff] = field(default_factory=list)
    anchors: list[tuple[str, str]] = field(default_factory=list)

    def graphs(self) -> list[GraphDiff]:
        out = self.main.walk()
        for f in self.functions:
            out.extend(f.walk())
        return out

    @property
    def equal(self) -> bool:
        return not self.model and all(g.equal for g in self.graphs())

    def counts(self) -> dict[str, int]:
        graphs = self.graphs()
        return {
            "matched": sum(len(g.matches) for g in graphs),
            "changed": sum(len(g.changed) for g in graphs),
            "added": sum(len(g.added) for g in graphs),
            "removed": sum(len(g.removed) for g in graphs),
            "fused": sum(len(g.fused) for g in graphs),
            "weights_changed": sum(len(g.changed_weights) for g in graphs),
            "weights_compared": sum(len(g.weights) for g in graphs),
            "renamed_values": sum(len(g.renamed) for g in graphs),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "a": self.path_a,
            "b": self.path_b,
            "equal": self.equal,
            "counts": self.counts(),
            "model": [d.to_json() for d in self.model],
            "graphs": [g.to_json() for g in self.graphs()],
        }
