"""Execution plans: a graph compiled once into what the interpreter needs per node.

`compile_graph` turns a GraphProto (main graph or subgraph) or a FunctionProto body
into a `GraphPlan`:

* nodes in topological order (the stored order when it is already valid);
* for each node, how it runs: a kernel resolved by (domain, op_type, largest
  since_version <= the opset), a control-flow op run by the interpreter (If, Loop,
  Scan, SequenceMap), a function body (model-local or from the schema), or
  "unsupported" (the error is raised only if the node is reached, so a model with one
  unknown op can still be stepped up to it);
* attributes decoded and defaulted from the schema, once;
* every value name mapped to an integer slot; outer-scope names a subgraph (or its
  own subgraphs) uses become "captures" copied from the enclosing frame at entry;
* the last use of each slot, so the frame drops dead tensors as soon as possible
  (a control-flow node counts as a use of everything its subgraphs capture);
* constant folding: a deterministic kernel node whose inputs are all initializers (or
  outputs of such nodes) is computed on the first run and its outputs reused after.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import AttributeProto, FunctionProto, GraphProto, NodeProto, TypeProto

from onnxviz.errors import ExecutionError
from onnxviz.model.node_id import address_of
from onnxviz.model.tensors import to_array
from onnxviz.model.text import as_text
from onnxviz.model.types import shape_of
from onnxviz.runtime.attributes import _sparse_to_dense, node_attributes
from onnxviz.runtime.functions import (
    FunctionKey,
    find_local_function,
    has_schema_function,
    schema_since_version,
)
from onnxviz.runtime.inplace import INPLACE_OPS
from onnxviz.runtime.prepared import prepare
from onnxviz.runtime.registry import KernelSpec, normalize_domain, resolve

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})

# Never folded: their output differs between runs (or they have effects).
NONDETERMINISTIC_OPS = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        "Dropout",
    }
)


@dataclass
class PlanContext:
    """What every graph of one model shares while being compiled."""

    opsets: dict[str, int]
    functions: dict[FunctionKey, FunctionProto]
    base_dir: str | None = None
    fold_constants: bool = True


@dataclass(slots=True)
class PlanNode:
    index: int
    node: NodeProto
    label: str
    graph_path: str
    op_type: str
    domain: str
    opset: int
    kind: str  # "kernel" | "control" | "function" | "schema_function" | "unsupported"
    spec: KernelSpec | None
    attrs: dict[str, Any]
    inputs: tuple[int, ...]  # slot per input, -1 for an absent optional input
    outputs: tuple[int, ...]  # slot per output, -1 for an unused optional output
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    free_after: tuple[int, ...] = ()
    foldable: bool = False
    problem: str = ""  # why "unsupported"
    # Filled lazily by the executor:
    folded: list[Any] | None = None
    subplans: dict[str, GraphPlan] = field(default_factory=dict)
    body_plans: dict[Any, GraphPlan] = field(default_factory=dict)
    function: FunctionProto | None = None
    outer_attrs: dict[str, AttributeProto] | None = None  # when inside a function body
    ref: Any = None  # events.NodeRef, made once by the executor
    # Slots of outer names the node's subgraphs read (uses, for liveness).
    implicit: tuple[int, ...] = ()
    has_subgraphs: bool = False
    # Per input: dead after this node (set for ops inplace.py may run in place).
    inplace_dead: tuple[bool, ...] | None = None
    # Position in GraphPlan.nodes (a fused node: its first node's).
    position: int = -1
    # kind "fused" (fusion.py): computes the outputs from (executor, inputs).
    fused: Any = None
    key: str = ""  # the address, made once (profile key)
    # Prepared by prepared.prepare for the node loop: values -> inputs, the single
    # output's slot, the positional call of a plain one-output kernel (or the
    # specialized call of one with several outputs).
    gather: Any = None
    out0: int = -1
    call: Any = None
    call_many: Any = None
    plain: bool = False

    @property
    def address(self) -> str:
        return address_of(self.graph_path, self.label)


@dataclass
class GraphPlan:
    path: str
    kind: str  # "main" | "subgraph" | "function"
    name: str
    nodes: list[PlanNode]
    slots: dict[str, int]
    n_slots: int
    input_names: list[str]
    input_slots: list[int]
    input_types: list[TypeProto | None]
    output_names: list[str]
    output_slots: list[int]
    output_types: list[TypeProto | None]
    constants: list[tuple[int, Any]]  # (slot, value) for initializers
    captures: list[tuple[int, str]]  # (slot, outer name)
    opsets: dict[str, int]
    labels: dict[str, int]  # node label -> index
    # Initializer names that are also graph inputs (IR < 4 defaults a feed may replace).
    overridable: frozenset[str] = frozenset()
    # A body's captured values that are constants of the graphs around it (their
    # initializers, by this plan's slot: `outer_constants`), set when it is compiled for
    # its node: the unwatched node list's specializers and fusions take them as they
    # take its own initializers.
    outer_constants: dict[int, Any] = field(default_factory=dict)
    # The node list unwatched runs execute (fusion.py), made on first use.
    run_nodes: list[PlanNode] | None = None
    # Outputs of constant-folded nodes (shared between runs, never handed out as is).
    folded_values: list[Any] = field(default_factory=list)
    # The slots a frame starts with: the constants in place, None elsewhere (made once;
    # a frame copies it in one step instead of storing the constants one by one).
    initial_values: list[Any] | None = None
    # Compiled programs of its node lists for quiet runs (quiet_loop.py), by list id.
    quiet_programs: dict[int, tuple[list[PlanNode], Any]] = field(default_factory=dict)
    # The tensor shapes the graph declares (its inputs, outputs and value_info), by slot:
    # a size, a symbolic name, or None per axis (`declared_shapes`).  Fusions that must
    # know two values share a shape read them; no shape inference runs.
    shapes: dict[int, tuple[Any, ...]] = field(default_factory=dict)

    def start_values(self) -> list[Any]:
        """A new frame's value slots (constants set)."""
        initial = self.initial_values
        if initial is None:
            initial = [None] * self.n_slots
            for s, v in self.constants:
                initial[s] = v
            self.initial_values = initial
        return initial.copy()


