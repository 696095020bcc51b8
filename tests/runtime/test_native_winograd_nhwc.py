"""The fused channels-last F(2x2, 3x3) Winograd conv (runtime/native/_winograd.c's
`conv_nhwc` and `held`, kernels/nn_winograd.py's `conv_nhwc`, routed by
nn_winograd.fused_pays inside channels-last chains and nchw_pays for NCHW convs, at
AVX-512 and AVX2), at every level this CPU has:

* against a float64 conv on random batch sizes, channel counts (tails of the 16-float
  vectors and the 32-channel panels), image sizes (odd ones: tiles overhang the output),
  paddings 0-2 on each side, bias, residual and every epilogue activation, several
  tile blocks a call; within the bound of float32 sums of the same terms;
* NaN and infinities reach the outputs the NCHW Winograd path gives them to;
* at the generic level, or given a weight packed for another level's panels, it
  declines (False, nothing written): the chain's direct kernels run;
* the held call gives the runner's bits, hands every other call to its fallback;
* inside a model: a bottleneck's 3x3 conv runs it, and the run equals the stepped run;
* wrong sizes, dtypes and buffers raise ValueError, never crash."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import nn_conv_nhwc, nn_winograd
from tests.runtime.differential import assert_modes_agree, close
from tests.runtime.native_modules import at_level, compiled

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
FUSED_LEVELS = [level for level in LEVELS if level >= 1]  # AVX2 and AVX-512
NAN = math.nan


TOP = max(LEVELS)


def _module(level: int = TOP) -> Any:
    """_winograd at ``level`` (the tests run inside ``at_level("winograd", level)``, so
    the kernels run even where ONNXVIZ_NATIVE=off)."""
    module = compiled("winograd")
    module.set_level(level)
    return module


def _routed() -> bool:
    """Whether this process's level runs convs by the fused conv (AVX2 or AVX-512): the
    level test of nn_winograd.fused_pays (the compiled direct conv's 8 or 16 lanes, which
    the generic level's 8 lanes pass too) and a fused conv at this level (its
    panel_width, 0 at the generic level: packed_nhwc gives no weight, conv_nhwc
    declines, and the direct kernels run)."""
    return nn_conv_nhwc.direct_lanes() in (8, 16) and nn_winograd.panel_width() != 0


def _reference(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    add: np.ndarray | None,
    pads: tuple[int, ...],
) -> np.ndarray:
    """The conv's definition in float64 on channels-last (N, H, W, C) -> (N, H', W', M)."""
    n, h, wd, c = x.shape
    top, left, bottom, right = pads
    xp = np.zeros((n, h + top + bottom, wd + left + right, c))
    xp[:, top : top + h, left : left + wd] = x
    oh, ow = xp.shape[1] - 2, xp.shape[2] - 2
    y = np.zeros((n, oh, ow, w.shape[0]))
    for i in range(3):
        for j in range(3):
            y += xp[:, i : i + oh, j : j + ow] @ w[:, :, i, j].T.astype(np.float64)
    if b is not None:
        y += b
    if add is not None:
        y += add
    return y


def _activate(y: np.ndarray, act: tuple[int, float, float]) -> np.ndarray:
    code, lo, hi = act
    if code == 1:
        return np.maximum(y, 0)
    if code == 2:
        return np.clip(y, lo, hi)
    if code == 3:
        return y * np.clip(y / 6 + 0.5, 0, 1)
    return y


ACTS = [(0, NAN, NAN), (1, NAN, NAN), (2, -0.5, 0.75), (3, NAN, NAN)]


