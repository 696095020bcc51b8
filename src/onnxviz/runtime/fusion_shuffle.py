"""ShuffleNet's channel shuffle as one node, for unwatched runs (see fusion.py).

Exporters write the shuffle of a 4-D value's channels between G groups as
``Reshape (N, G, C/G, H, W) -> Transpose (0, 2, 1, 3, 4) -> Reshape (N, C, H, W)``.  Node
by node, the second Reshape copies the transposed view; and the shuffle's input and
output must be NCHW, so the convs around it (a grouped 1x1 before, a depthwise after)
write and read NCHW planes, where their channels-last kernels are the fast ones.

`ChannelShuffle` runs the three as one copy in the input's own layout: an NCHW value
gives NCHW (whole planes moved), a channels-last one gives channels-last (each pixel's
channels permuted: native/_channels.c's shuffle), so fusion_layout.py keeps a
ShuffleNet unit channels-last from its first 1x1 conv through the shuffle and the
depthwise conv to its last 1x1 conv.  A copy moves values: the same bits as the steps.
Anything else (a shape the constant shapes do not describe, other ranks) runs the
three nodes as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.kernels._tensor_common import as_ints
from onnxviz.runtime.kernels.nn_conv import out_empty
from onnxviz.runtime.kernels.nn_conv_nhwc import is_channels_last, nhwc_view
from onnxviz.runtime.kernels.tensor_shape import reshape_target
from onnxviz.runtime.plan import (
    Expected,
    PlanNode,
    checked_steps_node,
    has_constants,
    plain_kernel,
    run_steps,
)

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_SWAP_GROUPS = (0, 2, 1, 3, 4)
_CHANNELS = native.load("channels")


def _constant_shape(pn: PlanNode, constants: dict[int, Any], rank: int) -> np.ndarray | None:
    """A plain Reshape's constant target shape of ``rank`` entries, or None."""
    if not plain_kernel(pn, "Reshape") or len(pn.inputs) != 2:
        return None
    shape = constants.get(pn.inputs[1])
    if type(shape) is not np.ndarray or shape.dtype != np.int64 or shape.shape != (rank,):
        return None
    return shape


def find_channel_shuffles(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    keep: set[int],
    taken: set[int],
    constants: dict[int, Any],
) -> list[list[int]]:
    """[Reshape, Transpose, Reshape] positions of every shuffle above whose inner values
    only the next step reads, none of them in ``taken``."""
    found: list[list[int]] = []
    for i, first in enumerate(nodes):
        if i in taken or _constant_shape(first, constants, 5) is None:
            continue
        at = [i]
        slot = first.outputs[0]
        for want in ("Transpose", "Reshape"):
            readers = users.get(slot, [])
            if slot in keep or len(readers) != 1 or readers[0] in taken:
                break
            pn = nodes[readers[0]]
            if not plain_kernel(pn, want) or pn.inputs[0] != slot:
                break
            if want == "Transpose" and tuple(pn.attrs.get("perm") or ()) != _SWAP_GROUPS:
                break
            if want == "Reshape" and _constant_shape(pn, constants, 4) is None:
                break
            at.append(readers[0])
            slot = pn.outputs[0]
        if len(at) == 3:
            found.append(at)
    return found


def channel_shuffle_node(
    nodes: list[PlanNode], positions: list[int], constants: dict[int, Any]
) -> PlanNode:
    """The fused node of the shuffle at ``positions`` (from find_channel_shuffles)."""
    return checked_steps_node(nodes, positions, constants, ChannelShuffle)


def _resolved(shape: np.ndarray, source: tuple[int, ...], allow_zero: bool) -> tuple[int, ...]:
    """Reshape's target ``shape`` for an input of shape ``source`` (the Reshape kernel's
    own resolution of 0 and -1), or () when it does not fit: the steps then run and
    report it."""
    try:
        return tuple(reshape_target(source, as_ints(shape), int(allow_zero)))
    except ExecutionError:
        return ()


class ChannelShuffle:
    """The shuffle of the module docstring; ``groups`` is worked out per input shape."""

    def __init__(self, steps: list[PlanNode], place_of: dict[int, int], expected: Expected) -> None:
        self.steps = steps
        self.place_of = place_of
        self.expected = expected  # (the two shapes)
        self._groups: tuple[tuple[int, ...], int] = ((), 0)  # (input shape, G; 0: no fit)

    def groups_for(self, shape: tuple[int, ...]) -> int:
        """G when the two constant shapes describe a shuffle of an input of ``shape`` (4-D),
        else 0."""
        kept_shape, groups = self._groups
        if kept_shape == shape:
            return groups
        groups = 0
        first, _, last = self.steps
        split = _resolved(self.expected[0][1], shape, bool(first.attrs.get("allowzero", 0)))
        if len(shape) == 4 and len(split) == 5:
            n, c, h, w = shape
            g = split[1]
            if g >= 1 and split == (n, g, c // g, h, w) and c % g == 0:
                swapped = (n, c // g, g, h, w)
                back = _resolved(self.expected[1][1], swapped, bool(last.attrs.get("allowzero", 0)))
                groups = g if back == shape else 0
        self._groups = (shape, groups)
        return groups

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        x = ins[0]
        if (
            type(x) is np.ndarray
            and x.ndim == 4
            and len(self.expected) == 2
            and has_constants(ins, self.expected)
        ):
            g = self.groups_for(x.shape)
            if g:
                return [shuffle(x, g)]
        return run_steps(ex, self.steps, self.place_of, ins)


def shuffle(x: np.ndarray, groups: int) -> np.ndarray:
    """The channel shuffle of the 4-D ``x`` between ``groups`` groups (channels a
    multiple of it), in x's layout: channels-last in, channels-last out; else NCHW."""
    n, c, h, w = x.shape
    per = c // groups
    if is_channels_last(x) and x.size:
        rows = nhwc_view(x).reshape(n * h * w, c)
        if _CHANNELS is not None and x.dtype == np.float32:
            out = out_empty((n, h, w, c))
            _CHANNELS.shuffle(rows, out.reshape(n * h * w, c), (n * h * w, groups, per))
        else:
            out = np.empty((n, h, w, c), dtype=x.dtype)
            out.reshape(n * h * w, per, groups)[...] = rows.reshape(-1, groups, per).transpose(
                0, 2, 1
            )
        return out.transpose(0, 3, 1, 2)
    y = np.empty(x.shape, dtype=x.dtype)
    y.reshape(n, per, groups, h * w)[...] = x.reshape(n, groups, per, h * w).transpose(0, 2, 1, 3)
    return y
