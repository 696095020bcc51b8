"""Rows of the side-by-side properties of a matched pair: (field, value in A, value in
B, differs).  Plain Python, so the comparison is tested without a window."""

from __future__ import annotations

from typing import Any

from onnx import NodeProto

from onnxviz.model.diff import Detail


def _attr_text(node: NodeProto | None, name: str) -> str:
    if node is None:
        return ""
    from onnxviz.model.diff.graph_diff import _attr_text as text

    found = next((a for a in node.attribute if a.name == name), None)
    return "" if found is None else text(found)


def node_rows(
    node_a: NodeProto | None, node_b: NodeProto | None, details: list[Detail]
) -> list[tuple[str, str, str, bool]]:
    """Op, name, attributes, inputs and outputs of the pair; a row differs when the
    diff found a difference there (renamed values alone do not differ)."""
    flagged_attrs = {d.name for d in details if d.what.startswith("attribute")}
    flagged_inputs = {d.name for d in details if d.what == "input"}
    flagged_outputs = {d.name for d in details if d.what == "type"}
    rows: list[tuple[str, str, str, bool]] = []

    def op(n: NodeProto | None) -> str:
        return "" if n is None else (f"{n.domain}::" if n.domain else "") + n.op_type

    rows.append(("op", op(node_a), op(node_b), op(node_a) != op(node_b)))
    rows.append(("name", node_a.name if node_a else "", node_b.name if node_b else "", False))
    names = sorted({a.name for n in (node_a, node_b) if n is not None for a in n.attribute})
    for name in names:
        ta, tb = _attr_text(node_a, name), _attr_text(node_b, name)
        rows.append((f"attribute {name}", ta, tb, name in flagged_attrs or ta != tb))
    ins_a = list(node_a.input) if node_a else []
    ins_b = list(node_b.input) if node_b else []
    for k in range(max(len(ins_a), len(ins_b))):
        xa = ins_a[k] if k < len(ins_a) else ""
        xb = ins_b[k] if k < len(ins_b) else ""
        missing = k >= len(ins_a) or k >= len(ins_b)
        rows.append((f"input {k}", xa, xb, missing or f"input {k}" in flagged_inputs))
    outs_a = list(node_a.output) if node_a else []
    outs_b = list(node_b.output) if node_b else []
    for k in range(max(len(outs_a), len(outs_b))):
        xa = outs_a[k] if k < len(outs_a) else ""
        xb = outs_b[k] if k < len(outs_b) else ""
        missing = k >= len(outs_a) or k >= len(outs_b)
        rows.append((f"output {k}", xa, xb, missing or f"output {k}" in flagged_outputs))
    for d in details:
        if d.what in ("body", "op"):
            rows.append((d.what, d.a, d.b, True))
    return rows


def tensor_rows(va: Any, vb: Any) -> list[tuple[str, str, str, bool]]:
    """Shape, dtype and statistics of two tensors (a numeric diff's values)."""
    import numpy as np

    def stats(v: Any) -> tuple[str, str, str, str]:
        if not isinstance(v, np.ndarray):
            return ("", type(v).__name__, "", "")
        if v.size == 0 or v.dtype.kind not in "biufc":
            return (str(list(v.shape)), str(v.dtype), "", "")
        f = v.astype(np.float64)
        return (
            str(list(v.shape)),
            str(v.dtype),
            f"{np.nanmin(f):.6g} .. {np.nanmax(f):.6g}",
            np.array2string(f.reshape(-1)[:6], precision=4, separator=", "),
        )

    sa, sb = stats(va), stats(vb)
    return [
        (label, x, y, x != y)
        for label, x, y in zip(("shape", "dtype", "range", "first values"), sa, sb)
    ]
