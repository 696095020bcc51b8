"""The compiled blocked direct conv (runtime/native/_conv.c `conv_blocked`) against a
float64 conv, and its routing (nn_conv_nhwc._Direct).

* The module at every level this CPU has, on random geometries (hypothesis: channels
  below, at and above the 16-channel chunk and the 64-channel group, kernels 1..5,
  strides 1..3, dilations 1..2, asymmetric pads 0..3, batch 1..3, rows of one to three
  pixel tiles), with and without bias and addend, each activation: within the float32
  error bound of the K-term sum of the float64 conv (as test_native_conv).
* ResNet-50's wide shapes, scaled and cut (tail chunks and groups): within the bound.
* NaN and Inf in the input reach exactly the outputs whose windows hold them.
* A wrong size or type raises ValueError.
* Routing: a wide channels-last conv with narrow output rows runs it at AVX-512 (not
  Winograd), with the same numbers as nn_conv's paths; off by ONNXVIZ_BLOCKED_CONV=off,
  at AVX2 and on wide rows.  A bottleneck block (1x1, 3x3, 3x3/2, residual) gives the
  same outputs stepped, fused and plain at every level and with the kernels off, and
  onnxruntime's; the unwatched run really goes through the kernel (counted).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import nn_conv, nn_conv_nhwc
from onnxviz.runtime.kernels.nn_conv import (
    ACT_CLIP,
    ACT_HARDSWISH,
    ACT_NONE,
    ACT_RELU,
    ACT_SILU,
    conv_core,
    pack_blocked,
)
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled

from .differential import assert_modes_agree, close
from .test_native_conv import _check_bound, _exact

pytestmark = pytest.mark.numeric

NAN = math.nan
LEVELS = native.levels()


def _module() -> Any:
    return compiled("conv")


def _out_hw(
    hw: tuple[int, int],
    kernel: tuple[int, int],
    strides: tuple[int, int],
    dilations: tuple[int, int],
    pads: tuple[int, int, int, int],
) -> tuple[int, int]:
    return (
        (hw[0] + pads[0] + pads[2] - dilations[0] * (kernel[0] - 1) - 1) // strides[0] + 1,
        (hw[1] + pads[1] + pads[3] - dilations[1] * (kernel[1] - 1) - 1) // strides[1] + 1,
    )


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
) -> np.ndarray:
    """The module's blocked conv of the NCHW arrays (run channels-last), as NCHW."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    oh, ow = _out_hw((h, wd), (kh, kw), strides, dilations, pads)
    add = None if addend is None else np.ascontiguousarray(addend.transpose(0, 2, 3, 1))
    out = np.full((n, oh, ow, m), 7.0, dtype=np.float32)
    module.conv_blocked(
        np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
        pack_blocked(w),
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
    )
    return out.transpose(0, 3, 1, 2)


@st.composite
def geometries(draw: Any) -> dict[str, Any]:
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h = draw(st.integers(max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]), 12))
    w = draw(st.integers(max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]), 24))
    act = draw(st.sampled_from([ACT_NONE, ACT_RELU, ACT_CLIP, ACT_HARDSWISH, ACT_SILU]))
    lo, hi = NAN, NAN
    if act == ACT_CLIP:
        lo = draw(st.sampled_from([NAN, -1.0, 0.0]))
        hi = draw(st.sampled_from([NAN, 0.5, 6.0]))
    return {
        "n": draw(st.integers(1, 3)),
        # below, at and above a chunk (16) and two; a group (64) and its vectors
        "c": draw(st.sampled_from([1, 3, 15, 16, 17, 31, 32, 33, 48, 70])),
        "m": draw(st.sampled_from([1, 5, 16, 17, 33, 48, 63, 64, 65, 100, 130])),
        "hw": (h, w),
        "kernel": (kh, kw),
        "strides": (sh, sw),
        "dilations": (dh, dw),
        "pads": pads,
        "bias": draw(st.booleans()),
        "addend": draw(st.booleans()),
        "act": (act, lo, hi),
        "seed": draw(st.integers(0, 2**31)),
    }


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
    rng = np.random.default_rng(g["seed"])
    x = rng.standard_normal((g["n"], g["c"], *g["hw"])).astype(np.float32)
    w = rng.standard_normal((g["m"], g["c"], *g["kernel"])).astype(np.float32)
    bias = rng.standard_normal(g["m"]).astype(np.float32) if g["bias"] else None
    exact, _ = _exact(x, w, g["strides"], g["dilations"], g["pads"])
    addend = rng.standard_normal(exact.shape).astype(np.float32) if g["addend"] else None
    module.set_level(level)
    try:
        got = _run(module, x, w, bias, addend, g["strides"], g["dilations"], g["pads"], g["act"])
    finally:
        module.set_level(LEVELS[-1])
    assert got.shape == exact.shape
    _check_bound(got, x, w, bias, addend, g)