def outer_constants(parent: GraphPlan, captures: list[tuple[int, str]]) -> dict[int, Any]:
    """The values of ``captures`` (a body's) that are constants where they come from: an
    initializer of ``parent`` (the graph whose node holds the body), not one a feed may
    replace, or one of parent's own outer constants; by the body's slot.  A frame of
    the body gets these very arrays (Frame.lookup finds the name in parent's slots
    first), so a specialized call made for them (a Loop body's Gemm by the main
    graph's weight, as torch's exports write it) meets them on every run; it checks
    their identity all the same."""
    own = dict(parent.constants)
    found: dict[int, Any] = {}
    for s, name in captures:
        ps = parent.slots.get(name)
        if ps is None or name in parent.overridable:
            continue
        value = own.get(ps, parent.outer_constants.get(ps))
        if value is not None:
            found[s] = value
    return found


def node_labels(nodes: Sequence[NodeProto]) -> list[str]:
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.name] = counts.get(n.name, 0) + 1
    return [n.name if n.name and counts[n.name] == 1 else f"#{i}" for i, n in enumerate(nodes)]


def subgraph_attributes(node: NodeProto) -> list[tuple[str, GraphProto]]:
    out: list[tuple[str, GraphProto]] = []
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH or (attr.type == 0 and attr.HasField("g")):
            out.append((attr.name, attr.g))
        elif attr.type == AttributeProto.GRAPHS:
            out.extend((f"{attr.name}[{i}]", g) for i, g in enumerate(attr.graphs))
    return out


_free_cache: dict[int, tuple[GraphProto, frozenset[str]]] = {}


