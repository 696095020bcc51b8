"""Models exported by PyTorch run in our interpreter and match onnxruntime.

The models are small stand-ins for the families users bring: a CNN with upsampling, a
transformer encoder (float and int8 dynamically quantized by onnxruntime's tool), LSTM
and GRU, and scripted control flow (Loop with If).  Each is exported at test time.
"""

from __future__ import annotations

import io
import os
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from onnxviz.runtime.session import Session

from .differential import assert_integer_matmuls_exact, assert_modes_agree

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks"))
import torch_models

pytestmark = pytest.mark.numeric

torch.manual_seed(0)
# The fused "fast path" of nn.TransformerEncoderLayer has no ONNX export; the plain
# module graph is what exporters emit for real models.
torch.backends.mha.set_fastpath_enabled(False)


def _export(module: nn.Module, args: tuple, **kwargs) -> onnx.ModelProto:
    buf = io.BytesIO()
    module.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buf, dynamo=False, opset_version=17, **kwargs)
    return onnx.load_from_string(buf.getvalue())


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


class SmallUNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.mid = nn.Conv2d(8, 16, 3, padding=1, groups=8)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.resize = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.head = nn.Conv2d(16, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.down(x)
        m = torch.relu(self.mid(self.pool(d)))
        u = self.up(m)
        r = self.resize(self.pool(d))
        return torch.sigmoid(self.head(torch.cat([u, r], 1)))


def test_cnn_with_upsampling():
    model = _export(SmallUNet(), (torch.randn(1, 3, 16, 16),), input_names=["x"])
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    _compare(model, {"x": x}, rtol=1e-4, atol=1e-5)


def test_resnet_bottlenecks_with_trained_statistics():
    """torchvision's bottleneck blocks (1x1 -> 3x3 -> 1x1, BatchNorm, strided 1x1
    shortcut, Add + ReLU) as the ResNet-50 benchmark builds them, scaled down."""
    model, feeds = torch_models.resnet_torch(
        [(8, 1, 1), (8, 1, 1), (16, 1, 2)], stem=16, image=64, batch=2
    )
    _compare(model, feeds, rtol=1e-4, atol=1e-4)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        layer = nn.TransformerEncoderLayer(
            32, 4, 64, dropout=0.0, batch_first=True, activation="gelu"
        )
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(ids), src_key_padding_mask=mask)
        return self.head(h).softmax(-1)


def _encoder_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    ids = torch.randint(0, 50, (2, 7))
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[1, 5:] = True
    model = _export(
        Encoder(),
        (ids, mask),
        input_names=["ids", "mask"],
        dynamic_axes={"ids": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}},
    )
    return model, {"ids": ids.numpy(), "mask": mask.numpy()}


def test_transformer_encoder_float():
    model, feeds = _encoder_model()
    _compare(model, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduce_range", [True, False])
def test_transformer_encoder_int8_dynamic_quantized(tmp_path, reduce_range):
    """Full-range int8 weights: every integer matmul equals exact int64 arithmetic.
    7-bit weights (reduce_range, the quantizer's option for CPUs without VNNI): the
    model also matches onnxruntime, whose u8s8 kernels are exact there on every CPU."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model, feeds = _encoder_model()
    src, dst = tmp_path / "f32.onnx", tmp_path / "int8.onnx"
    onnx.save(model, src)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, reduce_range=reduce_range)
    quantized = onnx.load(dst)
    ops = {n.op_type for n in quantized.graph.node}
    assert ops & {"DynamicQuantizeLinear", "MatMulInteger", "DynamicQuantizeMatMul"}
    values = assert_modes_agree(quantized, feeds)
    assert assert_integer_matmuls_exact(quantized, values) > 0
    if reduce_range:
        _compare(quantized, feeds, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_recurrent(cell):
    class Recurrent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = getattr(nn, cell)(6, 12, num_layers=2, batch_first=True, bidirectional=True)
            self.out = nn.Linear(24, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y, _ = self.rnn(x)
            return self.out(y)

    model = _export(Recurrent(), (torch.randn(2, 5, 6),), input_names=["x"])
    assert cell in {n.op_type for n in model.graph.node}
    x = np.random.default_rng(1).standard_normal((2, 5, 6)).astype(np.float32)
    _compare(model, {"x": x}, rtol=1e-4, atol=1e-5)


class Looping(nn.Module):
    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        acc = torch.zeros_like(x)
        for i in range(int(n)):
            if i % 2 == 0:
                acc = acc + x * i
            else:
                acc = acc - x
        return acc


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_scripted_loop_with_if():
    scripted = torch.jit.script(Looping())
    model = _export(scripted, (torch.randn(3), torch.tensor(4)), input_names=["x", "n"])
    assert "Loop" in {n.op_type for n in model.graph.node}
    x = np.array([1.0, -2.0, 0.5], np.float32)
    _compare(model, {"x": x, "n": np.array(5, np.int64)}, rtol=1e-6, atol=1e-6)
