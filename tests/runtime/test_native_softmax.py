"""The compiled row softmax (runtime/native/_softmax.c): within float32 rounding of the
float64 softmax (each row by its own maximum), the same bits at every level this CPU
has, masked (-inf) keys exactly 0, rows it cannot take (a NaN, +inf, only -inf) left to
the numpy path; the Softmax op uses it where it pays (AVX-512), so stepped and unwatched
runs agree.  Wrong buffers raise ValueError."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import math_softmax
from tests.runtime.differential import assert_modes_agree
from tests.runtime.native_modules import compiled

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
U = 2.0**-24


def _module() -> Any:
    return compiled("softmax", "Softmax runs its numpy path")


def _reference(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _assert_within_bound(y: np.ndarray, x: np.ndarray) -> None:
    """x - max rounded to float32 (half an ulp of it, which exp turns into a relative
    error of that size), each term's exp within a few ulp, the row sum within n ulp of its
    terms, one rounding for the scaling; plus the flush of terms below e^-87 (1.6e-38)."""
    ref = _reference(x)
    n = x.shape[-1]
    x64 = x.astype(np.float64)
    spread = np.abs(x64 - x64.max(axis=-1, keepdims=True))
    spread[~np.isfinite(spread)] = 0.0
    bound = (n + 8 + spread) * U * ref + 2e-38
    assert np.all(np.abs(y.astype(np.float64) - ref) <= bound)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    rows=st.integers(1, 20),
    n=st.sampled_from([1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 100, 128, 197, 300]),
    scale=st.sampled_from([0.01, 1.0, 10.0, 100.0]),
    masked=st.floats(0.0, 0.9),
    seed=st.integers(0, 2**16),
)
def test_random_rows_are_within_the_bound_with_the_same_bits_at_every_level(
    rows: int, n: int, scale: float, masked: float, seed: int
) -> None:
    module = _module()
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, n)) * scale).astype(np.float32)
    mask = rng.random((rows, n)) < masked
    mask[:, 0] = False  # every row keeps a finite value
    x[mask] = rng.choice([-np.inf, -10000.0, np.finfo(np.float32).min], size=int(mask.sum()))
    want = None
    for level in LEVELS:
        module.set_level(level)
        y = np.full_like(x, 7.0)
        assert module.softmax(x, y, n)
        if want is None:
            want = y
            _assert_within_bound(y, x)
            assert np.all(y[mask] == 0)
        np.testing.assert_array_equal(y.view(np.int32), want.view(np.int32), f"level {level}")
    module.set_level(native.cpu_level())
    in_place = x.copy()
    assert module.softmax(in_place, in_place, n)  # y may be x
    np.testing.assert_array_equal(in_place, want)


def test_tiny_shares_flush_to_zero_and_big_spreads_keep_their_rows() -> None:
    """A row far below the others (where one shift for the array would underflow it)
    keeps its own softmax; a share below e^-87 of the row's maximum is 0."""
    module = _module()
    x = np.array([[0.0, -86.0, -88.0, -200.0], [-5000.0, -5001.0, -5002.0, -5003.0]], np.float32)
    y = np.empty_like(x)
    assert module.softmax(x, y, 4)
    assert y[0, 1] > 0 and y[0, 2] == 0 and y[0, 3] == 0
    _assert_within_bound(y[1:], x[1:])
    assert abs(float(y[1].sum()) - 1.0) < 1e-6


@pytest.mark.parametrize("n", [7, 20])  # (7: AVX-512's rows of at most 16 floats)
@pytest.mark.parametrize("bad", [np.nan, np.inf, "all -inf"])
def test_rows_it_cannot_take_go_back_to_the_numpy_path(monkeypatch, bad: Any, n: int) -> None:
    module = _module()
    x = np.random.default_rng(1).standard_normal((3, n)).astype(np.float32)
    if bad == "all -inf":
        x[2] = -np.inf
    else:
        x[2, 5] = bad
    for level in LEVELS:
        module.set_level(level)
        assert not module.softmax(x, np.empty_like(x), n), level
    module.set_level(native.cpu_level())
    # The op gives exactly what the numpy path gives for the whole tensor.
    with np.errstate(all="ignore"):
        got = math_softmax.softmax(x, axis=-1)
        monkeypatch.setattr(math_softmax, "_NATIVE", None)
        want = math_softmax.softmax(x, axis=-1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got[:2], _reference(x[:2]), rtol=1e-6, atol=1e-7)


def test_wrong_buffers_raise_value_error() -> None:
    module = _module()
    x = np.zeros((2, 6), np.float32)
    with pytest.raises(ValueError):
        module.softmax(x, np.zeros((2, 5), np.float32), 6)  # another length
    with pytest.raises(ValueError):
        module.softmax(x, np.empty_like(x), 5)  # not a whole number of rows
    with pytest.raises(ValueError):
        module.softmax(x, np.empty_like(x), 0)
    with pytest.raises(ValueError):
        module.softmax(x.astype(np.float64), np.empty((2, 6)), 6)  # not float32
    with pytest.raises(ValueError):
        module.softmax(np.zeros((6, 2), np.float32).T, np.empty_like(x), 6)  # not contiguous


def test_the_op_runs_the_kernel_where_it_pays_and_modes_agree(monkeypatch) -> None:
    module = _module()
    calls: list[int] = []

    class Counting:
        def softmax(self, x: Any, y: Any, n: int) -> bool:
            calls.append(n)
            return bool(module.softmax(x, y, n))

    routed = math_softmax._NATIVE is not None
    # At AVX-512, and at AVX2 on a CPU without AVX-512 (numpy's exp is AVX2 there too);
    # not capped below AVX-512 on a CPU that has it.
    level = native.level()
    pays = level is not None and (level >= native.AVX512 or native.cpu_level() < native.AVX512)
    assert routed == pays, "the kernel runs exactly where it pays"
    if routed:
        monkeypatch.setattr(math_softmax, "_NATIVE", Counting())
    x = np.random.default_rng(2).standard_normal((1, 4, 16, 16)).astype(np.float32)
    x[..., 12:] = -np.inf  # a causal-style mask
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    stepped = assert_modes_agree(model, {"x": x})
    _assert_within_bound(stepped["y"], x)
    # stepped, fused (two runs) and plain runs
    assert calls == ([16] * 4 if routed else [])
