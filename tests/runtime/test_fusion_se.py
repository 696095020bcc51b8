"""A squeeze-excite block as one node (runtime/fusion_se.py, native/_channels.c ``gate``).

* The compiled gate at every level against the block's definition in float64: within the
  stated bound of its sums, and the same bits at every level; wrong buffers raise.
* The fusion: a MobileNetV3 SE block (ReduceMean at opsets 17 and 18, or
  GlobalAveragePool; the Mul either way round) on a channels-last value runs as one
  SEGate node, keeps the layout for the convs after it, and gives the stepped run's
  numbers.  What it does not take runs the six nodes (float64, an NCHW input, a
  HardSigmoid read elsewhere, the kernels off), with the same results as the stepped run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled
from tests.runtime.test_channels_last import _Net

from .differential import assert_modes_agree

pytestmark = pytest.mark.numeric

U = 2.0**-24


def _gamma(k: int) -> float:
    return k * U / (1 - k * U)


def _reference(
    x: np.ndarray,
    w1t: np.ndarray,
    b1: np.ndarray,
    w2t: np.ndarray,
    b2: np.ndarray,
    a: float,
    b: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(the gate g per image (N, C), out) in float64 from x (N, rows, C)."""
    m = x.astype(np.float64).mean(axis=1)
    h = np.maximum(m @ w1t.astype(np.float64) + b1, 0)
    g = np.clip((h @ w2t.astype(np.float64) + b2) * np.float32(a) + np.float32(b), 0, 1)
    return g, x * g[:, None, :]


@pytest.mark.parametrize(
    "shape", [(1, 3136, 16, 8), (2, 49, 576, 144), (1, 7, 13, 3), (3, 1, 5, 1)]
)
def test_the_gate_is_within_its_bound_and_the_same_at_every_level(shape: tuple[int, ...]) -> None:
    module = compiled("channels")
    n, rows, c, r = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((n, rows, c)).astype(np.float32)
    w1t = (rng.standard_normal((c, r)) / np.sqrt(c)).astype(np.float32)
    b1 = rng.standard_normal(r).astype(np.float32)
    w2t = (rng.standard_normal((r, c)) / np.sqrt(r)).astype(np.float32)
    b2 = rng.standard_normal(c).astype(np.float32)
    alpha, beta = 1 / 6, 0.5
    g, want = _reference(x, w1t, b1, w2t, b2, alpha, beta)
    # Error propagation through the three sums (each within gamma(K) of its terms'
    # absolute sum), the Relu and HardSigmoid (1-Lipschitz, times alpha), and the
    # last multiply: a bound on |g - exact| per channel, then on out.
    ax = np.abs(x.astype(np.float64))
    err_m = _gamma(rows + 1) * ax.mean(axis=1)
    m = x.astype(np.float64).mean(axis=1)
    h_terms = np.abs(m) @ np.abs(w1t) + np.abs(b1)
    err_h = err_m @ np.abs(w1t) + _gamma(c + 1) * (h_terms + err_m @ np.abs(w1t))
    h = np.maximum(m @ w1t + b1, 0)
    g_terms = (np.abs(h) + err_h) @ np.abs(w2t) + np.abs(b2)
    err_g = alpha * (err_h @ np.abs(w2t) + _gamma(r + 1) * g_terms) + 4 * U
    bound = ax * (err_g[:, None, :] + U * (g[:, None, :] + err_g[:, None, :]))
    outs = []
    for level in native.levels():
        with at_level("channels", level):
            out = np.full_like(x, np.nan)
            module.gate(x, w1t, b1, w2t, b2, out, shape, alpha, beta)
        assert np.all(np.abs(out - want) <= bound + 1e-30), level
        outs.append(out)
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])


def test_the_gate_checks_its_buffers() -> None:
    module = compiled("channels")
    x = np.zeros((1, 4, 3), np.float32)
    w1t, b1 = np.zeros((3, 2), np.float32), np.zeros(2, np.float32)
    w2t, b2 = np.zeros((2, 3), np.float32), np.zeros(3, np.float32)
    out = np.zeros_like(x)
    module.gate(x, w1t, b1, w2t, b2, out, (1, 4, 3, 2), 0.2, 0.5)
    for bad in (
        (x.astype(np.float64), w1t, b1, w2t, b2, out, (1, 4, 3, 2)),
        (x, w1t, b1, w2t, b2, out, (1, 4, 3, 3)),  # w1t too small for R = 3
        (x, w1t, b1, w2t, b2, out.view(np.int32), (1, 4, 3, 2)),
        (x, w1t, b1, w2t, b2, np.zeros((1, 4, 3), np.float32)[:, ::2], (1, 4, 3, 2)),
        (x, w1t, b1, w2t, b2, out, (0, 4, 3, 2)),
    ):
        with pytest.raises(ValueError):
            module.gate(*bad, 0.2, 0.5)
    readonly = np.zeros_like(x)
    readonly.flags.writeable = False
    with pytest.raises(ValueError):
        module.gate(x, w1t, b1, w2t, b2, readonly, (1, 4, 3, 2), 0.2, 0.5)


