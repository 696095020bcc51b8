"""A dynamic-quantized MatMul's float tail run with its integer product, in unwatched runs.

onnxruntime.quantization's ``quantize_dynamic`` writes each MatMul by a constant as::

    q, s, z = DynamicQuantizeLinear(x)        (shared by every MatMul reading x)
    acc = MatMulInteger(q, Wq, z, zw)         int32
    f = Cast(acc, to=FLOAT)
    y = Mul(f, s * sw)                        either order; one scale, or one per column
    y = Add(y, bias)                          either order; not always there

The three nodes after the product each pass over its M x N values (about 5 us each on a
BERT-tiny layer's 128 x 128, most of it the nodes' fixed cost).  `find_integer_matmuls`
finds the chain (each intermediate read only by the next node, none a graph output) and
`IntegerMatMulScaled` runs it as the exact int32 product (kernels/int8_products.py) and
one compiled pass (native/_int8.c's ``scale_columns``: float32(acc) * s[n] + b[n], each
step rounded to float32 as the nodes round it).  So the result is the nodes' bit for bit.
Anything else (a scale or bias of another shape or dtype, a product the kernel does not
take, the kernels off) runs the nodes one by one: their results and errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime import native, quiet_loop
from onnxviz.runtime.fusion_qdq import only_reader
from onnxviz.runtime.kernels import _weight_cache, int8_products
from onnxviz.runtime.plan import PlanNode, plain_kernel, run_steps, steps_node

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_F32 = np.dtype(np.float32)
_FLOAT = 1  # TensorProto.FLOAT


def _binary(pn: PlanNode, op_type: str, operand: int) -> bool:
    """A broadcasting ``op_type`` of ``operand`` and another value."""
    return (
        plain_kernel(pn, op_type)
        and pn.opset >= 7
        and len(pn.inputs) == 2
        and min(pn.inputs) >= 0
        and pn.outputs[0] >= 0
        and pn.inputs.count(operand) == 1
    )


def find_integer_matmuls(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    const: set[int],
    keep: set[int],
    taken: set[int],
) -> list[list[int]]:
    """Node positions (MatMulInteger, Cast, Mul[, Add]) of every chain above, none of
    them in ``taken``."""
    found: list[list[int]] = []

    def only(slot: int) -> tuple[int, PlanNode] | None:
        """The one node reading ``slot``, if nothing else sees the value."""
        reader = only_reader(users, slot, keep)
        return None if reader is None or reader in taken else (reader, nodes[reader])

    for i, mm in enumerate(nodes):
        if (
            i in taken
            or not plain_kernel(mm, "MatMulInteger")
            or not 2 <= len(mm.inputs) <= 4
            or min(mm.inputs) < 0
            or mm.inputs[1] not in const
            or mm.outputs[0] < 0
        ):
            continue
        cast = only(mm.outputs[0])
        if (
            cast is None
            or not plain_kernel(cast[1], "Cast")
            or cast[1].attrs.get("to") != _FLOAT
            or cast[1].outputs[0] < 0
        ):
            continue
        mul = only(cast[1].outputs[0])
        if mul is None or not _binary(mul[1], "Mul", cast[1].outputs[0]):
            continue
        positions = [i, cast[0], mul[0]]
        add = only(mul[1].outputs[0])
        if add is not None and _binary(add[1], "Add", mul[1].outputs[0]):
            positions.append(add[0])
        if positions != sorted(positions):
            continue
        found.append(positions)
        taken.update(positions)
    return found


def column_values(v: Any, n: int, rank: int) -> np.ndarray | None:
    """An operand broadcast over a product's columns (a Mul's scale, an Add's or a Gemm's
    bias) as n float32 values, one per column, when it is float32 and broadcasts along
    the columns only: one value, or n values
    along its last axis; never more axes than the product's ``rank`` (which would change
    the result's shape)."""
    if type(v) is not np.ndarray or v.dtype != _F32 or v.ndim > rank:
        return None
    if v.size == 1:
        return np.full(n, v.reshape(()), dtype=_F32)
    if v.size != n or v.shape[-1] != n:
        return None
    return np.ascontiguousarray(v.reshape(n))


