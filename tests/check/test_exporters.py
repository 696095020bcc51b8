"""Models exported by torch (TorchScript exporter) and skl2onnx validate without errors.

Exported at test time into tmp_path; small models so it stays quick.  Skipped only when
the exporter packages are absent (they are test extras)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxviz.check import validate
from onnxviz.model.document import Document


def _errors(path: Path) -> list[str]:
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)  # the peer accepts it
    return [str(d) for d in validate(Document.open(str(path))) if d.severity.value == "error"]


def test_torch_exports(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Small(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.norm = nn.LayerNorm(4)
            self.attn = nn.MultiheadAttention(4, 2, batch_first=True)
            self.lstm = nn.LSTM(4, 5, batch_first=True)
            self.head = nn.Linear(5, 2)

        def forward(self, img: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            f = torch.relu(self.conv(img)).flatten(2).transpose(1, 2)  # (B, HW, 4)
            f = self.norm(f)
            a, _ = self.attn(f, f, f)
            seq, _ = self.lstm(a)
            logits = self.head(seq[:, -1])
            return torch.softmax(logits, -1), seq.mean(1)

    class Looping(nn.Module):
        def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
            for _ in range(int(n)):
                x = x * 2 if x.sum() > 0 else x - 1
            return x

    model = Small().eval()
    path = tmp_path / "small.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.randn(1, 3, 4, 4),),
            str(path),
            dynamo=False,
            input_names=["img"],
            dynamic_axes={"img": {0: "batch"}},
            opset_version=17,
        )
    assert _errors(path) == []

    scripted = torch.jit.script(Looping())
    loop_path = tmp_path / "loop.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            scripted,
            (torch.randn(3), torch.tensor(2)),
            str(loop_path),
            dynamo=False,
            opset_version=17,
        )
    loaded = onnx.load(str(loop_path))
    assert any(n.op_type in ("Loop", "If") for n in loaded.graph.node)
    assert _errors(loop_path) == []


def test_skl2onnx_exports(tmp_path: Path) -> None:
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    for i, est in enumerate(
        [
            make_pipeline(StandardScaler(), LogisticRegression()),
            RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0),
        ]
    ):
        est.fit(x, y)
        onx = to_onnx(est, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
        path = tmp_path / f"skl{i}.onnx"
        path.write_bytes(onx.SerializeToString())
        assert _errors(path) == []
