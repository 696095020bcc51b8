"""Acceptance: an fp32 model against the QDQ model onnxruntime.quantization makes of it
(a tool's output, not our own quantizer).  One activation's scale is planted too small,
so it saturates; the numeric diff must name that value first.  The truth is computed
apart from the diff: both models run by onnxruntime with every value exposed, each
value's error measured against the step of the QuantizeLinear that quantizes it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxviz.model.diff import diff
from onnxviz.runtime.model_diff import numeric_diff
from tests.model import diff_corpus as C

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

pytestmark = pytest.mark.numeric

STEPS = 4.0  # numeric_diff's default tolerance in quantization steps
ATOL, RTOL = 1e-4, 1e-3


def _ort_qdq(
    model: onnx.ModelProto, x: np.ndarray, tmp_path, per_channel: bool = False
) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    class Reader(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{"x": x}])

        def get_next(self):  # type: ignore[no-untyped-def]
            return next(self.feeds, None)

    src, dst = tmp_path / f"fp32_{per_channel}.onnx", tmp_path / f"qdq_{per_channel}.onnx"
    onnx.save(model, src)
    quantization.quantize_static(
        str(src),
        str(dst),
        Reader(),
        quant_format=quantization.QuantFormat.QDQ,
        activation_type=quantization.QuantType.QInt8,
        weight_type=quantization.QuantType.QInt8,
        per_channel=per_channel,
    )
    return onnx.load(dst)


def _plant_saturation(q: onnx.ModelProto, value: str, factor: float) -> None:
    """The QuantizeLinear of ``value`` gets a scale ``factor`` times its own (and its
    DequantizeLinear the same, as a broken calibration would write both)."""
    quant = next(n for n in q.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == value)
    scale_name = quant.input[1]
    t = next(t for t in q.graph.initializer if t.name == scale_name)
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(factor), t.name))


def _all_values(model: onnx.ModelProto, x: np.ndarray) -> dict[str, np.ndarray]:
    m = C.copy(model)
    known = {o.name for o in m.graph.output}
    m.graph.output.extend(
        onnx.ValueInfoProto(name=o) for n in m.graph.node for o in n.output if o not in known
    )
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, {"x": x})))


def _scale_of(q: onnx.ModelProto, value: str) -> float:
    quant = next(n for n in q.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == value)
    t = next(t for t in q.graph.initializer if t.name == quant.input[1])
    return float(np.abs(numpy_helper.to_array(t)).max())


@pytest.mark.parametrize("engine", ["onnxviz", "onnxruntime"])
@pytest.mark.parametrize("planted", ["relu0", "relu1"])
def test_numeric_diff_names_the_saturated_value_of_an_onnxruntime_qdq_model(
    tmp_path, engine: str, planted: str
) -> None:  # type: ignore[no-untyped-def]
    a = C.mlp(layers=4, width=16)
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    q = _ort_qdq(a, x, tmp_path)
    assert sum(n.op_type == "QuantizeLinear" for n in q.graph.node) >= 4  # really quantized
    _plant_saturation(q, planted, 0.05)

    result = numeric_diff(a, q, diff(a, q), {"x": x}, engine=engine)
    assert result.quantized
    assert result.first is not None and result.first.a == planted

    # The truth, apart from the diff: errors of the dequantized values by onnxruntime.
    va, vq = _all_values(a, x), _all_values(q, x)
    order = [o for n in a.graph.node for o in n.output]
    judged = []
    for name in order:
        deq = next(
            (
                n.output[0]
                for n in q.graph.node
                if n.op_type == "DequantizeLinear"
                and n.input[0] in {m.output[0] for m in q.graph.node if m.input[:1] == [name]}
            ),
            None,
        )
        if deq is None or name not in vq:
            continue
        err = float(np.abs(va[name].astype(np.float64) - vq[deq]).max())
        step = _scale_of(q, name)
        tol = ATOL + RTOL * float(np.abs(va[name]).max()) + STEPS * step
        judged.append((name, err, step, tol))
    first_beyond = next(name for name, err, _, tol in judged if err > tol)
    assert first_beyond == planted
    (err, step) = next((e, s) for n, e, s, _ in judged if n == planted)
    assert err > STEPS * step  # saturated: far more than rounding
    assert result.first.max_abs == pytest.approx(err, rel=1e-3, abs=1e-5)


def test_the_diff_is_the_same_under_any_hash_seed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Pairs are matched in an order that follows hash values (PYTHONHASHSEED); what
    the diff reports must not.  (The Relu onnxruntime folds into the QDQ of its Add
    once came out as fused or as removed by the seed.)"""
    import json
    import os
    import subprocess
    import sys

    a = C.mlp(layers=4, width=16)
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    q = _ort_qdq(a, x, tmp_path)
    onnx.save(a, tmp_path / "a.onnx")
    onnx.save(q, tmp_path / "q.onnx")
    code = (
        "import json, sys, onnx\n"
        "from onnxviz.model.diff import diff\n"
        "d = diff(onnx.load(sys.argv[1]), onnx.load(sys.argv[2]))\n"
        "print(json.dumps(d.to_json(), sort_keys=True))\n"
    )
    outs = set()
    for seed in ("1", "3", "6", "11"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        run = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "a.onnx"), str(tmp_path / "q.onnx")],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        outs.add(run.stdout)
    assert len(outs) == 1
    assert json.loads(outs.pop())["counts"]["matched"] > 0


