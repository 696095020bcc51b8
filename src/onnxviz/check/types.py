"""Type and shape rules (T): element types and type constructors gated by ir_version,
operator type constraints on declared and inferred types, declared types against
inferred ones, initializer/input agreement, dimension variables (also N005/N006)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from onnx import TensorProto, TypeProto
from onnx.defs import OpSchema

from onnxviz.check.context import CheckContext, get_schema, norm_domain
from onnxviz.check.names import is_identifier
from onnxviz.check.registry import diag
from onnxviz.check.typetext import elem_str, schema_type_str, type_text
from onnxviz.model.diagnostics import Diagnostic
from onnxviz.model.scopes import GraphScope

NameDiags = dict[str, list[Diagnostic]]

try:
    from onnxviz.model.dtypes import ELEMENT_TYPES

    ELEM_MIN_IR: dict[int, int] = {code: et.min_ir_version for code, et in ELEMENT_TYPES.items()}
except ImportError:  # pragma: no cover - the shared table is being written by another helper
    ELEM_MIN_IR = {c: 1 for c in TensorProto.DataType.values() if c != 0}

CONSTRUCTOR_MIN_IR = {
    "sequence_type": 6,
    "map_type": 6,
    "optional_type": 8,
    "sparse_tensor_type": 8,
}
_KIND_TEXT = {
    "sequence_type": "sequence",
    "map_type": "map",
    "optional_type": "optional",
    "sparse_tensor_type": "sparse tensor",
    "tensor_type": "tensor",
    "opaque_type": "opaque",
}


# -- the structure of one declared type ------------------------------------------------------
@lru_cache(maxsize=4096)
def _type_problems(blob: bytes, ir_version: int) -> tuple[tuple[str, str], ...]:
    tp = TypeProto()
    tp.ParseFromString(blob)
    found: list[tuple[str, str]] = []
    _walk_type(tp, ir_version, found)
    return tuple(found)


def _walk_type(tp: TypeProto, ir: int, found: list[tuple[str, str]]) -> None:
    kind = tp.WhichOneof("value")
    if kind is None:
        found.append(("T008", "has a type with no value"))
        return
    need = CONSTRUCTOR_MIN_IR.get(kind)
    if need is not None and 0 < ir < need:
        found.append(
            ("T002", f"is a {_KIND_TEXT[kind]}, which needs IR version {need} (the model has {ir})")
        )
    if kind in ("tensor_type", "sparse_tensor_type"):
        t = getattr(tp, kind)
        _check_elem(t.elem_type, ir, found)
        if t.HasField("shape"):
            for d in t.shape.dim:
                if d.HasField("dim_param"):
                    p = d.dim_param
                    if p in ("", "*"):
                        found.append(("N006", f"uses the abandoned dim_param form '{p}'"))
                    elif not is_identifier(p):
                        found.append(
                            (
                                "N005",
                                f"uses dimension variable '{p}', which is not a C90 identifier",
                            )
                        )
    elif kind == "sequence_type":
        _walk_type(tp.sequence_type.elem_type, ir, found)
    elif kind == "optional_type":
        _walk_type(tp.optional_type.elem_type, ir, found)
    elif kind == "map_type":
        _check_elem(tp.map_type.key_type, ir, found)
        _walk_type(tp.map_type.value_type, ir, found)


def _check_elem(elem_type: int, ir: int, found: list[tuple[str, str]]) -> None:
    if elem_type == 0:
        found.append(("T003", "has no element type"))
        return
    need = ELEM_MIN_IR.get(elem_type)
    if need is None:
        found.append(("T003", f"has unknown element type {elem_type}"))
    elif 0 < ir < need:
        found.append(
            (
                "T001",
                f"has element type {elem_str(elem_type)}, which needs IR version {need} (the model has {ir})",
            )
        )


def elem_problem(elem_type: int, ir: int) -> tuple[str, str] | None:
    found: list[tuple[str, str]] = []
    _check_elem(elem_type, ir, found)
    return found[0] if found else None


# -- per value name --------------------------------------------------------------------------
def name_rules(ctx: CheckContext, scope: GraphScope, names: Iterable[str]) -> NameDiags:
    out: NameDiags = {}
    path = scope.path
    declared = ctx.declared_types(scope)
    inferred = ctx.inference.types if ctx.inference is not None else None
    ir = ctx.ir_version
    g = scope.graph
    interface: set[str] | None = None  # the graph's inputs and outputs, made when needed
    for name in names:
        found: list[Diagnostic] = []
        tp = declared.get(name)
        if tp is not None:
            for decl in ctx.declarations(scope, name):
                for code, text in _type_problems(decl.SerializeToString(), ir):
                    found.append(
                        diag(code, f"Value '{name}' {text}.", path, value=name, field="type")
                    )
                inf = inferred.get((path, name)) if inferred is not None else None
                if inf is not None and inf != decl and not _sparse_gap(decl, inf):
                    clash = contradiction(decl, inf)
                    if clash:
                        if interface is None:
                            interface = {*scope.input_names(), *scope.output_names()}
                        found.append(_declared_clash(scope, name, decl, inf, clash, interface))
        if g is not None:
            # Initializers live among the non-node definitions; no need for the full list.
            defs = scope.other_definitions().get(name, ())
            for d in defs:
                if d.kind != "initializer":
                    continue
                t = g.initializer[d.index]
                prob = elem_problem(t.data_type, ir) if t.data_type != 0 else None
                if prob is not None and prob[0] == "T001":
                    found.append(
                        diag(
                            "T001",
                            f"Initializer '{name}' {prob[1]}.",
                            path,
                            value=name,
                            field="initializer",
                        )
                    )
                if tp is not None and any(x.kind == "input" for x in defs):
                    clash = _initializer_clash(t, tp)
                    if clash:
                        found.append(
                            diag(
                                "T007",
                                f"Initializer '{name}' is {clash}, but graph input '{name}' is declared {type_text(tp)}.",
                                path,
                                value=name,
                            )
                        )
        if found:
            out[name] = found
    return out


def _sparse_gap(declared: TypeProto, inferred: TypeProto) -> bool:
    """onnx.shape_inference types sparse initializers as sparse tensors, although a graph
    uses them as dense ones; a dense declaration against that is the package's gap."""
    return (
        inferred.WhichOneof("value") == "sparse_tensor_type"
        and declared.WhichOneof("value") == "tensor_type"
    )


