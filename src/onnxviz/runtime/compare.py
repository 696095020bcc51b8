"""Compare our interpreter with onnxruntime on the same feeds, value by value.

onnxruntime only returns graph outputs, so every main-graph node output is added to a
copy of the model as an extra output ("intermediates exposed as outputs").  For each
node (in graph order) we report the largest absolute and relative error over its
outputs, and the first node whose error passes a tolerance: the place where the two
runtimes start to disagree.  Subgraph values cannot be exposed this way; the node that
owns the subgraph (Loop, If, ...) is compared on its outputs.

Where the two differ on an integer matmul or conv, the node is recomputed in exact
arithmetic (exact_integer.py), and when ours is the exact one the comparison says so in
words: onnxruntime's u8s8 kernels saturate on AVX2 CPUs without VNNI.

No Qt here: the run panel and ``onnxviz run --compare`` share this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from onnxviz.runtime.exact_integer import initializer_lookup, peer_inexact


@dataclass
class ValueDiff:
    """How one value differs.  ``max_abs``/``max_rel`` are None when not comparable
    (not a tensor on one side, or a missing value); ``shape_mismatch`` holds both shapes."""

    name: str
    max_abs: float | None = None
    max_rel: float | None = None
    ref_scale: float = 0.0  # largest |value| on the peer's side
    shape_mismatch: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    equal: bool | None = None  # for string tensors
    note: str = ""

    def beyond(self, atol: float, rtol: float) -> bool:
        """True when the difference passes ``atol + rtol * |reference|``."""
        if self.shape_mismatch is not None or self.equal is False:
            return True
        if self.max_abs is None:
            return False
        return self.max_abs > atol + rtol * self.ref_scale


@dataclass
class NodeComparison:
    address: str  # "main::<label>"
    index: int
    op_type: str
    values: list[ValueDiff] = field(default_factory=list)
    # Why the difference is the peer's, when we know (exact_integer.peer_inexact).
    peer_note: str = ""

    @property
    def max_abs(self) -> float | None:
        found = [v.max_abs for v in self.values if v.max_abs is not None]
        return max(found) if found else None

    @property
    def max_rel(self) -> float | None:
        found = [v.max_rel for v in self.values if v.max_rel is not None]
        return max(found) if found else None

    def beyond(self, atol: float, rtol: float) -> bool:
        return any(v.beyond(atol, rtol) for v in self.values)


@dataclass
class Comparison:
    peer: str
    nodes: list[NodeComparison]  # main-graph nodes in graph order
    outputs: list[ValueDiff]

    def first_beyond(self, atol: float = 1e-4, rtol: float = 1e-3) -> NodeComparison | None:
        return next((n for n in self.nodes if n.beyond(atol, rtol)), None)

    def summary(self, atol: float = 1e-4, rtol: float = 1e-3) -> str:
        """One sentence for the run panel: where the runtimes part, and whose number is
        wrong there when that is known."""
        first = self.first_beyond(atol, rtol)
        text = f"compared {len(self.nodes)} nodes with {self.peer}; "
        if first is None:
            return text + "all within"
        text += f"first node beyond the tolerance: {first.address}"
        return text + (f" ({first.peer_note})" if first.peer_note else "")

    def by_address(self) -> dict[str, NodeComparison]:
        return {n.address: n for n in self.nodes}


def errors_between(name: str, ours: Any, theirs: Any) -> ValueDiff:
    """Largest absolute and relative error between two values (NaN against NaN and the
    same infinity count as equal; a NaN against a number is an infinite error)."""
    out = ValueDiff(name)
    if theirs is None:
        out.note = "no value from the peer"
        return out
    if not isinstance(ours, np.ndarray) or not isinstance(theirs, np.ndarray):
        out.note = "not a tensor"
        return out
    if ours.shape != theirs.shape:
        out.shape_mismatch = (tuple(ours.shape), tuple(theirs.shape))
        return out
    if ours.dtype.kind in "OUS" or theirs.dtype.kind in "OUS":
        out.equal = bool(np.array_equal(ours.astype(str), theirs.astype(str)))
        return out
    if ours.size == 0:
        out.max_abs = out.max_rel = 0.0
        return out
    a = ours.astype(np.float64)
    b = theirs.astype(np.float64)
    with np.errstate(all="ignore"):
        diff = np.abs(a - b)
        both_nan = np.isnan(a) & np.isnan(b)
        same_inf = np.isinf(a) & (a == b)
        diff = np.where(both_nan | same_inf, 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
        rel = diff / np.maximum(np.abs(b), 1e-12)
        finite_b = np.abs(b[np.isfinite(b)])
    out.max_abs = float(diff.max())
    out.max_rel = float(rel.max())
    out.ref_scale = float(finite_b.max()) if finite_b.size else 0.0
    return out


def run_onnxruntime(
    model: Any, feeds: Mapping[str, Any], extra_outputs: list[str], *, base_dir: str | None = None
) -> dict[str, Any]:
    """Outputs and the requested main-graph values as onnxruntime computes them.

    ``model`` is a ModelProto or a Document; external data (and single-file weights
    left in place) are read from the Document's folder, or ``base_dir``, whatever the
    current directory is (`ort_engine.RunnableModel`)."""
    from onnxviz.runtime import ort_engine

    source = model
    if isinstance(model, onnx.ModelProto) and base_dir is not None:
        source = ort_engine.ModelInFolder(model, base_dir)
    proto = getattr(source, "model", source)
    names = [o.name for o in proto.graph.output] + list(extra_outputs)
    return ort_engine.fetch_values(source, feeds, names)


def node_output_names(model: onnx.ModelProto) -> list[tuple[int, onnx.NodeProto, list[str]]]:
    """Main-graph nodes with their non-empty output names, in graph order."""
    return [(i, n, [o for o in n.output if o]) for i, n in enumerate(model.graph.node)]


def compare_with_onnxruntime(
    model: onnx.ModelProto,
    feeds: Mapping[str, Any],
    ours: Mapping[str, Any] | None = None,
    *,
    base_dir: str | None = None,
) -> Comparison:
    """Run ``feeds`` in onnxruntime and compare with ``ours`` (main-graph values by
    name; None: run our interpreter here and fetch every main-graph node output)."""
    from onnxviz.model.scopes import build_scopes

    nodes = node_output_names(model)
    wanted = [name for _, _, outs in nodes for name in outs]
    if ours is None:
        from onnxviz.runtime.session import Session

        class _Doc:
            pass

        holder = _Doc()
        holder.model = model  # type: ignore[attr-defined]
        holder.base_dir = base_dir  # type: ignore[attr-defined]
        ours = Session(holder).run(feeds, fetch=wanted)
    from onnxviz.runtime.ort_engine import ModelInFolder

    # the model with its folder: external data resolves from any working directory
    source = ModelInFolder(model, base_dir) if base_dir is not None else model
    theirs = run_onnxruntime(source, feeds, [n for n in wanted if n in ours])
    main = next(s for s in build_scopes(model) if s.path == "main")
    value_of = initializer_lookup(model, ours, feeds)
    result: list[NodeComparison] = []
    for index, node, outs in nodes:
        nc = NodeComparison(f"main::{main.node_label(index)}", index, node.op_type)
        for name in outs:
            if name in ours:
                diff = errors_between(name, ours[name], theirs.get(name))
                if diff.max_abs:
                    diff.note = peer_inexact(node, value_of, ours[name], theirs.get(name))
                    nc.peer_note = nc.peer_note or diff.note
                nc.values.append(diff)
        result.append(nc)
    outputs = [
        errors_between(o.name, ours.get(o.name), theirs.get(o.name)) for o in model.graph.output
    ]
    return Comparison("onnxruntime", result, outputs)
