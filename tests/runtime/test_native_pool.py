"""The compiled 2-D pooling kernel (runtime/native/_pool.c) against the numpy path.

* At every level this CPU has, on random geometries (hypothesis: N, C, H, W 1..40,
  kernels 1..5, strides 1..3, asymmetric pads below the kernel, ceil_mode,
  count_include_pad) with NaN, +-inf and subnormals sprinkled in: MaxPool equals the
  numpy path exactly (NaN where it has NaN); AveragePool is within the bound
  |y - exact| <= (k + 1) u sum|x| / count (+ one subnormal step) of the float64 average,
  k = kh*kw, u = 2^-24 (k - 1 roundings of the sum, one of the division, one of the
  float64 reference's own rounding to float32 slack), and non-finite where the numpy
  path is, with the same value.
* Wired in: the float32 2-D MaxPool/AveragePool call it (counted), ONNXVIZ_NATIVE=off
  (native level None) does not; an Inception-like graph gives the same outputs in every
  run mode, with the kernel on and off, and onnxruntime's within tolerance.
* Bad buffers and arguments raise ValueError.
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
from onnxviz.runtime.kernels import nn_pool
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled

from .differential import assert_modes_agree, close

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
U = 2.0**-24
TINY = float(np.finfo(np.float32).smallest_subnormal)


def _module() -> Any:
    return compiled("pool")


def _level(level: int | None) -> AbstractContextManager[None]:
    return at_level("pool", level)


def _max(x: np.ndarray, **attrs: Any) -> np.ndarray:
    geo = nn_pool._Geometry(
        x, attrs["kernel_shape"], attrs["strides"], None, attrs["pads"], "NOTSET",
        attrs["ceil_mode"],
    )  # fmt: skip
    y, _ = nn_pool._max_pool(x, geo, False, 0)
    return y


def _avg(x: np.ndarray, **attrs: Any) -> np.ndarray:
    return nn_pool.average_pool(x, **attrs)


@st.composite
def _cases(draw: Any, same: bool = False) -> tuple[np.ndarray, dict[str, Any]]:
    """Random geometries; ``same``: stride 1 with pads summing to kernel - 1 per axis (the
    output the input's size: the kernel's flat whole-plane path)."""
    # Channels: planes for pool2d; for pool2d_nhwc (channels-last inputs) below, within,
    # and beyond a vector of 8 or 16 (8: the AVX-512 level's one ymm run), and the AVX-512
    # level's blocks of 64 channels (whole, and one or two with a masked last vector).
    channels = [1, 2, 3, 4, 4, 8, 16, 19, 40, 64, 65, 130]
    n, c = draw(st.integers(1, 3)), draw(st.sampled_from(channels))
    h, w = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    kernel = [draw(st.integers(1, 5)), draw(st.integers(1, 5))]
    strides = [1, 1] if same else [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    pads = [draw(st.integers(0, min(2, kernel[i % 2] - 1))) for i in range(4)]
    if same:
        for a in range(2):
            kernel[a] = min(kernel[a], 5)
            pads[a] = draw(st.integers(max(0, kernel[a] - 3), min(2, kernel[a] - 1)))
            pads[a + 2] = kernel[a] - 1 - pads[a]
    # The windows must fit the padded input (else the op has no output).
    for a, size in enumerate((h, w)):
        if size + pads[a] + pads[a + 2] < kernel[a]:
            kernel[a] = size + pads[a] + pads[a + 2]
            pads[a] = min(pads[a], kernel[a] - 1)
            pads[a + 2] = min(pads[a + 2], kernel[a] - 1)
    ceil_mode = draw(st.integers(0, 1))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, c, h, w)) * 10).astype(np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, 1e-40, -3e-42, 0.0, -0.0], np.float32)
    count = draw(st.integers(0, 6))
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, count)] = rng.choice(specials, count)
    if draw(st.booleans()):  # a run of subnormals (sums of them must not flush)
        flat[: min(flat.size, 50)] = np.float32(1e-41) * rng.integers(-5, 6, min(flat.size, 50))
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil_mode}
    return x, attrs


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.booleans().flatmap(_cases), st.integers(0, 1))
def test_the_kernel_matches_the_numpy_path_at_every_level(
    case: tuple[np.ndarray, dict[str, Any]], include_pad: int
) -> None:
    _module()
    x, attrs = case
    with _level(None):
        want_max = _max(x, **attrs)
        want_avg = _avg(x, count_include_pad=include_pad, **attrs)
        exact = _avg(x.astype(np.float64), count_include_pad=include_pad, **attrs)
        mean_abs = _avg(np.abs(x.astype(np.float64)), count_include_pad=include_pad, **attrs)
    k = attrs["kernel_shape"][0] * attrs["kernel_shape"][1]
    bound = (k + 1) * U * mean_abs + 2 * TINY
    finite = np.isfinite(exact)
    # The same array channels-last too (an unwatched run's conv chain hands pools such
    # values): pool2d_nhwc, its output channels-last as well.
    x_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    for level, xin in [(level, xin) for level in LEVELS for xin in (x, x_last)]:
        with _level(level):
            got_max = _max(xin, **attrs)
            got_avg = _avg(xin, count_include_pad=include_pad, **attrs)
        layout = "NCHW" if xin is x else "channels-last"
        what = f"level {level}, {layout}, {attrs}, include_pad {include_pad}"
        if xin is x_last and x.shape[1] > 1:
            for got in (got_max, got_avg):
                assert got.transpose(0, 2, 3, 1).flags.c_contiguous, what
        assert got_max.dtype == np.float32 and got_max.shape == want_max.shape, what
        np.testing.assert_array_equal(got_max, want_max, err_msg=what)
        assert got_avg.dtype == np.float32 and got_avg.shape == want_avg.shape, what
        with np.errstate(invalid="ignore"):  # inf - inf where the exact value is not finite
            err = np.abs(got_avg.astype(np.float64) - exact)
            ref_err = np.abs(want_avg.astype(np.float64) - exact)
        assert np.all(err[finite] <= bound[finite]), what
        # Non-finite windows (NaN, an infinity, or +inf with -inf) as the numpy path.
        np.testing.assert_array_equal(got_avg[~finite], want_avg[~finite], err_msg=what)
        assert np.all(ref_err[finite] <= bound[finite]), "the bound holds for numpy too"


def test_every_level_gives_the_same_bits() -> None:
    module = _module()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 33, 37)).astype(np.float32)
    results = []
    for level in LEVELS:
        module.set_level(level)
        for mode in (0, 1):
            y = np.empty((2, 5, 17, 18), np.float32)
            # 3x3 stride 2, pads 1/1/1/0 (ceil_mode shape: the last column window overhangs).
            module.pool2d(x, y, 10, 33, 37, 17, 18, 3, 3, 2, 2, 1, 1, 1, 0, mode, 1)
            results.append((level, mode, y))
    for level, mode, y in results:
        first = next(r for lv, m, r in results if m == mode)
        assert first.tobytes() == y.tobytes(), (level, mode)


def test_stride_two_max_pools_keep_their_bits_on_ties_and_nans() -> None:
    """The AVX2 levels' column-stride-2 MaxPool (its own shuffles and selects) against the
    generic C one (level 0) bit for bit, on data made of ties: +0 and -0 (which one a
    window gives depends on the order of its selects), NaNs of two payloads (which NaN)
    and infinities; also the numpy path's values.  Widths from 1 to ResNet's 112, so every
    tail of the 8-output vectors, and every kernel width up to 5 and stride-1 or -2 rows."""
    module = _module()
    rng = np.random.default_rng(11)
    nan_a = np.array([0x7FC00001], np.uint32).view(np.float32)[0]
    nan_b = np.array([0xFFC00002], np.uint32).view(np.float32)[0]
    values = np.array([0.0, -0.0, 0.0, -0.0, nan_a, nan_b, -np.inf, np.inf, 1.0], np.float32)
    for w in [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 112]:
        for kw in range(1, 6):
            kh, sh = int(rng.integers(1, 4)), int(rng.integers(1, 3))
            h = int(rng.integers(max(1, kh - 2), 12))
            pl, pr = min(1, kw - 1), int(rng.integers(0, kw))
            pt = pb = min(1, kh - 1)
            if w + pl + pr < kw or h + pt + pb < kh:
                continue
            oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // 2 + 1
            x = rng.choice(values, size=(3, h, w))
            got = {}
            for level in LEVELS:
                module.set_level(level)
                y = np.full((3, oh, ow), 7.0, np.float32)
                module.pool2d(x, y, 3, h, w, oh, ow, kh, kw, sh, 2, pt, pl, pb, pr, 0, 0)
                got[level] = y
            what = f"w {w}, kernel {kh}x{kw}, row stride {sh}, pads {pt} {pl} {pb} {pr}"
            for level, y in got.items():
                assert y.tobytes() == got[LEVELS[0]].tobytes(), f"level {level}, {what}"
            attrs = {"kernel_shape": [kh, kw], "strides": [sh, 2], "pads": [pt, pl, pb, pr]}
            with _level(None):
                want = _max(x[None], ceil_mode=0, **attrs)
            np.testing.assert_array_equal(got[LEVELS[-1]], want[0], err_msg=what)


def test_the_channels_last_pools_give_the_same_bits_at_every_level() -> None:
    module = _module()
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 33, 37, 24)).astype(np.float32)
    results = []
    for level in LEVELS:
        module.set_level(level)
        for mode in (0, 1):
            y = np.empty((2, 17, 18, 24), np.float32)
            module.pool2d_nhwc(x, y, 2, 33, 37, 24, 17, 18, 3, 3, 2, 2, 1, 1, 1, 0, mode, 1)
            results.append((mode, y))
    for mode, y in results:
        first = next(r for m, r in results if m == mode)
        assert first.tobytes() == y.tobytes(), mode
    x = np.zeros((1, 4, 4, 3), np.float32)
    y = np.zeros((1, 2, 2, 3), np.float32)
    for bad in (
        (x, y, 1, 4, 4, 0, 2, 2, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0),  # no channels
        (x, y, 1, 4, 4, 4, 2, 2, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0),  # x too small for C = 4
        (x, y[:, :1], 1, 4, 4, 3, 2, 2, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0),  # y too small
        (x.astype(np.float64), y, 1, 4, 4, 3, 2, 2, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0),
        (x, y, 1, 4, 4, 3, 2, 2, 3, 3, 2, 2, 1, 1, 1, 1, 2, 0),  # mode
    ):
        with pytest.raises(ValueError):
            module.pool2d_nhwc(*bad)


@pytest.mark.parametrize("average", [False, True])
def test_small_planes_of_many_channels_pool_channels_last(monkeypatch, average: bool) -> None:
    """An NCHW pool over small planes of 16 channels or more (ShuffleNet's 3x3 stride-2
    average pools over 272 channels of 14 x 14, a YOLO's SPPF max pools) runs the
    channels-last kernel on a transposed copy, not the plane kernel (whose per-plane
    edges cost 5-10x onnxruntime's time there): its values exactly."""
    module = _module()
    calls: list[str] = []

    class Counted:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(module, name)

    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 40, 14, 13)).astype(np.float32)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    real = native.load
    with _level(LEVELS[-1]):
        monkeypatch.setattr(native, "load", lambda n: Counted() if n == "pool" else real(n))
        got = _avg(x, **attrs) if average else _max(x, ceil_mode=0, **attrs)
        monkeypatch.setattr(native, "load", real)
    assert calls == ["pool2d_nhwc"]
    want = np.empty((2, 7, 7, 40), np.float32)
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    module.pool2d_nhwc(xl, want, 2, 14, 13, 40, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, int(average), 0)
    np.testing.assert_array_equal(got, want.transpose(0, 3, 1, 2))


