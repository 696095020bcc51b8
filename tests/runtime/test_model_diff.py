"""Numeric diff: both models run on the same feeds, matched values compared, the first
divergence named in topological order (fp32 against QDQ included)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from onnxviz.model.diff import diff
from onnxviz.runtime.model_diff import numeric_diff
from tests.model import diff_corpus as C

pytestmark = pytest.mark.numeric


def _x(width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, width)).astype(np.float32)


@pytest.mark.parametrize("engine", ["onnxviz", "onnxruntime"])
def test_same_model_renamed_has_no_divergence(engine: str) -> None:
    a = C.mlp()
    b = C.rename_everything(a, 3)
    result = numeric_diff(a, b, diff(a, b), {"x": _x(8)}, engine=engine)
    assert result.equal
    assert len(result.values) == len(a.graph.node)
    assert all(v.max_abs == 0.0 for v in result.values)


@pytest.mark.parametrize("engine", ["onnxviz", "onnxruntime"])
def test_first_divergence_is_the_changed_weight_not_what_follows(engine: str) -> None:
    a = C.mlp(layers=3)
    b = C.copy(a)
    idx = next(i for i, t in enumerate(b.graph.initializer) if t.name == "w1")
    w = numpy_helper.to_array(b.graph.initializer[idx]).copy()
    w[:, 0] += 1.0
    b.graph.initializer[idx].CopyFrom(numpy_helper.from_array(w, "w1"))
    b = C.rename_everything(b, 8)
    result = numeric_diff(a, b, diff(a, b), {"x": _x(8)}, engine=engine)
    assert result.first is not None and result.first.a == "mm1"
    assert result.first.node_a == "matmul1"
    va, vb = result.first_values
    assert va.shape == vb.shape == (2, 8)
    assert np.abs(va - vb).max() == pytest.approx(result.first.max_abs)
    before = result.by_value_a()
    assert not before["relu0"].beyond and before["relu0"].max_abs == 0.0


@pytest.mark.parametrize("width", [8, 16, 32])
@pytest.mark.parametrize("bad", ["relu0", "relu1", "relu2"])
def test_qdq_names_the_first_value_beyond_its_quantization_step(width: int, bad: str) -> None:
    a = C.mlp(layers=4, width=width)
    x = _x(width, 1)
    q = C.quantize_qdq(a, x, bad_value=bad, bad_scale=0.2)
    result = numeric_diff(a, q, diff(a, q), {"x": x})
    assert result.quantized
    assert result.first is not None and result.first.a == bad
    assert result.first.b == bad + "_dqa"  # compared with the dequantized value
    assert (
        result.first.quant_step is not None and result.first.max_abs > 4 * result.first.quant_step
    )


@pytest.mark.parametrize("width", [8, 16, 32])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sound_qdq_model_stays_within_its_quantization_steps(width: int, seed: int) -> None:
    a = C.mlp(layers=4, width=width)
    x = _x(width, seed)
    q = C.quantize_qdq(a, x)
    result = numeric_diff(a, q, diff(a, q), {"x": x})
    judged = [v for v in result.values if v.tolerance is not None]
    assert {v.a for v in judged} == {"relu0", "relu1", "relu2"}
    assert result.equal
    assert all(v.max_abs > 0 for v in judged)  # quantization did change them


def test_layernorm_decomposition_agrees_numerically() -> None:
    a, b = C.layernorm(False), C.layernorm(True)
    result = numeric_diff(a, b, diff(a, b), {"x": _x(8)}, atol=1e-4, rtol=1e-3)
    names = [v.a for v in result.values]
    assert "ln" in names  # the fused group's output is compared
    assert result.equal


def test_folded_batchnorm_agrees_numerically() -> None:
    a = C.cnn(True)
    b = C.fold_batchnorm(a)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    result = numeric_diff(a, b, diff(a, b), {"x": x})
    assert {"convbn0", "convbn1", "y"} <= {v.a for v in result.values}
    assert result.equal


def test_unknown_engine_is_refused() -> None:
    from onnxviz.errors import ExecutionError

    a = C.mlp()
    with pytest.raises(ExecutionError, match="unknown engine"):
        numeric_diff(a, a, diff(a, a), {"x": _x(8)}, engine="tvm")


def _fp16(model):  # type: ignore[no-untyped-def]
    """The model in float16, as a converter writes it: weights, inputs and outputs."""
    from onnx import TensorProto

    m = C.copy(model)
    for t in m.graph.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in list(m.graph.input) + list(m.graph.output):
        v.type.tensor_type.elem_type = TensorProto.FLOAT16
    return m


@pytest.mark.parametrize("engine", ["onnxviz", "onnxruntime"])
def test_fp16_model_has_no_divergence_and_a_changed_weight_is_named(engine: str) -> None:
    a = C.mlp(layers=8, width=16)
    x = _x(16, 1)
    b = _fp16(a)
    result = numeric_diff(a, b, diff(a, b), {"x": x}, engine=engine)
    assert not result.quantized
    assert result.equal, result.first
    assert all(v.local_abs is not None for v in result.values)
    assert any(v.max_abs > 0 for v in result.values)  # fp16 did round

    idx = next(i for i, t in enumerate(b.graph.initializer) if t.name == "w5")
    w = numpy_helper.to_array(b.graph.initializer[idx]).copy()
    w[:, 3] *= np.float16(1.05)  # 5%: far above fp16's rounding, far below a gross fault
    b.graph.initializer[idx].CopyFrom(numpy_helper.from_array(w, "w5"))
    result = numeric_diff(a, b, diff(a, b), {"x": x}, engine=engine)
    assert result.first is not None and result.first.a == "mm5"
    assert result.first.local_abs is not None and result.first.local_abs > result.first.tolerance
    va, vb = result.first_values
    assert vb.dtype == np.float16 and va.dtype == np.float32


def test_a_value_is_judged_by_its_own_error_not_the_one_it_inherits() -> None:
    """Two changed weights: mm1's change is named first; mm2 inherits it and adds its
    own, and only its own counts (mm2 beyond too; add1 and relu1 only inherit)."""
    a = C.mlp(layers=3)
    b = C.copy(a)
    for name in ("w1", "w2"):
        idx = next(i for i, t in enumerate(b.graph.initializer) if t.name == name)
        w = numpy_helper.to_array(b.graph.initializer[idx]).copy()
        w[:, 0] += 1.0
        b.graph.initializer[idx].CopyFrom(numpy_helper.from_array(w, name))
    result = numeric_diff(a, b, diff(a, b), {"x": _x(8)})
    by = result.by_value_a()
    assert result.first is not None and result.first.a == "mm1"
    assert by["add1"].max_abs > by["add1"].tolerance  # carries mm1's error...
    assert not by["add1"].beyond and by["add1"].local_abs == pytest.approx(0.0, abs=1e-6)
    assert not by["relu1"].beyond
    assert by["mm2"].beyond and by["mm2"].local_abs > by["mm2"].tolerance
    assert not by["add2"].beyond
