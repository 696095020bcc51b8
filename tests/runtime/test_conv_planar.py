"""1-D convs run as the 2-D convs of height 1 they are (nn_conv._planar_dispatch): the
compiled direct kernel instead of the 1-D shifted GEMMs and im2col.

* On random geometries (dilation, stride, asymmetric pads, batches, bias, a residual)
  the planar route is within the float32
  bound of the float64 conv at every native level, and within float32 rounding of the
  1-D paths it replaces (ONNXVIZ_PLANAR_CONV=off).
* The routing takes it exactly where it says: float32, one group, a strided conv only
  from 4 input channels; the weight's 2-D view is one object call after call, so its
  packed forms are made once.
* A temporal convolutional network (causal dilated Conv1d, sliced, ReLU, residual 1x1)
  gives the same outputs stepped, fused and plain, and onnxruntime's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import nn_conv
from tests.runtime.native_modules import at_level

from .differential import assert_modes_agree, close

pytestmark = pytest.mark.numeric

LEVELS = [None, *native.levels()]  # None: the compiled kernels off (numpy's 2-D paths)
U = 2.0**-24


def _conv1d64(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    stride: int,
    dilation: int,
    pads: tuple[int, int],
    out_len: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The float64 1-D conv (bias in) and the sum of |x * w| per output (for the bound)."""
    n, c, _ = x.shape
    m, _, k = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), pads))
    y = np.zeros((n, m, out_len))
    mag = np.zeros((n, m, out_len))
    for t in range(k):
        start = t * dilation
        win = xp[:, :, start : start + stride * out_len : stride]
        wk = w[:, :, t].astype(np.float64)
        y += np.einsum("ncl,mc->nml", win, wk)
        mag += np.einsum("ncl,mc->nml", np.abs(win), np.abs(wk))
    if b is not None:
        y += b.reshape(1, m, 1)
    return y, mag


@contextmanager
def _routing(mode: str) -> Iterator[None]:
    """ONNXVIZ_PLANAR_CONV set to ``mode`` inside the block (a hypothesis example's own)."""
    saved = os.environ.get("ONNXVIZ_PLANAR_CONV")
    os.environ["ONNXVIZ_PLANAR_CONV"] = mode
    try:
        yield
    finally:
        if saved is None:
            del os.environ["ONNXVIZ_PLANAR_CONV"]
        else:
            os.environ["ONNXVIZ_PLANAR_CONV"] = saved


def _core(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    stride: int,
    dilation: int,
    pads: tuple[int, int],
    addend: np.ndarray | None,
    packed: nn_conv.ConvWeight | None,
) -> np.ndarray:
    kernel, strides, dil, pd, out_shape = nn_conv.conv_geometry(
        x, w, "NOTSET", [dilation], None, list(pads), [stride]
    )
    return nn_conv.conv_core(x, w, 1, kernel, strides, dil, pd, out_shape, b, packed, addend)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=st.integers(1, 40),
    m=st.integers(1, 24),
    length=st.integers(1, 300),
    k=st.integers(1, 9),
    stride=st.integers(1, 3),
    dilation=st.integers(1, 3),
    pad_left=st.integers(0, 4),
    pad_right=st.integers(0, 4),
    batch=st.integers(1, 3),
    with_bias=st.booleans(),
    with_addend=st.booleans(),
    constant=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_1d_conv_as_2d_is_within_the_bound_of_the_exact_conv_at_every_level(
    c: int,
    m: int,
    length: int,
    k: int,
    stride: int,
    dilation: int,
    pad_left: int,
    pad_right: int,
    batch: int,
    with_bias: bool,
    with_addend: bool,
    constant: bool,
    seed: int,
) -> None:
    span = dilation * (k - 1) + 1
    if length + pad_left + pad_right < span:
        return
    out_len = (length + pad_left + pad_right - span) // stride + 1
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, c, length)).astype(np.float32)
    w = (rng.standard_normal((m, c, k)) / math.sqrt(c * k)).astype(np.float32)
    w.flags.writeable = False  # a constant weight, as the planner hands it
    b = rng.standard_normal(m).astype(np.float32) if with_bias else None
    addend = rng.standard_normal((batch, m, out_len)).astype(np.float32) if with_addend else None
    want, mag = _conv1d64(x, w, b, stride, dilation, (pad_left, pad_right), out_len)
    if addend is not None:
        want = want + addend
    bias_mag = 0.0 if b is None else np.abs(b).reshape(1, m, 1)
    bound = (c * k + 3) * U * (mag + bias_mag + np.abs(want))
    packed = nn_conv.ConvWeight(w) if constant else None
    for level in LEVELS:
        with at_level("conv", level), at_level("channels", level):
            with _routing("auto"):
                y = _core(x, w, b, stride, dilation, (pad_left, pad_right), addend, packed)
            assert y.shape == want.shape and y.dtype == np.float32
            assert np.all(np.abs(y - want) <= bound + 1e-30), f"level {level}"
            with _routing("off"):
                old = _core(x, w, b, stride, dilation, (pad_left, pad_right), addend, packed)
            close(y, old, f"as 2-D against the 1-D paths, level {level}", rtol=1e-5)


