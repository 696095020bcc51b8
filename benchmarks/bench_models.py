"""The interpreter's benchmark models (issue 5): builders returning ``(model, feeds)``.

* ``resnet50`` / ``inception_v2``: the light models shipped in the onnx wheel (weights
  made by ConstantOfShape, so they are folded once).
* ``bert``: a BERT-base-sized encoder (12 layers, hidden 768, 12 heads, FFN 3072,
  sequence 128, batch 1, random weights) written as MatMul/Add/Softmax/LayerNorm/Erf.
* ``unet``: a small UNet (3 levels, Conv+BatchNorm+Relu blocks, MaxPool down,
  ConvTranspose and nearest Resize up, Concat skips) on a 1x3x128x128 image.
* ``lstm``: a 2-layer LSTM (hidden 256, input 128, sequence 64, batch 4), the second
  layer bidirectional.
* ``add_chain``: 5,000 Add nodes on [1] tensors (adding a second graph input, so no
  fusion), for the engine's per-node overhead.
* ``loop_steps``: a Loop of 1,000 iterations of a 4-node body on a [4] state, for the
  engine's per-iteration overhead (a generation loop's, a scripted while loop's).

Every builder is deterministic (seeded) so that all runtimes get the same model.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

Built = tuple[onnx.ModelProto, dict[str, np.ndarray]]


def _light(name: str) -> Built:
    from onnxviz.runtime.conformance import light_dir, light_inputs

    model = onnx.load(os.path.join(light_dir(), f"light_{name}.onnx"))
    return model, light_inputs(model)


def resnet50() -> Built:
    return _light("resnet50")


def inception_v2() -> Built:
    return _light("inception_v2")


class _Graph:
    """A tiny graph builder: unique names, random float32 initializers."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []

    def weight(self, name: str, *shape: int, scale: float = 0.05) -> str:
        value = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(self, op: str, ins: list[str], out: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def model(
        self,
        name: str,
        inputs: list[onnx.ValueInfoProto],
        outputs: list[onnx.ValueInfoProto],
        opset: int = 17,
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        return model


def bert(
    layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, seq: int = 128
) -> Built:
    g = _Graph(0)
    head_dim = hidden // heads
    split_shape = g.const("split_shape", [1, seq, heads, head_dim], np.int64)
    merge_shape = g.const("merge_shape", [1, seq, hidden], np.int64)
    scale = g.const("scale", 1.0 / np.sqrt(head_dim))
    half = g.const("half", 0.5)
    one = g.const("one", 1.0)
    sqrt2 = g.const("sqrt2", np.sqrt(2.0))
    x = "x"
    for i in range(layers):
        p = f"l{i}"

        def proj(inp: str, name: str, n_in: int, n_out: int, p: str = p) -> str:
            w = g.weight(f"{p}.{name}.w", n_in, n_out, scale=0.02)
            mm = g.node("MatMul", [inp, w], f"{p}.{name}.mm")
            return g.node("Add", [mm, g.weight(f"{p}.{name}.b", n_out, scale=0.02)], f"{p}.{name}")

        def heads_of(t: str, perm: list[int]) -> str:
            r = g.node("Reshape", [t, split_shape], f"{t}.r")
            return g.node("Transpose", [r], f"{t}.t", perm=perm)

        def layer_norm(t: str, name: str, p: str = p) -> str:
            gamma = g.const(f"{p}.{name}.g", np.ones(hidden))
            beta = g.const(f"{p}.{name}.b", np.zeros(hidden))
            return g.node(
                "LayerNormalization", [t, gamma, beta], f"{p}.{name}", axis=-1, epsilon=1e-12
            )

        q = heads_of(proj(x, "q", hidden, hidden), [0, 2, 1, 3])
        k = heads_of(proj(x, "k", hidden, hidden), [0, 2, 3, 1])
        v = heads_of(proj(x, "v", hidden, hidden), [0, 2, 1, 3])
        scores = g.node("Mul", [g.node("MatMul", [q, k], f"{p}.qk"), scale], f"{p}.scores")
        probs = g.node("Softmax", [scores], f"{p}.probs", axis=-1)
        ctx = g.node("MatMul", [probs, v], f"{p}.ctx")
        ctx = g.node("Transpose", [ctx], f"{p}.ctx.t", perm=[0, 2, 1, 3])
        ctx = g.node("Reshape", [ctx, merge_shape], f"{p}.ctx.r")
        ln1 = layer_norm(g.node("Add", [proj(ctx, "o", hidden, hidden), x], f"{p}.res1"), "ln1")
        h = proj(ln1, "ff1", hidden, ffn)
        erf = g.node("Erf", [g.node("Div", [h, sqrt2], f"{p}.gelu.div")], f"{p}.gelu.erf")
        gelu = g.node(
            "Mul",
            [
                g.node("Mul", [h, half], f"{p}.gelu.half"),
                g.node("Add", [erf, one], f"{p}.gelu.add"),
            ],
            f"{p}.gelu",
        )
        res2 = g.node("Add", [proj(gelu, "ff2", ffn, hidden), ln1], f"{p}.res2")
        x = layer_norm(res2, "ln2")
    g.node("Identity", [x], "y")
    model = g.model(
        "bert_encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, hidden])],
    )
    feeds = {"x": g.rng.standard_normal((1, seq, hidden)).astype(np.float32)}
    return model, feeds


def unet(size: int = 128, base: int = 16, levels: int = 3) -> Built:
    g = _Graph(1)

    def conv_block(x: str, c_in: int, c_out: int, name: str) -> str:
        for j in range(2):
            cin = c_in if j == 0 else c_out
            w = g.weight(f"{name}.c{j}.w", c_out, cin, 3, 3, scale=(2.0 / (9 * cin)) ** 0.5)
            b = g.weight(f"{name}.c{j}.b", c_out)
            x = g.node("Conv", [x, w, b], f"{name}.c{j}", pads=[1, 1, 1, 1], kernel_shape=[3, 3])
            bn = [
                g.const(f"{name}.bn{j}.s", g.rng.uniform(0.5, 1.5, c_out)),
                g.const(f"{name}.bn{j}.b", g.rng.uniform(-0.1, 0.1, c_out)),
                g.const(f"{name}.bn{j}.m", g.rng.uniform(-0.1, 0.1, c_out)),
                g.const(f"{name}.bn{j}.v", g.rng.uniform(0.5, 1.5, c_out)),
            ]
            x = g.node("BatchNormalization", [x, *bn], f"{name}.bn{j}")
            x = g.node("Relu", [x], f"{name}.relu{j}")
        return x

    x = "image"
    skips: list[tuple[str, int]] = []
    c = 3
    for lv in range(levels):
        out_c = base << lv
        x = conv_block(x, c, out_c, f"down{lv}")
        skips.append((x, out_c))
        x = g.node("MaxPool", [x], f"pool{lv}", kernel_shape=[2, 2], strides=[2, 2])
        c = out_c
    x = conv_block(x, c, base << levels, "mid")
    c = base << levels
    scales = g.const("up_scales", [1.0, 1.0, 2.0, 2.0])
    for lv in reversed(range(levels)):
        skip, skip_c = skips[lv]
        if lv % 2 == 0:  # learned upsampling
            w = g.weight(f"up{lv}.w", c, skip_c, 2, 2, scale=(1.0 / c) ** 0.5)
            x = g.node("ConvTranspose", [x, w], f"up{lv}", kernel_shape=[2, 2], strides=[2, 2])
            up_c = skip_c
        else:  # nearest resize
            x = g.node("Resize", [x, "", scales], f"up{lv}", mode="nearest")
            up_c = c
        x = g.node("Concat", [x, skip], f"cat{lv}", axis=1)
        x = conv_block(x, up_c + skip_c, skip_c, f"dec{lv}")
        c = skip_c
    w = g.weight("head.w", 2, c, 1, 1, scale=0.1)
    g.node("Conv", [x, w], "mask", kernel_shape=[1, 1])
    model = g.model(
        "unet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 2, size, size])],
    )
    feeds = {"image": g.rng.standard_normal((1, 3, size, size)).astype(np.float32)}
    return model, feeds


def lstm(seq: int = 64, batch: int = 4, n_in: int = 128, hidden: int = 256) -> Built:
    g = _Graph(2)
    s = 1.0 / hidden**0.5
    w1 = g.weight("l1.W", 1, 4 * hidden, n_in, scale=s)
    r1 = g.weight("l1.R", 1, 4 * hidden, hidden, scale=s)
    b1 = g.weight("l1.B", 1, 8 * hidden, scale=s)
    nodes_out = ["l1.Y", "", ""]
    g.nodes.append(
        helper.make_node("LSTM", ["x", w1, r1, b1], nodes_out, name="lstm1", hidden_size=hidden)
    )
    # Y: [seq, 1, batch, hidden] -> [seq, batch, hidden]
    y1 = g.node("Squeeze", ["l1.Y", g.const("axis1", [1], np.int64)], "l1.y")
    w2 = g.weight("l2.W", 2, 4 * hidden, hidden, scale=s)
    r2 = g.weight("l2.R", 2, 4 * hidden, hidden, scale=s)
    b2 = g.weight("l2.B", 2, 8 * hidden, scale=s)
    g.nodes.append(
        helper.make_node(
            "LSTM",
            [y1, w2, r2, b2],
            ["l2.Y", "l2.Y_h", ""],
            name="lstm2",
            hidden_size=hidden,
            direction="bidirectional",
        )
    )
    g.node("Identity", ["l2.Y_h"], "h")
    model = g.model(
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, n_in])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, batch, hidden])],
    )
    feeds = {"x": g.rng.standard_normal((seq, batch, n_in)).astype(np.float32)}
    return model, feeds