def free_names(graph: GraphProto) -> frozenset[str]:
    """Names a graph (or any graph nested in it) uses without defining them."""
    cached = _free_cache.get(id(graph))
    if cached is not None and cached[0] is graph:
        return cached[1]
    defined = {v.name for v in graph.input}
    defined.update(t.name for t in graph.initializer)
    defined.update(s.values.name for s in graph.sparse_initializer)
    used: set[str] = set()
    for node in graph.node:
        used.update(n for n in node.input if n)
        for _, sub in subgraph_attributes(node):
            used.update(free_names(sub))
        defined.update(n for n in node.output if n)
    used.update(o.name for o in graph.output if o.name)
    result = frozenset(used - defined)
    if len(_free_cache) > 10000:
        _free_cache.clear()
    _free_cache[id(graph)] = (graph, result)
    return result


@dataclass
class _NodeInfo:
    """A node's protobuf fields read once (protobuf field access is slow)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    implicit: frozenset[str]  # outer names its subgraphs use
    has_subgraphs: bool


def _node_info(node: NodeProto) -> _NodeInfo:
    subs = subgraph_attributes(node) if len(node.attribute) else []
    implicit: frozenset[str] = frozenset()
    if subs:
        implicit = frozenset().union(*(free_names(g) for _, g in subs))
    return _NodeInfo(tuple(node.input), tuple(node.output), implicit, bool(subs))


def _topological(
    nodes: Sequence[NodeProto], infos: list[_NodeInfo], known: set[str], path: str
) -> list[int]:
    """Node indices in an order where every input is produced first (stored order when
    valid).  Names not produced by any node count as available (outer scope)."""
    produced_by: dict[str, int] = {}
    for i, info in enumerate(infos):
        for o in info.outputs:
            if o and o not in produced_by:
                produced_by[o] = i
    in_order = True
    deps: list[set[int]] = []
    for i, info in enumerate(infos):
        ds = set()
        for x in info.inputs:
            d = produced_by.get(x) if x else None
            if d is not None and d != i and x not in known:
                ds.add(d)
                in_order = in_order and d < i
        for x in info.implicit:
            d = produced_by.get(x)
            if d is not None and d != i and x not in known:
                ds.add(d)
                in_order = in_order and d < i
        deps.append(ds)
    if in_order:
        return list(range(len(nodes)))
    # Kahn's algorithm, stable in stored order.
    import heapq

    indeg = [len(ds) for ds in deps]
    users: list[list[int]] = [[] for _ in nodes]
    for i, ds in enumerate(deps):
        for d in ds:
            users[d].append(i)
    ready = [i for i, k in enumerate(indeg) if k == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        stuck = [nodes[i].name or f"#{i}" for i in range(len(nodes)) if indeg[i] > 0][:3]
        raise ExecutionError(
            f"the graph has a cycle (nodes {', '.join(stuck)} wait on each other)",
            graph_path=path,
        )
    return order


def _classify(
    node: NodeProto, ctx: PlanContext, opsets: dict[str, int]
) -> tuple[str, KernelSpec | None, FunctionProto | None, str]:
    domain = normalize_domain(node.domain)
    opset = opsets.get(domain, 1)
    if domain == "" and node.op_type in CONTROL_FLOW_OPS:
        return "control", None, None, ""
    spec = resolve(domain, node.op_type, opset)
    if spec is not None:
        # A kernel registered for an older version than the schema in force is only a
        # fallback: the schema's own function body, when it has one, is exact.
        if spec.since_version < schema_since_version(
            domain, node.op_type, opset
        ) and has_schema_function(domain, node.op_type, opset):
            return "schema_function", None, None, ""
        return "kernel", spec, None, ""
    fn = find_local_function(ctx.functions, node)
    if fn is not None:
        return "function", None, fn, ""
    if has_schema_function(domain, node.op_type, opset):
        return "schema_function", None, None, ""
    return (
        "unsupported",
        None,
        None,
        f"no kernel for {domain or 'ai.onnx'}::{node.op_type} at opset {opset}",
    )


def declared_shapes(
    graph: GraphProto | FunctionProto, slots: dict[str, int]
) -> dict[int, tuple[Any, ...]]:
    """slot -> the tensor shape ``graph`` declares for it (inputs, outputs, value_info):
    per axis its size, its symbolic name, or None (neither).  A function body declares
    none."""
    if isinstance(graph, FunctionProto):
        return {}
    shapes: dict[int, tuple[Any, ...]] = {}
    for info in (*graph.input, *graph.output, *graph.value_info):
        slot = slots.get(info.name)
        if slot is None or info.type.WhichOneof("value") != "tensor_type":
            continue
        dims = shape_of(info.type)
        if dims is not None:  # (an empty symbolic name names no axis: unknown)
            shapes[slot] = tuple(None if d == "" else d for d in dims)
    return shapes


def compile_graph(
    graph: GraphProto | FunctionProto,
    path: str,
    ctx: PlanContext,
    *,
    kind: str = "main",
    opsets: dict[str, int] | None = None,
    outer_attrs: dict[str, AttributeProto] | None = None,
) -> GraphPlan:
    """Compile ``graph`` (a GraphProto, or a FunctionProto body with its call's
    attributes in ``outer_attrs``) into a `GraphPlan`."""
    opsets = dict(opsets if opsets is not None else ctx.opsets)
    is_function = isinstance(graph, FunctionProto)
    slots: dict[str, int] = {}

    def slot(name: str) -> int:
        if not name:
            return -1
        s = slots.get(name)
        if s is None:
            s = slots[name] = len(slots)
        return s

    constants: list[tuple[int, Any]] = []
    input_types: list[TypeProto | None] = []
    output_types: list[TypeProto | None] = []
    overridable: set[str] = set()
    if isinstance(graph, FunctionProto):
        input_names = list(graph.input)
        output_names = list(graph.output)
        input_types = [None] * len(input_names)
        output_types = [None] * len(output_names)
        input_slots = [slot(n) for n in input_names]
        init_names: set[str] = set()
    else:
        input_names = [v.name for v in graph.input]
        input_types = [v.type for v in graph.input]
        output_names = [v.name for v in graph.output]
        output_types = [v.type for v in graph.output]
        init_names = {t.name for t in graph.initializer} | {
            s.values.name for s in graph.sparse_initializer
        }
        overridable = init_names & set(input_names)
        # Feeds for real inputs only; an initializer that is also an input is a default.
        input_slots = [slot(n) for n in input_names]
        try:
            # An unnamed initializer can be read by no node (the validator says so).
            for t in graph.initializer:
                if t.name:
                    constants.append((slot(t.name), _read_only(to_array(t, ctx.base_dir))))
            for s in graph.sparse_initializer:
                if s.values.name:
                    constants.append((slot(s.values.name), _read_only(_sparse_to_dense(s))))
        except ExecutionError:
            raise
        except Exception as exc:
            raise ExecutionError(
                f"cannot decode an initializer: {type(exc).__name__}: {exc}", graph_path=path
            ) from exc

    nodes_proto = list(graph.node)
    infos = [_node_info(n) for n in nodes_proto]
    known = set(input_names) | init_names
    order = _topological(nodes_proto, infos, known, path)
    labels_all = node_labels(nodes_proto)

    # Captures: names used here or in nested graphs, defined nowhere in this graph.
    defined = set(input_names) | init_names
    needed: set[str] = set()
    for info in infos:
        defined.update(info.outputs)
        needed.update(info.inputs)
        needed.update(info.implicit)
    needed.update(output_names)
    needed.discard("")
    capture_names = sorted(needed - defined, key=as_text)  # bytes: names that are not UTF-8
    captures = [(slot(name), name) for name in capture_names]

    plan_nodes: list[PlanNode] = []
    for index in order:
        node = nodes_proto[index]
        info = infos[index]
        domain = normalize_domain(node.domain)
        opset = opsets.get(domain, 1)
        kind_, spec, fn, problem = _classify(node, ctx, opsets)
        try:
            attrs = node_attributes(node, opset, ctx.base_dir, outer_attrs)
        except Exception as exc:
            attrs = {}
            kind_, problem = "unsupported", f"cannot decode attributes: {exc}"
        pn = PlanNode(
            index=index,
            node=node,
            label=labels_all[index],
            graph_path=path,
            op_type=node.op_type,
            domain=domain,
            opset=opset,
            kind=kind_,
            spec=spec,
            attrs=attrs,
            inputs=tuple([slot(n) for n in info.inputs]),
            outputs=tuple([slot(n) for n in info.outputs]),
            input_names=info.inputs,
            output_names=info.outputs,
            problem=problem,
            function=fn,
            outer_attrs=outer_attrs,
            implicit=tuple(slots[n] for n in info.implicit if n in slots),
            has_subgraphs=info.has_subgraphs,
        )
        plan_nodes.append(pn)

    for position, pn in enumerate(plan_nodes):
        pn.position = position
        pn.key = pn.address
    prepare(plan_nodes, fast=False)
    liveness(plan_nodes, slots, output_names)
    if ctx.fold_constants:
        # Initializers listed as inputs (IR < 4) count as constants here; a run that
        # feeds one of them runs without folding (see Executor.fold).
        _mark_foldable(plan_nodes, {s for s, _ in constants})

    return GraphPlan(
        shapes=declared_shapes(graph, slots),
        path=path,
        kind=kind if not is_function else "function",
        name=graph.name,
        nodes=plan_nodes,
        slots=slots,
        n_slots=len(slots),
        input_names=input_names,
        input_slots=input_slots,
        input_types=input_types,
        output_names=output_names,
        output_slots=[slots[n] if n else -1 for n in output_names],
        output_types=output_types,
        constants=constants,
        captures=captures,
        opsets=opsets,
        labels={pn.label: i for i, pn in enumerate(plan_nodes)},
        overridable=frozenset(overridable),
    )


def plain_kernel(pn: PlanNode, op_type: str) -> bool:
    """``pn`` runs the default domain's ``op_type`` kernel for one output, every run (not
    folded to a constant): what each unwatched-run fusion starts from."""
    return (
        pn.kind == "kernel"
        and pn.domain == ""
        and pn.op_type == op_type
        and not pn.foldable
        and len(pn.outputs) == 1
    )


def fused_node(
    head: PlanNode,
    last: PlanNode,
    inputs: Sequence[int],
    input_names: Sequence[str],
    fused: Any,
) -> PlanNode:
    """An entry of a fused node list (fusion.py) that runs ``fused(executor, inputs)`` in
    place of the nodes from ``head`` to ``last``: head's identity (label, address, timing
    key), last's outputs; `liveness` then marks what it frees."""
    return dataclasses.replace(
        head,
        kind="fused",
        inputs=tuple(inputs),
        input_names=tuple(input_names),
        outputs=last.outputs,
        output_names=last.output_names,
        foldable=False,
        fused=fused,
        inplace_dead=None,
        call=None,
    )