def _initializer_clash(t: TensorProto, tp: TypeProto) -> str | None:
    if tp.WhichOneof("value") != "tensor_type":
        return None
    tt = tp.tensor_type
    if tt.elem_type and t.data_type and tt.elem_type != t.data_type:
        return f"of element type {elem_str(t.data_type)}"
    if tt.HasField("shape"):
        dims = tt.shape.dim
        if len(dims) != len(t.dims):
            return f"of rank {len(t.dims)}"
        for d, v in zip(dims, t.dims):
            if d.HasField("dim_value") and d.dim_value != v:
                return f"of shape {list(t.dims)}"
    return None


# Clashes that change what a value is (not just its shape) are errors wherever declared.
_KIND_CLASHES = ("element types differ", "versus", "map key types differ")


def _declared_clash(
    scope: GraphScope,
    name: str,
    decl: TypeProto,
    inf: TypeProto,
    clash: str,
    interface: set[str],
) -> Diagnostic:
    """T005 (error) where a declared type contradicts inference and that makes the model
    invalid: a graph input or output (a subgraph's interface too) or a different element
    type or kind of value.  T009 (warning) for a shape declared on an intermediate value
    in value_info: a hint onnx's own inference overrides, which exporters write loosely
    (onnxruntime-genai declares int64[] for a constant inferred int64[1]).  Located at
    the node that produces the value, so the canvas badge lands on it."""
    producer = scope.producer.get(name)
    node = scope.node_label(producer[0]) if producer is not None else None
    text = f"Value '{name}' is declared {type_text(decl)} but inferred {type_text(inf)} ({clash})."
    serious = name in interface or any(k in clash for k in _KIND_CLASHES)
    return diag(
        "T005" if serious else "T009",
        text,
        scope.path,
        node=node,
        value=name,
        field="type",
    )


def contradiction(declared: TypeProto, inferred: TypeProto) -> str | None:
    """Why two types cannot describe the same value, or None when they are compatible
    (unknown parts on either side are compatible with anything)."""
    kd, ki = declared.WhichOneof("value"), inferred.WhichOneof("value")
    if kd is None or ki is None:
        return None
    if kd != ki:
        return f"{_KIND_TEXT.get(kd, kd)} versus {_KIND_TEXT.get(ki, ki)}"
    if kd in ("tensor_type", "sparse_tensor_type"):
        a, b = getattr(declared, kd), getattr(inferred, kd)
        if a.elem_type and b.elem_type and a.elem_type != b.elem_type:
            return "element types differ"
        if a.HasField("shape") and b.HasField("shape"):
            if len(a.shape.dim) != len(b.shape.dim):
                return "ranks differ"
            for i, (x, y) in enumerate(zip(a.shape.dim, b.shape.dim)):
                if (
                    x.HasField("dim_value")
                    and y.HasField("dim_value")
                    and x.dim_value != y.dim_value
                ):
                    return f"dimension {i} differs"
        return None
    if kd == "sequence_type":
        return contradiction(declared.sequence_type.elem_type, inferred.sequence_type.elem_type)
    if kd == "optional_type":
        return contradiction(declared.optional_type.elem_type, inferred.optional_type.elem_type)
    if kd == "map_type":
        if declared.map_type.key_type != inferred.map_type.key_type:
            return "map key types differ"
        return contradiction(declared.map_type.value_type, inferred.map_type.value_type)
    return None