# ResNet-50's 3x3 convs, fewer channels or pixels where the full ones only cost time,
# and cut ones: (c, m, (h, w), strides, pads).
WIDE = [
    (512, 512, (7, 7), (1, 1), (1, 1, 1, 1)),  # 9.4 MB of weights: prefetch to the end
    (256, 256, (14, 14), (1, 1), (1, 1, 1, 1)),
    (256, 128, (14, 14), (2, 2), (1, 1, 1, 1)),  # the stride-2 ones
    (128, 128, (15, 13), (2, 2), (1, 1, 1, 1)),  # odd sizes: 8 x 7 outputs
    (150, 130, (9, 15), (1, 1), (1, 2, 0, 1)),  # tail chunk and group, asymmetric pads
    (200, 70, (5, 23), (1, 2), (0, 1, 2, 1)),  # rows of three tiles, strided columns
]


@pytest.mark.parametrize("level", sorted({LEVELS[0], LEVELS[-1]}))
@pytest.mark.parametrize("wide", WIDE, ids=lambda s: f"c{s[0]}m{s[1]}h{s[2][0]}s{s[3][1]}")
def test_resnet50_shapes_are_within_the_bound(level: int, wide: tuple[Any, ...]) -> None:
    module = _module()
    c, m, hw, strides, pads = wide
    g = {"strides": strides, "dilations": (1, 1), "pads": pads, "act": (ACT_RELU, NAN, NAN)}
    rng = np.random.default_rng(c + m)
    x = rng.standard_normal((1, c, *hw)).astype(np.float32)
    w = (rng.standard_normal((m, c, 3, 3)) / math.sqrt(9 * c)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    exact, _ = _exact(x, w, strides, (1, 1), pads)
    addend = rng.standard_normal(exact.shape).astype(np.float32)
    module.set_level(level)
    try:
        got = _run(module, x, w, bias, addend, strides, (1, 1), pads, g["act"])
    finally:
        module.set_level(LEVELS[-1])
    _check_bound(got, x, w, bias, addend, g)


@pytest.mark.parametrize("level", LEVELS)
def test_nan_and_inf_reach_exactly_the_outputs_whose_windows_hold_them(level: int) -> None:
    module = _module()
    rng = np.random.default_rng(5)
    c = 21  # a whole chunk and a tail one
    x = rng.standard_normal((2, c, 11, 13)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    x[1, c - 1, 9, 0] = np.inf
    x[1, 17, 0, 12] = -np.inf
    w = rng.standard_normal((70, c, 3, 3)).astype(np.float32)
    pads = (1, 2, 0, 1)
    module.set_level(level)
    try:
        got = _run(module, x, w, None, None, (1, 2), (1, 1), pads, (ACT_NONE, NAN, NAN))
        relu = _run(module, x, w, None, None, (1, 2), (1, 1), pads, (ACT_RELU, NAN, NAN))
    finally:
        module.set_level(LEVELS[-1])
    want, _ = _exact(x, w, (1, 2), (1, 1), pads)
    assert np.isnan(want).any() and np.isinf(want).any()  # the test reaches both
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    np.testing.assert_array_equal(np.isnan(relu[np.isnan(want)]), True)


def _good_args() -> dict[str, Any]:
    """One valid call: a 5x6 image of 20 channels, 70 outputs, 3x3, pad 1."""
    return {
        "x": np.zeros((1, 5, 6, 20), np.float32),
        "w": np.zeros(80 * 20 * 9, np.float32),
        "bias": np.zeros(70, np.float32),
        "addend": np.zeros((1, 5, 6, 70), np.float32),
        "out": np.zeros((1, 5, 6, 70), np.float32),
        "dims": (1, 5, 6, 20),
        "kernel": (70, 3, 3),
        "out_hw": (5, 6),
        "strides": (1, 1),
        "dilations": (1, 1),
        "pads": (1, 1),
        "act": (0, NAN, NAN),
    }


def _call(module: Any, a: dict[str, Any]) -> None:
    module.conv_blocked(
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
    )


BAD_CALLS: list[tuple[str, Any]] = [
    ("x", np.zeros((1, 5, 6, 19), np.float32)),
    ("x", np.zeros((1, 5, 6, 20), np.float64)),
    ("w", np.zeros(70 * 20 * 9, np.float32)),  # not padded to 80 output channels
    ("bias", np.zeros(69, np.float32)),
    ("addend", np.zeros((1, 5, 5, 70), np.float32)),
    ("out", np.zeros((1, 5, 6, 71), np.float32)),
    ("out", np.zeros((1, 5, 6, 70), np.int32)),
    ("dims", (0, 5, 6, 20)),
    ("kernel", (70, 0, 3)),
    ("strides", (0, 1)),
    ("dilations", (1, -1)),
    ("pads", (-1, 0)),
    ("act", (5, NAN, NAN)),
]


@pytest.mark.parametrize(("field", "value"), BAD_CALLS)
def test_a_wrong_size_or_type_raises_before_reading(field: str, value: Any) -> None:
    module = _module()
    args = _good_args()
    _call(module, args)  # the valid call runs
    args[field] = value
    with pytest.raises(ValueError):
        _call(module, args)


def test_it_only_writes_to_a_writable_buffer() -> None:
    module = _module()
    args = _good_args()
    args["out"].flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        _call(module, args)


# -- routing ------------------------------------------------------------------------------


def _wide(size: int, c: int = 256) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(2)
    x = nn_conv_nhwc.nhwc(rng.standard_normal((1, c, size, size)).astype(np.float32))
    w = (rng.standard_normal((c, c, 3, 3)) * 0.05).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    r = nn_conv_nhwc.nhwc(rng.standard_normal((1, c, size, size)).astype(np.float32))
    return x.transpose(0, 3, 1, 2), w, b, r.transpose(0, 3, 1, 2)  # channels-last views


def test_a_wide_conv_on_narrow_rows_runs_blocked_with_the_same_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """256 x 256 channels at 14 px (ResNet-50's) with the fused Winograd conv switched
    off (ONNXVIZ_WINOGRAD_NHWC=off; it takes these at AVX-512): the blocked kernel at
    AVX-512, with bias, residual and Relu in its pass, in place of the NCHW Winograd;
    the numbers of nn_conv's paths.  Not at AVX2, not with ONNXVIZ_BLOCKED_CONV=off
    (Winograd then), not on 28-pixel rows (the other direct kernel)."""
    _module()
    monkeypatch.setenv("ONNXVIZ_WINOGRAD_NHWC", "off")
    if LEVELS[-1] < 2:
        pytest.skip("no AVX-512 here: the blocked kernel is not routed")
    x, w, b, r = _wide(14)
    calls: list[int] = []
    real = nn_conv_nhwc.native_blocked

    def counted(*args: Any, **kwargs: Any) -> bool:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(nn_conv_nhwc, "native_blocked", counted)
    attrs = {"pads": [1, 1, 1, 1]}
    with at_level("conv", LEVELS[-1]):
        runner = nn_conv_nhwc.prepare_channels_last(x, w, b, attrs)
        assert runner is not None and getattr(runner, "blocked", None) is not None
        assert getattr(runner, "winograd", "absent") is None
        got, done = runner(x, r, False, (ACT_RELU, NAN, NAN))
        wide_rows = nn_conv_nhwc.prepare_channels_last(*_wide(28, 128)[:3], attrs)
        assert wide_rows is not None and getattr(wide_rows, "blocked", "absent") is None
    assert calls and done
    want = conv_core(x, w, 1, [3, 3], [1, 1], [1, 1], [1] * 4, [14, 14], b, addend=r)
    close(np.asarray(got), np.maximum(want, 0), "blocked in a channels-last chain", rtol=1e-4)
    # The direct kernel's weight is packed only when a call needs its tiles: a chain's
    # exit writes NCHW planes by them.
    assert getattr(runner, "_wp", "absent") is None
    with at_level("conv", LEVELS[-1]):
        planes = runner.run_nchw(x, None, None)
    assert planes is not None and planes[0].flags.c_contiguous
    assert getattr(runner, "_wp", None) is not None
    plain = conv_core(x, w, 1, [3, 3], [1, 1], [1, 1], [1] * 4, [14, 14], b)
    close(planes[0], plain, "the direct tiles' NCHW exit", rtol=1e-4)
    with at_level("conv", 1):
        avx2 = nn_conv_nhwc.prepare_channels_last(x, w, b, attrs)
        assert avx2 is not None and getattr(avx2, "blocked", "absent") is None
    monkeypatch.setenv("ONNXVIZ_BLOCKED_CONV", "off")
    with at_level("conv", LEVELS[-1]):
        off = nn_conv_nhwc.prepare_channels_last(x, w, b, attrs)
        assert off is not None and getattr(off, "blocked", "absent") is None
        assert getattr(off, "winograd", None) is not None


def _bottleneck_model() -> onnx.ModelProto:
    """A ResNet-50 bottleneck at 128 channels: 1x1 (Relu) -> 3x3 (Relu) -> 1x1, plus the
    input, Relu; then a 3x3/2 (Relu) beside a 1x1/2 downsample, summed.  The 3x3s have
    128+ channels on 10- and 5-pixel rows: the blocked kernel's."""
    rng = np.random.default_rng(12)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        fan = math.prod(shape[1:])
        return numpy_helper.from_array(
            (rng.standard_normal(shape) / math.sqrt(fan)).astype(np.float32), name
        )

    inits = [
        init("w_in", 128, 128, 1, 1),
        init("b_in", 128),
        init("w_mid", 130, 128, 3, 3),
        init("b_mid", 130),
        init("w_out", 128, 130, 1, 1),
        init("w_down", 144, 128, 3, 3),
        init("b_down", 144),
        init("w_skip", 144, 128, 1, 1),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w_in", "b_in"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["a1"]),
        helper.make_node("Conv", ["a1", "w_mid", "b_mid"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["a2"]),
        helper.make_node("Conv", ["a2", "w_out"], ["c3"]),
        helper.make_node("Add", ["c3", "x"], ["r"]),
        helper.make_node("Relu", ["r"], ["a3"]),
        helper.make_node(
            "Conv", ["a3", "w_down", "b_down"], ["d"], strides=[2, 2], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Relu", ["d"], ["ad"]),
        helper.make_node("Conv", ["a3", "w_skip"], ["s"], strides=[2, 2]),
        helper.make_node("Add", ["ad", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bottleneck",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 128, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(4).standard_normal((2, 128, 10, 10)).astype(np.float32)}


@pytest.mark.parametrize("level", [None, *LEVELS])
def test_a_bottleneck_runs_the_same_in_every_mode_at_every_level(
    level: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if level is not None:
        _module()
    calls: list[int] = []
    real = nn_conv.native_blocked

    def counted(*args: Any, **kwargs: Any) -> bool:
        done = real(*args, **kwargs)
        calls.append(int(done))
        return done

    monkeypatch.setattr(nn_conv_nhwc, "native_blocked", counted)
    model = _bottleneck_model()
    with at_level("conv", level):
        stepped = assert_modes_agree(model, _feeds(), rtol=1e-4)
        fused = Session(model).run(_feeds())
    if level is not None and level >= 2:
        assert sum(calls) >= 2  # both 3x3s in the unwatched runs
    else:
        assert sum(calls) == 0  # off, or a level it is not routed at
    ort = pytest.importorskip("onnxruntime")
    theirs = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, _feeds())[0]
    close(np.asarray(fused["y"]), theirs, "fused run against onnxruntime", rtol=1e-4)
    close(np.asarray(stepped["y"]), theirs, "stepped run against onnxruntime", rtol=1e-4)


def test_the_packed_weight_and_aligned_arrays_start_at_64_bytes() -> None:
    """pack_blocked's weight and aligned_empty's arrays start at a multiple of 64 bytes
    (a vector load then touches one cache line), with the requested shape, writable."""
    for shape in [(1,), (3, 5), (1, 14, 14, 256), (2, 0)]:
        a = nn_conv.aligned_empty(shape)
        assert a.shape == shape and a.dtype == np.float32 and a.flags.c_contiguous
        assert a.flags.writeable
        assert a.size == 0 or a.ctypes.data % 64 == 0  # (an empty one is never read)
    for m, c in [(70, 20), (256, 256), (1, 1)]:
        w = np.random.default_rng(m).standard_normal((m, c, 3, 3)).astype(np.float32)
        packed = pack_blocked(w)
        assert packed.ctypes.data % 64 == 0
        assert packed.size == -(-m // 16) * 16 * c * 9


def test_the_direct_convs_weight_and_outputs_start_at_64_bytes() -> None:
    """pack_direct's weight and out_empty's outputs (the direct conv's and the pointwise
    GEMM's) start at a multiple of 64 bytes, the packed values unchanged."""
    w = np.random.default_rng(3).standard_normal((20, 7, 3, 3)).astype(np.float32)
    for lanes in (8, 16):
        packed = nn_conv.pack_direct(w, lanes)
        assert packed.ctypes.data % 64 == 0 and packed.flags.c_contiguous
        want = np.zeros((-(-20 // lanes) * lanes, 7, 3, 3), np.float32)
        want[:20] = w
        blocks = want.reshape(-1, lanes, 7, 3, 3).transpose(0, 3, 4, 2, 1)
        np.testing.assert_array_equal(packed, blocks)
    out = nn_conv.out_empty((2, 5, 64, 333))
    assert out.nbytes >= nn_conv.ALIGNED_OUTPUT_BYTES
    assert out.shape == (2, 5, 64, 333) and out.ctypes.data % 64 == 0
    small = nn_conv.out_empty((2, 5, 3, 33))  # numpy's own (finding the address costs more)
    assert small.shape == (2, 5, 3, 33) and small.dtype == np.float32 and small.flags.owndata
