"""QuantizeLinear -> DequantizeLinear pairs that give back their input (unwatched runs).

onnxruntime.quantization's QDQ format puts a pair after every quantized activation,
also after the ops that only move values: a transformer's Reshape and Transpose of its
Q, K and V, a CNN's Flatten.  The quantizer gives such an op's output the parameters of
its input, so the value the pair gets is already on the pair's grid::

    u = DequantizeLinear(c, s, z)          u = float32((c - z) * s), c an integer code
    x = Reshape/Transpose/...(u)           the same values, moved
    y = DequantizeLinear(QuantizeLinear(x, s, z), s, z)

and y == x element for element: with s a normal float32, x / s in float32 is within
|c - z| * 2^-23 of the integer c - z (|c - z| < 2^16 for 8- and 16-bit codes: less than
0.01), so rounding gives c - z exactly, adding z gives c, which is in the type's range,
and the dequantizer computes u's own float32 product again.  Stepped, the pair is a
division, a rounding and a product over every element (a transformer's Transpose pairs
read a strided view: 14-24 us each on BERT-tiny's 16K values); `IdlePair` returns x.

`find_idle_pairs` takes a pair when its input comes from a DequantizeLinear through
nothing but Reshape, Transpose, Squeeze, Unsqueeze, Flatten and Identity, and the three
scales are one equal normal float32 and the three zero points one equal 8- or 16-bit
integer (plan constants).  Any fused node that ends at that DequantizeLinear (a QDQ
MatMul's, conv's or pair's rescale) ends with the same float32 product of an integer
code, so its output is on the grid as well.  At run time the node checks that its
parameters are still the very constants it was planned with (a run that overrides an
initializer feeds others) and that x is a float32 array; otherwise it runs the two
nodes one by one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime.fusion_qdq import plain_dequantizer, plain_quantizer, scalar
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

# The ops whose output holds their first input's values, only moved.
_MOVES = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity")
_CODE_TYPES = frozenset(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16))
_F32 = np.dtype(np.float32)
_TINY = float(np.finfo(np.float32).tiny)
# |c - z| * s must stay finite: below this scale it does for every 16-bit code.
_HUGE = float(np.finfo(np.float32).max) / 65536


def _grid(pn: PlanNode, constants: dict[int, Any]) -> tuple[bytes, np.dtype[Any], int] | None:
    """The (scale's float32 bytes, zero point's dtype, zero point) of a per-tensor
    quantizer or dequantizer whose parameters are plan constants, or None."""
    if len(pn.inputs) != 3:
        return None
    s, z = constants.get(pn.inputs[1]), constants.get(pn.inputs[2])
    if not scalar(s, _F32) or not scalar(z):
        return None
    assert s is not None and z is not None  # (scalar() said so)
    if z.dtype not in _CODE_TYPES:
        return None
    scale = float(s.reshape(()))
    if not _TINY <= scale <= _HUGE:
        return None
    return s.reshape(()).tobytes(), z.dtype, int(z.reshape(()))


def find_idle_pairs(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    producer: dict[int, int],
    keep: set[int],
    taken: set[int],
    constants: dict[int, Any],
) -> list[list[int]]:
    """[Quantize position, Dequantize position] of every pair above, neither in
    ``taken``."""
    found: list[list[int]] = []
    for i, q in enumerate(nodes):
        if i in taken or not plain_quantizer(q) or q.outputs[0] < 0:
            continue
        codes = q.outputs[0]
        readers = users.get(codes, [])
        if codes in keep or len(readers) != 1 or readers[0] in taken:
            continue
        dq_at = readers[0]
        dq = nodes[dq_at]
        if not plain_dequantizer(dq) or dq.inputs[0] != codes or dq.outputs[0] in keep:
            continue
        grid = _grid(q, constants)
        if grid is None or _grid(dq, constants) != grid:
            continue
        # Back through the moves to the value's dequantizer.
        at = producer.get(q.inputs[0])
        while at is not None and plain_kernel(nodes[at], nodes[at].op_type):
            if nodes[at].op_type not in _MOVES or not nodes[at].inputs:
                break
            at = producer.get(nodes[at].inputs[0])
        if at is None or nodes[at].op_type != "DequantizeLinear":
            continue
        source = nodes[at]
        if source.kind != "kernel" or source.domain != "" or source.attrs.get("block_size", 0):
            continue
        if _grid(source, constants) == grid and source.attrs.get("output_dtype", 0) in (0, 1):
            found.append([i, dq_at])
    return found


def idle_pair_node(
    nodes: list[PlanNode], positions: list[int], constants: dict[int, Any]
) -> PlanNode:
    """The fused node of the pair at ``positions`` (from find_idle_pairs)."""
    return checked_steps_node(nodes, positions, constants, IdlePair)


class IdlePair:
    """A pair over a value already on its grid: the value itself (module docstring)."""

    def __init__(self, steps: list[PlanNode], place_of: dict[int, int], expected: Expected) -> None:
        self.steps = steps
        self.place_of = place_of
        self.expected = expected

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        x = ins[0]
        if type(x) is np.ndarray and x.dtype == _F32 and has_constants(ins, self.expected):
            return [x]
        return run_steps(ex, self.steps, self.place_of, ins)
