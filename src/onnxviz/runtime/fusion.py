"""Fused node lists for unwatched runs (`Session.run` with nobody stepping or keeping values).

A plan's ``nodes`` are what stepping shows, one node at a time.  When nobody looks at
intermediate values, `run_nodes` gives an equivalent list in which some node pairs run
as one ("fused") node:

* **Conv -> BatchNormalization (inference)**: when the Conv output feeds only the
  BatchNormalization, and the Conv weight/bias and the normalization's scale, bias,
  mean and variance are constants (initializers or constant-folded node outputs), the
  normalization is folded into the Conv's weight and bias once (W * k, (b - mean) * k +
  beta, k = scale / sqrt(var + eps), computed in float64) and the pair runs as one Conv.
  The folded weights are cached by the identity of the arrays they came from, so a run
  that feeds other values (IR < 4 overridable initializers) folds again.

The fused node sits at the normalization's position (every input is ready there), takes
the union of both nodes' outside inputs, and its liveness (``free_after``, in-place
candidates) is computed again over the new list.  Every other node is a copy of the
plan's node (liveness differs, the rest is shared).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime.plan import GraphPlan, PlanNode, liveness

if TYPE_CHECKING:
    from onnxviz.runtime.frames import Executor

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def run_nodes(plan: GraphPlan) -> list[PlanNode]:
    """The node list of ``plan`` for unwatched runs (made once per plan)."""
    nodes = plan.run_nodes
    if nodes is None:
        nodes = plan.run_nodes = _fuse(plan)
    return nodes


def _constant_slots(plan: GraphPlan) -> set[int]:
    const = {s for s, _ in plan.constants}
    for pn in plan.nodes:
        if pn.foldable:
            const.update(s for s in pn.outputs if s >= 0)
    return const


def _is_inference_batch_norm(pn: PlanNode) -> bool:
    if pn.kind != "kernel" or pn.domain != "" or pn.op_type != "BatchNormalization":
        return False
    if len(pn.inputs) != 5 or len(pn.outputs) != 1 or min(pn.inputs) < 0:
        return False
    attrs = pn.attrs
    if pn.opset < 7 and not attrs.get("is_test"):
        return False
    return bool(attrs.get("spatial", 1)) and not attrs.get("training_mode", 0)


def _fuse(plan: GraphPlan) -> list[PlanNode]:
    nodes = plan.nodes
    const = _constant_slots(plan)
    keep = {s for s in plan.output_slots if s >= 0}
    users: dict[int, list[int]] = {}
    for i, pn in enumerate(nodes):
        for s in (*pn.inputs, *pn.implicit):
            if s >= 0:
                users.setdefault(s, []).append(i)
    # BatchNormalization position -> the Conv folded into it.
    conv_of: dict[int, int] = {}
    for i, pn in enumerate(nodes):
        if (
            pn.kind != "kernel"
            or pn.domain != ""
            or pn.op_type != "Conv"
            or pn.foldable
            or len(pn.outputs) != 1
            or len(pn.inputs) < 2
            or pn.inputs[1] not in const
            or (len(pn.inputs) > 2 and pn.inputs[2] >= 0 and pn.inputs[2] not in const)
        ):
            continue
        y = pn.outputs[0]
        consumers = users.get(y, [])
        if y < 0 or y in keep or len(consumers) != 1:
            continue
        j = consumers[0]
        bn = nodes[j]
        if (
            _is_inference_batch_norm(bn)
            and bn.inputs[0] == y
            and y not in bn.inputs[1:]
            and all(s in const for s in bn.inputs[1:])
        ):
            conv_of[j] = i
    if not conv_of:
        out = [dataclasses.replace(pn) for pn in nodes]
    else:
        folded_convs = set(conv_of.values())
        out = []
        for j, pn in enumerate(nodes):
            if j in folded_convs:
                continue
            head = conv_of.get(j)
            out.append(dataclasses.replace(pn) if head is None else _conv_bn_node(nodes[head], pn))
    liveness(out, plan.slots, plan.output_names)
    return out


def _conv_bn_node(conv: PlanNode, bn: PlanNode) -> PlanNode:
    conv_ins = tuple(conv.inputs) + (-1,) * (3 - len(conv.inputs))
    conv_names = tuple(conv.input_names) + ("",) * (3 - len(conv.input_names))
    return dataclasses.replace(
        conv,
        kind="fused",
        inputs=conv_ins + tuple(bn.inputs[1:]),
        input_names=conv_names + tuple(bn.input_names[1:]),
        outputs=bn.outputs,
        output_names=bn.output_names,
        foldable=False,
        fused=ConvBatchNorm(conv, bn),
        inplace_dead=None,
    )


class ConvBatchNorm:
    """Conv followed by an inference BatchNormalization, as one Conv with folded weights."""

    def __init__(self, conv: PlanNode, bn: PlanNode) -> None:
        self.conv = conv
        self.bn = bn
        self.epsilon = float(bn.attrs.get("epsilon", 1e-5))
        self._key: tuple[Any, ...] | None = None
        self._folded: tuple[np.ndarray, np.ndarray] | None = None

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        x, w, b = ins[0], ins[1], ins[2]
        params = ins[3:7]
        key = (w, b, *params)
        if self._key is None or any(k is not v for k, v in zip(self._key, key)):
            self._folded = _fold(w, b, params, self.epsilon)
            self._key = key
        if self._folded is None or x.dtype != self._folded[0].dtype:
            # Not foldable (dtypes, shapes): the two kernels one after the other.
            y = ex.call_kernel(self.conv, [x, w, b][: len(self.conv.inputs)])
            return ex.call_kernel(self.bn, [y[0], *params])
        wf, bf = self._folded
        return ex.call_kernel(self.conv, [x, wf, bf])


def _fold(
    w: Any, b: Any, params: list[Any], epsilon: float
) -> tuple[np.ndarray, np.ndarray] | None:
    arrays = [w, *params] + ([b] if b is not None else [])
    if any(type(a) is not np.ndarray or a.dtype not in _FLOATS for a in arrays):
        return None
    m = w.shape[0] if w.ndim >= 3 else -1
    if any(p.shape != (m,) for p in params) or (b is not None and b.shape != (m,)):
        return None
    scale, beta, mean, var = (p.astype(np.float64) for p in params)
    k = scale / np.sqrt(var + epsilon)
    bias = b.astype(np.float64) if b is not None else np.zeros(m)
    wf = (w.astype(np.float64) * k.reshape((m,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    bf = ((bias - mean) * k + beta).astype(w.dtype)
    return wf, bf