def add_chain(n: int = 5000) -> Built:
    """``n`` Add nodes on [1] float tensors: nearly all time is engine overhead.  Each Add
    reads the two before it (x[i + 1] = x[i] + x[i - 1], from the graph inputs x and
    zero), so every value has two readers and no elementwise chain can take two nodes as
    one: this measures the cost per node.  (Until the chains took other nodes' values as
    operands, x[i + 1] = x[i] + one did; the chains now run that as one node per few
    Adds.)  Both inputs are zeros, so every value is (a Fibonacci sequence from 1
    overflows to inf, whose arithmetic slowed both engines 2-2.5x)."""
    g = _Graph(3)
    x, before = "x", "zero"
    for i in range(n):
        x, before = g.node("Add", [x, before], f"add{i}"), x
    g.node("Identity", [x], "y")
    model = g.model(
        "add_chain",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("zero", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    return model, {"x": np.zeros(1, np.float32), "zero": np.zeros(1, np.float32)}


def loop_steps(iterations: int = 1000) -> Built:
    """A Loop whose body updates a [4] state (s = s * k + c) and stops on its
    condition (i < iterations - 1): nearly all time is the engine's cost per iteration
    (a new frame, the counter, the condition, the carried value), as in a scripted
    while loop or a generation loop with a small body."""
    body = _Graph(4)
    body.weight("k", 4, scale=0.5)
    body.weight("c", 4)
    body.const("last", iterations - 1, np.int64)
    body.node("Mul", ["s_in", "k"], "scaled")
    body.node("Add", ["scaled", "c"], "s_out")
    body.node("Less", ["i", "last"], "cond_out")
    body.node("Identity", ["s_out"], "s_seen")  # (a scan output: every state)
    body_graph = helper.make_graph(
        body.nodes,
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("s_seen", TensorProto.FLOAT, [4]),
        ],
        initializer=body.inits,
    )
    g = _Graph(5)
    g.const("trips", iterations * 2, np.int64)
    g.const("go", True, np.bool_)
    g.nodes.append(helper.make_node("Loop", ["trips", "go", "s"], ["y", "states"], body=body_graph))
    model = g.model(
        "loop_steps",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("states", TensorProto.FLOAT, [iterations, 4]),
        ],
    )
    return model, {"s": np.ones(4, np.float32)}


