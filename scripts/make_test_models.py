"""Regenerate the real-world exporter corpus in tests/data/exporters/.

Each model is small and random-weighted, written by the tool users use, so that the
validator and the interpreter are tested on what mainstream exporters really write
(duplicate opset entries, loose value_info, contrib ops, ...).  The exporters are
test-time tools only: the committed files make the tests independent of them.  Each file
gets its inputs (``<name>.npz``) and a line in ``manifest.json`` with the exporter and its
version; a tool that is not installed is skipped with a note.

    .venv/bin/python scripts/make_test_models.py [NAME ...]
    .venv/bin/python scripts/make_test_models.py --exports [NAME ...]

``--exports`` writes the other set, tests/data/exports/: the models the unit tests once
exported at test time (scripts/exports_for_tests.py builds them; torch and scikit-learn +
skl2onnx), with the exporter's own results, so that the test command needs neither.

Needs: torch (CPU), onnxscript, scikit-learn + skl2onnx + pandas, onnxruntime
(quantization), onnxslim / onnxsim, transformers + optimum-onnx, onnxruntime-genai (each
optional).  optimum-onnx 0.1 wants transformers 4.x and onnxruntime-genai 0.18 wants 5.x:
make the optimum models first, then upgrade transformers and make the genai ones.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

OUT = os.path.join(os.path.dirname(__file__), os.pardir, "tests", "data", "exporters")
Made = tuple[onnx.ModelProto, dict[str, np.ndarray]]


def version(pkg: str) -> str:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# -- torch ------------------------------------------------------------------------------
def _torch_export(module: Any, args: tuple[Any, ...], names: list[str], dynamo: bool) -> Any:
    import torch

    module.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if dynamo:
            prog = torch.onnx.export(module, args, dynamo=True, input_names=names)
            buf = io.BytesIO()
            prog.save(buf) if hasattr(prog, "save") else None
            return prog.model_proto
        buf = io.BytesIO()
        torch.onnx.export(module, args, buf, dynamo=False, opset_version=17, input_names=names)
        return onnx.load_from_string(buf.getvalue())


def _torch_modules() -> dict[str, Callable[[], tuple[Any, tuple[Any, ...], list[str]]]]:
    import torch
    import torch.nn.functional as fn
    from torch import nn

    torch.manual_seed(0)
    torch.backends.mha.set_fastpath_enabled(False)

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.short: nn.Module = nn.Identity()
            if stride != 1 or cin != cout:
                self.short = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: Any) -> Any:
            y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
            return torch.relu(y + self.short(x))

    def cnn() -> Any:
        """A ResNet-18 layout at width 8: BatchNorm folded, Conv -> Add -> Relu."""
        w = 8
        layers: list[nn.Module] = [
            nn.Conv2d(3, w, 7, 2, 3, bias=False),
            nn.BatchNorm2d(w),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        ]
        cin = w
        for c, stride in [(w, 1), (2 * w, 2), (4 * w, 2)]:
            layers += [Basic(cin, c, stride), Basic(c, c, 1)]
            cin = c
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
        net = nn.Sequential(*layers)
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                with torch.no_grad():
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
        return net, (torch.randn(1, 3, 112, 112),), ["image"]

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(50, 32)
            layer = nn.TransformerEncoderLayer(32, 4, 64, 0.0, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(32, 3)

        def forward(self, ids: Any, mask: Any) -> Any:
            return self.head(self.enc(self.emb(ids), src_key_padding_mask=mask))

    def transformer() -> Any:
        mask = torch.zeros(2, 7, dtype=torch.bool)
        mask[1, 5:] = True
        return Encoder(), (torch.randint(0, 50, (2, 7)), mask), ["ids", "mask"]

    class Decoder(nn.Module):
        """GPT-2 style blocks with a KV cache in and out."""

        def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4) -> None:
            super().__init__()
            self.emb, self.pos, self.heads = nn.Embedding(vocab, dim), nn.Embedding(32, dim), heads
            self.ln1, self.qkv, self.proj = (
                nn.LayerNorm(dim),
                nn.Linear(dim, 3 * dim),
                nn.Linear(dim, dim),
            )
            self.ln2, self.fc, self.out = (
                nn.LayerNorm(dim),
                nn.Linear(dim, 4 * dim),
                nn.Linear(4 * dim, dim),
            )
            self.lm = nn.Linear(dim, vocab, bias=False)

        def forward(self, ids: Any, past_k: Any, past_v: Any) -> Any:
            b, t = ids.shape
            p = past_k.shape[2]
            x = self.emb(ids) + self.pos(torch.arange(p, p + t).unsqueeze(0))
            q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], -1)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            k, v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
            a = fn.scaled_dot_product_attention(q, k, v)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
            x = x + self.out(fn.gelu(self.fc(self.ln2(x))))
            return self.lm(x), k, v

    def decoder() -> Any:
        args = (torch.randint(0, 64, (1, 3)), torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8))
        return Decoder(), args, ["input_ids", "past_key", "past_value"]

    class Branchy(nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.cond(x.sum() > 0, lambda t: t * 2.0, lambda t: t - 1.0, (x,))

    def control_flow() -> Any:
        return Branchy(), (torch.randn(3, 4),), ["x"]

    class Recurrent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(8, 16, batch_first=True, bidirectional=True)
            self.gru = nn.GRU(32, 12, batch_first=True)
            self.head = nn.Linear(12, 4)

        def forward(self, x: Any) -> Any:
            y, _ = self.lstm(x)
            z, _ = self.gru(y)
            return self.head(z)

    def recurrent() -> Any:
        return Recurrent(), (torch.randn(2, 9, 8),), ["x"]

    return {
        "cnn": cnn,
        "transformer": transformer,
        "decoder_kv": decoder,
        "control_flow": control_flow,
        "recurrent": recurrent,
    }


def torch_models() -> dict[str, Callable[[], Made]]:
    out: dict[str, Callable[[], Made]] = {}
    for name, make in _torch_modules().items():
        for dynamo in (True, False):
            if name == "control_flow" and not dynamo:
                continue  # torch.cond exports through dynamo only

            def build(make: Any = make, dynamo: bool = dynamo) -> Made:
                module, args, names = make()
                model = _torch_export(module, args, names, dynamo)
                feeds = {n: a.numpy() for n, a in zip(names, args)}
                return model, feeds

            out[f"torch_{'dynamo' if dynamo else 'torchscript'}_{name}"] = build
    return out


# -- scikit-learn ----------------------------------------------------------------------
def sklearn_models() -> dict[str, Callable[[], Made]]:
    def scaler_logreg() -> Made:
        from skl2onnx import to_onnx
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        rng = np.random.default_rng(0)
        x = rng.standard_normal((60, 4)).astype(np.float32)
        y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
        pipe = make_pipeline(StandardScaler(), LogisticRegression()).fit(x, y)
        return to_onnx(pipe, x[:2], target_opset=17), {"X": x[:5]}

    def gbr() -> Made:
        from skl2onnx import to_onnx
        from sklearn.ensemble import GradientBoostingRegressor

        rng = np.random.default_rng(1)
        x = rng.standard_normal((80, 5)).astype(np.float32)
        model = GradientBoostingRegressor(n_estimators=8, max_depth=3).fit(x, x[:, 0] * 2)
        return to_onnx(model, x[:2], target_opset=17), {"X": x[:5]}

    def label_encoder() -> Made:
        from skl2onnx import convert_sklearn
        from skl2onnx.common.data_types import StringTensorType
        from sklearn.preprocessing import LabelEncoder

        enc = LabelEncoder().fit(["cat", "dog", "emu", "yak"])
        model = convert_sklearn(
            enc, initial_types=[("label", StringTensorType([None]))], target_opset=17
        )
        return model, {"label": np.array(["dog", "yak", "cat"], dtype=object)}

    def string_features() -> Made:
        from skl2onnx import convert_sklearn
        from skl2onnx.common.data_types import FloatTensorType, StringTensorType
        from sklearn.compose import ColumnTransformer
        from sklearn.ensemble import RandomForestClassifier
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import OneHotEncoder, StandardScaler

        rng = np.random.default_rng(2)
        import pandas as pd

        frame = pd.DataFrame(
            {
                "city": rng.choice(["oslo", "lima", "pune"], 60),
                "size": rng.standard_normal(60).astype(np.float32),
            }
        )
        y = rng.integers(0, 3, 60)
        pipe = Pipeline(
            [
                (
                    "prep",
                    ColumnTransformer(
                        [("city", OneHotEncoder(), ["city"]), ("size", StandardScaler(), ["size"])]
                    ),
                ),
                ("clf", RandomForestClassifier(n_estimators=4, max_depth=3, random_state=0)),
            ]
        ).fit(frame, y)
        model = convert_sklearn(
            pipe,
            initial_types=[
                ("city", StringTensorType([None, 1])),
                ("size", FloatTensorType([None, 1])),
            ],
            target_opset={"": 17, "ai.onnx.ml": 3},
        )
        feeds = {
            "city": np.array([["oslo"], ["pune"]], dtype=object),
            "size": np.array([[0.3], [-1.0]], np.float32),
        }
        return model, feeds  # ZipMap on the probabilities (skl2onnx's default)

    return {
        "skl2onnx_scaler_logreg_zipmap": scaler_logreg,
        "skl2onnx_gradient_boosting": gbr,
        "skl2onnx_label_encoder_strings": label_encoder,
        "skl2onnx_string_features_forest": string_features,
    }


# -- onnxruntime.quantization, onnxslim, onnxsim --------------------------------------------
def _tmp_model(model: onnx.ModelProto, folder: str, name: str) -> str:
    path = os.path.join(folder, name)
    onnx.save(model, path)
    return path


def derived_models() -> dict[str, Callable[[], Made]]:
    def qdq_static() -> Made:
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_static,
        )

        model, feeds = torch_models()["torch_torchscript_cnn"]()

        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                rng = np.random.default_rng(3)
                self.items = iter(
                    [
                        {"image": rng.standard_normal((1, 3, 112, 112)).astype(np.float32)}
                        for _ in range(4)
                    ]
                )

            def get_next(self) -> Any:
                return next(self.items, None)

        with tempfile.TemporaryDirectory() as tmp:
            src = _tmp_model(model, tmp, "f32.onnx")
            dst = os.path.join(tmp, "qdq.onnx")
            quantize_static(
                src,
                dst,
                Reader(),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
            )
            return onnx.load(dst), feeds

    def dynamic() -> Made:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        model, feeds = torch_models()["torch_torchscript_transformer"]()
        with tempfile.TemporaryDirectory() as tmp:
            src = _tmp_model(model, tmp, "f32.onnx")
            dst = os.path.join(tmp, "int8.onnx")
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
            return onnx.load(dst), feeds

    def slim() -> Made:
        import onnxslim

        model, feeds = torch_models()["torch_dynamo_transformer"]()
        return onnxslim.slim(model), feeds

    def fused_bert(multi_head: bool) -> Made:
        """optimum's BERT through onnxruntime's transformer optimizer: Attention or
        MultiHeadAttention, EmbedLayerNormalization, SkipLayerNormalization, BiasGelu."""
        from onnxruntime.transformers.fusion_options import FusionOptions
        from onnxruntime.transformers.optimizer import optimize_model

        src = os.path.join(OUT, "optimum_bert.onnx")
        with np.load(os.path.join(OUT, "optimum_bert.npz")) as data:
            feeds = {k: data[k] for k in data.files}
        options = FusionOptions("bert")
        options.use_multi_head_attention = multi_head
        fused = optimize_model(
            src, model_type="bert", num_heads=4, hidden_size=32,
            optimization_options=options, opt_level=0,
        )  # fmt: skip
        model = fused.model
        # the optimizer's own save adds the contrib domain; the model in memory lacks it
        if not any(o.domain == "com.microsoft" for o in model.opset_import):
            model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
        return model, feeds

    def sim() -> Made:
        import onnxsim

        model, feeds = torch_models()["torch_torchscript_cnn"]()
        simplified, ok = onnxsim.simplify(model)
        assert ok
        return simplified, feeds

    return {
        "ort_transformers_bert_attention": lambda: fused_bert(False),
        "ort_transformers_bert_mha": lambda: fused_bert(True),
        "ort_quantization_qdq_per_channel_cnn": qdq_static,
        "ort_quantization_dynamic_transformer": dynamic,
        "onnxslim_transformer": slim,
        "onnxsim_cnn": sim,
    }


# -- Hugging Face exporters (optimum, onnxruntime-genai) -------------------------------------
def hf_models() -> dict[str, Callable[[], Made]]:
    def optimum_export(kind: str) -> Made:
        from optimum.exporters.onnx import main_export
        from transformers import AutoConfig, AutoModel, BertConfig, GPT2Config

        config: Any
        if kind == "bert":
            config = BertConfig(
                vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64, max_position_embeddings=32,
            )  # fmt: skip
            task = "feature-extraction"
        else:
            config = GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=32)
            task = "text-generation-with-past"
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = os.path.join(tmp, "hf"), os.path.join(tmp, "onnx")
            if kind == "gpt2":
                from transformers import GPT2LMHeadModel

                GPT2LMHeadModel(config).save_pretrained(src)
            else:
                AutoModel.from_config(config).save_pretrained(src)
            AutoConfig.from_pretrained(src)
            _write_tokenizer(src)
            main_export(src, dst, task=task, no_post_process=False, do_validation=False)
            model = onnx.load(os.path.join(dst, "model.onnx"))
        return model, _hf_feeds(model)

    def genai(precision: str, family: str = "llama", past: int = 0) -> Made:
        import transformers

        # Every family: 4 heads of 16 over 2 KV heads (what _hf_feeds assumes).
        size = {
            "vocab_size": 64, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 64,
        }  # fmt: skip
        if family == "llama":
            config: Any = transformers.LlamaConfig(**size)
            cls: Any = transformers.LlamaForCausalLM
        elif family == "phi3":
            # packed qkv and gate_up projections (onnxruntime needs the rotated half of a
            # head to be a multiple of 8: with heads of 16, all of it is rotated)
            config = transformers.Phi3Config(
                **size, pad_token_id=0, original_max_position_embeddings=64
            )
            cls = transformers.Phi3ForCausalLM
        else:  # qwen2: q/k/v biases; tied embeddings (int4: GatherBlockQuantized)
            config = transformers.Qwen2Config(**size, tie_word_embeddings=True)
            cls = transformers.Qwen2ForCausalLM
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = os.path.join(tmp, "hf"), os.path.join(tmp, "out")
            cls(config).save_pretrained(src)
            _write_tokenizer(src)
            # The builder's own command line (its Python entry needs parsed options).
            import subprocess

            subprocess.run(
                [
                    sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", src,
                    "-o", dst, "-p", precision, "-e", "cpu", "-c", os.path.join(tmp, "cache"),
                ],
                check=True,
                capture_output=True,
            )  # fmt: skip
            model = onnx.load(os.path.join(dst, "model.onnx"))
        return model, _hf_feeds(model, past)

    return {
        "optimum_bert": lambda: optimum_export("bert"),
        "optimum_gpt2_with_past": lambda: optimum_export("gpt2"),
        "ort_genai_llama_fp32": lambda: genai("fp32"),
        "ort_genai_llama_int4": lambda: genai("int4"),
        # with a KV cache of 3 earlier tokens: GroupQueryAttention's past path and rotary
        # positions after the cache
        "ort_genai_phi3_fp32_past": lambda: genai("fp32", "phi3", past=3),
        "ort_genai_phi3_int4_past": lambda: genai("int4", "phi3", past=3),
        "ort_genai_qwen2_fp32_past": lambda: genai("fp32", "qwen2", past=3),
        "ort_genai_qwen2_int4_past": lambda: genai("int4", "qwen2", past=3),
    }


def _write_tokenizer(folder: str) -> None:
    """A tiny word-level tokenizer, for exporters that insist on finding one."""
    try:
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast

        vocab = {f"w{i}": i for i in range(64)}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
        PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0").save_pretrained(folder)
    except Exception:
        pass


def _hf_feeds(model: onnx.ModelProto, past: int = 0) -> dict[str, np.ndarray]:
    """Inputs for a decoder/encoder export: token ids, masks, positions, and caches of
    ``past`` earlier tokens (random values; empty by default)."""
    rng = np.random.default_rng(5)
    feeds: dict[str, np.ndarray] = {}
    batch, seq = 1, 4
    for vi in model.graph.input:
        t = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        name = vi.name
        if "past" in name:
            # (batch, kv heads, past length 0, head size); symbolic sizes from the
            # configs above (genai: 2 kv heads of 16).
            known = [batch, 2, past, 16]
            shape = [known[i] if i in (0, 2) or d is None else d for i, d in enumerate(dims)]
            feeds[name] = (rng.standard_normal(shape) * 0.5).astype(dtype)
        elif "token_type" in name:
            feeds[name] = np.zeros((batch, seq), dtype)
        elif "mask" in name:
            feeds[name] = np.ones((batch, seq + past), dtype)
        elif "position" in name:
            feeds[name] = np.arange(past, past + seq, dtype=dtype)[None]
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(0, 60, (batch, seq)).astype(dtype)
        else:
            feeds[name] = rng.standard_normal([d or seq for d in dims]).astype(dtype)
    return feeds


# -- main -------------------------------------------------------------------------------------
EXPORTER_OF = {
    "torch": "torch",
    "skl2onnx": "skl2onnx",
    "ort_quantization": "onnxruntime",
    "ort_transformers": "onnxruntime",
    "onnxslim": "onnxslim",
    "onnxsim": "onnxsim",
    "optimum": "optimum",
    "ort_genai": "onnxruntime-genai",
}


EXPORTS = os.path.join(os.path.dirname(__file__), os.pardir, "tests", "data", "exports")


def _save_npz(path: str, arrays: dict[str, Any]) -> None:
    """Arrays as they are; anything else (a dict fed to a ZipMap-style input) as a 0-d
    object array, which the tests unwrap with ``.item()``."""
    stored = {}
    for key, value in arrays.items():
        if isinstance(value, np.ndarray):
            stored[key] = value
        else:
            holder = np.empty((), dtype=object)
            holder[()] = value
            stored[key] = holder
    np.savez(path, **stored)


def main_exports(argv: list[str]) -> int:
    """Write tests/data/exports/ (see the module docstring)."""
    sys.path.insert(0, os.path.dirname(__file__))
    import exports_for_tests

    os.makedirs(EXPORTS, exist_ok=True)
    manifest_path = os.path.join(EXPORTS, "manifest.json")
    manifest: dict[str, Any] = {}
    if os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as fh:
            manifest = json.load(fh)
    for name, build in exports_for_tests.builders().items():
        if argv and name not in argv:
            continue
        model, feeds, refs = build()
        onnx.save(model, os.path.join(EXPORTS, f"{name}.onnx"))
        _save_npz(
            os.path.join(EXPORTS, f"{name}.npz"),
            {
                **{f"feed:{k}": v for k, v in feeds.items()},
                **{f"ref:{k}": v for k, v in refs.items()},
            },
        )
        tool = ["torch"] if name.startswith("torch") else ["scikit-learn", "skl2onnx"]
        manifest[name] = {
            "exporter": "torch.onnx.export(dynamo=False)" if tool == ["torch"] else "skl2onnx",
            "versions": {pkg: version(pkg) for pkg in tool},
            "producer": f"{model.producer_name} {model.producer_version}".strip(),
            "opsets": {i.domain or "ai.onnx": i.version for i in model.opset_import},
            "command": f"scripts/make_test_models.py --exports {name}",
        }
        size = os.path.getsize(os.path.join(EXPORTS, f"{name}.onnx"))
        print(f"wrote exports/{name} ({size // 1024} KB)")
    with open(manifest_path, "w", encoding="utf-8") as fh:
        json.dump(dict(sorted(manifest.items())), fh, indent=1)
        fh.write("\n")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--exports"]:
        return main_exports(argv[1:])
    os.makedirs(OUT, exist_ok=True)
    manifest_path = os.path.join(OUT, "manifest.json")
    manifest: dict[str, Any] = {}
    if os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as fh:
            manifest = json.load(fh)
    builders = {**torch_models(), **sklearn_models(), **derived_models(), **hf_models()}
    for name, build in builders.items():
        if argv and name not in argv:
            continue
        exporter = next(v for k, v in EXPORTER_OF.items() if name.startswith(k))
        try:
            model, feeds = build()
        except Exception as exc:
            print(f"skipped {name}: {type(exc).__name__}: {str(exc)[:300]}")
            if os.environ.get("DEBUG"):
                traceback.print_exc()
            continue
        onnx.save(model, os.path.join(OUT, f"{name}.onnx"))
        np.savez(os.path.join(OUT, f"{name}.npz"), **feeds)
        manifest[name] = {
            "exporter": exporter,
            "version": version(exporter),
            "torch": version("torch") if name.startswith(("torch", "ort_q", "onnxs")) else None,
            "producer": f"{model.producer_name} {model.producer_version}".strip(),
            "opsets": {i.domain or "ai.onnx": i.version for i in model.opset_import},
        }
        size = os.path.getsize(os.path.join(OUT, f"{name}.onnx"))
        print(f"wrote {name} ({size // 1024} KB)")
    with open(manifest_path, "w", encoding="utf-8") as fh:
        json.dump(dict(sorted(manifest.items())), fh, indent=1)
        fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
