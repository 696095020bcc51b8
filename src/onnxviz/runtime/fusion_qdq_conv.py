"""A QDQ model's quantized Conv run as an exact integer product (unwatched runs).

onnxruntime.quantization's QDQ format writes a quantized conv as float nodes around
integers::

    x -> QuantizeLinear -> DequantizeLinear -> Conv -> [Relu] -> QuantizeLinear -> DequantizeLinear
                           W (int8) -> DequantizeLinear -^   ^- B (int32) -> DequantizeLinear

Stepped, the Conv multiplies the dequantized float32 values in float32.  When the
compiled int8 kernel is there (`int8_products.module()`, AVX2 or better: its plain-C level
is slower than float BLAS), `find_qdq_convs` runs that whole chain as one node
(`QdqConv`): the input quantized to bytes (QuantizeLinear's float32 steps, in C), one
exact integer product per image::

    acc[m, p] = sum_k (W[m, k] - zw[m]) * (X[k, p] - zx)          (int32, no rounding)

read straight from the zero-padded image (the conv's flat layout padded with the zero
point, no im2col), then ``v = float32(acc) * s[m] + b[m]`` in float32 steps with
``s[m] = float32(sx * sw[m])`` (a conversion, a multiply and an add, each rounded, no
fused multiply-add), Relu when the chain has one, and the output QuantizeLinear ->
DequantizeLinear in float32 steps, the QdqPair's, but for the quantizer's division,
taken as a product by float32(1 / qs) (`_int8.c`'s rescale_row_generic: within an ulp of
the quotient, inside v's own rounding below; with the rounding done by the int32
conversion it halves the pass: QDQ ResNet-18 w32's rescales 563 -> 415 us a run).

What it gives.  ``v`` is the conv of the *real* dequantized values rounded four times
(the scale, the conversion, the product, the sum): within about 2 float32 ulp of the
exact value, and v * float32(1 / qs) within about 2 more of the exact quotient (a float64 rescale, rounded once, cost twice the instructions: the pass over
every output is as long as a third of the product's time).  The stepped
float32 conv rounds every dequantized input, weight and partial sum, an error of order
K * 2^-24 of the sum of |terms|.  So the two runs can differ where the exact value lies
within that error of a rounding boundary of the output quantizer: there the output
differs by one quantization step, and the integer path is the one on the exact value's
side.  tests/runtime/test_native_int8.py checks the node bit for bit against a numpy
model of this definition, and the stepped run within one step, only where the exact
value lies that close to a boundary.

Scope: 2-D Conv, group 1, non-negative pads, float32 activations with one scale and an
8-bit zero point (both quantizers), int8/uint8 weights per tensor or per output channel
(axis 0), K = C*kh*kw <= the kernel's max_k.  Anything else at run time (a NaN met by a
quantizer, other types or shapes) runs the original nodes one by one, so values and
errors are the stepped ones.  The input pair is absorbed when the Conv is the only user
of its float value (and it is not the previous fused conv's output pair); else the
dequantized value is made anyway (by the QdqPair or the previous fused conv), and this
node gets the integers back from it exactly: v = float32((t - z) * s) with |t - z| <=
255, so v / s is within 255 * 2^-23 of t - z and rounds back to it (s a normal float32).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from onnxviz.runtime.fusion_qdq import (
    CODE_TYPES,
    CODES_BACK_MAX,
    NORMAL_MIN,
    input_pair,
    node_args,
    only_reader,
    plain_dequantizer,
    plain_quantizer,
    run_into,
    scalar,
)
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.kernels.int8_products import layout_plan, packed_weight
from onnxviz.runtime.kernels.nn_conv import conv_geometry
from onnxviz.runtime.kernels.nn_geometry import scratch
from onnxviz.runtime.plan import PlanNode, fused_node, plain_kernel

if TYPE_CHECKING:
    from types import ModuleType

    from onnxviz.runtime.executor import Executor

_F32 = np.dtype(np.float32)


def int8_module() -> ModuleType | None:
    """The compiled int8 kernel when it runs at AVX2 or better, else None."""
    return int8_products.module()


def _short_stem(w: Any) -> bool:
    """Whether the weight ``w`` (when known) is a short image stem's (see _STEM_TERMS)."""
    return (
        type(w) is np.ndarray
        and w.ndim == 4
        and w.shape[1] <= _STEM_CHANNELS
        and w.shape[2] * w.shape[3] > 1
        and math.prod(w.shape[1:]) < _STEM_TERMS
    )


