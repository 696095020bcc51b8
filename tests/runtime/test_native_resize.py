"""Resize's compiled paths (runtime/native/_resize.c through kernels/nn_resize.py).

* Nearest upsampling by whole factors (`repeat`) is a copy: numpy's repeat exactly, at
  every level, float32 and int32, edges included; other items and layouts keep numpy's
  copies; a call with wrong sizes raises.
* Linear resampling of the last two axes (`linear`) gives the numpy steps' values bit for
  bit at every level (the same float32 products and sums, axis by axis, rows first), on
  random geometries: every coordinate mode but tf_crop_and_resize, up and down, one axis
  or both, widths that are and are not whole vectors, taps that leave the 8 floats a
  vector load holds; antialias, exclude_outside, cubic and other dtypes keep the steps.
* A bilinear segmentation UNet's upsampling gives the same outputs in stepped, fused and
  plain runs, with the kernel off, and onnxruntime's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import nn_resize
from tests.runtime.native_modules import at_level, compiled

from .differential import assert_modes_agree, close

pytestmark = pytest.mark.numeric

LEVELS = native.levels()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(
    ("shape", "factors"),
    [
        ((1, 64, 16, 16), (1, 1, 2, 2)),
        ((2, 3, 7, 5), (1, 1, 3, 2)),
        ((1, 1, 1, 17), (1, 1, 1, 2)),
        ((4, 9), (2, 3)),
        ((1, 2, 3, 8), (1, 1, 1, 4)),
    ],
)
def test_nearest_repeat_copies_every_element(
    monkeypatch: pytest.MonkeyPatch, level: int, shape: tuple[int, ...], factors: tuple[int, ...]
) -> None:
    module = compiled("resize")
    assert nn_resize._RESIZE in (module, None)  # what the Resize kernel calls (None: off)
    monkeypatch.setattr(nn_resize, "_RESIZE", module)
    rng = np.random.default_rng(len(shape))
    for x in (
        rng.standard_normal(shape).astype(np.float32),
        rng.integers(-9, 9, shape).astype(np.int32),
    ):
        want = x
        for axis, r in enumerate(factors):
            want = np.repeat(want, r, axis=axis)
        with at_level("resize", level):
            module.set_level(level)  # (the kernel holds the module it loaded at import)
            got = nn_resize._repeat(x, factors)
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, want)


def test_nearest_repeat_of_other_items_and_layouts_takes_numpy() -> None:
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5)
    for arr, factors in ((x, (1, 1, 2, 2)), (x.astype(np.float32)[:, :, ::2], (1, 1, 2, 2))):
        want = np.repeat(np.repeat(arr, 2, axis=2), 2, axis=3)
        np.testing.assert_array_equal(nn_resize._repeat(arr, factors), want)
    mod = compiled("resize")
    with pytest.raises(ValueError, match="4-byte"):
        mod.repeat(
            np.zeros((1, 2, 2), np.float32), np.zeros((1, 4, 3), np.float32), (1, 2, 2), (2, 2)
        )


def _steps(
    x: np.ndarray, out_shape: tuple[int, ...], scales: list[float], **attrs: Any
) -> np.ndarray:
    """resize_nd by numpy's steps (the compiled module set aside)."""
    module = nn_resize._RESIZE
    nn_resize._RESIZE = None
    try:
        return nn_resize.resize_nd(x, out_shape, scales, mode="linear", **attrs)
    finally:
        nn_resize._RESIZE = module


MODES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]


@settings(max_examples=60, deadline=None)
@given(
    lead=st.sampled_from([(), (1,), (2, 3)]),
    h=st.integers(1, 20),
    w=st.integers(1, 40),
    oh=st.integers(1, 40),
    ow=st.integers(1, 70),
    keep=st.sampled_from(["none", "rows", "cols"]),
    mode=st.sampled_from(MODES),
    seed=st.integers(0, 2**16),
)
def test_linear_is_the_numpy_steps_bit_for_bit(
    lead: tuple[int, ...],
    h: int,
    w: int,
    oh: int,
    ow: int,
    keep: str,
    mode: str,
    seed: int,
) -> None:
    module = compiled("resize")
    saved = nn_resize._RESIZE
    if keep == "rows":
        oh = h
    elif keep == "cols":
        ow = w
    x = np.random.default_rng(seed).standard_normal((*lead, h, w)).astype(np.float32)
    shape = (*lead, oh, ow)
    scales = [1.0] * len(lead) + [oh / h, ow / w]
    want = _steps(x, shape, scales, coordinate_transformation_mode=mode)
    for level in LEVELS:
        module.set_level(level)
        nn_resize._RESIZE = module  # (also where ONNXVIZ_NATIVE=off left it None)
        try:
            got = nn_resize.resize_nd(
                x, shape, scales, mode="linear", coordinate_transformation_mode=mode
            )
        finally:
            module.set_level(max(LEVELS))
            nn_resize._RESIZE = saved
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want, err_msg=f"level {level}")


