"""A QDQ model's pointwise (1x1) conv run as an exact integer product over channels-last
pixel rows (unwatched runs).

In a model of depthwise convs (MobileNet, EfficientNet) the QDQ conv node of
fusion_qdq_conv.py leaves its 1x1 convs float (its NCHW passes would undo the
channels-last layout the depthwise convs run in: fusion_layout.py).  Float, such a conv
costs a float32 GEMM of the dequantized values, about a third of the rate of the int8
product onnxruntime's QLinearConv runs (MobileNetV3-small's 7 px 96 <-> 576 channel convs:
50-60 us a node, onnxruntime's 17-20).  onnxruntime.quantization writes it as::

    x -> QuantizeLinear -> DequantizeLinear -> Conv 1x1 -> QuantizeLinear -> DequantizeLinear
         W (8-bit, constant) -> DequantizeLinear -^   ^- B (folded to float32)

and on channels-last pixel rows (the image's (N, H, W, C) buffer, P = N H W rows of C) the
conv is the product of the rows by W's transpose.  `QdqPointwise` runs the chain as::

    t = QuantizeLinear(x)                     the input's codes (QuantizeLinear's pass)
    acc = (t - zd) @ (W - zw)^T               exact int32 (_int8.gemm_rows)
    v = float32(acc) * float32(sd * sw[m]) + b[m]

then the output pair's float32 steps, the quantizer's division a product by float32(1 /
qs) (`_int8.scale_columns_qdq`, as QdqMatMul's and QdqConv's rescales), written as the
(N, H, W, M) rows: a channels-last output, the layout the depthwise conv after it reads in
place.  ``zd``, ``sd`` are the input dequantizer's zero point and scale (what the conv
reads is (t - zd) sd).  The input pair is absorbed when only this conv reads its
dequantized value; else the pair stays (its float value made by a QdqPair or another
fused node) and the codes are read back from that value by the dequantizer's own
parameters, exactly (as fusion_qdq_matmul's `_codes_back` does).

As with QdqConv and QdqMatMul, v is the conv of the real dequantized values within about
two float32 ulps, where the stepped float32 conv carries K 2^-24 of the sum of |terms|:
the two runs can differ by one quantization step of the output, only where the exact value
lies that close to a rounding boundary of its quantizer.

Scope: a 2-D Conv of one group with a 1x1 kernel, stride 1 and no pads; 8-bit codes with
one scale and zero point for the input and the output pair; an 8-bit constant weight with
one zero point (a symmetric quantizer's zeros) and one scale or one per output channel;
a constant float32 bias or none; K within the int8 kernel's bound.  Anything else met at
run time (a NaN, other shapes or types, the kernels off) runs the original nodes one by
one: the stepped values and errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from onnxviz.runtime.fusion_qdq import (
    CODE_TYPES,
    NORMAL_MIN,
    codes_fit,
    input_pair,
    only_reader,
    plain_dequantizer,
    plain_quantizer,
)
from onnxviz.runtime.fusion_qdq_matmul import constant_dequantizer, pair_args
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.plan import PlanNode, fused_node, outside_inputs, plain_kernel, run_steps

if TYPE_CHECKING:
    from types import ModuleType

    from onnxviz.runtime.executor import Executor

_F32 = np.dtype(np.float32)


# Input channels from which the integer product pays.  Below, gemm_rows' cost per row
# (its packing and tiles on a short K) and the rescale pass, slower per output than the
# QdqPair's, outweigh the product's: MobileNetV3-small's 56 px 16 -> 16 and 16 -> 72
# convs took 25 + 41 -> 79 us and 87 + 41 -> 135 us (float conv chain + its pairs ->
# this node), its 28 px 24 -> 72 and 24 -> 88 ones 38 + 11 -> 47; from 72 channels on
# 28 px 38 + 8 -> 42, and on 14 and 7 px, and the SE blocks' convs on one pixel, it wins
# (7 px 96 -> 576: 50 + 9 -> 27 us).
MIN_CHANNELS = 32


class PointwiseChain(NamedTuple):
    # [in-q, in-dq (absorbed only)], conv, out-q, out-dq: the positions the node replaces
    positions: list[int]
    weight_dq: int  # the weight's (constant) dequantizer, which stays a node
    in_dq: int  # the input's dequantizer (absorbed or not)
    absorbed: bool  # the input pair is one of the steps (only the conv reads its value)


def _pointwise(conv: PlanNode) -> bool:
    """A 1x1 Conv of one group, stride 1, no pads (what the rows product computes)."""
    attrs = conv.attrs
    return (
        attrs.get("group", 1) == 1
        and list(attrs.get("kernel_shape") or [1, 1]) == [1, 1]
        and all(s == 1 for s in attrs.get("strides") or ())
        and not any(attrs.get("pads") or ())
        and attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")
    )


def _weight_zero_point(w: Any, ws: Any, wz: Any, axis: int, mod: ModuleType) -> int | None:
    """The weight's one zero point when its constants are ones the node takes: an 8-bit
    (M, C, 1, 1) array of MIN_CHANNELS up to the kernel's K, one zero point for all
    channels, one float32 scale or one per output channel (``axis`` 0); else None."""
    if type(w) is not np.ndarray or w.dtype not in CODE_TYPES or w.ndim != 4:
        return None
    m, c = w.shape[:2]
    if w.shape[2:] != (1, 1) or not MIN_CHANNELS <= c <= mod.max_k() or m == 0:
        return None
    if type(ws) is not np.ndarray or ws.dtype != _F32:
        return None
    if ws.size != 1 and not (ws.ndim == 1 and ws.size == m and axis in (0, -4)):
        return None
    if wz is not None and type(wz) is not np.ndarray:
        return None
    return int8_products.one_zero_point(None if wz is None else wz.reshape(-1), w.dtype)


def _weight_fits(w_dq: PlanNode, constants: dict[int, Any], mod: ModuleType) -> bool:
    """`_weight_zero_point` of the weight dequantizer's constants, checked when the plan
    is made, so that a conv that could only run its nodes one by one keeps the float
    channels-last kernel instead."""
    wz = constants.get(w_dq.inputs[2]) if len(w_dq.inputs) == 3 and w_dq.inputs[2] >= 0 else None
    w, ws = constants.get(w_dq.inputs[0]), constants.get(w_dq.inputs[1])
    return _weight_zero_point(w, ws, wz, w_dq.attrs.get("axis", 1), mod) is not None


def find_qdq_pointwise(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    producer: dict[int, int],
    const: set[int],
    keep: set[int],
    claimed: set[int],
    constants: dict[int, Any],
) -> list[PointwiseChain]:
    """Every chain of the module docstring none of whose steps is in ``claimed`` (the
    QDQ convs, pools and Adds found before: an NCHW model's 1x1 convs are QdqConvs);
    empty when the int8 kernel is off."""
    mod = int8_products.module()
    if mod is None:
        return []
    found: list[PointwiseChain] = []
    used: set[int] = set()
    for i, conv in enumerate(nodes):
        if (
            i in claimed
            or not plain_kernel(conv, "Conv")
            or not 2 <= len(conv.inputs) <= 3
            or min(conv.inputs[:2]) < 0
            or not _pointwise(conv)
        ):
            continue
        if len(conv.inputs) == 3 and conv.inputs[2] >= 0 and conv.inputs[2] not in const:
            continue
        w_at = producer.get(conv.inputs[1])
        if w_at is None or not constant_dequantizer(nodes[w_at], const):
            continue
        if not _weight_fits(nodes[w_at], constants, mod):
            continue
        # The input: DequantizeLinear(QuantizeLinear(x)) with zero points (the codes' type).
        pair = input_pair(nodes, producer, users, keep, conv.inputs[0])
        if pair is None or len(nodes[pair[1]].inputs) != 3:
            continue
        q_at, dq_at = pair
        # The output: QuantizeLinear -> DequantizeLinear, each the only reader.
        out_q = only_reader(users, conv.outputs[0], keep)
        if out_q is None or not plain_quantizer(nodes[out_q]):
            continue
        out_dq = only_reader(users, nodes[out_q].outputs[0], keep)
        if (
            out_dq is None
            or not plain_dequantizer(nodes[out_dq])
            or nodes[out_dq].inputs[0] != nodes[out_q].outputs[0]
        ):
            continue
        tail = [i, out_q, out_dq]
        if claimed.intersection(tail) or used.intersection(tail):
            continue
        # The input pair joins when only this conv reads its value and no other chain
        # (or earlier fusion) has it: the output pair of a pointwise conv before this one
        # stays that conv's, and this one reads its codes back.
        head = [q_at, dq_at]
        absorbed = (
            only_reader(users, nodes[dq_at].outputs[0], keep) == i
            and not claimed.intersection(head)
            and not used.intersection(head)
        )
        positions = head + tail if absorbed else tail
        used.update(positions)
        found.append(PointwiseChain(positions, w_at, dq_at, absorbed))
    # A chain read by a later one through a pair that chain absorbed cannot happen (the
    # pair's value would have two readers); one whose output pair a later chain wanted
    # to absorb left it to the earlier one: both are consistent as found.
    return found


def qdq_pointwise_node(nodes: list[PlanNode], chain: PointwiseChain) -> PlanNode:
    """The fused node of a chain from find_qdq_pointwise, at the conv's identity (its
    label and timing key)."""
    steps = [nodes[p] for p in chain.positions]
    w_dq, in_dq = nodes[chain.weight_dq], nodes[chain.in_dq]
    conv_at = 2 if chain.absorbed else 0
    # The weight's dequantizer runs again only in the node-by-node fallback.
    steps.insert(conv_at, w_dq)
    ins, names, place_of = outside_inputs(steps)
    # The input dequantizer's parameters: the product's zero point and scale (and, not
    # absorbed, the codes read back by them).
    for slot, name in zip(in_dq.inputs[1:], in_dq.input_names[1:]):
        if slot >= 0 and slot not in place_of:
            place_of[slot] = len(ins)
            ins.append(slot)
            names.append(name)
    fused = QdqPointwise(steps, place_of, in_dq, chain.absorbed)
    return fused_node(steps[conv_at + 1], steps[-1], ins, names, fused)


class _Weights(NamedTuple):
    """What the product needs of the weight, made once per weight arrays and level."""

    key: tuple[Any, ...]  # level, then the arrays it was made from (by identity)
    channels: int  # C (K of the product)
    outputs: int  # M (N of the product)
    columns: bytes  # W^T packed for gemm_rows
    scale: np.ndarray  # float32(sd * sw[m])
    bias: np.ndarray | bytes  # float32 per output channel, or b"": none


class _Ready(NamedTuple):
    """Last run's converted arguments, held while every parameter stays the same
    read-only object (`QdqPointwise._again`)."""

    params: tuple[tuple[int, Any], ...]  # (input place, the object there) but x's
    level: int
    channels: int
    code_dtype: np.dtype[Any]
    code_scale: np.float32
    code_zero: int
    signed: bool
    zd: int
    weights: _Weights
    output: tuple[Any, ...]  # scale_columns_qdq's signed, qs, qz, dqs, dqz


class QdqPointwise:
    """A QDQ pointwise conv chain as one exact integer product (module docstring)."""

    def __init__(
        self, steps: list[PlanNode], place_of: dict[int, int], in_dq: PlanNode, absorbed: bool
    ) -> None:
        self.steps = steps  # what the node-by-node run runs
        self.place_of = place_of
        self.absorbed = absorbed
        at = 2 if absorbed else 0
        w_dq, conv, out_q, out_dq = steps[at : at + 4]
        q = steps[0] if absorbed else None

        def place(slot: int | None) -> int | None:
            return None if slot is None or slot < 0 else place_of.get(slot)

        def inputs(pn: PlanNode, k: int) -> int | None:
            return place(pn.inputs[k]) if k < len(pn.inputs) else None

        # x: the float the input quantizer reads (absorbed), else the dequantized value;
        # its codes by the quantizer's parameters, or back by the dequantizer's.
        self.x_place = inputs(q, 0) if q is not None else place(conv.inputs[0])
        self.code_places = (
            (inputs(q, 1), inputs(q, 2)) if q is not None else (inputs(in_dq, 1), inputs(in_dq, 2))
        )
        self.dq_places = (inputs(in_dq, 1), inputs(in_dq, 2))
        self.w_places = (inputs(w_dq, 0), inputs(w_dq, 1), inputs(w_dq, 2))
        self.w_axis = int(w_dq.attrs.get("axis", 1))
        self.bias_place = inputs(conv, 2)
        self.out_places = (inputs(out_q, 1), inputs(out_q, 2), inputs(out_dq, 1), inputs(out_dq, 2))
        self._weights: _Weights | None = None
        self._ready: _Ready | None = None

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        ready = self._ready
        if ready is not None and all(ins[p] is v for p, v in ready.params):
            y = self._again(ready, ins[self.x_place])  # type: ignore[index]
            if y is not None:
                return [y]
        y = self._integer(ins)
        if y is not None:
            return [y]
        return run_steps(ex, self.steps, self.place_of, ins)

    def _again(self, ready: _Ready, x: Any) -> np.ndarray | None:
        """Last run's call for a new x, every parameter the same object (checked by the
        caller): no checks but x's and no conversions (a SE block's 1x1 convs on one
        pixel cost their checks more than their product)."""
        mod = int8_products.module()
        if (
            mod is None
            or type(x) is not np.ndarray
            or x.dtype != _F32
            or x.ndim != 4
            or x.shape[1] != ready.channels
            or not x.size
            or mod.level() != ready.level
        ):
            return None
        return self._rows(mod, ready, x)

    @staticmethod
    def _rows(mod: ModuleType, ready: _Ready, x: np.ndarray) -> np.ndarray | None:
        """The product over x's channels-last rows (None: a NaN, the nodes then say what
        it gives)."""
        rows = x.transpose(0, 2, 3, 1)  # a channels-last x: its own buffer, no copy
        n, h, w = rows.shape[:3]
        p, m = n * h * w, ready.weights.outputs
        codes = np.empty(p * ready.channels, ready.code_dtype)
        src = np.ascontiguousarray(rows).reshape(-1)
        if mod.quantize(src, ready.code_scale, ready.code_zero, ready.signed, codes) != 0:
            return None
        acc = np.empty(p * m, np.int32)
        mod.gemm_rows(codes, p, ready.signed, ready.zd, ready.weights.columns, acc)
        y = np.empty((n, h, w, m), _F32)
        weights = ready.weights
        status = mod.scale_columns_qdq(
            acc, p, m, weights.scale, weights.bias, *ready.output, y.reshape(-1)
        )
        return y.transpose(0, 3, 1, 2) if status == 0 else None

    @staticmethod
    def _get(ins: list[Any], place: int | None) -> Any:
        return None if place is None else ins[place]

    def _weights_for(self, mod: ModuleType, ins: list[Any], sd: Any) -> _Weights | None:
        w, ws, wz = (self._get(ins, p) for p in self.w_places)
        b = self._get(ins, self.bias_place)
        key = (mod.level(), w, ws, wz, sd, b)
        kept = self._weights
        if (
            kept is not None
            and kept.key[0] == key[0]
            and all(a is c for a, c in zip(kept.key[1:], key[1:]))
        ):
            return kept
        self._weights = None
        zb = _weight_zero_point(w, ws, wz, self.w_axis, mod)
        if zb is None:
            return None
        m, c = w.shape[:2]
        if b is not None and (type(b) is not np.ndarray or b.dtype != _F32 or b.shape != (m,)):
            return None
        scale = np.ascontiguousarray(np.broadcast_to(sd.reshape(()) * ws.reshape(-1), (m,)), _F32)
        if not (np.all(scale >= NORMAL_MIN) and np.all(np.isfinite(scale))):
            return None
        columns = bytes(
            mod.pack_columns(
                np.ascontiguousarray(w.reshape(m, c).T).view(np.uint8), c, m, w.dtype == np.int8, zb
            )
        )
        bias = b"" if b is None else np.ascontiguousarray(b)
        made = _Weights(key, c, m, columns, scale, bias)
        # Kept only when every array is a constant (read-only: the same values next run).
        if all(v is None or (type(v) is np.ndarray and not v.flags.writeable) for v in key[1:]):
            self._weights = made
        return made

    def _integer(self, ins: list[Any]) -> np.ndarray | None:
        """The chain's output by the integer product, or None to run it node by node."""
        mod = int8_products.module()
        if mod is None or self.x_place is None:
            return None
        x = ins[self.x_place]
        if type(x) is not np.ndarray or x.dtype != _F32 or x.ndim != 4 or not x.size:
            return None
        cs, cz = (self._get(ins, p) for p in self.code_places)
        sd, zd = (self._get(ins, p) for p in self.dq_places)
        if not codes_fit(cs, cz, sd, zd, not self.absorbed):
            return None
        output = pair_args(*(self._get(ins, p) for p in self.out_places))
        weights = self._weights_for(mod, ins, sd)
        if output is None or weights is None or x.shape[1] != weights.channels:
            return None
        ready = _Ready(
            params=tuple((k, v) for k, v in enumerate(ins) if k != self.x_place),
            level=mod.level(),
            channels=weights.channels,
            code_dtype=cz.dtype,
            code_scale=np.float32(cs.reshape(())),
            code_zero=int(cz.reshape(())),
            signed=cz.dtype == np.int8,
            zd=int(zd.reshape(())),
            weights=weights,
            output=output,
        )
        y = self._rows(mod, ready, x)
        self._ready = None
        # Held only when every parameter is a constant (read-only: the same values next
        # run) and the weights were kept.
        if (
            y is not None
            and weights is self._weights
            and all(type(v) is np.ndarray and not v.flags.writeable for _, v in ready.params)
        ):
            self._ready = ready
        return y