# An image stem of few terms per output (at most 4 input channels, C * kh * kw below 64:
# a 3x3 one) stays float: the float direct conv runs it over phase planes of the NCHW
# image (native/_conv.c's few-input-channels tiles), where the integer product is short
# and its passes around it are not (MobileNetV3's 3x3/2 stem of 3 channels, S8S8, one
# thread, the model 5.49 -> 4.80 ms).  A 7x7 stem's 147 terms stay integer (ResNet-18
# w32's: 7.02 ms as integer, 7.13 float).
_STEM_CHANNELS = 4
_STEM_TERMS = 64


def _kernel(conv: PlanNode, values: dict[int, Any] | None) -> list[int]:
    """The conv's kernel_shape, or its weight's spatial sizes when it has none (the
    attribute is optional) and the weight is a known constant: its int8 initializer
    behind the constant dequantizer is not, so the dequantized one folded is looked for."""
    kernel = list(conv.attrs.get("kernel_shape") or ())
    w = (values or {}).get(conv.inputs[1])
    if not kernel and type(w) is np.ndarray and w.ndim >= 3:
        kernel = list(w.shape[2:])
    return kernel


def find_qdq_convs(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    const: set[int],
    keep: set[int],
    values: dict[int, Any] | None = None,
) -> list[list[int]]:
    """Positions [q, dq (both or neither), conv, relu (or not), out-q, out-dq] of every
    QDQ conv chain (module docstring) the int8 kernel can run and that pays; empty when it
    is off.  ``values``: the constants known (initializers, folded values) by slot, for
    the weights' shapes."""
    if int8_module() is None:
        return []
    producer: dict[int, int] = {}
    for i, pn in enumerate(nodes):
        for s in pn.outputs:
            if s >= 0:
                producer[s] = i
    found: list[list[int]] = []
    used: set[int] = set()
    ending: dict[int, list[int]] = {}  # a found chain's last position (its out-dq) -> chain
    # A model of depthwise convs (MobileNet, EfficientNet: the int8 kernel runs group 1
    # only) keeps its 1x1 convs float: they then run channels-last with the depthwise
    # convs between them, the quantize-dequantize pairs elementwise over the same layout
    # (fusion_layout.py), where this node's NCHW passes (the input quantized into the
    # flat layout, the output rescaled) and layout changes around every depthwise conv
    # cost more than the integer product saves (MobileNetV3-small, default S8S8
    # quantization, one thread: 8.4 -> 5.5 ms; ResNet-50 S8S8, no depthwise convs,
    # would lose 49.6 -> 62.2 ms with them float: it keeps them here).
    separable = any(plain_kernel(pn, "Conv") and pn.attrs.get("group", 1) > 1 for pn in nodes)
    for i, conv in enumerate(nodes):
        if (
            not plain_kernel(conv, "Conv")
            or not 2 <= len(conv.inputs) <= 3
            or min(conv.inputs[:2]) < 0
            or conv.attrs.get("group", 1) != 1
            or (separable and _kernel(conv, values) == [1, 1])
            or _short_stem((values or {}).get(conv.inputs[1]))
            or conv.inputs[1] not in const
            or (len(conv.inputs) == 3 and conv.inputs[2] >= 0 and conv.inputs[2] not in const)
        ):
            continue
        # The input: DequantizeLinear(QuantizeLinear(x)), the integer read by nothing else.
        pair = input_pair(nodes, producer, users, keep, conv.inputs[0])
        if pair is None:
            continue
        q_at, dq_at = pair
        # The weight: a constant DequantizeLinear of constants.
        w_at = producer.get(conv.inputs[1])
        if w_at is None:
            continue
        wdq = nodes[w_at]
        if (
            wdq.kind != "kernel"
            or wdq.domain != ""
            or wdq.op_type != "DequantizeLinear"
            or not 2 <= len(wdq.inputs) <= 3
            or not all(s in const for s in wdq.inputs if s >= 0)
            or wdq.attrs.get("block_size", 0)
            or wdq.attrs.get("output_dtype", 0) not in (0, 1)
        ):
            continue
        # The output: [Relu ->] QuantizeLinear -> DequantizeLinear, each the only user.
        chain = [i]
        nxt = only_reader(users, conv.outputs[0], keep)
        if nxt is not None and plain_kernel(nodes[nxt], "Relu"):
            if tuple(nodes[nxt].inputs) != (conv.outputs[0],):
                continue
            chain.append(nxt)
            nxt = only_reader(users, nodes[nxt].outputs[0], keep)
        if (
            nxt is None
            or not plain_quantizer(nodes[nxt])
            or nodes[nxt].inputs[0] != nodes[chain[-1]].outputs[0]
        ):
            continue
        out_dq = only_reader(users, nodes[nxt].outputs[0], keep)
        if out_dq is None or not plain_dequantizer(nodes[out_dq]):
            continue
        if nodes[out_dq].inputs[0] != nodes[nxt].outputs[0]:
            continue
        chain += [nxt, out_dq]
        head = [q_at, dq_at] if only_reader(users, conv.inputs[0], keep) == i else []
        before = None
        if used.intersection(head):
            head = []  # the previous conv's output pair: it stays there (see QdqConv)
            before = ending.get(dq_at)
        positions = head + chain
        if used.intersection(positions):
            continue
        if before is not None and before[-2:] == [q_at, dq_at]:
            # Only this conv reads the previous one's dequantized output: that conv ends
            # at its quantizer, its output the codes, and this one starts at the
            # dequantizer, reading them (no float image between the two products).
            del ending[before.pop()]
            positions = [dq_at, *positions]
        used.update(positions)
        found.append(positions)
        ending[positions[-1]] = positions
    return found


