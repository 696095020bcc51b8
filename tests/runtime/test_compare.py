"""Compare with onnxruntime: errors per node, and the first divergence."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxviz.runtime.compare import compare_with_onnxruntime, errors_between
from tests.runtime.engine_models import chain_model

pytest.importorskip("onnxruntime")

EXAMPLES = os.path.join(os.path.dirname(__file__), "../../src/onnxviz/resources/examples")


def test_errors_between_measures_abs_and_rel() -> None:
    d = errors_between("v", np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.5, 4.0]))
    assert d.max_abs == pytest.approx(0.5)
    assert d.max_rel == pytest.approx(0.2)
    assert d.ref_scale == 4.0
    assert d.beyond(0.1, 0.0) and not d.beyond(0.6, 0.0)


def test_errors_between_nan_and_shapes() -> None:
    same = errors_between("v", np.array([np.nan, np.inf]), np.array([np.nan, np.inf]))
    assert same.max_abs == 0.0
    nan_vs_num = errors_between("v", np.array([np.nan]), np.array([1.0]))
    assert nan_vs_num.max_abs == np.inf
    shapes = errors_between("v", np.zeros((2, 3)), np.zeros((3, 2)))
    assert shapes.shape_mismatch == ((2, 3), (3, 2)) and shapes.beyond(1.0, 1.0)
    strings = errors_between("v", np.array(["a"], dtype=object), np.array(["b"], dtype=object))
    assert strings.equal is False


def test_same_model_agrees_everywhere() -> None:
    model = onnx.load(os.path.join(EXAMPLES, "small_cnn.onnx"))
    shape = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {model.graph.input[0].name: np.random.default_rng(0).random(shape, np.float32)}
    cmp = compare_with_onnxruntime(model, feeds)
    assert len(cmp.nodes) == len(model.graph.node)
    assert all(n.values for n in cmp.nodes)
    assert cmp.first_beyond(1e-4, 1e-3) is None
    assert all(o.max_abs is not None and o.max_abs < 1e-4 for o in cmp.outputs)


def test_finds_divergence_from_a_changed_initializer() -> None:
    """Our values come from the model, the peer's from a copy with one initializer
    changed: the first node beyond tolerance is the node that reads it."""
    model = chain_model()
    feeds = {"x": np.array([1.0, 2.0, 3.0], dtype=np.float32)}
    from onnxviz.runtime.session import Session

    ours = Session(model).run(feeds, fetch=["s", "r"])
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    w = numpy_helper.to_array(changed.graph.initializer[0]).copy()
    w[2] += 1.0
    changed.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    cmp = compare_with_onnxruntime(changed, feeds, ours)
    first = cmp.first_beyond(1e-5, 1e-5)
    assert first is not None and first.address == "main::add"
    assert cmp.by_address()["main::add"].max_abs == pytest.approx(1.0)
