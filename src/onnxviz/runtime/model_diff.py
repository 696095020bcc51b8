"""Numeric diff of two models (issue #20): run both on the same feeds and compare every
value the structural diff matched, in model A's topological order; the first value
whose own nodes add error beyond the tolerance is where the two models part.

Memory stays bounded: with our interpreter both models run in lockstep, event by event,
and a value is kept only until its counterpart arrives (two aligned models keep only
a handful).  onnxruntime cannot stream, so with it only the matched values are fetched.

Each value is judged by the error its own nodes add, not by the error it carries in
(`runtime.diff_local`): B's nodes that make the value are run again on A's values of
the matched values they read, and that result is compared with A's value
(``local_abs``).  The end-to-end error (``max_abs``) is reported too.  Without this a
quantized or fp16 model, whose error grows with every layer, was flagged at whatever
layer the accumulated error first passed the bound, not where a fault is.

Quantized against float: when model B quantizes a value (QuantizeLinear ->
DequantizeLinear), A's value is compared with B's dequantized one, and the tolerance is
``quant_steps`` quantization steps on top of ``atol`` + ``rtol`` * |A|, the step being
the coarsest scale among the activations the value's own nodes quantize (its own, and
say the MatMul's output before the Add; ``region_step``).  The error a sound region
adds is the rounding of those (half a step each) and of its weights: on 30 of
onnxruntime's QDQ MLPs and CNNs (8 to 64 wide, per-tensor and per-channel weights) it
stayed under 2.3 steps, while a saturating scale gives tens of steps, so four steps
(the default) is where quantization alone stops explaining the error.  In a quantized model only quantized
values are judged: a float value in between has no step of its own, and the rounding
of its weights passes any float tolerance.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxviz.model.diff import ModelDiff
from onnxviz.model.diff.index import GraphIndex, index_graph
from onnxviz.model.tensors import to_array
from onnxviz.runtime.compare import errors_between
from onnxviz.runtime.diff_local import (
    Region,
    as_b_type,
    find_regions,
    run_region,
    run_regions_together,
)
from onnxviz.runtime.values import elem_type_to_dtype

ENGINES = ("onnxviz", "onnxruntime")


@dataclass
class ValueComparison:
    a: str
    b: str  # the value of B compared (its dequantized form when B quantizes it)
    node_a: str  # label of the node of A that makes the value ("" for graph inputs)
    node_b: str
    order: int  # position in A's topological order
    max_abs: float | None = None
    max_rel: float | None = None
    # The error B's own nodes add: B's region run on A's upstream values, against A
    # (None: no region could be cut out, max_abs is judged instead).
    local_abs: float | None = None
    tolerance: float | None = None  # the bound the error was held to (None: not judged)
    quant_step: float | None = None  # the step of B's quantization of this value
    # The coarsest step among the activations B's nodes of this value quantize (its
    # own and, say, the MatMul's output before the Add): the unit of the tolerance.
    region_step: float | None = None
    beyond: bool = False
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "node_a": self.node_a,
            "node_b": self.node_b,
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "local_abs": self.local_abs,
            "tolerance": self.tolerance,
            "quant_step": self.quant_step,
            "region_step": self.region_step,
            "beyond": self.beyond,
            "note": self.note,
        }


@dataclass
class NumericDiff:
    engine: str
    atol: float
    rtol: float
    quantized: bool
    values: list[ValueComparison] = field(default_factory=list)  # A's topological order
    first: ValueComparison | None = None
    # Both tensors of the first divergence, for the inspector.
    first_values: tuple[Any, Any] | None = None

    @property
    def equal(self) -> bool:
        return self.first is None

    def by_value_a(self) -> dict[str, ValueComparison]:
        return {v.a: v for v in self.values}

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "atol": self.atol,
            "rtol": self.rtol,
            "quantized": self.quantized,
            "compared": len(self.values),
            "beyond": sum(v.beyond for v in self.values),
            "first_divergence": None if self.first is None else self.first.to_json(),
            "values": [v.to_json() for v in self.values],
        }


def _quantized_forms(b: GraphIndex) -> dict[str, tuple[str, str]]:
    """value of B -> (its dequantized name, the QuantizeLinear's scale initializer)."""
    out: dict[str, tuple[str, str]] = {}
    for dq_out, source in b.alias.items():
        p = b.producer.get(dq_out)
        if p is None:
            continue
        dq = b.nodes[p[0]]
        q_at = b.producer.get(dq.input[0])
        if q_at is None:
            continue
        q = b.nodes[q_at[0]]
        if len(q.input) > 1 and q.input[0] == source:
            out.setdefault(source, (dq_out, q.input[1]))
    return out


def _step(b: GraphIndex, scale_name: str, base_dir: str | None) -> float | None:
    t = b.initializers.get(scale_name)
    if t is None:
        return None
    try:
        return float(np.max(np.abs(np.asarray(to_array(t, base_dir), dtype=np.float64))))
    except Exception:
        return None


def _pairs(
    structural: ModelDiff, a: GraphIndex, b: GraphIndex, base_b: str | None
) -> tuple[list[ValueComparison], bool]:
    """The matched values to compare, in A's topological order."""
    order = a.topological_order()
    quantized = bool(b.qdq_nodes or a.qdq_nodes)
    qforms = _quantized_forms(b)
    vmap = structural.main.value_map
    out: list[ValueComparison] = []
    for pos, ia in enumerate(order):
        if ia in a.qdq_nodes:
            continue
        for name in a.nodes[ia].output:
            target = vmap.get(name)
            if not name or target is None:
                continue
            pb = b.producer.get(target)
            vc = ValueComparison(name, target, a.labels[ia], b.labels[pb[0]] if pb else "", pos)
            if target in qforms:
                vc.b, scale = qforms[target]
                vc.quant_step = _step(b, scale, base_b)
            elif quantized:
                vc.note = "not quantized in B: reported, not judged"
            out.append(vc)
    return out, quantized


def _judge(
    vc: ValueComparison,
    va: Any,
    vb: Any,
    local: Any,
    atol: float,
    rtol: float,
    quant_steps: float,
) -> None:
    """``local``: B's region run on A's upstream values (None: judge the end-to-end
    error)."""
    d = errors_between(vc.a, vb, va)  # A is the reference
    vc.max_abs, vc.max_rel = d.max_abs, d.max_rel
    if d.shape_mismatch is not None:
        vc.note = f"shapes differ: {list(d.shape_mismatch[1])} against {list(d.shape_mismatch[0])}"
        vc.beyond = True
        return
    if d.equal is False:
        vc.beyond = True
        return
    if d.note:
        vc.note = d.note
    judged = d.max_abs
    if local is not None:
        dl = errors_between(vc.a, local, va)
        if dl.shape_mismatch is None and dl.max_abs is not None:
            vc.local_abs = judged = dl.max_abs
    if vc.note.startswith("not quantized") or judged is None:
        return
    step = max(vc.quant_step or 0.0, vc.region_step or 0.0)
    vc.tolerance = atol + rtol * d.ref_scale + quant_steps * step
    vc.beyond = judged > vc.tolerance


class _Local:
    """Runs each matched value's region of B (`diff_local`) on A's values, keeping A's
    values only while a region still to run reads them."""

    def __init__(
        self,
        b: GraphIndex,
        doc_b: Any,
        pairs: list[ValueComparison],
        feeds_a: Mapping[str, Any],
        feeds_b: Mapping[str, Any],
        engine: str,
    ) -> None:
        self.model_b = getattr(doc_b, "model", doc_b)
        self.base_b = getattr(doc_b, "base_dir", None)
        self.engine = engine
        self.b = b
        vmap_b = {vc.b: vc.a for vc in pairs}
        inputs_b = {kb: ka for ka, kb in zip(feeds_a, feeds_b)}
        self.a_of = {**vmap_b, **inputs_b}  # boundary of B -> the value of A fed there
        self.regions = find_regions(b, list(vmap_b), set(self.a_of))
        # A's values (and B's, for their types) at hand: graph inputs for the whole run,
        # a matched value while a region still to run reads it.
        self.held_a: dict[str, Any] = dict(feeds_a)
        self.like_b: dict[str, Any] = {k: _type_probe(v) for k, v in feeds_b.items()}
        self.readers: dict[str, int] = {}
        for r in self.regions.values():
            for name in r.inputs if r else ():
                if name not in inputs_b:
                    self.readers[name] = self.readers.get(name, 0) + 1

    def run(self, vc: ValueComparison, va: Any, vb: Any) -> Any:
        """B's region of ``vc`` on A's values (None when it cannot run)."""
        job = self._prepare(vc, va, vb)
        return None if job is None else self._run_one(vc, *job)

    def run_all(self, triples: list[tuple[ValueComparison, Any, Any]]) -> list[Any]:
        """`run` for every pair, the regions run together (onnxruntime: one session)."""
        jobs = [self._prepare(vc, va, vb) for vc, va, vb in triples]
        ready = [(k, job) for k, job in enumerate(jobs) if job is not None]
        out: list[Any] = [None] * len(jobs)
        if not ready:
            return out
        feeds: dict[str, Any] = {}
        for _, (_, f) in ready:
            feeds.update(f)
        try:
            got = run_regions_together([r for _, (r, _) in ready], self.model_b, self.base_b, feeds)
        except Exception:  # one region that does not stand alone: each on its own
            got = [self._run_one(triples[k][0], *job) for k, job in ready]
        for (k, _), value in zip(ready, got):
            out[k] = value
        return out

    def _prepare(
        self, vc: ValueComparison, va: Any, vb: Any
    ) -> tuple[Region, dict[str, Any]] | None:
        """The region of ``vc`` and its feeds (B names, B's types), or None."""
        if self.readers.get(vc.b):
            self.held_a[vc.a] = va
            self.like_b[vc.b] = _type_probe(vb)
        region = self.regions.get(vc.b)
        if region is None:
            return None
        steps = [_step(self.b, s, self.base_b) for s in region.scales]
        vc.region_step = max((s for s in steps if s is not None), default=None)
        try:
            feeds = {n: as_b_type(self.held_a[self.a_of[n]], self.like_b[n]) for n in region.inputs}
        except KeyError:
            return None  # an upstream value not matched yet (A's order differs)
        finally:
            self._release(region.inputs)
        if any(not isinstance(v, np.ndarray) for v in feeds.values()):
            return None
        return region, feeds

    def _run_one(self, vc: ValueComparison, region: Region, feeds: dict[str, Any]) -> Any:
        try:
            return run_region(region, self.model_b, self.base_b, feeds, self.engine)
        except Exception as exc:  # a region that does not stand alone: judge end to end
            why = f"its nodes alone could not be run ({type(exc).__name__})"
            vc.note = f"{vc.note}; {why}" if vc.note else why
            return None

    def _release(self, names: list[str]) -> None:
        for name in names:
            left = self.readers.get(name)
            if left is None:
                continue
            if left <= 1:
                del self.readers[name]
                self.held_a.pop(self.a_of[name], None)
                self.like_b.pop(name, None)
            else:
                self.readers[name] = left - 1


def _type_probe(value: Any) -> Any:
    """An empty array of the value's type: what `as_b_type` needs, without the data."""
    return np.empty(0, value.dtype) if isinstance(value, np.ndarray) else value


def _cast_feeds(model_b: Any, feeds_b: Mapping[str, Any]) -> dict[str, Any]:
    """Feeds for B in B's float types (an fp16 model's inputs are fp16)."""
    out = dict(feeds_b)
    for vi in model_b.graph.input:
        value = out.get(vi.name)
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if isinstance(value, np.ndarray) and elem:
            try:
                want = elem_type_to_dtype(elem)
            except Exception:
                continue
            out[vi.name] = as_b_type(value, np.empty(0, want))
    return out


def numeric_diff(
    doc_a: Any,
    doc_b: Any,
    structural: ModelDiff,
    feeds: Mapping[str, Any],
    *,
    engine: str = "onnxviz",
    atol: float = 1e-4,
    rtol: float = 1e-3,
    quant_steps: float = 4.0,
) -> NumericDiff:
    """Run both models on ``feeds`` (by A's input names; B's inputs are fed through the
    structural diff's input map, in B's float types) and compare every matched
    main-graph value."""
    from onnxviz.errors import ExecutionError

    if engine not in ENGINES:
        raise ExecutionError(f"unknown engine '{engine}' (choose {', '.join(ENGINES)})")
    ma, mb = getattr(doc_a, "model", doc_a), getattr(doc_b, "model", doc_b)
    a, b = index_graph("main", ma.graph), index_graph("main", mb.graph)
    vmap = structural.main.value_map
    feeds_b = _cast_feeds(mb, {vmap.get(k, k): v for k, v in feeds.items()})
    pairs, quantized = _pairs(structural, a, b, getattr(doc_b, "base_dir", None))
    result = NumericDiff(engine, atol, rtol, quantized)
    want_a = {vc.a: vc for vc in pairs}
    want_b = {vc.b: vc for vc in pairs}
    local = _Local(b, doc_b, pairs, feeds, feeds_b, engine)
    first_values: dict[str, tuple[Any, Any]] = {}
    stream = _stream(engine, doc_a, doc_b, feeds, feeds_b, want_a, want_b)
    if engine == "onnxruntime":
        # onnxruntime holds every value already: the regions run in one session.
        triples = list(stream)
        judged: Iterable[tuple[tuple[ValueComparison, Any, Any], Any]] = zip(
            triples, local.run_all(triples)
        )
    else:
        judged = (((vc, va, vb), local.run(vc, va, vb)) for vc, va, vb in stream)
    for (vc, va, vb), own in judged:
        _judge(vc, va, vb, own, atol, rtol, quant_steps)
        if vc.beyond and (result.first is None or vc.order < result.first.order):
            result.first = vc
            first_values = {vc.a: (va, vb)}
    result.values = sorted(pairs, key=lambda v: v.order)
    if result.first is not None:
        result.first_values = first_values.get(result.first.a)
    return result


def _stream(
    engine: str,
    doc_a: Any,
    doc_b: Any,
    feeds_a: Mapping[str, Any],
    feeds_b: Mapping[str, Any],
    want_a: dict[str, ValueComparison],
    want_b: dict[str, ValueComparison],
) -> Iterator[tuple[ValueComparison, Any, Any]]:
    """(pair, value in A, value in B) as soon as both sides have made the pair."""
    if engine == "onnxruntime":
        from onnxviz.runtime.compare import run_onnxruntime

        ma, mb = getattr(doc_a, "model", doc_a), getattr(doc_b, "model", doc_b)
        got_a = run_onnxruntime(doc_a, feeds_a, list(want_a)) if ma else {}
        got_b = run_onnxruntime(doc_b, feeds_b, list(want_b)) if mb else {}
        for name, vc in want_a.items():
            if name in got_a and vc.b in got_b:
                yield vc, got_a[name], got_b[vc.b]
        return
    from onnxviz.runtime.events import NodeFailed, NodeFinished
    from onnxviz.runtime.session import Session

    runs = [Session(doc_a).steps(dict(feeds_a)), Session(doc_b).steps(dict(feeds_b))]
    held: list[dict[str, Any]] = [{}, {}]
    wants = [want_a, want_b]
    done = [False, False]
    while not all(done):
        for side in (0, 1):
            if done[side]:
                continue
            event = next(runs[side], None)
            if event is None:
                done[side] = True
                continue
            if isinstance(event, NodeFailed):
                raise event.error
            if type(event) is not NodeFinished or event.depth != 0:
                continue
            for name, value in event.outputs.items():
                wanted = wants[side].get(name)
                if wanted is None:
                    continue
                vc = wanted
                other = vc.b if side == 0 else vc.a
                if other in held[1 - side]:
                    mine = value
                    theirs = held[1 - side].pop(other)
                    yield (vc, mine, theirs) if side == 0 else (vc, theirs, mine)
                else:
                    held[side][name] = value