def outside_inputs(steps: Sequence[PlanNode]) -> tuple[list[int], list[str], dict[int, int]]:
    """The inputs a fused node of ``steps`` takes: every slot the steps read that none of
    them writes, once each in the order first read (slots, names, slot -> place)."""
    inside = {s for pn in steps for s in pn.outputs}
    ins: list[int] = []
    names: list[str] = []
    place_of: dict[int, int] = {}
    for pn in steps:
        for s, name in zip(pn.inputs, pn.input_names):
            if s not in inside and s not in place_of:
                place_of[s] = len(ins)
                ins.append(s)
                names.append(name)
    return ins, names, place_of


# A fused node's constant inputs: (input place, the plan constant there), its first input
# (the live value) left out.
Expected = tuple[tuple[int, Any], ...]


def expected_constants(place_of: dict[int, int], constants: dict[int, Any]) -> Expected:
    """The plan constants a fused node of steps with these outside inputs (`outside_inputs`'s
    slot -> place) reads after its first input: what `has_constants` checks at each call
    (a run that feeds an overridable initializer passes another object)."""
    return tuple((place, constants[slot]) for slot, place in place_of.items() if place)


def has_constants(ins: Sequence[Any], expected: Expected) -> bool:
    """Whether a fused node's inputs ``ins`` hold exactly the constants ``expected``."""
    return all(ins[place] is value for place, value in expected)


