"""The model families of the interpreter-speed goal (issue 21), as users' exporters write
them: small real models, where what each node costs us beyond its arithmetic shows.

* ``mobilenetv3_small``: MobileNetV3-small's layout (inverted residuals, depthwise 3x3 and
  5x5, squeeze-excite with hard-sigmoid, hard-swish), torch dynamo export, 1x3x224x224;
* ``gpt2_kv``: a 2-layer GPT-2 decoder (hidden 768, 12 heads) taking a KV cache of 32
  past positions for 8 new tokens, TorchScript export at opset 14;
* ``lstm_gru``: a 2-layer LSTM then a GRU (seq 64, batch 4, hidden 256), TorchScript;
* ``unet_torch``: a small UNet (3 levels from 16 channels, 128 px, transposed convs and
  concat skips), TorchScript;
* ``diffusion_unet``: a diffusion model's UNet (residual blocks of GroupNorm(8), SiLU and
  3x3 convs with a sinusoidal time embedding added, channels 32-64 over 3 levels, a
  self-attention block in the middle, stride-2 convs down and 2x nearest upsampling up),
  32 px, TorchScript (GroupNorm as Reshape -> InstanceNormalization -> Reshape);
* ``vit_tiny``: ViT-tiny (patch 16 on 224 px, dim 192, 12 layers, 3 heads), dynamo;
* ``bert_tiny``: BERT-tiny (2 layers, hidden 128, 2 heads, seq 128), TorchScript opset 14;
* ``resnet18_w32``: ResNet-18 at base width 32, dynamo (BatchNorm folded into the convs);
* ``qdq_cnn``: that ResNet-18 quantized by onnxruntime.quantization (static, QDQ,
  per-channel weights, uint8 activations);
* ``dynamic_bert_tiny``: BERT-tiny quantized by onnxruntime.quantization's
  ``quantize_dynamic`` (int8 weights, activations quantized at run time);
* ``genai_llama_int4``: the committed onnxruntime-genai int4 Llama (MatMulNBits,
  GroupQueryAttention, SkipSimplifiedLayerNormalization) from tests/data/exporters;
* ``llama1k_int4_prompt`` / ``llama1k_int4_decode``: a Llama of a size users bring
  (hidden 1024, 4 layers, 16 query heads over 4 KV heads, MLP 2816, vocabulary 32000),
  exported by onnxruntime-genai's builder at int4 for the CPU (block 32, accuracy level 4):
  a 64-token prompt with an empty cache, and one decode step after 64 cached tokens.  The
  export (a minute) is kept in the temporary folder; the builder (onnxruntime-genai 0.18,
  transformers 5.2 or newer: benchmark-time tools) runs in ./.venv-genai, which
  ``bash scripts/setup.sh genai`` makes (or the Python ``$ONNXVIZ_GENAI_PYTHON`` names);
* ``llama2k_int4_prompt`` / ``llama2k_int4_decode``: the same at hidden 2048, 8 layers,
  32 query heads over 8 KV heads, MLP 5632 (1.7 GB of float32 weights once dequantized):
  a 32-token prompt, and a decode step after 128 cached tokens;
* ``gpt2_kv_decode``: a 4-layer GPT-2 (hidden 768) of the same TorchScript export as
  ``gpt2_kv``, one new token after 128 cached ones (a generation step);
* ``gpt2_kv_dynamo``: that 4-layer GPT-2 exported by torch dynamo, 16 new tokens after
  128 cached ones.

Variants (``--models variants``) include Hugging Face's GPT-2, Llama and MobileNetV2 as
optimum exports them (``hf_gpt2``, ``hf_llama``, ``hf_mobilenet_v2``: need optimum-onnx), that
MobileNetV2 quantized to QDQ (a quantize-dequantize pair between each Pad and its conv),
and BERT-tiny through onnxruntime's transformers optimizer (``transformers_optimized``).

Random weights, seeded.  torch and onnxscript are benchmark-time tools only.  The
``*_bell`` variants draw the matrices from N(0, 0.02) (`bell_weights`), as Hugging Face
models initialize theirs and as trained weights are shaped, where torch's default Linear
draws uniformly: the int8 products' forms depend on the codes' shape.
"""

from __future__ import annotations

import io
import os
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

Built = tuple[onnx.ModelProto, dict[str, np.ndarray]]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _export(
    module: Any, args: tuple[Any, ...], names: list[str], *, dynamo: bool, opset: int = 17
) -> onnx.ModelProto:
    import torch

    module.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(module, args, input_names=names, dynamo=True, verbose=False)
            return program.model_proto
        buf = io.BytesIO()
        torch.onnx.export(module, args, buf, dynamo=False, opset_version=opset, input_names=names)
    return onnx.load_from_string(buf.getvalue())


def _feeds(names: list[str], args: tuple[Any, ...]) -> dict[str, np.ndarray]:
    return {n: a.numpy() for n, a in zip(names, args)}


def _trained_norms(net: Any, scales: bool = False) -> None:
    """Trained-looking BatchNorm2d statistics for a random ``net`` (and scales, with
    ``scales``), drawn from torch's seeded generator module by module: a fresh module's
    zero means and unit variances would make every norm the identity."""
    from torch import nn

    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            if scales:
                m.weight.data.uniform_(0.5, 1.5)