def test_bad_buffers_and_arguments_raise() -> None:
    module = _module()
    x = np.zeros((1, 2, 6, 6), np.float32)
    y = np.zeros((1, 2, 3, 3), np.float32)
    good = (2, 6, 6, 3, 3, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0)
    module.pool2d(x, y, *good)
    bad = [
        (x, np.zeros((1, 2, 3, 4), np.float32), good),  # y the wrong size
        (x[:, :, :5], y, good),  # x the wrong size (also not contiguous)
        (x.astype(np.float64), y, good),
        (x, y.astype(np.float64), good),
        (x, np.zeros((1, 2, 3, 3), np.float32)[:, ::-1], good),  # y not contiguous
        (x, y, (0, *good[1:])),  # no planes
        (x, y, (*good[:5], 0, *good[6:])),  # a zero kernel
        (x, y, (*good[:9], -1, *good[10:])),  # a negative pad
        (x, y, (*good[:13], 2, 0)),  # mode 2
    ]
    for bx, by, args in bad:
        with pytest.raises(ValueError):
            module.pool2d(bx, by, *args)
    readonly = np.zeros((1, 2, 3, 3), np.float32)
    readonly.setflags(write=False)
    with pytest.raises((ValueError, BufferError)):
        module.pool2d(x, readonly, *good)