def checked_steps_node(
    nodes: Sequence[PlanNode],
    positions: Sequence[int],
    constants: dict[int, Any],
    make: Callable[[list[PlanNode], dict[int, int], Expected], Any],
) -> PlanNode:
    """`steps_node` for a runner that checks its constant inputs at each call:
    ``make(steps, place_of, expected)``, ``expected`` from `expected_constants`."""
    steps = [nodes[p] for p in positions]
    ins, names, place_of = outside_inputs(steps)
    expected = expected_constants(place_of, constants)
    return fused_node(steps[0], steps[-1], ins, names, make(steps, place_of, expected))


def steps_node(
    nodes: Sequence[PlanNode],
    positions: Sequence[int],
    make: Callable[[list[PlanNode], dict[int, int]], Any],
) -> PlanNode:
    """The fused node of the nodes at ``positions``: their outside inputs
    (`outside_inputs`), computed by ``make(steps, place_of)`` (a layer norm's or an SE
    block's runner)."""
    steps = [nodes[p] for p in positions]
    ins, names, place_of = outside_inputs(steps)
    return fused_node(steps[0], steps[-1], ins, names, make(steps, place_of))


def run_steps(
    ex: Any, steps: Sequence[PlanNode], place_of: dict[int, int], ins: Sequence[Any]
) -> list[Any]:
    """A fused node's ``steps`` run one by one through ``ex.call_kernel`` (an Executor's:
    errors name the step), their outside inputs taken from ``ins`` at ``place_of``
    (`outside_inputs`); the last step's output.  What a fusion falls back to when a value
    is not one its fast path takes."""
    values = {slot: ins[place] for slot, place in place_of.items()}
    for pn in steps:
        values[pn.outputs[0]] = ex.call_kernel(pn, [values[s] for s in pn.inputs])[0]
    return [values[steps[-1].outputs[0]]]