def test_linear_keeps_nan_and_inf_where_the_steps_put_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(nn_resize, "_RESIZE", compiled("resize"))
    x = np.random.default_rng(3).standard_normal((1, 2, 9, 17)).astype(np.float32)
    x[0, 0, 4, 8] = np.nan
    x[0, 1, 2, 3] = np.inf
    for mode in ("align_corners", "half_pixel"):
        want = _steps(x, (1, 2, 18, 34), [1, 1, 2, 2], coordinate_transformation_mode=mode)
        got = nn_resize.resize_nd(
            x, (1, 2, 18, 34), [1, 1, 2, 2], mode="linear", coordinate_transformation_mode=mode
        )
        np.testing.assert_array_equal(got, want)  # (NaN where NaN: array_equal's rule)


def test_linear_cases_it_does_not_take_keep_the_steps() -> None:
    module = compiled("resize")
    x = np.random.default_rng(4).standard_normal((2, 3, 6, 6)).astype(np.float32)
    calls = []
    real = module.linear

    class Spy:
        def linear(self, *args: Any) -> Any:
            calls.append(args)
            return real(*args)

        def __getattr__(self, name: str) -> Any:
            return getattr(module, name)

    saved = nn_resize._RESIZE
    nn_resize._RESIZE = Spy()
    try:
        nn_resize.resize_nd(x, (2, 3, 12, 12), [1, 1, 2, 2], mode="linear")
        assert len(calls) == 1
        for shape, scales, attrs in [
            ((2, 6, 12, 12), [1, 2, 2, 2], {}),  # the channel axis resized too
            ((2, 3, 3, 3), [1, 1, 0.5, 0.5], {"antialias": 1}),
            ((2, 3, 12, 12), [1, 1, 2, 2], {"exclude_outside": 1}),
        ]:
            got = nn_resize.resize_nd(x, shape, scales, mode="linear", **attrs)
            nn_resize._RESIZE = None
            want = nn_resize.resize_nd(x, shape, scales, mode="linear", **attrs)
            nn_resize._RESIZE = Spy()
            np.testing.assert_array_equal(got, want)
        nn_resize.resize_nd(x.astype(np.float64), (2, 3, 12, 12), [1, 1, 2, 2], mode="linear")
        assert len(calls) == 1
    finally:
        nn_resize._RESIZE = saved


def test_linear_checks_its_taps() -> None:
    module = compiled("resize")
    x = np.zeros((1, 4, 4), np.float32)
    out = np.zeros((1, 8, 8), np.float32)
    i = np.zeros(8, np.int32)
    f = np.ones(8, np.float32)
    module.linear(x, out, (1, 4, 4, 8, 8), (i, i, f, f), (i, i, f, f), 63)
    with pytest.raises(ValueError, match="inside the input"):
        module.linear(x, out, (1, 4, 4, 8, 8), (i + 4, i, f, f), (i, i, f, f), 63)
    with pytest.raises(ValueError, match="one per output"):
        module.linear(x, out, (1, 4, 4, 8, 8), (i[:7], i, f, f), (i, i, f, f), 63)
    with pytest.raises(ValueError, match="flags"):
        module.linear(x, out, (1, 4, 4, 8, 8), (i, i, f, f), (i, i, f, f), 1 | 8)
    with pytest.raises(ValueError, match="out"):
        module.linear(x, out[:, :4], (1, 4, 4, 8, 8), (i, i, f, f), (i, i, f, f), 63)


@pytest.mark.parametrize("align", [True, False])
def test_a_bilinear_unet_upsampling_agrees_in_every_mode_and_with_onnxruntime(
    align: bool,
) -> None:
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(5)
    mode = "align_corners" if align else "pytorch_half_pixel"
    w = numpy_helper.from_array((rng.standard_normal((8, 16, 3, 3)) / 12).astype(np.float32), "w")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["u"], mode="linear",
                         coordinate_transformation_mode=mode),
        helper.make_node("Concat", ["u", "skip"], ["c"], axis=1),
        helper.make_node("Conv", ["c", "w"], ["y0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["y0"], ["y"]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "up",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 20, 20]),
            helper.make_tensor_value_info("skip", TensorProto.FLOAT, [1, 8, 40, 40]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w, scales],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {
        "x": rng.standard_normal((1, 8, 20, 20)).astype(np.float32),
        "skip": rng.standard_normal((1, 8, 40, 40)).astype(np.float32),
    }
    stepped = assert_modes_agree(model, feeds)
    (theirs,) = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(["y"], feeds)
    close(stepped["y"], theirs, "against onnxruntime", rtol=1e-4)
    saved = nn_resize._RESIZE
    nn_resize._RESIZE = None
    try:
        from onnxviz.runtime.session import Session

        off = Session(model).run(feeds)
    finally:
        nn_resize._RESIZE = saved
    np.testing.assert_array_equal(off["y"], stepped["y"])  # the same steps' bits