def _se_model(
    opset: int = 17, pool: str = "ReduceMean", gate_first: bool = False, dtype: Any = np.float32
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], _Net]:
    """A depthwise conv (its output channels-last), an SE block on it, and a pointwise
    conv after (MobileNetV3's order)."""
    net = _Net(np.random.default_rng(7))
    net.opset = opset
    net.shapes["x"] = (1, 24, 14, 14)
    y = net.conv("x", 24, k=5, group=24)
    y = net.add("HardSwish", [y], net.shapes[y])
    s = (
        net.mean(y, [2, 3], keepdims=1)
        if pool == "ReduceMean"
        else net.add(pool, [y], (1, 24, 1, 1))
    )
    s = net.add("Relu", [net.conv(s, 8)], (1, 8, 1, 1))
    s = net.add("HardSigmoid", [net.conv(s, 24)], (1, 24, 1, 1), alpha=1 / 6, beta=0.5)
    y = net.add("Mul", [s, y] if gate_first else [y, s], net.shapes[y])
    y = net.conv(y, 16)
    model = net.model((1, 24, 14, 14), y)
    feeds = {"x": np.random.default_rng(3).standard_normal((1, 24, 14, 14)).astype(np.float32)}
    if dtype != np.float32:
        for init in model.graph.initializer:
            init.CopyFrom(
                onnx.numpy_helper.from_array(
                    onnx.numpy_helper.to_array(init).astype(dtype), init.name
                )
            )
        for v in (*model.graph.input, *model.graph.output):
            v.type.tensor_type.elem_type = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        feeds = {k: v.astype(dtype) for k, v in feeds.items()}
    return model, feeds, net


def _fused(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[str]:
    sess = Session(model)
    sess.run(feeds)
    return [type(pn.fused).__name__ for pn in run_nodes(sess.plan) if pn.kind == "fused"]


@pytest.mark.parametrize(
    ("opset", "pool", "gate_first"),
    [(17, "ReduceMean", False), (18, "ReduceMean", True), (17, "GlobalAveragePool", True)],
)
def test_an_se_block_runs_as_one_node_with_the_stepped_numbers(
    opset: int, pool: str, gate_first: bool
) -> None:
    model, feeds, _ = _se_model(opset, pool, gate_first)
    fused = _fused(model, feeds)
    assert fused.count("SEGate") == 1, fused
    assert_modes_agree(model, feeds)
    # The kernels off: the same node runs the six nodes, the same numbers again.
    with at_level("channels", None):
        assert_modes_agree(model, feeds)


def test_what_the_gate_does_not_take_runs_the_nodes() -> None:
    # float64: the node is made (the plan does not know dtypes) and runs the steps.
    model, feeds, _ = _se_model(dtype=np.float64)
    assert "SEGate" in _fused(model, feeds)
    assert_modes_agree(model, feeds)
    # A gate read by another node too is not the block's own: no SEGate.
    model, feeds, net = _se_model()
    gate = next(n for n in model.graph.node if n.op_type == "HardSigmoid").output[0]
    model.graph.output.append(helper.make_tensor_value_info(gate, onnx.TensorProto.FLOAT, None))
    assert "SEGate" not in _fused(model, feeds)
    assert_modes_agree(model, feeds)
    # The block on the graph's input, an NCHW array: the node runs the steps.
    net = _Net(np.random.default_rng(8))
    net.shapes["x"] = (1, 16, 6, 6)
    s = net.mean("x", [2, 3], keepdims=1)
    s = net.add("Relu", [net.conv(s, 8)], (1, 8, 1, 1))
    s = net.add("HardSigmoid", [net.conv(s, 16)], (1, 16, 1, 1), alpha=0.2, beta=0.5)
    y = net.add("Mul", ["x", s], (1, 16, 6, 6))
    model = net.model((1, 16, 6, 6), y)
    feeds = {"x": np.random.default_rng(4).standard_normal((1, 16, 6, 6)).astype(np.float32)}
    assert "SEGate" in _fused(model, feeds)
    stepped = assert_modes_agree(model, feeds)
    np.testing.assert_array_equal(Session(model).run(feeds)[y], stepped[y])  # the nodes' bits


def test_kept_weights_serve_only_the_channels_they_were_made_for() -> None:
    """A later input of other channels than the kept weight forms does not get them: the
    six nodes run and name the mismatch."""
    from onnxviz.runtime.fusion_se import SEGate

    model, feeds, _ = _se_model()
    sess = Session(model)
    sess.run(feeds)
    gate = next(pn.fused for pn in run_nodes(sess.plan) if type(pn.fused) is SEGate)
    ins = [np.ones(1, np.float32)] * (max(gate.weight_places) + 1)
    for place, value in zip(gate.weight_places, gate._prepared[0]):  # type: ignore[index]
        ins[place] = value
    assert gate._weights(ins, 24) is not None
    assert gate._weights(ins, 16) is None
