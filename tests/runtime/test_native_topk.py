"""The compiled TopK (runtime/native/_topk.c) against the numpy path of the TopK kernel.

TopK's order (kernels/tensor_misc.py): with largest, greater values first, else smaller;
NaN above every number; equal values (and NaNs) by lower position.  The compiled heap
only compares, so it must give the numpy path's values and positions exactly, for every
shape, axis and k, with NaN, infinities, signed zeros and ties in the rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import tensor_misc
from tests.runtime.native_modules import compiled

from .differential import assert_stepped_bits

pytestmark = pytest.mark.numeric


def _both(monkeypatch: Any, x: np.ndarray, k: int, axis: int, largest: int) -> None:
    """The compiled path and the numpy path give the same values and positions."""
    monkeypatch.setattr(tensor_misc, "_TOPK", compiled("topk"))
    got = tensor_misc._topk(x, k, axis, largest, 1)
    monkeypatch.setattr(tensor_misc, "_TOPK", None)
    want = tensor_misc._topk(x, k, axis, largest, 1)
    for have, ref in zip(got, want, strict=True):
        assert have.dtype == ref.dtype and have.shape == ref.shape
        assert have.tobytes() == ref.tobytes()  # NaN payloads and zero signs included


_SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0], np.float32)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    st.lists(st.integers(1, 5), min_size=0, max_size=2),
    st.integers(1, 70),
    st.integers(0, 3),
    st.integers(0, 2**16),
    st.data(),
)
def test_the_heap_gives_the_numpy_paths_values_and_positions(
    monkeypatch: Any, outer: list[int], n: int, kind: int, seed: int, data: Any
) -> None:
    rng = np.random.default_rng(seed)
    shape = (*outer, n)
    x = rng.standard_normal(shape).astype(np.float32)
    if kind == 1:  # many ties
        x = np.round(x * 2).astype(np.float32)
    elif kind == 2:  # a few special values
        x.reshape(-1)[rng.integers(0, x.size, size=3)] = rng.choice(_SPECIAL, 3)
    elif kind == 3:  # only special values
        x = rng.choice(_SPECIAL, size=shape)
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    k = data.draw(st.integers(0, x.shape[axis]))
    _both(monkeypatch, x, k, axis, data.draw(st.integers(0, 1)))


def test_a_long_row_keeps_its_k_best(monkeypatch: Any) -> None:
    """[8, 1000] with k = 10 (a classifier's top 10), a row of one repeated value, and
    k = n (a whole sort)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 1000)).astype(np.float32)
    x[3] = 0.5
    x[5, ::7] = np.nan
    for k in (1, 10, 1000):
        for largest in (0, 1):
            _both(monkeypatch, x, k, -1, largest)


@pytest.mark.parametrize(("n", "k"), [(16, 10), (24, 6), (32, 31), (8, 2), (33, 20), (40, 1)])
def test_every_level_gives_the_same_answer(monkeypatch: Any, n: int, k: int) -> None:
    """Short rows keeping a quarter or more rank every value (the counts vectorized per
    level), the others take the heap: the numpy path's answer at every level."""
    module = compiled("topk")
    rng = np.random.default_rng(n * 100 + k)
    x = np.round(rng.standard_normal((300, n)) * 3).astype(np.float32)  # many ties
    x.reshape(-1)[rng.integers(0, x.size, size=40)] = rng.choice(_SPECIAL, 40)
    saved = module.level()
    try:
        for level in native.levels():
            module.set_level(level)
            for largest in (0, 1):
                _both(monkeypatch, x, k, -1, largest)
    finally:
        module.set_level(saved)


def test_the_module_checks_its_buffers() -> None:
    module = compiled("topk")
    x = np.zeros((2, 5), np.float32)
    values, positions = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int64)
    module.topk(x, values, positions, 2, 5, 3, True)
    for bad in (
        (x, values, positions, 2, 5, 0, True),  # k = 0
        (x, values, positions, 2, 5, 6, True),  # k > n
        (x, values, positions, 3, 5, 3, True),  # x too small
        (x.astype(np.float64), values, positions, 2, 5, 3, True),
        (x, values, positions.astype(np.int32), 2, 5, 3, True),
        (x, values[:, :2], positions, 2, 5, 3, True),
    ):
        with pytest.raises(ValueError):
            module.topk(*bad)
    readonly = np.zeros((2, 3), np.int64)
    readonly.setflags(write=False)
    with pytest.raises((ValueError, BufferError)):
        module.topk(x, values, readonly, 2, 5, 3, True)


def test_a_topk_node_runs_it_in_every_mode(monkeypatch: Any) -> None:
    """A TopK node (opset 11, k as an input, on axis 1) takes the compiled path and gives
    the stepped run's values and positions in unwatched runs."""
    calls: list[int] = []
    module = native.load("topk")

    class Counted:
        def topk(self, *args: Any) -> None:
            calls.append(1)
            assert module is not None
            module.topk(*args)

    monkeypatch.setattr(tensor_misc, "_TOPK", None if module is None else Counted())
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=0)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(4).standard_normal((3, 50, 4)).astype(np.float32)
    x[1, 7, 2] = np.nan
    _, got = assert_stepped_bits(model, {"x": x, "k": np.array([6], np.int64)})
    order = np.argsort(x, axis=1, kind="stable")[:, :6]
    np.testing.assert_array_equal(got["i"], order)
    assert bool(calls) == (module is not None)
