"""The exporter corpus (tests/data/exporters: small models as torch, optimum, onnxslim,
onnxruntime.quantization, the transformers optimizer and onnxruntime-genai's builder
write them) as bench_families rows: ``--models corpus``.  Their runs are tens of
microseconds, where the engines' fixed costs per run and per node are most of the time."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.data.exporters import MANIFEST, NAMES, feeds_of, path_of

Built = tuple[onnx.ModelProto, dict[str, Any]]

# The exporters whose models are neural networks onnxruntime runs in its CPU build (the
# scikit-learn models and onnxsim's copy of a CNN aside: their rows measure other things).
_NEURAL = ("torch", "optimum", "onnxslim", "onnxruntime")


def _loader(name: str) -> Callable[[], Built]:
    def build() -> Built:
        model = onnx.load(str(path_of(name)))
        inputs = {i.name for i in model.graph.input}
        feeds = {k: np.asarray(v) for k, v in feeds_of(name).items() if k in inputs}
        return model, feeds

    return build


CORPUS_MODELS: dict[str, tuple[str, Callable[[], Built]]] = {
    f"corpus_{name}": (f"{name} (exporter corpus)", _loader(name))
    for name in NAMES
    if str(MANIFEST[name].get("exporter", "")).startswith(_NEURAL)
}
