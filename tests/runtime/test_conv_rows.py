"""A diffusion UNet's pieces outside a channels-last chain: the plain conv run through
channels-last rows (nn_conv._native_direct_nchw: native/_channels.c's place and unplace
around the compiled direct conv), InstanceNormalization and GroupNormalization on the
compiled row norm (its 2x nearest Resize: test_native_resize.py).

* unplace is a copy: equal to numpy's transpose at every level, edges (channels and
  pixels short of a vector, one row) included; wrong sizes raise.
* The rows conv is within the float32 bound of the float64 conv, bias and addend in, on
  random geometries, and the routing takes it exactly where it says (AVX2 level only).
* The norms are within float32 rounding of their float64 definition.
* A GroupNorm -> SiLU -> conv -> 2x nearest -> conv block, as torch exports it, gives the
  same outputs in stepped, fused and plain runs, with the kernels on and off, and
  onnxruntime's.
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

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.kernels import nn_conv, nn_geometry, nn_norm, nn_resize, row_norm
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled

from .differential import assert_modes_agree, close

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
U = 2.0**-24


# Sizes around the AVX2 copies' blocks: 8 and 16 pixels, 8 and 16 channels, and edges.
COPY_SIZES = [
    (1, 64, 96), (2, 9, 13), (1, 1, 8), (3, 7, 5), (1, 40, 32), (2, 24, 16), (1, 16, 7),
    (1, 1024, 64), (1, 23, 48), (2, 17, 24),
]  # fmt: skip


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("n", "rows", "width"), COPY_SIZES)
def test_place_of_planes_is_their_transpose_into_channels_last_rows(
    level: int, n: int, rows: int, width: int
) -> None:
    """What the rows conv runs on: NCHW planes copied into channels-last rows, alone and
    as one part of wider rows (a channel Concat's), the rest of each row untouched."""
    chan = compiled("channels")
    x = np.random.default_rng(rows + width).standard_normal((n, width, rows)).astype(np.float32)
    for total, offset in ((width, 0), (width + 11, 5)):
        out = np.full((n, rows, total), np.nan, np.float32)
        with at_level("channels", level):
            chan.place(x, out, (n, rows, width, total, offset), True)
        np.testing.assert_array_equal(out[:, :, offset : offset + width], x.transpose(0, 2, 1))
        rest = np.delete(out, np.s_[offset : offset + width], axis=2)
        assert np.isnan(rest).all()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("n", "rows", "width"), COPY_SIZES)
def test_unplace_is_the_transpose_of_channels_last_rows(
    level: int, n: int, rows: int, width: int
) -> None:
    chan = compiled("channels")
    x = np.random.default_rng(rows * width).standard_normal((n, rows, width)).astype(np.float32)
    out = np.full((n, width, rows), np.nan, np.float32)
    with at_level("channels", level):
        chan.unplace(x, out, (n, rows, width))
    np.testing.assert_array_equal(out, x.transpose(0, 2, 1))


def test_unplace_checks_its_buffers() -> None:
    chan = compiled("channels")
    x = np.zeros((1, 4, 8), np.float32)
    with pytest.raises(ValueError, match="out"):
        chan.unplace(x, np.zeros((1, 8, 3), np.float32), (1, 4, 8))
    with pytest.raises(ValueError, match="float32"):
        chan.unplace(x.astype(np.float64), np.zeros((1, 8, 4), np.float32), (1, 4, 8))
    with pytest.raises(ValueError, match="sizes"):
        chan.unplace(x, np.zeros((1, 8, 4), np.float32), (-1, 4, 8))