@pytest.mark.skipif(not FUSED_LEVELS, reason="no AVX2 here: the fused conv has no other code")
@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 2),
    c=st.integers(1, 40),
    m=st.integers(1, 70),
    h=st.integers(2, 19),
    w=st.integers(2, 19),
    pads=st.tuples(*(st.integers(0, 2) for _ in range(4))),
    bias=st.booleans(),
    residual=st.booleans(),
    act=st.sampled_from(ACTS),
    block=st.integers(1, 40),
    seed=st.integers(0, 2**16),
)
def test_the_fused_conv_is_within_float32_rounding_of_the_exact_conv(
    n: int,
    c: int,
    m: int,
    h: int,
    w: int,
    pads: tuple[int, ...],
    bias: bool,
    residual: bool,
    act: tuple[int, float, float],
    block: int,
    seed: int,
) -> None:
    if h + pads[0] + pads[2] < 3 or w + pads[1] + pads[3] < 3:
        return  # no output
    got = []
    for level in FUSED_LEVELS:
        with at_level("winograd", level):
            module = _module(level)
            got.append(
                _fused_within_rounding(
                    module, n, c, m, h, w, pads, bias, residual, act, block, seed
                )
            )
    for other in got[1:]:  # the levels sum the same terms in the same order
        np.testing.assert_array_equal(other, got[0])


def _fused_within_rounding(
    module: Any,
    n: int,
    c: int,
    m: int,
    h: int,
    w: int,
    pads: tuple[int, ...],
    bias: bool,
    residual: bool,
    act: tuple[int, float, float],
    block: int,
    seed: int,
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    wt = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    add = rng.standard_normal((n, oh, ow, m)).astype(np.float32) if residual else None
    # Blocks of a few tiles too: a call's tiles run across rows, images and blocks.
    out = np.full((n, oh, ow, m), np.nan, np.float32)
    nr = module.panel_width()
    u = nn_winograd.pack_nhwc(wt, nr)
    assert module.conv_nhwc(x, (n, h, w, c), u, nr, m, b, add, out, (oh, ow), pads[:2], *act, block)
    again = np.full_like(out, np.nan)
    assert nn_winograd.conv_nhwc(x, u, m, b, add, again, pads, act)  # the blocks it picks
    np.testing.assert_array_equal(again, out)  # blocks do not change a tile's sums
    want = _activate(_reference(x, wt, b, add, pads), act)
    # |error| of float32 sums of these terms: the transforms' adds (entries 0, +-1, +-1/2)
    # then C products; a generous multiple of u times the terms' magnitudes.
    scale = np.abs(wt).sum(axis=(1, 2, 3)) * np.abs(x).max() * 4 + 1
    if b is not None:
        scale = scale + np.abs(b)
    if add is not None:
        scale = scale + np.abs(add)
    assert np.isfinite(out).all()
    assert (np.abs(out - want) <= 2e-6 * (c + 8) * scale).all()
    return out


@pytest.mark.skipif(not FUSED_LEVELS, reason="no AVX2 here: the fused conv has no other code")
@pytest.mark.filterwarnings("ignore:invalid value")
def test_nan_and_infinity_reach_the_outputs_the_nchw_winograd_gives_them_to() -> None:
    for level in FUSED_LEVELS:
        with at_level("winograd", level):
            _nan_and_infinity(_module(level))


def _nan_and_infinity(module: Any) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 9, 8, 5)).astype(np.float32)
    x[0, 4, 4, 1] = np.nan
    x[0, 0, 7, 3] = np.inf
    wt = rng.standard_normal((4, 5, 3, 3)).astype(np.float32)
    out = np.empty((1, 9, 8, 4), np.float32)
    u = nn_winograd.pack_nhwc(wt, module.panel_width())
    assert nn_winograd.conv_nhwc(x, u, 4, None, None, out, (1,) * 4, ACTS[0])
    plain = nn_winograd.winograd_conv(
        np.ascontiguousarray(x.transpose(0, 3, 1, 2)),
        nn_winograd.transform_weights(wt),
        None,
        (1, 1, 1, 1),
        (9, 8),
    )
    got = out.transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(plain))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(plain))
    assert np.isnan(got).any()


