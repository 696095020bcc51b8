"""Models the unit tests read instead of exporting them at test time (tests/data/exports/,
made by ``scripts/make_test_models.py --exports`` from scripts/exports_for_tests.py): the test
command then installs neither PyTorch nor scikit-learn.  Each model comes with its inputs
and the exporting library's own results (``refs``: what scikit-learn predicted, ...)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx

FOLDER = Path(__file__).with_name("exports")
MANIFEST: dict[str, dict] = json.loads((FOLDER / "manifest.json").read_text(encoding="utf-8"))


def path_of(name: str) -> Path:
    return FOLDER / f"{name}.onnx"


def load(name: str) -> tuple[onnx.ModelProto, dict[str, Any], dict[str, Any]]:
    """(model, feeds, refs) of one committed export."""
    if name not in MANIFEST:
        raise KeyError(f"{name} is not in tests/data/exports/manifest.json")
    model = onnx.load(str(path_of(name)))
    feeds: dict[str, Any] = {}
    refs: dict[str, Any] = {}
    with np.load(FOLDER / f"{name}.npz", allow_pickle=True) as data:
        for key in data.files:
            kind, _, what = key.partition(":")
            value = data[key]
            # A 0-d object array wraps a non-array feed (a dict for DictVectorizer).
            if value.dtype == object and value.ndim == 0:
                value = value.item()
            (feeds if kind == "feed" else refs)[what] = value
    return model, feeds, refs
