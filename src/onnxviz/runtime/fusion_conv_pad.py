"""A zero Pad of the spatial axes whose only reader is a Conv, run as the Conv with that
padding (unwatched runs).

TensorFlow's "SAME" padding, as Hugging Face's MobileNetV2 (``tf_padding``) and models
converted from TensorFlow write it, pads explicitly before each conv::

    x -> Pad(pads=[0, 0, t, l, 0, 0, b, r], constant 0) -> Conv(pads=[0, 0, 0, 0])

The Pad copies the whole image into a bigger one before every conv (HF's MobileNetV2 at
224 px: 52 Pads, 3.5 of its 17 ms), and the conv after it reads an NCHW value the layout
planner cannot give channels-last.  A conv pads with zeros itself: the pair is the Conv
with ``pads`` grown by the Pad's spatial amounts (asymmetric pads are Conv's too).

Only where the Pad is of constant mode with value 0 (absent, or a constant zero), its
pads are constants of the spatial axes only (none on the batch and channel axes), none
negative, its output read by nothing but that Conv's data input (and not a graph
output), the Conv of explicit pads (auto_pad NOTSET) with a constant weight whose values
are all finite.  The conv's kernels then add the zero taps as exact zeros or skip them:
the stepped Pad -> Conv's numbers up to the sign of a zero and float32 rounding (a kernel
of another geometry), never a NaN from a zero times an infinite weight, which the finite
weight rules out (tests/runtime/test_conv_pad.py).

A quantized model (onnxruntime.quantization's QDQ format) puts a quantize-dequantize
pair between the two: ``Pad -> QuantizeLinear -> DequantizeLinear -> Conv``.  The pair
maps a zero to a zero (quantized, it is the zero point; dequantized, (zp - zp) * s),
so padding before it equals padding after it: the pair reads the Pad's input and the
Conv takes the padding, when the pair is one the fused QDQ nodes take
(`fusion_qdq.input_pair`: no block size, saturating, float32 out) with one scale and
one zero point each (the same zero point: a per-tensor pair, whose values do not depend
on a position the padding moves), and each of the Pad's, the pair's and the Conv's
links has that one reader.  The pair's two outputs are then the unpadded shape (`pad_convs` names
them, so that no declared shape of the padded one is trusted).  HF's MobileNetV2
quantized so: its 52 Pads were 2.4 of its 7.8 ms, and they kept its convs NCHW.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from onnxviz.runtime.fusion_qdq import input_pair
from onnxviz.runtime.plan import PlanNode, plain_kernel


def pad_convs(
    nodes: list[PlanNode], const: set[int], constants: dict[int, Any], keep: set[int]
) -> tuple[list[PlanNode], set[int]]:
    """``nodes`` with each Pad -> Conv pair of the module docstring's form replaced by
    the Conv with the Pad's padding (reading the Pad's input, at the Conv's place), and
    the slots whose shape that changed (a quantize-dequantize pair's between them)."""
    pads_of: dict[int, tuple[int, list[int]]] = {}  # Pad output slot -> (position, pads)
    for i, pn in enumerate(nodes):
        if plain_kernel(pn, "Pad") and pn.outputs and pn.outputs[0] >= 0:
            spatial = _zero_pads(pn, constants)
            if spatial is not None and pn.outputs[0] not in keep:
                pads_of[pn.outputs[0]] = (i, spatial)
    if not pads_of:
        return nodes, set()
    users: dict[int, list[int]] = {}
    producer: dict[int, int] = {}
    for i, pn in enumerate(nodes):
        for s in (*pn.inputs, *pn.implicit):
            users.setdefault(s, []).append(i)
        for s in pn.outputs:
            if s >= 0:
                producer[s] = i
    replaced: dict[int, PlanNode] = {}
    dropped: set[int] = set()
    reshaped: set[int] = set()
    for j, conv in enumerate(nodes):
        if not plain_kernel(conv, "Conv") or len(conv.inputs) < 2:
            continue
        y = conv.inputs[0]
        if len(users.get(y, ())) != 1 or conv.inputs[1:].count(y):
            continue
        pair = None if y in pads_of else _zero_pair(nodes, producer, users, keep, y, constants)
        padded = y if pair is None else nodes[pair[0]].inputs[0]
        if padded not in pads_of or len(users.get(padded, ())) != 1:
            continue
        i, spatial = pads_of[padded]
        pads = _grown_pads(conv, spatial, constants)
        if pads is None:
            continue
        pad = nodes[i]
        source = (pad.inputs[0], pad.input_names[0])
        if pair is not None:  # the pair reads the Pad's input; the conv reads the pair
            q = nodes[pair[0]]
            replaced[pair[0]] = dataclasses.replace(
                q,
                inputs=(source[0], *q.inputs[1:]),
                input_names=(source[1], *q.input_names[1:]),
                call=None,
                gather=None,
            )
            reshaped.update((q.outputs[0], y))
            source = (y, conv.input_names[0])
        replaced[j] = dataclasses.replace(
            conv,
            attrs={**conv.attrs, "pads": pads},
            inputs=(source[0], *conv.inputs[1:]),
            input_names=(source[1], *conv.input_names[1:]),
            call=None,
            gather=None,
        )
        dropped.add(i)
    if not replaced:
        return nodes, set()
    kept = [replaced.get(j, pn) for j, pn in enumerate(nodes) if j not in dropped]
    return kept, reshaped


def _zero_pair(
    nodes: list[PlanNode],
    producer: dict[int, int],
    users: dict[int, list[int]],
    keep: set[int],
    y: int,
    constants: dict[int, Any],
) -> tuple[int, int] | None:
    """(QuantizeLinear position, DequantizeLinear position) when ``y`` is the output of
    a quantize-dequantize pair (`fusion_qdq.input_pair`'s: its codes read by its
    dequantizer only) that is per tensor and maps zero to zero (module docstring), ``y``
    not a graph output; else None."""
    pair = None if y in keep else input_pair(nodes, producer, users, keep, y)
    if pair is None:
        return None
    q, dq = nodes[pair[0]], nodes[pair[1]]
    if _one_value(constants, q, 1) is None or _one_value(constants, dq, 1) is None:
        return None
    zq, zdq = _one_value(constants, q, 2), _one_value(constants, dq, 2)
    if zq is None or zdq is None or zq.dtype != zdq.dtype or zq.tobytes() != zdq.tobytes():
        return None
    return pair


def _one_value(constants: dict[int, Any], pn: PlanNode, k: int) -> np.ndarray | None:
    """Input ``k`` of ``pn`` as a one-element constant; an absent zero point (k 2) is
    uint8 0, the default of both ops; None for anything else."""
    slot = pn.inputs[k] if len(pn.inputs) > k else -1
    if slot < 0:
        return np.zeros((), np.uint8) if k == 2 else None
    value = constants.get(slot)
    if not isinstance(value, np.ndarray) or value.size != 1:
        return None
    return value.reshape(())


def _zero_pads(pad: PlanNode, constants: dict[int, Any]) -> list[int] | None:
    """The Pad's pads (all begins, then all ends) when it pads with zeros by constants
    on the axes from 2 on only, none negative; else None."""
    if pad.attrs.get("mode", "constant") not in ("constant", b"constant") or not pad.inputs:
        return None
    if pad.opset < 11:
        pads = pad.attrs.get("pads")
        if pads is None or float(pad.attrs.get("value", 0.0)) != 0.0:
            return None
        values = [int(p) for p in pads]
    else:
        if len(pad.inputs) < 2 or (len(pad.inputs) > 3 and pad.inputs[3] >= 0):
            return None  # (opset 18's axes input: not taken)
        given = constants.get(pad.inputs[1])
        if not isinstance(given, np.ndarray) or given.ndim != 1 or given.dtype.kind != "i":
            return None
        if len(pad.inputs) > 2 and pad.inputs[2] >= 0:
            fill = constants.get(pad.inputs[2])
            if not isinstance(fill, np.ndarray) or fill.size != 1 or fill.dtype.kind != "f":
                return None
            if float(fill.reshape(())) != 0.0:
                return None
        values = [int(p) for p in given]
    rank = len(values) // 2
    if len(values) % 2 or rank < 3 or min(values) < 0:
        return None
    begins, ends = values[:rank], values[rank:]
    if begins[:2] != [0, 0] or ends[:2] != [0, 0]:
        return None
    return begins[2:] + ends[2:]


def _grown_pads(conv: PlanNode, spatial: list[int], constants: dict[int, Any]) -> list[int] | None:
    """The Conv's pads plus the Pad's ``spatial`` ones, or None when the module
    docstring does not allow the pair."""
    if conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
        return None
    w = constants.get(conv.inputs[1])
    if not isinstance(w, np.ndarray) or w.dtype.kind != "f" or w.ndim != 2 + len(spatial) // 2:
        return None
    if not np.isfinite(w).all():
        return None
    pads = [int(p) for p in conv.attrs.get("pads", [0] * len(spatial))]
    if len(pads) != len(spatial) or min(pads) < 0:
        return None
    return [a + b for a, b in zip(pads, spatial)]
