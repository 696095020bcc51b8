"""Chains of elementwise nodes run block by block, for unwatched runs (see fusion.py).

A transformer's GELU exported by PyTorch is Div -> Erf -> Add -> Mul -> Mul over a
[tokens, 3072] tensor: five passes through memory, each writing a fresh array.  When
each node of such a chain is the only user of the one before, and its other operand is
a scalar constant, the chain's own input, or a side value (a node of the input and a
scalar constant that only this step reads: the onnx wheel's BERT writes its GELU as
(x * 0.5) * (1 + erf(x / sqrt 2))), the chain runs as one node that walks the tensor in
cache-sized blocks and applies every step to a block before moving on: one pass through
memory, one output array.

Only float32/float64 values with scalar (single-element) constants of the same dtype are
fused at run time; anything else (a broadcasting operand, another dtype) runs the nodes
one by one, so results and errors are those of the plain kernels.  A constant known to
hold more than one value when the chain is found ends it (it would run its nodes one by
one every time).

A float32 chain of the steps whose bits C reproduces (Add, Sub, Mul, Div, Erf, Neg, Abs,
Relu, Tanh, Sigmoid) runs in the compiled kernel native/_chain.c when it is built: one call
for the whole tensor instead of a ufunc call per step and block, the same bits (a BERT
GELU chain: 0.90-0.97x the block path's time, both with the compiled erf, which is most
of it).

A QDQ model (onnxruntime.quantization's quantize_static) puts a QuantizeLinear ->
DequantizeLinear pair after every float op: its GELU is Div -> Erf -> [pair] -> Add ->
[pair] -> Mul(x) -> [pair] -> Mul, its attention scores [pair] -> Div -> [pair].  Such a
pair (fusion_qdq's, its integer value read by the dequantizer alone, both zero points
given) is one step of a chain of those compiled ops: the nodes' float32 steps

    t = round half to even (v / s) + z, clipped to the 8-bit range;  y = (t - z2) * s2

(fusion_qdq's QdqPair computes the same) in the compiled program, or in numpy on the
block path.  Only per-tensor float32 scales and int8/uint8 zero points of one type take
it, on a float32 chain; anything else at run time (per-axis parameters, 16-bit codes,
another dtype) runs the nodes one by one, and so does a NaN met by a pair (its cast to an
integer is the platform's choice).  Parameters known to be of another kind when the
chain is found leave the pair to QdqPair, as do chains of a lone pair.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime import quiet_loop
from onnxviz.runtime.fusion_qdq import only_reader, plain_dequantizer, plain_quantizer, scalar
from onnxviz.runtime.kernels import chain_program
from onnxviz.runtime.kernels.dense import dense as dense_copy
from onnxviz.runtime.kernels.math_activation import relu_into, sigmoid_into
from onnxviz.runtime.kernels.math_elementwise import float_power, small_power, tanh_into
from onnxviz.runtime.kernels.math_erf import erf_into
from onnxviz.runtime.kernels.nn_conv_nhwc import is_channels_last
from onnxviz.runtime.plan import PlanNode, fused_node, run_steps

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_F32 = np.dtype(np.float32)
_FLOATS = (_F32, np.dtype(np.float64))
# A QuantizeLinear -> DequantizeLinear pair's _Step.op_type; the code types the pair step
# takes, with their ranges.
QDQ = "QDQ"
SILU = "SiLU"  # v * sigmoid(v) of the running value: a Sigmoid node and its Mul
_CODES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}

_BINARY: dict[str, Callable[..., Any]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
    "Pow": float_power,
}


def _relu_into(x: np.ndarray, out: np.ndarray) -> None:
    relu_into(x, out)  # the Relu kernel's own max, bit for bit


_UNARY: dict[str, Callable[[np.ndarray, np.ndarray], Any]] = {
    "Erf": erf_into,
    "Tanh": lambda x, out: tanh_into(x, out),
    "Sigmoid": lambda x, out: sigmoid_into(x, out),
    "Exp": lambda x, out: np.exp(x, out=out),
    "Sqrt": lambda x, out: np.sqrt(x, out=out),
    "Neg": lambda x, out: np.negative(x, out=out),
    "Abs": lambda x, out: np.absolute(x, out=out),
    "Relu": _relu_into,
}

# Elements per block: a few blocks of this size stay in a core's L2 cache.
_BLOCK = 32768

# The compiled chain (native/_chain.c), None when compiled kernels are off or not built.
_NATIVE = chain_program.CHAIN


@dataclasses.dataclass(frozen=True)
class _Step:
    """One node of a chain: ``op`` applied to the running value ``v`` and, for a binary
    node, ``other`` (an input place of the fused node, -1 for the chain's input, or -2 for
    a side value); ``value_first`` says whether v is the node's first operand.  A side
    value is ``side`` = (op, input place of its scalar, whether the scalar is its first
    operand) of the chain's input: a node off the chain's path that only this step reads
    (the written-out GELU's h = x * 0.5 in y = h * (1 + erf(x / sqrt 2))).  A
    QuantizeLinear -> DequantizeLinear pair is op_type QDQ with ``qdq``, the input places
    of its scale, zero point, and the dequantizer's scale and zero point.  A ``tensor``
    step's ``other`` is the input place of another node's value, read element by element
    (it must have x's shape, or broadcast to it, when the chain runs)."""

    op_type: str
    other: int | None = None
    value_first: bool = True
    side: tuple[str, int, bool] | None = None
    qdq: tuple[int, int, int, int] | None = None
    tensor: bool = False  # ``other`` is a tensor operand's input place (not a scalar)


def _small_exponent(v: Any) -> bool:
    """``v`` is one value, 2 or 3: a Pow by it has a compiled step (the kernel's v * v
    and (v * v) * v, math_elementwise.float_power)."""
    return scalar(v) and small_power(v, v.ndim) != 0


def _eligible(pn: PlanNode) -> bool:
    if pn.kind != "kernel" or pn.domain != "" or pn.foldable or len(pn.outputs) != 1:
        return False
    if pn.op_type in _BINARY:
        return pn.opset >= 7 and len(pn.inputs) == 2 and min(pn.inputs) >= 0
    return pn.op_type in _UNARY and len(pn.inputs) == 1 and pn.inputs[0] >= 0


def _pair_params_fit(s: Any, z: Any, s2: Any, z2: Any) -> bool:
    """A pair's parameters are those of the compiled step: float32 scales, int8 or uint8
    zero points of one type, one value each."""
    return (
        scalar(s, _F32)
        and scalar(s2, _F32)
        and scalar(z)
        and z.dtype in _CODES
        and scalar(z2, z.dtype)
    )


def _pair_at(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    keep: set[int],
    used: set[int],
    values: dict[int, Any],
    i: int,
) -> int | None:
    """The position of the DequantizeLinear making the QuantizeLinear at ``i`` a pair a
    chain takes as one step: both plain (fusion_qdq's), the integer value read by the
    dequantizer alone and kept by nobody, both zero points given, the parameters known
    (``values``: the constants) to fit the compiled step or fed at run time; else None."""
    q = nodes[i]
    if not plain_quantizer(q) or len(q.inputs) != 3 or min(q.inputs) < 0:
        return None
    at = only_reader(users, q.outputs[0], keep)
    if at is None or at in used:
        return None
    dq = nodes[at]
    if (
        not plain_dequantizer(dq)
        or len(dq.inputs) != 3
        or min(dq.inputs) < 0
        or dq.inputs[0] != q.outputs[0]
        or dq.outputs[0] < 0
    ):
        return None
    params = (*q.inputs[1:], *dq.inputs[1:])
    if all(p in values for p in params) and not _pair_params_fit(*(values[p] for p in params)):
        return None  # another kind of pair for good: QdqPair runs it
    return at


def _pair_params(nodes: list[PlanNode], q: int, dq: int) -> tuple[int, ...]:
    return (*nodes[q].inputs[1:], *nodes[dq].inputs[1:])


def find_chains(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    producer: dict[int, int],
    const: set[int],
    keep: set[int],
    taken: set[int],
    values: dict[int, Any] | None = None,
    tensor_operands: bool = False,
    shapes: dict[int, tuple[Any, ...]] | None = None,
) -> list[tuple[int, list[int]]]:
    """(head slot, node positions) of every chain of two or more fusable steps (a
    QuantizeLinear -> DequantizeLinear pair one of them, at least one not a pair), none of
    them in ``taken``.  ``values``: the constants' values by slot, where known: a step
    whose constant operand is not one value would make the chain run its nodes one by
    one every time, so it ends the chain.  Pairs join only chains of the steps the
    compiled program runs (a chain with another op runs numpy's steps, where the pairs'
    own fused nodes are faster).  With ``tensor_operands`` a binary step's other operand may
    also be another node's value (a tensor step), and a chain may start at a binary op of
    two values: a second pass over what the first left (it would otherwise take a node a
    side value's chain needs first).  A tensor operand must be declared (``shapes``: the
    graph's shapes by slot) of the chain's input's shape, or of it without leading ones:
    one that broadcasts (an attention mask, a squeeze-excite gate) would make the chain
    copy it on every run, and the nodes it would take belong to other fusions."""
    declared = shapes or {}

    def same_shape(tensor: int, value: int) -> bool:
        """Whether ``tensor`` is declared of ``value``'s declared shape, or of it without
        some of its leading ones (every axis a known size or one symbolic name)."""
        t, v = declared.get(tensor), declared.get(value)
        if t is None or v is None or len(t) > len(v) or any(d is None for d in v):
            return False
        lead = len(v) - len(t)
        return all(d == 1 for d in v[:lead]) and t == v[lead:]

    chains: list[tuple[int, list[int]]] = []
    used: set[int] = set(taken)
    known = values or {}

    def side_node(slot: int, head: int, reader: int) -> int | None:
        """The position of the node making ``slot`` when it is a side value of a chain
        on ``head`` (a binary op of head and a scalar constant) that only ``reader``
        reads, else None."""
        at = producer.get(slot)
        if at is None or at in used or slot in keep or users.get(slot) != [reader]:
            return None
        pn = nodes[at]
        if pn.op_type not in chain_program.SIDE_OPS or not _eligible(pn) or not scalars(pn):
            return None
        a, b = pn.inputs
        return at if (a == head and b in const) or (b == head and a in const) else None

    def scalars(pn: PlanNode) -> bool:
        """No constant operand of ``pn`` is known to be more than one value (or one per
        channel, for the compiled program's binary ops)."""
        return all(
            scalar(known[s]) or (per_channel(known[s]) and pn.op_type in chain_program.SIDE_OPS)
            for s in pn.inputs
            if s in const and s in known
        )

    def compiles(pn: PlanNode) -> bool:
        """The compiled program has ``pn``'s step: an op of its own, or a Pow of the
        running value by a constant known to be 2 or 3 (`chain_program.power_step`)."""
        if pn.op_type in chain_program.OPS:
            return True
        e = pn.inputs[1] if pn.op_type == "Pow" else -1
        return e in const and e in known and _small_exponent(known[e])

    def channel_operand(pn: PlanNode) -> bool:
        return any(s in const and s in known and per_channel(known[s]) for s in pn.inputs)

    def silu_at(slot: int) -> tuple[int, int] | None:
        """(Sigmoid, Mul) positions when ``slot``'s two readers are a Sigmoid of it and the
        Mul of it by that Sigmoid, which nothing else reads."""
        consumers = users.get(slot, [])
        if len(consumers) != 2 or any(c in used for c in consumers):
            return None
        a, b = (nodes[c] for c in consumers)
        if a.op_type != "Sigmoid":
            consumers = consumers[::-1]
            a, b = b, a
        if (
            a.op_type != "Sigmoid"
            or b.op_type != "Mul"
            or not _eligible(a)
            or not _eligible(b)
            or a.inputs[0] != slot
            or a.outputs[0] in keep
            or users.get(a.outputs[0]) != [consumers[1]]
            or sorted(b.inputs) != sorted([slot, a.outputs[0]])
            or consumers[1] < consumers[0]
        ):
            return None
        return consumers[0], consumers[1]

    for i, pn in enumerate(nodes):
        if i in used:
            continue
        tensors: set[int] = set()  # the chain's tensor operands' slots
        dq = _pair_at(nodes, users, keep, used, known, i)
        if dq is not None:
            head = pn.inputs[0]
            if head in _pair_params(nodes, i, dq):
                continue
            steps, y, pairs, compiled = [i, dq], nodes[dq].outputs[0], 1, True
        elif _eligible(pn) and scalars(pn):
            live = [s for s in pn.inputs if s not in const]
            if not live:
                continue
            head = live[0]
            if any(s != live[0] for s in live):
                # two values: one is the chain's input, the other its first tensor
                if not tensor_operands or pn.op_type not in chain_program.SIDE_OPS:
                    continue
                if same_shape(live[1], live[0]):
                    tensors = {live[1]}
                elif same_shape(live[0], live[1]):
                    head, tensors = live[1], {live[0]}
                else:
                    continue
            steps, y, pairs = [i], pn.outputs[0], 0
            compiled = compiles(pn)
            if channel_operand(pn) and not compiled:
                continue
        else:
            continue
        channels = any(channel_operand(nodes[p]) for p in steps)
        n_tables = sum(channel_operand(nodes[p]) for p in steps)
        while y not in keep:
            if compiled and len(steps) + pairs + 2 > chain_program.MAX_STEPS:
                # The compiled program holds MAX_STEPS steps: a longer chain would run
                # its numpy steps one by one (a 1000-node chain of Adds of constants took
                # 1.46 ms a run that way); the next chain starts at its output.
                break
            silu = silu_at(y) if compiled else None
            if silu is not None:
                steps += list(silu)
                y = nodes[silu[1]].outputs[0]
                continue
            consumers = users.get(y, [])
            if len(consumers) != 1 or consumers[0] in used:
                break
            nxt = nodes[consumers[0]]
            dq = _pair_at(nodes, users, keep, used, known, consumers[0])
            if dq is not None:
                params = _pair_params(nodes, consumers[0], dq)
                if not compiled or nxt.inputs[0] != y or y in params or head in params:
                    break
                steps += [consumers[0], dq]
                pairs += 1
                y = nodes[dq].outputs[0]
                continue
            if not _eligible(nxt) or nxt.inputs.count(y) != 1 or not scalars(nxt):
                break
            if not compiles(nxt):
                if pairs or channels:
                    break
                compiled = False
            if channel_operand(nxt):
                # (the compiled program reads at most MAX_TABLES per-channel tables: a
                # chain of more ran its numpy steps, 133 us a run for 40 steps of 8
                # channels at 16 x 16, where it starts a new chain)
                if not compiled or tensors or n_tables >= chain_program.MAX_TABLES:
                    break
                channels = True
                n_tables += 1
            others = [s for s in nxt.inputs if s != y]
            side = None
            if any(s not in const and s != head for s in others):
                side = side_node(others[0], head, consumers[0]) if len(others) == 1 else None
                if side is None and (
                    tensor_operands
                    and len(others) == 1
                    and same_shape(others[0], head)
                    and nxt.op_type in chain_program.SIDE_OPS
                    and len(tensors | {others[0]}) <= chain_program.MAX_TENSORS
                    and not channels
                ):
                    tensors.add(others[0])  # another node's value, element by element
                    steps.append(consumers[0])
                    y = nxt.outputs[0]
                    continue
                if side is None or side in steps:
                    break
                steps.append(side)  # before the step that reads it
            steps.append(consumers[0])
            y = nxt.outputs[0]
        if len(steps) >= 2 and len(steps) > 2 * pairs:  # some step besides the pairs
            chains.append((head, steps))
            used.update(steps)
    return chains


def per_channel(v: Any) -> bool:
    """``v`` is an ndarray shaped like one value per channel of a tensor whose channels are
    its axis 1: one axis of more than one value, not the last ((C, 1, 1), (1, C, 1, 1): a
    GroupNorm's gamma and beta as torch exports them).  Whether it lines up with x's
    channels is checked when the chain runs (`_channel_fits`)."""
    return (
        type(v) is np.ndarray
        and v.size > 1
        and v.ndim >= 2
        and v.shape[-1] == 1
        and sum(d != 1 for d in v.shape) == 1
    )


def _channel_fits(v: Any, x: np.ndarray) -> bool:
    """``v`` (per_channel) broadcasts as one value per channel of ``x`` along its axis 1,
    without adding axes or images: (1, C, 1, ..., 1) once padded to x's rank."""
    if not per_channel(v) or v.dtype != x.dtype or v.ndim > x.ndim or x.ndim < 3:
        return False
    shape = (1,) * (x.ndim - v.ndim) + v.shape
    return shape[1] == x.shape[1] and all(d == 1 for i, d in enumerate(shape) if i != 1)


def chain_node(
    nodes: list[PlanNode], head: int, positions: list[int], constants: set[int]
) -> PlanNode:
    """The fused node running ``positions`` (a chain from find_chains) on slot ``head``;
    ``constants``: the constant slots (an operand that is none is a tensor operand)."""
    first, last = nodes[positions[0]], nodes[positions[-1]]
    ins: list[int] = [head]
    names: list[str] = [first.input_names[first.inputs.index(head)]]
    place_of = {head: 0}  # slot -> input place of the fused node (constants once each)
    steps: list[_Step] = []
    value = head
    sides: dict[int, tuple[str, int, bool]] = {}  # a side value's slot -> its _Step.side

    def place(slot: int, name: str) -> int:
        if slot not in place_of:
            place_of[slot] = len(ins)
            ins.append(slot)
            names.append(name)
        return place_of[slot]

    k = 0
    while k < len(positions):
        pos = positions[k]
        pn = nodes[pos]
        k += 1
        if pn.op_type == "QuantizeLinear":  # a pair (find_chains): its dequantizer next
            dq = nodes[positions[k]]
            k += 1
            slots = (*pn.inputs[1:], *dq.inputs[1:])
            labels = (*pn.input_names[1:], *dq.input_names[1:])
            s, z, s2, z2 = (place(slot, label) for slot, label in zip(slots, labels))
            steps.append(_Step(QDQ, qdq=(s, z, s2, z2)))
            value = dq.outputs[0]
            continue
        if pos != positions[0] and value not in pn.inputs:  # a side value (find_chains)
            a, b = pn.inputs
            j = 1 if a == head else 0
            sides[pn.outputs[0]] = (pn.op_type, place(pn.inputs[j], pn.input_names[j]), j == 0)
            continue
        if (
            pn.op_type == "Sigmoid"
            and value != head
            and k < len(positions)
            and nodes[positions[k]].op_type == "Mul"
            and sorted(nodes[positions[k]].inputs) == sorted([value, pn.outputs[0]])
        ):  # v * sigmoid(v) inside the chain (find_chains' silu_at): one step
            steps.append(_Step(SILU))
            value = nodes[positions[k]].outputs[0]
            k += 1
            continue
        if pn.op_type in _UNARY:
            steps.append(_Step(pn.op_type))
        else:
            a, b = pn.inputs
            value_first = a == value
            j = 1 if value_first else 0
            other_slot = pn.inputs[j]
            if other_slot == head:
                steps.append(_Step(pn.op_type, -1, value_first))  # the chain's input
            elif other_slot in sides:
                steps.append(_Step(pn.op_type, -2, value_first, sides[other_slot]))
            elif other_slot not in constants:
                # another node's value (find_chains; at a head of two values, the one
                # that is not the chain's input)
                at = place(other_slot, pn.input_names[j])
                steps.append(_Step(pn.op_type, at, value_first, tensor=True))
            else:
                steps.append(_Step(pn.op_type, place(other_slot, pn.input_names[j]), value_first))
        value = pn.outputs[0]
    chain = ElementwiseChain([nodes[p] for p in positions], steps, place_of)
    return fused_node(first, last, ins, names, chain)


class ElementwiseChain:
    """Runs a chain's steps block by block (see the module docstring)."""

    def __init__(self, nodes: list[PlanNode], steps: list[_Step], place_of: dict[int, int]) -> None:
        self.nodes = nodes
        self.steps = steps
        self.place_of = place_of  # outside slot -> input place
        # The input places of the tensor operands, in their index order in the program.
        self._tensor_places = sorted({st.other for st in steps if st.tensor and st.other})
        # The input places of the ops' scalars and of the pairs' parameters.
        self._scalar_places = sorted(
            {st.other for st in steps if st.other is not None and st.other > 0 and not st.tensor}
            | {st.side[1] for st in steps if st.side is not None}
        )
        # The places whose objects a held program was made with (all but x and tensors).
        tensors = set(self._tensor_places)
        self._fixed_places = [at for at in range(1, len(place_of)) if at not in tensors]
        self._pairs = [st.qdq for st in steps if st.qdq is not None]
        # The scalars of the last native call and their program (`_program_of`).
        self._held: tuple[tuple[Any, ...], bytes | None] | None = None
        # The compiled loop's first try (quiet_loop.step_mode): a held chain of that
        # program once its scalars are read-only constants, else None.
        self.quick: Any = None
        self.native = (
            _NATIVE is not None
            and len(steps) + len(self._pairs) <= chain_program.MAX_STEPS  # a pair: 2 steps
            and all(
                s.op_type in chain_program.OPS
                or s.qdq is not None
                or s.op_type == SILU
                or (s.op_type == "Pow" and s.value_first and s.side is None and not s.tensor)
                for s in steps
            )
        )
        # `_tables`' last answer: (x's shape, dtype, the operands, the tables).
        self._kept_tables: tuple[Any, Any, tuple[Any, ...], Any] | None = None
        # The places of the ops' operands that may hold a value per channel (a side
        # value's scalar is not one: its step's `other` is -2): `_channel_fits` decides
        # per call.
        self._binary_places = sorted(
            {st.other for st in steps if st.other is not None and st.other > 0 and not st.tensor}
        )

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        x = ins[0]
        if type(x) is not np.ndarray or x.dtype not in _FLOATS:
            return self._one_by_one(ex, ins)
        tables = self._tables(x, ins)
        if tables is None or not self._scalars_fit(x, ins, tables):
            return self._one_by_one(ex, ins)
        # Every step is elementwise and every other operand one value (or x itself), so
        # the steps run over x's own buffer in its order: a channels-last value (a conv
        # chain's, fusion_layout.py) stays so, and its result too.
        last = is_channels_last(x)
        tensors = self._tensor_operands(x, ins, last)
        if tensors is None:
            return self._one_by_one(ex, ins)
        dense = x.transpose(0, 2, 3, 1) if last else dense_copy(x)
        flat = dense.reshape(-1)
        out = np.empty_like(flat)
        # (None: a Pow by an exponent the program has no step for, numpy's pow below)
        program = self._program_of(ins, tables) if self.native and x.dtype == _F32 else None
        if program is not None:
            channels = None
            if tables:
                # per-channel operands: element i's channel, x's own buffer order
                plane = math.prod(x.shape[2:]) if not last else 1
                channels = (tuple(tables.values()), x.shape[1], plane, last)
            if _NATIVE.run(flat, out, program, channels, tensors):  # type: ignore[union-attr]
                return self._one_by_one(ex, ins)  # a pair met a NaN
        elif tables:
            return self._one_by_one(ex, ins)  # (per-channel operands: the compiled run's)
        else:
            scalars = {i: ins[i].reshape(()) for i in self._fixed_places}
            for start in range(0, flat.size, _BLOCK):
                stop = min(start + _BLOCK, flat.size)
                for at, t in zip(self._tensor_places, tensors):
                    scalars[at] = t[start:stop]  # (a block of the tensor, in x's order)
                if not self._run_block(flat[start:stop], out[start:stop], scalars):
                    return self._one_by_one(ex, ins)  # a pair met a NaN
        if last:
            return [out.reshape(dense.shape).transpose(0, 3, 1, 2)]
        # x's own shape: the flat copy gives a 0-d x one axis (a chain of a scalar input
        # returned shape (1,) where its nodes give ())
        return [out.reshape(x.shape)]

    def _tensor_operands(
        self, x: np.ndarray, ins: list[Any], last: bool
    ) -> tuple[np.ndarray, ...] | None:
        """The tensor operands as flat arrays in x's element order (x's buffer order: a
        channels-last x's too), each of x's dtype and of x's shape or broadcast to it (a
        copy then); None when one is not (the nodes run one by one: a broadcast that
        grows the value, another dtype, not an array)."""
        flats = []
        for at in self._tensor_places:
            t = ins[at]
            if type(t) is not np.ndarray or t.dtype != x.dtype:
                return None
            if t.shape != x.shape:
                try:
                    if np.broadcast_shapes(t.shape, x.shape) != x.shape:
                        return None
                except ValueError:
                    return None
                # (x's elements in x's order when only leading ones were dropped: a view)
                t = t.reshape(x.shape) if t.size == x.size else np.broadcast_to(t, x.shape)
            dense = t.transpose(0, 2, 3, 1) if last else t
            flats.append(dense_copy(dense).reshape(-1))
        return tuple(flats)

    def _tables(self, x: np.ndarray, ins: list[Any]) -> dict[int, np.ndarray] | None:
        """The ops' per-channel operands by input place (float32 C values each), {} when
        none; None when one holds more than one value but not one per channel of x.
        Kept for the same read-only operands and x's shape (the chain's constants)."""
        kept = self._kept_tables
        if kept is not None and kept[0] == x.shape and kept[1] == x.dtype:
            for at, c in zip(self._binary_places, kept[2]):
                if ins[at] is not c or c.flags.writeable:
                    break
            else:
                return kept[3]
        tables = self._find_tables(x, ins)
        operands = tuple(ins[at] for at in self._binary_places)
        self._kept_tables = (x.shape, x.dtype, operands, tables)
        return tables

    def _find_tables(self, x: np.ndarray, ins: list[Any]) -> dict[int, np.ndarray] | None:
        tables: dict[int, np.ndarray] = {}
        for at in self._binary_places:
            c = ins[at]
            if type(c) is np.ndarray and c.size > 1:
                if not _channel_fits(c, x) or len(tables) == chain_program.MAX_TABLES:
                    return None
                tables[at] = np.ascontiguousarray(c.reshape(-1))
        return tables

    def _program_of(
        self, ins: list[Any], tables: dict[int, np.ndarray] | None = None
    ) -> bytes | None:
        """`_program` for these inputs, made again only when a scalar is not the
        read-only array of the last call (they are the chain's constants: making the
        program each call was a third of a small GELU's time)."""
        held = self._held
        fixed = [ins[at] for at in self._fixed_places]
        if held is not None and len(held[0]) == len(fixed):
            for kept, given in zip(held[0], fixed):
                if kept is not given or given.flags.writeable:
                    break
            else:
                return held[1]
        order = list(tables or {})
        program = self._program(
            {at: ins[at].reshape(()) for at in self._fixed_places if at not in order}, order
        )
        self._held = (tuple(fixed), program)
        consts = fixed
        if program is not None and not any(c.flags.writeable for c in consts):
            # The compiled loop's call of this chain from now on (native/_chain.c's
            # `held`): these scalars, a float32 C-contiguous x of at least the ops'
            # scalars' dimensions; the same program, so the same bits as this call's (a
            # pair's NaN: the node's own call); anything else comes here.
            # With per-channel tables: an (N, C, ...) x channels first (held's check).
            min_ndim = max((ins[i].ndim for i in self._scalar_places), default=0)
            self.quick = _NATIVE.held(  # type: ignore[union-attr]  # native: checked
                program, tuple(consts), min_ndim,
                quiet_loop.decline, np.ndarray, np.empty_like,
                tuple(tables[at] for at in order) if tables else (),
                tuple(self._tensor_places),
            )  # fmt: skip
        return program

    def _program(self, scalars: dict[int, Any], tables: list[int] | None = None) -> bytes | None:
        """The steps as _chain.c's program, this call's scalar constants in it; an op
        whose operand's place is in ``tables`` reads that table (its index there).  None
        when a Pow's exponent is not one the program has a step for (2 or 3)."""
        parts: list[bytes] = []
        for step in self.steps:
            side = 0
            if step.op_type == SILU:
                parts.append(chain_program.silu())
                continue
            if step.tensor:
                index = self._tensor_places.index(step.other)  # type: ignore[arg-type]
                parts.append(chain_program.tensor_step(step.op_type, step.value_first, index))
                continue
            if tables and step.other in tables and step.side is None:
                parts.append(
                    chain_program.channel_step(
                        step.op_type, step.value_first, tables.index(step.other)
                    )
                )
                continue
            if step.qdq is not None:
                s, z, s2, z2 = (scalars[at] for at in step.qdq)
                signed = z.dtype == np.int8
                parts.append(chain_program.qdq(float(s), int(z), signed, float(s2), int(z2)))
                continue
            if step.other is None:
                kind, value = chain_program.NONE, 0.0
            elif step.other == -1:
                kind, value = chain_program.INPUT, 0.0
            elif step.side is not None:
                op, at, scalar_first = step.side
                kind, value = chain_program.SIDE, float(scalars[at])
                side = chain_program.side(op, scalar_first)
            else:
                kind, value = chain_program.SCALAR, float(scalars[step.other])
            if step.op_type == "Pow":
                power = chain_program.power_step(value) if kind == chain_program.SCALAR else None
                if power is None or not step.value_first:
                    return None  # an exponent changed since the plan: numpy's pow
                parts.append(power)
                continue
            parts.append(
                chain_program.program([(step.op_type, kind, step.value_first, value, side)])
            )
        return b"".join(parts)

    def _scalars_fit(self, x: np.ndarray, ins: list[Any], tables: dict[int, np.ndarray]) -> bool:
        """Every op's other operand is one element of x's dtype that does not add axes (or
        a per-channel table, `_tables`); every pair's parameters are those of the compiled
        step, on a float32 x."""
        if self._pairs and x.dtype != _F32:
            return False
        for at in self._scalar_places:
            if at in tables:
                continue
            c = ins[at]
            if not (scalar(c, x.dtype) and c.ndim <= x.ndim):
                return False
        return all(_pair_params_fit(*(ins[at] for at in pair)) for pair in self._pairs)

    def _run_block(self, xb: np.ndarray, vb: np.ndarray, scalars: dict[int, Any]) -> bool:
        """The steps over one block into vb; False when a pair met a NaN."""
        src = xb  # the running value lives in vb after the first step
        for step in self.steps:
            if step.op_type == SILU:  # the Sigmoid node's kernel, then the Mul's product
                gate = np.empty_like(src)
                sigmoid_into(src, gate)
                np.multiply(src, gate, out=vb)
            elif step.qdq is not None:
                if not _qdq_block(src, vb, *(scalars[at] for at in step.qdq)):
                    return False
            elif step.other is None:
                _UNARY[step.op_type](src, vb)
            else:
                if step.side is not None:
                    op, at, scalar_first = step.side
                    c = scalars[at]
                    other = _BINARY[op](c, xb) if scalar_first else _BINARY[op](xb, c)
                else:
                    other = xb if step.other == -1 else scalars[step.other]
                fn = _BINARY[step.op_type]
                if step.value_first:
                    fn(src, other, out=vb)
                else:
                    fn(other, src, out=vb)
            src = vb
        return True

    def _one_by_one(self, ex: Executor, ins: list[Any]) -> list[Any]:
        return run_steps(ex, self.nodes, self.place_of, ins)


def _qdq_block(src: np.ndarray, out: np.ndarray, s: Any, z: Any, s2: Any, z2: Any) -> bool:
    """A pair's float32 steps (kernels/quantize.py's, in their order) from src into out
    (float32, one shape; they may be one array); False, out spoilt, when a NaN met the
    rounding (its cast to an integer is the platform's)."""
    low, high = _CODES[z.dtype]
    np.divide(src, s, out=out)
    np.rint(out, out=out)
    out += np.float32(z)
    np.clip(out, low, high, out=out)
    if out.size and np.isnan(out.min()):
        return False
    out -= np.float32(z2)
    out *= s2
    return True