def test_it_declines_at_the_generic_level_and_for_another_levels_panels() -> None:
    """A weight packed for 32-wide panels (AVX-512's) runs only at AVX-512, one for
    16-wide panels (AVX2's) only at AVX2; neither at the generic level nor with the
    kernels off: False, nothing written."""
    module = _module()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 6, 6, 8)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    for nr in (16, 32):
        u = nn_winograd.pack_nhwc(w, nr)
        for level in LEVELS:
            out = np.full((1, 6, 6, 16), 7.0, np.float32)
            with at_level("winograd", level):
                module.set_level(level)
                ran = nn_winograd.conv_nhwc(x, u, 16, None, None, out, (1,) * 4, ACTS[1])
            assert ran == (nr == (32 if level >= 2 else 16 if level == 1 else 0)), (nr, level)
            assert (out == 7.0).all() != ran
        with at_level("winograd", None):  # the kernels off
            assert not nn_winograd.conv_nhwc(x, u, 16, None, None, out, (1,) * 4, ACTS[1])
    module.set_level(TOP)


def test_wrong_sizes_and_buffers_are_refused() -> None:
    module = _module()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 6, 6, 8)).astype(np.float32)
    nr = module.panel_width() or 16
    u = nn_winograd.pack_nhwc(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), nr)
    out = np.empty((1, 6, 6, 16), np.float32)
    act = (1, NAN, NAN)

    def call(**kw: Any) -> Any:
        args = {"x": x, "shape": (1, 6, 6, 8), "u": u, "m": 16, "bias": None, "add": None}
        args.update(out=out, oshape=(6, 6), pads=(1, 1), tiles=9, nr=nr)
        args.update(kw)
        return module.conv_nhwc(
            args["x"], args["shape"], args["u"], args["nr"], args["m"], args["bias"],
            args["add"], args["out"], args["oshape"], args["pads"], *act, args["tiles"],
        )  # fmt: skip

    assert call() == (module.panel_width() == nr)
    with pytest.raises(ValueError):
        call(shape=(1, 7, 6, 8))  # x has fewer floats than that
    with pytest.raises(ValueError):
        call(m=48)  # u holds one panel of 32 output channels
    with pytest.raises(ValueError):
        call(x=x.astype(np.float64))
    with pytest.raises(ValueError):
        call(pads=(3, 1))  # padding over 2
    with pytest.raises(ValueError):
        call(oshape=(9, 6))  # more output rows than any padding gives
    with pytest.raises(ValueError):
        call(bias=np.zeros(15, np.float32))
    with pytest.raises(ValueError):
        call(add=np.zeros((1, 6, 6, 15), np.float32))
    with pytest.raises(ValueError):
        call(out=out[:, :, :, ::2])  # not contiguous
    with pytest.raises(ValueError):
        call(tiles=0)
    with pytest.raises(ValueError):
        call(nr=8)  # no level's panels
    unaligned = np.empty(u.size + 1, np.float32)
    start = 1 if unaligned.ctypes.data % 64 == 0 else 0
    with pytest.raises(ValueError):
        call(u=unaligned[start : start + u.size])
    with pytest.raises(ValueError):
        call(out=x, m=8)  # the output over the image it reads
    # The held call's constructor checks the same sizes.
    held_args = (u, nr, None, (1, 6, 6, 8), 16, (6, 6), (1, 1), *act, 9, 1, -1, (), (), _Fallback())
    module.held(*held_args, *native.held_arrays())  # fits
    for at, wrong in ((1, 8), (4, 48), (6, (3, 1)), (5, (9, 6))):
        bad = list(held_args)
        bad[at] = wrong
        with pytest.raises(ValueError):
            module.held(*bad, *native.held_arrays())


def _channels_last(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


class _Fallback:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: Any) -> None:
        self.calls += 1


@pytest.mark.skipif(not FUSED_LEVELS, reason="no AVX2 here: the fused conv has no other code")
def test_the_held_call_gives_the_runners_bits_and_declines_the_rest() -> None:
    compiled("conv")
    for level in FUSED_LEVELS:
        with at_level("winograd", level), at_level("conv", level):
            _module(level)
            native.load("conv").set_level(level)
            _held_call()


