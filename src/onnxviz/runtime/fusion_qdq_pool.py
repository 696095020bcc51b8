"""A QDQ model's MaxPool between two pairs run over the codes (unwatched runs).

After a QDQ ResNet's stem onnxruntime.quantization writes::

    conv codes -> DequantizeLinear -> MaxPool -> QuantizeLinear -> DequantizeLinear

Stepped, the pool runs over the dequantized float image.  A DequantizeLinear with a
positive scale is non-decreasing in the code, so the largest dequantized value of a
window is the dequantized largest code, the same float: `find_qdq_max_pools` runs the
chain as one node (`QdqMaxPool`) that pools the codes (`_int8.max_pool_codes`, int8
compared as int8) and maps each pooled code c to QuantizeLinear(DequantizeLinear(c)) by
the nodes' float32 steps (a table of the 256 codes, made per parameters; the identity
when the two pairs share their scale and zero point, as onnxruntime.quantization makes
them).  The conv before it then ends at its quantizer (fusion_qdq_conv.py), and its own
output pair's codes are exposed to later fused readers as a QdqAdd's are
(fusion_qdq_add.py): the float is written only when something still reads it.  A pad
as wide as the window, ceil_mode, dilations, the Indices output, a scale that is not a
positive normal float32, or other types run the nodes one by one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime.fusion_qdq import only_reader, plain_dequantizer, plain_quantizer, scalar
from onnxviz.runtime.fusion_qdq_add import (
    AddChain,
    codes_chain_node,
    pair_slots,
    run_codes_steps,
    take_output_pair,
)
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.kernels.quantize import dequantize_linear, quantize_linear
from onnxviz.runtime.plan import PlanNode, plain_kernel

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_F32 = np.dtype(np.float32)
_U8 = np.dtype(np.uint8)
_BYTES = (_U8, np.dtype(np.int8))
_TINY = float(np.finfo(np.float32).tiny)
_HUGE = float(np.finfo(np.float32).max) / 256


def _plain_pool(pn: PlanNode) -> bool:
    """A 2-D MaxPool this node runs: one output, explicit pads below the window, no
    ceil_mode or dilation, default storage order."""
    kernel = list(pn.attrs.get("kernel_shape") or ())
    pads = list(pn.attrs.get("pads") or [0] * 4)
    return (
        plain_kernel(pn, "MaxPool")
        and len(pn.inputs) == 1
        and len(kernel) == 2
        and pn.attrs.get("auto_pad", "NOTSET") in ("NOTSET", b"NOTSET")
        and not pn.attrs.get("ceil_mode", 0)
        and not pn.attrs.get("storage_order", 0)
        and list(pn.attrs.get("dilations") or [1, 1]) == [1, 1]
        and len(pads) == 4
        and all(0 <= p < kernel[i % 2] for i, p in enumerate(pads))
    )


def find_qdq_max_pools(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    producer: dict[int, int],
    keep: set[int],
    convs: list[list[int]],
    taken: set[int],
) -> list[AddChain]:
    """Every QdqMaxPool chain [conv's output dequantizer, MaxPool, QuantizeLinear,
    DequantizeLinear] whose input is a conv chain's (of ``convs``) output pair read by
    the pool alone; that conv chain loses its dequantizer (it ends at its quantizer)."""
    conv_ending = {chain[-1]: chain for chain in convs}
    in_convs = {p for chain in convs for p in chain}
    found: list[AddChain] = []
    for i, pn in enumerate(nodes):
        if i in taken or not _plain_pool(pn):
            continue
        dq = producer.get(pn.inputs[0])
        if (
            dq is None
            or dq not in conv_ending
            or not plain_dequantizer(nodes[dq])
            or only_reader(users, pn.inputs[0], keep) != i
        ):
            continue
        q = only_reader(users, pn.outputs[0], keep)
        if q is None or not plain_quantizer(nodes[q]) or nodes[q].inputs[0] != pn.outputs[0]:
            continue
        out_dq = only_reader(users, nodes[q].outputs[0], keep)
        if out_dq is None or not plain_dequantizer(nodes[out_dq]):
            continue
        if nodes[out_dq].inputs[0] != nodes[q].outputs[0]:
            continue
        if not take_output_pair(q, out_dq, convs, in_convs):
            continue
        conv_ending.pop(dq).pop()  # that conv now ends at its quantizer
        in_convs.discard(dq)
        found.append(AddChain([dq, i, q, out_dq], (), i, out_dq))
    return found


def qdq_max_pool_node(nodes: list[PlanNode], chain: AddChain) -> PlanNode:
    """The fused node: inputs (codes, their scale and zero point, the output pair's four
    parameters), outputs the pooled codes and, when needed, their float."""
    dq, pool, q, out_dq = (nodes[p] for p in chain.positions)
    # The codes' dequantizer's three inputs (its zero point -1 when absent).
    slots = list(dq.inputs) + [-1] * (3 - len(dq.inputs))
    names = list(dq.input_names) + [""] * (3 - len(dq.input_names))
    fused = QdqMaxPool([dq, pool, q, out_dq], slots + pair_slots(q, out_dq)[0], chain.float_needed)
    return codes_chain_node(pool, q, out_dq, chain.float_needed, (slots, names), fused)


class QdqMaxPool:
    """A MaxPool between QDQ pairs over the codes (see the module docstring)."""

    def __init__(self, steps: list[PlanNode], slots: list[int], float_needed: bool) -> None:
        self.steps = steps
        self.slots = slots
        self.float_needed = float_needed
        pool = steps[1]
        self.kernel = [int(k) for k in pool.attrs["kernel_shape"]]
        self.strides = [int(s) for s in pool.attrs.get("strides") or [1, 1]]
        self.pads = [int(p) for p in pool.attrs.get("pads") or [0, 0, 0, 0]]
        self._table_key: tuple[Any, ...] | None = None
        self._table: np.ndarray | None = None  # None: the identity

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        module = int8_products.module()
        out = None if module is None else self._codes(module, ins)
        return self._one_by_one(ex, ins) if out is None else out

    def _codes(self, module: Any, ins: list[Any]) -> list[Any] | None:
        t, s, z, qs, qz, ds, dz = ins
        if (
            type(t) is not np.ndarray
            or t.dtype not in _BYTES
            or t.ndim != 4
            or not t.size
            or not scalar(s, _F32)
            or not _TINY <= float(s.reshape(())) <= _HUGE  # positive: a non-decreasing DQ
            or (z is not None and not scalar(z, t.dtype))
            or not scalar(qs, _F32)
            or (qz is not None and not scalar(qz))
            or (qz is not None and qz.dtype not in _BYTES)
            or not scalar(ds, _F32)
            or (dz is not None and not scalar(dz, qz.dtype if qz is not None else _U8))
        ):
            return None
        n, c, h, w = t.shape
        (kh, kw), (sh, sw), (pt, pl, pb, pr) = self.kernel, self.strides, self.pads
        if h + pt + pb < kh or w + pl + pr < kw:
            return None  # the pool kernel raises it with the node named
        oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
        otype = qz.dtype if qz is not None else np.dtype(np.uint8)
        table = self._table_for(t.dtype, s, z, qs, qz, otype)
        pooled = np.empty((n, c, oh, ow), dtype=t.dtype)
        module.max_pool_codes(
            np.ascontiguousarray(t), n * c, h, w, kh, kw, sh, sw, pt, pl, pb, pr,
            t.dtype == np.int8, pooled,
        )  # fmt: skip
        codes = pooled.view(otype) if table is None else table[pooled.view(np.uint8)]
        if not self.float_needed:
            return [codes]
        f = dequantize_linear(codes, ds, dz)
        return [codes, f]

    def _table_for(
        self, dtype: np.dtype[Any], s: Any, z: Any, qs: Any, qz: Any, otype: np.dtype[Any]
    ) -> np.ndarray | None:
        """QuantizeLinear(DequantizeLinear(c)) for every code c, indexed by its byte;
        None when that is c itself (the same scale and zero point, and the type)."""
        key = (dtype, s, z, qs, qz)
        if self._table_key is not None and all(
            a is b for a, b in zip(self._table_key, key, strict=True)
        ):
            return self._table
        same = (
            dtype == otype
            and float(s.reshape(())) == float(qs.reshape(()))
            and (0 if z is None else int(z.reshape(())))
            == (0 if qz is None else int(qz.reshape(())))
        )
        table = None
        if not same:
            every = np.arange(256, dtype=np.uint8).view(dtype)
            table = quantize_linear(dequantize_linear(every, s, z), qs, qz)
            table = np.ascontiguousarray(table).view(otype)
        self._table_key, self._table = key, table
        return table

    def _one_by_one(self, ex: Executor, ins: list[Any]) -> list[Any]:
        values = {s: v for s, v in zip(self.slots, ins) if s >= 0}
        return run_codes_steps(ex, self.steps, values, self.float_needed)
