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
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from onnxviz.runtime.plan import PlanNode, plain_kernel


def pad_convs(
    nodes: list[PlanNode], const: set[int], constants: dict[int, Any], keep: set[int]
) -> list[PlanNode]:
    """``nodes`` with each Pad -> Conv pair of the module docstring's form replaced by
    the Conv with the Pad's padding (reading the Pad's input, at the Conv's place)."""
    pads_of: dict[int, tuple[int, list[int]]] = {}  # Pad output slot -> (position, pads)
    for i, pn in enumerate(nodes):
        if plain_kernel(pn, "Pad") and pn.outputs and pn.outputs[0] >= 0:
            spatial = _zero_pads(pn, constants)
            if spatial is not None and pn.outputs[0] not in keep:
                pads_of[pn.outputs[0]] = (i, spatial)
    if not pads_of:
        return nodes
    readers: dict[int, int] = {}
    for pn in nodes:
        for s in (*pn.inputs, *pn.implicit):
            if s in pads_of:
                readers[s] = readers.get(s, 0) + 1
    replaced: dict[int, PlanNode] = {}
    dropped: set[int] = set()
    for j, conv in enumerate(nodes):
        if not plain_kernel(conv, "Conv") or len(conv.inputs) < 2:
            continue
        y = conv.inputs[0]
        if y not in pads_of or readers.get(y) != 1 or conv.inputs[1:].count(y):
            continue
        i, spatial = pads_of[y]
        pads = _grown_pads(conv, spatial, constants)
        if pads is None:
            continue
        pad = nodes[i]
        replaced[j] = dataclasses.replace(
            conv,
            attrs={**conv.attrs, "pads": pads},
            inputs=(pad.inputs[0], *conv.inputs[1:]),
            input_names=(pad.input_names[0], *conv.input_names[1:]),
            call=None,
            gather=None,
        )
        dropped.add(i)
    if not replaced:
        return nodes
    return [replaced.get(j, pn) for j, pn in enumerate(nodes) if j not in dropped]


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
