"""Structural diff of two models (issue #20), Qt-free.

``diff(doc_a, doc_b) -> ModelDiff``: nodes matched by structure and name (matching.py),
each matched pair compared (graph_diff.py), fused/decomposed ops paired as groups
(groups.py), initializers compared value by value in chunks (weights.py), model-level
fields (model_fields.py), subgraphs and function bodies diffed recursively.  The
result (results.py) has a stable JSON form, the one ``onnxviz diff --json`` prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onnxviz.model.diff.graph_diff import diff_graphs
from onnxviz.model.diff.index import index_function, index_graph
from onnxviz.model.diff.model_fields import model_details
from onnxviz.model.diff.results import (
    FORMAT,
    Detail,
    FusedGroup,
    GraphDiff,
    ModelDiff,
    NodeChange,
    NodeRef,
    TensorDiff,
)
from onnxviz.model.gc_pause import collector_paused
from onnxviz.model.scopes import function_path

__all__ = [
    "FORMAT",
    "Detail",
    "FusedGroup",
    "GraphDiff",
    "ModelDiff",
    "NodeChange",
    "NodeRef",
    "TensorDiff",
    "diff",
]


def _model_and_dir(doc: Any) -> tuple[Any, str | None, str | None]:
    model = getattr(doc, "model", doc)
    return model, getattr(doc, "base_dir", None), getattr(doc, "path", None)


def diff(
    doc_a: Any,
    doc_b: Any,
    *,
    anchors: Sequence[tuple[str, str]] = (),
    compare_values: bool = True,
) -> ModelDiff:
    """Diff two Documents (or ModelProtos).  The cyclic garbage collector is paused
    meanwhile: the diff of two 100k-node graphs makes millions of small containers, and
    the collections they trigger cost more than the diff itself.  ``anchors``: (node label in A, node label in
    B) pairs of the main graph the user pinned as matching.  ``compare_values``: compare
    initializer values (off: dtypes and shapes only... and no data is read)."""
    with collector_paused():
        return _diff(doc_a, doc_b, anchors, compare_values)


def _diff(
    doc_a: Any, doc_b: Any, anchors: Sequence[tuple[str, str]], compare_values: bool
) -> ModelDiff:
    ma, base_a, path_a = _model_and_dir(doc_a)
    mb, base_b, path_b = _model_and_dir(doc_b)
    main = diff_graphs(
        index_graph("main", ma.graph),
        index_graph("main", mb.graph),
        base_a,
        base_b,
        anchors=anchors,
        compare_values=compare_values,
    )
    functions = []
    fb = {function_path(f): f for f in mb.functions}
    for f in ma.functions:
        path = function_path(f)
        other = fb.get(path)
        if other is None:
            continue
        fd = diff_graphs(
            index_function(path, f),
            index_function(path, other),
            base_a,
            base_b,
            compare_values=compare_values,
        )
        if list(f.attribute) != list(other.attribute):
            fd.io.append(
                Detail(
                    "function_attributes", path, ",".join(f.attribute), ",".join(other.attribute)
                )
            )
        functions.append(fd)
    return ModelDiff(path_a, path_b, model_details(ma, mb), main, functions, list(anchors))
