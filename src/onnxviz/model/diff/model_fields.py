"""Model-level differences: IR version, opsets, producer, graph name, metadata, the
main graph's I/O signatures (by position) and the set of model-local functions."""

from __future__ import annotations

from onnx import ModelProto

from onnxviz.model.diff.results import Detail
from onnxviz.model.scopes import function_path
from onnxviz.model.text import as_text


def _opsets(m: ModelProto) -> dict[str, int]:
    return {
        ("" if imp.domain == "ai.onnx" else as_text(imp.domain)): int(imp.version)
        for imp in m.opset_import
    }


def model_details(a: ModelProto, b: ModelProto) -> list[Detail]:
    out: list[Detail] = []
    if a.ir_version != b.ir_version:
        out.append(Detail("ir_version", "ir_version", str(a.ir_version), str(b.ir_version)))
    oa, ob = _opsets(a), _opsets(b)
    for domain in sorted(oa.keys() | ob.keys()):
        va, vb = oa.get(domain), ob.get(domain)
        if va != vb:
            out.append(
                Detail(
                    "opset",
                    domain or "ai.onnx",
                    "" if va is None else str(va),
                    "" if vb is None else str(vb),
                )
            )
    for field in ("producer_name", "producer_version", "domain", "model_version", "doc_string"):
        va, vb = getattr(a, field), getattr(b, field)
        if va != vb:
            out.append(
                Detail(
                    "model",
                    field,
                    as_text(va) if isinstance(va, (str, bytes)) else str(va),
                    as_text(vb) if isinstance(vb, (str, bytes)) else str(vb),
                )
            )
    ma = {as_text(p.key): as_text(p.value) for p in a.metadata_props}
    mb = {as_text(p.key): as_text(p.value) for p in b.metadata_props}
    for key in sorted(ma.keys() | mb.keys()):
        if ma.get(key) != mb.get(key):
            out.append(Detail("metadata", key, ma.get(key, ""), mb.get(key, "")))
    fa = {as_text(function_path(f)) for f in a.functions}
    fb = {as_text(function_path(f)) for f in b.functions}
    for path in sorted(fa - fb):
        out.append(Detail("function_removed", path, path, ""))
    for path in sorted(fb - fa):
        out.append(Detail("function_added", path, "", path))
    return out
