"""A QDQ model's elementwise chain of one quantized value run as a table of its 256
codes (unwatched runs).

onnxruntime.quantization writes a SiLU (EfficientNet's, YOLO's) as::

    conv -> QuantizeLinear -> DequantizeLinear = x -+-> Sigmoid -> Q -> DQ -+
                                                    +-----------------------+-> Mul -> Q -> DQ

and a HardSwish, a GELU or a gate likewise: float steps between pairs, every one of
them reading x or values made from x and constants.  x is the dequantized value of an
8-bit code t, and every step acts on each element alone, so the chain's output is a
function of t: one of 256 values.  Stepped, it is a pass through memory per node (the
float chain fused by fusion_elementwise still pays a sigmoid per element); here the
chain's own nodes run once on the 256 dequantized codes (the same kernels, so each
entry is the stepped value to the bit), and the run is one pass (`_int8.qdq_table`):
each element's code, then its entry.

The code comes from one of two places:
- *absorbed*: x's QuantizeLinear -> DequantizeLinear pair is plan nodes whose codes only
  that dequantizer reads and whose x only the chain reads: the node quantizes the float
  before the pair with the quantizer's parameters (QdqPair's steps).
- *read back*: x is made by a node that stays (a fused QDQ conv's output pair): its
  codes are x quantized by its dequantizer's own scale and zero point, exactly, since
  x = float32((t - z) s) with |t - z| <= 255 and s a normal float32 (fusion_qdq's
  CODES_BACK_MAX).

`find_qdq_tables` takes the largest chain after x whose steps are elementwise ops of a
known per-element kernel (`_STEPS`) reading x, the chain's values or initializers, whose
values only the chain reads but one (its output, a float), and that holds a step whose
kernel is a function per element (`_COSTLY`: a sigmoid, tanh or erf; a chain of cheap
steps costs less as fusion_elementwise's one pass than the table's).  At run time every initializer the steps read must be one value of rank no
higher than x's (so the output has x's shape, each element its own code's entry), the
codes 8-bit with float32 scalar parameters, the output float32; anything else, a NaN in
the input, or a table whose steps raise runs the nodes one by one: the stepped values
and errors.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from onnxviz.runtime.fusion_qdq import (
    codes_fit,
    only_reader,
    plain_dequantizer,
    plain_quantizer,
    run_into,
)
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.kernels.nn_conv_nhwc import is_channels_last
from onnxviz.runtime.plan import PlanNode, fused_node, plain_kernel

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_F32 = np.dtype(np.float32)
# Ops whose kernels compute each element from that element alone, by the same steps
# whatever the array's length or layout (the compiled chain's functions, numpy's exact
# arithmetic), so an entry of the table is what the stepped run gives that code.
_STEPS = frozenset(
    {
        "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Max", "Min",
        "Relu", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh", "Erf",
        "QuantizeLinear", "DequantizeLinear",
    }
)  # fmt: skip
# Steps that cost a chain a function per element (a sigmoid: 0.3-0.5 ns a float where a
# pair or an add costs a few operations): a table pays only with one (its own pass,
# about 0.5 ns a float at AVX-512, 0.9 at AVX2, is more than a cheap chain costs).
_COSTLY = frozenset({"Sigmoid", "Tanh", "Erf"})
_MAX_STEPS = 32  # a longer chain is not a QDQ activation; its search stops there


class TableChain(NamedTuple):
    positions: list[int]  # [quantizer, dequantizer (absorbed only)], the steps: ascending
    dequantizer: int  # x's dequantizer (absorbed or not)
    absorbed: bool


def _step(pn: PlanNode) -> bool:
    return (
        pn.op_type in _STEPS
        and plain_kernel(pn, pn.op_type)
        and len(pn.outputs) == 1
        and pn.outputs[0] >= 0
        and not pn.attrs.get("block_size", 0)
    )


def _grow(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    const: set[int],
    taken: tuple[set[int], ...],
    constants: dict[int, Any],
    x: int,
) -> list[int]:
    """Positions of the steps that read x, the steps' values and initializers only, in
    plan order (a plan is in run order), none in a set of ``taken``, at most _MAX_STEPS."""
    inside = {x}
    found: list[int] = []
    heap = sorted(set(users.get(x, ())))
    seen = set(heap)
    while heap and len(found) < _MAX_STEPS:
        j = heapq.heappop(heap)
        pn = nodes[j]
        if any(j in t for t in taken) or not _step(pn):
            continue
        if not all(s < 0 or s in inside or s in const for s in pn.inputs):
            continue  # (plan order: every step value it could read is inside by now)
        if any(getattr(constants.get(s), "size", 1) != 1 for s in pn.inputs):
            continue  # a per-channel operand (a layer norm's scale): not one code's function
        found.append(j)
        inside.add(pn.outputs[0])
        for r in users.get(pn.outputs[0], ()):
            if r not in seen:
                seen.add(r)
                heapq.heappush(heap, r)
    return found


def _chain(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    keep: set[int],
    x: int,
    steps: list[int],
    x_private: bool,
) -> list[int] | None:
    """The largest set of ``steps`` that is one step's cone (that step and the steps it
    reads, back to x) whose values but that step's are read by the set alone (and x too
    when ``x_private``), that holds a costly step and ends in a float; in plan order, or
    None if there is none."""
    made_at = {nodes[p].outputs[0]: p for p in steps}
    best: list[int] = []
    for end in reversed(steps):
        cone = {end}
        todo = [end]
        while todo:
            for s in nodes[todo.pop()].inputs:
                p = made_at.get(s)
                if p is not None and p not in cone:
                    cone.add(p)
                    todo.append(p)
        if len(cone) <= len(best) or nodes[end].op_type == "QuantizeLinear":
            continue  # (codes out, a QDQ MatMul reads them: the table is of floats)
        if not any(nodes[p].op_type in _COSTLY for p in cone):
            continue
        last = nodes[end].outputs[0]
        if any(
            v != last and (v in keep or any(r not in cone for r in users.get(v, ())))
            for v in (nodes[p].outputs[0] for p in cone)
        ):
            continue
        if x_private and (x in keep or any(r not in cone for r in users.get(x, ()))):
            continue
        best = sorted(cone)
    return best or None


def find_qdq_tables(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    producer: dict[int, int],
    const: set[int],
    keep: set[int],
    claimed: set[int],
    hidden: set[int],
    constants: dict[int, Any],
) -> list[TableChain]:
    """Every chain of the module docstring none of whose steps is in ``claimed``, read
    back only from a dequantizer whose output some node writes (not in ``hidden``: the
    inner steps of fused nodes); empty when the int8 kernels are off."""
    if int8_products.module() is None:
        return []
    found: list[TableChain] = []
    used: set[int] = set()
    inner: set[int] = set()  # the tables' steps but their last: values no node writes
    for d_at, dq in enumerate(nodes):
        if (
            not plain_dequantizer(dq)
            or len(dq.inputs) != 3
            or not all(s in const for s in dq.inputs[1:])
            or d_at in hidden
            or d_at in inner
        ):
            continue
        x = dq.outputs[0]
        q_at = producer.get(dq.inputs[0])
        absorbed = (
            d_at not in claimed
            and d_at not in used
            and q_at is not None
            and q_at not in claimed
            and q_at not in used
            and plain_quantizer(nodes[q_at])
            and len(nodes[q_at].inputs) == 3
            and all(s in const for s in nodes[q_at].inputs[1:])
            and only_reader(users, dq.inputs[0], keep) == d_at
        )
        steps = _grow(nodes, users, const, (claimed, used), constants, x)
        prefix = _chain(nodes, users, keep, x, steps, absorbed) if steps else None
        if prefix is None and absorbed:
            # x read elsewhere too: the pair stays (a QdqPair) and its x is read back.
            absorbed = False
            prefix = _chain(nodes, users, keep, x, steps, False)
        if prefix is None:
            continue
        head = [q_at, d_at] if absorbed and q_at is not None else []
        used.update(head + prefix)
        inner.update(head + prefix[:-1])
        found.append(TableChain(head + prefix, d_at, absorbed))
    return found


def qdq_table_node(nodes: list[PlanNode], chain: TableChain) -> PlanNode:
    """The fused node of a chain from find_qdq_tables: inputs the float it reads (first:
    the layout passes through it, fusion_layout.py), x's dequantizer's parameters, then
    the steps' initializers; at the first node's identity."""
    steps = [nodes[p] for p in chain.positions]
    dq = nodes[chain.dequantizer]
    inside = {s for pn in steps for s in pn.outputs}
    first = steps[0].inputs[0] if chain.absorbed else dq.outputs[0]
    ins: list[int] = [first]
    names: list[str] = [steps[0].input_names[0] if chain.absorbed else dq.output_names[0]]
    for pn in (dq, *steps):
        for s, name in zip(pn.inputs, pn.input_names):
            if s >= 0 and s not in inside and s not in ins and s != dq.inputs[0]:
                ins.append(s)
                names.append(name)
    return fused_node(steps[0], steps[-1], ins, names, QdqTable(steps, dq, ins, chain.absorbed))


class QdqTable:
    """A chain of one quantized value as a table of its codes (module docstring)."""

    def __init__(self, steps: list[PlanNode], dq: PlanNode, slots: list[int], absorbed: bool):
        self.steps = steps  # what the node-by-node run runs ([q, dq] first when absorbed)
        self.dq = dq
        self.slots = slots
        self.absorbed = absorbed
        place = {s: k for k, s in enumerate(slots)}
        q = steps[0]
        # The code's parameters: the absorbed quantizer's, else x's dequantizer's.
        code_from = q if absorbed else dq
        self.code_places = (place[code_from.inputs[1]], place[code_from.inputs[2]])
        self.dq_places = (place[dq.inputs[1]], place[dq.inputs[2]])
        self.sink = steps[-1].outputs[0]
        self._key: tuple[Any, ...] | None = None  # the parameters the table was made for
        self._table: np.ndarray | None = None
        self._code: tuple[float, int, bool] = (1.0, 0, False)

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        mod = int8_products.module()
        x = ins[0]
        if (
            mod is not None
            and type(x) is np.ndarray
            and x.dtype == _F32
            and x.size
            and self._ready(ex, ins, mod.level())
        ):
            last = is_channels_last(x)
            src = x.transpose(0, 2, 3, 1) if last else np.ascontiguousarray(x)
            y = np.empty(src.shape, _F32)
            if mod.qdq_table(src, *self._code, self._table, y) == 0:
                return [y.transpose(0, 3, 1, 2) if last else y]
        return self._one_by_one(ex, ins)

    def _ready(self, ex: Executor, ins: list[Any], level: int) -> bool:
        """Whether a table and code parameters for these inputs are made.  Either answer
        is kept while every parameter is the same read-only object and x's rank is the
        same (a table that cannot be made is not tried again each run)."""
        key = (level, ins[0].ndim, *ins[1:])
        kept = self._key
        if (
            kept is not None
            and kept[:2] == key[:2]
            and len(kept) == len(key)
            and all(a is b for a, b in zip(kept[2:], key[2:]))
        ):
            return self._table is not None
        self._key = None
        made = self._make(ex, ins)
        self._table = None if made is None else made[0]
        if made is not None:
            self._code = made[1]
        if all(type(v) is np.ndarray and not v.flags.writeable for v in ins[1:]):
            self._key = key
        return made is not None

    def _make(
        self, ex: Executor, ins: list[Any]
    ) -> tuple[np.ndarray, tuple[float, int, bool]] | None:
        x = ins[0]
        cs, cz = (ins[p] for p in self.code_places)
        ds, dz = (ins[p] for p in self.dq_places)
        if not codes_fit(cs, cz, ds, dz, not self.absorbed):
            return None
        # Every other operand one value of rank at most x's: the output has x's shape.
        for v in ins[1:]:
            if v is not None and (type(v) is not np.ndarray or v.size != 1 or v.ndim > x.ndim):
                return None
        values = dict(zip(self.slots, ins))
        values[self.dq.inputs[0]] = np.arange(256, dtype=np.uint8).view(cz.dtype)
        run = self.steps[2:] if self.absorbed else self.steps
        try:
            run_into(ex, [self.dq, *run], values)
        except Exception:  # (the nodes one by one raise it on the real input)
            return None
        table = values[self.sink]
        if type(table) is not np.ndarray or table.dtype != _F32 or table.size != 256:
            return None
        code = (float(np.float32(cs.reshape(()))), int(cz.reshape(())), cz.dtype == np.int8)
        return np.ascontiguousarray(table.reshape(-1)), code

    def _one_by_one(self, ex: Executor, ins: list[Any]) -> list[Any]:
        # (not absorbed: x, the dequantizer's output, is slot 0's value already)
        return run_into(ex, self.steps, dict(zip(self.slots, ins)))[:1]
