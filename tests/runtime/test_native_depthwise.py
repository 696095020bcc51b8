"""The compiled depthwise conv (runtime/native/_depthwise.c) against its numpy twin.

* The module at every level this CPU has (``native.levels()``, each set directly), on
  random geometries (hypothesis: channels that are no multiple of a vector, more than
  one 64-channel block, kernels 1..7, strides 1..3, dilations, asymmetric pads, batch
  > 1, 1x1 images), with and without bias, addend and each activation: the same values
  as numpy's multiply-then-add per kernel offset (nn_conv.depthwise) plus the bias, the
  addend and the activation kernels, exactly; and within the stated error bound of the
  exact sum (float64).
* Every size and type it is given is checked: a wrong buffer raises ValueError.
* Wired in: the Conv kernel (stepped runs) and the channels-last conv chains (fused runs,
  the activation in the kernel's pass) give the numpy path's numbers, and whole models
  (the committed torch MobileNet-style and UNet exports, the hand-built MobileNetV3-small,
  a MobileNetV2-style ReLU6 stack) give the same outputs with the kernel on (each level)
  and off, and the stepped numbers; the random conv chains of test_channels_last pass at every level.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxviz.runtime import native
from onnxviz.runtime.kernels.math_activation import clip_into, relu_into
from onnxviz.runtime.kernels.nn_conv import (
    ACT_CLIP,
    ACT_HARDSWISH,
    ACT_NONE,
    ACT_RELU,
    ACT_SILU,
    conv,
    depthwise,
)
from onnxviz.runtime.kernels.nn_conv_nhwc import activate_in_place, prepare_channels_last
from onnxviz.runtime.kernels.nn_geometry import pad_spatial
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled, compiled_silu

from .differential import assert_modes_agree, close

pytestmark = pytest.mark.numeric

NAN = math.nan
LEVELS = native.levels()


def _module() -> Any:
    """The compiled module (built wherever this machine can compile: test_native)."""
    return compiled("depthwise")


def _level(level: int | None) -> AbstractContextManager[None]:
    return at_level("depthwise", level)


# -- the module against numpy's multiply-then-add -------------------------------------------


def _reference(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    addend: np.ndarray | None,
    strides: tuple[int, int],
    dilations: tuple[int, int],
    pads: tuple[int, int, int, int],
    out_hw: tuple[int, int],
    act: tuple[int, float, float],
) -> np.ndarray:
    """The numpy definition, NCHW: nn_conv.depthwise on the zero-padded input (a multiply
    and an add per kernel offset, row-major), + bias, + addend, then the activation
    kernels' own steps."""
    c = x.shape[1]
    kernel = list(w.shape[2:])
    xp = pad_spatial(x, list(pads[:2]), list(pads[2:]))
    y = depthwise(xp, w, c, kernel, list(strides), list(dilations), list(out_hw))
    if bias is not None:
        y += bias.reshape(1, -1, 1, 1)
    if addend is not None:
        y += addend
    code, lo, hi = act
    if code == ACT_RELU:
        relu_into(y, y)
    elif code == ACT_CLIP:
        clip_into(y, None if math.isnan(lo) else lo, None if math.isnan(hi) else hi, y)
    elif code == ACT_HARDSWISH:
        activate_in_place(y, "HardSwish", {})
    elif code == ACT_SILU:  # the compiled Sigmoid kernel's values, then the Mul's product
        y = compiled_silu(y)
    return y


