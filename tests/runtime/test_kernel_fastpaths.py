"""Kernel fast paths against plain numpy definitions (float64), with random shapes.

Each fast path of issue 21 (channels-last depthwise conv, recurrent steps on pretransposed
weights, GEMV with a constant weight, single-pass activations) must give the numbers of
the operator's definition written the slow, obvious way here; the draws are limited to
shapes that really take the fast path (asserted), so a test would fail if the path were
skipped.
"""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import numpy_helper

from onnxviz.model.tensors import to_array
from onnxviz.runtime.kernels import (
    _weight_cache,
    math_erf,
    math_softmax,
    nn_conv,
    nn_pool,
    nn_resize,
    nn_rnn,
)

pytestmark = pytest.mark.numeric

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _frozen(x: np.ndarray) -> np.ndarray:
    """``x`` as the interpreter holds an initializer (read-only over proto bytes)."""
    return to_array(numpy_helper.from_array(x, "w"))


def conv_definition(x, w, b, group, strides, pads, dilations) -> np.ndarray:
    """Conv by its definition: a float64 sum over kernel offsets and input channels."""
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    mg = m // group
    rank = x.ndim - 2
    kernel = w.shape[2:]
    xp = np.pad(
        x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[i], pads[i + rank]) for i in range(rank)]
    )
    out = [
        (xp.shape[2 + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1
        for i in range(rank)
    ]
    y = np.zeros((n, m, *out))
    for off in product(*(range(k) for k in kernel)):
        window = tuple(
            slice(o * d, o * d + (s_out - 1) * s + 1, s)
            for o, d, s, s_out in zip(off, dilations, strides, out)
        )
        for g in range(group):
            xs = xp[(slice(None), slice(g * cg, (g + 1) * cg), *window)]
            ws = w[(slice(g * mg, (g + 1) * mg), slice(None), *off)].astype(np.float64)
            y[:, g * mg : (g + 1) * mg] += np.einsum("mc,nc...->nm...", ws, xs)
    if b is not None:
        y += b.astype(np.float64).reshape((1, m) + (1,) * rank)
    return y


@st.composite
def depthwise_cases(draw):
    rank = draw(st.sampled_from([1, 2, 2, 2, 3]))
    k = draw(st.sampled_from([1, 3, 5]))
    stride = draw(st.sampled_from([1, 1, 2]))
    dil = draw(st.sampled_from([1, 1, 2]))
    out_last = draw(st.integers(1, 8))
    # The einsum paths (stride 1, or dilation 1 along the last axis) and the per-offset
    # path (strided and dilated) each take their own channel counts.
    c = draw(st.integers(max(32, 8 * out_last) if stride > 1 and dil > 1 else 16, 96))
    pad = draw(st.integers(0, (k - 1) * dil))
    span = (k - 1) * dil + 1
    last = (out_last - 1) * stride + span - 2 * pad
    if last < 1:
        last += 2 * pad
        pad = 0
    others = [draw(st.integers(max(1, span - 2 * pad), 9)) for _ in range(rank - 1)]
    shape = (draw(st.integers(1, 2)), c, *others, last)
    seed = draw(st.integers(0, 2**16))
    return shape, k, stride, dil, pad, draw(st.booleans()), seed


@SETTINGS
@given(depthwise_cases())
def test_channels_last_depthwise_conv_matches_the_definition(case) -> None:
    shape, k, stride, dil, pad, with_bias, seed = case
    rng = np.random.default_rng(seed)
    rank = len(shape) - 2
    c = shape[1]
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((c, 1) + (k,) * rank).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32) if with_bias else None
    attrs = {
        "group": c,
        "strides": [stride] * rank,
        "pads": [pad] * (2 * rank),
        "dilations": [dil] * rank,
    }
    want = conv_definition(x, w, b, c, attrs["strides"], attrs["pads"], attrs["dilations"])
    # Cases the channels-last path takes (the generator's padding can make a 3-D output
    # of more than 1024 pixels, which the channels-first path keeps: not this test's).
    assume(nn_conv.channels_last_pays(c, want.shape[2:], attrs["strides"], attrs["dilations"]))
    got = nn_conv.conv(x, w, b, **attrs)
    packed = nn_conv.conv(x, nn_conv.ConvWeight(_frozen(w)), b, **attrs)
    scale = max(1.0, float(np.abs(want).max()))
    for y in (got, packed):
        assert y.shape == want.shape and y.dtype == np.float32
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize(
    ("shape", "k", "stride", "dil", "pad"),
    [
        ((1, 288, 14, 14), 5, 2, 1, 2),  # MobileNetV3's strided 5x5: phases of the image
        ((2, 72, 20, 21), 3, 2, 1, 1),  # odd width: phases of unequal length
        ((1, 40, 15, 15), 3, 3, 1, 0),  # stride 3: three phases, one column each
        ((1, 48, 12, 12), 3, 1, 2, 2),  # dilated, stride 1: one einsum
        ((1, 40, 9, 9), 3, 2, 2, 2),  # strided and dilated: a multiply-add per offset
    ],
)
def test_channels_last_depthwise_conv_on_each_path(shape, k, stride, dil, pad) -> None:
    rng = np.random.default_rng(sum(shape) + k)
    c = shape[1]
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    attrs = {"group": c, "strides": [stride] * 2, "pads": [pad] * 4, "dilations": [dil] * 2}
    want = conv_definition(x, w, b, c, attrs["strides"], attrs["pads"], attrs["dilations"])
    assert nn_conv.channels_last_pays(c, want.shape[2:], attrs["strides"], attrs["dilations"])
    np.testing.assert_allclose(nn_conv.conv(x, w, b, **attrs), want, rtol=1e-5, atol=1e-4)


def test_channels_last_depthwise_conv_adds_a_residual() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 64, 7, 7)).astype(np.float32)
    w = rng.standard_normal((64, 1, 5, 5)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    r = rng.standard_normal((1, 64, 7, 7)).astype(np.float32)
    want = conv_definition(x, w, b, 64, [1, 1], [2] * 4, [1, 1]) + r
    got = nn_conv.conv(x, w, b, group=64, pads=[2] * 4, addend=r)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_one_packed_depthwise_weight_serves_many_image_sizes_and_strides() -> None:
    # The packed weight keeps its tiled forms per (phase, stride, output width): a model
    # fed images of several sizes (and the same weight at two strides) must get each
    # size's own tiling back, also after the kept forms were dropped for too many sizes.
    rng = np.random.default_rng(11)
    c = 48
    w = rng.standard_normal((c, 1, 5, 5)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    packed = nn_conv.ConvWeight(_frozen(w))
    sizes = [7, 9, 7, 12, 5, 6, 8, 10, 11, 13, 9, 7]
    for size, stride in zip(sizes, [1, 2] * 6):
        x = rng.standard_normal((1, c, size, size + 1)).astype(np.float32)
        attrs = {"group": c, "strides": [stride] * 2, "pads": [2] * 4, "dilations": [1, 1]}
        want = conv_definition(x, w, b, c, attrs["strides"], attrs["pads"], attrs["dilations"])
        assert nn_conv.channels_last_pays(c, want.shape[2:], attrs["strides"], [1, 1])
        got = nn_conv.conv(x, packed, b, **attrs)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(got, nn_conv.conv(x, w, b, **attrs))


def conv_transpose_definition(x, w, b, group, strides, pads, output_padding) -> np.ndarray:
    """ConvTranspose by its definition in float64: every input pixel scatters its
    weighted kernel into the full image, which is then cropped by the pads (and
    zero-extended by output_padding)."""
    n, c = x.shape[:2]
    cg, mg = c // group, w.shape[1]
    rank = x.ndim - 2
    kernel, ins = w.shape[2:], x.shape[2:]
    full_shape = [s * (i - 1) + k + op for i, k, s, op in zip(ins, kernel, strides, output_padding)]
    full = np.zeros((n, group * mg, *full_shape))
    for off in product(*(range(k) for k in kernel)):
        window = tuple(slice(o, o + (i - 1) * s + 1, s) for o, i, s in zip(off, ins, strides))
        for g in range(group):
            xs = x[:, g * cg : (g + 1) * cg].astype(np.float64)
            ws = w[(slice(g * cg, (g + 1) * cg), slice(None), *off)].astype(np.float64)
            full[(slice(None), slice(g * mg, (g + 1) * mg), *window)] += np.einsum(
                "cm,nc...->nm...", ws, xs
            )
    crop = tuple(slice(pads[i], full_shape[i] - pads[i + rank]) for i in range(rank))
    y = full[(slice(None), slice(None), *crop)]
    if b is not None:
        y = y + b.astype(np.float64).reshape((1, -1) + (1,) * rank)
    return y


@SETTINGS
@given(
    st.integers(1, 3),
    st.integers(1, 3),
    st.booleans(),
    st.integers(1, 2),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_conv_transpose_matches_the_definition(
    rank, k, tiles, group, with_bias, padded, seed
) -> None:
    # tiles: kernel == stride (the windows tile the image: one copy per kernel offset,
    # the bias in the same pass unless pads or output_padding reshape the image);
    # otherwise overlapping or gapped windows summed by col2im.
    rng = np.random.default_rng(seed)
    stride = k if tiles else int(rng.integers(1, 4))
    ins = [int(v) for v in rng.integers(1, 7, rank)]
    c, mg = group * int(rng.integers(1, 4)), int(rng.integers(1, 4))
    x = rng.standard_normal((int(rng.integers(1, 3)), c, *ins)).astype(np.float32)
    w = rng.standard_normal((c, mg, *([k] * rank))).astype(np.float32)
    b = rng.standard_normal(group * mg).astype(np.float32) if with_bias else None
    pads = [0] * (2 * rank)
    output_padding = [0] * rank
    if padded:
        pads = [int(rng.integers(0, k)) for _ in range(2 * rank)]
        output_padding = [int(rng.integers(0, stride)) for _ in range(rank)]
    want = conv_transpose_definition(x, w, b, group, [stride] * rank, pads, output_padding)
    if min(want.shape[2:], default=1) < 1:
        return
    got = nn_conv.conv_transpose(
        x, w, b, group=group, strides=[stride] * rank, pads=pads, output_padding=output_padding
    )
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))
    # A second call reuses the GEMM's buffer: the first result must not change.
    again = nn_conv.conv_transpose(
        x * 2, w, b, group=group, strides=[stride] * rank, pads=pads, output_padding=output_padding
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))
    assert again.shape == got.shape


