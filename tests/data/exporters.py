"""The real-world exporter corpus (tests/data/exporters/, made by
scripts/make_test_models.py): small random-weighted models as torch (dynamo and
TorchScript), skl2onnx, onnxruntime.quantization, onnxslim, onnxsim, optimum and
onnxruntime-genai's builder write them, with their inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

FOLDER = Path(__file__).with_name("exporters")
MANIFEST: dict[str, dict] = json.loads((FOLDER / "manifest.json").read_text(encoding="utf-8"))
NAMES = sorted(MANIFEST)


def path_of(name: str) -> Path:
    return FOLDER / f"{name}.onnx"


def feeds_of(name: str) -> dict[str, np.ndarray]:
    with np.load(FOLDER / f"{name}.npz", allow_pickle=True) as data:
        return {k: data[k] for k in data.files}