@st.composite
def geometries(draw: Any) -> dict[str, Any]:
    kh, kw = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.sampled_from([1, 1, 2, 3])), draw(st.sampled_from([1, 1, 2, 3]))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    # At least one output row and column (a 7-tap kernel dilated 3 spans 19 pixels).
    h_min = max(1, (kh - 1) * dh + 1 - pads[0] - pads[2])
    w_min = max(1, (kw - 1) * dw + 1 - pads[1] - pads[3])
    h = draw(st.integers(h_min, max(h_min, 12)))
    w = draw(st.integers(w_min, max(w_min, 12)))
    oh = (h + pads[0] + pads[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pads[1] + pads[3] - (kw - 1) * dw - 1) // sw + 1
    act = draw(st.sampled_from([ACT_NONE, ACT_RELU, ACT_CLIP, ACT_HARDSWISH, ACT_SILU]))
    lo, hi = NAN, NAN
    if act == ACT_CLIP:
        lo = draw(st.sampled_from([NAN, -1.0, 0.0]))
        hi = draw(st.sampled_from([NAN, 0.5, 6.0]))
    return {
        "n": draw(st.integers(1, 3)),
        # Below and above a vector (8/16 lanes) and a 64-channel block, and between.
        "c": draw(st.sampled_from([1, 3, 7, 8, 13, 16, 24, 31, 33, 64, 70, 97, 130])),
        "hw": (h, w),
        "kernel": (kh, kw),
        "strides": (sh, sw),
        "dilations": (dh, dw),
        "pads": pads,
        "out": (oh, ow),
        "bias": draw(st.booleans()),
        "addend": draw(st.booleans()),
        "act": (act, lo, hi),
        "seed": draw(st.integers(0, 2**16)),
    }


@st.composite
def row_geometries(draw: Any) -> dict[str, Any]:
    """The SIMD levels' pixel-group kernels: rows wider than a group (12 pixels at
    AVX-512, 8 at AVX2), split near-equally, with border pixels in the groups; kernel
    widths 3 and 5 at strides 1 and 2 (the sliding kernels, full vectors of channels)
    and others; channel counts with and without a partial last vector."""
    kh, kw = draw(st.integers(1, 5)), draw(st.sampled_from([3, 3, 5, 5, 1, 2, 4, 7]))
    sh, sw = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 1, 2, 3]))
    dh, dw = 1, draw(st.sampled_from([1, 1, 1, 2]))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h = draw(st.integers(max(1, kh - pads[0] - pads[2]), 6))
    w = draw(st.integers(max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]), 41))
    oh = (h + pads[0] + pads[2] - kh) // sh + 1
    ow = (w + pads[1] + pads[3] - (kw - 1) * dw - 1) // sw + 1
    act = draw(st.sampled_from([ACT_NONE, ACT_RELU, ACT_HARDSWISH, ACT_SILU]))
    return {
        "n": draw(st.integers(1, 2)),
        "c": draw(st.sampled_from([8, 16, 20, 32, 48, 64, 72, 88, 130])),
        "hw": (h, w),
        "kernel": (kh, kw),
        "strides": (sh, sw),
        "dilations": (dh, dw),
        "pads": pads,
        "out": (oh, ow),
        "bias": draw(st.booleans()),
        "addend": draw(st.booleans()),
        "act": (act, NAN, NAN),
        "seed": draw(st.integers(0, 2**16)),
    }


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(geometries())
def test_every_level_gives_numpys_multiply_then_add_exactly(g: dict[str, Any]) -> None:
    _check_every_level(g)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(row_geometries())
def test_wide_rows_run_in_pixel_groups_with_the_same_bits(g: dict[str, Any]) -> None:
    _check_every_level(g)


def _check_every_level(g: dict[str, Any]) -> None:
    module = _module()
    rng = np.random.default_rng(g["seed"])
    n, c = g["n"], g["c"]
    (h, w), (kh, kw), (oh, ow) = g["hw"], g["kernel"], g["out"]
    assert min(oh, ow) >= 1
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, kh, kw)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32) if g["bias"] else None
    addend = rng.standard_normal((n, c, oh, ow)).astype(np.float32) if g["addend"] else None
    want = _reference(
        x, wt, bias, addend, g["strides"], g["dilations"], g["pads"], (oh, ow), g["act"]
    )
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    wk = np.ascontiguousarray(wt.reshape(c, kh * kw).T)
    al = None if addend is None else np.ascontiguousarray(addend.transpose(0, 2, 3, 1))
    for level in LEVELS:
        module.set_level(level)
        out = np.full((n, oh, ow, c), np.nan, dtype=np.float32)
        module.conv_nhwc(
            xl,
            wk,
            bias,
            al,
            out,
            (n, h, w, c),
            (kh, kw),
            (oh, ow),
            g["strides"],
            g["dilations"],
            g["pads"][:2],
            *g["act"],
        )
        # Values equal (a skipped padding tap adds +0 where numpy adds 0 * w: only the
        # sign of a zero may differ, which == does not see).
        np.testing.assert_array_equal(out.transpose(0, 3, 1, 2), want, err_msg=f"level {level}")


