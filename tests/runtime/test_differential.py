"""Every fast path gives the stepped run's numbers (issue 13).

* A Conv -> residual Add -> Relu chain on each conv path (shifted slices, strided phases,
  few-channel im2col, depthwise, Winograd, pointwise, plain im2col): the flat-layout
  paths once dropped the residual of a fused Conv -> Add (a torch dynamo ResNet-18 at
  224 px was off by 0.09 in its logits).
* Random graphs (hypothesis) of Conv (1x1, 3x3, strided, grouped, depthwise, with and
  without bias), BatchNormalization, Add/Sum residuals, Mul, Relu, Clip, LeakyRelu,
  Sigmoid/SiLU, MatMul + bias Add and elementwise chains with scalar constants, with
  fan-out, graph outputs in the middle of chains and a value used twice by one node.  Shapes are drawn so that every conv path
  is chosen.  Counter-examples hypothesis found are kept as explicit tests below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.session import Session

from .differential import assert_modes_agree

pytestmark = pytest.mark.numeric

F = TensorProto.FLOAT


# -- the residual on every conv path ---------------------------------------------------

# (case, input shape, weight shape, conv attributes): each picks one path of
# nn_conv._conv_dispatch (see the comments there for the thresholds).
CONV_PATHS = [
    ("shifted-3x3", (1, 16, 32, 32), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("strided-phases", (1, 16, 64, 64), (16, 16, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("few-channel-stem", (1, 3, 32, 32), (3, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("depthwise", (1, 16, 32, 32), (16, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 16}),
    ("depthwise-channels-last", (1, 64, 7, 7), (64, 1, 5, 5), {"pads": [2] * 4, "group": 64}),
    (
        "depthwise-channels-last-strided",
        (1, 96, 9, 9),
        (96, 1, 3, 3),
        {"pads": [1] * 4, "group": 96, "strides": [2, 2]},
    ),
    ("winograd", (1, 32, 16, 16), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("winograd-large", (1, 32, 45, 48), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("pointwise", (1, 16, 32, 32), (16, 16, 1, 1), {}),
    ("im2col-small", (1, 16, 12, 12), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("grouped", (1, 16, 32, 32), (16, 4, 3, 3), {"pads": [1, 1, 1, 1], "group": 4}),
]


def _conv_residual_model(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict, op: str = "Add"
) -> onnx.ModelProto:
    """y = relu(conv(x, w, b) + r): r is a live value (the exporter's shortcut), here a
    MaxPool-free stand-in: a graph input of the conv output's shape."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal(w_shape).astype(np.float32) / math.sqrt(math.prod(w_shape[1:]))
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", **attrs),
        helper.make_node(op, ["c", "r"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", F, list(x_shape)),
            helper.make_tensor_value_info("r", F, None),
        ],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _conv_out_shape(x_shape, w_shape, attrs) -> tuple[int, ...]:
    pads = attrs.get("pads", [0] * 4)
    strides = attrs.get("strides", [1, 1])
    spatial = [
        (x_shape[2 + i] + pads[i] + pads[i + 2] - w_shape[2 + i]) // strides[i] + 1
        for i in range(2)
    ]
    return (x_shape[0], w_shape[0], *spatial)


@pytest.mark.parametrize(("case", "x_shape", "w_shape", "attrs"), CONV_PATHS)
@pytest.mark.parametrize("op", ["Add", "Sum"])
def test_fused_conv_keeps_its_residual_on_every_conv_path(
    case: str, x_shape, w_shape, attrs, op: str
) -> None:
    model = _conv_residual_model(x_shape, w_shape, attrs, op)
    rng = np.random.default_rng(11)
    feeds = {
        "x": rng.standard_normal(x_shape).astype(np.float32),
        "r": rng.standard_normal(_conv_out_shape(x_shape, w_shape, attrs)).astype(np.float32),
    }
    sess = Session(model)
    sess.run(feeds)
    # The chain really runs fused (else this test would not test the fast path).
    assert [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)] == [("Conv", "fused")]
    stepped = assert_modes_agree(model, feeds)
    # And the residual matters: without it the output would differ by far more.
    assert not np.allclose(np.maximum(stepped["c"], 0), stepped["y"], atol=1e-3)


def test_resnet_block_whose_shortcut_also_feeds_the_next_conv() -> None:
    """The torch dynamo ResNet-18 pattern: MaxPool's output is both the shortcut of the
    block's residual Add and the input of the block's first Conv (both inputs of the Add
    die there), at a size that picks the shifted-slice conv."""
    rng = np.random.default_rng(4)

    def weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) / math.sqrt(math.prod(shape[1:]))).astype(np.float32), name
        )

    inits = [
        weight("w0", (16, 3, 7, 7)),
        weight("w1", (16, 16, 3, 3)),
        weight("w2", (16, 16, 3, 3)),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b0"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b2"),
    ]
    conv3 = {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], strides=[2, 2], pads=[3, 3, 3, 3]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node(
            "MaxPool", ["r0"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Conv", ["mp", "w1", "b1"], ["c1"], **conv3),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], **conv3),
        helper.make_node("Add", ["c2", "mp"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [1, 3, 128, 128])],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, 3, 128, 128)).astype(np.float32)}
    assert_modes_agree(model, feeds)


