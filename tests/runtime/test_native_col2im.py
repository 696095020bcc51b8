"""The compiled column-to-image copy of a kernel == stride ConvTranspose
(runtime/native/_col2im.c): the numpy path's bits (`_tile_windows`: copies, plus one
float32 add of the bias), for every kernel size and with or without a bias; the op runs
it in every mode; wrong buffers raise ValueError."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime.kernels import nn_conv
from tests.runtime.differential import assert_modes_agree
from tests.runtime.native_modules import compiled

pytestmark = pytest.mark.numeric


def _module() -> Any:
    return compiled("col2im", "ConvTranspose tiles its windows with numpy")


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 2),
    m=st.integers(1, 5),
    ih=st.integers(1, 9),
    iw=st.integers(1, 9),
    kh=st.integers(1, 3),
    kw=st.integers(1, 3),
    with_bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_copy_is_the_numpy_paths_bit_for_bit(
    n: int, m: int, ih: int, iw: int, kh: int, kw: int, with_bias: bool, seed: int
) -> None:
    module = _module()
    rng = np.random.default_rng(seed)
    cols = rng.standard_normal((n, m, kh, kw, ih, iw)).astype(np.float32)
    cols.reshape(-1)[:: max(1, cols.size // 5)] = np.nan  # NaNs go through as values
    bias = rng.standard_normal(m).astype(np.float32) if with_bias else None
    saved = nn_conv._COL2IM
    try:
        nn_conv._COL2IM = None
        want = nn_conv._tile_windows(cols, [kh, kw], [ih, iw], bias)
        nn_conv._COL2IM = module
        got = nn_conv._tile_windows(cols, [kh, kw], [ih, iw], bias)
    finally:
        nn_conv._COL2IM = saved
    assert got.shape == want.shape == (n, m, ih * kh, iw * kw)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


def test_wrong_buffers_raise_value_error() -> None:
    module = _module()
    cols = np.zeros((1, 2, 2, 2, 3, 3), np.float32)
    image = np.zeros((1, 2, 6, 6), np.float32)
    module.tile2d(cols, image, 2, 2, 3, 3, 2, 2, None)
    with pytest.raises(ValueError):
        module.tile2d(cols, np.zeros((1, 2, 6, 5), np.float32), 2, 2, 3, 3, 2, 2, None)
    with pytest.raises(ValueError):
        module.tile2d(cols, image, 2, 2, 3, 3, 2, 2, np.zeros(1, np.float32))  # short bias
    with pytest.raises(ValueError):
        module.tile2d(cols, image, 3, 2, 3, 3, 2, 2, None)  # planes not whole channels
    with pytest.raises(ValueError):
        module.tile2d(cols.astype(np.float64), image, 2, 2, 3, 3, 2, 2, None)
    flat = np.zeros(cols.size, np.float32)
    with pytest.raises(ValueError):
        module.tile2d(flat, flat, 2, 2, 3, 3, 2, 2, None)  # one buffer for both


@pytest.mark.parametrize(
    ("kernel", "pads"), [(2, [0, 0, 0, 0]), (3, [1, 1, 1, 1]), (2, [1, 0, 0, 1])]
)
def test_a_unet_upsampling_agrees_in_every_mode(kernel: int, pads: list[int]) -> None:
    """A ConvTranspose with kernel == stride (cropped by pads, or not) gives the stepped
    run's numbers in the fused and plain runs, within float32 rounding of float64."""
    rng = np.random.default_rng(kernel)
    x = rng.standard_normal((1, 6, 5, 7)).astype(np.float32)
    w = rng.standard_normal((6, 4, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    node = helper.make_node(
        "ConvTranspose", ["x", "w", "b"], ["y"], strides=[kernel, kernel], pads=pads
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    y = assert_modes_agree(model, {"x": x})["y"]
    # float64 definition: each output pixel is one window's products, plus the bias.
    full = np.einsum("nchw,cmab->nmhawb", x.astype(np.float64), w.astype(np.float64))
    full = full.reshape(1, 4, 5 * kernel, 7 * kernel) + b[None, :, None, None]
    top, left, bottom, right = pads
    want = full[:, :, top : full.shape[2] - bottom, left : full.shape[3] - right]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@contextmanager
def _shortcut_spied(module: Any) -> Iterator[list[int]]:
    """ConvTranspose with the compiled copy in place (the suite also runs with the
    kernels off) and `_tiled_upsampling` counted: yields the list of its calls."""
    calls: list[int] = []
    fast, saved = nn_conv._tiled_upsampling, nn_conv._COL2IM

    def counted(*args: Any) -> np.ndarray:
        calls.append(1)
        return fast(*args)

    nn_conv._tiled_upsampling = counted  # type: ignore[assignment]
    nn_conv._COL2IM = module
    try:
        yield calls
    finally:
        nn_conv._tiled_upsampling = fast  # type: ignore[assignment]
        nn_conv._COL2IM = saved


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 3),
    c=st.integers(1, 7),
    m=st.integers(1, 5),
    ih=st.integers(1, 9),
    iw=st.integers(1, 9),
    kh=st.integers(1, 3),
    kw=st.integers(1, 3),
    with_bias=st.booleans(),
    spelled=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_unpadded_upsampling_is_the_general_paths_bit_for_bit(
    n: int,
    c: int,
    m: int,
    ih: int,
    iw: int,
    kh: int,
    kw: int,
    with_bias: bool,
    spelled: bool,
    seed: int,
) -> None:
    """ConvTranspose with kernel == stride, unpadded, float32 (`_tiled_upsampling`, its
    geometry skipped) gives the general path's bits, with the defaults left out or
    spelled out (kernel_shape, dilations 1, zero pads and output padding, VALID)."""
    module = _module()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, ih, iw)).astype(np.float32)
    x.reshape(-1)[:: max(1, x.size // 3)] = np.nan  # NaNs go through as values
    w = rng.standard_normal((c, m, kh, kw)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if with_bias else None
    attrs: dict[str, Any] = {"strides": [kh, kw]}
    if spelled:
        attrs |= {"kernel_shape": [kh, kw], "dilations": [1, 1], "pads": [0] * 4}
        attrs |= {"output_padding": [0, 0], "auto_pad": "VALID"}
    general = {"auto_pad": "NOTSET", "dilations": None, "kernel_shape": None, "pads": None}
    general |= {"output_padding": None, "output_shape": None, "group": 1} | attrs
    want = nn_conv._conv_transpose_any(x, w, b, **general)
    with _shortcut_spied(module) as calls:
        got = nn_conv.conv_transpose(x, w, b, **attrs)
    assert calls == [1]
    assert got.shape == want.shape == (n, m, ih * kh, iw * kw) and got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [2, 2], "pads": [1, 0, 0, 1]},
        {"strides": [2, 2], "output_padding": [1, 0]},
        {"strides": [2, 2], "output_shape": [9, 8]},
        {"strides": [2, 2], "dilations": [2, 1]},
        {"strides": [2, 2], "group": 2},
        {"strides": [1, 2]},
        {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    ],
)
def test_other_upsamplings_take_the_general_path(attrs: dict[str, Any]) -> None:
    """Pads, output padding or shape, dilation, groups, a stride other than the kernel
    or another auto_pad leave the tiled shortcut out (the general path gives them)."""
    module = _module()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 4, 4)).astype(np.float32)
    w = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    with _shortcut_spied(module) as calls:
        y = nn_conv.conv_transpose(x, w, None, **attrs)
    assert calls == [], "the tiled shortcut ran"
    assert y.ndim == 4 and y.dtype == np.float32