def test_the_error_is_within_the_bound_of_a_k_term_sum() -> None:
    """|y - exact| <= gamma_(K+1) * (sum |x w| + |bias|), gamma_m = m u / (1 - m u), u =
    2**-24: the bound of a recursive sum of K rounded products plus the bias (Higham,
    Accuracy and Stability, 3.1).  Checked in float64 on sums that cancel (random signs)
    at every level, for 3x3, 5x5 and 7x7 kernels."""
    module = _module()
    rng = np.random.default_rng(3)
    u = 2.0**-24
    for k in (3, 5, 7):
        n, c, h, w = 2, 37, 9, 10
        x = rng.standard_normal((n, h, w, c)).astype(np.float32)
        wk = rng.standard_normal((k, k, c)).astype(np.float32)
        bias = rng.standard_normal(c).astype(np.float32)
        p = k // 2
        xp = np.pad(x.astype(np.float64), ((0, 0), (p, p), (p, p), (0, 0)))
        exact = np.zeros((n, h, w, c))
        magnitude = np.zeros((n, h, w, c))
        for i in range(k):
            for j in range(k):
                term = xp[:, i : i + h, j : j + w] * wk[i, j].astype(np.float64)
                exact += term
                magnitude += np.abs(term)
        exact += bias
        magnitude += np.abs(bias)
        terms = k * k + 1
        bound = terms * u / (1 - terms * u) * magnitude
        for level in LEVELS:
            module.set_level(level)
            out = np.empty((n, h, w, c), dtype=np.float32)
            module.conv_nhwc(
                x, wk, bias, None, out, (n, h, w, c), (k, k), (h, w), (1, 1), (1, 1), (p, p),
                ACT_NONE, NAN, NAN,
            )  # fmt: skip
            err = np.abs(out.astype(np.float64) - exact)
            assert np.all(err <= bound), (k, level, float(np.max(err / bound)))


# -- checks before reading --------------------------------------------------------------


def _call(module: Any, **change: Any) -> None:
    n, h, w, c, k = 1, 5, 6, 10, 3
    args: dict[str, Any] = {
        "x": np.zeros((n, h, w, c), np.float32),
        "w": np.zeros((k, k, c), np.float32),
        "bias": np.zeros(c, np.float32),
        "addend": None,
        "out": np.zeros((n, h, w, c), np.float32),
        "dims": (n, h, w, c),
        "kernel": (k, k),
        "out_hw": (h, w),
        "strides": (1, 1),
        "dilations": (1, 1),
        "pads": (1, 1),
        "act": ACT_NONE,
        "lo": NAN,
        "hi": NAN,
    }
    args.update(change)
    module.conv_nhwc(*args.values())


@pytest.mark.parametrize(
    "change",
    [
        {"x": np.zeros((1, 5, 6, 9), np.float32)},  # one channel short
        {"x": np.zeros((1, 5, 6, 11), np.float32)},  # one too many
        {"w": np.zeros((3, 2, 10), np.float32)},
        {"bias": np.zeros(9, np.float32)},
        {"addend": np.zeros((1, 5, 5, 10), np.float32)},
        {"out": np.zeros((1, 5, 5, 10), np.float32)},
        {"out_hw": (6, 6)},  # more output than the buffer holds
        {"kernel": (3, 4)},
        {"dims": (2, 5, 6, 10)},
        {"x": np.zeros((1, 5, 6, 10), np.float64)},  # not float32
        {"out": np.zeros((1, 5, 6, 10), np.int32)},
        {"dims": (1, 5, 6, 0)},
        {"strides": (0, 1)},
        {"dilations": (1, -1)},
        {"pads": (-1, 0)},
        {"act": 5},
        {"dims": (1, 5, 6, 1 << 40)},
    ],
)
def test_a_wrong_size_or_type_raises_before_reading(change: dict[str, Any]) -> None:
    module = _module()
    with pytest.raises(ValueError):
        _call(module, **change)


def test_it_only_writes_to_a_writable_contiguous_buffer() -> None:
    module = _module()
    out = np.zeros((1, 5, 6, 10), np.float32)
    out.flags.writeable = False
    with pytest.raises((ValueError, BufferError, TypeError)):
        _call(module, out=out)
    strided = np.zeros((1, 5, 6, 20), np.float32)[..., ::2]
    with pytest.raises((ValueError, BufferError, TypeError)):
        _call(module, x=strided)
    _call(module)  # the right call runs


