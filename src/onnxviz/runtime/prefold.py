"""Constant folding when an unwatched node list is made, before its first run.

A *foldable* node (plan._mark_foldable: deterministic, every input a constant or another
foldable node's output) used to be folded by the executor on its first run
(executor._keep_folded).  The node list of unwatched runs (fusion.run_nodes) is made
before that run, and its specializers (prepared.py) only see the constants known then:
the initializers.  A TorchScript export hands most of its axes, split sizes and shapes
to Split, Reshape, Squeeze and Unsqueeze through Constant nodes, so those nodes ran
their kernels' general path on every run (a GPT-2 decode step's two Splits 15 us each,
its eight Reshapes 3-7 us).

`prefold` folds the foldable nodes of a plan into ``pn.folded`` first, in order, by their
kernels, as the executor would on the first run (the same calls, so the same values,
read-only; kept in ``plan.folded_values``), and says which slots they fill so the node
list's specializers get them as constants.  A node whose kernel raises is left to the
run, which raises with the node named.  Runs that must not use folded values (a feed
overriding an initializer: Executor.fold) compute those nodes as before; a specialized
call made for a folded value checks its identity and takes the kernel for another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime.invoke import spec_outputs
from onnxviz.runtime.registry import no_generator

if TYPE_CHECKING:
    from onnxviz.runtime.plan import GraphPlan, PlanNode


def prefold(plan: GraphPlan) -> dict[int, Any]:
    """Fold every foldable node of ``plan`` not yet folded; the folded values of all its
    folded nodes by slot."""
    values: dict[int, Any] = dict(plan.constants)
    folded: dict[int, Any] = {}
    with np.errstate(all="ignore"):
        for pn in plan.nodes:
            if not pn.foldable:
                continue
            outs = pn.folded
            if outs is None:
                outs = _fold(pn, values)
                if outs is None:
                    continue
                for v in outs:
                    if type(v) is np.ndarray:
                        v.flags.writeable = False
                pn.folded = outs
                plan.folded_values.extend(outs)
            for s, v in zip(pn.outputs, outs):
                if s >= 0:
                    values[s] = v
                    folded[s] = v
    return folded


def _fold(pn: PlanNode, values: dict[int, Any]) -> list[Any] | None:
    """The node's outputs by its kernel on the known ``values``, or None (an input not
    known, no plain kernel, or the kernel raised)."""
    spec = pn.spec
    if spec is None or any(s >= 0 and s not in values for s in pn.inputs):
        return None
    ins = [values[s] if s >= 0 else None for s in pn.inputs]
    try:
        outs = list(spec_outputs(pn, ins, no_generator))
    except Exception:  # the run computes it and names the node in its error
        return None
    if len(outs) < len(pn.outputs):
        outs += [None] * (len(pn.outputs) - len(outs))
    return outs
