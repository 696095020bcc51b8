"""Where onnxruntime and our interpreter first part (``onnxviz run --first-divergence``).

Bisection over the graph's (topological) order, comparing one node's outputs at a
time: both engines run to produce just those few values.  When the node found has an
input that is itself beyond the tolerance, the search moves to that input's producer,
so the node reported is beyond the tolerance while everything it reads is within: the
place where the two engines part.  When the difference is onnxruntime's inexact
integer arithmetic, the report says so (`exact_integer.peer_inexact`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx

from onnxviz.runtime import ort_engine
from onnxviz.runtime.ort_engine import EngineOptions


def _peer_note(
    doc: Any,
    model: onnx.ModelProto,
    node: onnx.NodeProto,
    feeds: Mapping[str, Any],
    ours: Callable[[list[str]], Mapping[str, Any]],
    theirs: Callable[[list[str]], Mapping[str, Any]],
    producers: Mapping[str, int],
) -> str:
    """`exact_integer.peer_inexact` for the node found: its inputs (ours) and one more
    run of each engine for its first output.  "" when nothing explains the difference."""
    from onnxviz.model.tensors import to_array
    from onnxviz.runtime.exact_integer import peer_inexact

    outs = [o for o in node.output if o][:1]
    if not outs:
        return ""
    try:
        computed = [n for n in node.input if n in producers]
        mine = dict(ours(computed)) if computed else {}
        inits = {t.name: t for t in model.graph.initializer}
        base_dir = getattr(doc, "base_dir", None)

        def value_of(name: str) -> Any:
            if name in mine:
                return mine[name]
            if name in feeds:
                return feeds[name]
            t = inits.get(name)
            return to_array(t, base_dir) if t is not None else None

        return peer_inexact(node, value_of, ours(outs)[outs[0]], theirs(outs)[outs[0]])
    except Exception:  # no verdict: the numbers speak
        return ""


@dataclass
class Divergence:
    """Where onnxruntime and our interpreter first part.  ``node_index`` is None when
    every probed value is within the tolerance."""

    node_index: int | None
    address: str | None
    op_type: str | None
    diffs: list[Any]  # compare.ValueDiff of that node's outputs
    probes: int  # how many nodes were compared
    probed: list[int] = field(default_factory=list)
    note: str = ""  # why onnxruntime's number is the inexact one, when known

    def text(self) -> str:
        if self.node_index is None:
            return f"no divergence: {self.probes} nodes probed, all within the tolerance"
        worst = max(
            (d for d in self.diffs if d.max_abs is not None),
            key=lambda d: d.max_abs,
            default=None,
        )
        detail = ""
        if worst is not None:
            detail = f": {worst.name} max abs {worst.max_abs:.3g}, max rel {worst.max_rel:.3g}"
        elif self.diffs:
            d = self.diffs[0]
            detail = f": {d.name} " + (
                f"shapes {d.shape_mismatch[0]} vs {d.shape_mismatch[1]}"
                if d.shape_mismatch
                else "differs"
            )
        text = (
            f"first divergence at {self.address} ({self.op_type}, node {self.node_index}) "
            f"after {self.probes} probes{detail}"
        )
        return text + (f" ({self.note})" if self.note else "")


def first_divergence(
    doc: Any,
    feeds: Mapping[str, Any],
    *,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    seed: int = 0,
    options: EngineOptions | None = None,
    ours: Callable[[list[str]], Mapping[str, Any]] | None = None,
    theirs: Callable[[list[str]], Mapping[str, Any]] | None = None,
) -> Divergence:
    """Bisect the main graph's node order for the first node whose outputs differ
    between our interpreter and onnxruntime beyond ``atol + rtol * |theirs|``.

    ``ours``/``theirs`` (names -> values) replace the two engines, for tests.  Each
    probe holds one node's outputs from each side and nothing else."""
    from onnxviz.runtime.compare import errors_between

    model: onnx.ModelProto = getattr(doc, "model", doc)
    nodes = list(model.graph.node)
    labels = ort_engine.RunnableModel.of(doc).labels
    if ours is None:
        from onnxviz.runtime.session import Session

        session = Session(doc, seed=seed)

        def ours(names: list[str]) -> Mapping[str, Any]:
            return session.run(feeds, fetch=names)

    if theirs is None:

        def theirs(names: list[str]) -> Mapping[str, Any]:
            # through the module: a test may stand in for onnxruntime there
            return ort_engine.fetch_values(doc, feeds, names, options)

    cache: dict[int, list[Any]] = {}
    probed: list[int] = []

    def diffs_at(index: int) -> list[Any]:
        if index not in cache:
            outs = [o for o in nodes[index].output if o]
            mine = ours(outs)
            peer = theirs(outs)
            cache[index] = [errors_between(n, mine.get(n), peer.get(n)) for n in outs]
            probed.append(index)
        return cache[index]

    def beyond(index: int) -> bool:
        return any(d.beyond(atol, rtol) for d in diffs_at(index))

    def result(index: int | None) -> Divergence:
        if index is None:
            return Divergence(None, None, None, [], len(probed), probed)
        found = Divergence(
            index,
            f"main::{labels[index]}",
            nodes[index].op_type,
            diffs_at(index),
            len(probed),
            probed,
        )
        found.note = _peer_note(doc, model, nodes[index], feeds, ours, theirs, producers)
        return found

    producers = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    # Start from the graph's outputs (and the last node): when they all agree there is
    # nothing to look for; else the earliest one that differs bounds the search.
    ends = {producers[o.name] for o in model.graph.output if o.name in producers}
    if nodes:
        ends.add(len(nodes) - 1)
    bad = [i for i in sorted(ends) if beyond(i)]
    if not bad:
        return result(None)
    hi = bad[0]
    lo = 0
    # Invariant: node ``hi`` is beyond; the first divergence is at or before it.
    while lo < hi:
        mid = (lo + hi) // 2
        if beyond(mid):
            hi = mid
        else:
            lo = mid + 1
    # Walk back along inputs that are themselves beyond, to a node whose inputs agree.
    index = hi
    while True:
        upstream = [
            producers[i]
            for i in nodes[index].input
            if i in producers and producers[i] < index and beyond(producers[i])
        ]
        if not upstream:
            return result(index)
        index = min(upstream)