# -- per node: operator type constraints -----------------------------------------------------
def node_rules(ctx: CheckContext, scope: GraphScope, index: int) -> list[Diagnostic]:
    node = scope.nodes[index]
    domain = norm_domain(node.domain)
    opsets = ctx.opsets_for(scope)
    version = opsets.get(domain)
    if version is None or ctx.local_function(domain, node.op_type, node.overload) is not None:
        return []
    schema = get_schema(domain, node.op_type, version)
    if schema is None or not schema.type_constraints and not schema.inputs:
        return []
    in_types = tuple(_type_str(ctx, scope, n) for n in node.input)
    out_types = tuple(_type_str(ctx, scope, n) for n in node.output)
    problems = _constraint_problems(domain, node.op_type, schema.since_version, in_types, out_types)
    if not problems:
        return []
    label = scope.node_label(index)
    out = []
    for kind, i, text in problems:
        names = node.input if kind == "input" else node.output
        out.append(
            diag(
                "T004",
                f"{kind.capitalize()} #{i} '{names[i]}' of node '{label}' ({node.op_type}) {text}.",
                scope.path,
                node=label,
                value=names[i],
                field=f"{kind}[{i}]",
            )
        )
    return out


def _type_str(ctx: CheckContext, scope: GraphScope, name: str) -> str | None:
    if not name:
        return None
    tp = ctx.value_type(scope, name)
    return schema_type_str(tp) if tp is not None else None


@lru_cache(maxsize=16384)
def _constraint_problems(
    domain: str,
    op_type: str,
    since: int,
    in_types: tuple[str | None, ...],
    out_types: tuple[str | None, ...],
) -> tuple[tuple[str, int, str], ...]:
    schema = get_schema(domain, op_type, since)
    if schema is None:
        return ()
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    bound: dict[str, tuple[str, str, int]] = {}
    found: list[tuple[str, int, str]] = []
    for kind, types, formals in (
        ("input", in_types, schema.inputs),
        ("output", out_types, schema.outputs),
    ):
        if not formals:
            continue
        for i, ts in enumerate(types):
            if ts is None:
                continue
            formal = formals[min(i, len(formals) - 1)]
            if i >= len(formals) and formal.option != OpSchema.FormalParameterOption.Variadic:
                continue
            param = formal.type_str
            if param in allowed:
                if ts not in allowed[param]:
                    found.append(
                        (kind, i, f"has type {ts}, which constraint {param} does not allow")
                    )
                    continue
                homogeneous = (
                    formal.option != OpSchema.FormalParameterOption.Variadic
                    or formal.is_homogeneous
                )
                prev = bound.get(param)
                if prev is None:
                    bound[param] = (ts, kind, i)
                elif prev[0] != ts and homogeneous:
                    found.append(
                        (
                            kind,
                            i,
                            f"has type {ts}, but {prev[1]} #{prev[2]} binds {param} to {prev[0]}",
                        )
                    )
            elif param != ts and "(" in param:
                found.append((kind, i, f"has type {ts}; the operator expects {param}"))
    return tuple(found)


# -- model-wide: dimension variables ---------------------------------------------------------
def model_rules(ctx: CheckContext) -> list[Diagnostic]:
    """T006: a dim_param bound to two different sizes by inference."""
    if ctx.inference is None:
        return []
    inferred = ctx.inference.types
    sizes: dict[str, set[int]] = {}
    first_path: dict[str, str] = {}
    for scope in ctx.scopes:
        if scope.graph is None:
            continue
        for name, tp in ctx.declared_types(scope).items():
            if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
                continue
            dims = tp.tensor_type.shape.dim
            if not any(d.HasField("dim_param") for d in dims):
                continue
            inf = inferred.get((scope.path, name))
            if inf is None or inf.WhichOneof("value") != "tensor_type":
                continue
            idims = inf.tensor_type.shape.dim
            if len(idims) != len(dims):
                continue
            for d, e in zip(dims, idims):
                if d.HasField("dim_param") and d.dim_param and e.HasField("dim_value"):
                    sizes.setdefault(d.dim_param, set()).add(e.dim_value)
                    first_path.setdefault(d.dim_param, scope.path)
    out = []
    for param in sorted(sizes):
        if len(sizes[param]) > 1:
            shown = " and ".join(str(s) for s in sorted(sizes[param]))
            out.append(
                diag(
                    "T006",
                    f"Dimension variable '{param}' is bound to sizes {shown} by inference.",
                    first_path[param],
                    field="dim_param",
                )
            )
    return out
