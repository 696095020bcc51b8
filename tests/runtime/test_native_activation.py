"""The compiled in-place activation (runtime/native/_activation.c) against the numpy
kernels it stands in for, at every level this CPU has: Relu (relu_into), Clip (clip_into,
with and without each bound) and HardSwish (the HardSwish kernel), on lengths around the
vector widths and values with NaN, infinities and signed zeros; the same values (NaN
where numpy gives NaN).  Wrong buffers raise ValueError; the fused conv's
activate_in_place gives the same numbers with the module on and off."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxviz.runtime import native
from onnxviz.runtime.kernels.math_activation import clip_into, hard_swish, relu_into
from onnxviz.runtime.kernels.nn_conv import ACT_CLIP, ACT_HARDSWISH, ACT_RELU
from onnxviz.runtime.kernels.nn_conv_nhwc import activate_in_place
from tests.runtime.native_modules import compiled

pytestmark = pytest.mark.numeric

NAN = math.nan
LEVELS = native.levels()


def _module() -> Any:
    return compiled("activation")


def _values(size: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(size) * 4).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -3.0, 3.0, 6.0], np.float32)
    x[rng.integers(0, size, size // 4 + 1) % size] = rng.choice(special, size // 4 + 1)
    return x


def _numpy(x: np.ndarray, act: int, lo: float, hi: float) -> np.ndarray:
    y = x.copy()
    if act == ACT_RELU:
        relu_into(y, y)
    elif act == ACT_CLIP:
        clip_into(y, None if math.isnan(lo) else lo, None if math.isnan(hi) else hi, y)
    else:  # the HardSwish kernel's numpy steps (the kernel itself runs this module now)
        gate = y * (1.0 / 6.0)
        gate += 0.5
        np.clip(gate, 0, 1, out=gate)
        gate *= y
        y = gate
    return y


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(
    size=st.sampled_from([1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1000, 4099]),
    act=st.sampled_from([ACT_RELU, ACT_CLIP, ACT_HARDSWISH]),
    lo=st.sampled_from([NAN, 0.0, -1.5]),
    hi=st.sampled_from([NAN, 6.0, 0.25]),
    seed=st.integers(0, 2**16),
)
def test_every_level_gives_the_numpy_kernels_values(
    size: int, act: int, lo: float, hi: float, seed: int
) -> None:
    module = _module()
    x = _values(size, seed)
    with np.errstate(all="ignore"):
        want = _numpy(x, act, lo, hi)
    for level in LEVELS:
        module.set_level(level)
        got = x.copy()
        module.activate(got, act, lo, hi)
        np.testing.assert_array_equal(got, want, err_msg=f"level {level}")  # NaN == NaN here


@pytest.mark.parametrize(
    ("buf", "act"),
    [
        (np.zeros(8, np.float64), ACT_RELU),  # not float32
        (np.zeros(8, np.int32), ACT_RELU),
        (np.zeros(8, np.float32), 0),  # no activation
        (np.zeros(8, np.float32), 4),
        (b"\0" * 32, ACT_RELU),  # read-only
    ],
)
def test_a_wrong_buffer_or_code_raises(buf: Any, act: int) -> None:
    module = _module()
    with pytest.raises((ValueError, BufferError, TypeError)):
        module.activate(buf, act, NAN, NAN)


def test_a_strided_or_read_only_array_raises() -> None:
    module = _module()
    with pytest.raises((ValueError, BufferError)):
        module.activate(np.zeros(16, np.float32)[::2], ACT_RELU, NAN, NAN)
    frozen = np.zeros(8, np.float32)
    frozen.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        module.activate(frozen, ACT_RELU, NAN, NAN)


@pytest.mark.parametrize("shape", [(1, 24, 9, 9), (2, 7, 5, 3), (1, 16, 1, 1)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_a_fused_convs_hardswish_is_the_same_with_the_module_on_and_off(
    shape: tuple[int, ...], channels_last: bool
) -> None:
    _module()
    x = _values(math.prod(shape), 4).reshape(shape)
    if channels_last:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    saved = native._LEVEL
    try:
        native._LEVEL = None
        want = x.copy(order="K")
        with np.errstate(all="ignore"):
            activate_in_place(want, "HardSwish", {})
        for level in LEVELS:
            native._LEVEL = level
            got = x.copy(order="K")
            activate_in_place(got, "HardSwish", {})
            np.testing.assert_array_equal(got, want, err_msg=f"level {level}")
    finally:
        native._LEVEL = saved


@pytest.mark.parametrize("shape", [(1, 24, 9, 9), (2, 7, 5, 3), (3,), (1, 16, 1, 1)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_the_hardswish_kernel_is_its_numpy_steps_at_every_level(
    shape: tuple[int, ...], channels_last: bool
) -> None:
    """The HardSwish kernel (stepped and unwatched runs alike) runs the compiled pass on a
    copy in its input's layout: the numpy steps' values, NaN, infinities and signed zeros
    included, a channels-last input's result channels-last, at every level and off."""
    _module()
    x = _values(math.prod(shape), 5).reshape(shape)
    if channels_last and len(shape) == 4:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    with np.errstate(all="ignore"):
        want = _numpy(x, ACT_HARDSWISH, NAN, NAN)
    saved = native._LEVEL
    try:
        for level in [None, *LEVELS]:
            native._LEVEL = level
            with np.errstate(all="ignore"):
                got = hard_swish(x)
            assert got is not x and got.dtype == np.float32
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
            if channels_last and len(shape) == 4:
                assert got.transpose(0, 2, 3, 1).flags.c_contiguous, level
    finally:
        native._LEVEL = saved