def qdq_conv_node(
    nodes: list[PlanNode], positions: list[int], exposed: dict[int, int] | None = None
) -> PlanNode:
    """The fused node running the chain at ``positions`` (from find_qdq_convs).
    ``exposed``: float slots whose codes another fused node makes (a QdqAdd's output
    pair: fusion_qdq_add.py) -> the position of their dequantizer; a chain that starts
    at its conv and reads one of them reads the codes instead."""
    absorbed = [nodes[p] for p in positions]
    conv = next(pn for pn in absorbed if pn.op_type == "Conv")
    codes_dq = None
    if absorbed[0] is conv and exposed and conv.inputs[0] in exposed:
        codes_dq = nodes[exposed[conv.inputs[0]]]
    made = {s for pn in absorbed for s in pn.outputs if s >= 0}
    slots: list[int] = []
    names: list[str] = []

    def place(slot: int, name: str) -> None:
        if slot >= 0 and slot not in made and slot not in slots:
            slots.append(slot)
            names.append(name)

    for pn in absorbed:
        for s, name in zip(pn.inputs, pn.input_names):
            if codes_dq is not None and s == conv.inputs[0]:
                s, name = codes_dq.inputs[0], codes_dq.input_names[0]
            place(s, name)
    # The values the integer path reads besides: the input dequantizer's parameters
    # (when the pair is not absorbed) and the integer weight's operands.
    producer = {s: pn for pn in nodes for s in pn.outputs if s >= 0}
    dq = producer[conv.inputs[0]]
    for s, name in zip(dq.inputs[1:], dq.input_names[1:]):
        place(s, name)
    wdq = producer[conv.inputs[1]]
    for s, name in zip(wdq.inputs, wdq.input_names):
        place(s, name)
    return fused_node(conv, absorbed[-1], slots, names, QdqConv(nodes, positions, slots, codes_dq))


