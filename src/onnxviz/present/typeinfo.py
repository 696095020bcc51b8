"""Value types for edge labels: declared (value_info, graph inputs/outputs) versus
inferred (shape inference), so the canvas can tell them apart.

Inference sits behind `infer_value_types` so it can move to `onnxviz.check` later
without touching the callers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnx import GraphProto, ModelProto, TypeProto, ValueInfoProto

from onnxviz.model.document import Document
from onnxviz.model.scopes import GraphScope, build_scopes
from onnxviz.model.types import type_to_text

# Shape inference on a copy costs about as much as the load itself; past this many
# nodes the UI starts it after the first paint (see ui.workers) instead of before.
INFERENCE_NODE_LIMIT = 200_000


@dataclass(frozen=True)
class ValueType:
    text: str  # e.g. "float32[N,3,224,224]" ("?" for an unknown dim)
    inferred: bool  # True: from shape inference, not declared in the model


@dataclass
class TypeTable:
    """Per graph path: value name -> ValueType."""

    by_graph: dict[str, dict[str, ValueType]] = field(default_factory=dict)

    def get(self, graph_path: str, name: str) -> ValueType | None:
        table = self.by_graph.get(graph_path)
        return table.get(name) if table else None

    def lookup(self, scope: GraphScope, name: str) -> ValueType | None:
        """The type of ``name`` as seen from ``scope`` (outer scopes included)."""
        s: GraphScope | None = scope
        while s is not None:
            found = self.get(s.path, name)
            if found is not None:
                return found
            s = s.parent
        return None


def _typed(vi: ValueInfoProto) -> bool:
    return vi.HasField("type") and vi.type.WhichOneof("value") is not None


def _graph_value_infos(graph: GraphProto) -> list[ValueInfoProto]:
    return [*graph.input, *graph.output, *graph.value_info]


def _initializer_types(graph: GraphProto) -> dict[str, str]:
    from onnxviz.model.types import elem_text

    out: dict[str, str] = {}
    for t in graph.initializer:
        out[t.name] = f"{elem_text(t.data_type)}[{','.join(str(d) for d in t.dims)}]"
    return out


def declared_types(model: ModelProto, scopes: list[GraphScope] | None = None) -> TypeTable:
    table = TypeTable()
    for scope in scopes if scopes is not None else build_scopes(model):
        entries: dict[str, ValueType] = {}
        if scope.graph is not None:
            for name, text in _initializer_types(scope.graph).items():
                entries[name] = ValueType(text, False)
            for vi in _graph_value_infos(scope.graph):
                if _typed(vi):
                    entries[vi.name] = ValueType(type_to_text(vi.type), False)
        elif scope.function is not None:
            for vi in getattr(scope.function, "value_info", ()):
                if _typed(vi):
                    entries[vi.name] = ValueType(type_to_text(vi.type), False)
        table.by_graph[scope.path] = entries
    return table


def infer_value_types(model: ModelProto) -> dict[str, dict[str, TypeProto]]:
    """Types found by shape inference, per graph path (empty when inference fails)."""
    import onnx.shape_inference

    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:
        return {}
    out: dict[str, dict[str, TypeProto]] = {}
    for scope in build_scopes(inferred):
        if scope.graph is None:
            continue
        out[scope.path] = {vi.name: vi.type for vi in _graph_value_infos(scope.graph) if _typed(vi)}
    return out


def type_table(doc: Document, *, infer: bool = True) -> TypeTable:
    """Declared types, completed by inferred ones (marked ``inferred``) where the model
    declares none."""
    table = declared_types(doc.model, doc.scopes())
    if infer and sum(len(s.nodes) for s in doc.scopes()) <= INFERENCE_NODE_LIMIT:
        add_inferred(table, infer_value_types(doc.model))
    return table


def add_inferred(table: TypeTable, inferred: dict[str, dict[str, TypeProto]]) -> None:
    for path, values in inferred.items():
        entries = table.by_graph.setdefault(path, {})
        for name, tp in values.items():
            if name not in entries:
                entries[name] = ValueType(type_to_text(tp), True)