class _NoIndices:
    """A kernel context in which nobody asks for MaxPool's Indices output."""

    def wants_output(self, index: int) -> bool:
        return False


def pool_definition(x, kernel, pads, op, include_pad) -> np.ndarray:
    """Stride-1 MaxPool/AveragePool by definition: a padded float64 copy (pads -inf for
    max, and not counted in an average unless ``include_pad``), a loop over offsets."""
    rank = x.ndim - 2
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + rank]) for i in range(rank)]
    fill = -np.inf if op == "max" else 0.0
    xp = np.pad(x.astype(np.float64), width, constant_values=fill)
    inside = np.pad(np.ones(x.shape[2:]), width[2:])
    out = [xp.shape[2 + i] - kernel[i] + 1 for i in range(rank)]
    acc = np.full(x.shape[:2] + tuple(out), fill)
    counts = np.zeros(out)
    for off in product(*(range(k) for k in kernel)):
        window = tuple(slice(o, o + n) for o, n in zip(off, out))
        part = xp[(slice(None), slice(None), *window)]
        acc = np.maximum(acc, part) if op == "max" else acc + part
        counts += 1.0 if include_pad else inside[window]
    return acc if op == "max" else acc / counts


@SETTINGS
@given(
    st.integers(1, 3),
    st.sampled_from(["max", "avg"]),
    st.booleans(),
    st.sampled_from([np.float32, np.int8]),
    st.integers(0, 2**16),
)
def test_same_size_stride1_pools_match_the_definition(rank, op, include_pad, dtype, seed) -> None:
    # Stride 1 with pads that keep the size (Inception's 3x3/1 pad-1 branches; even
    # kernels padded SAME_UPPER- or SAME_LOWER-style): the flat pass with edge fix-ups,
    # on sizes down to 1 (every position an edge) and kernels larger than the input.
    rng = np.random.default_rng(seed)
    kernel = [int(k) for k in rng.integers(1, 5, rank)]
    begin = [int(rng.integers(0, k)) for k in kernel]
    pads = begin + [k - 1 - b for k, b in zip(kernel, begin)]
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), *rng.integers(1, 8, rank))
    if op == "avg":
        dtype = np.float32
    x = (rng.standard_normal(shape) * 40).astype(dtype)
    attrs = {"kernel_shape": kernel, "pads": pads}
    geo = nn_pool._Geometry(x, kernel, None, None, pads, "NOTSET", 0)
    assert geo.same()
    if op == "max":
        got = nn_pool.max_pool(_NoIndices(), x, **attrs)[0]
    else:
        got = nn_pool.average_pool(x, count_include_pad=int(include_pad), **attrs)
    want = pool_definition(x, kernel, pads, op, include_pad)
    assert got.shape == want.shape and got.dtype == x.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@SETTINGS
