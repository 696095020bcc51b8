"""Models exported by torch (TorchScript exporter) and skl2onnx validate without errors.

The exports are committed in tests/data/exports/ (scripts/make_test_models.py --exports
regenerates them; tests/data/exports/manifest.json names the exporter versions)."""

from __future__ import annotations

import onnx
import pytest

from onnxviz.check import validate
from onnxviz.model.document import Document
from tests.data.exports import load, path_of


def _errors(name: str) -> list[str]:
    onnx.checker.check_model(onnx.load(str(path_of(name))), full_check=True)  # the peer accepts it
    doc = Document.open(str(path_of(name)))
    return [str(d) for d in validate(doc) if d.severity.value == "error"]


def test_torch_exports() -> None:
    # Conv, LayerNorm, MultiheadAttention, LSTM and a Linear head, with a dynamic batch.
    assert _errors("torchscript_mixed") == []
    # A scripted Python loop over an `if`: Loop and If nodes.
    loop, _, _ = load("torchscript_double_or_decrement")
    assert any(n.op_type in ("Loop", "If") for n in loop.graph.node)
    assert _errors("torchscript_double_or_decrement") == []


@pytest.mark.parametrize("name", ["skl_scaler_logreg_small", "skl_forest_small"])
def test_skl2onnx_exports(name: str) -> None:
    assert _errors(name) == []