def liveness(nodes: list[PlanNode], slots: dict[str, int], outputs: list[str]) -> None:
    keep = {slots[n] for n in outputs if n}
    last_use: dict[int, int] = {}
    for i, pn in enumerate(nodes):
        for s in pn.inputs:
            if s >= 0:
                last_use[s] = i
        for s in pn.implicit:
            last_use[s] = i
        for s in pn.outputs:
            if s >= 0 and s not in last_use:
                last_use[s] = i  # produced but never read: free right away
    frees: dict[int, list[int]] = {}
    for s, i in last_use.items():
        if s not in keep:
            frees.setdefault(i, []).append(s)
    for i, pn in enumerate(nodes):
        pn.free_after = tuple(frees.get(i, ()))
        if pn.kind == "kernel" and pn.domain == "" and pn.op_type in INPLACE_OPS:
            dead = tuple(
                s >= 0 and s in pn.free_after and pn.inputs.count(s) == 1 for s in pn.inputs
            )
            # Before opset 7 the binary ops had a broadcast attribute (not handled there).
            ok = any(dead) and (pn.op_type not in ("Add", "Sub", "Mul", "Div") or pn.opset >= 7)
            # Always set: a node list made again (fusion.py) moves last uses, and a copy
            # must not keep a "dead" mark its new position no longer earns.
            pn.inplace_dead = dead if ok else None


def _read_only(value: Any) -> Any:
    """An initializer's array made read-only (a copy when it views a writeable array):
    raw data decodes to a read-only view already, but values from the typed fields
    (float_data, int32_data: the usual form of scales and zero points) and sparse ones
    came out writeable, and the kernels' stores of derived weight forms key only on
    frozen arrays (kernels/_weight_cache.py): a dynamic-quantized GPT-2's int8 weights
    were packed again on every MatMulInteger call (3.6 ms each) because their zero
    points could have changed.  Nothing writes into a constant."""
    if type(value) is np.ndarray and value.flags.writeable:
        if value.base is not None:
            value = value.copy()
        value.flags.writeable = False
    return value


def _mark_foldable(nodes: list[PlanNode], const_slots: set[int]) -> None:
    const = set(const_slots)
    for pn in nodes:
        if (
            pn.kind == "kernel"
            and pn.op_type not in NONDETERMINISTIC_OPS
            and not pn.has_subgraphs
            and all(s < 0 or s in const for s in pn.inputs)
            and (pn.inputs or pn.op_type == "Constant")
        ):
            pn.foldable = True
            const.update(s for s in pn.outputs if s >= 0)
