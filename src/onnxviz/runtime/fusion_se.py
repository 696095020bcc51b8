"""A squeeze-excite block run as one node in unwatched runs.

MobileNetV3's SE blocks (torchvision's ``SqueezeExcitation`` as the exporters write it)
are six nodes on a value x of (N, C, H, W)::

    m = ReduceMean(x, axes=[2, 3], keepdims=1)   (or GlobalAveragePool(x))
    h = Relu(Conv(m, W1, B1))                    1x1, C -> R channels
    g = HardSigmoid(Conv(h, W2, B2))             1x1, R -> C channels
    y = Mul(x, g)                                (either order)

Each is a dispatch and a few numpy calls on one pixel's worth of values: the nine blocks
of MobileNetV3-small cost about 0.45 ms of its 3 ms run that way, the arithmetic a few
microseconds each.  `find_se_gates` finds the pattern (every intermediate read only
inside it, none a graph output) and `SEGate` runs it as one compiled call
(native/_channels.c ``gate``) when x is a channels-last float32 array (fusion_layout
keeps MobileNet's activations so; it lets such a node pass the layout through), with
constant float32 weights of the shapes above.  The numbers are within float32 rounding
of the nodes' (the mean and the two products sum in another order; see _channels.c).
Anything else (another layout or dtype, other axes, weights that are not constants of
those shapes, the kernels off) runs the six nodes one by one: their results and errors.
"""

from __future__ import annotations

from operator import is_
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels._weight_cache import frozen
from onnxviz.runtime.kernels.nn_conv_nhwc import is_channels_last
from onnxviz.runtime.plan import PlanNode, plain_kernel, run_steps

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_F32 = np.dtype(np.float32)


def _plain(pn: PlanNode, op_type: str, inputs: int) -> bool:
    return (
        plain_kernel(pn, op_type)
        and pn.outputs[0] >= 0
        and len(pn.inputs) == inputs
        and min(pn.inputs) >= 0
    )


def _spatial_mean(pn: PlanNode) -> bool:
    """A GlobalAveragePool, or a ReduceMean keeping its axes (checked at run time)."""
    if _plain(pn, "GlobalAveragePool", 1):
        return True
    if not plain_kernel(pn, "ReduceMean") or not pn.attrs.get("keepdims", 1):
        return False
    if pn.opset >= 18:
        return _plain(pn, "ReduceMean", 2)
    return _plain(pn, "ReduceMean", 1) and pn.attrs.get("axes") is not None


def _pointwise(pn: PlanNode, y: int, const: set[int]) -> bool:
    """A Conv of ``y`` by a constant weight and bias, one group, no padding, stride or
    dilation but 1 (its 1x1 kernel is checked at run time, on the weight's shape)."""
    if not _plain(pn, "Conv", 3) or pn.inputs[0] != y:
        return False
    if pn.inputs[1] not in const or pn.inputs[2] not in const:
        return False
    attrs = pn.attrs
    return (
        attrs.get("group", 1) == 1
        and not any(attrs.get("pads") or ())
        and attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")
        and all(s == 1 for s in attrs.get("strides") or ())
        and all(d == 1 for d in attrs.get("dilations") or ())
        and list(attrs.get("kernel_shape") or [1, 1]) == [1, 1]
    )


def find_se_gates(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    const: set[int],
    keep: set[int],
    taken: set[int],
) -> list[list[int]]:
    """Node positions (mean, conv, Relu, conv, HardSigmoid, Mul) of every SE block, none
    of them in ``taken``."""
    found: list[list[int]] = []
    used = set(taken)

    def only(slot: int) -> tuple[int, PlanNode] | None:
        """The one node reading ``slot`` (once), if nothing else sees the value."""
        readers = users.get(slot, [])
        if slot in keep or len(readers) != 1 or readers[0] in used:
            return None
        return readers[0], nodes[readers[0]]

    for i, mean in enumerate(nodes):
        if i in used or not _spatial_mean(mean):
            continue
        x = mean.inputs[0]
        conv1 = only(mean.outputs[0])
        if conv1 is None or not _pointwise(conv1[1], mean.outputs[0], const):
            continue
        relu = only(conv1[1].outputs[0])
        if relu is None or not _plain(relu[1], "Relu", 1):
            continue
        conv2 = only(relu[1].outputs[0])
        if conv2 is None or not _pointwise(conv2[1], relu[1].outputs[0], const):
            continue
        hs = only(conv2[1].outputs[0])
        if hs is None or not _plain(hs[1], "HardSigmoid", 1):
            continue
        g = hs[1].outputs[0]
        mul = only(g)
        if (
            mul is None
            or not _plain(mul[1], "Mul", 2)
            or mul[1].opset < 7
            or sorted(mul[1].inputs) != sorted((x, g))
            or x == g
        ):
            continue
        positions = [i, conv1[0], relu[0], conv2[0], hs[0], mul[0]]
        if positions != sorted(positions):
            continue
        found.append(positions)
        used.update(positions)
    return found


