"""The error a matched value's own nodes add, apart from the error they inherit.

The numeric diff compares A's value with B's.  Against a quantized (or fp16) B, that
error grows layer after layer: each value carries the rounding of every value before
it, so a sound model's error passes any per-value bound after a few layers.  To name
the node that *adds* error, each matched value of B is computed again by its
*region* of B (the nodes between the value and the matched values, graph inputs and
weights it comes from) fed with **A's** values of those upstream matches, cast to the
type B holds them in.  The region's result differs from A's value only by what the
region itself does: its weights' quantization, its own QuantizeLinear's rounding or
saturation, its precision.  Error coming in from upstream is gone, since the region
starts from A's exact upstream values.

A region stops at the matched values B compares (for a quantized value, its
dequantized form, so the rounding of an upstream value is judged on that value and
not again downstream).  A region larger than ``MAX_REGION`` nodes, or one whose
inputs are not at hand, is not built: that value keeps the end-to-end error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
from onnx import helper

from onnxviz.model.diff.index import QUANTIZE_OPS, GraphIndex
from onnxviz.runtime.values import dtype_to_elem_type

MAX_REGION = 256  # nodes; beyond, the region would re-run much of the model per value


@dataclass
class Region:
    """The nodes of B that make ``output`` from ``inputs`` (B names), in B's order."""

    output: str
    nodes: list[int]
    inputs: list[str]  # B values fed from A (boundaries)
    initializers: list[str]
    # Scales of the activations the region quantizes (QuantizeLinear of a computed
    # value): each rounds by half its step, and what comes out of the region carries it.
    scales: list[str]


def find_regions(
    b: GraphIndex, targets: Sequence[str], boundaries: set[str]
) -> dict[str, Region | None]:
    """For each B value in ``targets``, the region that makes it from ``boundaries``
    (other compared values and graph inputs); None when it cannot be cut out."""
    position = {i: k for k, i in enumerate(b.topological_order())}
    out: dict[str, Region | None] = {}
    for target in targets:
        out[target] = _region(b, target, boundaries, position)
    return out


def _region(
    b: GraphIndex, target: str, boundaries: set[str], position: dict[int, int]
) -> Region | None:
    nodes: set[int] = set()
    inputs: list[str] = []
    inits: list[str] = []
    seen: set[str] = set()
    stack = [target]
    while stack:
        name = stack.pop()
        if not name or name in seen:
            continue
        seen.add(name)
        if name != target and name in boundaries:
            inputs.append(name)
            continue
        if name in b.initializers:
            inits.append(name)
            continue
        p = b.producer.get(name)
        if p is None:
            return None  # a graph input nobody feeds, or an outer-scope name
        if p[0] in nodes:
            continue
        nodes.add(p[0])
        if len(nodes) > MAX_REGION:
            return None
        stack.extend(b.nodes[p[0]].input)
    if target in boundaries and not nodes:
        return None  # a graph input: nothing of B's own to judge
    scales = [
        b.nodes[i].input[1]
        for i in nodes
        if b.nodes[i].op_type in QUANTIZE_OPS
        and len(b.nodes[i].input) > 1
        and b.nodes[i].input[0] not in b.initializers
    ]
    return Region(target, sorted(nodes, key=position.__getitem__), inputs, inits, scales)


def run_region(
    region: Region,
    model_b: onnx.ModelProto,
    base_dir: str | None,
    feeds: Mapping[str, np.ndarray],
    engine: str,
) -> Any:
    """B's region run on ``feeds`` (B names, already in B's types); its output."""
    g = model_b.graph
    by_name = {t.name: t for t in g.initializer if t.name in set(region.initializers)}
    graph = helper.make_graph(
        [g.node[i] for i in region.nodes],
        "region",
        [
            helper.make_tensor_value_info(n, dtype_to_elem_type(feeds[n].dtype), feeds[n].shape)
            for n in region.inputs
        ],
        [onnx.ValueInfoProto(name=region.output)],
        [by_name[n] for n in region.initializers],
    )
    model = helper.make_model(
        graph, opset_imports=list(model_b.opset_import), ir_version=model_b.ir_version
    )
    model.functions.extend(model_b.functions)
    if engine == "onnxruntime":
        from onnxviz.runtime.compare import run_onnxruntime

        return run_onnxruntime(model, feeds, [], base_dir=base_dir)[region.output]
    from onnxviz.runtime.session import Session

    # Fusions and in-place updates off: a region is a handful of nodes run once.
    session = Session(
        SimpleNamespace(model=model, base_dir=base_dir), inplace_ops=False, fuse_ops=False
    )
    return session.run(dict(feeds))[region.output]


def run_regions_together(
    regions: Sequence[Region],
    model_b: onnx.ModelProto,
    base_dir: str | None,
    feeds: Mapping[str, np.ndarray],
) -> list[Any]:
    """Every region's output from one onnxruntime session: a session costs milliseconds
    to make, one per value would cost more than running both models.  The regions are
    laid side by side in one graph, each one's own values renamed apart; they share
    the boundaries they read and B's initializers."""
    from onnxviz.runtime.compare import run_onnxruntime

    g = model_b.graph
    nodes: list[onnx.NodeProto] = []
    outputs: list[str] = []
    shared = {n for r in regions for n in r.inputs} | {n for r in regions for n in r.initializers}
    for k, region in enumerate(regions):
        made = {o for i in region.nodes for o in g.node[i].output if o}

        def own(name: str, k: int = k, made: set[str] = made) -> str:
            return f"{name}__region{k}" if name in made else name

        for i in region.nodes:
            node = onnx.NodeProto()
            node.CopyFrom(g.node[i])
            node.name = f"{node.name}__region{k}"
            node.input[:] = [own(n) for n in node.input]
            node.output[:] = [own(n) for n in node.output]
            nodes.append(node)
        outputs.append(own(region.output))
    names = sorted({n for r in regions for n in r.inputs})
    inits = [t for t in g.initializer if t.name in shared]
    graph = helper.make_graph(
        nodes,
        "regions",
        [
            helper.make_tensor_value_info(n, dtype_to_elem_type(feeds[n].dtype), feeds[n].shape)
            for n in names
        ],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=list(model_b.opset_import), ir_version=model_b.ir_version
    )
    model.functions.extend(model_b.functions)
    got = run_onnxruntime(model, {n: feeds[n] for n in names}, [], base_dir=base_dir)
    return [got[o] for o in outputs]


def as_b_type(value: Any, like: Any) -> Any:
    """A's value in the element type B holds it in (fp32 -> fp16, say); other kinds
    (integers against floats, strings) are left as they are."""
    if not isinstance(value, np.ndarray) or not isinstance(like, np.ndarray):
        return value
    if value.dtype != like.dtype and value.dtype.kind == like.dtype.kind == "f":
        with np.errstate(over="ignore"):  # past fp16's range is inf, as B would hold it
            return value.astype(like.dtype)
    return value
