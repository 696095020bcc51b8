"""A model's summary: what `onnxviz info` prints and the status bar shows."""

from __future__ import annotations

from collections import Counter
from typing import Any

from onnx import ModelProto, ValueInfoProto

from onnxviz.model.external import external_ref, is_external
from onnxviz.model.io import iter_tensors
from onnxviz.model.scopes import iter_graphs
from onnxviz.model.text import as_text


def _type_text(vi: ValueInfoProto) -> str:
    if not vi.HasField("type"):
        return "?"
    try:
        from onnxviz.model.types import type_to_text

        return type_to_text(vi.type)
    except Exception:
        return "?"


def summarize(model: ModelProto) -> dict[str, Any]:
    """The fields of `onnxviz info --json` (docs/architecture.md §9)."""
    scopes = list(iter_graphs(model))  # no index: info on 100k nodes stays light
    graph = model.graph
    op_types: Counter[str] = Counter()
    total = 0
    for scope in scopes:
        total += len(scope.nodes)
        for node in scope.nodes:
            key = (
                node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
            )
            op_types[key] += 1
    init_names = {t.name for t in graph.initializer} | {
        s.values.name for s in graph.sparse_initializer
    }
    files = set()
    from onnxviz.model.inplace import is_inplace

    for site in iter_tensors(model):
        # (a weight left in place is in the model file itself, not in a data file)
        if is_external(site.tensor) and not is_inplace(site.tensor):
            try:
                files.add(external_ref(site.tensor).location)
            except Exception:
                continue
    return {
        "ir_version": int(model.ir_version),
        "opset_import": {
            o.domain if o.domain != "ai.onnx" else "": int(o.version) for o in model.opset_import
        },
        "producer_name": model.producer_name,
        "producer_version": model.producer_version,
        "domain": model.domain,
        "model_version": int(model.model_version),
        "graph_name": graph.name,
        "inputs": [{"name": v.name, "type": _type_text(v)} for v in graph.input],
        "outputs": [{"name": v.name, "type": _type_text(v)} for v in graph.output],
        "initializer_inputs": [v.name for v in graph.input if v.name in init_names],
        "node_count": len(graph.node),
        "node_count_total": total,
        "initializer_count": len(graph.initializer) + len(graph.sparse_initializer),
        "sparse_initializer_count": len(graph.sparse_initializer),
        "subgraph_count": sum(1 for s in scopes if s.kind == "subgraph"),
        "functions": [
            {"domain": f.domain, "name": f.name, "overload": getattr(f, "overload", "")}
            for f in model.functions
        ],
        "op_types": dict(sorted(op_types.items(), key=lambda kv: (-kv[1], as_text(kv[0])))),
        "external_data_files": sorted(files),
        "metadata_props": {p.key: p.value for p in model.metadata_props},
        "training_info_count": len(model.training_info),
    }
