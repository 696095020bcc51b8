"""Channels-last conv chains (runtime.fusion_layout, kernels.nn_conv_nhwc) give the
stepped run's numbers.

* The kernels against the plain Conv kernel on every geometry they take: depthwise with
  strides, dilations, asymmetric pads; pointwise with strides; residual and Relu; both
  input layouts; float32 and float64.
* A MobileNetV3 block (pointwise -> HardSwish -> depthwise -> squeeze-excite ->
  pointwise -> residual Add) really runs channels-last and matches the stepped run,
  and a whole MobileNetV3-small-shaped network built by hand does too.
* Random conv chains (hypothesis): depthwise/grouped/strided/padded/dilated/pointwise
  and plain convs, BatchNormalization, HardSwish/HardSigmoid/Relu/Clip, Add/Mul with
  broadcasting constants and live values, SE blocks, values read by two consumers,
  graph outputs in the middle of a chain and readers that want NCHW (Transpose, Flatten,
  MaxPool, Concat), against the stepped run.
* The family models of benchmarks/family_models.py (torch exports; slow).
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
from threadpoolctl import threadpool_limits

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.fusion_layout import ChannelScale, ChannelsLastConcat
from onnxviz.runtime.kernels import nn_pool
from onnxviz.runtime.kernels.nn_conv import conv
from onnxviz.runtime.kernels.nn_conv_nhwc import (
    activate_in_place,
    conv_channels_last,
    is_channels_last,
    nhwc,
    planes_copy,
    prepare_channels_last,
)
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled

from .differential import assert_modes_agree, close

pytestmark = pytest.mark.numeric

F = TensorProto.FLOAT
RNG = np.random.default_rng(21)

# (input shape, weight shape, attributes) the channels-last kernels take.
KERNEL_CASES = [
    ((2, 8, 9, 11), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
    ((1, 16, 12, 12), (16, 1, 5, 5), {"group": 16, "pads": [2, 2, 2, 2]}),
    ((1, 16, 13, 14), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 24, 15, 15), (24, 1, 5, 5), {"group": 24, "pads": [2, 2, 2, 2], "strides": [2, 2]}),
    ((1, 8, 11, 13), (8, 1, 3, 3), {"group": 8, "pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    (
        (1, 8, 17, 19),
        (8, 1, 3, 3),
        {"group": 8, "pads": [0, 2, 1, 0], "dilations": [2, 3], "strides": [3, 2]},
    ),
    ((2, 8, 10, 10), (8, 1, 3, 2), {"group": 8, "pads": [1, 0, 0, 1], "strides": [1, 3]}),
    ((1, 8, 9, 9), (8, 1, 3, 3), {"group": 8, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((2, 16, 7, 9), (24, 16, 1, 1), {}),
    ((1, 16, 9, 9), (8, 16, 1, 1), {"strides": [2, 2]}),
    ((3, 32, 1, 1), (8, 32, 1, 1), {}),
    # kernel == stride, large (a ViT's patch embedding: _Patches), a cropped edge
    ((2, 3, 48, 50), (16, 3, 16, 16), {"strides": [16, 16]}),
    ((1, 4, 36, 37), (8, 4, 12, 12), {"strides": [12, 12]}),
    ((1, 3, 16, 16), (24, 3, 16, 16), {"strides": [16, 16]}),
    # grouped, more than one channel a group (ResNeXt's, RegNet's: _Grouped)
    ((2, 8, 7, 9), (8, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((1, 48, 14, 14), (48, 16, 3, 3), {"group": 3, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 12, 11, 10), (18, 4, 3, 2), {"group": 3, "pads": [0, 2, 1, 0], "dilations": [2, 1]}),
    ((1, 8, 9, 9), (8, 4, 3, 3), {"group": 2, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    # grouped 1x1 (ShuffleNet's: _GroupedPointwise), one image (an NCHW one read as the
    # transposed operand) and two
    ((1, 24, 9, 7), (36, 6, 1, 1), {"group": 4}),
    ((2, 12, 5, 6), (12, 4, 1, 1), {"group": 3}),
    ((1, 34, 4, 4), (34, 17, 1, 1), {"group": 2}),
]


def _channels_last_copy(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), KERNEL_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("extra", ["bias", "bias+residual+relu", "none"])
def test_kernels_match_the_plain_conv(x_shape, w_shape, attrs, dtype, layout, extra) -> None:
    x = RNG.standard_normal(x_shape).astype(dtype)
    w = RNG.standard_normal(w_shape).astype(dtype)
    w.flags.writeable = False  # a constant: its tiled/transposed forms are cached
    b = RNG.standard_normal(w_shape[0]).astype(dtype) if extra != "none" else None
    want = conv(x, w, b, **attrs)
    addend = None
    if "residual" in extra:
        addend = RNG.standard_normal(want.shape).astype(dtype)
        want = np.maximum(want + addend, 0)
    src = _channels_last_copy(x) if layout == "nhwc" else x
    got = conv_channels_last(src, w, b, attrs, addend, relu="relu" in extra)
    assert got is not None
    assert is_channels_last(got) or got.shape[2] * got.shape[3] == 1
    close(got, want, "channels-last conv", rtol=1e-5 if dtype == np.float32 else 1e-12)
    np.testing.assert_array_equal(src, x)  # the input is left alone


@pytest.mark.parametrize(
    ("w_shape", "attrs"),
    [
        ((8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # a plain conv
        ((16, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),  # depthwise multiplier 2
        ((8, 8, 1, 1), {"pads": [1, 1, 1, 1]}),  # a padded 1x1
    ],
)
def test_convs_the_kernels_do_not_take_go_to_the_plain_kernel(w_shape, attrs, monkeypatch) -> None:
    # Plain convs (a padded 1x1 among them) are the compiled direct conv's
    # (test_native_conv.py); with it routed off they go to the plain kernel too.
    monkeypatch.setenv("ONNXVIZ_DIRECT_CONV", "off")
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    w = RNG.standard_normal(w_shape).astype(np.float32)
    assert prepare_channels_last(x, w, None, attrs) is None
    assert prepare_channels_last(x.astype(np.float64), w.astype(np.float64), None, attrs) is None


# -- models ----------------------------------------------------------------------------


class _Net:
    """A graph under construction, with each value's (N, C, H, W) shape."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.outputs: list[str] = []
        self.count = 0
        self.opset = 17

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def const(self, value: np.ndarray) -> str:
        n = self.name("k")
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), n))
        return n

    def add(self, op: str, ins: list[str], shape: tuple[int, ...], **attrs: Any) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        self.shapes[out] = shape
        return out

    def conv(
        self,
        x: str,
        m: int,
        k: int = 1,
        stride: int = 1,
        group: int = 1,
        dilation: int = 1,
        pads: list[int] | None = None,
        bias: bool = True,
    ) -> str:
        n, c, h, w = self.shapes[x]
        pads = [dilation * (k - 1) // 2] * 4 if pads is None else pads
        oh = (h + pads[0] + pads[2] - dilation * (k - 1) - 1) // stride + 1
        ow = (w + pads[1] + pads[3] - dilation * (k - 1) - 1) // stride + 1
        wt = self.rng.standard_normal((m, c // group, k, k)) / math.sqrt(c // group * k * k)
        ins = [x, self.const(wt)]
        if bias:
            ins.append(self.const(self.rng.standard_normal(m) * 0.1))
        return self.add(
            "Conv",
            ins,
            (n, m, oh, ow),
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=pads,
            group=group,
            dilations=[dilation, dilation],
        )

    def squeeze_excite(self, x: str, pool: str = "ReduceMean") -> str:
        n, c = self.shapes[x][:2]
        if pool == "ReduceMean":
            s = self.mean(x, [2, 3], keepdims=1)
        else:
            s = self.add("GlobalAveragePool", [x], (n, c, 1, 1))
        s = self.add("Relu", [self.conv(s, max(8, c // 4))], (n, max(8, c // 4), 1, 1))
        s = self.add("HardSigmoid", [self.conv(s, c)], (n, c, 1, 1), alpha=1 / 6, beta=0.5)
        return self.add("Mul", [x, s], self.shapes[x])

    def mean(self, x: str, axes: list[int], keepdims: int) -> str:
        """ReduceMean (axes an attribute before opset 18, an input from 18 on)."""
        shape = self.shapes[x]
        kept = [a % len(shape) for a in axes]
        out = tuple(1 if i in kept else d for i, d in enumerate(shape) if keepdims or i not in kept)
        if self.opset >= 18:
            k = self.name("axes")
            self.inits.append(numpy_helper.from_array(np.array(axes, dtype=np.int64), k))
            return self.add("ReduceMean", [x, k], out, keepdims=keepdims)
        return self.add("ReduceMean", [x], out, axes=axes, keepdims=keepdims)

    def model(self, x_shape: tuple[int, ...], last: str) -> onnx.ModelProto:
        outputs = list(dict.fromkeys([*self.outputs, last]))
        graph = helper.make_graph(
            self.nodes,
            "net",
            [helper.make_tensor_value_info("x", F, list(x_shape))],
            [helper.make_tensor_value_info(o, F, None) for o in outputs],
            initializer=self.inits,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])


def as_dtype(model: onnx.ModelProto, feeds: dict[str, Any], dtype: Any) -> dict[str, Any]:
    """``model``'s initializers, inputs and outputs made ``dtype`` in place (a float32
    net's float64 twin); returns the feeds in that dtype."""
    if dtype == np.float32:
        return feeds
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init).astype(dtype)
        init.CopyFrom(numpy_helper.from_array(array, init.name))
    for v in (*model.graph.input, *model.graph.output):
        v.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return {k: v.astype(dtype) for k, v in feeds.items()}


def _inverted_residual(
    net: _Net, x: str, k: int, exp: int, out: int, se: bool, hs: bool, stride: int
) -> str:
    act = "HardSwish" if hs else "Relu"
    y = net.add(act, [net.conv(x, exp)], net.shapes[x][:1] + (exp,) + net.shapes[x][2:])
    y = net.conv(y, exp, k=k, stride=stride, group=exp)
    y = net.add(act, [y], net.shapes[y])
    if se:
        y = net.squeeze_excite(y)
    y = net.conv(y, out)
    if stride == 1 and net.shapes[x] == net.shapes[y]:
        y = net.add("Add", [x, y], net.shapes[y])
    return y


def _mobilenet(size: int = 64) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """MobileNetV3-small's layout (its block table), by hand at ``size`` pixels."""
    net = _Net(np.random.default_rng(5))
    net.shapes["x"] = (1, 3, size, size)
    y = net.add("HardSwish", [net.conv("x", 16, k=3, stride=2)], (1, 16, size // 2, size // 2))
    for k, exp, out, se, hs, s in [
        (3, 16, 16, True, False, 2),
        (3, 72, 24, False, False, 2),
        (3, 88, 24, False, False, 1),
        (5, 96, 40, True, True, 2),
        (5, 240, 40, True, True, 1),
        (5, 120, 48, True, True, 1),
        (5, 288, 96, True, True, 2),
        (5, 576, 96, True, True, 1),
    ]:
        y = _inverted_residual(net, y, k, exp, out, se, hs, s)
    y = net.add("HardSwish", [net.conv(y, 576)], net.shapes[y][:1] + (576,) + net.shapes[y][2:])
    y = net.add("GlobalAveragePool", [y], (1, 576, 1, 1))
    y = net.add("Flatten", [y], (1, 576))
    head = net.const(net.rng.standard_normal((576, 10)) / 24)
    y = net.add("Gemm", [y, head], (1, 10))
    x = np.random.default_rng(1).standard_normal((1, 3, size, size)).astype(np.float32)
    return net.model((1, 3, size, size), y), {"x": x}


def _kept_channels_last(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[str]:
    """Names of the values an unwatched run leaves channels-last (the fused convs'
    outputs whose layout choice keeps them so)."""
    sess = Session(model)
    sess.run(feeds)
    return [
        pn.output_names[0]
        for pn in run_nodes(sess.plan)
        if getattr(pn.fused, "layout", None) is not None and pn.fused.layout.emit
    ]


@pytest.mark.parametrize("opset", [17, 18])
def test_a_mobilenet_block_runs_channels_last_and_matches_the_stepped_run(opset: int) -> None:
    net = _Net(np.random.default_rng(2))
    net.opset = opset
    net.shapes["x"] = (1, 16, 14, 14)
    y = _inverted_residual(net, "x", 5, 48, 16, se=True, hs=True, stride=1)
    model = net.model((1, 16, 14, 14), y)
    feeds = {"x": RNG.standard_normal((1, 16, 14, 14)).astype(np.float32)}
    kept = _kept_channels_last(model, feeds)
    # The expanding pointwise conv (its reader is the depthwise conv) and the depthwise
    # conv (its readers: the SE block's mean and Mul, then the projecting pointwise
    # conv); not the SE block's own 1x1 convs (one pixel: no layout to keep) nor the
    # projection, whose output is the graph's (through the residual Add).
    assert len(kept) == 2, kept
    sess = Session(model)
    sess.run(feeds)
    # The SE block (mean, two 1x1 convs, Relu, HardSigmoid, Mul) is one node that reads
    # the depthwise conv's channels-last output as rows.
    fused = [type(pn.fused).__name__ for pn in run_nodes(sess.plan) if pn.kind == "fused"]
    assert fused.count("SEGate") == 1, fused
    assert not {"SpatialMean", "ChannelScale"} & set(fused)
    stepped = assert_modes_agree(model, feeds)
    got = Session(model).run(feeds)[y]
    assert got.flags.c_contiguous  # a graph output is NCHW as before
    close(got, stepped[y], "block output")


class _PlainKernel:
    """An executor stand-in: its call_kernel says the node's own kernel was asked."""

    def call_kernel(self, pn: Any, ins: list[Any]) -> list[Any]:
        return ["plain kernel"]


@pytest.mark.parametrize("level", [*native.levels(), None])
def test_the_se_gate_multiply_gives_numpys_product_in_either_order(level: int | None) -> None:
    """At each level the compiled scale (None: the kernels off, the node's own kernel)."""
    if level is not None:
        compiled("channels")
    scale = ChannelScale(None)  # type: ignore[arg-type]  # the node: only for fallbacks
    ex: Any = _PlainKernel()
    for n, c, h, w in [(1, 96, 28, 28), (2, 13, 5, 7), (1, 1, 3, 3), (3, 40, 1, 2)]:
        x = RNG.standard_normal((n, h, w, c)).astype(np.float32).transpose(0, 3, 1, 2)
        gate = RNG.standard_normal((n, c, 1, 1)).astype(np.float32)
        gate[0, 0] = np.nan
        with at_level("channels", level):
            for ins in ([x, gate], [gate, x]):
                got = scale(ex, ins)[0]
                if level is None:
                    assert got == "plain kernel"
                    continue
                np.testing.assert_array_equal(got, x * gate)  # NaN where numpy's is
                assert is_channels_last(got)
    x = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32).transpose(0, 3, 1, 2)
    gate = np.ones((1, 4, 1, 1), dtype=np.float32)
    # Not its case: float64, a gate per sample of another batch, an NCHW value.
    for ins in (
        [x.astype(np.float64), gate.astype(np.float64)],
        [x, np.ones((2, 4, 1, 1), dtype=np.float32)],
        [np.ascontiguousarray(x), gate],
    ):
        assert scale(ex, ins) == ["plain kernel"]


@pytest.mark.parametrize("level", [*native.levels(), None])
def test_layout_copies_give_numpys_copy_at_every_level(level: int | None) -> None:
    """planes_copy (a chain's NCHW exit) and nhwc (a conv's channels-last operand): the
    compiled transposing copies at each level (None: numpy's), the same floats as
    numpy's copy, NaN and signed zeros included, edges of every size."""
    if level is not None:
        compiled("channels")
    for n, c, h, w in [
        (1, 256, 56, 56),
        (2, 13, 25, 27),
        (1, 1, 3, 3),
        (3, 40, 1, 2),
        (1, 24, 19, 21),
    ]:
        nchw = RNG.standard_normal((n, c, h, w)).astype(np.float32)
        nchw.flat[:: max(1, nchw.size // 7)] = np.nan
        nchw[0, 0, 0, 0] = -0.0
        last = _channels_last_copy(nchw)
        with at_level("channels", level):
            planes = planes_copy(last)
            rows = nhwc(nchw)
        assert planes.flags.c_contiguous and planes.shape == (n, c, h, w)
        np.testing.assert_array_equal(planes, nchw)
        assert np.signbit(planes[0, 0, 0, 0])
        assert rows.flags.c_contiguous and rows.shape == (n, h, w, c)
        np.testing.assert_array_equal(rows, nchw.transpose(0, 2, 3, 1))
    # float64 and values of other layouts: numpy's copy, still the right values
    x64 = RNG.standard_normal((2, 5, 4, 3))
    np.testing.assert_array_equal(planes_copy(_channels_last_copy(x64)), x64)
    strided = RNG.standard_normal((1, 6, 8, 8)).astype(np.float32)[:, :, ::2, ::2]
    np.testing.assert_array_equal(nhwc(strided), strided.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("batch", [1, 2])
def test_a_wide_pointwise_exit_hands_out_planes_by_the_compiled_copy(
    monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """A channels-last chain (3x3 convs by the direct kernel) whose last conv is a 1x1
    of many channels read by the graph's output: that conv computes channels-last and
    its result goes back to NCHW planes through the compiled transposing copy (numpy's
    took 13x a plain copy's time: 3.3 ms for 256 channels at 56 px), with the stepped
    run's numbers."""
    chan = compiled("channels")
    net = _Net(np.random.default_rng(17))
    net.shapes["x"] = (batch, 16, 20, 20)
    y = net.add("Relu", [net.conv("x", 32, k=3)], (batch, 32, 20, 20))
    y = net.add("Relu", [net.conv(y, 32, k=3)], (batch, 32, 20, 20))
    y = net.add("Relu", [net.conv(y, 96)], (batch, 96, 20, 20))
    model = net.model((batch, 16, 20, 20), y)
    feeds = {"x": RNG.standard_normal((batch, 16, 20, 20)).astype(np.float32)}
    copies: list[tuple[int, ...]] = []
    unplace = chan.unplace

    def spy(x: Any, out: Any, sizes: tuple[int, ...]) -> None:
        copies.append(sizes)
        unplace(x, out, sizes)

    monkeypatch.setattr(chan, "unplace", spy)
    sess = Session(model)
    got = sess.run(feeds)[y]
    last = run_nodes(sess.plan)[-1]
    assert got.flags.c_contiguous
    if native.level() is not None:
        assert not last.fused.layout.emit  # the exit
        assert copies == [(batch, 400, 96)]
    close(got, assert_modes_agree(model, feeds)[y], "exit")


def _last(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    n, c, h, w = shape
    return RNG.standard_normal((n, h, w, c)).astype(dtype).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("level", [*native.levels(), None])
def test_a_channel_concat_of_channels_last_values_stays_so_with_numpys_values(
    level: int | None,
) -> None:
    """At each level the compiled copy (_channels.place; None: numpy's concatenate), of
    channels-last, NCHW and other layouts, float32 and float64, widths around its
    8-float and 16-row blocks and NCHW planes in transposed blocks of 16 and of 8
    channels (from AVX2 up, AVX-512 included)."""
    if level is not None:
        compiled("channels")
    concat = ChannelsLastConcat(None)  # type: ignore[arg-type]  # the node: only for fallbacks
    ex: Any = _PlainKernel()
    a, b = _last((2, 5, 4, 3)), _last((2, 7, 4, 3))
    nchw = np.ascontiguousarray(_last((2, 2, 4, 3)))
    wide, wide_nchw = _last((1, 19, 9, 5)), np.ascontiguousarray(_last((1, 16, 9, 5)))
    # NCHW planes of a multiple of 8 channels but not of 16 (8-channel transposed blocks)
    eight_nchw = np.ascontiguousarray(_last((1, 24, 9, 5)))
    odd = RNG.standard_normal((1, 9, 18, 5)).astype(np.float32)[:, :, ::2]  # neither layout
    doubles = _last((2, 5, 4, 3), np.float64), _last((2, 3, 4, 3), np.float64)
    with at_level("channels", level):
        for ins in (
            [a, b], [a, nchw, b], [nchw, a], [a], [wide, wide_nchw, odd], [odd, wide], [*doubles],
            [wide, eight_nchw, wide_nchw],
        ):  # fmt: skip
            got = concat(ex, ins)[0]
            assert is_channels_last(got)
            assert got.dtype == ins[0].dtype
            np.testing.assert_array_equal(got, np.concatenate(ins, axis=1))
    for ins in (
        [nchw, nchw],  # no channels-last input: numpy's own layout
        [a, _last((2, 7, 4, 3), np.float64)],
        [a, _last((2, 7, 4, 4))],
        [a, _last((1, 7, 4, 3))],
        [a.reshape(2, 5, 12)],
    ):
        assert concat(ex, ins) == ["plain kernel"]


def test_the_compiled_concat_copy_checks_its_sizes() -> None:
    module = compiled("channels")
    x = np.zeros((1, 6, 4), np.float32)
    out = np.zeros((1, 6, 8), np.float32)
    for dims in [(1, 6, 4, 8, 5), (1, 6, 9, 8, 0), (1, 7, 4, 8, 0), (-1, 6, 4, 8, 0)]:
        with pytest.raises(ValueError):
            module.place(x, out, dims, False)
    with pytest.raises((ValueError, TypeError)):
        module.place(x, np.zeros((1, 6, 8)), (1, 6, 4, 8, 0), False)  # float64 out


def test_an_inception_block_stays_channels_last_through_its_pools_and_concat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = _Net(np.random.default_rng(11))
    net.shapes["x"] = (1, 16, 14, 14)
    x = net.add("Relu", [net.conv("x", 24, k=3)], (1, 24, 14, 14))
    a = net.add("Relu", [net.conv(x, 16)], (1, 16, 14, 14))
    b = net.add("Relu", [net.conv(net.conv(x, 8), 16, k=3)], (1, 16, 14, 14))
    p = net.add("MaxPool", [x], (1, 24, 14, 14), kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    c = net.add("Relu", [net.conv(p, 8)], (1, 8, 14, 14))
    y = net.add("Concat", [a, b, c], (1, 40, 14, 14), axis=1)
    y = net.add(
        "AveragePool", [y], (1, 40, 7, 7), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
    )
    y = net.conv(y, 32, k=3)
    model = net.model((1, 16, 14, 14), y)
    feeds = {"x": RNG.standard_normal((1, 16, 14, 14)).astype(np.float32)}
    layouts: list[bool] = []
    sess = Session(model)
    for pn in run_nodes(sess.plan):  # each pool's call sees what layout its input has
        if pn.op_type in ("MaxPool", "AveragePool") and pn.call is not None:
            held = pn.call

            def watch(v: np.ndarray, held: Any = held) -> Any:
                layouts.append(nn_pool.is_channels_last(v))
                return held(v)

            monkeypatch.setattr(pn, "call", watch)
    sess.run(feeds)
    fused = [type(pn.fused).__name__ for pn in run_nodes(sess.plan) if pn.kind == "fused"]
    if native.level() is not None:  # the compiled direct conv makes the layout pay
        assert "ChannelsLastConcat" in fused, fused
        assert layouts == [True, True], layouts  # both pools read channels-last values
    assert_modes_agree(model, feeds)


def test_pointwise_convs_after_a_channels_last_value_keep_the_layout() -> None:
    """A YOLO C3 block after a 3x3 conv: its 1x1 convs (one into the bottleneck, one
    straight into the Concat, one after it) read channels-last values, and their readers
    take the layout, so they keep it (no transposing copy, their held calls) even though
    nothing after them is a depthwise conv; the head's 1x1 conv before a Reshape writes
    NCHW.  The stepped run's numbers either way."""
    net = _Net(np.random.default_rng(12))
    net.shapes["x"] = (1, 8, 12, 12)

    def silu(v: str) -> str:
        return net.add("Mul", [v, net.add("Sigmoid", [v], net.shapes[v])], net.shapes[v])

    x = silu(net.conv("x", 32, k=3, stride=2))  # a direct conv: channels-last pays there
    c1 = silu(net.conv(x, 16))
    m = net.add("Add", [c1, silu(net.conv(silu(net.conv(c1, 16)), 16, k=3))], (1, 16, 6, 6))
    c2 = silu(net.conv(x, 16))
    y = net.add("Concat", [m, c2], (1, 32, 6, 6), axis=1)
    c3 = silu(net.conv(y, 32))
    head = net.conv(c3, 21)
    out = net.add("Reshape", [head, net.const(np.array([1, 21, 36], np.int64))], (1, 21, 36))
    model = net.model((1, 8, 12, 12), out)
    feeds = {"x": RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)}
    sess = Session(model)
    # One BLAS thread, as the benchmarks run: with more, the 32 -> 32 conv after the
    # Concat (36 x 32 x 32, past the small products every thread count sends to the
    # compiled GEMM below AVX-512) goes to OpenBLAS, which splits it, and has no held call.
    with threadpool_limits(limits=1):
        sess.run(feeds)
        sess.run(feeds)
    convs = [pn.fused for pn in run_nodes(sess.plan) if type(pn.fused).__name__ == "ConvChain"]
    emits = [chain.layout.emit for chain in convs]
    if native.level() is not None:  # the compiled direct conv makes the layout pay
        assert emits == [True] * 6 + [False], emits  # the head writes the Reshape's NCHW
        assert all(chain.quick is not None for chain in convs[:-1])
    assert_modes_agree(model, feeds)


@pytest.mark.parametrize(
    ("pool", "attrs", "out_hw"),
    [
        ("AveragePool", {"kernel_shape": [7, 7]}, (1, 1)),  # ResNet-50's head
        # (ceil_mode: a MaxPool that does not join the conv chain, test_held_conv_pool)
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (3, 3)),
    ],
)
@pytest.mark.parametrize("pool_is_output", [False, True])
def test_a_conv_before_a_pool_whose_readers_want_nchw_stays_channels_last(
    monkeypatch: pytest.MonkeyPatch,
    pool: str,
    attrs: dict[str, Any],
    out_hw: tuple[int, int],
    pool_is_output: bool,
) -> None:
    """A conv chain's last 1x1 conv before a pool and a Flatten (or a graph output):
    the pool reads the conv's channels-last output in place and the Flatten its result
    (a 1x1 one is NCHW as it is, a larger one pays a copy), not the conv writing NCHW
    planes for an NCHW pool; a pool output that is a graph output keeps the conv's
    output NCHW.  The stepped run's numbers (within the differential harness's bound)
    either way."""
    net = _Net(np.random.default_rng(13))
    net.shapes["x"] = (1, 16, 7, 7)
    y = net.add("Relu", [net.conv("x", 32, k=3)], (1, 32, 7, 7))
    y = net.add("Relu", [net.conv(y, 48)], (1, 48, 7, 7))
    p = net.add(pool, [y], (1, 48, *out_hw), **attrs)
    z = net.add("Flatten", [p], (1, 48 * out_hw[0] * out_hw[1]))
    model = net.model((1, 16, 7, 7), z)
    if pool_is_output:
        model.graph.output.append(helper.make_tensor_value_info(p, F, (1, 48, *out_hw)))
    feeds = {"x": RNG.standard_normal((1, 16, 7, 7)).astype(np.float32)}
    layouts: list[bool] = []
    sess = Session(model)
    nodes = run_nodes(sess.plan)
    assert [pn.op_type for pn in nodes] == ["Conv", "Conv", pool, "Flatten"]
    if nodes[2].call is not None and pool == "AveragePool":  # MaxPool's runs with a context
        held = nodes[2].call

        def watch(v: np.ndarray) -> Any:
            layouts.append(nn_pool.is_channels_last(v))
            return held(v)

        monkeypatch.setattr(nodes[2], "call", watch)
    got = sess.run(feeds)
    if native.level() is not None:  # the compiled direct conv makes the layout pay
        assert nodes[1].fused.layout.emit == (not pool_is_output)
        assert layouts == ([not pool_is_output] if pool == "AveragePool" else [])
    if pool_is_output:
        assert got[p].flags.c_contiguous
    assert_modes_agree(model, feeds)


@pytest.mark.parametrize(
    ("alpha", "gate_first", "dtype"),
    [(1 / 6, False, np.float32), (1 / 6, True, np.float32), (0.2, False, np.float32),
     (1 / 6, False, np.float64)],
)  # fmt: skip
def test_a_written_out_hardswish_ends_the_conv_chain_with_the_stepped_bits(
    alpha: float, gate_first: bool, dtype: Any
) -> None:
    """Opset-13 exporters write HardSwish as g = HardSigmoid(y), Mul(y, g): the conv
    chain takes both nodes as its activation (in the depthwise kernel's epilogue when it
    is HardSwish's gate in float32), with the nodes' numbers bit for bit."""
    net = _Net(np.random.default_rng(12))
    net.shapes["x"] = (2, 24, 9, 11)
    y = net.conv("x", 24, k=3, group=24)
    g = net.add("HardSigmoid", [y], net.shapes[y], alpha=alpha, beta=0.5)
    z = net.add("Mul", [g, y] if gate_first else [y, g], net.shapes[y])
    model = net.model((2, 24, 9, 11), z)
    feeds = {"x": RNG.standard_normal((2, 24, 9, 11)).astype(np.float32)}
    feeds = as_dtype(model, feeds, dtype)
    sess = Session(model)
    got = sess.run(feeds)[z]
    assert [pn.op_type for pn in run_nodes(sess.plan)] == ["Conv"]
    stepped = assert_modes_agree(model, feeds)
    np.testing.assert_array_equal(got, stepped[z])
    # The gate read by another node too: the chain stops at the conv.
    model.graph.output.append(helper.make_tensor_value_info(g, TensorProto.UNDEFINED, None))
    sess = Session(model)
    sess.run(feeds)
    assert [pn.op_type for pn in run_nodes(sess.plan)] == ["Conv", "HardSigmoid", "Mul"]
    assert_modes_agree(model, feeds)


def test_mobilenetv3_small_by_hand_matches_the_stepped_run() -> None:
    model, feeds = _mobilenet()
    kept = _kept_channels_last(model, feeds)
    # Every depthwise conv's output (through its activation) stays channels-last.
    producer = {o: n for n in model.graph.node for o in n.output}
    depthwise = 0
    for name in kept:
        node = producer[name]
        while node.op_type != "Conv":
            node = producer[node.input[0]]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        depthwise += attrs["group"] > 1
    assert depthwise == 8, kept
    assert len(kept) > 16
    assert_modes_agree(model, feeds)


def test_unpadded_1x1_depthwise_convs_each_get_their_own_output() -> None:
    """Found by the random chains below: the plain kernel's 1x1 depthwise conv without
    padding handed out its reused scratch buffer as the output (the crop to the output
    was the whole buffer), so a later such conv overwrote an earlier one's value; the
    stepped run gave conv4 the numbers of conv6."""
    net = _Net(np.random.default_rng(3))
    net.shapes["x"] = (1, 4, 3, 3)
    a = net.conv("x", 4, k=1, group=4, bias=False)
    b = net.conv(a, 4, k=1, group=4, bias=False)
    c = net.conv("x", 4, k=1, group=4, bias=False)
    net.outputs.append(b)
    model = net.model((1, 4, 3, 3), c)
    x = RNG.standard_normal((1, 4, 3, 3)).astype(np.float32)
    weights = {
        t.name: numpy_helper.to_array(t).reshape(1, 4, 1, 1) for t in model.graph.initializer
    }
    k1, k2, k3 = (weights[n.input[1]] for n in model.graph.node)
    stepped = assert_modes_agree(model, {"x": x})
    close(stepped[b], x * k1 * k2, "conv of conv")
    close(stepped[c], x * k3, "conv of x")


def test_a_convnext_block_stays_channels_last_through_its_permutes() -> None:
    """Depthwise 7x7 conv -> Transpose(0, 2, 3, 1) -> LayerNorm -> ... -> Transpose back ->
    residual Add: the conv writes channels-last (the permute is then its NHWC buffer,
    no copy either side), the model's numbers the stepped run's; a ReduceMean over
    (H, W) without keepdims (the head's x.mean((2, 3))) runs as SpatialMean."""
    net = _Net(np.random.default_rng(5))
    c, hw = 16, 12
    net.shapes["x"] = (1, c, hw, hw)
    stem = net.conv("x", c, k=3)
    dw = net.conv(stem, c, k=7, group=c, pads=[3, 3, 3, 3])
    nhwc = net.add("Transpose", [dw], (1, hw, hw, c), perm=[0, 2, 3, 1])
    gamma, beta = net.const(net.rng.uniform(0.5, 1.5, c)), net.const(net.rng.uniform(-1, 1, c))
    normed = net.add("LayerNormalization", [nhwc, gamma, beta], (1, hw, hw, c), epsilon=1e-6)
    scaled = net.add("Mul", [normed, net.const(net.rng.uniform(0.5, 1.5, c))], (1, hw, hw, c))
    back = net.add("Transpose", [scaled], (1, c, hw, hw), perm=[0, 3, 1, 2])
    y = net.add("Add", [stem, back], (1, c, hw, hw))
    head = net.mean(y, [2, 3], keepdims=0)
    model = net.model((1, c, hw, hw), head)
    feeds = {"x": RNG.standard_normal((1, c, hw, hw)).astype(np.float32)}
    assert dw in _kept_channels_last(model, feeds)
    sess = Session(model)
    sess.run(feeds)
    fused = [type(pn.fused).__name__ for pn in run_nodes(sess.plan) if pn.kind == "fused"]
    if native.level() is not None:  # (kernels off: the stem's plain conv writes NCHW)
        assert "SpatialMean" in fused, fused
    assert sess.run(feeds)[head].shape == (1, c)
    assert_modes_agree(model, feeds)


# -- random conv chains ------------------------------------------------------------------


def _draw_conv(net: _Net, x: str, draw) -> str:
    c = net.shapes[x][1]
    kinds = ["depthwise"] * 3 + ["pointwise"] * 2 + ["grouped", "plain"]
    kind = draw(st.sampled_from(kinds))
    k = draw(st.sampled_from([1, 3, 5])) if kind != "pointwise" else 1
    stride = draw(st.sampled_from([1, 1, 2, 3]))
    dilation = draw(st.sampled_from([1, 1, 2])) if k > 1 else 1
    pads = None
    if draw(st.integers(0, 3)) == 0 and kind != "pointwise":
        pads = [draw(st.integers(0, 2)) for _ in range(4)]
    h, w = net.shapes[x][2:]
    if (h + 4 - dilation * (k - 1) - 1) // stride + 1 < 1:
        return x
    if (
        pads is not None
        and min(
            h + pads[0] + pads[2] - dilation * (k - 1), w + pads[1] + pads[3] - dilation * (k - 1)
        )
        < 1
    ):
        return x
    if pads is None and min(h, w) + 2 * (dilation * (k - 1) // 2) - dilation * (k - 1) < 1:
        return x
    bias = draw(st.booleans())
    if kind == "depthwise":
        return net.conv(x, c, k, stride, c, dilation, pads, bias)
    if kind == "grouped" and c % 2 == 0:
        group = draw(st.sampled_from([2, 4])) if c % 4 == 0 else 2
        return net.conv(x, c, k, stride, group, dilation, pads, bias)
    m = draw(st.sampled_from([8, 16, 24, c]))
    return net.conv(x, m, k, stride, 1, dilation, pads, bias)


def _draw_activation(net: _Net, x: str, draw) -> str:
    op = draw(st.sampled_from(["HardSwish", "HardSigmoid", "Relu", "Clip", "SiLU"]))
    if op == "SiLU":  # written out, as torch exports it: x * Sigmoid(x), either order
        g = net.add("Sigmoid", [x], net.shapes[x])
        return net.add("Mul", [x, g] if draw(st.booleans()) else [g, x], net.shapes[x])
    if op == "Clip":
        return net.add(op, [x, net.const(np.array(0.0)), net.const(np.array(6.0))], net.shapes[x])
    return net.add(op, [x], net.shapes[x])


def _draw_batch_norm(net: _Net, x: str, draw) -> str:
    c = net.shapes[x][1]
    ks = [
        net.const(net.rng.uniform(0.5, 1.5, c)),
        net.const(net.rng.uniform(-0.5, 0.5, c)),
        net.const(net.rng.uniform(-0.5, 0.5, c)),
        net.const(net.rng.uniform(0.5, 1.5, c)),
    ]
    return net.add("BatchNormalization", [x, *ks], net.shapes[x], epsilon=1e-5)


def _draw_broadcast(net: _Net, x: str, draw) -> str:
    """Add/Mul with a constant that broadcasts (per channel, scalar, along W, whole)."""
    n, c, h, w = net.shapes[x]
    shape = draw(st.sampled_from([(c, 1, 1), (1, c, 1, 1), (), (w,), (1, 1, h, 1), (c, h, w)]))
    op = draw(st.sampled_from(["Add", "Mul"]))
    k = net.const(net.rng.uniform(0.5, 1.5, shape))
    ins = [x, k] if draw(st.booleans()) else [k, x]
    return net.add(op, ins, net.shapes[x])


def _draw_join(net: _Net, x: str, draw) -> str:
    """Add/Mul/Sub of two live values of one shape (a residual; maybe x with itself)."""
    same = [v for v, s in net.shapes.items() if s == net.shapes[x]]
    other = draw(st.sampled_from(same))
    op = draw(st.sampled_from(["Add", "Add", "Mul", "Sub"]))
    ins = [x, other] if draw(st.booleans()) else [other, x]
    return net.add(op, ins, net.shapes[x])


def _draw_se(net: _Net, x: str, draw) -> str:
    """A depthwise conv, an SE block on it and a pointwise conv after (MobileNetV3's
    order, so the chain stays channels-last through the SE block)."""
    c = net.shapes[x][1]
    y = net.conv(x, c, k=3, group=c)
    y = net.squeeze_excite(y, draw(st.sampled_from(["ReduceMean", "GlobalAveragePool"])))
    return net.conv(y, draw(st.sampled_from([8, c])))


def _draw_mean(net: _Net, x: str, draw) -> str:
    """A mean over the spatial axes (what SE blocks read) or over other axes."""
    axes = draw(st.sampled_from([[2, 3], [-1, -2], [3, 2], [1], [2], [1, 2, 3]]))
    return net.mean(x, axes, keepdims=draw(st.sampled_from([1, 1, 0])))


def _draw_nchw_reader(net: _Net, x: str, draw) -> str:
    """A reader that wants the values as NCHW (not a chain member)."""
    n, c, h, w = net.shapes[x]
    op = draw(st.sampled_from(["Transpose", "MaxPool", "Concat", "Flatten", "NHWC"]))
    if op == "Transpose":
        return net.add(op, [x], (n, c, w, h), perm=[0, 1, 3, 2])
    if op == "NHWC":  # a ConvNeXt block's permute, then its LayerNorm over channels
        nhwc = net.add("Transpose", [x], (n, h, w, c), perm=[0, 2, 3, 1])
        gamma, beta = net.const(net.rng.uniform(0.5, 1.5, c)), net.const(net.rng.uniform(-1, 1, c))
        net.outputs.append(net.add("LayerNormalization", [nhwc, gamma, beta], (n, h, w, c)))
        return x
    if op == "MaxPool":
        return net.add(op, [x], (n, c, h, w), kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    if op == "Concat":
        return net.add(op, [x, x], (n, 2 * c, h, w), axis=1)
    flat = net.add("Flatten", [x], (n, c * h * w))
    net.outputs.append(flat)
    return x


_STEPS = [
    _draw_conv,
    _draw_conv,
    _draw_conv,
    _draw_conv,
    _draw_activation,
    _draw_activation,
    _draw_batch_norm,
    _draw_broadcast,
    _draw_join,
    _draw_se,
    _draw_mean,
    _draw_nchw_reader,
]


@st.composite
def conv_chains(draw) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    net = _Net(np.random.default_rng(draw(st.integers(0, 2**16))))
    net.opset = draw(st.sampled_from([17, 18]))
    c = draw(st.sampled_from([4, 8, 16, 24]))
    h = draw(st.integers(3, 17))
    w = draw(st.integers(3, 17))
    x_shape = (draw(st.sampled_from([1, 1, 2])), c, h, w)
    net.shapes["x"] = x_shape
    first = _draw_conv(net, "x", draw)
    frontier = list(dict.fromkeys(["x", first]))
    for _ in range(draw(st.integers(2, 10))):
        x = draw(st.sampled_from(frontier))  # fan-out: a value read by two consumers
        if len(net.shapes[x]) != 4:
            continue
        y = draw(st.sampled_from(_STEPS))(net, x, draw)
        if y != x:
            frontier.append(y)
            if draw(st.integers(0, 4)) == 0:
                net.outputs.append(y)  # a graph output in the middle of a chain
    model = net.model(x_shape, frontier[-1])
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    return model, {"x": x}


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(conv_chains())
def test_random_conv_chains_give_the_stepped_numbers(case) -> None:
    model, feeds = case
    assert_modes_agree(model, feeds)
    # Graph outputs keep the memory layout they had before (a Transpose gives a view).
    plain = Session(model, fuse_ops=False).run(feeds)
    for name, value in Session(model).run(feeds).items():
        assert value.flags.c_contiguous == plain[name].flags.c_contiguous, name


# -- the real family models ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "torchscript_resnet_basic_112",
        "torchscript_resnet_bottlenecks",
        "torchscript_unet",
        "torchscript_mobilenet_small",
    ],
)
def test_committed_torch_exports_give_the_stepped_numbers(name: str) -> None:
    """Real torch exports (committed: CI has no torch) run fused, with the layout pass,
    as they run stepped: ResNet and UNet blocks, and MobileNetV3-style depthwise chains
    (torchscript_mobilenet_small; also the hand-built MobileNetV3 above)."""
    from tests.data.exports import load

    model, feeds, _ = load(name)
    assert_modes_agree(model, feeds)


@pytest.mark.parametrize("activation", ["HardSwish", "HardSigmoid", "Relu", "SiLU"])
@pytest.mark.parametrize("conv_kind", ["depthwise", "pointwise", "plain"])
def test_a_conv_and_its_activation_run_as_one_node(activation: str, conv_kind: str) -> None:
    """Conv -> activation is one fused node (the activation in place on the conv's
    output), channels-last or not, with the stepped run's numbers."""
    net = _Net(np.random.default_rng(8))
    net.shapes["x"] = (1, 16, 9, 9)
    k, group = {"depthwise": (3, 16), "pointwise": (1, 1), "plain": (3, 1)}[conv_kind]
    y = net.conv("x", 16, k=k, group=group)
    attrs = {"alpha": 0.3, "beta": 0.4} if activation == "HardSigmoid" else {}
    if activation == "SiLU":  # y * Sigmoid(y), two nodes
        y = net.add("Mul", [y, net.add("Sigmoid", [y], net.shapes[y])], net.shapes[y])
    else:
        y = net.add(activation, [y], net.shapes[y], **attrs)
    last = net.conv(y, 8, k=3, group=1)  # a reader, so a channels-last output may stay
    model = net.model((1, 16, 9, 9), last)
    feeds = {"x": 3 * RNG.standard_normal((1, 16, 9, 9)).astype(np.float32)}
    sess = Session(model)
    sess.run(feeds)
    assert [pn.kind for pn in run_nodes(sess.plan)] == ["fused", "fused"]
    stepped = assert_modes_agree(model, feeds)
    # Both sides of the activation's kinks are reached (else the test shows little);
    # SiLU's negative dip and its linear side.
    if activation == "SiLU":
        assert (stepped[y] < 0).any() and (stepped[y] > 1).any()
    else:
        assert (stepped[y] == 0).any() and (stepped[y] > 0).any()


def test_one_session_runs_other_image_sizes_and_batches() -> None:
    """The prepared channels-last kernels belong to an input shape: a session fed
    another image size or batch prepares again instead of reusing the geometry."""
    net = _Net(np.random.default_rng(9))
    net.shapes["x"] = (1, 8, 12, 12)
    y = _inverted_residual(net, "x", 3, 24, 8, se=True, hs=True, stride=2)
    model = net.model((1, 8, 12, 12), y)
    # A dynamic input: the same model takes every size below.
    model.graph.input[0].type.tensor_type.shape.Clear()
    sess = Session(model)
    for shape in [(1, 8, 12, 12), (2, 8, 9, 15), (1, 8, 12, 12), (3, 8, 5, 4)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        stepped = assert_modes_agree(model, {"x": x})
        close(sess.run({"x": x})[y], stepped[y], f"output at {shape}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 8, 5, 5), (2, 16, 32, 33), (1, 1024, 1, 1)])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_fused_relu_is_bit_for_bit_the_kernels(dtype, shape, layout) -> None:
    """The fused conv's Relu (a row of zeros instead of numpy's slower scalar loop) gives
    exactly np.maximum(x, 0): NaN kept, -0 and -inf to +0."""
    x = RNG.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    flat[::7], flat[::11], flat[::13], flat[::17] = np.nan, -0.0, -np.inf, np.inf
    if layout == "nhwc":
        x = _channels_last_copy(x)
    want = np.maximum(x, 0)
    activate_in_place(x, "Relu", {})
    bits = np.uint32 if dtype == np.float32 else np.uint64
    np.testing.assert_array_equal(np.ascontiguousarray(x).view(bits), want.view(bits))


def test_a_patch_embedding_runs_as_one_gemm_over_its_patches() -> None:
    """A conv whose large kernel equals its stride (a ViT's patchify) is cut into its
    patches and multiplied as one GEMM (_Patches); smaller ones (a 2x2/2 downsampling)
    keep the direct kernel, which measured faster there."""
    from onnxviz.runtime.kernels import nn_conv_nhwc

    x = RNG.standard_normal((1, 3, 64, 64)).astype(np.float32)
    for k, patches in ((16, True), (2, False), (4, False)):
        w = RNG.standard_normal((8, 3, k, k)).astype(np.float32)
        w.flags.writeable = False
        prepared = nn_conv_nhwc.prepare_channels_last(x, w, None, {"strides": [k, k]})
        assert isinstance(prepared, nn_conv_nhwc._Patches) == patches, k


@pytest.mark.parametrize(
    ("x_shape", "w_shape"),
    [
        ((2, 3, 48, 50), (16, 3, 16, 16)),
        ((1, 4, 37, 36), (8, 4, 12, 12)),
        ((1, 3, 16, 16), (5, 3, 16, 16)),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_patch_convs_are_the_float64_definition(x_shape, w_shape, dtype) -> None:
    """The plain Conv kernel's patch path (nn_conv._patch_conv) and the channels-last one
    (_Patches) against the conv's definition in float64, computed here patch by patch:
    output pixel (i, j) is the weight's dot product with the (i, j)-th k x k block (the
    edge rows and columns that fill no whole block are left out)."""
    x = RNG.standard_normal(x_shape).astype(dtype)
    w = RNG.standard_normal(w_shape).astype(dtype)
    w.flags.writeable = False
    b = RNG.standard_normal(w_shape[0]).astype(dtype)
    k = w_shape[2]
    n, c, h, wd = x_shape
    oh, ow = h // k, wd // k
    want = np.empty((n, w_shape[0], oh, ow))
    w64 = w.astype(np.float64)
    for i in range(oh):
        for j in range(ow):
            block = x[:, :, i * k : (i + 1) * k, j * k : (j + 1) * k].astype(np.float64)
            want[:, :, i, j] = np.einsum("nchw,mchw->nm", block, w64) + b
    attrs = {"strides": [k, k]}
    tol = 1e-5 if dtype == np.float32 else 1e-12
    close(conv(x, w, b, **attrs), want.astype(dtype), "plain kernel", rtol=tol)
    # With one BLAS thread a float32 product of 8+ patches runs the compiled GEMM by the
    # weight packed once (nn_conv._packed_patches).
    with threadpool_limits(1):
        close(conv(x, w, b, **attrs), want.astype(dtype), "plain kernel, packed", rtol=tol)
    got = conv_channels_last(_channels_last_copy(x), w, b, attrs, None, relu=False)
    assert got is not None
    close(got, want.astype(dtype), "channels-last", rtol=tol)


@pytest.mark.parametrize("strides", [1, 2])
def test_a_grouped_conv_block_runs_channels_last_and_matches_the_stepped_run(
    strides: int,
) -> None:
    """A ResNeXt/RegNet block (1x1, grouped 3x3 of 4 channels a group, 1x1): the grouped
    conv keeps the layout between its neighbours (nn_conv_nhwc._Grouped), within float32
    rounding of the stepped run, whose grouped conv is the plain kernel's im2col."""
    rng = np.random.default_rng(31)
    inits = {
        "w1": rng.standard_normal((16, 8, 1, 1)).astype(np.float32) * 0.3,
        "w2": rng.standard_normal((16, 4, 3, 3)).astype(np.float32) * 0.3,
        "b2": rng.standard_normal(16).astype(np.float32),
        "w3": rng.standard_normal((8, 16, 1, 1)).astype(np.float32) * 0.3,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node(
            "Conv",
            ["ar", "w2", "b2"],
            ["g"],
            kernel_shape=[3, 3],
            group=4,
            pads=[1, 1, 1, 1],
            strides=[strides, strides],
            name="grouped",
        ),  # fmt: skip
        helper.make_node("Relu", ["g"], ["gr"]),
        helper.make_node("Conv", ["gr", "w3"], ["y"], kernel_shape=[1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "regnet_block",
        [helper.make_tensor_value_info("x", F, [2, 8, 13, 12])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((2, 8, 13, 12)).astype(np.float32)}
    assert_modes_agree(model, feeds)
    session = Session(model)
    session.run(feeds)
    grouped = next(pn for pn in run_nodes(session.plan) if pn.label == "grouped")
    assert grouped.fused.layout.emit


@pytest.mark.parametrize("axes", [[2], [3], [1], [1, 2]])
def test_a_mean_over_other_axes_of_a_channels_last_value_comes_out_in_c_order(axes) -> None:
    """A ReduceMean of a channels-last value over other axes than (H, W) runs the node's
    kernel, whose numpy result follows the input's memory order: as a graph output it
    comes out in C order, as the stepped run's does (the values the same)."""
    net = _Net(np.random.default_rng(12))
    net.shapes["x"] = (1, 8, 5, 6)
    y = net.conv("x", 8, k=3, group=8)  # depthwise: writes channels-last
    mean = net.mean(y, axes, keepdims=1)
    model = net.model((1, 8, 5, 6), mean)
    feeds = {"x": RNG.standard_normal((1, 8, 5, 6)).astype(np.float32)}
    assert_modes_agree(model, feeds)
    got = Session(model).run(feeds)[mean]
    assert got.flags.c_contiguous