@given(
    st.integers(1, 4),
    st.sampled_from(["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]),
    st.sampled_from(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]),
    st.sampled_from([np.float32, np.int8]),
    st.integers(0, 2**16),
)
def test_nearest_resize_by_whole_factors_matches_the_take_per_axis(
    rank, coordinate_mode, nearest_mode, dtype, seed
) -> None:
    # Whole upsampling factors where output i reads input i // r run as strided copies;
    # every other case (and these, with the copy path off) takes one gather per axis.
    rng = np.random.default_rng(seed)
    shape = tuple(int(v) for v in rng.integers(1, 6, rank))
    factors = [int(v) for v in rng.integers(1, 4, rank)]
    x = (rng.standard_normal(shape) * 50).astype(dtype)
    out_shape = [n * r for n, r in zip(shape, factors)]
    scales = [float(r) for r in factors]
    attrs = {"coordinate_transformation_mode": coordinate_mode, "nearest_mode": nearest_mode}
    got = nn_resize.resize_nd(x, out_shape, scales, mode="nearest", **attrs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nn_resize, "_repeat_factors", lambda *args: None)
        want = nn_resize.resize_nd(x, out_shape, scales, mode="nearest", **attrs)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if coordinate_mode == "asymmetric" and nearest_mode == "floor":  # i // r by definition
        np.testing.assert_array_equal(
            got, x[np.ix_(*(np.arange(n) // r for n, r in zip(out_shape, factors)))]
        )


@pytest.fixture(autouse=True)
def _empty_cache():
    _weight_cache.clear()
    yield
    _weight_cache.clear()


def _sig(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def lstm_definition(x, w, r, b, h0, c0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One-direction LSTM by the ONNX formulas in float64 (gate order i, o, f, c)."""
    w, r = w[0].astype(np.float64), r[0].astype(np.float64)
    bias = b[0, : w.shape[0]].astype(np.float64) + b[0, w.shape[0] :]
    h, c = h0[0].astype(np.float64), c0[0].astype(np.float64)
    hs = h.shape[1]
    ys = []
    for xt in x.astype(np.float64):
        g = xt @ w.T + h @ r.T + bias
        i, o, f, cand = (
            _sig(g[:, :hs]),
            _sig(g[:, hs : 2 * hs]),
            _sig(g[:, 2 * hs : 3 * hs]),
            np.tanh(g[:, 3 * hs :]),
        )
        c = f * c + i * cand
        h = o * np.tanh(c)
        ys.append(h)
    return np.stack(ys)[:, None], h[None], c[None]


def gru_definition(x, w, r, b, h0, linear_before_reset) -> tuple[np.ndarray, np.ndarray]:
    """One-direction GRU by the ONNX formulas in float64 (gate order z, r, h)."""
    w, r = w[0].astype(np.float64), r[0].astype(np.float64)
    hs = r.shape[1]
    wb, rb = b[0, : 3 * hs].astype(np.float64), b[0, 3 * hs :].astype(np.float64)
    h = h0[0].astype(np.float64)
    ys = []
    for xt in x.astype(np.float64):
        px = xt @ w.T + wb
        z = _sig(px[:, :hs] + h @ r[:hs].T + rb[:hs])
        rg = _sig(px[:, hs : 2 * hs] + h @ r[hs : 2 * hs].T + rb[hs : 2 * hs])
        if linear_before_reset:
            cand = np.tanh(px[:, 2 * hs :] + rg * (h @ r[2 * hs :].T + rb[2 * hs :]))
        else:
            cand = np.tanh(px[:, 2 * hs :] + (rg * h) @ r[2 * hs :].T + rb[2 * hs :])
        h = (1 - z) * cand + z * h
        ys.append(h)
    return np.stack(ys)[:, None], h[None]


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_recurrent_layers_with_pretransposed_constant_weights(linear_before_reset) -> None:
    # Initializer weights (frozen) take the cached transposed R; writeable copies rebuild
    # it on each call; both must give the definition's numbers, call after call.
    rng = np.random.default_rng(8 + linear_before_reset)
    steps, batch, n_in, hs = 6, 3, 5, 7
    x = rng.standard_normal((steps, batch, n_in)).astype(np.float32)
    h0 = rng.standard_normal((1, batch, hs)).astype(np.float32)
    c0 = rng.standard_normal((1, batch, hs)).astype(np.float32)

    def weights(gates: int) -> list[np.ndarray]:
        return [
            rng.standard_normal((1, gates * hs, n_in)).astype(np.float32) * 0.5,
            rng.standard_normal((1, gates * hs, hs)).astype(np.float32) * 0.5,
            rng.standard_normal((1, 2 * gates * hs)).astype(np.float32) * 0.5,
        ]

    w, r, b = weights(4)
    want = lstm_definition(x, w, r, b, h0, c0)
    for ws in ([w, r, b], [_frozen(v) for v in (w, r, b)]):
        for _ in range(2):
            got = nn_rnn.lstm(x, *ws, None, h0, c0, hidden_size=hs)
            for g, e in zip(got, want):
                np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    assert _weight_cache.stored_bytes() >= 4 * hs * hs * 4
    w, r, b = weights(3)
    want = gru_definition(x, w, r, b, h0, linear_before_reset)
    for ws in ([w, r, b], [_frozen(v) for v in (w, r, b)]):
        for _ in range(2):
            got = nn_rnn.gru(
                x, *ws, None, h0, hidden_size=hs, linear_before_reset=linear_before_reset
            )
            for g, e in zip(got, want):
                np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_float32_erf_is_within_a_few_ulp_everywhere() -> None:
    grid = np.concatenate(
        [
            np.linspace(-6, 6, 120001),
            np.geomspace(1e-38, 4, 4001),
            -np.geomspace(1e-38, 4, 401),
            [0.0, 4.2, 4.20001, 9.0, 1e30],
        ]
    ).astype(np.float32)
    exact = np.array([math.erf(float(v)) for v in grid])
    got = math_erf.erf(grid)
    assert got.dtype == np.float32
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert (np.abs(got - exact) / ulp).max() <= 3.5
    assert (np.diff(got[:120001]) >= 0).all()  # monotone
    np.testing.assert_array_equal(math_erf.erf(-grid), -got)  # odd
    special = math_erf.erf(np.array([np.inf, -np.inf, np.nan, -0.0], np.float32))
    assert special[0] == 1.0 and special[1] == -1.0 and np.isnan(special[2])
    assert special[3] == 0.0 and np.signbit(special[3])
    # The block-by-block entry point of the fused elementwise chains, in place.
    buf = grid.copy()
    math_erf.erf_into(buf, buf)
    np.testing.assert_array_equal(buf, got)
    half = math_erf.erf(grid[:120001].astype(np.float16))
    assert half.dtype == np.float16


def softmax_definition(x: np.ndarray, axis: int) -> np.ndarray:
    w = x.astype(np.float64)
    e = np.exp(w - w.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@SETTINGS
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=4),
    st.floats(0.1, 80.0),
    st.integers(0, 2**16),
    st.sampled_from([np.float32, np.float64]),
)
def test_softmax_with_one_shift_matches_the_definition(shape, spread, seed, dtype) -> None:
    # Narrow spreads and rows near the array's maximum take the one-shift path, rows far
    # below it the per-row maxima: both must give the definition's numbers (rows far
    # below the array's maximum included).  The one shift rounds x - shift in the input's
    # precision, so a row d below the shift has exponents off by up to d * 2**-24: up to
    # 4e-6 relative for the rows it accepts (d < 64), hence the tolerance.
    rng = np.random.default_rng(seed)
    x = (rng.uniform(-0.5, 0.5, shape) * spread).astype(dtype)
    got = math_softmax.softmax(x)
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got, softmax_definition(x, -1), rtol=5e-6, atol=1e-7)
    np.testing.assert_allclose(
        math_softmax.softmax_2d(x, axis=x.ndim - 1),
        softmax_definition(x, -1),
        rtol=5e-6,
        atol=1e-7,
    )


def test_softmax_one_shift_path_is_taken_only_when_safe() -> None:
    x = np.random.default_rng(2).standard_normal((4, 50)).astype(np.float32)
    assert math_softmax.softmax_rows(x) is not None
    assert math_softmax.softmax_rows(np.asfortranarray(x)) is None
    # Additive attention masks keep the one shift: every row still has unmasked keys.
    for mask_value in (-1e9, -10000.0, np.finfo(np.float32).min, -np.inf):
        masked = x.copy()
        masked[:, :3] = mask_value
        masked[1, 10:] = mask_value
        got = math_softmax.softmax_rows(masked)
        assert got is not None, mask_value
        assert (got[:, :3] == 0).all() and (got[1, 10:] == 0).all()
        want = softmax_definition(masked, -1)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7, err_msg=str(mask_value))
    # A row far below the array's maximum needs its own shift: the fast path declines.
    far = x.copy()
    far[3] -= 200.0
    assert math_softmax.softmax_rows(far) is None
    np.testing.assert_allclose(
        math_softmax.softmax(far), softmax_definition(far, -1), rtol=2e-6, atol=1e-7
    )
    all_masked = x.copy()
    all_masked[2] = -np.inf
    assert math_softmax.softmax_rows(all_masked) is None
    nan = x.copy()
    nan[2, 5] = np.nan
    assert math_softmax.softmax_rows(nan) is None
    assert np.isnan(math_softmax.softmax(nan)[2]).all()
    inf = x.copy()
    inf[0, 1] = np.inf
    assert math_softmax.softmax_rows(inf) is None


@SETTINGS
@given(
    st.sampled_from([(1, 2, 7, 9), (2, 16, 40), (3, 128)]),
    st.sampled_from([-10000.0, -1e9, -np.inf]),
    st.floats(1.0, 30.0),
    st.integers(0, 2**16),
)
def test_softmax_of_masked_scores_matches_the_definition(shape, mask_value, spread, seed) -> None:
    """Attention scores with an additive key mask (random keys masked, never all of a
    row's) take the one-shift path and give the definition's numbers."""
    rng = np.random.default_rng(seed)
    x = (rng.uniform(-0.5, 0.5, shape) * spread).astype(np.float32)
    keys = rng.random(shape[-1]) < 0.4
    keys[rng.integers(shape[-1])] = False
    x[..., keys] += np.float32(mask_value)
    assert math_softmax.softmax_rows(x) is not None
    got = math_softmax.softmax(x)
    np.testing.assert_allclose(got, softmax_definition(x, -1), rtol=5e-6, atol=1e-7)
    assert (got[..., keys] == 0).all()


def gqa_definition(q, k, v, past_k, past_v, num_heads, kv_heads) -> np.ndarray:
    """GroupQueryAttention output for new tokens q/k/v [B, S, heads*H] after a full
    past cache [B, KV, P, H], causal, no rotary: every query head n reads KV head
    n // (num_heads // kv_heads), in float64 with the KV heads repeated explicitly."""
    b, s, _ = q.shape
    h = past_k.shape[-1]
    group = num_heads // kv_heads
    qh = q.reshape(b, s, num_heads, h).transpose(0, 2, 1, 3).astype(np.float64)
    kh = k.reshape(b, s, kv_heads, h).transpose(0, 2, 1, 3)
    vh = v.reshape(b, s, kv_heads, h).transpose(0, 2, 1, 3)
    keys = np.repeat(np.concatenate([past_k, kh], axis=2), group, axis=1).astype(np.float64)
    vals = np.repeat(np.concatenate([past_v, vh], axis=2), group, axis=1).astype(np.float64)
    past, total = past_k.shape[2], past_k.shape[2] + s
    scores = qh @ keys.transpose(0, 1, 3, 2) / math.sqrt(h)
    allowed = np.arange(total)[None, :] <= past + np.arange(s)[:, None]
    scores = np.where(allowed, scores, -np.inf)
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    return (probs @ vals).transpose(0, 2, 1, 3).reshape(b, s, num_heads * h)


@pytest.mark.parametrize(("s", "past", "group"), [(1, 37, 4), (3, 20, 2), (5, 0, 8)])
def test_group_query_attention_reads_shared_kv_heads_in_place(s, past, group) -> None:
    from onnxviz.runtime.kernels.contrib_gqa import group_query_attention
    from onnxviz.runtime.registry import KernelContext

    rng = np.random.default_rng(s * 100 + past)
    b, kv, h = 2, 2, 8
    heads = kv * group
    q = rng.standard_normal((b, s, heads * h)).astype(np.float32)
    k = rng.standard_normal((b, s, kv * h)).astype(np.float32)
    v = rng.standard_normal((b, s, kv * h)).astype(np.float32)
    pk = rng.standard_normal((b, kv, past, h)).astype(np.float32)
    pv = rng.standard_normal((b, kv, past, h)).astype(np.float32)
    lens = np.full(b, past + s - 1, np.int32)
    out, present_k, _, _ = group_query_attention(
        KernelContext(n_outputs=3), q, k, v, pk, pv, lens, np.array(past + s, np.int32),
        num_heads=heads, kv_num_heads=kv,
    )  # fmt: skip
    np.testing.assert_allclose(
        out, gqa_definition(q, k, v, pk, pv, heads, kv), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_array_equal(present_k[:, :, :past], pk)


def pairwise_rotary(xs, c, s, rot, interleaved) -> np.ndarray:
    """Rotary embedding of xs [B, S, N, H] written pair by pair (the spec's formula) with
    cos/sin rows c, s [B or 1, S, >= rot/2], in xs's precision."""
    half = rot // 2
    c, s = c[:, :, None, :half], s[:, :, None, :half]
    if interleaved:
        x1, x2 = xs[..., 0:rot:2], xs[..., 1:rot:2]
    else:
        x1, x2 = xs[..., :half], xs[..., half:rot]
    out = xs.copy()
    if interleaved:
        out[..., 0:rot:2], out[..., 1:rot:2] = x1 * c - x2 * s, x2 * c + x1 * s
    else:
        out[..., :half], out[..., half:rot] = x1 * c - x2 * s, x2 * c + x1 * s
    return out


@SETTINGS
@given(
    st.integers(1, 3),
    st.integers(1, 5),
    st.integers(1, 3),
    st.sampled_from([4, 8, 16]),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_rotary_kernels_give_the_pairwise_formula_bit_for_bit(
    b, seq, n, head, partial, interleaved, four_d, offset, seed
) -> None:
    """Both RotaryEmbedding kernels rotate in four full-width passes (_rotary.py); the
    numbers are the pairwise formula's exactly, in every layout and position form."""
    from onnxviz.runtime.kernels.contrib_attention import ms_rotary_embedding
    from onnxviz.runtime.kernels.nn_attention import rotary_embedding

    rng = np.random.default_rng(seed)
    rot = head // 2 if partial else head
    xs = rng.standard_normal((b, seq, n, head)).astype(np.float32)
    rows = seq + 6
    cos = rng.standard_normal((rows, head // 2)).astype(np.float32)
    sin = rng.standard_normal((rows, head // 2)).astype(np.float32)
    if offset:
        start = int(rng.integers(0, 6))
        pos = np.array([start], np.int64)
        full = np.broadcast_to(start + np.arange(seq), (b, seq))
    else:
        full = rng.integers(0, rows, (b, seq)).astype(np.int64)
        pos = full
    x = xs.transpose(0, 2, 1, 3) if four_d else xs.reshape(b, seq, n * head)
    x = np.ascontiguousarray(x)
    ms_cos, ms_sin = cos[:, : rot // 2], sin[:, : rot // 2]
    want = pairwise_rotary(xs, ms_cos[full], ms_sin[full], rot, interleaved)
    got = ms_rotary_embedding(
        x, pos, ms_cos, ms_sin, interleaved=int(interleaved), num_heads=n,
        rotary_embedding_dim=rot if partial else 0,
    )  # fmt: skip
    got_bs = got.transpose(0, 2, 1, 3) if four_d else got.reshape(b, seq, n, head)
    np.testing.assert_array_equal(got_bs, want)
    onnx_cos, onnx_sin = cos[:, : rot // 2], sin[:, : rot // 2]
    got = rotary_embedding(
        x, onnx_cos, onnx_sin, full, interleaved=int(interleaved),
        num_heads=0 if four_d else n, rotary_embedding_dim=rot if partial else 0,
    )  # fmt: skip
    got_bs = got.transpose(0, 2, 1, 3) if four_d else got.reshape(b, seq, n, head)
    np.testing.assert_array_equal(got_bs, want)
    half16 = rotary_embedding(
        x.astype(np.float16), onnx_cos, onnx_sin, full, interleaved=int(interleaved),
        num_heads=0 if four_d else n, rotary_embedding_dim=rot if partial else 0,
    )  # fmt: skip
    assert half16.dtype == np.float16


@st.composite
def gqa_cases(draw):  # type: ignore[no-untyped-def]
    """A GroupQueryAttention call: prompt or continuation, ragged lengths, a shared cache
    buffer longer than the sequence, packed or separate QKV, and the optional features."""
    b, s = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    kv, group, head = (
        draw(st.integers(1, 2)),
        draw(st.integers(1, 3)),
        draw(st.sampled_from([8, 16])),
    )
    prompt = draw(st.booleans())
    if prompt:  # padded entries have fewer valid keys than the sequence
        totals = [draw(st.integers(1, s)) for _ in range(b)]
        total_max, past_rows = s, draw(st.sampled_from([None, 0, 3]))
    else:
        past = [draw(st.integers(0, 6)) for _ in range(b)]
        if draw(st.booleans()):
            past = [past[0]] * b  # one past length (the common case)
        totals = [p + s for p in past]
        total_max, past_rows = max(totals), max(past) + draw(st.integers(0, 3))
    return {
        "b": b, "s": s, "kv": kv, "heads": kv * group, "head": head, "prompt": prompt,
        "totals": totals, "total_max": total_max, "past_rows": past_rows,
        "packed": draw(st.booleans()), "rotary": draw(st.booleans()),
        "constant_caches": draw(st.booleans()),
        "interleaved": draw(st.integers(0, 1)), "rot_half": draw(st.sampled_from([head // 2, head // 4])),
        "position_ids": draw(st.booleans()), "causal": draw(st.integers(0, 1)),
        "window": draw(st.sampled_from([-1, 1, 2, 4])), "softcap": draw(st.sampled_from([0.0, 3.0])),
        "extra": draw(st.sampled_from([None, "smooth", "sink", "bias", "qk_norm"])),
        "seed": draw(st.integers(0, 2**16)),
    }  # fmt: skip


@SETTINGS
@given(gqa_cases())
def test_group_query_attention_matches_the_plain_formula(case) -> None:
    """The kernel's in-place cache writes, shared rotary tables, cached masks and skipped
    passes give the plain step-by-step formula's numbers (tests/runtime/gqa_reference.py)
    on every output, for random shapes and options."""
    from onnxviz.runtime.kernels.contrib_gqa import group_query_attention
    from onnxviz.runtime.registry import KernelContext
    from tests.runtime.gqa_reference import reference_gqa

    rng = np.random.default_rng(case["seed"])
    b, s, kv, heads, h = case["b"], case["s"], case["kv"], case["heads"], case["head"]

    def f(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    if case["packed"]:
        inputs: list[np.ndarray | None] = [f(b, s, (heads + 2 * kv) * h), None, None]
    else:
        inputs = [f(b, s, heads * h), f(b, s, kv * h), f(b, s, kv * h)]
    rows = case["past_rows"]
    inputs += [None, None] if rows is None else [f(b, kv, rows, h), f(b, kv, rows, h)]
    inputs += [
        np.array([t - 1 for t in case["totals"]], np.int32),
        np.array([case["total_max"]], np.int32),
    ]
    attrs = {
        "num_heads": heads, "kv_num_heads": kv, "causal": case["causal"],
        "local_window_size": case["window"], "softcap": case["softcap"],
    }  # fmt: skip
    cache_rows = case["total_max"] + 8
    opt: dict[int, np.ndarray] = {}
    if case["rotary"]:
        attrs.update(do_rotary=1, rotary_interleaved=case["interleaved"])
        opt[7], opt[8] = f(cache_rows, case["rot_half"]), f(cache_rows, case["rot_half"])
        if case["constant_caches"]:  # initializers: tables of every position made once
            opt[7], opt[8] = _frozen(opt[7]), _frozen(opt[8])
        if case["position_ids"] and not case["prompt"]:
            opt[9] = rng.integers(0, cache_rows, (b, s)).astype(np.int64)
    extra = case["extra"]
    if extra == "smooth":
        attrs["smooth_softmax"] = 1
    elif extra == "sink":
        opt[11] = f(heads)
    elif extra == "bias":
        opt[10] = f(b, 1, s, case["total_max"])
    elif extra == "qk_norm":
        opt[14], opt[15] = f(h), f(h)
    for i in sorted(opt):
        inputs += [None] * (i - len(inputs))
        inputs.append(opt[i])
    ctx = KernelContext(n_outputs=3, output_names=("out", "present_k", "present_v"))
    with np.errstate(all="ignore"):
        want = reference_gqa(ctx, *inputs, **attrs)
        got = group_query_attention(ctx, *inputs, **attrs)
    assert got[3] is None
    for name, g, w in zip(("output", "present_key", "present_value"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        # The output of the compiled common case (native/_gqa.c) sums in its own order
        # with its own exp: a few float32 ulps of values up to ~4 (standard normal V).
        tol = 1e-5 if name == "output" else 1e-6
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=name)


@SETTINGS
@given(
    st.integers(1, 3),
    st.integers(1, 6),
    st.sampled_from([1, 3, 64, 127, 768, 1000]),
    st.sampled_from([np.float32, np.float64]),
    st.sampled_from([1e-3, 1.0, 300.0]),
    st.integers(0, 2**16),
)
def test_contrib_layer_norms_reduce_like_numpys_mean(b, s, n, dtype, magnitude, seed) -> None:
    """The com.microsoft normalisations' numpy path (the compiled row kernel off; it has
    its own tests, test_native_norm.py) sums with np.add.reduce and divides in the input's
    precision instead of calling np.mean: the mean and 1/std outputs are numpy's own, bit
    for bit, and the normalised outputs follow from them."""
    from unittest import mock

    from onnxviz.runtime.kernels import row_norm

    with mock.patch.object(row_norm, "_NORM", None):
        _contrib_layer_norms_like_numpy(b, s, n, dtype, magnitude, seed)


def _contrib_layer_norms_like_numpy(b, s, n, dtype, magnitude, seed) -> None:
    from onnxviz.runtime.kernels.contrib_ms import ms_layer_norm, skip_simplified_layer_norm

    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((b, s, n)) * magnitude).astype(dtype)
    skip = rng.standard_normal((b, s, n)).astype(dtype)
    gamma, beta = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    eps = dtype(1e-6)
    y, mean, inv_std = ms_layer_norm(x, gamma, beta, epsilon=1e-6)
    want_mean = x.mean(axis=-1, keepdims=True)
    centered = x - want_mean
    want_inv = 1.0 / np.sqrt((centered * centered).mean(axis=-1, keepdims=True) + eps)
    np.testing.assert_array_equal(mean, want_mean.astype(np.float32))
    np.testing.assert_array_equal(inv_std, want_inv.astype(np.float32))
    np.testing.assert_array_equal(y, centered * want_inv * gamma + beta)
    y, _, inv_std, total = skip_simplified_layer_norm(x, skip, gamma, epsilon=1e-6)
    np.testing.assert_array_equal(total, x + skip)
    want_inv = 1.0 / np.sqrt((total * total).mean(axis=-1, keepdims=True) + eps)
    np.testing.assert_array_equal(inv_std, want_inv.astype(np.float32))
    np.testing.assert_array_equal(y, total * want_inv * gamma)


def test_conv_geometry_lookup_follows_sizes_and_attributes() -> None:
    """The geometry of a conv is looked up by input size and attributes (nn_conv): a
    SAME_UPPER conv on two image sizes, then other strides, each gives the definition's
    numbers; invalid attributes raise on every call, not only the first."""
    from onnxviz.errors import ExecutionError

    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    for size, stride in ((9, 1), (12, 1), (12, 2), (9, 2)):
        x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
        got = nn_conv.conv(x, w, auto_pad="SAME_UPPER", strides=[stride, stride])
        out = -(-size // stride)
        total = max(0, (out - 1) * stride + 3 - size)
        pads = [total // 2] * 2 + [total - total // 2] * 2
        want = conv_definition(x, w, None, 1, [stride] * 2, pads, [1, 1])
        assert got.shape == (1, 4, out, out)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    x = rng.standard_normal((1, 3, 9, 9)).astype(np.float32)
    for _ in range(2):
        with pytest.raises(ExecutionError, match="spatial values"):
            nn_conv.conv(x, w, strides=[1, 1, 1])


@pytest.mark.parametrize(
    ("x_shape", "k", "stride", "pad"),
    [
        ((2, 40, 40, 40), 3, 1, 1),  # batch 2, channels in several cache blocks
        ((2, 24, 41, 37), 5, 1, 2),
        ((1, 16, 57, 57), 3, 2, 1),  # strided: the stride-phase layout
    ],
)
def test_flat_depthwise_products_per_channel(x_shape, k, stride, pad) -> None:
    """Depthwise convs on images too big for the channels-last path (nn_conv's flat
    layout: one product per channel over the offsets' shifted rows) give the
    definition's numbers, bias included."""
    rng = np.random.default_rng(11)
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = _frozen(rng.standard_normal((c, 1, k, k)).astype(np.float32))
    b = rng.standard_normal(c).astype(np.float32)
    got = nn_conv.conv(
        x, nn_conv.ConvWeight(w), b, group=c, kernel_shape=[k, k], strides=[stride] * 2,
        pads=[pad] * 4,
    )  # fmt: skip
    want = conv_definition(x, w, b, c, [stride] * 2, [pad] * 4, [1, 1])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "stride", "pads", "group"),
    [
        ((1, 3, 75, 81), (8, 3, 7, 7), 2, [3, 2, 1, 3], 1),  # an RGB stem, uneven pads
        ((2, 16, 60, 61), (16, 16, 3, 3), 2, [0, 1, 1, 0], 1),
        ((1, 16, 100, 98), (16, 16, 3, 3), 3, [2, 2, 2, 2], 1),  # stride 3: nine phases
        ((1, 24, 70, 72), (24, 1, 3, 3), 2, [1, 0, 0, 1], 24),  # depthwise
    ],
)
def test_stride_phases_taken_straight_from_the_input(x_shape, w_shape, stride, pads, group):
    """Strided convs split the image into stride phases (nn_conv._FlatLayout), read from
    the unpadded input with the padding left as zeros: the definition's numbers for
    uneven pads, odd sizes, batch 2 and stride 3."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = _frozen(rng.standard_normal(w_shape).astype(np.float32))
    got = nn_conv.conv(
        x, nn_conv.ConvWeight(w), None, group=group, kernel_shape=list(w_shape[2:]),
        strides=[stride] * 2, pads=pads,
    )  # fmt: skip
    want = conv_definition(x, w, None, group, [stride] * 2, pads, [1, 1])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "pads"),
    [
        ((1, 16, 40, 44), (8, 16, 3, 3), [1, 2, 0, 1]),
        ((2, 16, 1100), (8, 16, 5), [2, 1]),  # 1-D
        ((1, 16, 12, 12, 12), (8, 16, 3, 3, 3), [1, 1, 0, 0, 1, 1]),  # 3-D
    ],
)
def test_flat_layout_zeros_its_borders_in_a_reused_buffer(x_shape, w_shape, pads) -> None:
    """The stride-1 flat layout writes zeros only around the image in its reused scratch
    buffer: after a bigger conv left large values there, a padded conv still gives the
    definition's numbers."""
    rng = np.random.default_rng(13)
    big = np.full((1, 16, 70, 70), 1e3, np.float32)
    nn_conv.conv(big, rng.standard_normal((8, 16, 3, 3)).astype(np.float32), pads=[1] * 4)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = _frozen(rng.standard_normal(w_shape).astype(np.float32))
    rank = len(x_shape) - 2
    got = nn_conv.conv(x, nn_conv.ConvWeight(w), None, pads=pads)
    want = conv_definition(x, w, None, 1, [1] * rank, pads, [1] * rank)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
