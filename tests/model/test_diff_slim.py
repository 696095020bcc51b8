"""Acceptance on a real optimizer's output: models before and after onnxslim 0.1.98
(written by tests/data/diff/make_slim_pairs.py; onnxslim is not needed to run these).

onnxslim only folds and removes, so the diff must add nothing, and every value it
pairs must hold the same numbers on both sides (a wrong match would part them)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from onnxviz.model.diff import diff
from onnxviz.runtime.model_diff import numeric_diff

HERE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "diff")


def _pair(name: str) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    return (
        onnx.load(os.path.join(HERE, f"{name}_before.onnx")),
        onnx.load(os.path.join(HERE, f"{name}_after.onnx")),
    )


def test_slimmed_cnn_pairs_each_folded_conv_with_its_conv_bn() -> None:
    a, b = _pair("cnn")
    d = diff(a, b)
    groups = [(sorted(n.op_type for n in f.a), [n.op_type for n in f.b]) for f in d.main.fused]
    assert groups == [(["BatchNormalization", "Conv"], ["Conv"])] * 3
    for f in d.main.fused:
        conv = next(n for n in f.a if n.op_type == "Conv")
        bn = next(n for n in f.a if n.op_type == "BatchNormalization")
        assert a.graph.node[bn.index].input[0] == a.graph.node[conv.index].output[0]
    assert [n.op_type for n in d.main.removed] == ["Identity"]
    assert not d.main.added and not d.main.changed
    relus = sorted(
        (a.graph.node[i].name, b.graph.node[j].name)
        for i, j in d.main.matches
        if a.graph.node[i].op_type == "Relu"
    )
    assert relus == [(f"relu{i}", f"relu{i}") for i in range(3)]


@pytest.mark.numeric
def test_slimmed_transformer_adds_nothing_and_every_pair_holds_the_same_numbers() -> None:
    a, b = _pair("tf")
    d = diff(a, b)
    assert not d.main.added
    matched_b = {j for _, j in d.main.matches} | {n.index for f in d.main.fused for n in f.b}
    assert matched_b == set(range(len(b.graph.node)))  # every node of B has its origin
    # What slimming removed is accounted for: nodes of A without a counterpart.
    assert len(d.main.removed) + len(d.main.matches) + sum(len(f.a) for f in d.main.fused) == len(
        a.graph.node
    )
    rng = np.random.default_rng(0)
    feeds = {
        "hidden_states": rng.standard_normal((2, 5, 8)).astype(np.float32),
        "attention_mask": np.ones((2, 5), np.int64),
    }
    result = numeric_diff(a, b, d, feeds, engine="onnxruntime")
    assert result.equal, result.first and result.first.to_json()
    compared = [v for v in result.values if v.max_abs is not None]
    assert len(compared) >= len(d.main.matches) - 2  # nearly every pair was compared
    assert max(v.max_abs for v in compared) <= 1e-4
