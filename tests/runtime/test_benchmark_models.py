"""The interpreter benchmark models (benchmarks/), scaled down, give onnxruntime's numbers
through the fused unwatched path the benchmarks time.  A speed-up that changes results
shows here, not only as a "max abs diff" line in a benchmark printout."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks"))

import bench_models
from onnxviz.runtime.session import Session
from tests.data.exports import load

from .differential import assert_modes_agree

pytestmark = pytest.mark.numeric

CASES: list[tuple[str, Callable[[], Any]]] = [
    ("bert", lambda: bench_models.bert(layers=2, hidden=64, heads=4, ffn=256, seq=24)),
    ("unet", lambda: bench_models.unet(size=32, base=8, levels=2)),
    ("lstm", lambda: bench_models.lstm(seq=9, batch=3, n_in=16, hidden=24)),
    # The Loop whose iterations run in one compiled call: its condition ends it.
    ("loop_steps", lambda: bench_models.loop_steps(iterations=37)),
    # benchmarks/torch_models.py's exports, scaled down and committed in tests/data/exports/.
    ("bert_torch", lambda: load("torchscript_bert_small")[:2]),
    # Basic blocks at 112 px: the shortcut convs and residual Adds take the flat-layout
    # conv paths (a dynamo ResNet-18 once lost its shortcuts there).
    ("resnet_torch", lambda: load("torchscript_resnet_basic_112")[:2]),
]


@pytest.mark.parametrize("build", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_benchmark_model_matches_onnxruntime(build: Callable[[], Any]) -> None:
    model, feeds = build()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    assert_modes_agree(model, feeds)
    sess = Session(model)
    for _ in range(2):  # the second run reuses folded weights and scratch buffers
        got = sess.run(feeds)
        for out, ref in zip(model.graph.output, want, strict=True):
            np.testing.assert_allclose(got[out.name], ref, rtol=1e-4, atol=1e-4, err_msg=out.name)