class QdqConv:
    """A QDQ conv chain as one exact integer product (see the module docstring)."""

    def __init__(
        self,
        nodes: list[PlanNode],
        positions: list[int],
        slots: list[int],
        codes_dq: PlanNode | None = None,
    ) -> None:
        self.steps = [nodes[p] for p in positions]
        # The dequantizer of the codes this chain reads when another fused node makes them
        # (it is not one of the steps: the node-by-node run calls it first).
        self.codes_dq = codes_dq
        absorbed_input = self.steps[0].op_type == "QuantizeLinear"
        # Codes: the previous fused conv's quantized output read as it is (the chain
        # starts at its dequantizer), and this chain's own output left quantized when
        # the next fused conv reads it so (the chain ends at its quantizer).
        starts_dq = self.steps[0].op_type == "DequantizeLinear"
        self.codes_in = starts_dq or codes_dq is not None
        self.codes_out = self.steps[-1].op_type == "QuantizeLinear"
        i = 2 if absorbed_input else 1 if starts_dq else 0
        self.conv = self.steps[i]
        self.relu = self.steps[i + 1].op_type == "Relu"
        self.out_q = self.steps[-1] if self.codes_out else self.steps[-2]
        self.out_dq = None if self.codes_out else self.steps[-1]
        producer = {s: pn for pn in nodes for s in pn.outputs if s >= 0}
        dq = producer[self.conv.inputs[0]]
        q = producer[dq.inputs[0]]
        wdq = producer[self.conv.inputs[1]]
        where = {s: k for k, s in enumerate(slots)}
        self.slots = slots

        def at(slot_list: tuple[int, ...], k: int) -> int | None:
            return where.get(slot_list[k]) if k < len(slot_list) and slot_list[k] >= 0 else None

        # The integers come from the input quantizer when the pair is absorbed ("x",
        # "xs", "xz"), from the previous conv's codes ("xc"), else from the float value
        # the dequantizer made ("xd"), quantized again by its own parameters (exact: see
        # _integer).
        self.absorbed_input = absorbed_input
        out_dq = self.out_dq
        self.places: dict[str, int | None] = {
            "x": at(q.inputs, 0) if absorbed_input else None,
            "xs": at(q.inputs, 1) if absorbed_input else None,
            "xz": at(q.inputs, 2) if absorbed_input else None,
            "xc": at(dq.inputs, 0) if self.codes_in else None,
            "xd": None if absorbed_input or self.codes_in else at(self.conv.inputs, 0),
            "ds": at(dq.inputs, 1),
            "dz": at(dq.inputs, 2),
            "w": at(wdq.inputs, 0),
            "ws": at(wdq.inputs, 1),
            "wz": at(wdq.inputs, 2),
            "b": at(self.conv.inputs, 2),
            "os": at(self.out_q.inputs, 1),
            "oz": at(self.out_q.inputs, 2),
            "ods": None if out_dq is None else at(out_dq.inputs, 1),
            "odz": None if out_dq is None else at(out_dq.inputs, 2),
        }
        self.w_axis = int(wdq.attrs.get("axis", 1))
        self._key: tuple[Any, ...] | None = None
        self._weights: (
            tuple[bytes | None, np.ndarray, np.ndarray | None, int, bytes | None] | None
        ) = None
        self._layouts: dict[tuple[int, ...], Any] = {}  # input shape -> _layout_plan
        # The last integer call's converted arguments, for calls with the same parameter
        # objects and an input of the same shape (see _again).
        self._ready: _Ready | None = None

    def _get(self, ins: list[Any], name: str) -> Any:
        k = self.places[name]
        return None if k is None else ins[k]

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        module = int8_module()
        ready = self._ready
        if ready is not None and module is not None:
            y = self._again(module, ready, ins)
            if y is not None:
                return [y]
        y = None if module is None else self._integer(module, ins)
        if y is None:
            return self._one_by_one(ex, ins)
        return [y]

    def _weights_for(
        self, module: ModuleType, ins: list[Any]
    ) -> tuple[bytes | None, np.ndarray, np.ndarray | None, int, bytes | None] | None:
        """(W packed in the planar k order, or None where the grouped input runs, scale
        float32(sx*sw) per output channel, bias (float32) or None,
        K, W packed for the four-channel input layout or None: `_four_channel_weights`),
        made once per weight arrays and level; None when they do not fit."""
        # The arrays themselves (held, compared by identity: an id alone could be reused
        # by a new array once the old one is gone, as with initializers fed per run).
        key = (module.level(), *(self._get(ins, n) for n in ("w", "ws", "wz", "ds", "b")))
        old = self._key
        if old is not None and old[0] == key[0] and all(a is b for a, b in zip(old[1:], key[1:])):
            return self._weights
        self._key = key
        self._weights = None
        w, ws, wz = self._get(ins, "w"), self._get(ins, "ws"), self._get(ins, "wz")
        ds, b = self._get(ins, "ds"), self._get(ins, "b")
        if (
            type(w) is not np.ndarray
            or w.dtype not in CODE_TYPES
            or w.ndim != 4
            or type(ws) is not np.ndarray
            or ws.dtype != _F32
            or not scalar(ds, _F32)
        ):
            return None
        m = w.shape[0]
        k = math.prod(w.shape[1:])
        if k > module.max_k() or m == 0 or k == 0:
            return None
        if ws.size != 1 and not (ws.ndim == 1 and ws.size == m and self.w_axis in (0, -4)):
            return None
        if wz is not None and (
            type(wz) is not np.ndarray or wz.dtype != w.dtype or wz.shape != ws.shape
        ):
            return None
        if b is not None and (type(b) is not np.ndarray or b.dtype != _F32 or b.shape != (m,)):
            return None
        zw = np.zeros(m, np.int32) if wz is None else np.broadcast_to(wz.astype(np.int32), (m,))
        zw = np.ascontiguousarray(zw)
        strides = self.conv.attrs.get("strides") or [1]
        four = _four_channel_weights(module, w, wz, zw, max(strides) == 1)
        # The planar k order's packing only where the grouped input does not run: the
        # two would double the weights' memory (twice a uint8 W's bytes at AVX2).
        packed = (
            None
            if four is not None
            else packed_weight(module, "int8_conv", w, w.reshape(m, k), wz, zw)
        )
        scale = (ds.reshape(()) * np.broadcast_to(ws, (m,))).astype(np.float32)
        bias = None if b is None else np.ascontiguousarray(b, dtype=np.float32)
        self._weights = (packed, np.ascontiguousarray(scale), bias, k, four)
        return self._weights

    def _integer(self, module: ModuleType, ins: list[Any]) -> np.ndarray | None:
        """The chain's output by the integer product, or None to run it node by node."""
        ds, dz = self._get(ins, "ds"), self._get(ins, "dz")
        if self.absorbed_input:
            x, xs, xz = self._get(ins, "x"), self._get(ins, "xs"), self._get(ins, "xz")
        elif self.codes_in:
            # The previous conv's codes t as they are: (t - dz) * ds is the value.
            x, xs, xz = self._get(ins, "xc"), ds, dz
            if type(x) is not np.ndarray or x.dtype not in CODE_TYPES:
                return None
            if dz is None:
                xz = np.zeros((), x.dtype)  # (the dequantizer's zero point: 0 of x's type)
        else:
            # The dequantized value v = float32((t - z) * s), |t - z| <= 255: v / s in
            # float32 is within 255 * 2^-23 of t - z, so rounding it and adding z gives
            # back t exactly, when s is a normal float32 (no underflow) and (t - z) * s
            # cannot overflow.
            x, xs, xz = self._get(ins, "xd"), ds, dz
            if (
                dz is None
                or not scalar(ds, _F32)
                or not NORMAL_MIN <= float(ds.reshape(())) <= CODES_BACK_MAX
            ):
                return None  # (without a zero point the integer type is not known here)
        os_, oz = self._get(ins, "os"), self._get(ins, "oz")
        ods, odz = self._get(ins, "ods"), self._get(ins, "odz")
        if (
            type(x) is not np.ndarray
            or x.dtype != (xz.dtype if self.codes_in else _F32)
            or x.ndim != 4
            or not x.size
        ):
            return None
        xtype = xz.dtype if xz is not None else np.dtype(np.uint8)
        otype = oz.dtype if oz is not None else np.dtype(np.uint8)
        if (
            not scalar(xs, _F32)
            or (xz is not None and not scalar(xz))
            or xtype not in CODE_TYPES
            or (dz is not None and not scalar(dz, xtype))
            or not scalar(os_, _F32)
            or (oz is not None and not scalar(oz))
            or otype not in CODE_TYPES
            or (not self.codes_out and not scalar(ods, _F32))
            or (odz is not None and not scalar(odz, otype))
        ):
            return None
        weights = self._weights_for(module, ins)
        if weights is None:
            return None
        packed, scale, bias, k, packed4 = weights
        w = self._get(ins, "w")
        attrs = self.conv.attrs
        try:
            kernel, st, dil, pd, out = conv_geometry(
                x,
                w,
                attrs.get("auto_pad", "NOTSET"),
                attrs.get("dilations"),
                attrs.get("kernel_shape"),
                attrs.get("pads"),
                attrs.get("strides"),
            )
        except Exception:
            return None  # the Conv kernel raises it with the right node named
        n, c = x.shape[:2]
        m = w.shape[0]
        if c != w.shape[1] or min(pd) < 0 or min(out) <= 0 or c * math.prod(kernel) != k:
            return None
        if st[0] * st[1] > 64:
            return None  # (the used phases travel as a 64-bit mask)
        x_signed = xtype == np.int8
        zx = 0 if xz is None else int(xz.reshape(()))
        zd = 0 if dz is None else int(dz.reshape(()))
        plan = self._layouts.get(x.shape)
        if plan is None:
            plan = self._layouts[x.shape] = layout_plan(x.shape, kernel, st, dil, pd, out)
        phase_hw, phases, length, used, wide, per_channel = plan
        x = np.ascontiguousarray(x)
        o_signed = otype == np.int8
        qz = 0 if oz is None else int(oz.reshape(()))
        dqz = 0 if odz is None else int(odz.reshape(()))
        geometry = (pd[0], pd[1], st[0], st[1], phase_hw[0], phase_hw[1], length, zd % 256, used)
        quantizer = () if self.codes_in else (np.float32(xs.reshape(())), zx, x_signed)
        dequantizer = () if self.codes_out else (np.float32(ods.reshape(())), dqz)
        bias_arg = b"" if bias is None else bias
        ready = _Ready(
            level=module.level(),
            params=tuple((k, v) for k, v in enumerate(ins) if k != self._x_place()),
            x_place=self._x_place(),
            shape=x.shape,
            x_dtype=x.dtype,
            codes_in=self.codes_in,
            # The codes as they are when the layout would be a copy of them (a 1x1 conv
            # of stride 1, unpadded: one phase of the image's own size).
            direct=self.codes_in
            and phases == 1
            and tuple(phase_hw) == x.shape[2:]
            and length == math.prod(phase_hw),
            layout=(n, c, x.shape[2], x.shape[3], *quantizer, *geometry),
            flat=(n, c, phases, length),
            image=c * phases * length,
            per_channel=per_channel,
            gemm=(packed, wide, x_signed, zd),
            out=(n, m, *out),
            out_dtype=otype if self.codes_out else _F32,
            rescale=(out[0], wide // out[0], out[1], scale, bias_arg, self.relu, o_signed)
            + (np.float32(os_.reshape(())), qz)
            + (dequantizer or (np.float32(1), qz))
            + (self.codes_out,),
            four=None
            if packed4 is None
            else _FourChannels.of(
                packed4, c, phases, length, per_channel, _group_size(module.level())
            ),
        )
        self._ready = None
        y = _run(module, ready, x)
        if y is not None:
            self._ready = ready
        return y

    def _x_place(self) -> int:
        name = "x" if self.absorbed_input else "xc" if self.codes_in else "xd"
        k = self.places[name]
        assert k is not None
        return k

    def _again(self, module: ModuleType, ready: _Ready, ins: list[Any]) -> np.ndarray | None:
        """The integer path by the last call's converted arguments, when this call has the
        same parameter objects (compared by identity) and a C-contiguous float32 input of
        the same shape at the same level; else None (the full path then checks it all)."""
        x = ins[ready.x_place]
        if (
            type(x) is not np.ndarray
            or x.shape != ready.shape
            or x.dtype != ready.x_dtype
            or not x.flags.c_contiguous
            or module.level() != ready.level
        ):
            return None
        for k, v in ready.params:
            if ins[k] is not v:
                return None
        return _run(module, ready, x)

    def _one_by_one(self, ex: Executor, ins: list[Any]) -> list[Any]:
        values = dict(zip(self.slots, ins))
        dq = self.codes_dq
        if dq is not None:  # the float the conv reads, from the codes
            values[dq.outputs[0]] = ex.call_kernel(dq, node_args(dq, values))[0]
        return run_into(ex, self.steps, values)


class _Ready(NamedTuple):
    """A QdqConv call's arguments to the three C passes, converted once (see _run)."""

    level: int
    params: tuple[tuple[int, Any], ...]  # (input position, object) of every non-x input
    x_place: int
    shape: tuple[int, ...]
    x_dtype: np.dtype[Any]
    codes_in: bool  # x the codes (bytes_layout), or floats (quantize_layout)
    direct: bool  # the codes are the layout (no copy)
    layout: tuple[Any, ...]  # the layout call's arguments between x and the buffer
    flat: tuple[int, int, int, int]
    image: int  # bytes of one image's flat layout
    per_channel: np.ndarray
    gemm: tuple[Any, int, bool, int]  # packed, N, x_signed, zx
    out: tuple[int, ...]
    out_dtype: np.dtype[Any]  # bytes (rescale_q's: the codes) or float32 (rescale_qdq's)
    # gemm_rescale's arguments between the product's and y (rows ... dqz, codes)
    rescale: tuple[Any, ...]
    four: _FourChannels | None  # the input in four-channel groups (VNNI, gemm_rescale4)


class _FourChannels(NamedTuple):
    """A conv's input read in groups of channels: four at the VNNI level
    (`_int8.interleave4`, bytes), two at the AVX2 level (`_int8.interleave2`, int16 less
    the zero point): the planar flat layout's planes interleaved, each k group of the
    product then the group's channels at one kernel offset, read where it lies
    (`_int8.gemm_rescale4`) instead of packed again for every block of columns (a 3x3
    conv packed each plane nine times)."""

    packed: bytes  # W with its k in (channel group, kernel offset, channel) order
    channels: int
    plane: int  # bytes of one channel's plane in the flat layout (phases x length)
    rows: np.ndarray  # int64 word offset of each k group in one image
    words: int  # words of the interleaved input (one image's)
    size: int  # channels per group: 4 (VNNI's bytes) or 2 (AVX2's int16 pairs)

    @staticmethod
    def of(
        packed: bytes,
        channels: int,
        phases: int,
        length: int,
        per_channel: np.ndarray,
        size: int = 4,
    ) -> _FourChannels:
        plane = phases * length
        taps = per_channel.size // channels  # per_channel[t] is channel 0's tap t
        groups = -(-channels // size)
        rows = np.arange(groups, dtype=np.int64)[:, None] * plane + per_channel[None, :taps]
        return _FourChannels(packed, channels, plane, rows.reshape(-1), groups * plane, size)


def _group_size(level: int) -> int:
    """Channels per group of the grouped input layout at a level: the VNNI level's k
    groups of four bytes, the AVX2 level's (int16 form) pairs; 0 where there is none."""
    return 4 if level >= 3 else 2 if level == 1 else 0


def _four_channel_weights(
    module: ModuleType, w: np.ndarray, wz: Any, zw: np.ndarray, unit_strides: bool
) -> bytes | None:
    """W [M, C, kh, kw] packed with its k as (channel group, kernel offset, channel in the
    group), the channels past C zero, for `_FourChannels`, or None where the planar
    packing runs: only for kernels of more than one offset, where the packing read every
    plane once per offset, with channels that fill their groups but for an eighth at most
    (the padding channels are products too).  QDQ ResNet-50, one run's convs in the same
    process: 23.5 -> 22.6 ms, its 3x3 convs 9.0 -> 8.2 ms; taking its 1x1 convs too (the
    packing read each plane once anyway) made it 23.9, its 7x7 stem of 3 channels 746 ->
    841 us.
      VNNI (groups of 4 bytes): only with no weight zero points (their column term needs
    the input's column sums, which only the packing makes).
      AVX2 (pairs of int16, `interleave2`): only for unit strides (ResNet-18 w32's
    stride-2 3x3 convs ran 3-7% slower from the phases than packed; its 56 x 56 ones
    555 -> 510 us) and W in the int16 form: the quads, which pack_weights picks for
    weights that few pairs of need cutting, run from gemm's byte packing of X."""
    m, c = w.shape[:2]
    taps = w.shape[2] * w.shape[3]
    size = _group_size(module.level())
    groups = -(-c // size) if size else 0
    if (
        not size
        or taps < 2
        or groups * size * 8 > c * 9
        or (size == 4 and np.any(zw))
        or (size == 2 and not unit_strides)
        or groups * size * taps > module.max_k()
    ):
        return None
    rows = four_channel_rows(w, size)
    # (the AVX2 level's pairs hold the int16 form; W's quads, when pack_weights picks
    # them, run gemm_rescale's product, whose packing of X makes the quads' bytes)
    packed = packed_weight(
        module, f"int8_conv{size}", w, rows, wz, zw, "int16" if size == 2 else None
    )
    return packed or None


def four_channel_rows(w: np.ndarray, size: int = 4) -> np.ndarray:
    """W [M, C, kh, kw] as [M, K'] rows in `_FourChannels`' k order: (channel group of
    `size`, kernel offset, channel in the group), the channels past C zero."""
    m, c = w.shape[:2]
    taps = w.shape[2] * w.shape[3]
    groups = -(-c // size)
    rows = np.zeros((m, groups * size, taps), dtype=w.dtype)
    rows[:, :c] = w.reshape(m, c, taps)
    rows = rows.reshape(m, groups, size, taps).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(rows.reshape(m, -1))


def _run(module: ModuleType, ready: _Ready, x: np.ndarray) -> np.ndarray | None:
    """x quantized into the flat layout (its pads at the dequantizer's zero point: a
    padded value is real 0 in the float definition, that is the integer zd), one
    integer product per image rescaled into the chain's output block by block of its
    columns while they are in cache (`_int8.gemm_rescale`); None when a quantizer met a
    NaN (the platform's cast decides: run the nodes)."""
    if ready.direct:
        flat = x
    elif ready.codes_in:
        flat = scratch("conv_flat", ready.flat, np.uint8)
        module.bytes_layout(x, *ready.layout, flat)
    else:
        flat = scratch("conv_flat", ready.flat, np.uint8)
        if module.quantize_layout(x, *ready.layout, flat) < 0:
            return None
    y = np.empty(ready.out, dtype=ready.out_dtype)
    packed, wide, x_signed, zx = ready.gemm
    four = ready.four
    if four is not None:
        n = ready.out[0]
        span = -(-wide // 32) * 32  # (the last panel's columns read past the grid)
        x4 = scratch("conv_flat4", (n * four.words + span,), np.uint32)
        if four.size == 4:
            module.interleave4(flat, n, four.channels, four.plane, x_signed, x4)
        else:
            module.interleave2(flat, n, four.channels, four.plane, x_signed, zx, x4)
        for b in range(n):
            args = (four.packed, x4[b * four.words :], four.rows, wide, x_signed, zx)
            if module.gemm_rescale4(*args, *ready.rescale, y[b]) < 0:
                return None
        return y
    for b in range(ready.out[0]):
        # The product and the rescale block by block, C never leaving the cache.
        offsets = ready.per_channel + b * ready.image if b else ready.per_channel
        args = (packed, flat, offsets, 1, wide, x_signed, zx, *ready.rescale, y[b])
        if module.gemm_rescale(*args) < 0:
            return None
    return y
