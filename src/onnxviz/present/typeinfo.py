"""Value types for edge labels: declared (value_info, graph inputs/outputs) versus
inferred (shape inference), so the canvas can tell them apart.

Inference itself is check's (`check.inference.infer_value_types`, in its worker process:
onnx's C++ inference can crash on a broken model and must not take the app with it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnx import GraphProto, ModelProto, TensorProto, TypeProto, ValueInfoProto

from onnxviz.model.document import Document
from onnxviz.model.scopes import GraphScope, build_scopes
from onnxviz.model.types import type_to_text

# Shape inference costs about 0.2 ms per node (20 s for 100k).  Up to this many nodes
# it runs before the first paint; past it the UI paints declared types first and runs
# inference in a separate process (`inferred_texts`), then fills in the labels.
SYNC_INFERENCE_NODES = 4000


@dataclass(frozen=True)
class ValueType:
    text: str  # e.g. "float32[N,3,224,224]" ("?" for an unknown dim)
    inferred: bool  # True: from shape inference, not declared in the model


@dataclass
class TypeTable:
    """Per graph path: value name -> ValueType.  ``complete`` is False while inferred
    types are still to come."""

    by_graph: dict[str, dict[str, ValueType]] = field(default_factory=dict)
    complete: bool = True
    # Initializer types are made on first use (100k initializers cost half a second).
    _init_graphs: dict[str, GraphProto] = field(default_factory=dict, repr=False)
    _init_index: dict[str, dict[str, TensorProto]] = field(default_factory=dict, repr=False)

    def get(self, graph_path: str, name: str) -> ValueType | None:
        table = self.by_graph.get(graph_path)
        found = table.get(name) if table else None
        if found is None and graph_path in self._init_graphs:
            index = self._init_index.get(graph_path)
            if index is None:
                graph = self._init_graphs[graph_path]
                index = self._init_index[graph_path] = {t.name: t for t in graph.initializer}
            tensor = index.get(name)
            if tensor is not None:
                found = ValueType(_tensor_text(tensor), False)
                self.by_graph.setdefault(graph_path, {})[name] = found
        return found

    def keep_initializer_index(self, previous: TypeTable) -> None:
        """Take over ``previous``'s initializer index for the graphs both tables read
        from the same GraphProto.  Only after an edit that added, removed or renamed no
        value (the caller knows from its ChangeSet): rebuilding it for 22k initializers
        cost 90 ms of the UI thread on every edit of a big model."""
        for path, graph in self._init_graphs.items():
            index = previous._init_index.get(path)
            if index is not None and previous._init_graphs.get(path) is graph:
                self._init_index[path] = index

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


def _tensor_text(t: TensorProto) -> str:
    from onnxviz.model.types import elem_text

    return f"{elem_text(t.data_type)}[{','.join(str(d) for d in t.dims)}]"


def declared_types(model: ModelProto, scopes: list[GraphScope] | None = None) -> TypeTable:
    table = TypeTable()
    for scope in scopes if scopes is not None else build_scopes(model):
        entries: dict[str, ValueType] = {}
        if scope.graph is not None:
            if len(scope.graph.initializer):
                table._init_graphs[scope.path] = scope.graph
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
    """Types found by shape inference, per graph path (empty when inference fails), from
    check's worker process: never onnx's C++ code in this process."""
    from onnxviz.check.inference import infer_value_types as infer_in_worker

    return infer_in_worker(model)


def type_table(doc: Document, *, infer: bool | None = None) -> TypeTable:
    """Declared types, completed by inferred ones (marked ``inferred``) where the model
    declares none.  ``infer`` None: infer only small models (see SYNC_INFERENCE_NODES)
    and mark the table incomplete otherwise."""
    table = declared_types(doc.model, doc.scopes())
    if infer is None:
        infer = doc.node_count <= SYNC_INFERENCE_NODES
        table.complete = infer
    if infer:
        add_inferred(table, infer_value_types(doc.model))
        table.complete = True
    return table


def inferred_texts(model_bytes: bytes) -> dict[str, dict[str, str]]:
    """Inferred types as text, per graph path: runs in another process, so it takes
    and returns plain data."""
    model = ModelProto()
    model.ParseFromString(model_bytes)
    return {
        path: {name: type_to_text(tp) for name, tp in values.items()}
        for path, values in infer_value_types(model).items()
    }


def add_inferred_texts(table: TypeTable, texts: dict[str, dict[str, str]]) -> None:
    for path, values in texts.items():
        entries = table.by_graph.setdefault(path, {})
        for name, text in values.items():
            if name not in entries:
                entries[name] = ValueType(text, True)
    table.complete = True


InferredEntries = dict[str, dict[str, ValueType]]


def inferred_entries(texts: dict[str, dict[str, str]]) -> InferredEntries:
    """Inferred type texts made into table entries, apart from any table: a worker
    thread makes them (10^5 objects at 100k nodes), the UI thread only merges them."""
    return {
        path: {name: ValueType(text, True) for name, text in values.items()}
        for path, values in texts.items()
    }


def add_inferred_entries(table: TypeTable, found: InferredEntries) -> None:
    """`add_inferred_texts` for entries made beforehand: declared types win, and the merge
    is a copy and an update of dicts (no Python loop over the values)."""
    for path, values in found.items():
        merged = dict(values)
        merged.update(table.by_graph.get(path, {}))
        table.by_graph[path] = merged
    table.complete = True


def add_inferred(table: TypeTable, inferred: dict[str, dict[str, TypeProto]]) -> None:
    for path, values in inferred.items():
        entries = table.by_graph.setdefault(path, {})
        for name, tp in values.items():
            if name not in entries:
                entries[name] = ValueType(type_to_text(tp), True)