class IntegerMatMulScaled:
    """A MatMulInteger -> Cast -> Mul [-> Add] chain as one node (see the module doc)."""

    def __init__(self, steps: list[PlanNode], place_of: dict[int, int]) -> None:
        self.steps = steps
        self.place_of = place_of
        mm, _cast, mul = steps[:3]
        self.product_places = [place_of[s] for s in mm.inputs]
        self.scale_place = place_of[next(s for s in mul.inputs if s != _cast.outputs[0])]
        self.bias_place: int | None = None
        if len(steps) == 4:
            add = steps[3]
            self.bias_place = place_of[next(s for s in add.inputs if s != mul.outputs[0])]
        # The last bias operand and its columns: a constant bias is read once.
        self._bias: tuple[Any, np.ndarray | None] = (None, None)
        # The compiled call the node loop tries first (see the module doc): made on the
        # first call the kernels take, for that call's constants.  `_held_tried`: made,
        # or found that none can be.
        self.quick: Any = None
        self._held_tried = False

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        quick = self.quick
        if quick is not None:
            # The held call takes C-ordered rows only: a strided A (a Transpose of the
            # quantized embedding before a TorchScript attention's projection) came here,
            # 10 us in the Python route with its weight lookup; copied, it takes it (the
            # same kernel, so the same numbers).
            at = self.product_places[0]
            a = ins[at]
            if type(a) is np.ndarray and not a.flags.c_contiguous:
                dense = list(ins)
                dense[at] = np.ascontiguousarray(a)
                out = quick(*dense)
                if out is not None:
                    return [out]
        a, b, *zero_points = [ins[p] for p in self.product_places]
        za = zero_points[0] if zero_points else None
        zb = zero_points[1] if len(zero_points) > 1 else None
        mod = int8_products.module()
        if mod is not None and type(b) is np.ndarray and b.ndim == 2 and type(a) is np.ndarray:
            n = b.shape[1]
            rank = max(a.ndim, 2)
            scale = column_values(ins[self.scale_place], n, rank)
            bias = self._bias_columns(ins, n, rank)
            if scale is not None and bias is not None:
                acc = int8_products.matmul(a, b, za, zb)
                if acc is not None and acc.size:
                    out = np.empty(acc.shape, dtype=_F32)
                    m = acc.size // n
                    mod.scale_columns(acc.reshape(-1), m, n, scale, bias, out.reshape(-1))
                    if not self._held_tried:
                        self._held_tried = True
                        self.quick = self._held(mod, ins, bias)
                    return [out]
        return run_steps(ex, self.steps, self.place_of, ins)

    def _held(self, mod: Any, ins: list[Any], bias: np.ndarray | bytes) -> Any:
        """The compiled call for calls with this call's constants (B, its zero point, the
        bias), or None: they are not frozen (the held call compares them by identity), or
        B was not taken by gemm_rows (a zero point per column)."""
        a, b, *zero_points = [ins[p] for p in self.product_places]
        # The constants the call compares by identity, and their places among its arguments.
        places, constants = [self.product_places[1]], [b]
        zb = None
        if len(zero_points) > 1:
            zb = zero_points[1]
            places.append(self.product_places[3])
            constants.append(zb)
        bias_v = None
        if self.bias_place is not None:
            bias_v = ins[self.bias_place]
            places.append(self.bias_place)
            constants.append(bias_v)
        zb_one = int8_products.one_zero_point(zb, b.dtype)
        if zb_one is None or not all(_weight_cache.frozen(c) for c in constants):
            return None
        za_at = self.product_places[2] if len(zero_points) > 0 else -1
        try:
            return mod.held_rows_scaled(
                int8_products.packed_columns(mod, b, zb_one), a.dtype == np.int8,
                None if isinstance(bias, bytes) else bias,
                0 if bias_v is None else bias_v.ndim,
                self.product_places[0], za_at, self.scale_place, len(ins), tuple(places),
                tuple(constants), quiet_loop.decline, *native.held_arrays(),
            )  # fmt: skip
        except ValueError:  # A among the constants (a product of two constants)
            return None

    def _bias_columns(self, ins: list[Any], n: int, rank: int) -> np.ndarray | bytes | None:
        """The bias as n float32 columns, b'' without an Add, or None (not its shape)."""
        if self.bias_place is None:
            return b""
        v = ins[self.bias_place]
        kept_v, kept = self._bias
        if (
            v is kept_v
            and type(v) is np.ndarray
            and not v.flags.writeable
            and kept is not None
            and kept.size == n
        ):
            return kept
        made = column_values(v, n, rank)
        self._bias = (v, made)
        return made


def integer_matmul_node(nodes: list[PlanNode], positions: list[int]) -> PlanNode:
    return steps_node(nodes, positions, IntegerMatMulScaled)
