"""Whether an edited node's attributes changed anything beyond the node itself.

An attribute edit (an epsilon, an alpha, a pad) usually leaves the node's output types as
they were, and then nothing downstream can change: inference of every later node reads
only the types (and, for shape arithmetic, the values) of its inputs.  Instead of
inferring the whole model again (seconds at 100k nodes), the node is inferred alone: a
one-node model whose inputs carry the types the last full inference found, with the
small constant inputs (Reshape shapes, Slice starts, ...) as initializers.  The node
keeps its types when that inference succeeds, gives exactly the previous output types,
and onnx.checker accepts the one-node model.

When the types do change, `downstream_cone` and `cone_types` infer only the nodes that
read the edited node's outputs, directly or not (with the shape computations they read,
which whole-model inference followed by data propagation), seeded with the types at the
cone's boundary.

Anything this cannot judge answers False (or None), and the caller infers the whole model:
outputs that may carry shape values on to later nodes (integer tensors of rank 0 or 1,
which data propagation follows), nodes with subgraphs or calling local functions, inputs
of unknown type.  Both onnx calls run in the worker processes (check/worker.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from onnx import AttributeProto, ModelProto, TensorProto, TypeProto, ValueInfoProto, helper

from onnxviz.check.context import CheckContext
from onnxviz.model.scopes import GraphScope

# Constant inputs up to this many elements go with the node (inference may read them).
_CONSTANT_UP_TO = 4096
_INTEGER_TYPES = {
    TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
    TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
}  # fmt: skip


def _may_carry_shape_values(t: TypeProto) -> bool:
    """An integer tensor of rank 0 or 1 (or unknown rank): data propagation may follow its
    values into later nodes' shapes."""
    if t.WhichOneof("value") != "tensor_type":
        return False
    tt = t.tensor_type
    return tt.elem_type in _INTEGER_TYPES and (not tt.HasField("shape") or len(tt.shape.dim) <= 1)


def _constant_input(scope: GraphScope, name: str) -> TensorProto | None:
    """A small initializer or Constant output of this graph, as a tensor."""
    g = scope.graph
    assert g is not None
    for d in scope.definitions_of(name):
        if d.kind == "initializer":
            t = g.initializer[d.index]
            size = 1
            for dim in t.dims:
                size *= dim
            if size <= _CONSTANT_UP_TO and t.data_location != TensorProto.EXTERNAL:
                return t
        if d.kind == "node_output":
            node = g.node[d.index]
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                for attr in node.attribute:
                    if attr.name == "value" and attr.type == AttributeProto.TENSOR:
                        tensor = TensorProto()
                        tensor.CopyFrom(attr.t)
                        tensor.name = name
                        return tensor
    return None


def one_node_model(
    model: ModelProto, ctx: CheckContext, scope: GraphScope, index: int, types: Mapping
) -> ModelProto | None:
    """The node alone, its inputs typed as the last inference found them, or None when
    it cannot stand alone."""
    node = scope.nodes[index]
    if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
        return None
    if ctx.local_function(node.domain, node.op_type, node.overload) is not None:
        return None
    inputs, inits, seen = [], [], set()
    for name in node.input:
        if not name or name in seen:
            continue
        seen.add(name)
        t = types.get((scope.path, name)) or ctx.value_type(scope, name)
        if t is None or t.WhichOneof("value") is None:
            return None
        vi = helper.make_value_info(name, t)
        inputs.append(vi)
        const = _constant_input(scope, name)
        if const is not None:
            inits.append(const)
    outputs = [ValueInfoProto(name=o) for o in node.output if o]  # no type: inference adds it
    graph = helper.make_graph([node], "node", inputs, outputs, initializer=inits)
    alone = helper.make_model(graph, opset_imports=list(model.opset_import))
    alone.ir_version = model.ir_version
    return alone


def one_node_types(
    model: ModelProto,
    ctx: CheckContext,
    scope: GraphScope,
    index: int,
    types: Mapping,
    base_dir: str | None = None,
) -> dict[str, TypeProto] | None:
    """The node's output types from inferring it alone (strict) with its inputs typed as
    the last inference found them, when that succeeds and onnx.checker accepts the
    one-node model; else None."""
    from onnxviz.check.inference import _infer_bytes, begin_checker

    alone = one_node_model(model, ctx, scope, index, types)
    if alone is None:
        return None
    inferred = _infer_bytes(alone.SerializeToString())
    if inferred is None:
        return None
    # The checker wants typed graph outputs: it checks the inferred one-node model.
    verdict = begin_checker(inferred, base_dir)()
    if not verdict.ran or verdict.message is not None:
        return None
    return {vi.name: vi.type for vi in inferred.graph.output}


