"""Benchmark models as PyTorch exports them (test-time tool only), for issue 5's "models
you did not see": the graphs real users bring differ from our hand-built ones.

* ``resnet50_torch``: torchvision's ResNet-50 layout (bottlenecks [3, 4, 6, 3], BatchNorm
  folded by the exporter, Add + Relu shortcuts, Flatten + Gemm head), random weights
  with non-trivial normalization statistics, 1x3x224x224.
* ``bert_torch``: a BERT-base encoder as Hugging Face models export at opset 14:
  LayerNorm decomposed into ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add, GELU as Div/Erf/Add/Mul,
  an additive attention mask, 12 layers, hidden 768, 12 heads, FFN 3072, sequence 128.

Built on first use (export takes a few seconds) and seeded, so every runtime gets the same
model.
"""

from __future__ import annotations

import io
import math
import warnings
from typing import Any

import numpy as np
import onnx

Built = tuple[onnx.ModelProto, dict[str, np.ndarray]]


def _export(module: Any, args: tuple[Any, ...], names: list[str], opset: int) -> onnx.ModelProto:
    import torch

    buf = io.BytesIO()
    module.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buf, dynamo=False, opset_version=opset, input_names=names)
    return onnx.load_from_string(buf.getvalue())


def resnet50_torch() -> Built:
    return resnet_torch([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)])


def resnet_torch(
    stages: list[tuple[int, int, int]], *, stem: int = 64, image: int = 224, batch: int = 1
) -> Built:
    """torchvision's ResNet layout with bottleneck ``stages`` of (width, blocks, stride);
    random weights, BatchNorm statistics as after training (folded by the exporter)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, mid: int, stride: int) -> None:
            super().__init__()
            cout = mid * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False),
                nn.BatchNorm2d(mid),
                nn.ReLU(),
                nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(mid),
                nn.ReLU(),
                nn.Conv2d(mid, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            )
            self.short: nn.Module = nn.Identity()
            if stride != 1 or cin != cout:
                self.short = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: Any) -> Any:
            return torch.relu(self.body(x) + self.short(x))

    layers: list[nn.Module] = [
        nn.Conv2d(3, stem, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(stem),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = stem
    for mid, blocks, stride in stages:
        for b in range(blocks):
            layers.append(Bottleneck(cin, mid, stride if b == 0 else 1))
            cin = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    net = nn.Sequential(*layers)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.2, 0.6)  # keeps activations bounded through 16 blocks
    x = np.random.default_rng(0).standard_normal((batch, 3, image, image)).astype(np.float32)
    return _export(net, (torch.from_numpy(x),), ["x"], 17), {"x": x}


def bert_torch(
    layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, seq: int = 128
) -> Built:
    import torch
    from torch import nn

    torch.manual_seed(0)

    class LayerNorm(nn.Module):
        """Hugging Face's pre-opset-17 export of LayerNorm, spelled out."""

        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))
            self.bias = nn.Parameter(torch.zeros(hidden))

        def forward(self, x: Any) -> Any:
            u = x.mean(-1, keepdim=True)
            s = (x - u).pow(2).mean(-1, keepdim=True)
            return self.weight * ((x - u) / torch.sqrt(s + 1e-12)) + self.bias

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))
            self.ff1, self.ff2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
            self.ln1, self.ln2 = LayerNorm(), LayerNorm()
            self.gelu = nn.GELU()

        def split(self, t: Any) -> Any:
            return t.view(1, seq, heads, hidden // heads).permute(0, 2, 1, 3)

        def forward(self, x: Any, mask: Any) -> Any:
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            scores = q @ k.transpose(-1, -2) / math.sqrt(hidden // heads) + mask
            ctx = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(1, seq, hidden)
            h = self.ln1(x + self.o(ctx))
            return self.ln2(h + self.ff2(self.gelu(self.ff1(h))))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(layers))

        def forward(self, x: Any, attention_mask: Any) -> Any:
            mask = (1.0 - attention_mask[:, None, None, :]) * -10000.0
            for layer in self.layers:
                x = layer(x, mask)
            return x

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, seq, hidden)).astype(np.float32)
    mask = np.ones((1, seq), np.float32)
    mask[:, seq - 16 :] = 0  # padding at the end, as in a batch of unequal sentences
    model = _export(
        Encoder(), (torch.from_numpy(x), torch.from_numpy(mask)), ["x", "attention_mask"], 14
    )
    return model, {"x": x, "attention_mask": mask}


TORCH_MODELS = {
    "resnet50_torch": ("ResNet-50 (PyTorch export, random weights)", resnet50_torch),
    "bert_torch": (
        "BERT-base encoder (PyTorch export, opset 14, decomposed LayerNorm)",
        bert_torch,
    ),
}