def test_set_level_refuses_what_the_cpu_lacks() -> None:
    module = _module()
    for level in LEVELS:
        assert module.set_level(level) == level
    if LEVELS[-1] < native.AVX512_VNNI:
        with pytest.raises(ValueError, match="cannot run"):
            module.set_level(LEVELS[-1] + 1)
    with pytest.raises(ValueError):
        module.set_level(4)


# -- wired in -------------------------------------------------------------------------------

# (input shape, weight shape, Conv attributes): depthwise geometries of both paths.
WIRED_CASES = [
    ((2, 24, 9, 11), (24, 1, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 70, 12, 12), (70, 1, 5, 5), {"pads": [2, 2, 2, 2]}),
    ((1, 19, 13, 14), (19, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 8, 17, 19), (8, 1, 3, 3), {"pads": [0, 2, 1, 0], "dilations": [2, 3], "strides": [3, 2]}),
    ((1, 40, 1, 1), (40, 1, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 16, 10, 10), (16, 1, 7, 7), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 96, 28, 28), (96, 1, 5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2]}),
    ((3, 12, 20), (12, 1, 5), {"pads": [2, 1], "strides": [2]}),  # 1-D
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), WIRED_CASES)
def test_the_conv_kernel_runs_it_with_the_numpy_numbers(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any]
) -> None:
    _module()
    rng = np.random.default_rng(5)
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    with _level(None):
        want = conv(x, w, b, group=c, **attrs)
    for level in LEVELS:
        with _level(level):
            got = conv(x, w, b, group=c, **attrs)
        close(got, want, f"level {level}")
        assert got.flags.c_contiguous


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), WIRED_CASES)
def test_the_nchw_conv_moves_its_layout_by_the_compiled_copies_with_the_same_bits(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any], monkeypatch
) -> None:
    # An NCHW depthwise conv (a ConvNeXt-style block's, between NCHW nodes) whose rows
    # the planes kernel does not take (under 16 outputs here, and not a same-size 3x3 at
    # stride 1: those run as flat rows) runs the kernel on channels-last copies.  _channels.c's place/unplace make them (numpy's
    # strided copies took as long as the conv); they are copies, so the output is the
    # same bits as with numpy's moveaxis copies, and they must really run.
    _module()
    chan = compiled("channels")
    rng = np.random.default_rng(11)
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    calls: list[str] = []

    class Counted:
        def place(self, *args: Any) -> Any:
            calls.append("place")
            return chan.place(*args)

        def unplace(self, *args: Any) -> Any:
            calls.append("unplace")
            return chan.unplace(*args)

    real = native.load
    with _level(LEVELS[-1]):  # (the kernels on, whatever ONNXVIZ_NATIVE says)
        monkeypatch.setattr(native, "load", lambda n: Counted() if n == "channels" else real(n))
        got = conv(x, w, b, group=c, **attrs)
        # (3x3 at stride 1 keeping the size: conv_nchw's flat rows at AVX-512, no copies)
        flat = w_shape[2:] == (3, 3) and "strides" not in attrs and attrs["pads"] == [1] * 4
        assert calls == ([] if flat and LEVELS[-1] >= native.AVX512 else ["place", "unplace"])
        monkeypatch.setattr(native, "load", lambda n: None if n == "channels" else real(n))
        want = conv(x, w, b, group=c, **attrs)
        monkeypatch.setattr(native, "load", real)
    assert got.dtype == want.dtype and got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.tuples(st.integers(1, 2), st.integers(1, 12), st.integers(1, 30), st.integers(1, 70)),
    st.tuples(st.integers(1, 5), st.integers(1, 5)),
    st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2)),
    st.tuples(*[st.integers(0, 3)] * 4),
    st.tuples(st.booleans(), st.booleans(), st.integers(0, 3), st.integers(0, 3)),
)
def test_the_planes_kernel_gives_the_channels_last_kernels_bits(
    size: tuple[int, int, int, int],
    kernel: tuple[int, int],
    steps: tuple[int, int, int, int],
    pads: tuple[int, int, int, int],
    extras: tuple[bool, bool, int, int],
) -> None:
    """conv_nchw (the planes read in place, lanes along the rows) gives conv_nhwc's bits
    at every level where it runs (AVX-512, strides 1 and 2, rows of 16 outputs and more),
    NaN and infinite values included; elsewhere it says so and writes nothing."""
    module = _module()
    n, c, h, w = size
    (kh, kw), (sh, sw, dh, dw), (pt, pl, pb, pr) = kernel, steps, pads
    with_bias, with_addend, act, special = extras
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    if oh < 1 or ow < 1:
        return
    rng = np.random.default_rng(n * 1000 + c * 100 + h + w)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, kh * kw)).astype(np.float32)
    if special == 1:
        x.flat[rng.integers(x.size)] = np.nan
    elif special == 2:
        wt.flat[rng.integers(wt.size)] = np.inf  # times a padding zero would be NaN
    b = rng.standard_normal(c).astype(np.float32) if with_bias else None
    addend = rng.standard_normal((n, c, oh, ow)).astype(np.float32) if with_addend else None
    lo, hi = (-0.5, 0.75) if act == ACT_CLIP else (NAN, NAN)
    geometry = ((kh, kw), (oh, ow), (sh, sw), (dh, dw), (pt, pl))
    flat = (kh, kw, sh, sw, dh, dw, oh, ow) == (3, 3, 1, 1, 1, 1, h, w) and ow < 16
    _assert_planes_match(
        module, x, wt, b, addend, geometry, (act, lo, hi),
        lambda level: level >= native.AVX512 and ((sw <= 2 and ow >= 16) or flat),
    )  # fmt: skip


