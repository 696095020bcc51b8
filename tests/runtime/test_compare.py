"""Compare with onnxruntime: errors per node, and the first divergence."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxviz import bundled
from onnxviz.runtime.compare import compare_with_onnxruntime, errors_between
from tests.runtime.engine_models import chain_model

pytest.importorskip("onnxruntime")

EXAMPLES = str(bundled.root() / "examples")


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


def _saturating_u8s8(a: np.ndarray, b: np.ndarray, b_zero: int) -> np.ndarray:
    """MatMulInteger as onnxruntime's AVX2 u8s8 kernel (no VNNI) computes it: pairs of
    u8 x s8 products added in saturating int16 (vpmaddubsw), then summed in int32; the
    zero point corrected afterwards."""
    prods = a.astype(np.int32)[:, :, None] * b.astype(np.int32)[None, :, :]  # (M, K, N)
    pairs = np.clip(prods[:, 0::2] + prods[:, 1::2], -32768, 32767).sum(axis=1)
    return (pairs - b_zero * a.astype(np.int32).sum(axis=1)[:, None]).astype(np.int32)


def _matmul_integer_model(b: np.ndarray) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "", "bz"], ["y"], name="mmi")],
        "g",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        initializer=[numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.int8(2), "bz")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_saturating_peer_is_named_as_the_inexact_side(monkeypatch) -> None:
    import onnxviz.runtime.compare as compare

    rng = np.random.default_rng(3)
    a = rng.integers(200, 256, (3, 8)).astype(np.uint8)
    b = rng.integers(100, 128, (8, 4)).astype(np.int8)  # pairs of ~255*127: saturate
    model = _matmul_integer_model(b)
    peer = _saturating_u8s8(a, b, 2)
    exact = (a.astype(np.int64)) @ (b.astype(np.int64) - 2)
    assert (peer != exact).any()  # the emulation really saturates
    monkeypatch.setattr(compare, "run_onnxruntime", lambda m, f, names: {"y": peer})
    result = compare.compare_with_onnxruntime(model, {"a": a})
    (node,) = result.nodes
    assert node.beyond(1e-4, 1e-3)
    assert "onnxruntime is inexact here" in node.peer_note
    assert "ours equals exact integer arithmetic" in node.peer_note
    assert "onnxruntime is inexact here" in result.summary()
    # When ours is the wrong one, nothing excuses it.
    monkeypatch.setattr(
        compare, "run_onnxruntime", lambda m, f, names: {"y": exact.astype(np.int32)}
    )
    bad = compare.compare_with_onnxruntime(model, {"a": a}, {"y": peer})
    assert bad.nodes[0].beyond(1e-4, 1e-3) and bad.nodes[0].peer_note == ""


def test_run_compare_json_says_which_side_is_inexact(tmp_path, monkeypatch, capsys) -> None:
    import json

    import onnxviz.runtime.compare as compare
    from onnxviz.cli.main import main

    rng = np.random.default_rng(4)
    a = rng.integers(200, 256, (3, 8)).astype(np.uint8)
    b = rng.integers(100, 128, (8, 4)).astype(np.int8)
    path = tmp_path / "mmi.onnx"
    onnx.save(_matmul_integer_model(b), path)
    np.save(tmp_path / "a.npy", a)
    monkeypatch.setattr(
        compare, "run_onnxruntime", lambda m, f, names: {"y": _saturating_u8s8(f["a"], b, 2)}
    )
    code = main(
        [
            "run",
            str(path),
            "--input",
            f"a={tmp_path / 'a.npy'}",
            "--compare",
            "onnxruntime",
            "--json",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    (entry,) = report["compare"]["outputs"]
    assert entry["max_abs"] > 0 and "onnxruntime is inexact here" in entry["note"]