def test_the_routing_runs_as_2d_exactly_where_it_says(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[tuple[int, ...]] = []
    real = nn_conv._planar_dispatch

    def spy(x: np.ndarray, *args: Any) -> Any:
        taken.append(x.shape)
        return real(x, *args)

    monkeypatch.setattr(nn_conv, "_planar_dispatch", spy)
    rng = np.random.default_rng(0)

    def run(c: int, m: int, group: int, stride: int, dtype: Any = np.float32) -> bool:
        taken.clear()
        x = rng.standard_normal((2, c, 64)).astype(dtype)
        w = rng.standard_normal((m, c // group, 3)).astype(dtype)
        kernel, strides, dil, pads, out_shape = nn_conv.conv_geometry(
            x, w, "NOTSET", None, None, [1, 1], [stride]
        )
        nn_conv.conv_core(x, w, group, kernel, strides, dil, pads, out_shape)
        return bool(taken)

    assert run(16, 32, 1, 1)  # a TCN's conv
    assert run(1, 32, 1, 1)  # one input channel, unstrided
    assert run(4, 32, 1, 2)  # strided from 4 channels
    assert not run(1, 32, 1, 2)  # wav2vec2's raw-audio stem: the 1-D im2col
    assert not run(16, 16, 16, 1)  # depthwise: the 1-D depthwise path
    assert not run(16, 16, 4, 1)  # grouped
    assert not run(16, 32, 1, 1, np.float64)
    monkeypatch.setenv("ONNXVIZ_PLANAR_CONV", "off")
    assert not run(16, 32, 1, 1)


def test_a_constant_weight_has_one_2d_view_and_one_packed_form() -> None:
    w = np.random.default_rng(1).standard_normal((8, 4, 3)).astype(np.float32)
    w.flags.writeable = False
    view = nn_conv.planar_weight(w)
    assert view.shape == (8, 4, 1, 3) and np.shares_memory(view, w)
    assert nn_conv.planar_weight(w) is view  # packed forms keyed by it are made once
    packed = nn_conv.ConvWeight(w)
    assert packed.planar() is packed.planar()
    assert packed.planar().array.shape == (8, 4, 1, 3)
    changing = np.array(w)  # writeable: it may change between calls, so a fresh view
    assert nn_conv.planar_weight(changing) is not nn_conv.planar_weight(changing)


def _tcn_model(n_in: int, width: int, length: int) -> onnx.ModelProto:
    """Two residual TCN blocks as torch exports them: Conv1d padded on both sides, the
    future sliced off, ReLU; a 1x1 Conv1d on the first block's skip; then the last step's
    channels through a Gemm."""
    rng = np.random.default_rng(7)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def conv(src: str, cin: int, cout: int, k: int, d: int, name: str) -> str:
        w = const(
            f"{name}_w",
            (rng.standard_normal((cout, cin, k)) / math.sqrt(cin * k)).astype(np.float32),
        )
        b = const(f"{name}_b", rng.standard_normal(cout).astype(np.float32))
        pad = (k - 1) * d
        nodes.append(
            helper.make_node(
                "Conv", [src, w, b], [f"{name}_y"], pads=[pad, pad], dilations=[d], name=name
            )
        )
        return f"{name}_y"

    x, cin = "x", n_in
    for i, d in enumerate((1, 2)):
        h = x
        for j in range(2):
            y = conv(h, cin if j == 0 else width, width, 3, d, f"b{i}c{j}")
            cut = 2 * d
            starts, ends, axes = (
                const(f"b{i}c{j}_s", np.array([0], np.int64)),
                const(f"b{i}c{j}_e", np.array([-cut], np.int64)),
                const(f"b{i}c{j}_a", np.array([2], np.int64)),
            )
            nodes.append(helper.make_node("Slice", [y, starts, ends, axes], [f"b{i}c{j}_cut"]))
            nodes.append(helper.make_node("Relu", [f"b{i}c{j}_cut"], [f"b{i}c{j}_r"]))
            h = f"b{i}c{j}_r"
        skip = conv(x, cin, width, 1, 1, f"b{i}skip") if cin != width else x
        nodes.append(helper.make_node("Add", [h, skip], [f"b{i}_sum"]))
        nodes.append(helper.make_node("Relu", [f"b{i}_sum"], [f"b{i}_out"]))
        x, cin = f"b{i}_out", width
    last = const("last", np.array(-1, np.int64))
    nodes.append(helper.make_node("Gather", [x, last], ["step"], axis=2))
    head_w = const("head_w", rng.standard_normal((width, 5)).astype(np.float32))
    nodes.append(helper.make_node("Gemm", ["step", head_w], ["out"]))
    graph = helper.make_graph(
        nodes,
        "tcn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, n_in, length])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 5])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("level", LEVELS)
def test_a_tcn_runs_alike_stepped_fused_and_plain_and_as_onnxruntime(level: int | None) -> None:
    ort = pytest.importorskip("onnxruntime")
    model = _tcn_model(12, 32, 96)
    onnx.checker.check_model(model)
    feeds = {"x": np.random.default_rng(3).standard_normal((2, 12, 96)).astype(np.float32)}
    with at_level("conv", level), at_level("channels", level):
        stepped = assert_modes_agree(model, feeds)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, feeds)
    close(stepped["out"], theirs, "against onnxruntime", rtol=1e-4)