def _assert_planes_match(
    module: Any,
    x: np.ndarray,
    wt: np.ndarray,
    b: np.ndarray | None,
    addend: np.ndarray | None,
    geometry: tuple[tuple[int, int], ...],
    activation: tuple[int, float, float],
    runs_at: Any,
) -> None:
    """conv_nchw of planes ``x`` gives conv_nhwc's bits at every level where
    ``runs_at(level)``, and elsewhere says no and writes nothing."""
    n, c, h, w = x.shape
    oh, ow = geometry[1]
    want = np.empty((n, oh, ow, c), np.float32)
    last = None if addend is None else np.ascontiguousarray(addend.transpose(0, 2, 3, 1))
    module.conv_nhwc(
        np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
        np.ascontiguousarray(wt.T), b, last, want, (n, h, w, c), *geometry, *activation,
    )  # fmt: skip
    for level in LEVELS:
        module.set_level(level)
        try:
            got = np.full((n, c, oh, ow), 7.0, np.float32)
            ran = module.conv_nchw(x, wt, b, addend, got, (n, c, h, w), *geometry, *activation)
        finally:
            module.set_level(LEVELS[-1])
        assert ran == runs_at(level), f"level {level}"
        if ran:
            np.testing.assert_array_equal(got, want.transpose(0, 3, 1, 2), f"level {level}")
        else:
            assert (got == 7.0).all()


@pytest.mark.parametrize(
    ("size", "pads"),
    [
        ((1, 272, 14, 14), (1, 1)),  # ShuffleNet's
        ((2, 5, 7, 7), (1, 1)),
        ((1, 3, 1, 1), (1, 1)),
        ((1, 4, 2, 15), (0, 2)),
        ((2, 3, 9, 4), (2, 0)),
        ((1, 6, 17, 3), (1, 2)),
        ((1, 2, 33, 1), (2, 1)),
    ],
)
@pytest.mark.parametrize("act", [ACT_NONE, ACT_RELU, ACT_CLIP, ACT_HARDSWISH, ACT_SILU])
def test_narrow_planes_run_flat_with_the_channels_last_kernels_bits(
    size: tuple[int, int, int, int], pads: tuple[int, int], act: int
) -> None:
    """A 3x3 stride-1 conv keeping its planes' size with rows narrower than a vector
    runs in conv_nchw as flat rows (16 outputs of a plane a vector, across row ends,
    taps outside the image masked): conv_nhwc's bits, with and without bias and addend,
    NaN and infinity included, at AVX-512; below it, conv_nchw says no."""
    module = _module()
    n, c, h, w = size
    pt, pl = pads
    rng = np.random.default_rng(c * h + w)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    x.flat[rng.integers(x.size)] = np.nan
    wt = rng.standard_normal((c, 9)).astype(np.float32)
    wt.flat[rng.integers(wt.size)] = np.inf
    lo, hi = (-0.5, 0.75) if act == ACT_CLIP else (NAN, NAN)
    geometry = ((3, 3), (h, w), (1, 1), (1, 1), (pt, pl))
    for with_bias, with_addend in ((False, False), (True, False), (True, True)):
        b = rng.standard_normal(c).astype(np.float32) if with_bias else None
        addend = rng.standard_normal((n, c, h, w)).astype(np.float32) if with_addend else None
        _assert_planes_match(
            module, x, wt, b, addend, geometry, (act, lo, hi),
            lambda level: level >= native.AVX512,
        )  # fmt: skip


