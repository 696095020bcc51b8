"""The light models shipped in the onnx wheel reproduce their expected outputs within
the onnx backend tolerances (inputs as the onnx test runner makes them)."""

from __future__ import annotations

import pytest

from onnxviz.runtime.conformance import LIGHT_MODELS, run_light_model


@pytest.mark.parametrize(("name", "rtol", "atol"), LIGHT_MODELS, ids=[m[0] for m in LIGHT_MODELS])
def test_light_model_matches_expected_output(name: str, rtol: float, atol: float) -> None:
    result = run_light_model(name, rtol, atol)
    assert result.status == "pass", f"{result.status}: {result.detail}"
