"""Whether an edited node's attributes changed anything beyond the node itself.

An attribute edit (an epsilon, an alpha, a pad) usually leaves the node's output types as
they were, and then nothing downstream can change: inference of every later node reads
only the types (and, for shape arithmetic, the values) of its inputs.  Instead of
inferring the whole model again (seconds at 100k nodes), the node is inferred alone: a
one-node model whose inputs carry the types the last full inference found, with the
small constant inputs (Reshape shapes, Slice starts, ...) as initializers.  The node
keeps its types when that inference succeeds, gives exactly the previous output types,
and onnx.checker accepts the one-node model.

Anything this cannot judge answers False, and the caller infers the whole model:
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
    from onnxviz.check.inference import _infer_bytes, begin_checker

    node = scope.nodes[index]
    before = [types.get((scope.path, o)) for o in node.output if o]
    if any(t is None or _may_carry_shape_values(t) for t in before):
        return False
    alone = one_node_model(model, ctx, scope, index, types)
    if alone is None:
        return False
    inferred = _infer_bytes(alone.SerializeToString())
    if inferred is None:
        return False
    # The checker wants typed graph outputs: it checks the inferred one-node model.
    verdict = begin_checker(inferred, base_dir)()
    if not verdict.ran or verdict.message is not None:
        return False
    got = {vi.name: vi.type for vi in inferred.graph.output}
    return all(got.get(o) == t for o, t in zip([o for o in node.output if o], before))
