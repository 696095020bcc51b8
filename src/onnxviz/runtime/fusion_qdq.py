"""QuantizeLinear -> DequantizeLinear pairs run as one float node in unwatched runs.

onnxruntime.quantization's QDQ format puts a QuantizeLinear and a DequantizeLinear
after every quantized activation: the float value is rounded to the integer grid and
brought back.  Run node by node that is two kernels, an integer array and a float array
made, and a cast each way.  When the integer value is used by nothing but the
DequantizeLinear (and is no graph output), `find_qdq_pairs` pairs the two and
`QdqPair` computes the same value in float32 with no integer array::

    t = rint(x / s) + zp, clipped to the integer type's range;  y = (t - zp') * s'

Every step is the kernels' own float32 step in the same order, and the integers met on
the way are exact in float32 (|t| < 2^24), so the result is the stepped one to the bit.
With the compiled int8 module (`native.load("int8")`) and both zero points given, an
8-bit pair runs these same float32 steps in one pass in C (`_int8.qdq`: rint as the add
and take away of 1.5 * 2^23, exact below 2^22 where it matters; no fused multiply-add).
Only per-tensor parameters (one scale, one zero point) of 8- and 16-bit integer types,
with float32 input and output, take this path; a NaN in the input (whose cast to an
integer type is the platform's choice), per-axis or blocked parameters, other types or
bad operands run the two nodes one by one: same results and errors as stepping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime import native, quiet_loop
from onnxviz.runtime.kernels.nn_conv_nhwc import is_channels_last
from onnxviz.runtime.plan import PlanNode, fused_node, plain_kernel

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_F32 = np.dtype(np.float32)
# What the fused QDQ products share: the 8-bit code types, and the scales from which a
# dequantized value v = float32((t - z) s), |t - z| <= 255, gives its codes back exactly
# by QuantizeLinear's steps (s a normal float32, and the product unable to overflow).
CODE_TYPES = (np.dtype(np.uint8), np.dtype(np.int8))
NORMAL_MIN = float(np.finfo(np.float32).tiny)  # the smallest normal float32
CODES_BACK_MAX = float(np.finfo(np.float32).max) / 256
_INTS = {np.dtype(t): np.iinfo(t) for t in (np.int8, np.uint8, np.int16, np.uint16)}


def plain_quantizer(pn: PlanNode) -> bool:
    """A QuantizeLinear the fused QDQ nodes take: per tensor or per axis (the caller
    checks the parameters' sizes at run time), saturating, no explicit output type."""
    return (
        plain_kernel(pn, "QuantizeLinear")
        and 2 <= len(pn.inputs) <= 3
        and min(pn.inputs[:2]) >= 0
        and not pn.attrs.get("block_size", 0)
        and not pn.attrs.get("precision", 0)
        and not pn.attrs.get("output_dtype", 0)
        and pn.attrs.get("saturate", 1) == 1
    )


def plain_dequantizer(pn: PlanNode) -> bool:
    """A DequantizeLinear the fused QDQ nodes take: not blocked, float32 out, its input
    not also one of its parameters."""
    return (
        plain_kernel(pn, "DequantizeLinear")
        and 2 <= len(pn.inputs) <= 3
        and min(pn.inputs[:2]) >= 0
        and not pn.attrs.get("block_size", 0)
        and pn.attrs.get("output_dtype", 0) in (0, 1)
        and pn.inputs[0] not in pn.inputs[1:]
    )


def only_reader(users: dict[int, list[int]], slot: int, keep: set[int]) -> int | None:
    """The one node that reads ``slot``, when it is not kept (a graph output, watched)."""
    readers = users.get(slot, [])
    if slot < 0 or slot in keep or len(readers) != 1:
        return None
    return readers[0]


def input_pair(
    nodes: list[PlanNode],
    producer: dict[int, int],
    users: dict[int, list[int]],
    keep: set[int],
    slot: int,
) -> tuple[int, int] | None:
    """(quantizer, dequantizer) positions when ``slot`` is DequantizeLinear(QuantizeLinear(x))
    whose codes only that dequantizer reads (a fused QDQ product's input pair), else None."""
    dq_at = producer.get(slot)
    if dq_at is None or not plain_dequantizer(nodes[dq_at]):
        return None
    q_at = producer.get(nodes[dq_at].inputs[0])
    if (
        q_at is None
        or not plain_quantizer(nodes[q_at])
        or only_reader(users, nodes[q_at].outputs[0], keep) != dq_at
    ):
        return None
    return q_at, dq_at


def node_args(pn: PlanNode, values: dict[int, Any]) -> list[Any]:
    """The arguments of ``pn``'s kernel from ``values`` by slot (trailing absent inputs
    dropped, inner ones None): what a fused node's node-by-node run passes."""
    present = list(pn.inputs)
    while present and present[-1] < 0:
        present.pop()
    return [values[s] if s >= 0 else None for s in present]


def run_into(ex: Executor, steps: list[PlanNode], values: dict[int, Any]) -> list[Any]:
    """``steps`` run one by one through ``ex.call_kernel`` (errors name the step), their
    inputs taken from ``values`` by slot and every output put there; the last step's
    outputs.  A fused QDQ node's node-by-node run."""
    result: list[Any] = []
    for pn in steps:
        result = ex.call_kernel(pn, node_args(pn, values))
        for s, v in zip(pn.outputs, result):
            if s >= 0:
                values[s] = v
    return result


def scalar(v: Any, dtype: np.dtype[Any] | None = None) -> bool:
    """``v`` is an ndarray of one value (of ``dtype`` when given)."""
    return type(v) is np.ndarray and v.size == 1 and (dtype is None or v.dtype == dtype)


def codes_fit(cs: Any, cz: Any, sd: Any, zd: Any, read_back: bool) -> bool:
    """Whether a fused node that reads x as 8-bit codes takes these parameters: one
    float32 scale and one 8-bit zero point for the codes (``cs``, ``cz``), x's
    dequantizer's (``sd``, ``zd``) of that type; and when the codes are read back from x
    (``read_back``), a scale that gives them back exactly.  The codes read back from
    v = float32((t - z) s), |t - z| <= 255: v / s is within 255 2^-23 of t - z, so
    QuantizeLinear's steps give t back exactly when s is a normal float32 and the product
    cannot overflow."""
    return (
        scalar(cs, _F32)
        and scalar(cz)
        and cz.dtype in CODE_TYPES
        and scalar(sd, _F32)
        and scalar(zd, cz.dtype)
        and (not read_back or NORMAL_MIN <= float(sd.reshape(())) <= CODES_BACK_MAX)
    )


def _plain(pn: PlanNode, op_type: str) -> bool:
    return (
        plain_kernel(pn, op_type)
        and pn.outputs[0] >= 0
        and 2 <= len(pn.inputs) <= 3
        and min(pn.inputs[:2]) >= 0
    )


def find_qdq_pairs(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    keep: set[int],
    taken: set[int],
) -> list[list[int]]:
    """[Quantize position, Dequantize position] of every pair whose integer value only
    the Dequantize reads, neither in ``taken``."""
    pairs: list[list[int]] = []
    for i, q in enumerate(nodes):
        if i in taken or not _plain(q, "QuantizeLinear"):
            continue
        y = q.outputs[0]
        readers = users.get(y, [])
        if y in keep or len(readers) != 1 or readers[0] in taken:
            continue
        dq = nodes[readers[0]]
        if _plain(dq, "DequantizeLinear") and dq.inputs[0] == y and y not in dq.inputs[1:]:
            pairs.append([i, readers[0]])
    return pairs


def qdq_node(nodes: list[PlanNode], positions: list[int]) -> PlanNode:
    """The fused node running the pair at ``positions`` (from find_qdq_pairs)."""
    q, dq = nodes[positions[0]], nodes[positions[1]]
    ins = list(q.inputs) + [-1] * (3 - len(q.inputs))
    names = list(q.input_names) + [""] * (3 - len(q.input_names))
    for s, name in zip(dq.inputs[1:], dq.input_names[1:]):
        ins.append(s)
        names.append(name)
    ins += [-1] * (5 - len(ins))
    names += [""] * (5 - len(names))
    return fused_node(q, dq, ins, names, QdqPair(q, dq))


class QdqPair:
    """A QuantizeLinear and the DequantizeLinear after it, as one float pass (see the
    module docstring)."""

    def __init__(self, q: PlanNode, dq: PlanNode) -> None:
        self.q = q
        self.dq = dq
        # Attributes that change the computation away from the plain per-tensor case.
        self.plain_attrs = (
            not q.attrs.get("block_size", 0)
            and not q.attrs.get("precision", 0)
            and not dq.attrs.get("block_size", 0)
            and dq.attrs.get("output_dtype", 0) in (0, 1)  # 1: float32
        )
        # The compiled call the node loop tries first (native/_int8.c's held_qdq): made
        # on the first call that runs the C pass, for the parameters of that call (the
        # same constants every run; any others, a NaN, another layout go to this
        # object's call).  `_held_tried`: made or found none.
        self.quick: Any = None
        self._held_tried = False

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        x, s, zp, s2, zp2 = ins
        qtype = zp.dtype if type(zp) is np.ndarray else np.dtype(np.uint8)
        info = _INTS.get(qtype)
        out_dtype = self.q.attrs.get("output_dtype", 0)
        if (
            not self.plain_attrs
            or info is None
            or type(x) is not np.ndarray
            or x.dtype != _F32
            or not scalar(s, _F32)
            or not scalar(s2, _F32)
            or (zp is not None and not scalar(zp))
            or out_dtype  # an explicit output type: the kernel checks it against zp
            or (zp2 is not None and not scalar(zp2, qtype))
        ):
            return self._one_by_one(ex, ins)
        if info.bits == 8 and zp is not None and zp2 is not None:
            module = native.load("int8")
            if module is not None:
                # The same float32 steps in one pass in C (round half to even, no FMA),
                # elementwise, so over a channels-last value's own buffer (a conv chain's
                # layout passes through: fusion_layout.py), its result laid out the same.
                last = is_channels_last(x)
                src = x.transpose(0, 2, 3, 1) if last else np.ascontiguousarray(x)
                y = np.empty(src.shape, dtype=_F32)
                params = (
                    float(np.float32(s.reshape(()))), int(zp.reshape(())),
                    float(np.float32(s2.reshape(()))), int(zp2.reshape(())), info.min < 0,
                )  # fmt: skip
                if module.qdq(src, *params, y) != 0:
                    return self._one_by_one(ex, ins)
                if not self._held_tried:
                    self._held_tried = True
                    self.quick = module.held_qdq(
                        *params, len(ins), (1, 2, 3, 4), (s, zp, s2, zp2), quiet_loop.decline,
                        *native.held_arrays(),
                    )  # fmt: skip
                return [y.transpose(0, 3, 1, 2) if last else y]
        # The kernels' float32 steps (kernels.quantize), in their order.
        t = np.divide(x, s.reshape(()), dtype=_F32)
        np.rint(t, out=t)
        if zp is not None:
            t += np.float32(zp.reshape(()))
        np.clip(t, info.min, info.max, out=t)
        if t.size and np.isnan(t.min()):
            return self._one_by_one(ex, ins)  # NaN -> integer: the platform's cast
        if zp2 is not None:
            t -= np.float32(zp2.reshape(()))
        t *= s2.reshape(())
        return [t]

    def _one_by_one(self, ex: Executor, ins: list[Any]) -> list[Any]:
        q_ins = [v for v, s in zip(ins[:3], (*self.q.inputs, -1, -1)) if s >= 0]
        y = ex.call_kernel(self.q, q_ins)[0]
        dq_ins = [y] + [v for v, s in zip(ins[3:], (*self.dq.inputs[1:], -1, -1)) if s >= 0]
        return ex.call_kernel(self.dq, dq_ins)
