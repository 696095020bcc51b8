"""The compiled Winograd transforms (runtime/native/_winograd.c) against the numpy
`nn_winograd._one_image` they stand in for, at every level this CPU has: the whole
F(2x2, 3x3) conv bit for bit (adds and subtracts only, in numpy's order), on random
channel counts, image sizes (odd and even, so tiles overhang the image), paddings 0-2
on each side, with and without bias, with NaN and infinities in the image; the conv also
against a float64 direct conv.  Wrong sizes or buffers raise ValueError, never crash."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxviz.runtime import native
from onnxviz.runtime.kernels import nn_winograd
from tests.runtime.native_modules import compiled

pytestmark = pytest.mark.numeric

LEVELS = native.levels()


def _module() -> Any:
    return compiled("winograd")


def _direct(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pads: tuple[int, ...]) -> Any:
    """The conv's definition in float64 (N=1)."""
    c, h, wd = x.shape
    top, left, bottom, right = pads
    xp = np.zeros((c, h + top + bottom, wd + left + right))
    xp[:, top : top + h, left : left + wd] = x
    oh, ow = xp.shape[1] - 2, xp.shape[2] - 2
    y = np.zeros((w.shape[0], oh, ow))
    for i in range(3):
        for j in range(3):
            y += np.einsum("mc,chw->mhw", w[:, :, i, j], xp[:, i : i + oh, j : j + ow])
    return y + (0 if b is None else b[:, None, None])


def _both(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    pads: tuple[int, ...],
    level: int,
    channels_last: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(numpy path, compiled path at ``level``) of the same conv; ``channels_last``: the
    image as the (C, H, W) view of an (H, W, C) buffer (a channels-last run's layout)."""
    module = _module()
    if channels_last:
        x = np.ascontiguousarray(x.transpose(1, 2, 0)).transpose(2, 0, 1)
    u = nn_winograd.transform_weights(w)
    c, h, wd = x.shape
    oh, ow = h + pads[0] + pads[2] - 2, wd + pads[1] + pads[3] - 2
    th, tw = -(-oh // 2), -(-ow // 2)
    plain = np.empty((w.shape[0], 2 * th, 2 * tw), np.float32)
    real = native.load
    try:
        native.load = lambda name: None  # type: ignore[assignment]
        nn_winograd._one_image(x, u, b, pads[0], pads[1], th, tw, plain)
    finally:
        native.load = real  # type: ignore[assignment]
    fast = np.full_like(plain, np.nan)
    module.set_level(level)
    try:
        nn_winograd._one_image_native(module, x, u, b, pads[0], pads[1], th, tw, fast)
    finally:
        module.set_level(max(LEVELS))
    return plain[:, :oh, :ow], fast[:, :oh, :ow]


@settings(max_examples=40, deadline=None)
@given(
    c=st.integers(1, 40),
    m=st.integers(1, 20),
    h=st.integers(2, 23),
    w=st.integers(2, 23),
    pads=st.tuples(*(st.integers(0, 2) for _ in range(4))),
    bias=st.booleans(),
    channels_last=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_compiled_transforms_give_numpys_conv_bit_for_bit(
    c: int,
    m: int,
    h: int,
    w: int,
    pads: tuple[int, ...],
    bias: bool,
    channels_last: bool,
    seed: int,
) -> None:
    if h + pads[0] + pads[2] < 4 or w + pads[1] + pads[3] < 4:
        return  # no 2x2 block of outputs
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    want = _direct(x.astype(np.float64), wt.astype(np.float64), b, pads)
    for level in LEVELS:
        plain, fast = _both(x, wt, b, pads, level, channels_last)
        np.testing.assert_array_equal(fast, plain, err_msg=f"level {level}")
        scale = np.abs(wt).sum(axis=(1, 2, 3))[:, None, None] * np.abs(x).max() + 1
        assert (np.abs(fast - want) <= 1e-5 * scale).all()


@pytest.mark.filterwarnings("ignore:invalid value")
def test_nan_and_infinity_reach_the_outputs_numpy_gives_them_to() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 9, 8)).astype(np.float32)
    x[1, 4, 4] = np.nan
    x[3, 0, 7] = np.inf
    wt = rng.standard_normal((4, 5, 3, 3)).astype(np.float32)
    for level in LEVELS:
        plain, fast = _both(x, wt, None, (1, 1, 1, 1), level)
        np.testing.assert_array_equal(fast, plain)  # (NaN where numpy has NaN)
        assert np.isnan(fast).any()


def test_wrong_sizes_are_refused() -> None:
    module = _module()
    x = np.zeros((2, 6, 6), np.float32)
    v = np.zeros((16, 2, 4, 4), np.float32)
    module.input(x, 2, 6, 6, 1, 1, 3, 3, v)  # fits
    with pytest.raises(ValueError):
        module.input(x, 2, 7, 6, 1, 1, 3, 3, v)  # x has fewer floats than C*H*W
    with pytest.raises(ValueError):
        module.input(x, 2, 6, 6, 1, 1, 4, 3, v)  # v too small for the tiles
    with pytest.raises(ValueError):
        module.input(x.astype(np.float64), 2, 6, 6, 1, 1, 3, 3, v)
    with pytest.raises(ValueError):
        module.input(x, 2, 6, 6, 3, 1, 3, 3, v)  # padding over 2
    m = np.zeros((16, 3, 3 * 4), np.float32)
    y = np.zeros((3, 6, 6), np.float32)
    module.output(m, 3, 3, 3, None, y)
    with pytest.raises(ValueError):
        module.output(m, 3, 3, 3, np.zeros(2, np.float32), y)  # bias short
    with pytest.raises(ValueError):
        module.output(m, 3, 3, 4, None, y)  # y too small
    with pytest.raises(ValueError):
        module.output(m, 3, 3, 3, None, np.zeros((3, 6, 6), np.float32)[:, ::2])
