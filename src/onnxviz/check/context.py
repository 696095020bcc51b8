"""What every rule needs to know about the model being checked, computed once per run.

`CheckContext` holds the model, its scopes, the imported opsets (per graph: a function
body sees its own opset_import), the model-local functions, the operator schemas (cached)
and the type facts: declared types per graph and the inferred types from
`onnxviz.check.inference`.  Rules read it; they never change the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import onnx
import onnx.defs
from onnx import FunctionProto, ModelProto, OperatorSetIdProto, TypeProto

from onnxviz.model.scopes import GraphScope

if TYPE_CHECKING:
    from onnxviz.check.inference import InferenceResult

ONNX_DOMAINS = frozenset(onnx.defs.C.schema_version_map())
_VERSION_MAP: dict[str, tuple[int, int]] = dict(onnx.defs.C.schema_version_map())


def norm_domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def known_max_version(domain: str) -> int | None:
    rng = _VERSION_MAP.get(norm_domain(domain))
    return rng[1] if rng else None


@lru_cache(maxsize=8192)
def get_schema(domain: str, op_type: str, version: int) -> onnx.defs.OpSchema | None:
    """The schema of op_type in the given opset version of domain (largest since_version
    <= version), or None."""
    domain = norm_domain(domain)
    top = known_max_version(domain)
    if top is not None:
        version = min(version, top)
    if not isinstance(op_type, str) or not isinstance(domain, str):
        return None  # not UTF-8: no schema has such a name (onnx's binding wants str)
    try:
        return onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        return None


def opsets_of(entries: Iterable[OperatorSetIdProto]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in entries:
        out.setdefault(norm_domain(e.domain), e.version)
    return out


FunctionKey = tuple[str, str, str]


@dataclass
class CheckContext:
    model: ModelProto
    scopes: list[GraphScope]
    load_diagnostics: list[Any] = field(default_factory=list)
    inference: InferenceResult | None = None

    def __post_init__(self) -> None:
        self.ir_version = int(self.model.ir_version)
        self.by_path: dict[str, GraphScope] = {s.path: s for s in self.scopes}
        self.model_opsets = opsets_of(self.model.opset_import)
        self.functions: dict[FunctionKey, FunctionProto] = {}
        for fn in self.model.functions:
            self.functions.setdefault((norm_domain(fn.domain), fn.name, fn.overload), fn)
        self._declared: dict[str, dict[str, TypeProto]] = {}
        self._declared_extra: dict[str, dict[str, list[TypeProto]]] = {}
        self._implicit: dict[str, dict[str, list[int]]] = {}

    # -- scopes ----------------------------------------------------------------------
    def root_of(self, scope: GraphScope) -> GraphScope:
        while scope.parent is not None:
            scope = scope.parent
        return scope

    def opsets_for(self, scope: GraphScope) -> dict[str, int]:
        root = self.root_of(scope)
        if root.function is not None:
            own = opsets_of(root.function.opset_import)
            merged = dict(self.model_opsets)
            merged.update(own)
            return merged
        return self.model_opsets

    def function_of(self, scope: GraphScope) -> FunctionProto | None:
        return self.root_of(scope).function

    def local_function(self, domain: str, op_type: str, overload: str = "") -> FunctionProto | None:
        return self.functions.get((norm_domain(domain), op_type, overload))

    def implicit_consumers(self, scope: GraphScope) -> dict[str, list[int]]:
        """Names used inside nested graphs of a node (not defined there): the node
        consumes them implicitly.  name -> owner node indexes in this scope."""
        got = self._implicit.get(scope.path)
        if got is None:
            got = {}
            for child in scope.children:
                if child.owner_node_index is None:
                    continue
                for name in child.free_names:
                    lst = got.setdefault(name, [])
                    if not lst or lst[-1] != child.owner_node_index:
                        lst.append(child.owner_node_index)
            self._implicit[scope.path] = got
        return got

    # -- types -----------------------------------------------------------------------
    def declared_types(self, scope: GraphScope) -> dict[str, TypeProto]:
        """Types written in the model for this graph: inputs, outputs, value_info
        (first declaration wins)."""
        got = self._declared.get(scope.path)
        if got is None:
            got = {}
            extra: dict[str, list[TypeProto]] = {}
            g = scope.graph
            entries = (*g.input, *g.output, *g.value_info) if g is not None else ()
            if scope.function is not None:
                entries = tuple(scope.function.value_info)
            for vi in entries:
                if vi.HasField("type"):
                    if vi.name in got:
                        extra.setdefault(vi.name, [got[vi.name]]).append(vi.type)
                    else:
                        got[vi.name] = vi.type
            self._declared[scope.path] = got
            self._declared_extra[scope.path] = extra
        return got

    def declarations(self, scope: GraphScope, name: str) -> list[TypeProto]:
        """Every type declared for name in this graph (input, output, value_info)."""
        first = self.declared_types(scope).get(name)
        if first is None:
            return []
        return self._declared_extra[scope.path].get(name) or [first]

    def rename_declared(self, path: str, old: str, new: str) -> None:
        """Move the declared types kept for ``old`` to ``new`` after a value rename
        (types are invariant under renaming, so nothing is read again)."""
        for table in (self._declared.get(path), self._declared_extra.get(path)):
            if table is not None and old in table:
                table[new] = table.pop(old)  # type: ignore[index]

    def forget_implicit(self) -> None:
        """Drop the implicit-consumer tables (names moved; they are rebuilt on demand)."""
        self._implicit.clear()

    def forget_declared(self, path: str) -> None:
        self._declared.pop(path, None)
        self._declared_extra.pop(path, None)
        self._implicit.pop(path, None)

    def inferred_type(self, path: str, name: str) -> TypeProto | None:
        if self.inference is None:
            return None
        return self.inference.types.get((path, name))

    def value_type(self, scope: GraphScope, name: str) -> TypeProto | None:
        """The best known type of name as seen from scope: declared in the defining
        scope, else inferred there, else an initializer's tensor type."""
        s: GraphScope | None = scope
        while s is not None:
            if s.defines(name):
                t = self.declared_types(s).get(name)
                if t is not None and t.WhichOneof("value") is not None:
                    return t
                inf = self.inferred_type(s.path, name)
                if inf is not None:
                    return inf
                return initializer_type(s, name)
            s = s.parent
        return None


def initializer_type(scope: GraphScope, name: str) -> TypeProto | None:
    g = scope.graph
    if g is None:
        return None
    for d in scope.definitions_of(name):
        if d.kind == "initializer":
            t = g.initializer[d.index]
            tp = TypeProto()
            tp.tensor_type.elem_type = t.data_type
            tp.tensor_type.shape.SetInParent()
            for v in t.dims:
                tp.tensor_type.shape.dim.add().dim_value = v
            return tp
        if d.kind == "sparse_initializer":
            # A sparse initializer is stored sparse but used as a dense tensor.
            s = g.sparse_initializer[d.index]
            tp = TypeProto()
            tp.tensor_type.elem_type = s.values.data_type
            tp.tensor_type.shape.SetInParent()
            for v in s.dims:
                tp.tensor_type.shape.dim.add().dim_value = v
            return tp
    return None


def multiply_defined(scope: GraphScope) -> set[str]:
    """Names with more than one definition in this graph."""
    producer = scope.producer
    return {n for n, found in scope.other_definitions().items() if len(found) > 1 or n in producer}
