"""Models exported by PyTorch run in our interpreter and match onnxruntime.

The models are small stand-ins for the families users bring: a CNN with upsampling,
ResNet bottlenecks, a transformer encoder (float and int8 dynamically quantized by
onnxruntime's tool), LSTM and GRU, and scripted control flow (Loop with If).  They are
committed in tests/data/exports/ (scripts/exports_for_tests.py holds the torch modules;
scripts/make_test_models.py --exports regenerates them), so this test needs no torch.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxviz.runtime.session import Session
from tests.data.exports import load

from .differential import assert_integer_matmuls_exact, assert_modes_agree

pytestmark = pytest.mark.numeric


def _compare(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float, atol: float
) -> None:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    # Fused, plain and stepped runs agree first; then the default run against onnxruntime.
    assert_modes_agree(model, feeds)
    got = Session(model).run(feeds)
    names = [o.name for o in model.graph.output]
    for name, ref in zip(names, want, strict=True):
        np.testing.assert_allclose(got[name], ref, rtol=rtol, atol=atol, err_msg=name)


def test_cnn_with_upsampling():
    model, feeds, _ = load("torchscript_unet")
    _compare(model, feeds, rtol=1e-4, atol=1e-5)


def test_resnet_bottlenecks_with_trained_statistics():
    """torchvision's bottleneck blocks (1x1 -> 3x3 -> 1x1, BatchNorm, strided 1x1
    shortcut, Add + ReLU) as the ResNet-50 benchmark builds them, scaled down."""
    model, feeds, _ = load("torchscript_resnet_bottlenecks")
    _compare(model, feeds, rtol=1e-4, atol=1e-4)


def test_transformer_encoder_float():
    model, feeds, _ = load("torchscript_encoder")
    _compare(model, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduce_range", [True, False])
def test_transformer_encoder_int8_dynamic_quantized(tmp_path, reduce_range):
    """Full-range int8 weights: every integer matmul equals exact int64 arithmetic.
    7-bit weights (reduce_range, the quantizer's option for CPUs without VNNI): the
    model also matches onnxruntime, whose u8s8 kernels are exact there on every CPU."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from tests.data.exports import path_of

    _, feeds, _ = load("torchscript_encoder")
    dst = tmp_path / "int8.onnx"
    quantize_dynamic(
        str(path_of("torchscript_encoder")),
        str(dst),
        weight_type=QuantType.QInt8,
        reduce_range=reduce_range,
    )
    quantized = onnx.load(dst)
    ops = {n.op_type for n in quantized.graph.node}
    assert ops & {"DynamicQuantizeLinear", "MatMulInteger", "DynamicQuantizeMatMul"}
    values = assert_modes_agree(quantized, feeds)
    assert assert_integer_matmuls_exact(quantized, values) > 0
    if reduce_range:
        _compare(quantized, feeds, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_recurrent(cell):
    model, feeds, _ = load(f"torchscript_{cell.lower()}")
    assert cell in {n.op_type for n in model.graph.node}
    _compare(model, feeds, rtol=1e-4, atol=1e-5)


def test_scripted_loop_with_if():
    model, feeds, _ = load("torchscript_loop_with_if")
    assert "Loop" in {n.op_type for n in model.graph.node}
    _compare(model, feeds, rtol=1e-6, atol=1e-6)
