"""A Conv whose padded output a Slice trims, run as the Conv with less padding (unwatched
runs).

A causal Conv1d as torch exports it (a TCN, WaveNet, a streaming speech encoder) pads
both ends, then cuts the outputs the right padding made::

    x -> Conv(pads=[p, p]) -> Slice(starts=[0], ends=[-p], axes=[2]) -> Relu

At stride 1 along an axis, output j of a conv reads the window that starts at input
j - pad_begin; the end padding only adds outputs at the end.  So the Slice's result is
the Conv with ``pad_end - t`` (the Slice's end at -t) and ``pad_begin - s`` (its start
at s) along that axis, every output's window the same: one node that computes only the
outputs kept, which the conv chain then continues (Relu, Add) as any Conv; the Slice's
strided view, and the Relu over it, are gone.  (TCN benchmark: 8 Slice + Relu pairs
over 4 x 64 x 258 views.)

Only where nothing else reads the Conv's output, the Slice's starts and ends (and axes,
steps) are constants, its axes are spatial with step 1, the conv's stride there is 1
with explicit pads (auto_pad NOTSET), the trims are within the pads, and what remains
of the padding keeps every output's window over the image (pads left >= the dilated
kernel's extent minus one in total): the outputs are then as many as the input's
positions or more, never fewer than one, as the Slice's result.  The numbers are the
conv's (the same kernel on another geometry: within float32 rounding of the stepped
Conv, tests/runtime/test_conv_trim.py).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from onnxviz.runtime.plan import PlanNode, plain_kernel

# Slice ends at or past this many positions mean "to the end" (INT_MAX, INT64_MAX).
_TO_THE_END = 2**31 - 1


def trim_routing() -> bool:
    """Whether unwatched runs trim convs (ONNXVIZ_CONV_TRIM=off: never, for measuring
    against the Conv -> Slice pair)."""
    return os.environ.get("ONNXVIZ_CONV_TRIM", "auto").strip().lower() != "off"


def trim_convs(
    nodes: list[PlanNode], const: set[int], constants: dict[int, Any], keep: set[int]
) -> list[PlanNode]:
    """``nodes`` with each Conv -> Slice pair of the module docstring's form replaced by
    one Conv of less padding (at the Slice's place, making the Slice's output)."""
    # The plain convs' outputs, then who reads them (no reader table for the whole graph:
    # a 100k-node model without a conv pays one pass of set lookups).
    heads = {
        pn.outputs[0]: i
        for i, pn in enumerate(nodes)
        if plain_kernel(pn, "Conv") and len(pn.inputs) >= 2 and pn.inputs[1] in const
    }
    heads = {y: i for y, i in heads.items() if y >= 0 and y not in keep}
    if not heads:
        return nodes
    readers: dict[int, list[int]] = {}
    for j, pn in enumerate(nodes):
        for s in (*pn.inputs, *pn.implicit):
            if s in heads:
                readers.setdefault(s, []).append(j)
    replaced: dict[int, PlanNode] = {}  # slice position -> the trimmed conv
    dropped: set[int] = set()  # conv positions
    for y, i in heads.items():
        pn = nodes[i]
        if len(readers.get(y, ())) != 1:
            continue
        j = readers[y][0]
        pads = _trimmed_pads(pn, nodes[j], y, constants)
        if pads is None:
            continue
        replaced[j] = dataclasses.replace(
            pn,
            attrs={**pn.attrs, "pads": pads},
            outputs=nodes[j].outputs,
            output_names=nodes[j].output_names,
            call=None,
            gather=None,
        )
        dropped.add(i)
    if not replaced:
        return nodes
    return [replaced.get(j, pn) for j, pn in enumerate(nodes) if j not in dropped]


def _trimmed_pads(
    conv: PlanNode, cut: PlanNode, y: int, constants: dict[int, Any]
) -> list[int] | None:
    """The conv's pads with the Slice ``cut`` of its output ``y`` taken off them, or
    None when ``cut`` is not a trim the module docstring allows."""
    if not plain_kernel(cut, "Slice") or not cut.inputs or cut.inputs[0] != y:
        return None
    if cut.outputs[0] < 0 or conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
        return None
    w = constants.get(conv.inputs[1])
    if not isinstance(w, np.ndarray) or w.ndim < 3:
        return None
    spatial = w.ndim - 2
    kernel = [int(k) for k in conv.attrs.get("kernel_shape", w.shape[2:])]
    pads = [int(p) for p in conv.attrs.get("pads", [0] * (2 * spatial))]
    strides = [int(s) for s in conv.attrs.get("strides", [1] * spatial)]
    dilations = [int(d) for d in conv.attrs.get("dilations", [1] * spatial)]
    if len(kernel) != spatial or len(pads) != 2 * spatial or min(pads) < 0:
        return None
    window = _slice_window(cut, constants)
    if window is None:
        return None
    starts, ends, axes, steps = window
    if not (len(starts) == len(ends) == len(axes) == len(steps)) or len(set(axes)) != len(axes):
        return None
    rank = spatial + 2
    new = list(pads)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        a = axis + rank if axis < 0 else axis
        if not 2 <= a < rank or step != 1:
            return None
        i = a - 2
        if strides[i] != 1:
            return None
        head = start
        tail = -end if end < 0 else 0 if end >= _TO_THE_END else None
        if head < 0 or tail is None:
            return None
        new[i] -= head
        new[i + spatial] -= tail
        extent = dilations[i] * (kernel[i] - 1)
        if new[i] < 0 or new[i + spatial] < 0 or new[i] + new[i + spatial] < extent:
            return None
    return new


def _slice_window(
    cut: PlanNode, constants: dict[int, Any]
) -> tuple[list[int], list[int], list[int], list[int]] | None:
    """The Slice's (starts, ends, axes, steps) as ints: attributes before opset 10,
    constant inputs from it; None when one is not a constant."""
    if cut.opset < 10:
        starts, ends = cut.attrs.get("starts"), cut.attrs.get("ends")
        if starts is None or ends is None:
            return None
        axes = cut.attrs.get("axes", list(range(len(starts))))
        return list(starts), list(ends), list(axes), [1] * len(starts)
    values: list[list[int] | None] = []
    for place in range(1, 5):
        slot = cut.inputs[place] if place < len(cut.inputs) else -1
        if slot < 0:
            values.append(None)
            continue
        v = constants.get(slot)
        if not isinstance(v, np.ndarray) or v.ndim != 1 or v.dtype.kind != "i":
            return None
        values.append([int(e) for e in v])
    starts, ends, axes, steps = values
    if starts is None or ends is None:
        return None
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    return starts, ends, axes, steps
