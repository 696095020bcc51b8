"""The compiled direct conv (runtime/native/_conv.c) against a float64 conv.

* The module at every level this CPU has (``native.levels()``, each set directly), on
  random geometries (hypothesis: channels 1-40, none or some multiples of a vector,
  kernels 1..7, strides 1..3, dilations 1..2, asymmetric pads 0..3, batch 1..3, 1x1
  images), with and without bias and addend, each activation, each layout of input and
  output: within the float32 error bound of the K-term sum (gamma(K + 2) times the sum
  of |x * w| plus |bias| and |addend|) of the float64 conv, the activation applied.
* NaN and Inf in the input reach exactly the outputs whose windows hold them.
* Every size and type it is given is checked: a wrong buffer raises ValueError.
* Wired in: a small ONNX model (strided 7x7 stem, Conv -> BatchNormalization -> Add
  residual -> Relu, a strided 3x3 and a strided 1x1 downsample) gives the same outputs
  in stepped, fused and plain runs, with the kernel on at every level and off, and
  onnxruntime's; the unwatched run really goes through the kernel (counted).
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import nn_conv
from onnxviz.runtime.kernels.nn_conv import (
    ACT_CLIP,
    ACT_HARDSWISH,
    ACT_NONE,
    ACT_RELU,
    ACT_SILU,
    direct_lanes,
    pack_direct,
)
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled

from .differential import assert_modes_agree, close

pytestmark = pytest.mark.numeric

NAN = math.nan
LEVELS = native.levels()
U = 2.0**-24


def _module() -> Any:
    """The compiled module (built wherever this machine can compile: test_native)."""
    return compiled("conv")


def _level(level: int | None) -> AbstractContextManager[None]:
    return at_level("conv", level)


# -- the module against a float64 conv ------------------------------------------------------


def _exact(
    x: np.ndarray,
    w: np.ndarray,
    strides: tuple[int, int],
    dilations: tuple[int, int],
    pads: tuple[int, int, int, int],
) -> tuple[np.ndarray, np.ndarray]:
    """The float64 conv of the NCHW ``x`` (zero-padded) and the sum of |x * w| of each
    output (the error bound's scale): one product per kernel offset."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    sh, sw = strides
    dh, dw = dilations
    oh = (h + pads[0] + pads[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pads[1] + pads[3] - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, m, oh, ow))
    scale = np.zeros((n, m, oh, ow))
    w64 = w.astype(np.float64)
    with np.errstate(invalid="ignore"):
        for ky in range(kh):
            for kx in range(kw):
                window = xp[
                    :,
                    :,
                    ky * dh : ky * dh + sh * (oh - 1) + 1 : sh,
                    kx * dw : kx * dw + sw * (ow - 1) + 1 : sw,
                ]
                y += np.einsum("nchw,mc->nmhw", window, w64[:, :, ky, kx])
                scale += np.einsum("nchw,mc->nmhw", np.abs(window), np.abs(w64[:, :, ky, kx]))
    return y, scale


def _activate(y: np.ndarray, act: tuple[int, float, float]) -> np.ndarray:
    code, lo, hi = act
    if code == ACT_RELU:
        return np.where(y < 0, 0.0, y)
    if code == ACT_CLIP:
        if not math.isnan(lo):
            y = np.where(y < lo, lo, y)
        if not math.isnan(hi):
            y = np.where(y > hi, hi, y)
        return y
    if code == ACT_HARDSWISH:
        return y * np.clip(y / 6 + 0.5, 0, 1)
    if code == ACT_SILU:
        with np.errstate(over="ignore"):
            return y / (1 + np.exp(-y))
    return y


def _run(
    module: Any,
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    addend: np.ndarray | None,
    strides: tuple[int, int],
    dilations: tuple[int, int],
    pads: tuple[int, int, int, int],
    act: tuple[int, float, float],
    layouts: int,
) -> np.ndarray:
    """The module's conv of the NCHW arrays, in the given layouts, as NCHW."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    oh = (h + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    x_first, out_first = layouts & 1, layouts & 2
    xin = x if x_first else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    add = addend
    if addend is not None and not out_first:
        add = np.ascontiguousarray(addend.transpose(0, 2, 3, 1))
    out = np.full((n, m, oh, ow) if out_first else (n, oh, ow, m), 7.0, dtype=np.float32)
    lanes = module.lanes()
    module.conv_nhwc(
        xin,
        pack_direct(w, lanes),
        bias,
        add,
        out,
        (n, h, wd, c),
        (m, kh, kw),
        (oh, ow),
        strides,
        dilations,
        pads[:2],
        *act,
        lanes,
        layouts,
    )
    return out if out_first else out.transpose(0, 3, 1, 2)


@st.composite
def geometries(draw: Any) -> dict[str, Any]:
    kh, kw = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h = draw(st.integers(max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]), 20))
    w = draw(st.integers(max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]), 20))
    act = draw(st.sampled_from([ACT_NONE, ACT_RELU, ACT_CLIP, ACT_HARDSWISH, ACT_SILU]))
    lo, hi = NAN, NAN
    if act == ACT_CLIP:
        lo = draw(st.sampled_from([NAN, -1.0, 0.0]))
        hi = draw(st.sampled_from([NAN, 0.5, 6.0]))
    # Below, at and above a vector (8/16 lanes), and two (the 2-vector tiles).
    channels = st.sampled_from([1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40])
    return {
        "n": draw(st.integers(1, 3)),
        "c": draw(channels),
        "m": draw(channels),
        "hw": (h, w),
        "kernel": (kh, kw),
        "strides": (sh, sw),
        "dilations": (dh, dw),
        "pads": pads,
        "bias": draw(st.booleans()),
        "addend": draw(st.booleans()),
        "act": (act, lo, hi),
        "layouts": draw(st.integers(0, 3)),
        "seed": draw(st.integers(0, 2**31)),
    }


def _arrays(g: dict[str, Any]) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(g["seed"])
    n, c, m = g["n"], g["c"], g["m"]
    x = rng.standard_normal((n, c, *g["hw"])).astype(np.float32)
    w = rng.standard_normal((m, c, *g["kernel"])).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    return x, w, b


def _check_bound(
    got: np.ndarray,
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    addend: np.ndarray | None,
    g: dict[str, Any],
) -> None:
    """got within gamma(K + 2) (sum |x w| + |bias| + |addend|) of the exact conv, the
    activation applied (HardSwish's slope reaches 1.5; its own float32 steps a few ulps;
    SiLU's slope within [-0.1, 1.1], its sigmoid within 3 ulps and the product's rounding:
    8u of the result)."""
    exact, scale = _exact(x, w, g["strides"], g["dilations"], g["pads"])
    if bias is not None:
        exact += bias.reshape(1, -1, 1, 1)
        scale += np.abs(bias.astype(np.float64)).reshape(1, -1, 1, 1)
    if addend is not None:
        exact += addend
        scale += np.abs(addend.astype(np.float64))
    k = w.shape[1] * w.shape[2] * w.shape[3]
    gamma = (k + 2) * U / (1 - (k + 2) * U)
    want = _activate(exact, g["act"])
    own = 8 if g["act"][0] == ACT_SILU else 4  # the activation's own roundings, in u
    bound = 1.5 * gamma * scale + own * U * np.abs(want) + 1e-30
    err = np.abs(got.astype(np.float64) - want)
    worst = float(np.max(err / bound, initial=0.0))
    assert worst <= 1.0, f"error {worst:.3g} x the bound"


@pytest.mark.parametrize("level", LEVELS)
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(g=geometries())
def test_every_level_is_within_the_bound_of_the_exact_conv(level: int, g: dict[str, Any]) -> None:
    module = _module()
    x, w, b = _arrays(g)
    bias = b if g["bias"] else None
    exact, _ = _exact(x, w, g["strides"], g["dilations"], g["pads"])
    addend = None
    if g["addend"]:
        addend = np.random.default_rng(g["seed"] + 1).standard_normal(exact.shape)
        addend = addend.astype(np.float32)
    module.set_level(level)
    try:
        got = _run(
            module,
            x,
            w,
            bias,
            addend,
            g["strides"],
            g["dilations"],
            g["pads"],
            g["act"],
            g["layouts"],
        )
    finally:
        module.set_level(LEVELS[-1])
    assert got.shape == exact.shape
    _check_bound(got, x, w, bias, addend, g)


# Few input channels (C <= 4 read channels-first: at AVX-512 the pixels-in-lanes tiles
# over phase planes, below it the tiles over transposed rows, an image's 3 channels by
# their own loop): (c, m, (h, w), kernel, strides, dilations, pads (top, left, bottom,
# right)).  Output rows of whole and partial 16-pixel vectors and 1-3 vector tiles,
# groups of 8 output channels whole and cut, strides 1-3, dilation, asymmetric pads.
STEMS = [
    (3, 16, (224, 224), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),  # MobileNetV3's stem
    (3, 64, (20, 229), (7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),  # ResNet-50's, fewer rows
    (3, 16, (9, 67), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 8, (6, 33), (5, 5), (1, 1), (1, 1), (2, 0, 1, 2)),
    (4, 24, (7, 50), (3, 3), (3, 3), (1, 1), (0, 1, 2, 0)),
    (2, 3, (5, 31), (1, 1), (2, 2), (1, 1), (0, 0, 0, 0)),
    (3, 17, (8, 100), (4, 3), (2, 2), (2, 2), (1, 2, 1, 1)),
    (3, 32, (6, 96), (3, 3), (1, 2), (1, 1), (1, 1, 1, 1)),  # whole 16-pixel tiles at s 1
    (3, 48, (7, 75), (3, 3), (2, 2), (1, 1), (1, 1, 0, 2)),  # channels-last rows staged
    (2, 40, (5, 40), (2, 2), (1, 1), (1, 1), (0, 0, 1, 1)),
]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layouts", [0, 1, 2, 3])
@pytest.mark.parametrize("stem", STEMS, ids=lambda s: f"c{s[0]}m{s[1]}w{s[2][1]}k{s[3][1]}")
@pytest.mark.parametrize(
    "epilogue",
    [(True, False, ACT_HARDSWISH), (True, True, ACT_RELU), (False, False, ACT_NONE)],
    ids=["bias-hardswish", "bias-addend-relu", "plain"],
)
def test_few_input_channels_are_within_the_bound_at_every_level(
    level: int, layouts: int, stem: tuple[Any, ...], epilogue: tuple[bool, bool, int]
) -> None:
    module = _module()
    c, m, hw, kernel, strides, dilations, pads = stem
    g = {"strides": strides, "dilations": dilations, "pads": pads, "act": (epilogue[2], NAN, NAN)}
    rng = np.random.default_rng(c * 1000 + m)
    x = rng.standard_normal((1, c, *hw)).astype(np.float32)
    w = rng.standard_normal((m, c, *kernel)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32) if epilogue[0] else None
    exact, _ = _exact(x, w, strides, dilations, pads)
    addend = rng.standard_normal(exact.shape).astype(np.float32) if epilogue[1] else None
    module.set_level(level)
    try:
        got = _run(module, x, w, bias, addend, strides, dilations, pads, g["act"], layouts)
    finally:
        module.set_level(LEVELS[-1])
    assert got.shape == exact.shape
    _check_bound(got, x, w, bias, addend, g)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layouts", [0, 1, 2, 3])
@pytest.mark.parametrize("c", [5, 3])
def test_nan_and_inf_reach_exactly_the_outputs_whose_windows_hold_them(
    level: int, layouts: int, c: int
) -> None:
    module = _module()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, c, 11, 13)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    x[1, c - 1, 9, 0] = np.inf
    x[1, 0, 0, 12] = -np.inf
    w = rng.standard_normal((19, c, 3, 3)).astype(np.float32)
    pads = (1, 2, 0, 1)
    module.set_level(level)
    try:
        got = _run(module, x, w, None, None, (1, 2), (1, 1), pads, (ACT_NONE, NAN, NAN), layouts)
    finally:
        module.set_level(LEVELS[-1])
    want, _ = _exact(x, w, (1, 2), (1, 1), pads)
    assert np.isnan(want).any() and np.isinf(want).any()  # the test reaches both
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    # NaN stays NaN through the activations (Relu and Clip do not clamp it away)
    for act in [(ACT_RELU, NAN, NAN), (ACT_CLIP, -1.0, 1.0), (ACT_HARDSWISH, NAN, NAN)]:
        y = _run(module, x, w, None, None, (1, 2), (1, 1), pads, act, layouts)
        np.testing.assert_array_equal(np.isnan(y[np.isnan(want)]), True)


def _good_args(module: Any) -> dict[str, Any]:
    """Arguments of one valid call: 2x5x6 image of 3 channels, 4 outputs, 3x3, pad 1."""
    lanes = module.lanes()
    return {
        "x": np.zeros((1, 5, 6, 3), np.float32),
        "w": np.zeros((1, 3, 3, 3, lanes), np.float32),
        "bias": np.zeros(4, np.float32),
        "addend": np.zeros((1, 5, 6, 4), np.float32),
        "out": np.zeros((1, 5, 6, 4), np.float32),
        "dims": (1, 5, 6, 3),
        "kernel": (4, 3, 3),
        "out_hw": (5, 6),
        "strides": (1, 1),
        "dilations": (1, 1),
        "pads": (1, 1),
        "act": (0, NAN, NAN),
        "lanes": lanes,
        "layouts": 0,
    }


def _call(module: Any, a: dict[str, Any]) -> None:
    module.conv_nhwc(
        a["x"],
        a["w"],
        a["bias"],
        a["addend"],
        a["out"],
        a["dims"],
        a["kernel"],
        a["out_hw"],
        a["strides"],
        a["dilations"],
        a["pads"],
        *a["act"],
        a["lanes"],
        a["layouts"],
    )


BAD_CALLS: list[tuple[str, Any]] = [
    ("x", np.zeros((1, 5, 6, 2), np.float32)),
    ("x", np.zeros((1, 5, 6, 3), np.float64)),
    ("w", np.zeros(10, np.float32)),
    ("bias", np.zeros(3, np.float32)),
    ("addend", np.zeros((1, 5, 5, 4), np.float32)),
    ("out", np.zeros((1, 5, 6, 5), np.float32)),
    ("out", np.zeros((1, 5, 6, 4), np.int32)),
    ("dims", (0, 5, 6, 3)),
    ("kernel", (4, 0, 3)),
    ("strides", (0, 1)),
    ("dilations", (1, -1)),
    ("pads", (-1, 0)),
    ("act", (5, NAN, NAN)),
    ("lanes", 4),
    ("layouts", 4),
]


@pytest.mark.parametrize(("field", "value"), BAD_CALLS)
def test_a_wrong_size_or_type_raises_before_reading(field: str, value: Any) -> None:
    module = _module()
    args = _good_args(module)
    _call(module, args)  # the valid call runs
    args[field] = value
    with pytest.raises(ValueError):
        _call(module, args)


def test_a_weight_packed_for_another_level_is_refused() -> None:
    """16 output channels packed for 8 lanes have the size of 16 packed for 16: the
    lanes argument, not the size, tells them apart."""
    module = _module()
    if len(LEVELS) < 3:
        pytest.skip("this CPU has one vector width")
    args = _good_args(module)
    module.set_level(1)
    try:
        args["lanes"] = 16
        with pytest.raises(ValueError, match="lanes"):
            _call(module, args)
    finally:
        module.set_level(LEVELS[-1])


def test_it_only_writes_to_a_writable_buffer_and_the_kernel_height_is_bounded() -> None:
    module = _module()
    args = _good_args(module)
    out = args["out"]
    out.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        _call(module, args)
    args = _good_args(module)
    args["x"] = np.zeros((1, 40, 6, 3), np.float32)
    args["dims"] = (1, 40, 6, 3)
    args["w"] = np.zeros((1, 33, 3, 3, module.lanes()), np.float32)
    args["kernel"] = (4, 33, 3)
    args["out_hw"] = (40 + 2 - 32, 6)
    args["addend"] = None
    args["out"] = np.zeros((1, 10, 6, 4), np.float32)
    with pytest.raises(ValueError, match="kernel height"):
        _call(module, args)


# -- wired in: Conv nodes, fused chains, whole models ------------------------------------


def _block_model() -> onnx.ModelProto:
    """A ResNet-style stage: 7x7/2 stem (3 channels), Conv 3x3 -> BatchNormalization ->
    Add(the residual) -> Relu, a 3x3/2 conv beside a 1x1/2 downsample, summed, Relu;
    channel counts off the vector widths (3 -> 20 -> 20 -> 36)."""
    rng = np.random.default_rng(11)

    def init(name: str, *shape: int, scale: float = 0.2) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    inits = [
        init("w_stem", 20, 3, 7, 7),
        init("b_stem", 20),
        init("w1", 20, 20, 3, 3),
        init("w2", 36, 20, 3, 3),
        init("b2", 36),
        init("w_down", 36, 20, 1, 1),
        numpy_helper.from_array((rng.random(20) + 0.5).astype(np.float32), "bn_scale"),
        init("bn_bias", 20),
        init("bn_mean", 20),
        numpy_helper.from_array((rng.random(20) + 0.5).astype(np.float32), "bn_var"),
    ]
    nodes = [
        helper.make_node(
            "Conv", ["x", "w_stem", "b_stem"], ["stem"], strides=[2, 2], pads=[3, 3, 3, 3]
        ),
        helper.make_node("Relu", ["stem"], ["s"]),
        helper.make_node("Conv", ["s", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn"]
        ),
        helper.make_node("Add", ["bn", "s"], ["r"]),
        helper.make_node("Relu", ["r"], ["a"]),
        helper.make_node("Conv", ["a", "w2", "b2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["a", "w_down"], ["d"], strides=[2, 2]),
        helper.make_node("Add", ["c2", "d"], ["r2"]),
        helper.make_node("Relu", ["r2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 23, 21])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds() -> dict[str, np.ndarray]:
    x = np.random.default_rng(3).standard_normal((2, 3, 23, 21)).astype(np.float32)
    return {"x": x}


@pytest.mark.parametrize("level", [None, *LEVELS])
def test_a_resnet_block_runs_the_same_in_every_mode_at_every_level(
    level: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if level is not None:
        _module()
    calls: list[int] = []
    real = nn_conv.native_direct

    def counted(*args: Any, **kwargs: Any) -> bool:
        done = real(*args, **kwargs)
        calls.append(int(done))
        return done

    # Both callers look it up in their own module's namespace.
    from onnxviz.runtime.kernels import nn_conv_nhwc

    monkeypatch.setattr(nn_conv, "native_direct", counted)
    monkeypatch.setattr(nn_conv_nhwc, "native_direct", counted)
    model = _block_model()
    with _level(level):
        stepped = assert_modes_agree(model, _feeds(), rtol=1e-4)
        fused = Session(model).run(_feeds())
    if level is None:
        assert sum(calls) == 0  # the kernels are off: nothing ran it
    else:
        assert sum(calls) >= 4  # the stem, both 3x3s and the 1x1/2 in some run
    ort = pytest.importorskip("onnxruntime")
    theirs = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, _feeds())[0]
    close(np.asarray(fused["y"]), theirs, "fused run against onnxruntime", rtol=1e-4)
    close(np.asarray(stepped["y"]), theirs, "stepped run against onnxruntime", rtol=1e-4)


def test_the_routing_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    _module()
    calls: list[int] = []
    real = nn_conv.native_direct
    from onnxviz.runtime.kernels import nn_conv_nhwc

    def counted(*args: Any, **kwargs: Any) -> bool:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(nn_conv, "native_direct", counted)
    monkeypatch.setattr(nn_conv_nhwc, "native_direct", counted)
    monkeypatch.setenv("ONNXVIZ_DIRECT_CONV", "off")
    model = _block_model()
    with _level(LEVELS[-1]):
        off = Session(model).run(_feeds())["y"]
    assert calls == []
    monkeypatch.setenv("ONNXVIZ_DIRECT_CONV", "auto")
    with _level(LEVELS[-1]):
        on = Session(model).run(_feeds())["y"]
    assert calls
    close(np.asarray(on), np.asarray(off), "routed on against off", rtol=1e-4)


def test_a_wide_channels_last_conv_runs_winograd_and_gives_the_same_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From 256 x 256 channels (512 x 512 with the AVX2 kernel's 8 lanes) a
    Winograd-fitting conv in a channels-last chain runs Winograd (nn_conv_nhwc._Direct),
    with bias and residual, in NCHW, where the blocked kernel and the fused channels-last
    Winograd conv do not (switched off here: test_native_conv_blocked and
    test_native_winograd_nhwc route them); half as many channels run direct."""
    from onnxviz.runtime.kernels.nn_conv import conv_core, direct_lanes
    from onnxviz.runtime.kernels.nn_conv_nhwc import nhwc, prepare_channels_last

    _module()
    monkeypatch.setenv("ONNXVIZ_BLOCKED_CONV", "off")
    monkeypatch.setenv("ONNXVIZ_WINOGRAD_NHWC", "off")
    rng = np.random.default_rng(2)
    with _level(LEVELS[-1]):
        wide = 512 if direct_lanes() == 8 else 256
    x = nhwc(rng.standard_normal((1, wide, 14, 14)).astype(np.float32)).transpose(0, 3, 1, 2)
    w = (rng.standard_normal((wide, wide, 3, 3)) * 0.05).astype(np.float32)
    b = rng.standard_normal(wide).astype(np.float32)
    r = rng.standard_normal((1, wide, 14, 14)).astype(np.float32)
    half = wide // 2
    with _level(LEVELS[-1]):
        runner = prepare_channels_last(x, w, b, {"pads": [1, 1, 1, 1]})
        assert runner is not None and getattr(runner, "winograd", None) is not None
        got, done = runner(x, r, False, (ACT_RELU, NAN, NAN))
        narrow = prepare_channels_last(x[:, :half], w[:half, :half], b[:half], {"pads": [1] * 4})
        assert narrow is not None and getattr(narrow, "winograd", "absent") is None
    assert not done  # the caller applies the activation
    want = conv_core(x, w, 1, [3, 3], [1, 1], [1, 1], [1] * 4, [14, 14], b, addend=r)
    close(np.asarray(got), want, "Winograd in a channels-last chain", rtol=1e-4)


@pytest.mark.parametrize("lanes", [8, 16], ids=["avx2", "avx512"])
def test_below_avx512_deep_1x1_convs_run_the_direct_kernel_with_the_gemms_numbers(
    lanes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the AVX2 kernel (8 lanes) a 1x1 conv of 512+ input channels that does not
    widen them, or is strided, runs the direct kernel (nn_conv_nhwc.
    deep_pointwise_runs_direct), with the bias, the residual and the Relu, within
    float32 rounding of the GEMM path (the product by the plain kernel); a widening or
    shallower 1x1 stays on the GEMM.  With AVX-512's 16 lanes the GEMM takes them all,
    but for a strided 1x1 of up to 256 channels (up to 128 at 8 lanes).
    The routing is asked at both widths on any CPU; the numbers where the CPU runs it."""
    from onnxviz.runtime.kernels import nn_conv_nhwc
    from onnxviz.runtime.kernels.nn_conv import conv_core
    from onnxviz.runtime.kernels.nn_conv_nhwc import _Direct, _Pointwise, prepare_channels_last

    _module()
    runs_here = direct_lanes() == lanes
    monkeypatch.setattr(nn_conv_nhwc, "direct_lanes", lambda: lanes)
    rng = np.random.default_rng(5)

    def runner(c: int, m: int, strides: list[int]) -> Any:
        x = rng.standard_normal((1, c, 7, 7)).astype(np.float32)
        w = (rng.standard_normal((m, c, 1, 1)) / math.sqrt(c)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        return prepare_channels_last(x, w, b, {"strides": strides}), x, w, b

    deep_kind = _Direct if lanes == 8 else _Pointwise
    deep, x, w, b = runner(1024, 256, [1, 1])
    assert isinstance(deep, deep_kind)
    assert isinstance(runner(512, 512, [1, 1])[0], deep_kind)
    assert isinstance(runner(512, 1024, [2, 2])[0], deep_kind)  # strided
    assert isinstance(runner(512, 1024, [1, 1])[0], _Pointwise)  # widens
    assert isinstance(runner(256, 64, [1, 1])[0], _Pointwise)  # shallower
    # a strided 1x1 of 256 channels: the direct kernel reads every second pixel in place
    # at 16 lanes; at 8 the GEMM's blocking wins (nn_conv_nhwc._strided_direct_channels)
    assert isinstance(runner(256, 512, [2, 2])[0], _Pointwise if lanes == 8 else _Direct)
    assert isinstance(runner(128, 256, [2, 2])[0], _Direct)
    if not runs_here:
        return
    r = rng.standard_normal((1, 256, 7, 7)).astype(np.float32)
    got, done = deep(x, r, False, (ACT_RELU, NAN, NAN))
    want = conv_core(x, w, 1, [1, 1], [1, 1], [1, 1], [0] * 4, [7, 7], b, addend=r)
    close(np.asarray(got), np.maximum(want, 0) if done else want, "a deep 1x1", rtol=1e-4)
    # In a model: a 3x3 makes the chain channels-last, the deep 1x1 after it (with its
    # bias, a residual and a Relu) runs the direct kernel at 8 lanes and the GEMM at 16,
    # and every run mode gives the stepped run's numbers.
    routed: list[tuple[int, ...]] = []
    direct_init = _Direct.__init__

    def seen(self: Any, x_shape: Any, w: np.ndarray, *args: Any) -> None:
        routed.append(w.shape)
        direct_init(self, x_shape, w, *args)

    monkeypatch.setattr(_Direct, "__init__", seen)
    inits = [
        numpy_helper.from_array(
            (rng.standard_normal((512, 32, 3, 3)) * 0.1).astype(np.float32), "w3"
        ),
        numpy_helper.from_array(w[:, :512].copy(), "w1"),
        numpy_helper.from_array(b, "b1"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w3"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["h"]),
        helper.make_node("Conv", ["h", "w1", "b1"], ["c1"]),
        helper.make_node("Add", ["c1", "r"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "deep_1x1",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 7, 7]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 256, 7, 7]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256, 7, 7])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, 32, 7, 7)).astype(np.float32), "r": r}
    assert_modes_agree(model, feeds)
    assert ((256, 512, 1, 1) in routed) == (lanes == 8), routed


def test_a_weight_folded_at_run_time_joins_the_channels_last_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A conv weight that a foldable node makes (the light models' ConstantOfShape) is
    planned from the node's kernel_shape: the block runs the direct conv channels-last
    and agrees with the stepped run."""
    _module()
    model = _block_model()
    for node in model.graph.node:
        if node.op_type == "Conv":
            folded = node.input[1] + "_folded"
            model.graph.node.append(helper.make_node("Identity", [node.input[1]], [folded]))
            node.input[1] = folded
            w = next(i for i in model.graph.initializer if i.name + "_folded" == folded)
            node.attribute.append(helper.make_attribute("kernel_shape", list(w.dims[2:])))
    # Identity nodes first: a topological order again
    convs = [n for n in model.graph.node if n.op_type != "Identity"]
    ids = [n for n in model.graph.node if n.op_type == "Identity"]
    del model.graph.node[:]
    model.graph.node.extend(ids + convs)
    from onnxviz.runtime.fusion_layout import ChannelsLast
    from onnxviz.runtime.kernels import nn_conv_nhwc

    emitted: list[bool] = []
    real_init = ChannelsLast.__init__

    def spy(self: ChannelsLast, emit: bool) -> None:
        emitted.append(emit)
        real_init(self, emit)

    monkeypatch.setattr(ChannelsLast, "__init__", spy)
    calls: list[int] = []
    real = nn_conv_nhwc.native_direct

    def counted(*args: Any, **kwargs: Any) -> bool:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(nn_conv_nhwc, "native_direct", counted)
    with _level(LEVELS[-1]):
        assert_modes_agree(model, _feeds(), rtol=1e-4)
    assert any(emitted)  # some conv's output stays channels-last
    assert calls  # and the chain ran the direct conv


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layouts", [0, 3])
def test_wide_convs_pass_over_the_image_once_per_group_of_channel_blocks(
    level: int, layouts: int
) -> None:
    """600 -> 70 channels 3x3 (and 2 -> 70 5x5 for contrast): the weights of all
    output blocks (1.5-1.7 MB) exceed the kernel's weights per pass (half the L2, else
    512 KB), so it runs the image once per group of blocks (each pass re-reads the row
    buffer's rows); within the bound."""
    module = _module()
    for c, k, seed in [(600, 3, 1), (2, 5, 2)]:
        g: dict[str, Any] = {
            "n": 2,
            "c": c,
            "m": 70,
            "hw": (7, 9),
            "kernel": (k, k),
            "strides": (1, 1),
            "dilations": (1, 1),
            "pads": (1, 2, 1, 0),
            "act": (ACT_RELU, NAN, NAN),
            "seed": seed,
        }
        x, w, b = _arrays(g)
        exact, _ = _exact(x, w, (1, 1), (1, 1), g["pads"])
        addend = np.random.default_rng(seed).standard_normal(exact.shape).astype(np.float32)
        module.set_level(level)
        try:
            got = _run(module, x, w, b, addend, (1, 1), (1, 1), g["pads"], g["act"], layouts)
        finally:
            module.set_level(LEVELS[-1])
        _check_bound(got, x, w, b, addend, g)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("m", [8, 32, 33, 40, 64])
def test_a_pixels_bits_do_not_depend_on_how_its_row_is_cut_into_tiles(level: int, m: int) -> None:
    """Output rows of a multiple of 14 pixels run 14-pixel tiles at AVX-512, other widths
    near-equal tiles of at most 12 (AVX2: 6, and 8 for a pass's lone block of 8 channels:
    m 8, and 40's fifth block): the same conv on a 28-, 27-, 26- and 14-column image
    (with bias, addend and Relu; left padding only, so no column reads past the cut) gives
    every column they share the same bits, within the bound of the exact conv."""
    module = _module()
    rng = np.random.default_rng(m)
    x = rng.standard_normal((1, 24, 6, 28)).astype(np.float32)
    w = rng.standard_normal((m, 24, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    pads = (1, 2, 1, 0)
    act = (ACT_RELU, NAN, NAN)
    full, _ = _exact(x, w, (1, 1), (1, 1), pads)
    addend = rng.standard_normal(full.shape).astype(np.float32)
    module.set_level(level)
    try:
        outs = {
            width: _run(
                module,
                np.ascontiguousarray(x[..., :width]),
                w,
                b,
                np.ascontiguousarray(addend[..., :width]),
                (1, 1),
                (1, 1),
                pads,
                act,
                0,
            )
            for width in (28, 27, 26, 14)
        }
    finally:
        module.set_level(LEVELS[-1])
    g = {"strides": (1, 1), "dilations": (1, 1), "pads": pads, "act": act}
    _check_bound(outs[28], x, w, b, addend, g)
    for width in (27, 26, 14):
        assert outs[width].shape[-1] == width
        np.testing.assert_array_equal(outs[width], outs[28][..., :width])


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("c", [3, 8, 16, 19, 40])
def test_a_channels_first_input_gives_the_channels_last_inputs_bits(level: int, c: int) -> None:
    """An NCHW input is copied into the row buffer one transposed row at a time (AVX2: 8
    channels by 8 pixels a step, the rest one by one); the kernel then reads the same
    values as from the channels-last array, so every output has the same bits, whatever
    the width's and the channels' remainders, the padding, the stride or the dilation."""
    module = _module()
    rng = np.random.default_rng(c)
    module.set_level(level)
    try:
        for width, pads, strides, dilations in [
            (7, (1, 1, 1, 1), (1, 1), (1, 1)),
            (8, (0, 2, 1, 0), (1, 1), (1, 1)),
            (13, (1, 1, 1, 1), (1, 2), (1, 1)),
            (24, (2, 2, 2, 2), (1, 1), (2, 2)),
            (33, (1, 0, 1, 3), (2, 1), (1, 1)),
        ]:
            x = rng.standard_normal((2, c, 5, width)).astype(np.float32)
            w = rng.standard_normal((17, c, 3, 3)).astype(np.float32)
            b = rng.standard_normal(17).astype(np.float32)
            act = (ACT_RELU, NAN, NAN)
            first = _run(module, x, w, b, None, strides, dilations, pads, act, 1)
            last = _run(module, x, w, b, None, strides, dilations, pads, act, 0)
            np.testing.assert_array_equal(first, last, err_msg=f"width {width}")
            g = {"strides": strides, "dilations": dilations, "pads": pads, "act": act}
            _check_bound(first, x, w, b, None, g)
    finally:
        module.set_level(LEVELS[-1])


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("m", [1, 5, 8, 12, 16, 17, 24])
@pytest.mark.parametrize(
    "act",
    [(ACT_NONE, NAN, NAN), (ACT_RELU, NAN, NAN), (ACT_CLIP, -0.5, 0.75), (ACT_HARDSWISH, NAN, NAN)],
    ids=["none", "relu", "clip", "hardswish"],
)
def test_a_channels_first_output_gives_the_channels_last_outputs_bits(
    level: int, m: int, act: tuple[int, float, float]
) -> None:
    """A tile's sums reach channels-first planes through a transpose in registers and one
    masked store per channel (AVX2), channels-last pixels through one store per pixel:
    the same sums, bias, addend and activation in the same order, so the same bits, for
    every tile width (rows of 1 to 13 pixels), every remainder of the last channel block,
    with and without bias and addend; a store past a tile's pixels would land on a
    neighbour already written (the next plane's first row after the last row's tile)."""
    module = _module()
    rng = np.random.default_rng(m * 31 + act[0])
    module.set_level(level)
    try:
        for width in range(1, 14):
            x = rng.standard_normal((1, 6, 3, width)).astype(np.float32)
            w = rng.standard_normal((m, 6, 3, 3)).astype(np.float32)
            b = rng.standard_normal(m).astype(np.float32)
            addend = rng.standard_normal((1, m, 3, width)).astype(np.float32)
            for bias, add in [(b, addend), (None, None), (b, None)]:
                args = (module, x, w, bias, add, (1, 1), (1, 1), (1, 1, 1, 1), act)
                first = _run(*args, 2)
                last = _run(*args, 0)
                np.testing.assert_array_equal(first, last, err_msg=f"width {width}")
                g = {"strides": (1, 1), "dilations": (1, 1), "pads": (1, 1, 1, 1), "act": act}
                _check_bound(first, x, w, bias, add, g)
    finally:
        module.set_level(LEVELS[-1])
