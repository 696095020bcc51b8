"""`check` on what mainstream exporters write: no errors, and only warnings we would
defend to the exporter's authors (issue 14).  Infos are not listed: they are notes."""

from __future__ import annotations

import pytest

from onnxviz.check import validate
from onnxviz.model.document import Document
from onnxviz.model.summary import summarize
from tests.data.exporters import MANIFEST, NAMES, path_of

# The warnings each model must get, with why each is right.
EXPECTED_WARNINGS: dict[str, set[str]] = {
    # skl2onnx 1.20 imports ('', 17) twice: harmless, but redundant (O019).
    "skl2onnx_gradient_boosting": {"O019"},
    "skl2onnx_label_encoder_strings": {"O019"},
    # onnxruntime-genai: SimplifiedLayerNormalization in the default domain is not an ONNX
    # operator, onnxruntime runs it as an extension (O020: not portable); a constant is
    # declared int64[] in value_info but is int64[1] (T009: a wrong shape hint).
    "ort_genai_llama_fp32": {"O020", "T009"},
    "ort_genai_llama_int4": {"O020", "T009"},
    "ort_genai_phi3_fp32_past": {"O020", "T009"},
    "ort_genai_phi3_int4_past": {"O020", "T009"},
    "ort_genai_qwen2_fp32_past": {"O020", "T009"},
    "ort_genai_qwen2_int4_past": {"O020", "T009"},
}


def test_the_corpus_covers_every_exporter() -> None:
    exporters = {entry["exporter"] for entry in MANIFEST.values()}
    assert {"torch", "skl2onnx", "onnxruntime", "onnxslim", "onnxsim"} <= exporters
    assert {"optimum", "onnxruntime-genai"} <= exporters
    assert any(n.startswith("torch_dynamo") for n in NAMES)
    assert any(n.startswith("torch_torchscript") for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_exporter_output_has_no_errors_and_only_defended_warnings(name: str) -> None:
    doc = Document.open(str(path_of(name)))
    diags = validate(doc)
    errors = [f"{d.code} {d.message}" for d in diags if d.severity.name == "ERROR"]
    assert errors == [], f"{name} ({MANIFEST[name]['exporter']} {MANIFEST[name]['version']})"
    warnings = {d.code for d in diags if d.severity.name == "WARNING"}
    assert warnings == EXPECTED_WARNINGS.get(name, set()), [
        d.message for d in diags if d.severity.name == "WARNING"
    ]
    # Every diagnostic is located at least by its graph.
    assert all(d.location.graph_path for d in diags)


@pytest.mark.parametrize("name", NAMES)
def test_exporter_output_loads_and_summarizes(name: str) -> None:
    doc = Document.open(str(path_of(name)))
    info = summarize(doc.model)
    assert info["node_count_total"] >= info["node_count"] > 0
    assert info["opset_import"]