def _conv64(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray,
    stride: int,
    pad: int,
    dilation: int,
    out_shape: tuple[int, int],
) -> tuple[np.ndarray, np.ndarray]:
    """The float64 conv and the sum of |x * w| per output (for the error bound)."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = out_shape
    y = np.zeros((n, m, oh, ow))
    mag = np.zeros((n, m, oh, ow))
    for ky in range(kh):
        for kx in range(kw):
            ys, xs = ky * dilation, kx * dilation
            win = xp[:, :, ys : ys + stride * oh : stride, xs : xs + stride * ow : stride]
            wk = w[:, :, ky, kx].astype(np.float64)
            y += np.einsum("nchw,mc->nmhw", win, wk)
            mag += np.einsum("nchw,mc->nmhw", np.abs(win), np.abs(wk))
    return y + b.reshape(1, m, 1, 1), mag


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=st.integers(16, 40),
    m=st.integers(1, 20),
    size=st.integers(3, 19),
    k=st.sampled_from([1, 3, 5]),
    stride=st.integers(1, 2),
    dilation=st.integers(1, 2),
    pad=st.integers(0, 2),
    batch=st.integers(1, 2),
    with_addend=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_rows_conv_is_within_the_bound_of_the_exact_conv(
    c: int,
    m: int,
    size: int,
    k: int,
    stride: int,
    dilation: int,
    pad: int,
    batch: int,
    with_addend: bool,
    seed: int,
) -> None:
    compiled("conv")
    compiled("channels")
    span = dilation * (k - 1) + 1
    if size + 2 * pad < span:
        return
    out_hw = (size + 2 * pad - span) // stride + 1
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, c, size, size)).astype(np.float32)
    w = (rng.standard_normal((m, c, k, k)) / math.sqrt(c * k * k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    addend = rng.standard_normal((batch, m, out_hw, out_hw)).astype(np.float32)
    want, mag = _conv64(x, w, b, stride, pad, dilation, (out_hw, out_hw))
    if with_addend:
        want = want + addend
    for level in LEVELS:
        with at_level("conv", level), at_level("channels", level):
            got = nn_conv._native_direct_nchw(
                x, w, b, addend if with_addend else None, None, (k, k), (stride, stride),
                (dilation, dilation), (pad, pad, pad, pad), (out_hw, out_hw), rows=True,
            )  # fmt: skip
        assert got is not None and got[1]
        y = got[0]
        assert y.shape == want.shape and y.dtype == np.float32 and y.flags.c_contiguous
        bound = (c * k * k + 3) * U * (mag + np.abs(b).reshape(1, m, 1, 1) + np.abs(want))
        assert np.all(np.abs(y - want) <= bound + 1e-30), f"level {level}"


def test_the_rows_conv_reuses_its_aligned_rows_and_hands_out_fresh_outputs() -> None:
    """The rows in and out are per-thread buffers kept between calls (64-byte aligned):
    each call's output is its own array, an earlier one intact after later calls of the
    same and of other shapes."""
    compiled("conv")
    compiled("channels")
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((24, 16, 3, 3)) / 12).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    geometry = ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1))

    def rows_conv(x: np.ndarray) -> np.ndarray:
        got = nn_conv._native_direct_nchw(
            x, w, b, None, None, *geometry, tuple(x.shape[2:]), rows=True
        )
        assert got is not None
        return got[0]

    x1, x2 = (rng.standard_normal((1, 16, 20, 20)).astype(np.float32) for _ in range(2))
    for level in LEVELS:
        with at_level("conv", level), at_level("channels", level):
            first = rows_conv(x1)
            kept = first.copy()
            second = rows_conv(x2)
            rows_conv(rng.standard_normal((2, 16, 9, 7)).astype(np.float32))
            np.testing.assert_array_equal(first, kept)
            np.testing.assert_array_equal(rows_conv(x1), kept)
            assert not np.shares_memory(first, second)
    held = nn_geometry.scratch("conv_rows_in", (1, 20, 20, 16), np.float32, aligned=True)
    assert held.ctypes.data % 64 == 0
    again = nn_geometry.scratch("conv_rows_in", (2, 3, 5, 16), np.float32, aligned=True)
    assert again.ctypes.data == held.ctypes.data  # the same buffer, smaller


def test_the_routing_takes_the_rows_conv_only_at_avx2_and_where_it_pays() -> None:
    lanes = nn_conv.direct_lanes()
    geometry = ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1))
    pays = nn_conv.direct_rows_pays
    # convs Winograd does not run (strided, or 8 x 8 outputs) keep the rows at AVX2
    assert pays(32, 32, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), (16, 16)) == (lanes == 8)
    assert pays(256, 256, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), (14, 14)) == (lanes == 8)
    assert pays(256, 256, *geometry, (8, 8)) == (lanes == 8)
    # a diffusion UNet's small Winograd convs: the kernel's NCHW form took them over
    assert not pays(96, 32, *geometry, (32, 32))
    assert not pays(128, 64, *geometry, (16, 16))
    assert not pays(64, 64, *geometry, (64, 64))  # Winograd's on a large image
    assert not pays(128, 128, *geometry, (32, 32))
    assert not pays(3, 32, *geometry, (32, 32))  # a stem's few channels
    assert not pays(64, 64, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), (32, 32))  # a plain product


@pytest.mark.parametrize("lanes", [8, 16], ids=["avx2", "avx512"])
def test_small_winograd_convs_run_the_direct_nchw_kernel(
    lanes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Measured again at AVX-512: up to 16 x 16 outputs of up to 128 x 128 channels run
    # the direct kernel's NCHW form, where Winograd ran; at AVX2, where the rows route had
    # taken them from Winograd, any up to 16 x 16; at both widths (measured against
    # Winograd in a 64 px diffusion UNet) up to 64 x 64 of up to 128 x 64; wider or larger
    # ones keep Winograd.
    monkeypatch.setattr(nn_conv, "direct_lanes", lambda: lanes)
    geometry = ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1))
    pays = nn_conv.direct_nchw_pays
    assert pays(64, 64, *geometry, (32, 32))  # a diffusion UNet's
    assert pays(96, 32, *geometry, (32, 32))
    assert pays(128, 64, *geometry, (16, 16))
    assert pays(128, 128, *geometry, (16, 16))
    assert pays(64, 64, *geometry, (16, 16))
    assert pays(256, 128, *geometry, (16, 16)) == (lanes == 8)
    assert pays(128, 64, *geometry, (32, 32))
    assert pays(64, 64, *geometry, (56, 56))
    assert pays(96, 32, *geometry, (64, 64))  # a 64 px diffusion UNet's
    assert pays(64, 128, *geometry, (64, 64))
    assert not pays(128, 96, *geometry, (64, 64))
    assert not pays(128, 128, *geometry, (28, 28))  # Winograd's, at either width
    assert not pays(128, 128, *geometry, (64, 64))
    assert not pays(256, 64, *geometry, (32, 32))
    # in a model (an InstanceNorm before the conv keeps it NCHW): every run mode gives
    # the stepped run's numbers, through the route this machine's own width takes
    monkeypatch.undo()
    rng = np.random.default_rng(lanes)
    inits = [
        numpy_helper.from_array(np.ones(64, np.float32), "s"),
        numpy_helper.from_array(np.zeros(64, np.float32), "z"),
        numpy_helper.from_array(
            (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "w"
        ),
        numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("InstanceNormalization", ["x", "s", "z"], ["n"]),
        helper.make_node("Conv", ["n", "w", "b"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "norm_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 32, 32])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert_modes_agree(model, {"x": rng.standard_normal((1, 64, 32, 32)).astype(np.float32)})


@pytest.mark.parametrize("shape", [(1, 8, 12288), (2, 3, 5, 7), (1, 4, 1)])
def test_instance_norm_on_the_row_kernel_is_its_definition(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 3 + 5).astype(np.float32)
    c = shape[1]
    axes = tuple(range(2, len(shape)))
    x64 = x.astype(np.float64)
    normed = (x64 - x64.mean(axis=axes, keepdims=True)) / np.sqrt(
        x64.var(axis=axes, keepdims=True) + np.float64(np.float32(1e-5))
    )
    cshape = (1, c) + (1,) * (len(shape) - 2)
    for scale, bias in (
        (np.ones(c, np.float32), np.zeros(c, np.float32)),  # the GroupNorm export's identity
        (rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)),
    ):
        want = normed * scale.reshape(cshape) + bias.reshape(cshape)
        got = nn_norm.instance_norm(x, scale, bias, epsilon=1e-5)
        assert got.dtype == np.float32 and got.shape == x.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=3e-5 * (1 + np.abs(want).max()))
    if row_norm.enabled():  # the numpy steps agree with the kernel within rounding
        kernel = nn_norm.instance_norm(x, scale, bias, epsilon=1e-5)
        module = row_norm._NORM
        row_norm._NORM = None
        try:
            steps = nn_norm.instance_norm(x, scale, bias, epsilon=1e-5)
        finally:
            row_norm._NORM = module
        np.testing.assert_allclose(kernel, steps, rtol=0, atol=3e-5 * (1 + np.abs(steps).max()))


def _block_model(size: int, opset: int) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """A diffusion UNet's block as torch's exporter writes it: GroupNorm (Reshape ->
    InstanceNormalization with ones and zeros -> Reshape -> Mul -> Add), SiLU (Sigmoid,
    Mul), a 3x3 conv of 96 -> 32 channels with a residual Add, a 2x nearest Resize, then
    a 3x3 conv and, from opset 21, a GroupNormalization (scale and bias per channel)."""
    rng = np.random.default_rng(7)
    c, g, m = 96, 8, 32
    init = [
        numpy_helper.from_array(np.array([1, g, -1], np.int64), "gshape"),
        numpy_helper.from_array(np.array([1, c, size, size], np.int64), "back"),
        numpy_helper.from_array(np.ones(g, np.float32), "ones"),
        numpy_helper.from_array(np.zeros(g, np.float32), "zeros"),
        numpy_helper.from_array(rng.standard_normal((c, 1, 1)).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.standard_normal((c, 1, 1)).astype(np.float32), "beta"),
        numpy_helper.from_array((rng.standard_normal((m, c, 3, 3)) / 30).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((m, m, 3, 3)) / 17).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b2"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "gn_scale"),
        numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "gn_bias"),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "gshape"], ["g1"]),
        helper.make_node("InstanceNormalization", ["g1", "ones", "zeros"], ["g2"], epsilon=1e-5),
        helper.make_node("Reshape", ["g2", "back"], ["g3"]),
        helper.make_node("Mul", ["g3", "gamma"], ["g4"]),
        helper.make_node("Add", ["g4", "beta"], ["g5"]),
        helper.make_node("Sigmoid", ["g5"], ["s1"]),
        helper.make_node("Mul", ["g5", "s1"], ["s2"]),
        helper.make_node("Conv", ["s2", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c1", "skip"], ["r1"]),
        helper.make_node("Resize", ["r1", "", "scales"], ["u1"], mode="nearest"),
        helper.make_node("Conv", ["u1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
    ]
    if opset >= 21:
        nodes.append(
            helper.make_node(
                "GroupNormalization", ["c2", "gn_scale", "gn_bias"], ["y"], num_groups=4
            )
        )
    else:
        nodes.append(helper.make_node("Identity", ["c2"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "diffusion_block",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size]),
            helper.make_tensor_value_info("skip", TensorProto.FLOAT, [1, m, size, size]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {
        "x": rng.standard_normal((1, c, size, size)).astype(np.float32),
        "skip": rng.standard_normal((1, m, size, size)).astype(np.float32),
    }
    return model, feeds


@pytest.mark.parametrize(("size", "opset"), [(32, 17), (32, 21)])
def test_a_diffusion_block_agrees_in_every_mode_and_with_onnxruntime(
    monkeypatch: pytest.MonkeyPatch, size: int, opset: int
) -> None:
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _block_model(size, opset)
    taken: set[bool | None] = set()  # the routes of the 96 -> 32 conv
    route = nn_conv._direct_route

    def counted(*args: Any) -> bool | None:
        got = route(*args)
        if args[1:3] == (96, 32):  # (n, c, m, ...)
            taken.add(got)
        return got

    monkeypatch.setattr(nn_conv, "_direct_route", counted)
    stepped = assert_modes_agree(model, feeds, rtol=2e-4)
    # the 96 -> 32 conv runs the direct kernel's NCHW form wherever the kernel runs
    assert taken == ({None} if nn_conv.direct_lanes() is None else {False})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(["y"], feeds)
    close(stepped["y"], theirs, "against onnxruntime", rtol=2e-4)
    monkeypatch.setattr(nn_resize, "_RESIZE", None)
    monkeypatch.setattr(row_norm, "_NORM", None)
    with at_level("conv", None), at_level("channels", None):
        off = Session(model).run(feeds)
    close(off["y"], stepped["y"], "kernels off", rtol=2e-4)


def _calls_made(monkeypatch: pytest.MonkeyPatch, name: str) -> list[bool]:
    """Whether each call of nn_conv's preparer ``name`` made a call (appended as made)."""
    made: list[bool] = []
    real = getattr(nn_conv, name)

    def counted(*args: Any) -> Any:
        got = real(*args)
        made.append(got is not None)
        return got

    monkeypatch.setattr(nn_conv, name, counted)
    return made