def mobilenetv3_small(large: bool = False, dynamo: bool = True) -> Built:
    """MobileNetV3-small (or -large: ``large``) with random weights, torch's dynamo
    exporter (or TorchScript's)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def conv_bn(cin: int, cout: int, k: int, s: int, groups: int = 1) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]

    class SqueezeExcite(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            squeeze = max(8, (c // 4 + 4) // 8 * 8)
            self.fc1 = nn.Conv2d(c, squeeze, 1)
            self.fc2 = nn.Conv2d(squeeze, c, 1)

        def forward(self, x: Any) -> Any:
            s = nn.functional.adaptive_avg_pool2d(x, 1)
            return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, hs: bool, s: int):
            super().__init__()
            act: type[nn.Module] = nn.Hardswish if hs else nn.ReLU
            layers: list[nn.Module] = []
            if exp != cin:
                layers += [*conv_bn(cin, exp, 1, 1), act()]
            layers += [*conv_bn(exp, exp, k, s, groups=exp), act()]
            if se:
                layers.append(SqueezeExcite(exp))
            layers += conv_bn(exp, cout, 1, 1)
            self.body = nn.Sequential(*layers)
            self.residual = s == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            y = self.body(x)
            return x + y if self.residual else y

    # (kernel, expansion, out, SE, hard-swish, stride): MobileNetV3-small's table
    table = [
        (3, 16, 16, True, False, 2),
        (3, 72, 24, False, False, 2),
        (3, 88, 24, False, False, 1),
        (5, 96, 40, True, True, 2),
        (5, 240, 40, True, True, 1),
        (5, 240, 40, True, True, 1),
        (5, 120, 48, True, True, 1),
        (5, 144, 48, True, True, 1),
        (5, 288, 96, True, True, 2),
        (5, 576, 96, True, True, 1),
        (5, 576, 96, True, True, 1),
    ]
    last, head = 576, 1024
    if large:  # MobileNetV3-large's table
        table = [
            (3, 16, 16, False, False, 1),
            (3, 64, 24, False, False, 2),
            (3, 72, 24, False, False, 1),
            (5, 72, 40, True, False, 2),
            (5, 120, 40, True, False, 1),
            (5, 120, 40, True, False, 1),
            (3, 240, 80, False, True, 2),
            (3, 200, 80, False, True, 1),
            (3, 184, 80, False, True, 1),
            (3, 184, 80, False, True, 1),
            (3, 480, 112, True, True, 1),
            (3, 672, 112, True, True, 1),
            (5, 672, 160, True, True, 2),
            (5, 960, 160, True, True, 1),
            (5, 960, 160, True, True, 1),
        ]
        last, head = 960, 1280
    layers: list[nn.Module] = [*conv_bn(3, 16, 3, 2), nn.Hardswish()]
    cin = 16
    for k, exp, cout, se, hs, s in table:
        layers.append(InvertedResidual(cin, k, exp, cout, se, hs, s))
        cin = cout
    layers += [*conv_bn(cin, last, 1, 1), nn.Hardswish(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    layers += [nn.Linear(last, head), nn.Hardswish(), nn.Linear(head, 1000)]
    net = nn.Sequential(*layers)
    _trained_norms(net)
    args = (torch.randn(1, 3, 224, 224),)
    return _export(net, args, ["image"], dynamo=dynamo), _feeds(["image"], args)


def gpt2_kv(
    layers: int = 2,
    hidden: int = 768,
    heads: int = 12,
    past: int = 32,
    new: int = 8,
    dynamo: bool = False,
) -> Built:
    import torch
    from torch import nn

    torch.manual_seed(0)
    head = hidden // heads

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.ln2 = nn.LayerNorm(hidden)
            self.fc = nn.Linear(hidden, 4 * hidden)
            self.out = nn.Linear(4 * hidden, hidden)

        def forward(self, x: Any, pk: Any, pv: Any) -> Any:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(hidden, dim=2)
            q, k, v = (z.view(b, t, heads, head).transpose(1, 2) for z in (q, k, v))
            k = torch.cat([pk, k], 2)
            v = torch.cat([pv, v], 2)
            att = (q @ k.transpose(-1, -2)) / (head**0.5)
            total = k.shape[2]
            mask = torch.ones(t, total, dtype=torch.bool).tril(total - t)
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, hidden)
            x = x + self.proj(y)
            x = x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))
            return x, k, v

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(1000, hidden)
            self.wpe = nn.Embedding(256, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(hidden)

        def forward(self, ids: Any, *cache: Any) -> Any:
            pos = torch.arange(past, past + ids.shape[1]).unsqueeze(0)
            x = self.wte(ids) + self.wpe(pos)
            presents = []
            for i, block in enumerate(self.blocks):
                x, k, v = block(x, cache[2 * i], cache[2 * i + 1])
                presents += [k, v]
            return (self.ln(x) @ self.wte.weight.t(), *presents)

    ids = torch.randint(0, 1000, (1, new))
    cache = tuple(torch.randn(1, heads, past, head) for _ in range(2 * layers))
    names = ["input_ids"] + [f"past_{i // 2}_{'kv'[i % 2]}" for i in range(2 * layers)]
    args = (ids, *cache)
    return _export(Decoder(), args, names, dynamo=dynamo, opset=14), _feeds(names, args)


def lstm_gru(seq: int = 64, batch: int = 4, n_in: int = 128, hidden: int = 256) -> Built:
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Recurrent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(n_in, hidden, 2)
            self.gru = nn.GRU(hidden, hidden)
            self.head = nn.Linear(hidden, 32)

        def forward(self, x: Any) -> Any:
            y, _ = self.lstm(x)
            z, _ = self.gru(y)
            return self.head(z)

    args = (torch.randn(seq, batch, n_in),)
    return _export(Recurrent(), args, ["x"], dynamo=False), _feeds(["x"], args)


def rnn_cells(
    kind: str, seq: int = 32, batch: int = 4, n_in: int = 64, hidden: int = 128, dynamo: bool = True
) -> Built:
    """An nn.LSTMCell or nn.GRUCell ("lstm", "gru") stepped by a Python loop over ``seq``
    steps and a linear head, as speech and time-series models write their recurrences:
    both exporters write each step out (Gather of x[t], two Linear Gemms, Split, the
    gates' Sigmoid, Tanh, Mul, Add; 480-650 nodes of ``batch`` x ``hidden`` values), so
    the run is the cost per small node and of the few-row products."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Cells(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = (nn.LSTMCell if kind == "lstm" else nn.GRUCell)(n_in, hidden)
            self.head = nn.Linear(hidden, 16)

        def forward(self, x: Any) -> Any:
            h = torch.zeros(x.shape[1], hidden)
            c = torch.zeros(x.shape[1], hidden)
            outs = []
            for t in range(x.shape[0]):
                if kind == "lstm":
                    h, c = self.cell(x[t], (h, c))
                else:
                    h = self.cell(x[t], h)
                outs.append(h)
            return self.head(torch.stack(outs))

    args = (torch.randn(seq, batch, n_in),)
    return _export(Cells(), args, ["x"], dynamo=dynamo), _feeds(["x"], args)


def elman_rnn(seq: int = 50, batch: int = 4, n_in: int = 64, hidden: int = 128) -> Built:
    """A two-layer Elman RNN (torch.nn.RNN, tanh) and a linear head, torch's dynamo
    export: it writes the layer out step by step (no RNN node: per step a Slice and
    Squeeze of the input projection, the recurrent MatMul and its bias Add, the Add of
    the two and the Tanh; 610 nodes of 4 x 128 values), so the run is the cost per small
    node."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Elman(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.RNN(n_in, hidden, 2)
            self.head = nn.Linear(hidden, 16)

        def forward(self, x: Any) -> Any:
            y, _ = self.rnn(x)
            return self.head(y)

    args = (torch.randn(seq, batch, n_in),)
    return _export(Elman(), args, ["x"], dynamo=True), _feeds(["x"], args)


def scripted_loop(seq: int = 64, batch: int = 1, n_in: int = 32, hidden: int = 64) -> Built:
    """A recurrent cell stepped by a TorchScript-scripted loop (torch.jit.script, then
    the TorchScript exporter): an ONNX Loop whose body reads x[t], makes the cell's two
    Linear products (Gemm by the main graph's weights), the tanh, and appends h to a
    sequence; a ConcatFromSequence after it.  Its run is the cost per iteration and per
    small body node, and the body's products on the outer weights."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Scripted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin_x = nn.Linear(n_in, hidden)
            self.lin_h = nn.Linear(hidden, hidden)
            self.hidden = hidden  # (a script reads no closed-over int)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.zeros(x.size(1), self.hidden)
            outs: list[torch.Tensor] = []
            for t in range(x.size(0)):
                h = torch.tanh(self.lin_x(x[t]) + self.lin_h(h))
                outs.append(h)
            return torch.stack(outs)

    args = (torch.randn(seq, batch, n_in),)
    return _export(torch.jit.script(Scripted()), args, ["x"], dynamo=False), _feeds(["x"], args)


def unet_torch(size: int = 128, base: int = 16, levels: int = 3) -> Built:
    import torch
    from torch import nn

    torch.manual_seed(0)

    def block(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
        )

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            widths = [base * 2**i for i in range(levels + 1)]
            self.down = nn.ModuleList(block(c, w) for c, w in zip([3, *widths[:-2]], widths[:-1]))
            self.mid = block(widths[-2], widths[-1])
            self.up = nn.ModuleList(nn.ConvTranspose2d(w, w // 2, 2, 2) for w in widths[:0:-1])
            self.dec = nn.ModuleList(block(w, w // 2) for w in widths[:0:-1])
            self.head = nn.Conv2d(base, 2, 1)

        def forward(self, x: Any) -> Any:
            skips = []
            for d in self.down:
                x = d(x)
                skips.append(x)
                x = nn.functional.max_pool2d(x, 2)
            x = self.mid(x)
            for up, dec, skip in zip(self.up, self.dec, reversed(skips)):
                x = dec(torch.cat([up(x), skip], 1))
            return self.head(x)

    args = (torch.randn(1, 3, size, size),)
    return _export(UNet(), args, ["image"], dynamo=False), _feeds(["image"], args)


def fpn(size: int = 224, width: int = 32, neck: int = 128) -> Built:
    """A detection or segmentation backbone with its feature pyramid (Lin et al. 2017), as
    users export them for their own heads: a small ResNet-style encoder (3x3 conv +
    BatchNorm + Relu blocks, stride 2 between stages), a 1x1 lateral conv per stage, the
    top-down path (nearest x2 upsampling + Add) and a 3x3 output conv per level, every
    level a graph output.  The lateral 1x1 convs read channels-last values and hand NCHW
    ones to the Resize and Add: the chains' exits (fusion_layout.ChannelsLast)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def stage(cin: int, cout: int, stride: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1), nn.BatchNorm2d(cout), nn.ReLU(),
        )  # fmt: skip

    class Fpn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            widths = [width * 2**i for i in range(4)]
            self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1), nn.ReLU())
            self.stages = nn.ModuleList(
                stage(c, w, 2) for c, w in zip([width, *widths[:-1]], widths)
            )
            self.lateral = nn.ModuleList(nn.Conv2d(w, neck, 1) for w in widths)
            self.smooth = nn.ModuleList(nn.Conv2d(neck, neck, 3, 1, 1) for _ in widths)

        def forward(self, x: Any) -> Any:
            feats = []
            x = self.stem(x)
            for s in self.stages:
                x = s(x)
                feats.append(x)
            top = self.lateral[-1](feats[-1])
            levels = [top]
            for lat, f in zip(self.lateral[-2::-1], feats[-2::-1]):
                top = lat(f) + nn.functional.interpolate(top, scale_factor=2.0, mode="nearest")
                levels.append(top)
            return tuple(sm(p) for sm, p in zip(self.smooth, reversed(levels)))

    args = (torch.randn(1, 3, size, size),)
    return _export(Fpn(), args, ["image"], dynamo=False), _feeds(["image"], args)


def diffusion_unet(
    size: int = 32, base: int = 32, mults: tuple[int, ...] = (1, 2, 2), dynamo: bool = False
) -> Built:
    import torch
    from torch import nn

    torch.manual_seed(0)
    tdim = base * 4

    class Res(nn.Module):
        def __init__(self, cin: int, cout: int) -> None:
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(8, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.t = nn.Linear(tdim, cout)
            self.n2, self.c2 = nn.GroupNorm(8, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x: Any, temb: Any) -> Any:
            h = self.c1(nn.functional.silu(self.n1(x)))
            h = h + self.t(nn.functional.silu(temb))[:, :, None, None]
            h = self.c2(nn.functional.silu(self.n2(h)))
            return self.skip(x) + h

    class Attn(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.n, self.qkv, self.o = (
                nn.GroupNorm(8, c),
                nn.Conv2d(c, 3 * c, 1),
                nn.Conv2d(c, c, 1),
            )

        def forward(self, x: Any) -> Any:
            b, c, h, w = x.shape
            q, k, v = self.qkv(self.n(x)).reshape(b, 3, c, h * w).unbind(1)
            a = torch.softmax(q.transpose(1, 2) @ k / c**0.5, -1)
            return x + self.o((v @ a.transpose(1, 2)).reshape(b, c, h, w))

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.temb = nn.Sequential(nn.Linear(base, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
            self.inc = nn.Conv2d(3, base, 3, padding=1)
            chans = [base * m for m in mults]
            self.down, self.ds = nn.ModuleList(), nn.ModuleList()
            c, skips = base, [base]
            for i, ch in enumerate(chans):
                self.down.append(Res(c, ch))
                c = ch
                skips.append(c)
                last = i == len(chans) - 1
                self.ds.append(nn.Identity() if last else nn.Conv2d(c, c, 3, stride=2, padding=1))
            self.mid1, self.attn, self.mid2 = Res(c, c), Attn(c), Res(c, c)
            self.up, self.us = nn.ModuleList(), nn.ModuleList()
            for i, ch in reversed(list(enumerate(chans))):
                self.up.append(Res(c + skips.pop(), ch))
                c = ch
                self.us.append(nn.Conv2d(c, c, 3, padding=1) if i > 0 else nn.Identity())
            self.out = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, 3, 3, padding=1))

        def forward(self, x: Any, t: Any) -> Any:
            half = base // 2
            freqs = torch.exp(-torch.arange(half, dtype=torch.float32) * (9.2103 / half))
            e = t[:, None] * freqs[None]
            temb = self.temb(torch.cat([torch.sin(e), torch.cos(e)], 1))
            h = self.inc(x)
            hs = [h]
            for i, (res, down) in enumerate(zip(self.down, self.ds)):
                h = res(h, temb)
                hs.append(h)
                if i < len(self.down) - 1:
                    h = down(h)
            h = self.mid2(self.attn(self.mid1(h, temb)), temb)
            for i, (res, up) in enumerate(zip(self.up, self.us)):
                h = res(torch.cat([h, hs.pop()], 1), temb)
                if i < len(self.up) - 1:
                    h = up(nn.functional.interpolate(h, scale_factor=2.0, mode="nearest"))
            return self.out(h)

    args = (torch.randn(1, 3, size, size), torch.tensor([10.0]))
    return _export(UNet(), args, ["x", "t"], dynamo=dynamo), _feeds(["x", "t"], args)


def tcn(
    batch: int = 4, n_in: int = 16, length: int = 256, channels: int = 64, levels: int = 4
) -> Built:
    """A temporal convolutional network (Bai et al. 2018): residual blocks of two causal
    dilated Conv1d (padding both sides, the future cut off by a slice), ReLU, a 1x1
    Conv1d on the skip where the width changes, then the last step through a Linear."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, dilation: int) -> None:
            super().__init__()
            self.cut = 2 * dilation
            self.c1 = nn.Conv1d(cin, cout, 3, padding=self.cut, dilation=dilation)
            self.c2 = nn.Conv1d(cout, cout, 3, padding=self.cut, dilation=dilation)
            self.skip = nn.Conv1d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x: Any) -> Any:
            h = torch.relu(self.c1(x)[:, :, : -self.cut])
            h = torch.relu(self.c2(h)[:, :, : -self.cut])
            return torch.relu(h + self.skip(x))

    class TCN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            widths = [n_in] + [channels] * levels
            self.blocks = nn.Sequential(
                *(Block(widths[i], widths[i + 1], 2**i) for i in range(levels))
            )
            self.head = nn.Linear(channels, 10)

        def forward(self, x: Any) -> Any:
            return self.head(self.blocks(x)[:, :, -1])

    args = (torch.randn(batch, n_in, length),)
    return _export(TCN(), args, ["x"], dynamo=False), _feeds(["x"], args)


def convnext(size: int = 128, dynamo: bool = False) -> Built:
    """A small ConvNeXt (Liu et al. 2022): a 4x4 patchify stem, blocks of a depthwise 7x7
    conv, a permute to NHWC, LayerNorm over channels, Linear -> GELU -> Linear, a
    per-channel scale, the permute back and the residual add; 2x2 downsampling convs
    between widths 48, 96 and 192."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
            self.norm = nn.LayerNorm(c)
            self.up = nn.Linear(c, 4 * c)
            self.down = nn.Linear(4 * c, c)
            self.scale = nn.Parameter(torch.full((c,), 0.1))

        def forward(self, x: Any) -> Any:
            y = self.dw(x).permute(0, 2, 3, 1)
            y = self.down(nn.functional.gelu(self.up(self.norm(y)))) * self.scale
            return x + y.permute(0, 3, 1, 2)

    class ConvNeXt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, 48, 4, 4)
            self.blocks = nn.Sequential(
                Block(48), Block(48), nn.Conv2d(48, 96, 2, 2), Block(96), Block(96),
                nn.Conv2d(96, 192, 2, 2), Block(192),
            )  # fmt: skip
            self.head = nn.Linear(192, 10)

        def forward(self, x: Any) -> Any:
            return self.head(self.blocks(self.stem(x)).mean((2, 3)))

    args = (torch.randn(1, 3, size, size),)
    return _export(ConvNeXt(), args, ["x"], dynamo=dynamo), _feeds(["x"], args)


def yolo(size: int = 160, dynamo: bool = False) -> Built:
    """A small YOLOv5-style detector: Conv-BatchNorm-SiLU blocks, C3 blocks (two branches,
    bottlenecks with residual adds, a channel Concat), an SPPF (three chained 5x5 max
    pools and a Concat), a nearest upsample joining two scales, and per-scale 1x1 heads
    whose 3 x 85 outputs are flattened, joined and passed through a sigmoid."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class CBS(nn.Module):
        def __init__(self, a: int, b: int, k: int = 1, s: int = 1) -> None:
            super().__init__()
            self.conv = nn.Conv2d(a, b, k, s, k // 2, bias=False)
            self.bn = nn.BatchNorm2d(b)
            self.act = nn.SiLU()

        def forward(self, x: Any) -> Any:
            return self.act(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.a, self.b = CBS(c, c, 1), CBS(c, c, 3)

        def forward(self, x: Any) -> Any:
            return x + self.b(self.a(x))

    class C3(nn.Module):
        def __init__(self, a: int, b: int, n: int = 1) -> None:
            super().__init__()
            h = b // 2
            self.c1, self.c2, self.c3 = CBS(a, h), CBS(a, h), CBS(2 * h, b)
            self.m = nn.Sequential(*[Bottleneck(h) for _ in range(n)])

        def forward(self, x: Any) -> Any:
            return self.c3(torch.cat([self.m(self.c1(x)), self.c2(x)], 1))

    class SPPF(nn.Module):
        def __init__(self, a: int, b: int) -> None:
            super().__init__()
            self.c1, self.c2 = CBS(a, a // 2), CBS(2 * a, b)
            self.pool = nn.MaxPool2d(5, 1, 2)

        def forward(self, x: Any) -> Any:
            x = self.c1(x)
            y1 = self.pool(x)
            y2 = self.pool(y1)
            return self.c2(torch.cat([x, y1, y2, self.pool(y2)], 1))

    class Yolo(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.p3 = nn.Sequential(
                CBS(3, 16, 3, 2), CBS(16, 32, 3, 2), C3(32, 32), CBS(32, 64, 3, 2), C3(64, 64, 2)
            )
            self.p4 = nn.Sequential(CBS(64, 128, 3, 2), C3(128, 128), SPPF(128, 128))
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.lat, self.join = CBS(128, 64), C3(128, 64)
            self.h3, self.h4 = nn.Conv2d(64, 3 * 85, 1), nn.Conv2d(128, 3 * 85, 1)

        def forward(self, x: Any) -> Any:
            p3 = self.p3(x)
            p4 = self.p4(p3)
            u = self.join(torch.cat([self.up(self.lat(p4)), p3], 1))
            a, b = self.h3(u), self.h4(p4)
            n = a.shape[0]
            return torch.cat([a.view(n, 3, 85, -1), b.view(n, 3, 85, -1)], 3).sigmoid()

    args = (torch.randn(1, 3, size, size),)
    return _export(Yolo(), args, ["x"], dynamo=dynamo), _feeds(["x"], args)


def shufflenet_v2(size: int = 224, dynamo: bool = False) -> Built:
    """ShuffleNetV2 x1.0 (torchvision's layout, written out: torchvision is not a test
    dependency) with random weights: units that split the channels in two (chunk), a
    depthwise branch, Concat and the channel shuffle of 2 groups as view -> transpose ->
    view."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def cbr(a: int, b: int, k: int = 1, s: int = 1, g: int = 1, relu: bool = True) -> Any:
        layers = [nn.Conv2d(a, b, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(b)]
        return nn.Sequential(*layers, *([nn.ReLU()] if relu else []))

    def shuffle(x: Any) -> Any:
        n, c, h, w = x.shape
        return x.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)

    class Unit(nn.Module):
        def __init__(self, a: int, b: int, stride: int) -> None:
            super().__init__()
            self.stride, h = stride, b // 2
            if stride > 1:
                self.left = nn.Sequential(cbr(a, a, 3, stride, a, False), cbr(a, h))
            mid = a if stride > 1 else h
            self.right = nn.Sequential(cbr(mid, h), cbr(h, h, 3, stride, h, False), cbr(h, h))

        def forward(self, x: Any) -> Any:
            if self.stride == 1:
                x1, x2 = x.chunk(2, dim=1)
                return shuffle(torch.cat((x1, self.right(x2)), 1))
            return shuffle(torch.cat((self.left(x), self.right(x)), 1))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            widths, repeats = (24, 116, 232, 464), (4, 8, 4)
            self.stem = nn.Sequential(cbr(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1))
            units: list[nn.Module] = []
            a = widths[0]
            for b, r in zip(widths[1:], repeats):
                units += [Unit(a, b, 2), *(Unit(b, b, 1) for _ in range(r - 1))]
                a = b
            self.units = nn.Sequential(*units)
            self.head = cbr(a, 1024)
            self.fc = nn.Linear(1024, 1000)

        def forward(self, x: Any) -> Any:
            return self.fc(self.head(self.units(self.stem(x))).mean([2, 3]))

    net = Net()
    _trained_norms(net)
    args = (torch.randn(1, 3, size, size),)
    return _export(net, args, ["x"], dynamo=dynamo), _feeds(["x"], args)


def shufflenet_v1_weights() -> Built:
    """The onnx wheel's light ShuffleNet (v1: grouped 1x1 convs of 4 groups, the channel
    shuffle as Reshape -> Transpose -> Reshape) with its ConstantOfShape weights made
    random initializers: the graph a real export has, where the light model's weights are
    known only when it runs."""
    from onnxviz.runtime.conformance import light_dir, light_inputs

    model = onnx.load(os.path.join(light_dir(), "light_shufflenet.onnx"))
    rng = np.random.default_rng(0)
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    nodes = []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape":
            nodes.append(node)
            continue
        name = node.output[0]
        value = rng.standard_normal(tuple(int(d) for d in shapes[node.input[0]])) * 0.1
        if name.endswith(("_riv_0", "_s_0")):  # BatchNorm variances and scales
            value = np.abs(value) + 0.5
        model.graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), name))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model, light_inputs(model)


def efficientnet(size: int = 224, dynamo: bool = False, width: float = 1.0) -> Built:
    """EfficientNet-B0's layout (Tan & Le 2019; its block table, random weights): a 3x3
    stem, MBConv blocks (1x1 expand, depthwise 3x3 or 5x5, a squeeze-excite gate of two
    1x1 convs, SiLU and Sigmoid, a 1x1 projection, a residual add where the shape keeps),
    SiLU after every expand and depthwise conv (torch's nn.SiLU: Sigmoid and Mul nodes),
    a 1x1 head to 1280 channels, a mean pool and a classifier.  ``width`` scales the
    channels (B0: 1.0)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def ch(c: int) -> int:
        return max(8, int(c * width + 4) // 8 * 8)

    class SE(nn.Module):
        def __init__(self, c: int, r: int) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(c, r, 1), nn.Conv2d(r, c, 1)

        def forward(self, x: Any) -> Any:
            g = x.mean((2, 3), keepdim=True)
            return x * torch.sigmoid(self.b(nn.functional.silu(self.a(g))))

    class MBConv(nn.Module):
        def __init__(self, a: int, b: int, k: int, s: int, e: int) -> None:
            super().__init__()
            mid = a * e
            layers: list[nn.Module] = []
            if e != 1:
                layers += [nn.Conv2d(a, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU()]
            layers += [
                nn.Conv2d(mid, mid, k, s, k // 2, groups=mid, bias=False),
                nn.BatchNorm2d(mid),
                nn.SiLU(),
                SE(mid, max(1, a // 4)),
                nn.Conv2d(mid, b, 1, bias=False),
                nn.BatchNorm2d(b),
            ]
            self.f = nn.Sequential(*layers)
            self.res = s == 1 and a == b

        def forward(self, x: Any) -> Any:
            y = self.f(x)
            return x + y if self.res else y

    # (expansion, channels, repeats, stride, kernel): B0's table
    table = [(1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3),
             (6, 112, 3, 1, 5), (6, 192, 4, 2, 5), (6, 320, 1, 1, 3)]  # fmt: skip
    c = ch(32)
    layers: list[nn.Module] = [nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.SiLU()]
    for e, out, n, s, k in table:
        for i in range(n):
            layers.append(MBConv(c, ch(out), k, s if i == 0 else 1, e))
            c = ch(out)
    head = ch(1280)
    layers += [nn.Conv2d(c, head, 1, bias=False), nn.BatchNorm2d(head), nn.SiLU(),
               nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(head, 1000)]  # fmt: skip
    net = nn.Sequential(*layers).eval()
    _trained_norms(net, scales=True)
    args = (torch.randn(1, 3, size, size),)
    return _export(net, args, ["image"], dynamo=dynamo), _feeds(["image"], args)


def unet_convtranspose(size: int = 128, base: int = 16) -> Built:
    """A segmentation UNet whose decoder upsamples by ConvTranspose2d (k2 s2), Conv ->
    BatchNorm -> ReLU blocks, skips concatenated, TorchScript."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def block(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        )  # fmt: skip

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.e1, self.e2, self.e3 = (
                block(3, base),
                block(base, base * 2),
                block(base * 2, base * 4),
            )
            self.pool = nn.MaxPool2d(2)
            self.u2, self.d2 = (
                nn.ConvTranspose2d(base * 4, base * 2, 2, stride=2),
                block(base * 4, base * 2),
            )
            self.u1, self.d1 = (
                nn.ConvTranspose2d(base * 2, base, 2, stride=2),
                block(base * 2, base),
            )
            self.out = nn.Conv2d(base, 2, 1)

        def forward(self, x: Any) -> Any:
            a = self.e1(x)
            b = self.e2(self.pool(a))
            c = self.e3(self.pool(b))
            d = self.d2(torch.cat([self.u2(c), b], 1))
            return self.out(self.d1(torch.cat([self.u1(d), a], 1)))

    args = (torch.randn(1, 3, size, size),)
    return _export(UNet(), args, ["x"], dynamo=False), _feeds(["x"], args)


def unet_bilinear(size: int = 128, base: int = 16, align_corners: bool = True) -> Built:
    """The segmentation UNet most code bases copy (double 3x3 conv + BatchNorm + ReLU
    blocks, max-pool down, ``nn.Upsample(mode="bilinear")`` up, concat skips, a 1x1
    head), 4 levels from ``base`` channels, TorchScript."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def double(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
        )

    class Up(nn.Module):
        def __init__(self, cin: int, cout: int) -> None:
            super().__init__()
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=align_corners)
            self.conv = double(cin, cout)

        def forward(self, x: Any, skip: Any) -> Any:
            return self.conv(torch.cat([skip, self.up(x)], 1))

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            b = base
            self.inc, self.d1 = double(3, b), double(b, 2 * b)
            self.d2, self.d3 = double(2 * b, 4 * b), double(4 * b, 4 * b)
            self.u1, self.u2, self.u3 = Up(8 * b, 2 * b), Up(4 * b, b), Up(2 * b, b)
            self.head = nn.Conv2d(b, 2, 1)

        def forward(self, x: Any) -> Any:
            pool = nn.functional.max_pool2d
            x1 = self.inc(x)
            x2 = self.d1(pool(x1, 2))
            x3 = self.d2(pool(x2, 2))
            x4 = self.d3(pool(x3, 2))
            return self.head(self.u3(self.u2(self.u1(x4, x3), x2), x1))

    args = (torch.randn(1, 3, size, size),)
    return _export(UNet(), args, ["image"], dynamo=False), _feeds(["image"], args)


def vit_tiny(
    image: int = 224, patch: int = 16, dim: int = 192, depth: int = 12, heads: int = 3
) -> Built:
    import torch
    from torch import nn

    torch.manual_seed(0)
    tokens = (image // patch) ** 2 + 1

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.ln2 = nn.LayerNorm(dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            q, k, v = (
                self.qkv(self.ln1(x)).reshape(b, t, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
            )
            att = ((q @ k.transpose(-1, -2)) * (dim // heads) ** -0.5).softmax(-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, dim))
            return x + self.mlp(self.ln2(x))

    class ViT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, dim, patch, patch)
            self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
            self.blocks = nn.Sequential(*(Block() for _ in range(depth)))
            self.ln = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, 1000)

        def forward(self, x: Any) -> Any:
            p = self.patch(x).flatten(2).transpose(1, 2)
            p = torch.cat([self.cls.expand(p.shape[0], -1, -1), p], 1) + self.pos
            return self.head(self.ln(self.blocks(p))[:, 0])

    args = (torch.randn(1, 3, image, image),)
    return _export(ViT(), args, ["image"], dynamo=True), _feeds(["image"], args)


def bert_tiny(seq: int = 128) -> Built:
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_models import bert_torch

    return bert_torch(layers=2, hidden=128, heads=2, ffn=512, seq=seq)


def resnet18_w32() -> Built:
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(),
                nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                nn.BatchNorm2d(cout),
            )
            self.short: nn.Module = nn.Identity()
            if stride != 1 or cin != cout:
                self.short = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: Any) -> Any:
            return torch.relu(self.body(x) + self.short(x))

    widths = [32, 64, 128, 256]
    layers: list[nn.Module] = [
        nn.Conv2d(3, 32, 7, 2, 3, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 32
    for i, w in enumerate(widths):
        layers += [Basic(cin, w, 1 if i == 0 else 2), Basic(w, w, 1)]
        cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    net = nn.Sequential(*layers)
    _trained_norms(net)
    args = (torch.randn(1, 3, 224, 224),)
    return _export(net, args, ["image"], dynamo=True), _feeds(["image"], args)


def qdq_static(
    base: Callable[[], Built] | None = None, unsigned: bool = False, per_channel: bool = True
) -> Built:
    """onnxruntime.quantization's static per-channel QDQ form of ``base`` (ResNet-18 w32):
    its default int8 activations and weights, or with ``unsigned`` uint8 activations
    (U8S8, onnxruntime's fast integer kernels on x86); ``per_channel=False``: one weight
    scale per tensor, quantize_static's own default."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    model, feeds = (base or resnet18_w32)()

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([feeds])

        def get_next(self) -> Any:
            return next(self.items, None)

    return _rewritten(
        model,
        lambda src, dst: quantize_static(
            src,
            dst,
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel,
            activation_type=QuantType.QUInt8 if unsigned else QuantType.QInt8,
        ),
    ), feeds


def _rewritten(model: onnx.ModelProto, tool: Callable[[str, str], Any]) -> onnx.ModelProto:
    """``model`` after a tool that reads a model file and writes another (onnxruntime's
    quantizers and transformers optimizer), its warnings silenced."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in.onnx"), os.path.join(tmp, "out.onnx")
        onnx.save(model, src)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tool(src, dst)
        return onnx.load(dst)


def dynamic(base: Callable[[], Built]) -> Built:
    """onnxruntime.quantization's ``quantize_dynamic`` form of ``base`` with its defaults
    (int8 weights per tensor; each MatMul becomes DynamicQuantizeLinear -> MatMulInteger
    -> Cast -> Mul -> Add, an LSTM DynamicQuantizeLSTM): the int8 recipe users apply to
    transformers and recurrent models."""
    from onnxruntime.quantization import quantize_dynamic

    model, feeds = base()
    return _rewritten(model, quantize_dynamic), feeds


def bell_weights(base: Callable[[], Built], std: float = 0.02) -> Built:
    """``base`` with its matrices (float initializers of two or more axes) drawn from
    N(0, std), as Hugging Face models initialize theirs (``initializer_range`` 0.02) and
    trained weights are shaped: a bell with a few large values, where torch's default
    Linear draws uniformly.  The quantized products see the codes such weights make."""
    model, feeds = base()
    rng = np.random.default_rng(0)
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT and len(init.dims) >= 2:
            values = rng.normal(0.0, std, tuple(init.dims)).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(values, init.name))
    return model, feeds


def _torch_bert_base() -> Built:
    from torch_models import TORCH_MODELS

    return TORCH_MODELS["bert_torch"][1]()


def genai_llama_int4() -> Built:
    base = os.path.join(ROOT, "tests", "data", "exporters", "ort_genai_llama_int4")
    return onnx.load(base + ".onnx"), dict(np.load(base + ".npz"))


def _genai_python() -> str:
    """The Python that runs onnxruntime-genai's builder: ``$ONNXVIZ_GENAI_PYTHON``, else the
    benchmark-time environment ``scripts/setup.sh genai`` makes (.venv-genai: the builder
    imports a transformers newer than optimum-onnx lets this one have), else this one."""
    import sys

    override = os.environ.get("ONNXVIZ_GENAI_PYTHON")
    if override:
        return override
    bin_dir, exe = ("Scripts", "python.exe") if os.name == "nt" else ("bin", "python")
    venv = os.path.join(ROOT, ".venv-genai", bin_dir, exe)
    return venv if os.path.exists(venv) else sys.executable


def _genai_export(name: str, config: dict[str, int]) -> str:
    """The path of onnxruntime-genai's int4 CPU export of a random Llama of ``config``,
    built once into the temporary folder (the builder's own command line).  Both the
    checkpoint (`_write_llama`, seeded) and the export are written by `_genai_python`, so
    the builder reads a checkpoint of its own transformers."""
    import json
    import shutil
    import subprocess
    import sys

    folder = os.path.join(tempfile.gettempdir(), "onnxviz_families", name)
    path = os.path.join(folder, "model.onnx")
    if os.path.exists(path):
        return path
    python = _genai_python()
    hint = "" if python != sys.executable else "; `bash scripts/setup.sh genai` makes one"
    if shutil.which(python) is None:
        raise ImportError(python, name=f"a Python for onnxruntime-genai's builder ({python})")
    if python == sys.executable:
        import importlib.util

        if importlib.util.find_spec("onnxruntime_genai") is None:  # the table says so, goes on
            raise ImportError("builder", name=f"onnxruntime-genai's builder{hint}")
    part = folder + ".part"  # the export lands in `folder` only whole
    shutil.rmtree(part, ignore_errors=True)
    writer = (
        "import sys; sys.path.append(sys.argv[1]); import family_models; "
        "family_models._write_llama(sys.argv[2], sys.argv[3])"
    )
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "hf")
        steps = [
            [python, "-c", writer, here, src, json.dumps(config)],
            [
                python, "-m", "onnxruntime_genai.models.builder", "-i", src, "-o", part,
                "-p", "int4", "-e", "cpu", "-c", os.path.join(tmp, "cache"),
            ],
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # ours, not theirs
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, cwd=tmp, env=env)
            if done.returncode != 0:
                # A builder that does not run here (one newer than the transformers beside
                # it: an ImportError inside it): the table says why and goes on.
                last = (done.stderr.strip().splitlines() or ["no message"])[-1]
                why = f"a working onnxruntime-genai builder ({last[:120]}{hint})"
                shutil.rmtree(part, ignore_errors=True)
                raise ImportError(last, name=why)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(part, folder)
    return path


def _write_llama(folder: str, config_json: str) -> None:
    """A random ``LlamaForCausalLM`` of the JSON ``config_json`` (torch seeded 0) and a
    tokenizer, saved into ``folder``: run by the builder's Python (`_genai_export`)."""
    import json

    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**json.loads(config_json))
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder)
    _write_tokenizer(folder)


def _write_tokenizer(folder: str) -> None:
    """A word-level tokenizer (the builder insists on finding one; a Llama's own would
    need sentencepiece)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(64)}, unk_token="w0"))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0").save_pretrained(folder)


def _generation_feeds(model: onnx.ModelProto, new: int, past: int, vocab: int) -> Built:
    """``model`` (optimum's text generation with a cache) with feeds for ``new`` tokens
    (ids below ``vocab``) after a cache of ``past``."""
    rng = np.random.default_rng(5)
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name.startswith("past"):
            shape = (1, dims[1], past, dims[3])
            feeds[vi.name] = (rng.standard_normal(shape) * 0.5).astype(np.float32)
        elif vi.name == "attention_mask":
            feeds[vi.name] = np.ones((1, past + new), np.int64)
        elif vi.name == "position_ids":
            feeds[vi.name] = np.arange(past, past + new, dtype=np.int64)[None]
        else:
            feeds[vi.name] = rng.integers(0, vocab, (1, new)).astype(np.int64)
    return model, feeds


def _optimum_export(name: str, task: str, build: Callable[[str], None]) -> onnx.ModelProto:
    """The model optimum exports for ``task`` from the Hugging Face model that ``build(src)``
    saves into the folder ``src`` (torch seeded 0 first), exported once and kept in the
    temporary folder under ``name``.  Needs optimum-onnx and transformers."""
    folder = os.path.join(tempfile.gettempdir(), "onnxviz_families", name)
    path = os.path.join(folder, "model.onnx")
    if not os.path.exists(path):
        import torch
        from optimum.exporters.onnx import main_export

        torch.manual_seed(0)
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "hf")
            build(src)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                main_export(src, folder, task=task, do_validation=False)
    return onnx.load(path)


def hf_gpt2(hidden: int, new: int, past: int) -> Built:
    """Hugging Face's GPT2LMHeadModel (2 layers, heads of 64, vocabulary 2048, random
    weights) as optimum exports it for text generation with a cache (TorchScript
    underneath): the 553-node graph with its shape arithmetic, HF's attention and NewGELU
    (x ** 3 as a Pow), ``new`` tokens after a cache of ``past``.  Needs optimum-onnx and
    transformers (benchmark-time tools); the export is kept in the temporary folder."""

    def build(src: str) -> None:
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(
            vocab_size=2048, n_embd=hidden, n_layer=2, n_head=max(1, hidden // 64), n_positions=256
        )
        GPT2LMHeadModel(config).save_pretrained(src)
        _write_tokenizer(src)

    model = _optimum_export(f"hf_gpt2_{hidden}", "text-generation-with-past", build)
    return _generation_feeds(model, new, past, 2048)


def hf_llama(hidden: int, new: int, past: int) -> Built:
    """Hugging Face's LlamaForCausalLM (4 layers, heads of 32, 2 key/value heads per 4
    query heads, vocabulary 1000, random weights) as optimum exports it for text
    generation with a cache: RMSNorm written out (Pow, ReduceMean, Add, Sqrt, Div, Mul),
    rotary positions computed in the graph, the grouped keys and values repeated by
    Expand, a SwiGLU MLP; ``new`` tokens after a cache of ``past``.  Needs optimum-onnx
    and transformers; the export is kept in the temporary folder."""
    heads = max(1, hidden // 32)

    def build(src: str) -> None:
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=1000, hidden_size=hidden, intermediate_size=hidden * 43 // 16,
            num_hidden_layers=4, num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2), max_position_embeddings=512,
        )  # fmt: skip
        LlamaForCausalLM(config).eval().save_pretrained(src)

    model = _optimum_export(f"hf_llama_{hidden}", "text-generation-with-past", build)
    return _generation_feeds(model, new, past, 1000)


def hf_mobilenet_v2(size: int) -> Built:
    """Hugging Face's MobileNetV2ForImageClassification (depth multiplier 0.5, random
    weights) as optimum exports it: TensorFlow's SAME padding written as a Pad before each
    of its 52 convs (``tf_padding``), ReLU6 as Clip; one ``size`` px image.  Needs
    optimum-onnx and transformers; the export is kept in the temporary folder."""

    def build(src: str) -> None:
        from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

        config = MobileNetV2Config(depth_multiplier=0.5, image_size=size, num_labels=10)
        MobileNetV2ForImageClassification(config).eval().save_pretrained(src)

    model = _optimum_export(f"hf_mobilenet_v2_{size}", "image-classification", build)
    x = np.random.default_rng(5).standard_normal((1, 3, size, size)).astype(np.float32)
    return model, {model.graph.input[0].name: x}


def transformers_optimized(base: Callable[[], Built], heads: int, hidden: int) -> Built:
    """``base`` (a BERT) through onnxruntime's transformers optimizer, as users deploy
    BERTs: com.microsoft Attention, SkipLayerNormalization and BiasGelu."""
    from onnxruntime.transformers import optimizer

    model, feeds = base()
    return _rewritten(
        model,
        lambda src, dst: optimizer.optimize_model(
            src, model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0
        ).save_model_to_file(dst),
    ), feeds


LLAMA_1K = {
    "vocab_size": 32000, "hidden_size": 1024, "intermediate_size": 2816,
    "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
}  # fmt: skip


def _decoder_feeds(
    model: onnx.ModelProto, config: dict[str, int], new: int, past: int
) -> dict[str, np.ndarray]:
    """Feeds of a genai decoder: ``new`` token ids after a cache of ``past`` (random)."""
    head = config["hidden_size"] // config["num_attention_heads"]  # the builder leaves it symbolic
    rng = np.random.default_rng(0)
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name == "input_ids":
            feeds[vi.name] = rng.integers(0, config["vocab_size"], (1, new)).astype(np.int64)
        elif vi.name == "attention_mask":
            feeds[vi.name] = np.ones((1, past + new), np.int64)
        elif vi.name.startswith("past_key_values"):
            shape = (1, config["num_key_value_heads"], past, head)
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            raise ValueError(f"unexpected decoder input {vi.name}")
    return feeds


LLAMA_2K = {
    **LLAMA_1K, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 8,
    "num_attention_heads": 32, "num_key_value_heads": 8,
}  # fmt: skip


def llama1k_int4(new: int, past: int) -> Built:
    model = onnx.load(_genai_export("llama1k_int4", LLAMA_1K))
    return model, _decoder_feeds(model, LLAMA_1K, new, past)


def llama2k_int4(new: int, past: int) -> Built:
    model = onnx.load(_genai_export("llama2k_int4", LLAMA_2K))
    return model, _decoder_feeds(model, LLAMA_2K, new, past)


FAMILY_MODELS: dict[str, tuple[str, Callable[[], Built]]] = {
    "mobilenetv3_small": ("MobileNetV3-small, torch dynamo", mobilenetv3_small),
    "gpt2_kv": ("GPT-2 (2 layers) with KV cache, TorchScript", gpt2_kv),
    "lstm_gru": ("LSTM + GRU, TorchScript", lstm_gru),
    "qdq_cnn": ("QDQ ResNet-18 w32 (onnxruntime.quantization)", qdq_static),
    "bert_tiny": ("BERT-tiny, TorchScript", bert_tiny),
    "dynamic_bert_tiny": (
        "BERT-tiny, TorchScript, quantize_dynamic",
        lambda: dynamic(bert_tiny),
    ),
    "vit_tiny": ("ViT-tiny, torch dynamo", vit_tiny),
    "unet_torch": ("small UNet, TorchScript", unet_torch),
    "diffusion_unet": ("diffusion UNet (GroupNorm, SiLU), 32 px, TorchScript", diffusion_unet),
    "efficientnet": ("EfficientNet-B0 layout (SiLU, SE), 224 px, TorchScript", efficientnet),
    "resnet18_w32": ("ResNet-18 (width 32), torch dynamo", resnet18_w32),
    "genai_llama_int4": ("onnxruntime-genai Llama int4 (tiny)", genai_llama_int4),
    "llama1k_int4_prompt": (
        "genai Llama int4 h1024x4, 64-token prompt",
        lambda: llama1k_int4(64, 0),
    ),
    "llama1k_int4_decode": (
        "genai Llama int4 h1024x4, decode after 64",
        lambda: llama1k_int4(1, 64),
    ),
    "llama2k_int4_prompt": (
        "genai Llama int4 h2048x8, 32-token prompt",
        lambda: llama2k_int4(32, 0),
    ),
    "llama2k_int4_decode": (
        "genai Llama int4 h2048x8, decode after 128",
        lambda: llama2k_int4(1, 128),
    ),
    "gpt2_kv_decode": (
        "GPT-2 (4 layers) decode step after 128, TorchScript",
        lambda: gpt2_kv(layers=4, past=128, new=1),
    ),
    "gpt2_kv_dynamo": (
        "GPT-2 (4 layers) 16 new after 128, torch dynamo",
        lambda: gpt2_kv(layers=4, past=128, new=16, dynamo=True),
    ),
}


# Other sizes of the same families, built by the same exporters (issue 21 is accepted on
# models of these families it has not seen): smaller models, where the cost per node and
# per call weighs more, and a few larger ones.  `bench_families.py --models variants`.
VARIANT_MODELS: dict[str, tuple[str, Callable[[], Built]]] = {
    "lstm_gru_seq1": ("LSTM+GRU h128, 1 step, batch 1", lambda: lstm_gru(1, 1, 64, 128)),
    "lstm_gru_seq8": ("LSTM+GRU h128, 8 steps, batch 1", lambda: lstm_gru(8, 1, 64, 128)),
    "lstm_gru_h64_seq100": (
        "LSTM+GRU h64, 100 steps, batch 1",
        lambda: lstm_gru(100, 1, 40, 64),
    ),
    "lstm_gru_h512": ("LSTM+GRU h512, 32 steps, batch 8", lambda: lstm_gru(32, 8, 256, 512)),
    "gpt2_small_decode": (
        "GPT-2 2x256 decode after 32, TorchScript",
        lambda: gpt2_kv(layers=2, hidden=256, heads=4, past=32, new=1),
    ),
    "gpt2_6x512_prompt": (
        "GPT-2 6x512 32 new after 64, TorchScript",
        lambda: gpt2_kv(layers=6, hidden=512, heads=8, past=64, new=32),
    ),
    "vit_96": ("ViT 4x128 on 96x96, torch dynamo", lambda: vit_tiny(96, 16, 128, 4, 2)),
    "vit_small": ("ViT 6x384 on 224x224, torch dynamo", lambda: vit_tiny(224, 16, 384, 6, 6)),
    "bert_tiny_seq32": ("BERT-tiny seq 32, TorchScript", lambda: bert_tiny(32)),
    "unet_64": ("UNet base 8, 2 levels, 64x64", lambda: unet_torch(64, 8, 2)),
    "unet_256": ("UNet base 32, 4 levels, 256x256", lambda: unet_torch(256, 32, 4)),
    "qdq_mobilenetv3": ("QDQ MobileNetV3-small (S8S8)", lambda: qdq_static(mobilenetv3_small)),
    "qdq_mobilenetv3_u8": (
        "QDQ MobileNetV3-small, uint8 activations",
        lambda: qdq_static(mobilenetv3_small, unsigned=True),
    ),
    "qdq_resnet18_u8": ("QDQ ResNet-18 w32, uint8 activations", lambda: qdq_static(unsigned=True)),
    "unet_bilinear": (
        "UNet, bilinear upsampling (align_corners), 128 px",
        unet_bilinear,
    ),
    "unet_bilinear_half_pixel": (
        "UNet, bilinear upsampling (half pixel), 128 px",
        lambda: unet_bilinear(align_corners=False),
    ),
    "mobilenetv3_large": (
        "MobileNetV3-large, torch dynamo",
        lambda: mobilenetv3_small(large=True),
    ),
    "mobilenetv3_large_ts": (
        "MobileNetV3-large, TorchScript",
        lambda: mobilenetv3_small(large=True, dynamo=False),
    ),
    "unet_convtranspose": (
        "UNet, ConvTranspose upsampling, 128 px, TorchScript",
        unet_convtranspose,
    ),
    "tcn": ("TCN, dilated causal Conv1d, 4 x 16 x 256, TorchScript", tcn),
    "convnext_ts": ("ConvNeXt (widths 48-192), 128 px, TorchScript", convnext),
    "yolo_ts": ("YOLOv5-style detector (C3, SPPF, SiLU), 160 px, TorchScript", yolo),
    "shufflenet_v1_weights": (
        "ShuffleNet v1 (light graph, random initializers)",
        shufflenet_v1_weights,
    ),
    "shufflenet_v2_ts": ("ShuffleNetV2 x1.0, 224 px, TorchScript", shufflenet_v2),
    "shufflenet_v2_dynamo": (
        "ShuffleNetV2 x1.0, 224 px, torch dynamo",
        lambda: shufflenet_v2(dynamo=True),
    ),
    "efficientnet_dynamo": (
        "EfficientNet-B0 layout, 224 px, torch dynamo",
        lambda: efficientnet(dynamo=True),
    ),
    "efficientnet_lite_160": (
        "EfficientNet-B0 layout at width 0.5, 160 px, TorchScript",
        lambda: efficientnet(160, width=0.5),
    ),
    "qdq_efficientnet_u8": (
        "QDQ EfficientNet-B0 layout, uint8 activations",
        lambda: qdq_static(efficientnet, unsigned=True),
    ),
    "yolo_320_dynamo": (
        "YOLOv5-style detector, 320 px, torch dynamo",
        lambda: yolo(320, dynamo=True),
    ),
    "convnext_dynamo": (
        "ConvNeXt (widths 48-192), 128 px, torch dynamo",
        lambda: convnext(dynamo=True),
    ),
    "elman_rnn_dynamo": ("Elman RNN 2x128, 50 steps, written out by torch dynamo", elman_rnn),
    "lstm_cell_loop": (
        "LSTMCell 128 stepped 32 times, batch 4, torch dynamo",
        lambda: rnn_cells("lstm"),
    ),
    "gru_cell_loop": (
        "GRUCell 128 stepped 32 times, batch 4, torch dynamo",
        lambda: rnn_cells("gru"),
    ),
    "gru_cell_loop_ts": (
        "GRUCell 128 stepped 32 times, batch 1, TorchScript",
        lambda: rnn_cells("gru", batch=1, dynamo=False),
    ),
    "scripted_loop": (
        "RNN cell in a scripted loop, 64 steps, TorchScript Loop",
        scripted_loop,
    ),
    "fpn": ("ResNet-style encoder + feature pyramid, 224 px, TorchScript", fpn),
    "diffusion_unet_64": (
        "diffusion UNet, 64 px, TorchScript",
        lambda: diffusion_unet(64),
    ),
    "diffusion_unet_dynamo": (
        "diffusion UNet, 32 px, torch dynamo",
        lambda: diffusion_unet(dynamo=True),
    ),
    "qdq_resnet18_tensor": (
        "QDQ ResNet-18 w32, per-tensor weights (defaults)",
        lambda: qdq_static(per_channel=False),
    ),
    "qdq_mobilenetv3_tensor": (
        "QDQ MobileNetV3-small, per-tensor weights (defaults)",
        lambda: qdq_static(mobilenetv3_small, per_channel=False),
    ),
    "qdq_bert_tiny_u8": (
        "QDQ BERT-tiny, uint8 activations",
        lambda: qdq_static(bert_tiny, unsigned=True),
    ),
    "qdq_bert_base_u8": (
        "QDQ BERT-base (PyTorch export), uint8 activations",
        lambda: qdq_static(_torch_bert_base, unsigned=True),
    ),
    "dynamic_gpt2_kv": (
        "GPT-2 (2 layers) with KV cache, quantize_dynamic",
        lambda: dynamic(gpt2_kv),
    ),
    "dynamic_lstm_gru": ("LSTM + GRU, TorchScript, quantize_dynamic", lambda: dynamic(lstm_gru)),
    "dynamic_bert_base": (
        "BERT-base (PyTorch export), quantize_dynamic",
        lambda: dynamic(_torch_bert_base),
    ),
    "dynamic_bert_tiny_bell": (
        "BERT-tiny, quantize_dynamic, N(0, 0.02) weights",
        lambda: dynamic(lambda: bell_weights(bert_tiny)),
    ),
    "dynamic_bert_base_bell": (
        "BERT-base, quantize_dynamic, N(0, 0.02) weights",
        lambda: dynamic(lambda: bell_weights(_torch_bert_base)),
    ),
    "qdq_resnet18_u8_bell": (
        "QDQ ResNet-18 w32, uint8 activations, N(0, 0.02) weights",
        lambda: qdq_static(lambda: bell_weights(resnet18_w32), unsigned=True),
    ),
    "qdq_resnet18_bell": (
        "QDQ ResNet-18 w32, N(0, 0.02) weights",
        lambda: qdq_static(lambda: bell_weights(resnet18_w32)),
    ),
    "hf_gpt2_128_decode": (
        "HF GPT-2 2x128 (optimum), decode after 32",
        lambda: hf_gpt2(128, 1, 32),
    ),
    "hf_gpt2_256_prompt": (
        "HF GPT-2 2x256 (optimum), 16-token prompt",
        lambda: hf_gpt2(256, 16, 0),
    ),
    "hf_gpt2_768_decode": (
        "HF GPT-2 2x768 (optimum), decode after 32",
        lambda: hf_gpt2(768, 1, 32),
    ),
    "hf_llama_256_decode": (
        "HF Llama 4x256 GQA (optimum), decode after 32",
        lambda: hf_llama(256, 1, 32),
    ),
    "hf_llama_256_prompt": (
        "HF Llama 4x256 GQA (optimum), 16-token prompt",
        lambda: hf_llama(256, 16, 0),
    ),
    "hf_llama_512_decode": (
        "HF Llama 4x512 GQA (optimum), decode after 128",
        lambda: hf_llama(512, 1, 128),
    ),
    "hf_mobilenet_v2": (
        "HF MobileNetV2 x0.5 (optimum, TF padding), 224 px",
        lambda: hf_mobilenet_v2(224),
    ),
    "qdq_hf_mobilenet_v2_u8": (
        "QDQ HF MobileNetV2 x0.5, uint8 activations",
        lambda: qdq_static(lambda: hf_mobilenet_v2(224), unsigned=True),
    ),
    "bert_tiny_optimized": (
        "BERT-tiny seq 32, onnxruntime transformers optimizer",
        lambda: transformers_optimized(lambda: bert_tiny(32), 2, 128),
    ),
    "dynamic_gpt2_kv_bell": (
        "GPT-2 (2 layers) KV cache, quantize_dynamic, N(0, 0.02) weights",
        lambda: dynamic(lambda: bell_weights(gpt2_kv)),
    ),
}
