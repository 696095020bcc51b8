"""Cheap screens for full runs: which nodes and names might have a problem.

A full run over a 100k-node graph cannot afford every rule on every node in Python, so
each screen here accepts only what is certainly clean and hands everything else to the
real rules (which also explain the problem).  A screen must never accept something a
rule would report: `tests/check/test_fastpath.py` runs both on the same models."""

from __future__ import annotations

from dataclasses import dataclass

from onnx import AttributeProto

from onnxviz.check.context import (
    CheckContext,
    get_schema,
    multiply_defined,
    norm_domain,
)
from onnxviz.check.operators import VALUE_FIELD
from onnxviz.model.scopes import GraphScope

_A = AttributeProto
_TENSORISH = {_A.TENSOR, _A.TENSORS, _A.SPARSE_TENSOR, _A.SPARSE_TENSORS}
_OK_FIELDS = {"name", "type", "doc_string"}


@dataclass(frozen=True)
class OpFacts:
    min_in: int
    max_in: int
    min_out: int
    max_out: int
    attr_types: dict[str, int]
    required: frozenset[str]


_UNSURE = None  # an op we do not screen: always run the rules

_MISSING = OpFacts(0, 0, 0, 0, {}, frozenset())  # sentinel for "not looked up yet"

# Tests switch the screens off to compare a screened run with an unscreened one.
ENABLED = True


def _facts(ctx: CheckContext, opsets: dict[str, int], domain: str, op_type: str) -> OpFacts | None:
    d = norm_domain(domain)
    version = opsets.get(d)
    if version is None or ctx.local_function(d, op_type) is not None:
        return _UNSURE
    schema = get_schema(d, op_type, version)
    if schema is None or schema.deprecated:
        return _UNSURE
    # An empty name is only safe where the formal parameter is optional; we do not screen
    # empty names at all (rare), so arity and attributes are all that is left.
    return OpFacts(
        schema.min_input,
        schema.max_input,
        schema.min_output,
        schema.max_output,
        {k: int(a.type) for k, a in schema.attributes.items()},
        frozenset(k for k, a in schema.attributes.items() if a.required),
    )


def suspect_nodes(
    ctx: CheckContext, scope: GraphScope, with_types: bool, checker_ok: bool = False
) -> list[int]:
    """Indexes of nodes the node rules must look at; the rest are certainly clean.

    With ``checker_ok`` (onnx.checker accepted the model) the value fields of attributes
    are not re-read: the checker already failed any attribute holding more than one
    value or a value of another type than its declared one, which is all O011 looks at
    for the attributes this screen lets through (no tensors, no graphs)."""
    if with_types or not ENABLED:
        return list(range(len(scope.nodes)))
    opsets = ctx.opsets_for(scope)
    cache: dict[tuple[str, str], OpFacts | None] = {}
    out: list[int] = []
    n_inputs = n_outputs = 0
    for i, node in enumerate(scope.nodes):
        key = (node.domain, node.op_type)
        facts = cache.get(key, _MISSING)
        if facts is _MISSING:
            facts = cache[key] = _facts(ctx, opsets, key[0], key[1])
        if facts is None:
            out.append(i)
            continue
        k_in, k_out = len(node.input), len(node.output)
        n_inputs += k_in
        n_outputs += k_out
        if not (facts.min_in <= k_in <= facts.max_in and facts.min_out <= k_out <= facts.max_out):
            out.append(i)
            continue
        if node.overload or len(node.metadata_props) or len(node.device_configurations):
            out.append(i)
            continue
        attrs = node.attribute
        if (attrs or facts.required) and not _attrs_clean(attrs, facts, checker_ok):
            out.append(i)
    # Empty input and output names: the scope index records every non-empty one, so
    # equal totals mean there is none and no node needs scanning for them.
    if n_inputs != sum(map(len, scope.consumers.values())) or n_outputs != _indexed_outputs(scope):
        flagged = set(out)
        nodes = scope.nodes
        out.extend(
            i
            for i in range(len(nodes))
            if i not in flagged and ("" in nodes[i].input or "" in nodes[i].output)
        )
        out.sort()
    return out


def _indexed_outputs(scope: GraphScope) -> int:
    extra = sum(
        1 for found in scope.other_definitions().values() for d in found if d.kind == "node_output"
    )
    return len(scope.producer) + extra


def _attrs_clean(attrs: object, facts: OpFacts, fields_verified: bool) -> bool:
    seen: set[str] = set()
    types = facts.attr_types
    for a in attrs:  # type: ignore[attr-defined]
        name = a.name
        t = a.type
        if (
            name in seen
            or types.get(name) != t
            or t in _TENSORISH
            or t == _A.GRAPH
            or t == _A.GRAPHS
        ):
            return False
        seen.add(name)
        if fields_verified:
            if a.ref_attr_name:
                return False
            continue
        field = VALUE_FIELD[t]
        for fd, _ in a.ListFields():
            fn = fd.name
            if fn != field and fn not in _OK_FIELDS:
                return False
    return facts.required <= seen


def suspect_names(ctx: CheckContext, scope: GraphScope) -> tuple[set[str], set[str]]:
    """(names the structure and scope rules must look at, names the type and tensor
    rules must look at: declared types and initializers)."""
    typed = set(ctx.declared_types(scope))
    typed.update(scope.initializer_names())
    typed.discard("")
    if not ENABLED:
        names = scope.defined_names() | set(scope.consumers) | set(scope.output_uses)
        names.update(ctx.implicit_consumers(scope))
        names.discard("")
        return names, names
    producer = scope.producer
    defines = scope.defines
    out: set[str] = multiply_defined(scope)
    for name, cons in scope.consumers.items():
        # Undefined here (the rule looks outward), or first used before it is produced
        # (consumer lists are in node order).
        p = producer.get(name)
        if p is None:
            if not defines(name):
                out.add(name)
        elif cons[0][0] <= p[0]:
            out.add(name)
    for name, owners in ctx.implicit_consumers(scope).items():
        p = producer.get(name)
        if p is None:
            if not defines(name):
                out.add(name)
        elif owners[0] <= p[0]:
            out.add(name)
    if scope.parent is not None:
        visible: set[str] = set()
        for a in scope.ancestors():
            visible.update(a.defined_names())
        out.update(visible.intersection(scope.defined_names()))
    out.discard("")
    return out, typed
