"""The held concat (native/_channels.c's `held_concat`): a channels-last Concat's call
(fusion_layout.ChannelsLastConcat) made in C from the node loop from its second run.

* The calls it takes give the node's own copies bit for bit: float32 inputs of one image
  count and size, each channels-last or C-contiguous NCHW, one at least channels-last,
  into a new aligned channels-last output.
* Every other call goes to the fallback: no channels-last input, another dtype, sizes or
  rank that differ, another input count, a strided input.
* In a model: an Inception-like block's Concat makes it on its first run, the next runs
  give the first run's bits, and the stepped run agrees.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.fusion_layout import ChannelsLastConcat
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled

from .differential import assert_modes_agree

pytestmark = pytest.mark.numeric


@pytest.fixture(autouse=True)
def _kernels_on() -> Iterator[None]:
    """These tests prove the compiled call: the kernels on at this CPU's level, even in
    the run with ONNXVIZ_NATIVE=off."""
    with at_level("channels", native.cpu_level()):
        yield


def _channels_last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _held(count: int) -> tuple[Any, list[tuple[Any, ...]]]:
    calls: list[tuple[Any, ...]] = []

    def fallback(*args: Any, **kw: Any) -> str:
        calls.append(args)
        return "fallback"

    module = compiled("channels", "numpy's concatenate runs")
    held = module.held_concat(
        count, fallback, np.ndarray, np.empty, np.dtype(np.uint8), np.dtype(np.float32)
    )
    return held, calls


def test_the_calls_it_takes_give_the_nodes_copies():
    rng = np.random.default_rng(1)
    for n, h, w in [(1, 7, 9), (2, 5, 4)]:
        a = _channels_last(rng.standard_normal((n, 8, h, w)).astype(np.float32))
        b = rng.standard_normal((n, 3, h, w)).astype(np.float32)  # NCHW
        c = _channels_last(rng.standard_normal((n, 21, h, w)).astype(np.float32))
        held, calls = _held(3)
        got = held(a, b, c)
        want = np.concatenate([a, b, c], axis=1)
        np.testing.assert_array_equal(got, want)
        assert got.transpose(0, 2, 3, 1).flags.c_contiguous
        assert got.ctypes.data % 64 == 0 and not calls


def test_every_call_it_does_not_take_goes_to_the_fallback():
    rng = np.random.default_rng(2)
    a = _channels_last(rng.standard_normal((1, 8, 6, 6)).astype(np.float32))
    nchw = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    held, calls = _held(2)
    wide = _channels_last(rng.standard_normal((1, 8, 6, 12)).astype(np.float32))
    for args in [
        (nchw, nchw),  # no channels-last input: the node's kernel, an NCHW result
        (a, nchw.astype(np.float64)),
        (a, rng.standard_normal((1, 4, 6, 5)).astype(np.float32)),  # another width
        (a, rng.standard_normal((2, 4, 6, 6)).astype(np.float32)),  # another count
        (a, nchw[0]),  # 3-D
        (a, wide[..., ::2]),  # strided
        (a,),
        (a, nchw, nchw),
    ]:
        assert held(*args) == "fallback"
        got = calls.pop()
        assert len(got) == len(args) and all(x is y for x, y in zip(got, args))


def _model(rng: np.random.Generator) -> tuple[Any, dict[str, np.ndarray]]:
    """A conv whose channels-last output feeds two 1x1 convs, concatenated, then a 3x3."""

    def weight(name: str, shape: tuple[int, ...]) -> Any:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("Conv", ["ar", "w1"], ["b1"], kernel_shape=[1, 1]),
        helper.make_node("Conv", ["ar", "w2"], ["b2"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Concat", ["b1", "b2", "ar"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "w3"], ["y"], kernel_shape=[3, 3], pads=[1] * 4),
    ]
    inits = [
        weight("w0", (16, 3, 3, 3)),
        weight("w1", (8, 16, 1, 1)),
        weight("w2", (24, 16, 3, 3)),
        weight("w3", (12, 48, 3, 3)),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "concat",
        [helper.make_tensor_value_info("x", f, [1, 3, 12, 12])],
        [helper.make_tensor_value_info("y", f, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}


def test_a_model_runs_the_held_concat_after_its_first_run():
    compiled("channels", "numpy's concatenate runs")
    model, feeds = _model(np.random.default_rng(3))
    session = Session(model)
    first = session.run(feeds)["y"]
    concats = [
        pn.fused
        for pn in run_nodes(session.plan)
        if pn.kind == "fused" and isinstance(pn.fused, ChannelsLastConcat)
    ]
    assert len(concats) == 1 and type(concats[0].quick).__name__ == "HeldConcat"
    for _ in range(2):
        np.testing.assert_array_equal(session.run(feeds)["y"], first)
    assert_modes_agree(model, feeds)