def _quantize_op(q: onnx.ModelProto, value: str) -> onnx.NodeProto:
    return next(n for n in q.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == value)


def _int_range(q: onnx.ModelProto, value: str) -> tuple[float, float]:
    """The float range B's QuantizeLinear of ``value`` can hold (int8 or uint8)."""
    quant = _quantize_op(q, value)
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    scale, zp = float(inits[quant.input[1]]), inits[quant.input[2]]
    info = np.iinfo(zp.dtype)
    return (info.min - int(zp)) * scale, (info.max - int(zp)) * scale


@pytest.mark.parametrize("engine", ["onnxviz", "onnxruntime"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_fault_free_onnxruntime_qdq_mlp_has_no_divergence(
    tmp_path, engine: str, per_channel: bool
) -> None:  # type: ignore[no-untyped-def]
    """The error a sound quantization inherits grows with depth: end to end it passes a
    bound of a few steps of the value's own scale (here at relu2, found by a helper on
    this very model), though no node adds more than its rounding."""
    a = C.mlp(layers=4, width=16)
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    q = _ort_qdq(a, x, tmp_path, per_channel)
    result = numeric_diff(a, q, diff(a, q), {"x": x}, engine=engine)
    judged = [v for v in result.values if v.tolerance is not None]
    assert {v.a for v in judged} >= {"relu0", "relu1", "relu2", "relu3", "y"}
    assert result.equal, result.first
    inherited = [
        v
        for v in judged
        if v.quant_step is not None
        and v.max_abs is not None
        and v.max_abs
        > ATOL + RTOL * float(np.abs(_all_values(a, x)[v.a]).max()) + STEPS * v.quant_step
    ]
    assert inherited  # the old end-to-end judgement would have flagged these
    assert all(v.local_abs is not None for v in judged)  # each judged by its own nodes


@pytest.mark.parametrize("per_channel", [False, True])
def test_fault_free_onnxruntime_qdq_cnn_has_no_divergence(tmp_path, per_channel: bool) -> None:  # type: ignore[no-untyped-def]
    a = C.cnn(False, blocks=3)
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    q = _ort_qdq(a, x, tmp_path, per_channel)
    assert sum(n.op_type == "QuantizeLinear" for n in q.graph.node) >= 3
    result = numeric_diff(a, q, diff(a, q), {"x": x})
    assert sum(v.tolerance is not None for v in result.values) >= 3
    assert result.equal, result.first


@pytest.mark.parametrize("engine", ["onnxviz", "onnxruntime"])
@pytest.mark.parametrize("planted", ["relu0", "relu1", "relu2", "relu3", "y"])
def test_a_saturating_scale_at_any_layer_is_named(tmp_path, engine: str, planted: str) -> None:  # type: ignore[no-untyped-def]
    """The named value is the one whose quantization clips, not one after it that only
    inherits the clipped values: its own error is at least what the clipping costs."""
    a = C.mlp(layers=4, width=16)
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    q = _ort_qdq(a, x, tmp_path)
    # onnxruntime folds the Relu into the quantization of its Add: the value B
    # quantizes for A's relu<i> is the Add's output, and y's is the Softmax's.
    source = next(
        n.input[0]
        for n in q.graph.node
        if n.op_type == "QuantizeLinear"
        and any(
            m.output[0] in (planted, planted + "_DequantizeLinear_Output")
            and m.input[0] == n.output[0]
            for m in q.graph.node
        )
    )
    _plant_saturation(q, source, 0.1)
    lo, hi = _int_range(q, source)
    truth = _all_values(a, x)[planted].astype(np.float64)
    clip_error = float(np.abs(truth - np.clip(truth, lo, hi)).max())

    result = numeric_diff(a, q, diff(a, q), {"x": x}, engine=engine)
    first = result.first
    assert first is not None and first.a == planted
    assert first.tolerance is not None and clip_error > 2 * first.tolerance  # really a fault
    assert first.local_abs is not None and first.local_abs >= clip_error - first.tolerance
    before = [v for v in result.values if v.order < first.order and v.tolerance is not None]
    assert len(before) == ["relu0", "relu1", "relu2", "relu3", "y"].index(planted)


@pytest.mark.parametrize("engine", ["onnxviz", "onnxruntime"])
def test_a_wrong_quantized_weight_is_named_at_its_layer(tmp_path, engine: str) -> None:  # type: ignore[no-untyped-def]
    """A fault that is not a scale: one column of layer 2's int8 weight negated (a
    broken conversion).  Named at that layer's value, not at one that inherits it."""
    a = C.mlp(layers=4, width=16)
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    q = _ort_qdq(a, x, tmp_path)
    t = next(t for t in q.graph.initializer if t.name == "w2_quantized")
    w = numpy_helper.to_array(t).copy()
    w[:, :4] = -w[:, :4]
    t.CopyFrom(numpy_helper.from_array(w, t.name))
    result = numeric_diff(a, q, diff(a, q), {"x": x}, engine=engine)
    assert result.first is not None and result.first.a == "relu2"
    assert not any(v.beyond for v in result.values if v.order < result.first.order)
