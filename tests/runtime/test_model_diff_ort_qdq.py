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


def _ort_qdq(model: onnx.ModelProto, x: np.ndarray, tmp_path) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    class Reader(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{"x": x}])

        def get_next(self):  # type: ignore[no-untyped-def]
            return next(self.feeds, None)

    src, dst = tmp_path / "fp32.onnx", tmp_path / "qdq.onnx"
    onnx.save(model, src)
    quantization.quantize_static(
        str(src),
        str(dst),
        Reader(),
        quant_format=quantization.QuantFormat.QDQ,
        activation_type=quantization.QuantType.QInt8,
        weight_type=quantization.QuantType.QInt8,
        per_channel=False,
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