class SpatialAxes:
    """Whether a spatial-mean node, given its axes input (None when absent), means over
    exactly the (H, W) axes of a 4-D value: a GlobalAveragePool always, a ReduceMean by
    its axes (kept or not: `keeps` says).  The answer for an axes array that cannot change
    (a frozen constant) is kept: a node sees the same one every run."""

    def __init__(self, node: PlanNode) -> None:
        self.node = node
        self._last: tuple[Any, bool] = (None, False)  # (axes input, its answer)

    @property
    def keeps(self) -> bool:
        """Whether the mean keeps the (H, W) axes as ones (else (N, C))."""
        return self.node.op_type == "GlobalAveragePool" or bool(self.node.attrs.get("keepdims", 1))

    def __call__(self, axes: Any) -> bool:
        node = self.node
        if node.op_type == "GlobalAveragePool":
            return True
        if node.opset < 18:
            got = list(node.attrs.get("axes") or [])
            return len(got) == 2 and sorted(a % 4 for a in got) == [2, 3]
        if axes is self._last[0] and axes is not None:  # the same constant as last run
            return self._last[1]
        ok = (
            type(axes) is np.ndarray
            and axes.dtype.kind in "iu"
            and axes.size == 2
            and sorted(int(a) % 4 for a in axes.reshape(-1)) == [2, 3]
        )
        if frozen(axes):
            self._last = (axes, ok)
        return ok


class SEGate:
    """An SE block as one node (see the module docstring)."""

    def __init__(self, steps: list[PlanNode], place_of: dict[int, int]) -> None:
        self.steps = steps
        self.place_of = place_of
        mean, conv1, _relu, conv2, hs, _mul = steps
        self.mean = mean
        # x is the fused node's first input (the mean's), which fusion_layout reads.
        self.x_place = place_of[mean.inputs[0]]
        self.axes_place = place_of[mean.inputs[1]] if len(mean.inputs) > 1 else None
        self.weight_places = tuple(place_of[s] for s in (*conv1.inputs[1:], *conv2.inputs[1:]))
        self.alpha = float(hs.attrs.get("alpha", 0.2))
        self.beta = float(hs.attrs.get("beta", 0.5))
        # (the four constants, their prepared forms or None): replaced whole.
        self._prepared: tuple[tuple[Any, ...], tuple[np.ndarray, ...] | None] | None = None
        self._spatial = SpatialAxes(mean)

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        x = ins[self.x_place]
        if (
            type(x) is np.ndarray
            and x.dtype == _F32
            and x.ndim == 4
            and x.size
            and is_channels_last(x)
            and self._spatial(None if self.axes_place is None else ins[self.axes_place])
        ):
            weights = self._weights(ins, x.shape[1])
            module = native.load("channels") if weights is not None else None
            if module is not None and weights is not None:
                w1t, b1, w2t, b2 = weights
                n, c, h, w = x.shape
                out = np.empty((n, h, w, c), dtype=_F32)
                module.gate(
                    x.transpose(0, 2, 3, 1),
                    w1t,
                    b1,
                    w2t,
                    b2,
                    out,
                    (n, h * w, c, b1.shape[0]),
                    self.alpha,
                    self.beta,
                )
                return [out.transpose(0, 3, 1, 2)]
        return self._one_by_one(ex, ins)

    def _weights(self, ins: list[Any], c: int) -> tuple[np.ndarray, ...] | None:
        """(W1 as (C, R), B1, W2 as (R, C), B2), contiguous float32, made once per set of
        constants; None unless they are float32 arrays of the block's shapes."""
        prepared = self._prepared
        if prepared is not None and all(
            map(is_, prepared[0], map(ins.__getitem__, self.weight_places))
        ):
            # The same constants as last run (compared in C); they fit x's channels or
            # the nodes say what does not match.
            kept = prepared[1]
            return kept if kept is not None and kept[0].shape[0] == c else None
        key = tuple(ins[p] for p in self.weight_places)
        w1, b1, w2, b2 = key
        made: tuple[np.ndarray, ...] | None = None
        if all(type(a) is np.ndarray and a.dtype == _F32 for a in key):
            r = w1.shape[0] if w1.ndim == 4 else -1
            if (
                w1.shape == (r, c, 1, 1)
                and w2.shape == (c, r, 1, 1)
                and b1.shape == (r,)
                and b2.shape == (c,)
                and r > 0
            ):
                made = (
                    np.ascontiguousarray(w1.reshape(r, c).T),
                    np.ascontiguousarray(b1),
                    np.ascontiguousarray(w2.reshape(c, r).T),
                    np.ascontiguousarray(b2),
                )
        self._prepared = (key, made)
        return made

    def _one_by_one(self, ex: Executor, ins: list[Any]) -> list[Any]:
        return run_steps(ex, self.steps, self.place_of, ins)