# The other light models of the onnx wheel (all of them are the "light models").
LIGHT_MODELS: dict[str, tuple[str, Callable[[], Built]]] = {
    f"light_{name}": (f"{title} (light)", functools.partial(_light, name))
    for name, title in (
        ("bvlc_alexnet", "AlexNet"),
        ("densenet121", "DenseNet-121"),
        ("inception_v1", "Inception v1"),
        ("shufflenet", "ShuffleNet (grouped 1x1 convs)"),
        ("squeezenet", "SqueezeNet"),
        ("vgg19", "VGG-19"),
        ("zfnet512", "ZFNet-512"),
    )
}

MODELS: dict[str, tuple[str, Callable[[], Built]]] = {
    "resnet50": ("ResNet-50 (light)", resnet50),
    "inception_v2": ("Inception v2 (light)", inception_v2),
    **LIGHT_MODELS,
    "bert": ("BERT-base encoder (12 layers, hidden 768, seq 128)", bert),
    "unet": ("UNet (3 levels, 1x3x128x128)", unet),
    "lstm": ("LSTM (2 layers, hidden 256, seq 64, batch 4)", lstm),
    "add_chain": ("Add chain (5,000 nodes on [1])", add_chain),
    "loop_steps": ("Loop (1,000 iterations of a 4-node body)", loop_steps),
}