def _inception_like(ceil_mode: int) -> Any:
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node(
            "MaxPool", ["r"], ["m"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=ceil_mode
        ),
        helper.make_node(
            "AveragePool",
            ["m"],
            ["a"],
            kernel_shape=[3, 3],
            strides=[1, 1],
            pads=[1, 1, 1, 1],
            count_include_pad=0,
        ),
        helper.make_node(
            "MaxPool", ["m"], ["b"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
        helper.make_node(
            "AveragePool",
            ["c"],
            ["y"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            count_include_pad=1,
            ceil_mode=ceil_mode,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "inception_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 30, 30])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_an_inception_like_graph_agrees_everywhere(ceil_mode: int) -> None:
    _module()
    model = _inception_like(ceil_mode)
    x = np.random.default_rng(3).standard_normal((1, 6, 30, 30)).astype(np.float32)
    feeds = {"x": x}
    calls: list[str] = []
    load = native.load

    class Counting:
        """The pool module, its kernels' calls counted."""

        def __init__(self, module: Any) -> None:
            self.module = module

        def __getattr__(self, name: str) -> Any:
            got = getattr(self.module, name)
            if name not in ("pool2d", "pool2d_nhwc"):
                return got

            def call(*args: Any) -> Any:
                calls.append(name)
                return got(*args)

            return call

    def counting(name: str) -> Any:
        got = load(name)
        return Counting(got) if name == "pool" and got is not None else got

    with _level(LEVELS[-1]), pytest.MonkeyPatch.context() as mp:
        mp.setattr(native, "load", counting)
        Session(model).run(feeds)
    # Each pool once, on its NCHW planes (the held pools take channels-last images only).
    assert calls == ["pool2d"] * 4, calls
    calls.clear()
    with _level(None), pytest.MonkeyPatch.context() as mp:
        mp.setattr(native, "load", counting)
        off = Session(model).run(feeds)
        assert_modes_agree(model, feeds)
    assert calls == []
    for level in LEVELS:
        with _level(level):
            on = Session(model).run(feeds)
            stepped = assert_modes_agree(model, feeds)
        for name, value in off.items():
            close(on[name], value, f"level {level}, {name}")
            close(stepped[name], value, f"level {level} stepped, {name}")
    ort = pytest.importorskip("onnxruntime")
    theirs = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(["y", "c"], feeds)
    with _level(LEVELS[-1]):
        ours = Session(model).run(feeds)
    np.testing.assert_allclose(ours["y"], theirs[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours["c"], theirs[1], rtol=1e-5, atol=1e-6)


def test_other_cases_keep_the_numpy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """float64, 1-D and 3-D pools, dilation and MaxPool with Indices never ask for it."""
    _module()
    asked: list[str] = []
    load = native.load
    monkeypatch.setattr(native, "load", lambda name: asked.append(name) or load(name))
    x64 = np.ones((1, 2, 7, 7))
    nn_pool.average_pool(x64, kernel_shape=[3, 3])
    nn_pool.average_pool(np.ones((1, 2, 7), np.float32), kernel_shape=[3])
    nn_pool.average_pool(np.ones((1, 2, 5, 5, 5), np.float32), kernel_shape=[2, 2, 2])
    x = np.ones((1, 2, 7, 7), np.float32)
    geo = nn_pool._Geometry(x, [3, 3], None, [2, 2], None, "NOTSET", 0)
    nn_pool._max_pool(x, geo, False, 0)
    geo = nn_pool._Geometry(x, [3, 3], None, None, None, "NOTSET", 0)
    _, indices = nn_pool._max_pool(x, geo, True, 0)
    assert indices is not None
    assert "pool" not in asked
    assert math.isfinite(float(x.sum()))
