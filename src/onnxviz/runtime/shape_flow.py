"""Shapes a graph does not declare, carried from those it does (fusion time, unwatched runs).

`fusion_elementwise` lets a chain read another node's value as a tensor operand only
where the two values are known to share a shape (a broadcast one would be copied on
every run, and its nodes belong to other fusions).  A dynamo export declares every
value's shape (value_info); a TorchScript export declares its inputs and outputs only.
`complete_shapes` carries the declared shapes, and the constants' own, through the ops
whose output shape follows from their inputs' alone: elementwise ops, Gemm and MatMul,
Gather by a constant index, Split, Squeeze and Unsqueeze by constant axes.  An axis is a
size, a symbolic name, or None (unknown); a shape it cannot work out stays unknown, and
an unknown shape is never taken for another.  No ONNX shape inference runs (that is the
onnx package's C++ code, which the app never runs in its own process on a user's model).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from onnxviz.runtime.plan import PlanNode

Shape = tuple[Any, ...]

# Ops whose output has their first input's shape.
_SAME = frozenset(
    {
        "Abs", "Cast", "Ceil", "Clip", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid",
        "HardSwish", "Identity", "LeakyRelu", "Log", "Neg", "Reciprocal", "Relu", "Round",
        "Selu", "Sigmoid", "Sign", "Softplus", "Sqrt", "Tanh",
    }
)  # fmt: skip
# Ops whose output is their inputs' broadcast shape.
_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Where"})


def complete_shapes(
    nodes: list[PlanNode], declared: dict[int, Shape], constants: dict[int, Any]
) -> dict[int, Shape]:
    """slot -> shape: ``declared`` (GraphPlan.shapes), the constants' shapes, and what the
    ops above make of them, in node order (a declared shape is kept as declared)."""
    known: dict[int, Shape] = dict(declared)
    for slot, value in constants.items():
        if isinstance(value, np.ndarray):
            known.setdefault(slot, tuple(value.shape))
    for pn in nodes:
        if pn.kind != "kernel" or pn.domain != "":
            continue
        try:
            outs = _outputs(pn, known, constants)
        except (TypeError, ValueError, IndexError, ZeroDivisionError):
            outs = None  # an attribute or constant of an unexpected kind: unknown
        if outs is None:
            continue
        for slot, shape in zip(pn.outputs, outs):
            if slot >= 0 and shape is not None:
                known.setdefault(slot, shape)
    return known


def _outputs(
    pn: PlanNode, known: dict[int, Shape], constants: dict[int, Any]
) -> list[Shape | None] | None:
    ins = [known.get(s) if s >= 0 else None for s in pn.inputs]
    op = pn.op_type
    if op in _SAME:
        return [ins[0]] if ins and ins[0] is not None else None
    if op in _BROADCAST:
        if not ins or any(s is None for s in ins):
            return None
        shape: Shape | None = ins[0]
        for other in ins[1:]:
            shape = _broadcast(shape, other) if shape is not None and other is not None else None
        return [shape]
    if op == "Gemm" and len(ins) >= 2 and ins[0] is not None and ins[1] is not None:
        a, b = ins[0], ins[1]
        if len(a) != 2 or len(b) != 2:
            return None
        rows = a[1] if pn.attrs.get("transA", 0) else a[0]
        cols = b[0] if pn.attrs.get("transB", 0) else b[1]
        return [(rows, cols)]
    if op == "MatMul" and len(ins) == 2 and ins[0] is not None and ins[1] is not None:
        left, right = ins[0], ins[1]
        return [(*left[:-1], right[1])] if len(left) >= 2 and len(right) == 2 else None
    if op == "Gather" and len(ins) == 2 and ins[0] is not None:
        index = constants.get(pn.inputs[1])
        data = ins[0]
        if not isinstance(index, np.ndarray) or not data:
            return None
        axis = int(pn.attrs.get("axis", 0)) % len(data)
        return [(*data[:axis], *index.shape, *data[axis + 1 :])]
    if op == "Split" and ins and ins[0] is not None:
        return _split(pn, ins[0], constants)
    if op in ("Squeeze", "Unsqueeze") and ins and ins[0] is not None:
        axes = _axes(pn, constants)
        if axes is None:
            return None
        data = ins[0]
        if op == "Squeeze":
            rank = len(data)
            drop = {a % rank for a in axes}
            if any(data[a] != 1 for a in drop):
                return None
            return [tuple(d for i, d in enumerate(data) if i not in drop)]
        rank = len(data) + len(axes)
        add = {a % rank for a in axes}
        rest = iter(data)
        return [tuple(1 if i in add else next(rest) for i in range(rank))]
    return None


def _broadcast(a: Shape, b: Shape) -> Shape | None:
    """numpy's broadcast of two shapes whose axes may be names; None where an axis pair
    is neither equal nor one of them 1 (or unknown)."""
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + a
    b = (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x is None or y is None:
            return None
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def _axes(pn: PlanNode, constants: dict[int, Any]) -> list[int] | None:
    """Squeeze's or Unsqueeze's axes: an attribute (before opset 13) or a constant input."""
    if "axes" in pn.attrs:
        return [int(a) for a in pn.attrs["axes"]]
    if len(pn.inputs) > 1 and pn.inputs[1] >= 0:
        value = constants.get(pn.inputs[1])
        return [int(a) for a in np.asarray(value).reshape(-1)] if value is not None else None
    return None


def _split(pn: PlanNode, data: Shape, constants: dict[int, Any]) -> list[Shape | None] | None:
    axis = int(pn.attrs.get("axis", 0)) % len(data)
    n = len(pn.outputs)
    sizes: list[int] | None = None
    if len(pn.inputs) > 1 and pn.inputs[1] >= 0:
        value = constants.get(pn.inputs[1])
        if value is None:
            return None
        sizes = [int(v) for v in np.asarray(value).reshape(-1)]
    elif "split" in pn.attrs:
        sizes = [int(v) for v in pn.attrs["split"]]
    dim = data[axis]
    if sizes is None:
        if not isinstance(dim, int) or dim % n:
            return None  # (an uneven num_outputs split: its last part is shorter)
        sizes = [dim // n] * n
    if len(sizes) != n or (isinstance(dim, int) and sum(sizes) != dim):
        return None
    return [(*data[:axis], size, *data[axis + 1 :]) for size in sizes]