@pytest.mark.parametrize(
    ("c", "m", "size", "k", "stride", "pad"),
    [(64, 64, 8, 3, 1, 1), (96, 32, 32, 3, 1, 1), (32, 16, 17, 3, 2, 1), (3, 8, 20, 5, 1, 2)],
)
def test_a_nodes_prepared_conv_call_gives_the_layers_bits(
    monkeypatch: pytest.MonkeyPatch, c: int, m: int, size: int, k: int, stride: int, pad: int
) -> None:
    # conv() keeps each node's direct call (nn_conv.prepared_nchw) for frozen weights:
    # the same kernel and arguments as the routing layers', so the same bits, the
    # residual in or added after; inputs it was not made for take the layers.
    compiled("conv")
    rng = np.random.default_rng(c + size)
    x = rng.standard_normal((1, c, size, size)).astype(np.float32)
    w = (rng.standard_normal((m, c, k, k)) / math.sqrt(c * k * k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    w.flags.writeable = False  # an initializer's (frozen: _weight_cache)
    b.flags.writeable = False
    attrs = {"pads": [pad] * 4, "strides": [stride] * 2}
    out_hw = (size + 2 * pad - k) // stride + 1
    addend = rng.standard_normal((1, m, out_hw, out_hw)).astype(np.float32)
    made = _calls_made(monkeypatch, "prepared_nchw")
    for residual in (None, addend, np.asfortranarray(addend)):
        monkeypatch.setattr(nn_conv, "PREPARED_CALLS", False)
        want = nn_conv.conv(x, w, b, addend=residual, **attrs)
        monkeypatch.setattr(nn_conv, "PREPARED_CALLS", True)
        for _ in range(2):  # made on the first call, kept for the second
            got = nn_conv.conv(x, w, b, addend=residual, **attrs)
            np.testing.assert_array_equal(got, want)
    assert len(made) == 1  # one call made per node, whatever the residual
    # a residual of another shape: the layers' error, not the call's
    with pytest.raises(ExecutionError, match="residual"):
        nn_conv.conv(x, w, b, addend=addend[:, :1], **attrs)
    # another input shape makes its own call; a writeable weight never keeps one
    nn_conv.conv(x[:, :, :-1], w, b, **attrs)
    assert len(made) == 2
    w2 = w.copy()
    nn_conv.conv(x, w2, b, **attrs)
    nn_conv.conv(x, w2, b, **attrs)
    assert len(made) == 2


@pytest.mark.parametrize(
    ("c", "m", "length", "k", "stride", "dilation", "pads"),
    [(16, 64, 256, 3, 1, 1, (1, 1)), (32, 32, 100, 7, 1, 4, (24, 0)), (8, 12, 41, 5, 2, 1, (2, 1))],
)
def test_a_1d_nodes_prepared_conv_call_gives_the_layers_bits(
    monkeypatch: pytest.MonkeyPatch,
    c: int, m: int, length: int, k: int, stride: int, dilation: int, pads: tuple[int, int],
) -> None:  # fmt: skip
    # A 1-D conv's kept call (nn_conv.prepared_planar) runs the 2-D conv of height 1
    # that _planar_dispatch runs: the layers' bits, with the residual; a strided conv of
    # few input channels (the 1-D paths') makes none.
    compiled("conv")
    rng = np.random.default_rng(c + length)
    x = rng.standard_normal((2, c, length)).astype(np.float32)
    w = (rng.standard_normal((m, c, k)) / math.sqrt(c * k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    w.flags.writeable = False
    b.flags.writeable = False
    attrs = {"pads": list(pads), "strides": [stride], "dilations": [dilation]}
    out = (length + sum(pads) - dilation * (k - 1) - 1) // stride + 1
    addend = rng.standard_normal((2, m, out)).astype(np.float32)
    made = _calls_made(monkeypatch, "prepared_planar")
    for residual in (None, addend, np.asfortranarray(addend)):
        monkeypatch.setattr(nn_conv, "PREPARED_CALLS", False)
        want = nn_conv.conv(x, w, b, addend=residual, **attrs)
        monkeypatch.setattr(nn_conv, "PREPARED_CALLS", True)
        for _ in range(2):
            got = nn_conv.conv(x, w, b, addend=residual, **attrs)
            assert got.shape == (2, m, out)
            np.testing.assert_array_equal(got, want)
    on = native.load("conv") is not None  # ONNXVIZ_NATIVE=off: the layers alone
    assert made == [on]
    few = np.ascontiguousarray(x[:, :2])
    w_few = np.ascontiguousarray(w[:, :2])
    w_few.flags.writeable = False
    strided = {**attrs, "strides": [2]}
    np.testing.assert_array_equal(
        nn_conv.conv(few, w_few, b, **strided),
        nn_conv.conv(few, w_few.copy(), b, **strided),  # writeable: the layers
    )
    assert made == [on, False]


@pytest.mark.parametrize(
    ("c", "m", "size", "batch"), [(64, 192, 8, 1), (96, 32, 32, 1), (128, 64, 16, 2), (5, 7, 3, 3)]
)
def test_a_1x1_nodes_prepared_call_gives_the_layers_bits(
    monkeypatch: pytest.MonkeyPatch, c: int, m: int, size: int, batch: int
) -> None:
    # A 1x1, stride 1, unpadded NCHW conv keeps a call (nn_conv.prepared_pointwise) that
    # runs the layers' product on a view with their additions after: the same bits,
    # with and without bias and residual; a residual of another shape, an activation, a
    # padded or strided 1x1 take the layers.
    rng = np.random.default_rng(c + m)
    x = rng.standard_normal((batch, c, size, size + 1)).astype(np.float32)
    w = (rng.standard_normal((m, c, 1, 1)) / math.sqrt(c)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    w.flags.writeable = False
    b.flags.writeable = False
    addend = rng.standard_normal((batch, m, size, size + 1)).astype(np.float32)
    made = _calls_made(monkeypatch, "prepared_pointwise")
    for bias in (b, None):
        for residual in (None, addend, np.asfortranarray(addend)):
            monkeypatch.setattr(nn_conv, "PREPARED_CALLS", False)
            want = nn_conv.conv(x, w, bias, addend=residual)
            monkeypatch.setattr(nn_conv, "PREPARED_CALLS", True)
            for _ in range(2):  # made on the first call, kept for the second
                got = nn_conv.conv(x, w, bias, addend=residual)
                assert got.shape == (batch, m, size, size + 1)
                np.testing.assert_array_equal(got, want)
    assert made == [True, True]  # one per node (the bias is another node)
    with pytest.raises(ExecutionError, match="residual"):
        nn_conv.conv(x, w, b, addend=addend[:, :1])
    call = nn_conv.prepared_pointwise(x, w, b, {})
    assert call is not None and call(x, None, (nn_conv.ACT_RELU, math.nan, math.nan)) is None
    for attrs in ({"pads": [1, 1, 1, 1]}, {"strides": [2, 2]}):
        assert nn_conv.prepared_pointwise(x, w, b, attrs) is None


def test_instance_norms_identity_check_is_kept_only_for_read_only_constants() -> None:
    # A model's scale and bias (read-only) are checked once; arrays that can change are
    # checked on every call, so an edit to them takes effect.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 64)).astype(np.float32)
    scale, bias = np.ones(4, np.float32), np.zeros(4, np.float32)
    plain = nn_norm.instance_norm(x, scale, bias)
    scale[1] = 2.0  # writeable: the next call sees it
    scaled = nn_norm.instance_norm(x, scale, bias)
    np.testing.assert_allclose(scaled[:, 1], 2 * plain[:, 1], rtol=1e-6)
    np.testing.assert_array_equal(scaled[:, [0, 2, 3]], plain[:, [0, 2, 3]])
    frozen_scale, frozen_bias = np.ones(4, np.float32), np.full(4, 0.5, np.float32)
    frozen_scale.flags.writeable = False
    frozen_bias.flags.writeable = False
    for _ in range(2):  # the second answer from the kept one
        got = nn_norm.instance_norm(x, frozen_scale, frozen_bias)
        np.testing.assert_allclose(got, plain + 0.5, rtol=1e-6, atol=1e-6)
    assert not nn_norm._identity_affine(frozen_scale, frozen_bias)
    assert nn_norm._AFFINE[(id(frozen_scale), id(frozen_bias))][2] is False
    ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
    assert nn_norm._identity_affine(ones, zeros)
    assert (id(ones), id(zeros)) not in nn_norm._AFFINE  # writeable: never kept
