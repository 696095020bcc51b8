"""The held pools (native/_pool.c's `held`, kernels/nn_pool.held_pool): a MaxPool's (no
Indices) or AveragePool's specialized call, which pools a float32 channels-last image of
any size in C from the node loop.

* The calls it takes give the values of the kernel's own call on the same image (the
  same compiled pool), max and average, with and without the pads counted, at every
  level, into a new 64-byte aligned channels-last output.
* Every other call goes to the fallback: an NCHW image, another dtype or rank, windows
  past the image, other argument counts; ops it cannot take get no held call (ceil_mode,
  SAME pads, dilation, a 3-D window, MaxPool's Indices output).
* In a model: a pool after a channels-last conv chain runs it, the runs agree bit for bit,
  and the stepped run agrees (differential.assert_modes_agree).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import nn_pool
from onnxviz.runtime.registry import KernelContext, no_generator, specializer_of
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled

from .differential import assert_modes_agree

pytestmark = pytest.mark.numeric

LEVELS = native.levels()


@pytest.fixture(autouse=True)
def _kernels_on() -> Iterator[None]:
    """These tests prove the compiled calls: the kernels on at this CPU's level (a test
    may set another), even in the run with ONNXVIZ_NATIVE=off."""
    with at_level("pool", native.cpu_level()):
        yield


def _channels_last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _ctx() -> KernelContext:
    return KernelContext(1, 22, "pool", no_generator, ["y"])


def _held(op: str, attrs: dict[str, Any]) -> Any:
    """The specialized call of a one-output pool node with ``attrs``."""
    if op == "MaxPool":
        return specializer_of(nn_pool.max_pool)(attrs, (None,), 1, _ctx())  # type: ignore[misc]
    return specializer_of(nn_pool.average_pool)(attrs, (None,), 1)  # type: ignore[misc]


def _kernel(op: str, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    if op == "MaxPool":
        return nn_pool.max_pool(_ctx(), x, **attrs)[0]
    return nn_pool.average_pool(x, **attrs)


GEOMETRIES = [
    # (N, C, H, W, attrs): ResNet's stem pool, same-size 3x3/1, 2x2/2, no pads, channels
    # past and short of a block of 64, VALID
    (1, 64, 17, 17, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (2, 40, 9, 11, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    (1, 130, 8, 8, {"kernel_shape": [2, 2], "strides": [2, 2]}),
    (1, 8, 10, 7, {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [0, 1, 2, 0]}),
    (1, 3, 6, 6, {"kernel_shape": [4, 4], "auto_pad": "VALID"}),
]


@pytest.mark.parametrize("level", LEVELS)
def test_the_held_pool_gives_the_kernels_values(level):
    compiled("pool", "the numpy pools run")
    rng = np.random.default_rng(level)
    with at_level("pool", level):
        native.load("pool").set_level(level)
        for n, c, h, w, attrs in GEOMETRIES:
            x = _channels_last(rng.standard_normal((n, c, h, w)).astype(np.float32))
            x[0, 0, 1, 1] = np.nan  # a NaN propagates through max and average alike
            for op in ("MaxPool", "AveragePool"):
                # count_include_pad: an AveragePool attribute
                op_attrs = {k: v for k, v in attrs.items() if op != "MaxPool" or k[0] != "c"}
                held = _held(op, op_attrs)
                assert held is not None
                got = held(x)
                want = _kernel(op, x, op_attrs)
                assert got.shape == want.shape and got.dtype == np.float32
                assert got.transpose(0, 2, 3, 1).flags.c_contiguous, (op, op_attrs)
                assert got.ctypes.data % 64 == 0
                np.testing.assert_array_equal(got, want)


def test_every_call_it_does_not_take_goes_to_the_fallback():
    compiled("pool", "the numpy pools run")
    rng = np.random.default_rng(5)
    x = _channels_last(rng.standard_normal((1, 16, 6, 6)).astype(np.float32))
    attrs = {"kernel_shape": [3, 3]}
    calls: list[tuple[Any, ...]] = []

    def fallback(*args: Any, **kw: Any) -> str:
        calls.append(args)
        return "fallback"

    held = nn_pool.held_pool(attrs, False, fallback)
    assert held(x).shape == (1, 16, 4, 4)
    tiny = _channels_last(rng.standard_normal((1, 16, 2, 6)).astype(np.float32))
    for args in [
        (np.ascontiguousarray(x),),  # NCHW
        (x.astype(np.float64),),
        (x[0],),  # 3-D
        (tiny,),  # windows past the image
        (x, x),
        (x.tolist(),),
    ]:
        assert held(*args) == "fallback"
        got = calls.pop()
        assert len(got) == len(args) and all(a is b for a, b in zip(got, args))
    assert held(x=x) == "fallback"


def test_ops_it_cannot_take_get_no_held_call():
    compiled("pool", "the numpy pools run")
    base = {"kernel_shape": [3, 3]}
    for attrs in [
        {**base, "ceil_mode": 1},
        {**base, "auto_pad": "SAME_UPPER"},
        {**base, "dilations": [2, 2]},
        {"kernel_shape": [3, 3, 3]},
        {**base, "pads": [0, 0, -1, 0]},
    ]:
        assert _held("MaxPool", attrs) is None, attrs
        assert _held("AveragePool", attrs) is None, attrs
    maker = specializer_of(nn_pool.max_pool)
    assert maker is not None and maker(base, (None,), 2, _ctx()) is None  # Indices
    with at_level("pool", None):
        assert _held("MaxPool", base) is None  # kernels off


def _model(rng: np.random.Generator) -> tuple[Any, dict[str, np.ndarray]]:
    """A channels-last conv chain, then MaxPool and AveragePool of its output."""
    c = 24
    w1 = numpy_helper.from_array((rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("Conv", ["ar", "w2"], ["b"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Relu", ["b"], ["br"]),
        helper.make_node(
            "MaxPool", ["br"], ["m"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4
        ),
        helper.make_node("AveragePool", ["br"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Add", ["m", "p"], ["y"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "pools",
        [helper.make_tensor_value_info("x", f, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", f, None)],
        [w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}


def test_a_model_runs_the_held_pools():
    compiled("pool", "the numpy pools run")
    model, feeds = _model(np.random.default_rng(9))
    session = Session(model)
    first = session.run(feeds)["y"]
    calls = {pn.op_type: pn.call for pn in run_nodes(session.plan) if pn.kind == "kernel"}
    for op in ("MaxPool", "AveragePool"):
        assert type(calls[op]).__name__ == "Held", (op, calls[op])
    for _ in range(2):
        np.testing.assert_array_equal(session.run(feeds)["y"], first)
    assert math.isfinite(float(np.abs(first).sum()))
    assert_modes_agree(model, feeds)


def test_a_spatial_mean_runs_the_pool_kernel_and_then_its_held_call():
    """A GlobalAveragePool of a channels-last value (fusion_layout.SpatialMean): the
    compiled pool with the whole image as its window on the first run, its held call
    (a (0, 0) window) from the next, the same values; within float32 rounding of the
    float64 mean; the stepped run agrees."""
    compiled("pool", "the numpy pools run")
    rng = np.random.default_rng(12)
    c = 40
    w1 = numpy_helper.from_array((rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32), "w1")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("GlobalAveragePool", ["ar"], ["g"]),
        helper.make_node("Flatten", ["g"], ["y"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "mean",
        [helper.make_tensor_value_info("x", f, [2, 3, 13, 11])],
        [helper.make_tensor_value_info("y", f, None)],
        [w1],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((2, 3, 13, 11)).astype(np.float32)}
    session = Session(model)
    first = session.run(feeds)
    means = [pn.fused for pn in run_nodes(session.plan) if pn.kind == "fused"]
    mean = next(m for m in means if type(m).__name__ == "SpatialMean")
    assert type(mean.quick).__name__ == "Held"
    for _ in range(2):
        np.testing.assert_array_equal(session.run(feeds)["y"], first["y"])
    ar = np.asarray(assert_modes_agree(model, feeds)["ar"], np.float64)  # the stepped run's
    exact = ar.mean(axis=(2, 3))
    bound = (13 * 11 + 1) * 2.0**-24 * np.abs(ar).mean(axis=(2, 3))
    assert (np.abs(first["y"] - exact) <= bound + 1e-6 * np.abs(exact).max()).all()
    # The held mean: any size of channels-last image; other layouts and dtypes decline.
    declined: list[Any] = []
    held = nn_pool.held_spatial_mean(lambda *a: declined.append(a) or "fallback")
    x = _channels_last(rng.standard_normal((1, 70, 5, 9)).astype(np.float32))
    got = held(x)
    assert got.shape == (1, 70, 1, 1)
    np.testing.assert_array_equal(got, nn_pool.spatial_mean(x))
    for bad in (np.ascontiguousarray(x), x.astype(np.float64)):
        assert held(bad) == "fallback"
    assert len(declined) == 2
