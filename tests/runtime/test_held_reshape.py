"""A Reshape node's call in C (native/_runloop.c's `reshape`, tensor_shape.py's specializer
with the compiled loop built): the kernel's output, view or copy, for every target the
kernel takes, the kernel's own error for every one it refuses, and its kept sizes never
read for another target or input shape (issue 21)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxviz.errors import ExecutionError
from onnxviz.runtime import quiet_loop
from onnxviz.runtime.kernels.tensor_shape import reshape

from .native_modules import compiled

pytestmark = pytest.mark.numeric


def _held(allowzero: bool) -> tuple[Any, list[Any]]:
    module = compiled("runloop", "the specializer's Python call runs")
    module.setup(np.ndarray, quiet_loop._normalize_one)
    calls: list[Any] = []

    def fallback(data: Any, target: Any) -> Any:
        calls.append((data, target))
        return reshape(data, target, allowzero=int(allowzero))

    return module.reshape(fallback, allowzero), calls


def _kernel(data: np.ndarray, target: Any, allowzero: bool) -> Any:
    try:
        return reshape(data, target, allowzero=int(allowzero))
    except ExecutionError as exc:
        return exc


@st.composite
def cases(draw: Any) -> tuple[np.ndarray, np.ndarray, bool]:
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    if data.ndim >= 2 and draw(st.booleans()):
        data = data.swapaxes(0, -1)  # a view: reshape copies where it cannot view
    dims = [int(np.prod(data.shape))] if draw(st.booleans()) else list(data.shape)
    if len(dims) > 1 and draw(st.booleans()):
        dims = [dims[0] * dims[1], *dims[2:]]
    target = draw(
        st.one_of(
            st.just(dims),
            st.lists(st.integers(-2, 6), min_size=0, max_size=5),  # mostly refused
            st.just([*dims[:-1], -1] if dims else [-1]),
            st.just([0, *dims[1:]] if dims else [0]),
        )
    )
    arr = np.array(target, np.int64)
    if draw(st.booleans()):
        arr.flags.writeable = False
    return data, arr, draw(st.booleans())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_held_call_gives_the_kernels_view_or_error(case: Any) -> None:
    data, target, allowzero = case
    held, calls = _held(allowzero)
    want = _kernel(data, target, allowzero)
    for _ in range(2):  # the second call reads the kept sizes of a frozen target
        if isinstance(want, ExecutionError):
            with pytest.raises(ExecutionError, match="Reshape"):
                held(data, target)
            continue
        got = held(data, target)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        assert np.shares_memory(got, data) == np.shares_memory(want, data)
    if not isinstance(want, ExecutionError):
        assert not calls  # every call it takes it makes itself


def test_kept_sizes_follow_the_target_and_the_input_shape() -> None:
    held, calls = _held(False)
    target = np.array([0, -1], np.int64)
    target.flags.writeable = False
    a = np.zeros((2, 3, 4), np.float32)
    assert held(a, target).shape == (2, 12)
    assert held(a, target).shape == (2, 12)
    assert held.kept is target  # frozen: kept
    assert held(np.zeros((3, 2, 2)), target).shape == (3, 4)  # another input shape
    other = np.array([4, -1], np.int64)
    other.flags.writeable = False
    assert held(a, other).shape == (4, 6) and held.kept is other
    live = np.array([6, -1], np.int64)  # writable: read every call, never kept
    assert held(a, live).shape == (6, 4) and held.kept is other
    live[0] = 8
    assert held(a, live).shape == (8, 3)
    base = np.array([12, 2], np.int64)
    view = base[:]
    view.flags.writeable = False  # read-only, but its owner can change it: not kept
    assert held(a, view).shape == (12, 2) and held.kept is other
    assert not calls
    # Anything but two ndarrays, an int32 or 2-D target, keywords: the kernel's call.
    assert held(a, [2, 12]).shape == (2, 12)
    assert held(a, np.array([2, 12], np.int32)).shape == (2, 12)
    assert held(a, np.array([[2, 12]], np.int64)).shape == (2, 12)
    assert held(data=a, target=target).shape == (2, 12)
    assert len(calls) == 4