def test_an_nchw_conv_on_wide_rows_reads_its_planes_in_place(monkeypatch) -> None:
    """The Conv kernel runs an NCHW depthwise conv whose rows fill a vector by conv_nchw,
    without the channels-last copies, and gives their bits."""
    module = _module()
    chan = compiled("channels")
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 20, 18, 40)).astype(np.float32)
    w = rng.standard_normal((20, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(20).astype(np.float32)
    copies: list[str] = []

    class Counted:
        def place(self, *args: Any) -> Any:
            copies.append("place")
            return chan.place(*args)

        def unplace(self, *args: Any) -> Any:
            copies.append("unplace")
            return chan.unplace(*args)

    class Declining:  # the module, its planes kernel saying no
        def __getattr__(self, name: str) -> Any:
            return getattr(module, name)

        def conv_nchw(self, *args: Any) -> bool:
            return False

    real = native.load
    for strides in ([1, 1], [2, 2]):
        with _level(LEVELS[-1]):
            monkeypatch.setattr(native, "load", lambda n: Counted() if n == "channels" else real(n))
            got = conv(x, w, b, group=20, pads=[1, 1, 1, 1], strides=strides)
            planes = not copies
            copies.clear()
            monkeypatch.setattr(
                native, "load",
                lambda n: Counted() if n == "channels" else Declining() if n == "depthwise" else real(n),
            )  # fmt: skip
            want = conv(x, w, b, group=20, pads=[1, 1, 1, 1], strides=strides)
            assert copies == ["place", "unplace"]
            copies.clear()
            monkeypatch.setattr(native, "load", real)
        assert planes == (LEVELS[-1] >= native.AVX512)
        np.testing.assert_array_equal(got, want)


def _activated(y: np.ndarray, code: int) -> np.ndarray:
    """The activation kernels' steps on ``y`` in place (Clip: 0..6)."""
    if code == ACT_RELU:
        relu_into(y, y)
    elif code == ACT_CLIP:
        clip_into(y, 0.0, 6.0, y)
    elif code == ACT_HARDSWISH:
        activate_in_place(y, "HardSwish", {})
    elif code == ACT_SILU:
        y = compiled_silu(y)
    return y


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), WIRED_CASES[:7])
@pytest.mark.parametrize("act", ["none", "Relu", "Clip", "HardSwish", "SiLU"])
@pytest.mark.parametrize("residual", [False, True])
def test_the_channels_last_conv_runs_it_with_its_activation(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    attrs: dict[str, Any],
    act: str,
    residual: bool,
) -> None:
    _module()
    rng = np.random.default_rng(6)
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    all_attrs = {"group": c, **attrs}
    runner = prepare_channels_last(x, w, b, all_attrs)
    assert runner is not None
    addend = rng.standard_normal(runner.out_shape).astype(np.float32) if residual else None
    spec = {
        "none": None,
        "Relu": (ACT_RELU, NAN, NAN),
        "Clip": (ACT_CLIP, 0.0, 6.0),
        "HardSwish": (ACT_HARDSWISH, NAN, NAN),
        "SiLU": (ACT_SILU, NAN, NAN),
    }[act]
    with _level(None):
        want, done = runner(x, addend, False, spec)
        assert not done  # the numpy path leaves the activation to the caller
        if spec is not None:
            want = _activated(np.array(want), spec[0])
    for level in LEVELS:
        for layout in ("nchw", "nhwc"):
            src, add = x, addend
            if layout == "nhwc":  # channels-last buffers, seen as NCHW arrays
                src = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
                if addend is not None:
                    add = np.ascontiguousarray(addend.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
            with _level(level):
                got, done = runner(src, add, False, spec)
            # The activation goes in the kernel's pass when the addend does (a
            # channels-last one); after an NCHW addend's numpy add, the caller applies it.
            dense = add is None or add.transpose(0, 2, 3, 1).flags.c_contiguous
            assert done == (spec is not None and dense)
            if not done and spec is not None:
                got = _activated(np.array(got), spec[0])
            close(got, want, f"level {level}, {layout} input")


def _mnv2_stack() -> tuple[Any, dict[str, np.ndarray]]:
    """A MobileNetV2-style inverted-residual stack with ReLU6 as Clip(0, 6) (the
    bench_activations model, smaller)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(9)
    nodes: list[Any] = []
    inits: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    lo, hi = const("lo", np.array(0.0)), const("hi", np.array(6.0))
    count = [0]

    def conv_node(x: str, cin: int, cout: int, k: int, stride: int, group: int, clip: bool) -> str:
        count[0] += 1
        i = count[0]
        w = rng.standard_normal((cout, cin // group, k, k)) * math.sqrt(
            2.0 / (cin // group * k * k)
        )
        ins = [x, const(f"w{i}", w), const(f"b{i}", rng.standard_normal(cout) * 0.1)]
        y = f"c{i}"
        nodes.append(
            helper.make_node(
                "Conv", ins, [y], group=group, pads=[k // 2] * 4, strides=[stride, stride]
            )
        )
        if clip:
            nodes.append(helper.make_node("Clip", [y, lo, hi], [f"r{i}"]))
            y = f"r{i}"
        return y

    x = conv_node("x", 3, 16, 3, 2, 1, True)
    c = 16
    for expand, out, stride, k in [(6, 24, 2, 3), (6, 24, 1, 3), (6, 40, 2, 5), (6, 40, 1, 5)]:
        hidden = c * expand
        y = conv_node(x, c, hidden, 1, 1, 1, True)
        y = conv_node(y, hidden, hidden, k, stride, hidden, True)
        y = conv_node(y, hidden, out, 1, 1, 1, False)
        if stride == 1 and out == c:
            count[0] += 1
            nodes.append(helper.make_node("Add", [y, x], [f"a{count[0]}"]))
            y = f"a{count[0]}"
        x, c = y, out
    graph = helper.make_graph(
        nodes,
        "mnv2",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, 3, 64, 64)).astype(np.float32)}
    return model, feeds


def _models() -> dict[str, Any]:
    from tests.data.exports import load

    from .test_channels_last import _mobilenet

    models: dict[str, Any] = {
        "mobilenetv3_small_by_hand": _mobilenet(),
        "mobilenetv2_relu6_stack": _mnv2_stack(),
    }
    for name in ("torchscript_mobilenet_small", "torchscript_unet"):
        model, feeds, _ = load(name)
        models[name] = (model, feeds)
    return models


@pytest.mark.parametrize(
    "name",
    [
        "torchscript_mobilenet_small",
        "mobilenetv3_small_by_hand",
        "mobilenetv2_relu6_stack",
        "torchscript_unet",
    ],
)
def test_models_give_the_same_outputs_with_the_kernel_on_and_off(name: str) -> None:
    _module()
    model, feeds = _models()[name]
    calls = []
    load = native.load

    def counting(module_name: str) -> Any:
        got = load(module_name)
        if module_name == "depthwise" and got is not None:
            calls.append(module_name)
        return got

    with _level(LEVELS[-1]), pytest.MonkeyPatch.context() as mp:
        mp.setattr(native, "load", counting)
        Session(model).run(feeds)
    # The models reach the kernel, but for the UNet's one depthwise conv: a channel
    # multiplier of 2 (8 -> 16 channels), which stays on the numpy path.
    assert bool(calls) == (name != "torchscript_unet"), calls
    with _level(None):
        off = Session(model).run(feeds)
        stepped_off = assert_modes_agree(model, feeds)
    for level in LEVELS:
        with _level(level):
            on = Session(model).run(feeds)
            stepped_on = assert_modes_agree(model, feeds)
        for out_name, value in off.items():
            close(on[out_name], value, f"{name}, level {level}, output {out_name}")
            close(stepped_on[out_name], stepped_off[out_name], f"{name} stepped, level {level}")


def test_the_random_conv_chains_pass_at_every_level() -> None:
    """test_channels_last's random chains (fewer of them) at each level."""
    _module()
    from .test_channels_last import conv_chains

    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(conv_chains())
    def chains(case: tuple[Any, dict[str, np.ndarray]]) -> None:
        model, feeds = case
        for level in LEVELS:
            with _level(level):
                assert_modes_agree(model, feeds)

    chains()
