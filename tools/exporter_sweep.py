"""A wide sweep of exporter output, for finding what the committed corpus does not show.

The committed corpus (tests/data/exporters, made by scripts/make_test_models.py) pins one
configuration per exporter.  Users bring others: other opset versions, dynamic axes, ops
the corpus does not use.  This script exports many small random-weighted models with the
exporters installed in *its* interpreter (a separate venv with torch, onnxscript,
scikit-learn, skl2onnx, onnxruntime), then checks each one with onnxviz in the project's
venv: `check` must report no errors, and `run` in the default (fused) mode must match
onnxruntime.

    <exporter venv>/bin/python tools/exporter_sweep.py export OUT_DIR
    .venv/bin/python tools/exporter_sweep.py verify OUT_DIR [--coretype Haswell]

The verify step prints one line per model and a summary; its exit code is 1 when any
model has a check error or a numeric mismatch.  Nothing here runs in the test suite: it
is a tool for widening the corpus; what it finds becomes a committed model and a test.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np


# -- export (exporter venv) -----------------------------------------------------------------
def _torch_cases() -> dict[str, Callable[[], tuple[Any, tuple[Any, ...], list[str], dict]]]:
    """name -> () -> (module, example args, input names, dynamic axes for TorchScript)."""
    import torch
    import torch.nn.functional as fn
    from torch import nn

    torch.manual_seed(0)
    cases: dict[str, Callable[[], tuple[Any, tuple[Any, ...], list[str], dict]]] = {}

    def case(name: str, dyn: dict | None = None):
        def wrap(make: Callable[[], tuple[Any, tuple[Any, ...]]]):
            def build() -> tuple[Any, tuple[Any, ...], list[str], dict]:
                module, args = make()
                names = [f"in{i}" for i in range(len(args))]
                return module, args, names, dyn or {}

            cases[name] = build
            return make

        return wrap

    class Lambda(nn.Module):
        def __init__(self, fn_: Callable[..., Any], **mods: nn.Module) -> None:
            super().__init__()
            self.fn_ = fn_
            for k, v in mods.items():
                setattr(self, k, v)

        def forward(self, *xs: Any) -> Any:
            return self.fn_(self, *xs)

    img = lambda c=3, s=16, b=1: torch.randn(b, c, s, s)  # noqa: E731

    @case("mobilenet_block", {"in0": {0: "batch"}})
    def _mb():
        class SE(nn.Module):
            def __init__(self, c: int) -> None:
                super().__init__()
                self.f1 = nn.Conv2d(c, c // 4, 1)
                self.f2 = nn.Conv2d(c // 4, c, 1)

            def forward(self, x: Any) -> Any:
                s = fn.adaptive_avg_pool2d(x, 1)
                return x * fn.hardsigmoid(self.f2(fn.relu(self.f1(s))))

        m = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1),
            nn.BatchNorm2d(16),
            nn.Hardswish(),
            nn.Conv2d(16, 16, 3, 1, 1, groups=16),
            nn.BatchNorm2d(16),
            nn.ReLU6(),
            SE(16),
            nn.Conv2d(16, 24, 1),
            nn.Hardswish(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(24, 10),
        )
        return m, (img(s=32),)

    @case("unet_small")
    def _unet():
        class U(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.d1 = nn.Conv2d(3, 8, 3, padding=1)
                self.d2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
                self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
                self.gn = nn.GroupNorm(4, 16)
                self.o = nn.Conv2d(16, 2, 1)

            def forward(self, x: Any) -> Any:
                a = fn.silu(self.d1(x))
                b = fn.silu(self.gn(self.d2(a)))
                u = self.up(b)
                i = fn.interpolate(b, scale_factor=2.0, mode="nearest")
                return self.o(torch.cat([u + i[:, :8], a], 1))

        return U(), (img(s=16),)

    @case("resize_modes")
    def _resize():
        def f(self: Any, x: Any) -> Any:
            a = fn.interpolate(x, size=(11, 13), mode="bilinear", align_corners=False)
            b = fn.interpolate(x, size=(11, 13), mode="bilinear", align_corners=True)
            c = fn.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=False)
            return a + b, c

        return Lambda(f), (img(c=2, s=8),)

    @case("vit_tiny", {"in0": {0: "batch"}})
    def _vit():
        class ViT(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.patch = nn.Conv2d(3, 32, 4, 4)
                self.cls = nn.Parameter(torch.randn(1, 1, 32))
                self.pos = nn.Parameter(torch.randn(1, 17, 32))
                layer = nn.TransformerEncoderLayer(
                    32, 4, 64, 0.0, batch_first=True, activation="gelu"
                )
                self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
                self.ln = nn.LayerNorm(32)
                self.head = nn.Linear(32, 5)

            def forward(self, x: Any) -> Any:
                p = self.patch(x).flatten(2).transpose(1, 2)
                p = torch.cat([self.cls.expand(p.shape[0], -1, -1), p], 1) + self.pos
                return self.head(self.ln(self.enc(p))[:, 0])

        return ViT(), (img(s=16, b=2),)

    @case("gpt_block_sdpa")
    def _gpt():
        class Block(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = nn.Embedding(50, 32)
                self.qkv = nn.Linear(32, 96)
                self.proj = nn.Linear(32, 32)
                self.ln1 = nn.LayerNorm(32)
                self.ln2 = nn.LayerNorm(32)
                self.mlp = nn.Sequential(nn.Linear(32, 128), nn.GELU("tanh"), nn.Linear(128, 32))
                self.out = nn.Linear(32, 50, bias=False)

            def forward(self, ids: Any) -> Any:
                h = self.emb(ids)
                b, t, _ = h.shape
                q, k, v = self.qkv(self.ln1(h)).split(32, dim=2)
                q, k, v = (z.view(b, t, 4, 8).transpose(1, 2) for z in (q, k, v))
                a = fn.scaled_dot_product_attention(q, k, v, is_causal=True)
                h = h + self.proj(a.transpose(1, 2).reshape(b, t, 32))
                h = h + self.mlp(self.ln2(h))
                return torch.log_softmax(self.out(h), -1)

        return Block(), (torch.randint(0, 50, (2, 7)),)

    @case("rnn_bidirectional", {"in0": {1: "batch"}})
    def _rnn():
        class R(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lstm = nn.LSTM(8, 16, 2, bidirectional=True)
                self.gru = nn.GRU(32, 8, batch_first=False)

            def forward(self, x: Any) -> Any:
                y, _ = self.lstm(x)
                z, h = self.gru(y)
                return z, h

        return R(), (torch.randn(5, 3, 8),)

    @case("conv1d_audio")
    def _c1d():
        m = nn.Sequential(
            nn.Conv1d(1, 8, 9, stride=2, padding=4),
            nn.InstanceNorm1d(8, affine=True),
            nn.LeakyReLU(0.1),
            nn.Conv1d(8, 8, 3, dilation=2, padding=2),
            nn.ELU(),
            nn.AvgPool1d(2),
            nn.Conv1d(8, 4, 1),
        )
        return m, (torch.randn(2, 1, 64),)

    @case("conv3d")
    def _c3d():
        m = nn.Sequential(
            nn.Conv3d(2, 4, 3, padding=1), nn.BatchNorm3d(4), nn.ReLU(), nn.MaxPool3d(2)
        )
        return m, (torch.randn(1, 2, 6, 6, 6),)

    @case("tensor_ops")
    def _tensor_ops():
        def f(self: Any, x: Any, idx: Any) -> Any:
            a = torch.cumsum(x, 1)
            b = torch.where(x > 0, x, torch.zeros_like(x))
            c = x.masked_fill(x < -0.5, -1.0)
            d = torch.gather(x, 1, idx)
            e = torch.topk(x, 3, dim=1).values
            g = x.argmax(1, keepdim=True).float()
            h = torch.flip(x, [1])
            i = torch.roll(x, 2, 1)
            j = fn.pad(x, (1, 2), mode="reflect")
            k = torch.clamp(x, -0.3, 0.4).pow(2).sqrt()
            return a + b + c + h + i + k, d, e, g, j

        return Lambda(f), (torch.randn(4, 10), torch.randint(0, 10, (4, 3)))

    @case("reductions_norms")
    def _red():
        def f(self: Any, x: Any) -> Any:
            return (
                x.mean((1, 2)),
                x.std(1),
                x.amax(2),
                torch.logsumexp(x, 1),
                fn.normalize(x, dim=2),
                torch.linalg.vector_norm(x, 2, dim=1),
                fn.softmax(x, 0),
                x.prod(2),
            )

        return Lambda(f), (torch.randn(3, 4, 5),)

    @case("einsum_bmm")
    def _einsum():
        class E(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = nn.Parameter(torch.randn(6, 5))

            def forward(self, a: Any, b: Any) -> Any:
                return (
                    torch.einsum("bij,bjk->bik", a, b),
                    a @ self.w,
                    torch.bmm(a, b).transpose(1, 2),
                )

        return E(), (torch.randn(2, 4, 6), torch.randn(2, 6, 3))

    @case("pixel_shuffle_pool")
    def _ps():
        m = nn.Sequential(
            nn.Conv2d(4, 16, 3, padding=1),
            nn.PixelShuffle(2),
            nn.MaxPool2d(3, 2, 1, ceil_mode=True),
            nn.AvgPool2d(2, count_include_pad=False, padding=1),
            nn.Softplus(),
            nn.Mish(),
        )
        return m, (img(c=4, s=10),)

    @case("embedding_bag_like")
    def _emb():
        class E(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.e = nn.Embedding(20, 6, padding_idx=0)
                self.l = nn.Linear(6, 2)

            def forward(self, ids: Any, w: Any) -> Any:
                v = self.e(ids) * w.unsqueeze(-1)
                return torch.sigmoid(self.l(v.sum(1))), torch.nonzero(ids > 10)

        return E(), (torch.randint(0, 20, (3, 5)), torch.rand(3, 5))

    @case("int_arith")
    def _ints():
        def f(self: Any, a: Any, b: Any) -> Any:
            return (
                a // b,
                a % b,
                torch.bitwise_and(a, b),
                a * b - a,
                (a > b).int(),
                torch.abs(a - b),
            )

        return Lambda(f), (torch.randint(-50, 50, (4, 5)), torch.randint(1, 9, (4, 5)))

    @case("half_precision")
    def _half():
        m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4)).half()
        return m, (torch.randn(3, 8).half(),)

    @case("control_if_loop")
    def _ctl():
        class C(nn.Module):
            def forward(self, x: Any) -> Any:
                y = x
                for _ in range(3):
                    y = torch.tanh(y) + x
                return y * 2

        return C(), (torch.randn(2, 3),)

    @case("dynamic_reshape", {"in0": {0: "batch", 1: "seq"}})
    def _dyn():
        class D(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.l = nn.Linear(8, 8)

            def forward(self, x: Any) -> Any:
                b, t, c = x.shape
                y = self.l(x).view(b, t, 2, 4).permute(0, 2, 1, 3).reshape(b * 2, t, 4)
                return y.expand(b * 2, t, 4).unsqueeze(1).squeeze(1), torch.arange(t).float() * b

        return D(), (torch.randn(2, 5, 8),)

    return cases


def export_torch(out: str) -> list[str]:
    import torch

    made = []
    configs: list[tuple[str, dict[str, Any]]] = [
        ("ts11", {"dynamo": False, "opset_version": 11}),
        ("ts14", {"dynamo": False, "opset_version": 14}),
        ("ts17", {"dynamo": False, "opset_version": 17}),
        ("dyn18", {"dynamo": True, "opset_version": 18}),
        ("dyn20", {"dynamo": True, "opset_version": 20}),
        ("dyn23", {"dynamo": True, "opset_version": 23}),
    ]
    for name, build in _torch_cases().items():
        for tag, cfg in configs:
            module, args, names, dyn = build()
            module.eval()
            path = os.path.join(out, f"torch_{tag}_{name}.onnx")
            try:
                with warnings.catch_warnings(), torch.no_grad():
                    warnings.simplefilter("ignore")
                    kw = dict(cfg)
                    if not kw["dynamo"] and dyn:
                        kw["dynamic_axes"] = dyn
                    if kw["dynamo"]:
                        prog = torch.onnx.export(module, args, input_names=names, **kw)
                        prog.save(path)
                    else:
                        buf = io.BytesIO()
                        torch.onnx.export(module, args, buf, input_names=names, **kw)
                        with open(path, "wb") as f:
                            f.write(buf.getvalue())
            except Exception as exc:  # an exporter limit, not ours: note it and go on
                print(f"skip {os.path.basename(path)}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            np.savez(path[:-5] + ".npz", **{n: a.numpy() for n, a in zip(names, args)})
            made.append(path)
    return made


def export_sklearn(out: str) -> list[str]:
    from skl2onnx import to_onnx
    from sklearn import (
        cluster,
        decomposition,
        ensemble,
        linear_model,
        naive_bayes,
        neighbors,
        neural_network,
        pipeline,
        preprocessing,
        svm,
        tree,
    )

    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5)).astype(np.float32)
    y_cls = (x[:, 0] + x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 1)
    y_reg = x @ rng.normal(size=5).astype(np.float32)
    estimators: dict[str, tuple[Any, Any]] = {
        "logreg_multi": (linear_model.LogisticRegression(max_iter=200), y_cls),
        "ridge": (linear_model.Ridge(), y_reg),
        "svc_rbf": (svm.SVC(probability=True), y_cls),
        "svr": (svm.SVR(), y_reg),
        "tree_cls": (tree.DecisionTreeClassifier(max_depth=4), y_cls),
        "forest_reg": (ensemble.RandomForestRegressor(5, max_depth=3), y_reg),
        "hgb_cls": (ensemble.HistGradientBoostingClassifier(max_iter=5), y_cls),
        "knn": (neighbors.KNeighborsClassifier(3), y_cls),
        "mlp": (neural_network.MLPClassifier((8,), max_iter=50), y_cls),
        "gnb": (naive_bayes.GaussianNB(), y_cls),
        "kmeans": (cluster.KMeans(3, n_init=2), None),
        "pca_scaler": (
            pipeline.make_pipeline(preprocessing.MinMaxScaler(), decomposition.PCA(3)),
            None,
        ),
        "poly_ridge": (
            pipeline.make_pipeline(preprocessing.PolynomialFeatures(2), linear_model.Ridge()),
            y_reg,
        ),
    }
    made = []
    for name, (est, y) in estimators.items():
        for opset in (13, 17, 19):
            path = os.path.join(out, f"skl_o{opset}_{name}.onnx")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est.fit(x, y) if y is not None else est.fit(x)
                    opts = {id(est): {"zipmap": False}} if hasattr(est, "predict_proba") else None
                    model = to_onnx(est, x[:2], target_opset=opset, options=opts)
            except Exception as exc:
                print(f"skip {os.path.basename(path)}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            with open(path, "wb") as f:
                f.write(model.SerializeToString())
            np.savez(path[:-5] + ".npz", **{model.graph.input[0].name: x[:7]})
            made.append(path)
    return made


def export_quantized(out: str, floats: list[str]) -> list[str]:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    made = []
    for src in floats:
        base = os.path.basename(src)[:-5]
        feeds = dict(np.load(src[:-5] + ".npz"))
        if any(a.dtype != np.float32 for a in feeds.values()):
            continue

        class Reader(CalibrationDataReader):
            def __init__(self, sample: dict[str, np.ndarray] = feeds) -> None:
                self.items = iter([sample])

            def get_next(self) -> Any:
                return next(self.items, None)

        for tag, fn_ in (
            (
                "qdq_pc",
                lambda s, d: quantize_static(
                    s, d, Reader(), quant_format=QuantFormat.QDQ, per_channel=True
                ),
            ),
            (
                "qop",
                lambda s, d: quantize_static(
                    s,
                    d,
                    Reader(),
                    quant_format=QuantFormat.QOperator,
                    activation_type=QuantType.QUInt8,
                ),
            ),
            ("dyn", lambda s, d: quantize_dynamic(s, d, weight_type=QuantType.QInt8)),
        ):
            dst = os.path.join(out, f"quant_{tag}_{base}.onnx")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fn_(src, dst)
            except Exception as exc:
                print(f"skip {os.path.basename(dst)}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            np.savez(dst[:-5] + ".npz", **feeds)
            made.append(dst)
    return made


def export_all(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    torch_made = export_torch(out)
    skl_made = export_sklearn(out)
    cnn = [
        p
        for p in torch_made
        if "ts17" in p and any(k in p for k in ("mobilenet", "unet", "conv1d", "vit", "gpt"))
    ]
    q_made = export_quantized(out, cnn)
    print(f"exported {len(torch_made)} torch, {len(skl_made)} skl2onnx, {len(q_made)} quantized")


# -- verify (project venv) ------------------------------------------------------------------
def _cli(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "onnxviz", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    return proc.returncode, proc.stdout, proc.stderr


def verify(folder: str, coretype: str | None) -> int:
    env = dict(os.environ)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    bad = 0
    models = sorted(f for f in os.listdir(folder) if f.endswith(".onnx"))
    for name in models:
        path = os.path.join(folder, name)
        code, out, err = _cli(["check", "--json", path], env)
        try:
            diags = json.loads(out)
            diags = diags if isinstance(diags, list) else diags.get("diagnostics", [])
            errors = [d for d in diags if d["severity"] == "error"]
            summary = " ".join(sorted({f"{d['code']}" for d in errors}))
        except json.JSONDecodeError:
            errors, summary = ["unreadable"], (err.strip().splitlines() or ["?"])[-1]
        args = ["run", path, "--compare", "onnxruntime", "--json"]
        npz = path[:-5] + ".npz"
        args += ["--input", npz] if os.path.exists(npz) else ["--random-inputs"]
        rcode, rout, rerr = _cli(args, env)
        try:
            report = json.loads(rout)
            ok, worst = rcode == 0, ""
            for entry in report.get("compare", {}).get("outputs", []):
                if "shape_mismatch" in entry or entry.get("equal") is False:
                    ok, worst = False, json.dumps(entry)[:160]
                elif "max_abs" in entry and entry["max_abs"] > 1e-3 and entry["max_rel"] > 1e-3:
                    ok = False
                    worst = (
                        f"{entry['name']}: abs {entry['max_abs']:.3g} rel {entry['max_rel']:.3g}"
                    )
                    worst += f" ({entry['note']})" if entry.get("note") else ""
            verdict = "match" if ok else f"MISMATCH {worst}"
        except json.JSONDecodeError:
            ok, verdict = (
                False,
                f"RUN FAILED ({rcode}): {(rerr.strip().splitlines() or ['?'])[-1][:200]}",
            )
        if errors or not ok:
            bad += 1
        print(f"{name:55s} errors={len(errors):<2d} {summary:20s} {verdict}", flush=True)
    print(f"{len(models)} models, {bad} with a check error or a run mismatch")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("mode", choices=["export", "verify"])
    p.add_argument("folder")
    p.add_argument("--coretype", help="OPENBLAS_CORETYPE for the verify runs")
    a = p.parse_args(argv)
    if a.mode == "export":
        try:
            export_all(a.folder)
        except Exception:
            traceback.print_exc()
            return 2
        return 0
    return verify(a.folder, a.coretype)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