# -- random graphs ------------------------------------------------------------------------


@dataclass
class _Builder:
    """A graph under construction: values with their shapes, nodes, constants."""

    rng: np.random.Generator
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def name(self, prefix: str) -> str:
        return f"{prefix}{len(self.nodes)}_{len(self.inits)}"

    def const(self, array: np.ndarray) -> str:
        name = f"k{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def add(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        self.shapes[out] = shape
        return out


def _conv(b: _Builder, x: str, draw) -> str:
    n, c, h, w = b.shapes[x]
    kernel = draw(st.sampled_from([1, 3, 3]))
    stride = draw(st.sampled_from([1, 1, 2]))
    groups = [1]
    if c >= 2:
        groups += [c]  # depthwise
    if c % 2 == 0 and c > 2:
        groups += [2]
    group = draw(st.sampled_from(groups))
    if group == c:
        m = c * draw(st.sampled_from([1, 1, 2]))  # depthwise, channel multiplier 1 or 2
    else:
        m = draw(st.sampled_from([v for v in (c, 4, 8, 16, 32) if v % group == 0]))
    pad = kernel // 2 if draw(st.integers(0, 3)) else 0
    oh, ow = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
    if oh < 1 or ow < 1:
        return x
    wt = b.rng.standard_normal((m, c // group, kernel, kernel)) / math.sqrt(c // group * kernel**2)
    ins = [x, b.const(wt)]
    if draw(st.booleans()):
        ins.append(b.const(b.rng.standard_normal(m)))
    return b.add(
        "Conv",
        ins,
        (n, m, oh, ow),
        kernel_shape=[kernel, kernel],
        strides=[stride, stride],
        pads=[pad] * 4,
        group=group,
    )


def _batch_norm(b: _Builder, x: str, draw) -> str:
    c = b.shapes[x][1]
    ks = [
        b.const(b.rng.uniform(0.5, 1.5, c)),
        b.const(b.rng.uniform(-0.5, 0.5, c)),
        b.const(b.rng.uniform(-0.5, 0.5, c)),
        b.const(b.rng.uniform(0.5, 1.5, c)),
    ]
    return b.add("BatchNormalization", [x, *ks], b.shapes[x], epsilon=1e-5)


def _affine(b: _Builder, x: str, draw) -> str:
    op = draw(st.sampled_from(["Mul", "Add"]))
    c = b.shapes[x][1]
    shape = draw(st.sampled_from([(), (c, 1, 1), (1, c, 1, 1)]))
    k = b.const(b.rng.uniform(0.5, 1.5, shape) if op == "Mul" else b.rng.uniform(-1, 1, shape))
    ins = [x, k] if draw(st.booleans()) else [k, x]
    return b.add(op, ins, b.shapes[x])


def _residual(b: _Builder, x: str, draw) -> str:
    same = [v for v, s in b.shapes.items() if s == b.shapes[x]]
    other = draw(st.sampled_from(same))  # may be x itself: Add(x, x)
    op = draw(st.sampled_from(["Add", "Sum"]))
    ins = [x, other] if draw(st.booleans()) else [other, x]
    return b.add(op, ins, b.shapes[x])


def _relu(b: _Builder, x: str, draw) -> str:
    return b.add("Relu", [x], b.shapes[x])


def _clip(b: _Builder, x: str, draw) -> str:
    """Clip with constant scalar bounds (ReLU6 as torch exports it, or one bound only):
    fused into a conv chain's in-place activation when it follows a conv."""
    lo, hi = draw(st.sampled_from([(0.0, 6.0), (None, 0.5), (-0.25, None), (0.5, -0.5)]))
    ins = [x, "" if lo is None else b.const(np.array(lo))]
    if hi is not None:
        ins.append(b.const(np.array(hi)))
    return b.add("Clip", ins, b.shapes[x])


def _leaky_relu(b: _Builder, x: str, draw) -> str:
    """LeakyRelu (YOLO-style), slope below 1, above 1 (a min then) or negative."""
    alpha = draw(st.sampled_from([0.01, 0.1, 1.5, -0.5]))
    return b.add("LeakyRelu", [x], b.shapes[x], alpha=alpha)


def _silu(b: _Builder, x: str, draw) -> str:
    """Sigmoid, or x * Sigmoid(x) (SiLU as exporters write it): in place when x dies."""
    s = b.add("Sigmoid", [x], b.shapes[x])
    if draw(st.booleans()):
        return s
    return b.add("Mul", [x, s] if draw(st.booleans()) else [s, x], b.shapes[x])


def _gelu(b: _Builder, x: str, draw) -> str:
    """Div -> Erf -> Add -> Mul -> Mul with scalar constants (how exporters write GELU)."""
    shape = b.shapes[x]
    d = b.add("Div", [x, b.const(np.array(math.sqrt(2.0)))], shape)
    e = b.add("Erf", [d], shape)
    a = b.add("Add", [e, b.const(np.array(1.0))], shape)
    m = b.add("Mul", [x, a], shape)
    return b.add("Mul", [m, b.const(np.array(0.5))], shape)


def _matmul_bias(b: _Builder, x: str, draw) -> str:
    *lead, k = b.shapes[x]
    n_out = draw(st.sampled_from([k, 8, 24]))
    w = b.const(b.rng.standard_normal((k, n_out)) / math.sqrt(k))
    y = b.add("MatMul", [x, w], (*lead, n_out))
    bias = b.const(b.rng.standard_normal(n_out))
    ins = [y, bias] if draw(st.booleans()) else [bias, y]
    return b.add("Add", ins, (*lead, n_out))


def _layer_norm(b: _Builder, x: str, draw) -> str:
    """nn.LayerNorm over the last axis as TorchScript writes it out (fusion_layernorm.py);
    sometimes with an intermediate that is also a graph output (no fusion then)."""
    shape = b.shapes[x]
    mean_shape = (*shape[:-1], 1)
    m = b.add("ReduceMean", [x], mean_shape, axes=[-1], keepdims=1)
    d = b.add("Sub", [x, m], shape)
    if draw(st.booleans()):
        p = b.add("Pow", [d, b.const(np.array(2.0))], shape)
    else:
        p = b.add("Mul", [d, d], shape)
    v = b.add("ReduceMean", [p], mean_shape, axes=[-1], keepdims=1)
    if draw(st.integers(0, 4)) == 0:
        b.outputs.append(v)
    s = b.add("Sqrt", [b.add("Add", [v, b.const(np.array(1e-3))], mean_shape)], mean_shape)
    y = b.add("Div", [d, s], shape)
    if draw(st.booleans()):
        gamma = b.const(b.rng.uniform(0.5, 1.5, shape[-1]))
        y = b.add("Mul", [y, gamma] if draw(st.booleans()) else [gamma, y], shape)
        y = b.add("Add", [y, b.const(b.rng.uniform(-1, 1, shape[-1]))], shape)
    return y


def _fake_quant(b: _Builder, x: str, draw) -> str:
    """QuantizeLinear -> DequantizeLinear as onnxruntime.quantization's QDQ format writes
    it (fusion_qdq.py): per tensor (int8, uint8) or per channel (runs node by node).
    Drawn on the graph input only: after a fused step, whose last bits may differ from
    the stepped run's, a value on a rounding boundary moves by a whole quantization
    step (that bound is test_exporter_corpus_runs' business, not this harness's)."""
    shape = b.shapes[x]
    per_channel = draw(st.integers(0, 3)) == 0
    n = shape[1] if per_channel else 1
    dtype = draw(st.sampled_from([np.int8, np.uint8]))
    scale = b.rng.uniform(0.01, 0.2, n).astype(np.float32)
    zp = b.rng.integers(np.iinfo(dtype).min // 2, np.iinfo(dtype).max // 2, n).astype(dtype)
    if not per_channel:
        scale, zp = scale.reshape(()), zp.reshape(())
    s = b.name("scale")
    b.inits.append(numpy_helper.from_array(scale, s))
    z = b.name("zp")
    b.inits.append(numpy_helper.from_array(zp, z))
    q = b.name("q")
    b.nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [q], name=q, axis=1))
    return b.add("DequantizeLinear", [q, s, z], shape, axis=1)


_STEPS = [
    _fake_quant,
    _conv,
    _conv,
    _conv,
    _batch_norm,
    _affine,
    _residual,
    _relu,
    _clip,
    _leaky_relu,
    _silu,
    _gelu,
    _matmul_bias,
    _layer_norm,
]


def _first_conv(b: _Builder, draw) -> str:
    """A conv on the graph input with the geometry of one of CONV_PATHS (so that every
    conv path is drawn, whatever the rest of the graph does), bias or not."""
    _, x_shape, w_shape, attrs = draw(st.sampled_from(CONV_PATHS))
    b.shapes["x"] = x_shape
    wt = b.rng.standard_normal(w_shape) / math.sqrt(math.prod(w_shape[1:]))
    ins = ["x", b.const(wt)]
    if draw(st.booleans()):
        ins.append(b.const(b.rng.standard_normal(w_shape[0])))
    return b.add("Conv", ins, _conv_out_shape(x_shape, w_shape, attrs), **attrs)


@st.composite
def random_graphs(draw) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    b = _Builder(np.random.default_rng(draw(st.integers(0, 2**16))))
    if draw(st.booleans()):
        first = _first_conv(b, draw)
    else:
        # Shapes that reach each conv path: few channels (< 8), Winograd (>= 32 channels,
        # 12-64 px), flat layouts (>= 1024 output positions).
        c = draw(st.sampled_from([3, 4, 8, 16, 32]))
        size = draw(st.sampled_from([8, 14, 16, 24, 32, 34, 48, 64]))
        b.shapes["x"] = (1, c, size, size)
        first = "x"
    frontier = list(dict.fromkeys(["x", first]))
    for _ in range(draw(st.integers(2, 9))):
        x = draw(st.sampled_from(frontier))  # fan-out: any earlier value may be reused
        step = draw(st.sampled_from(_STEPS))
        if step not in (_matmul_bias, _layer_norm, _fake_quant) and len(b.shapes[x]) != 4:
            continue
        if step is _fake_quant and x != "x":
            continue
        y = step(b, x, draw)
        if y != x:
            frontier.append(y)
            if draw(st.integers(0, 4)) == 0:
                b.outputs.append(y)  # a graph output in the middle of a chain
    last = frontier[-1]
    outputs = list(dict.fromkeys([*b.outputs, last]))
    graph = helper.make_graph(
        b.nodes,
        "random",
        [helper.make_tensor_value_info("x", F, list(b.shapes["x"]))],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        initializer=b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(1).standard_normal(b.shapes["x"]).astype(np.float32)
    return model, {"x": x}


@pytest.mark.slow
@settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(random_graphs())
def test_random_graphs_give_the_stepped_numbers_when_fused(case) -> None:
    model, feeds = case
    assert_modes_agree(model, feeds)
