"""The compiled few-channel 1x1 conv into NCHW planes (runtime/native/_pointwise.c), at
every instruction-set level this machine has, against the float64 product: each output
is the bias plus C products summed in order, so within (C + 2) * 2^-24 of the terms'
magnitudes.  A fused chain's NCHW exit with few output channels (a UNet's mask head) runs
it, and gives the stepped run's numbers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import nn_conv_nhwc
from tests.runtime.differential import assert_modes_agree
from tests.runtime.native_modules import compiled

pytestmark = pytest.mark.numeric

U = 2.0**-24


@pytest.fixture
def pointwise() -> Any:
    module = compiled("pointwise", "a few-channel 1x1 conv's exit runs the packed GEMM")
    before = module.level()
    yield module
    module.set_level(before)


def _within_bound(out: np.ndarray, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> None:
    """out [n, M, P] against x [n, P, C], w [M, C] and bias [M] in float64."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want = np.einsum("npc,mc->nmp", x64, w64)
    mags = np.einsum("npc,mc->nmp", np.abs(x64), np.abs(w64))
    if bias is not None:
        want += bias.astype(np.float64)[None, :, None]
        mags += np.abs(bias.astype(np.float64))[None, :, None]
    bound = (x.shape[2] + 2) * U * mags
    err = np.abs(out.astype(np.float64) - want)
    assert np.all(err <= bound), f"worst error/bound {float(np.max(err / (bound + 1e-300))):.3g}"


@pytest.mark.parametrize("level", native.levels())
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    n=st.integers(1, 2),
    P=st.integers(1, 70),  # 8-pixel blocks and the rest
    C=st.integers(1, 40),  # 8-channel blocks and the masked rest
    M=st.integers(1, 8),
    with_bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_shapes_are_the_product(
    pointwise: Any, level: int, n: int, P: int, C: int, M: int, with_bias: bool, seed: int
) -> None:
    assert pointwise.set_level(level) == level
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, P, C)).astype(np.float32)
    w = rng.standard_normal((M, C)).astype(np.float32)
    bias = rng.standard_normal(M).astype(np.float32) if with_bias else None
    out = np.full((n, M, P), np.nan, np.float32)
    pointwise.planes(x, w, bias, out, n, P, C, M)
    _within_bound(out, x, w, bias)


def test_the_bound_catches_one_wrong_weight(pointwise: Any) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 40, 16)).astype(np.float32)
    w = rng.standard_normal((2, 16)).astype(np.float32)
    out = np.empty((1, 2, 40), np.float32)
    pointwise.planes(x, w, None, out, 1, 40, 16, 2)
    _within_bound(out, x, w, None)
    wrong = w.copy()
    wrong[1, 9] += 1e-3
    with pytest.raises(AssertionError, match="worst error/bound"):
        _within_bound(out, x, wrong, None)


def test_wrong_sizes_raise_value_error(pointwise: Any) -> None:
    x = np.zeros((1, 10, 4), np.float32)
    w = np.zeros((2, 4), np.float32)
    out = np.zeros((1, 2, 10), np.float32)
    pointwise.planes(x, w, None, out, 1, 10, 4, 2)
    for args in (
        (x, w, None, out, 1, 11, 4, 2),  # x too short
        (x, w[:1], None, out, 1, 10, 4, 2),
        (x, w, np.zeros(3, np.float32), out, 1, 10, 4, 2),
        (x, w, None, out[:, :1], 1, 10, 4, 2),
        (x, w, None, out, 1, 10, 4, 9),  # more than 8 outputs
        (x, w, None, out, 1, 10, 0, 2),
        (x.astype(np.float64), w, None, out, 1, 10, 4, 2),
    ):
        with pytest.raises(ValueError):
            pointwise.planes(*args)
    with pytest.raises(BufferError):  # out must be writable
        pointwise.planes(x, w, None, out.tobytes(), 1, 10, 4, 2)


def _head_model(c: int, m: int, size: int) -> tuple[Any, dict[str, np.ndarray]]:
    """3x3 conv -> Relu -> depthwise 3x3 -> Relu -> 1x1 conv of ``m`` channels, the graph's
    output: the depthwise conv keeps the chain channels-last up to the head, whose NCHW
    output ends it (a UNet's last block and mask head)."""
    rng = np.random.default_rng([c, m, size])
    w1 = (rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((c, 1, 3, 3)) * 0.3).astype(np.float32)
    w3 = (rng.standard_normal((m, c, 1, 1)) * 0.3).astype(np.float32)
    b3 = rng.standard_normal(m).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("Conv", ["ar", "w2"], ["d"], pads=[1, 1, 1, 1], group=c),
        helper.make_node("Relu", ["d"], ["dr"]),
        helper.make_node("Conv", ["dr", "w3", "b3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(v, k)
            for k, v in (("w1", w1), ("w2", w2), ("w3", w3), ("b3", b3))
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


@pytest.mark.parametrize(("c", "m", "size"), [(16, 2, 24), (12, 1, 17), (24, 8, 9), (16, 9, 16)])
def test_a_mask_head_writes_its_planes_and_agrees_in_every_mode(
    monkeypatch: Any, pointwise: Any, c: int, m: int, size: int
) -> None:
    pointwise.set_level(native.cpu_level())
    calls: list[int] = []

    class Counting:
        def planes(self, *args: Any) -> None:
            calls.append(args[7])
            pointwise.planes(*args)

    monkeypatch.setattr(nn_conv_nhwc, "_POINTWISE", Counting())
    model, feeds = _head_model(c, m, size)
    y = assert_modes_agree(model, feeds)["y"]
    assert y.shape == (1, m, size, size)
    # the head ran the planes kernel in the unwatched runs (up to 8 channels only)
    assert bool(calls) == (m <= nn_conv_nhwc.PLANES_MAX_OUT)
    assert all(k == m for k in calls)
