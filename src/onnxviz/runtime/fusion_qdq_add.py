"""A QDQ model's residual Add run over the codes, in one pass (unwatched runs).

onnxruntime.quantization writes a residual block's end as float nodes between pairs::

    conv codes -> DequantizeLinear -+
                                    Add -> [Relu] -> QuantizeLinear -> DequantizeLinear
    skip codes -> DequantizeLinear -+

Stepped, that is two dequantized float images, their sum, and the output pair's two
passes.  `find_qdq_adds` runs the chain from the Add to the output DequantizeLinear as one
node (`QdqAdd`, `_int8.qadd`): each input is read as the codes it comes from, or as a
float32 value when it has none, and the result written as codes, then dequantized only
when something still reads the float.  Every step is the nodes' own float32 operation in
their order ((t - z) * s, a + b, max(v, 0), QuantizeLinear's steps, (t - z) * s), so the
values are the stepped ones, bit for bit.

Where an input's codes come from:
- *absorbed*: the input's DequantizeLinear reads codes and only this Add reads its
  output; the DequantizeLinear joins the node (a fused conv before it then ends at its
  quantizer, writing the codes: fusion_qdq_conv.py);
- *exposed*: the input is the output pair of another QdqAdd (a block's skip input): that
  node's codes are read with its dequantizer's parameters;
- *float*: anything else (a pair fused as a float QdqPair, a graph input).

A QdqAdd's codes are a slot every later fused reader can take (`exposed`): the next
block's first conv and its Add read them instead of the float, and the node writes the
float only when a reader that needs it remains (a graph output, a pooling head).
Anything unusual at run time (shapes that broadcast, other types, a NaN met by the
quantizer) runs the nodes one by one, with an exposed input dequantized first, so values
and errors are the stepped ones.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from onnxviz.runtime.fusion_qdq import (
    node_args,
    only_reader,
    plain_dequantizer,
    plain_quantizer,
    run_into,
    scalar,
)
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.plan import PlanNode, plain_kernel

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_F32 = np.dtype(np.float32)
_BYTES = (np.dtype(np.uint8), np.dtype(np.int8))
_NO_FLOAT = bytearray()  # qadd's "no float output" (an empty writable buffer)


class AddInput(NamedTuple):
    """How a QdqAdd reads one input: "absorbed" (its dequantizer at ``dq`` is a step),
    "exposed" (another QdqAdd's codes, dequantizer at ``dq``) or "float" (``dq`` -1)."""

    mode: str
    slot: int  # the codes slot, or the float value's
    dq: int


@dataclasses.dataclass
class AddChain:
    """A found QdqAdd: its positions (absorbed dequantizers, Add, [Relu], the output
    pair), how it reads its inputs, and whether it writes the float (set after every
    chain is found)."""

    positions: list[int]
    inputs: tuple[AddInput, ...]  # (none for a QdqMaxPool's chain: it reads absorbed codes)
    add: int
    out_dq: int
    float_needed: bool = True


def take_output_pair(q: int, out_dq: int, convs: list[list[int]], in_convs: set[int]) -> bool:
    """Whether a chain ending in the output pair ``q``, ``out_dq`` can be made beside the
    conv chains ``convs`` (positions ``in_convs``): yes when no conv chain holds the pair,
    or when one holds it as its absorbed input pair (the pair read by that conv alone),
    which it then gives up: that conv reads the chain's exposed codes instead."""
    if q not in in_convs and out_dq not in in_convs:
        return True
    for chain in convs:
        if chain[:2] == [q, out_dq]:
            del chain[:2]
            in_convs.difference_update((q, out_dq))
            return True
    return False


def find_qdq_adds(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    producer: dict[int, int],
    keep: set[int],
    const: set[int],
    convs: list[list[int]],
    taken: set[int],
    exposing: list[AddChain] | None = None,
) -> list[AddChain]:
    """Every QdqAdd chain (module docstring) whose steps are not in ``taken`` and whose
    Add takes two computed values (not a constant bias: one that broadcasts would run
    the nodes one by one every run).  A conv
    chain of ``convs`` (fusion_qdq_conv.find_qdq_convs' positions) whose output pair's
    dequantizer an Add absorbs loses that last position: it then ends at its quantizer."""
    conv_ending = {chain[-1]: chain for chain in convs}
    found: list[AddChain] = []
    # An output dequantizer whose codes a fused node exposes (``exposing``: other
    # chains, a QdqMaxPool's; then each QdqAdd found) -> that node's position.
    exposed: dict[int, int] = {c.out_dq: c.add for c in exposing or ()}
    used = set(taken)
    in_convs = {p for chain in convs for p in chain}
    for i, pn in enumerate(nodes):
        if (
            i in used
            or not plain_kernel(pn, "Add")
            or pn.opset < 7
            or len(pn.inputs) != 2
            or min(pn.inputs) < 0
            or pn.inputs[0] == pn.inputs[1]
            or const.intersection(pn.inputs)
        ):
            continue
        steps = [i]
        nxt = only_reader(users, pn.outputs[0], keep)
        if nxt is not None and plain_kernel(nodes[nxt], "Relu"):
            steps.append(nxt)
            nxt = only_reader(users, nodes[nxt].outputs[0], keep)
        if nxt is None or not plain_quantizer(nodes[nxt]):
            continue
        if nodes[nxt].inputs[0] != nodes[steps[-1]].outputs[0]:
            continue
        out_dq = only_reader(users, nodes[nxt].outputs[0], keep)
        if out_dq is None or not plain_dequantizer(nodes[out_dq]):
            continue
        if nodes[out_dq].inputs[0] != nodes[nxt].outputs[0]:
            continue
        steps += [nxt, out_dq]
        if used.intersection(steps) or not take_output_pair(nxt, out_dq, convs, in_convs):
            continue
        ways: list[AddInput] = []
        absorbed: list[int] = []
        for slot in pn.inputs:
            dq = producer.get(slot)
            if dq is not None and dq in exposed:
                ways.append(AddInput("exposed", nodes[dq].inputs[0], dq))
            elif (
                dq is not None
                and dq in conv_ending
                and plain_dequantizer(nodes[dq])
                and only_reader(users, slot, keep) == i
            ):
                ways.append(AddInput("absorbed", nodes[dq].inputs[0], dq))
                absorbed.append(dq)
            else:
                ways.append(AddInput("float", slot, -1))
        for dq in absorbed:
            conv_ending.pop(dq).pop()  # that conv now ends at its quantizer
        positions = sorted(absorbed) + steps
        used.update(positions)
        exposed[out_dq] = i
        found.append(AddChain(positions, (ways[0], ways[1]), i, out_dq))
    return found


def settle_float_outputs(
    adds: list[AddChain],
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    keep: set[int],
    codes_readers: set[int],
) -> None:
    """Mark which chains must still write their float: those whose value is kept or has
    a reader that is neither another QdqAdd reading the codes nor one of
    ``codes_readers`` (the positions of fused convs that read them)."""
    readers_by_codes = set(codes_readers)
    for chain in adds:
        for way in chain.inputs:
            if way.mode == "exposed":
                readers_by_codes.add(chain.add)
    for chain in adds:
        value = nodes[chain.out_dq].outputs[0]
        chain.float_needed = value in keep or any(
            r not in readers_by_codes for r in users.get(value, [])
        )


def qdq_add_node(nodes: list[PlanNode], chain: AddChain) -> PlanNode:
    """The fused node running ``chain``: inputs (a, its scale and zero point, b, ..., the
    output pair's four parameters), outputs the codes and, when needed, the float."""
    add, q, dq = nodes[chain.add], nodes[chain.positions[-2]], nodes[chain.out_dq]
    slots: list[int] = []
    names: list[str] = []

    def put(slot: int, name: str) -> None:
        slots.append(slot)
        names.append(name if slot >= 0 else "")

    for way, slot, name in zip(chain.inputs, add.inputs, add.input_names):
        if way.mode == "float":
            put(slot, name)
            put(-1, "")
            put(-1, "")
        else:
            src = nodes[way.dq]
            ins = list(src.inputs) + [-1] * (3 - len(src.inputs))
            in_names = list(src.input_names) + [""] * (3 - len(src.input_names))
            for s, n in zip(ins, in_names):
                put(s, n)
    steps = [nodes[p] for p in chain.positions]
    before = [nodes[w.dq] if w.mode == "exposed" else None for w in chain.inputs]
    fused = QdqAdd(steps, chain, before, slots + pair_slots(q, dq)[0], chain.float_needed)
    return codes_chain_node(add, q, dq, chain.float_needed, (slots, names), fused)


def pair_slots(q: PlanNode, dq: PlanNode) -> tuple[list[int], list[str]]:
    """An output pair's four parameters (each pair's scale and zero point, -1 and "" for
    an absent zero point): the last inputs of a QdqAdd or QdqMaxPool node."""
    slots: list[int] = []
    names: list[str] = []
    for src in (q, dq):
        slots += list(src.inputs[1:]) + [-1] * (3 - len(src.inputs))
        names += list(src.input_names[1:]) + [""] * (3 - len(src.input_names))
    return slots, names


def codes_chain_node(
    head: PlanNode,
    q: PlanNode,
    dq: PlanNode,
    float_needed: bool,
    inputs: tuple[list[int], list[str]],
    fused: Any,
) -> PlanNode:
    """The fused node of a chain that ends in the output pair ``q``, ``dq`` (a QdqAdd's,
    a QdqMaxPool's): ``head``'s identity, the inputs given then the pair's parameters,
    outputs the codes and, when ``float_needed``, their float."""
    params, param_names = pair_slots(q, dq)
    outputs = (q.outputs[0], dq.outputs[0]) if float_needed else (q.outputs[0],)
    names = (q.output_names[0], dq.output_names[0])[: len(outputs)]
    return dataclasses.replace(
        head,
        kind="fused",
        inputs=tuple(inputs[0] + params),
        input_names=tuple(inputs[1] + param_names),
        outputs=outputs,
        output_names=names,
        foldable=False,
        fused=fused,
        inplace_dead=None,
        call=None,
    )


def run_codes_steps(
    ex: Executor, steps: list[PlanNode], values: dict[int, Any], float_needed: bool
) -> list[Any]:
    """The node-by-node run of a chain ending in an output pair (``steps``, inputs in
    ``values`` by slot): its outputs, the codes then, when needed, the float."""
    result = run_into(ex, steps, values)
    codes = values[steps[-2].outputs[0]]
    return [codes, result[0]] if float_needed else [codes]


class QdqAdd:
    """An Add between QDQ pairs as one pass over codes (see the module docstring)."""

    def __init__(
        self,
        steps: list[PlanNode],
        chain: AddChain,
        before: list[PlanNode | None],
        slots: list[int],
        float_needed: bool,
    ) -> None:
        self.steps = steps
        self.slots = slots
        self.modes = tuple(w.mode for w in chain.inputs)
        self.relu = any(pn.op_type == "Relu" for pn in steps)
        self.before = before  # an exposed input's dequantizer (for the node-by-node run)
        self.float_needed = float_needed
        # The last pass's converted parameters, for calls with the same parameter objects
        # (compared by identity) and inputs of the same shape and types at the same level.
        self._ready: tuple[Any, ...] | None = None

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        module = int8_products.module()
        if module is None:
            return self._one_by_one(ex, ins)
        ready = self._ready
        if ready is not None:
            out = self._again(module, ready, ins)
            if out is not None:
                return out
        out = self._codes(module, ins)
        return self._one_by_one(ex, ins) if out is None else out

    def _again(self, module: Any, ready: tuple[Any, ...], ins: list[Any]) -> list[Any] | None:
        level, params, kinds, shape, a_args, b_args, out_args, otype = ready
        a, b = ins[0], ins[3]
        if (
            type(a) is not np.ndarray
            or type(b) is not np.ndarray
            or a.shape != shape
            or b.shape != shape
            or (a.dtype, b.dtype) != kinds
            or not a.flags.c_contiguous
            or not b.flags.c_contiguous
            or module.level() != level
        ):
            return None
        for k, v in params:
            if ins[k] is not v:
                return None
        return self._pass(module, a, a_args, b, b_args, out_args, otype)

    def _pass(
        self,
        module: Any,
        a: np.ndarray,
        a_args: tuple[Any, ...],
        b: np.ndarray,
        b_args: tuple[Any, ...],
        out_args: tuple[Any, ...],
        otype: np.dtype[Any],
    ) -> list[Any] | None:
        t = np.empty(a.shape, dtype=otype)
        f = np.empty(a.shape, dtype=_F32) if self.float_needed else None
        status = module.qadd(a, *a_args, b, *b_args, *out_args, t, _NO_FLOAT if f is None else f)
        if status < 0:
            return None  # a NaN met the quantizer: the platform's cast decides
        return [t] if f is None else [t, f]

    def _codes(self, module: Any, ins: list[Any]) -> list[Any] | None:
        a, a_s, a_z, b, b_s, b_z, qs, qz, ds, dz = ins
        if not (type(a) is np.ndarray and type(b) is np.ndarray and a.shape == b.shape):
            return None
        args: list[tuple[Any, ...]] = []
        for mode, x, s, z in ((self.modes[0], a, a_s, a_z), (self.modes[1], b, b_s, b_z)):
            if mode == "float":
                if x.dtype != _F32:
                    return None
                args.append((False, False, 1.0, 0))
                continue
            if (
                x.dtype not in _BYTES
                or not scalar(s, _F32)
                or (z is not None and not scalar(z, x.dtype))
            ):
                return None
            zp = 0 if z is None else int(z.reshape(()))
            args.append((True, x.dtype == np.int8, float(s.reshape(())), zp))
        otype = qz.dtype if qz is not None else np.dtype(np.uint8)
        if (
            otype not in _BYTES
            or not scalar(qs, _F32)
            or (qz is not None and not scalar(qz))
            or not scalar(ds, _F32)
            or (dz is not None and not scalar(dz, otype))
        ):
            return None
        out_args = (
            self.relu,
            otype == np.int8,
            float(qs.reshape(())),
            0 if qz is None else int(qz.reshape(())),
            float(ds.reshape(())),
            0 if dz is None else int(dz.reshape(())),
        )
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        out = self._pass(module, a, args[0], b, args[1], out_args, otype)
        params = tuple((k, v) for k, v in enumerate(ins) if k not in (0, 3))
        self._ready = None
        if out is not None:
            kinds = (a.dtype, b.dtype)
            self._ready = (module.level(), params, kinds, a.shape, *args, out_args, otype)
        return out

    def _one_by_one(self, ex: Executor, ins: list[Any]) -> list[Any]:
        """The steps as nodes, an exposed input dequantized first by its dequantizer."""
        values = {s: v for s, v in zip(self.slots, ins) if s >= 0}
        for dq in self.before:
            if dq is not None:
                values[dq.outputs[0]] = ex.call_kernel(dq, node_args(dq, values))[0]
        return run_codes_steps(ex, self.steps, values, self.float_needed)