def node_keeps_its_types(
    model: ModelProto,
    ctx: CheckContext,
    scope: GraphScope,
    index: int,
    types: Mapping,
    base_dir: str | None = None,
) -> bool:
    """True when the node, inferred and checked alone with its edited attributes, gives
    the output types the last full inference recorded (see the module docstring)."""
    node = scope.nodes[index]
    outs = [o for o in node.output if o]
    before = [types.get((scope.path, o)) for o in outs]
    if any(t is None or _may_carry_shape_values(t) for t in before):
        return False
    got = one_node_types(model, ctx, scope, index, types, base_dir)
    return got is not None and all(got.get(o) == t for o, t in zip(outs, before))


# A cone bigger than this is inferred with the whole model (one pass costs about the same).
CONE_LIMIT = 5000
# Producers of shape values outside the cone brought along, at most (see `_shape_sources`).
_SHAPE_SOURCES_LIMIT = 500


def downstream_cone(ctx: CheckContext, scope: GraphScope, index: int) -> list[int] | None:
    """Indexes of the edited node and every node that reads, directly or not, what it
    makes, in graph order; None when a nested graph reads one of those values or the cone
    is over CONE_LIMIT (then the whole model is inferred again)."""
    implicit = ctx.implicit_consumers(scope)
    seen = {index}
    stack = [index]
    while stack:
        i = stack.pop()
        node = scope.nodes[i]
        if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
            return None
        for out in node.output:
            if not out:
                continue
            if out in implicit:
                return None
            for consumer, _ in scope.consumers.get(out, ()):
                if consumer not in seen:
                    seen.add(consumer)
                    stack.append(consumer)
                    if len(seen) > CONE_LIMIT:
                        return None
    return sorted(seen)


def _shape_sources(
    scope: GraphScope, cone: set[int], boundary: list[str], types: Mapping
) -> set[int] | None:
    """Nodes outside the cone that compute the integer vectors the cone reads (Shape ->
    Gather -> Concat -> Reshape): whole-model inference knew their values (data
    propagation), so the part inferred again must compute them too."""
    extra: set[int] = set()
    stack = list(boundary)
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        t = types.get((scope.path, name))
        producer = scope.producer.get(name)
        if t is None or producer is None or not _may_carry_shape_values(t):
            continue
        i = producer[0]
        if i in cone or i in extra:
            continue
        node = scope.nodes[i]
        if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
            return None
        extra.add(i)
        if len(extra) > _SHAPE_SOURCES_LIMIT:
            return None
        stack.extend(n for n in node.input if n)
    return extra


def cone_types(
    model: ModelProto,
    ctx: CheckContext,
    scope: GraphScope,
    cone: list[int],
    types: Mapping,
) -> dict[str, TypeProto] | None:
    """The inferred types of every value the cone makes, from inferring the cone alone
    (with the shape computations it reads) in the worker process, its inputs typed as the
    last inference found them; None when that part cannot be inferred on its own or
    inference fails there (the caller then infers the whole model)."""
    from onnxviz.check.inference import _infer_bytes

    inside = set(cone)
    made = {o for i in inside for o in scope.nodes[i].output if o}
    boundary = [n for i in cone for n in scope.nodes[i].input if n and n not in made]
    extra = _shape_sources(scope, inside, boundary, types)
    if extra is None:
        return None
    nodes = sorted(inside | extra)
    made |= {o for i in extra for o in scope.nodes[i].output if o}
    inputs, inits, seen = [], [], set()
    for i in nodes:
        for name in scope.nodes[i].input:
            if not name or name in made or name in seen:
                continue
            seen.add(name)
            t = types.get((scope.path, name)) or ctx.value_type(scope, name)
            if t is None or t.WhichOneof("value") is None:
                return None
            inputs.append(helper.make_value_info(name, t))
            const = _constant_input(scope, name)
            if const is not None:
                inits.append(const)
    outputs = [ValueInfoProto(name=o) for i in cone for o in scope.nodes[i].output if o]
    graph = helper.make_graph(
        [scope.nodes[i] for i in nodes], "cone", inputs, outputs, initializer=inits
    )
    part = helper.make_model(graph, opset_imports=list(model.opset_import))
    part.ir_version = model.ir_version
    part.functions.extend(model.functions)
    inferred = _infer_bytes(part.SerializeToString())
    if inferred is None:
        return None
    found = {vi.name: vi.type for vi in (*inferred.graph.value_info, *inferred.graph.output)}
    wanted = [o for i in cone for o in scope.nodes[i].output if o]
    if any(o not in found for o in wanted):
        return None  # inference left a value untyped: let the whole model speak
    return {o: found[o] for o in wanted}