def _held_call() -> None:
    rng = np.random.default_rng(6)
    n, c, h, wd, m = 2, 40, 13, 12, 48
    x = _channels_last(rng.standard_normal((n, c, h, wd)).astype(np.float32))
    w = (rng.standard_normal((m, c, 3, 3)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    runner = nn_conv_nhwc.prepare_channels_last(x, w, b, {"pads": [1, 1, 1, 1]})
    assert isinstance(runner, nn_conv_nhwc._Direct) and runner.fused_winograd is not None
    r = _channels_last(rng.standard_normal(runner.out_shape).astype(np.float32))
    for act in ACTS:
        for residual in (None, r):
            nargs, res = (4, 3) if residual is not None else (3, None)
            fallback = _Fallback()
            held = runner.held(x, act, nargs, res, (1, 2), (w, b), fallback)
            assert held is not None
            args = (x, w, b) if residual is None else (x, w, b, residual)
            got = held(*args)
            want, done = runner.run(x, residual, act)  # (N, H', W', M)
            assert done
            np.testing.assert_array_equal(got, want.transpose(0, 3, 1, 2))
            assert nn_conv_nhwc.is_channels_last(got) and got.ctypes.data % 64 == 0
            # Another layout, shape, dtype or constant: the fallback's call.
            assert held(np.ascontiguousarray(x), *args[1:]) is None
            assert held(x[:1], *args[1:]) is None
            assert held(x.astype(np.float64), *args[1:]) is None
            assert held(x, w.copy(), *args[2:]) is None
            assert fallback.calls == 4
    # A conv chained to a pool, an NCHW input: no held call (the chain's own call runs).
    assert runner.held(np.ascontiguousarray(x), None, 3, None, (1, 2), (w, b), _Fallback()) is None


def _bottleneck(c: int, mid: int, size: int) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """x -> 1x1 (c -> mid) Relu -> 3x3 (mid) Relu -> 1x1 (mid -> c) + x -> Relu."""
    rng = np.random.default_rng(7)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        scale = 1 / math.sqrt(math.prod(shape[1:]))
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    inits = [
        weight("w0", mid, c, 1, 1), weight("w1", mid, mid, 3, 3), weight("w2", c, mid, 1, 1),
        numpy_helper.from_array(rng.standard_normal(mid).astype(np.float32), "b0"),
        numpy_helper.from_array(rng.standard_normal(mid).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b2"),
    ]  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="reduce"),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], name="spatial", pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="expand"),
        helper.make_node("Add", ["c2", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bottleneck",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, c, size, size)).astype(np.float32)}
    return model, feeds


@pytest.mark.parametrize("switch", ["auto", "off"])
def test_a_bottleneck_runs_its_3x3_by_winograd_at_avx512_with_the_stepped_numbers(
    switch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ResNet-50's bottleneck at 16 px (64 tiles): its 3x3 conv's runner holds the fused
    Winograd weight at AVX2 and AVX-512 (not with ONNXVIZ_WINOGRAD_NHWC=off, nor with the
    kernels off),
    the run makes its held call, and every run mode equals the stepped run."""
    from onnxviz.runtime.fusion import run_nodes
    from onnxviz.runtime.session import Session

    monkeypatch.setenv("ONNXVIZ_WINOGRAD_NHWC", switch)
    model, feeds = _bottleneck(64, 32, 16)
    assert_modes_agree(model, feeds)
    sess = Session(model)
    first = sess.run(feeds)
    second = sess.run(feeds)  # the held calls made on the first run
    close(second["y"], first["y"], "held against the chain's call")
    spatial = [pn for pn in run_nodes(sess.plan) if pn.key.endswith("spatial")]
    assert len(spatial) == 1
    chain = spatial[0].fused
    assert chain.layout is not None  # channels-last
    routed = switch == "auto" and _routed()
    module = type(chain.quick).__module__ if chain.quick is not None else None
    assert (module == "onnxviz.runtime.native._winograd") == routed, module


def _two_convs(c: int, size: int) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """x (NCHW, the model's input) -> 3x3 (c) Relu -> 3x3 (c) -> y (NCHW, the output): a
    channels-last chain entered from an NCHW value and left into NCHW planes (an FPN's
    smoothing convs after its upsampling)."""
    rng = np.random.default_rng(8)
    scale = 1 / math.sqrt(9 * c)
    inits = [
        numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * scale).astype(np.float32), n)
        for n in ("w0", "w1")
    ] + [
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), n) for n in ("b0", "b1")
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="first", pads=[1] * 4),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1", "b1"], ["y"], name="second", pads=[1] * 4),
    ]
    graph = helper.make_graph(
        nodes,
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, c, size, size)).astype(np.float32)}


def test_a_chain_entered_and_left_in_nchw_runs_winograd_with_the_stepped_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both convs of an NCHW-in, NCHW-out chain run the fused conv at AVX2 and AVX-512 (the input
    placed channels-last, the exit copied into planes), C-contiguous planes out, within
    float32 rounding of the stepped run and of a float64 conv."""
    from onnxviz.runtime.session import Session

    calls: list[int] = []
    real = nn_winograd.conv_nhwc

    def counted(*args: Any, **kwargs: Any) -> bool:
        ran = real(*args, **kwargs)
        calls.append(int(ran))
        return ran

    monkeypatch.setattr(nn_winograd, "conv_nhwc", counted)
    model, feeds = _two_convs(64, 20)
    assert_modes_agree(model, feeds)
    calls.clear()
    y = Session(model).run(feeds)["y"]  # the first run: every conv through Python
    assert y.flags.c_contiguous
    assert sum(calls) == (2 if _routed() else 0)
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    x = feeds["x"].transpose(0, 2, 3, 1).astype(np.float64)
    h = np.maximum(_reference(x, w["w0"], w["b0"], None, (1, 1, 1, 1)), 0)
    want = _reference(h, w["w1"], w["b1"], None, (1, 1, 1, 1)).transpose(0, 3, 1, 2)
    close(y, want.astype(np.float32), "two convs", rtol=1e-5)


@pytest.mark.parametrize("switch", ["auto", "off"])
def test_an_nchw_conv_runs_winograd_where_the_direct_form_does_not(
    switch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nn_conv's own path (a stepped run's, an NCHW chain's): 128 channels at 20 px, which
    the direct kernel leaves, runs the fused conv between the compiled copies at AVX2 and
    AVX-512 (the NCHW Winograd with it switched off), bias and residual in; 64
    channels at 20 px keep the direct form (too little work for the route's Python)."""
    from onnxviz.runtime.kernels.nn_conv import ConvWeight, conv_core

    monkeypatch.setenv("ONNXVIZ_WINOGRAD_NHWC", switch)
    calls: list[int] = []
    real = nn_winograd.conv_nhwc

    def counted(*args: Any, **kwargs: Any) -> bool:
        ran = real(*args, **kwargs)
        calls.append(int(ran))
        return ran

    monkeypatch.setattr(nn_winograd, "conv_nhwc", counted)
    rng = np.random.default_rng(9)
    routed = switch == "auto" and _routed()
    for c, expect in ((128, routed), (64, False)):
        x = rng.standard_normal((1, c, 20, 20)).astype(np.float32)
        w = (rng.standard_normal((c, c, 3, 3)) / math.sqrt(9 * c)).astype(np.float32)
        b = rng.standard_normal(c).astype(np.float32)
        r = rng.standard_normal((1, c, 20, 20)).astype(np.float32)
        for packed in (None, ConvWeight(w)):
            calls.clear()
            y = conv_core(
                x, w, 1, [3, 3], [1, 1], [1, 1], [1] * 4, [20, 20], b, packed=packed, addend=r
            )
            assert sum(calls) == int(expect), (c, packed, calls)
            xl = x.transpose(0, 2, 3, 1).astype(np.float64)
            want = _reference(xl, w, b, r.transpose(0, 2, 3, 1), (1, 1, 1, 1))
            close(np.asarray(y), want.transpose(0, 3, 1, 2).astype(np.float32), "nchw", 1e-5)
