"""Conv stacks whose time the activation kernels decide, against onnxruntime (issue 21).

    python benchmarks/bench_activations.py [--rounds 5] [--models mnv2_clip,yolo_leaky,yolo_mish]

Hand-built (no torchvision here) stand-ins for the families whose activation is not a
Relu: a MobileNetV2-style stack with ReLU6 written as Clip(0, 6) (torch exports before
HardSwish/Relu6 ops, TF converters), a tiny-YOLO-style Conv -> LeakyRelu(0.1) -> MaxPool
stack, and the same stack with Mish (YOLOv4).  Weights are random, BatchNormalization
already folded into the conv bias, as exporters leave it.  The table is bench_families'
(CPU time, 1 thread, alternating rounds, both engines' outputs compared).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_families

Built = tuple[ModelProto, dict[str, np.ndarray]]


class _Stack:
    """A conv stack under construction (weights He-scaled, so activations stay O(1))."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def conv(self, x: str, cin: int, cout: int, k: int = 1, stride: int = 1, group: int = 1) -> str:
        i = len(self.nodes)
        fan_in = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in)
        b = self.rng.standard_normal(cout) * 0.1
        ins = [x, self.const(f"w{i}", w), self.const(f"b{i}", b)]
        out = f"c{i}"
        self.nodes.append(
            helper.make_node(
                "Conv",
                ins,
                [out],
                kernel_shape=[k, k],
                pads=[k // 2] * 4,
                strides=[stride] * 2,
                group=group,
            )
        )
        return out

    def op(self, op: str, ins: list[str], **attrs: Any) -> str:
        out = f"{op.lower()}{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def model(self, x_shape: list[int], y: str, opset: int) -> Built:
        graph = helper.make_graph(
            self.nodes,
            "stack",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)],
            initializer=self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        x = self.rng.standard_normal(x_shape).astype(np.float32)
        return model, {"x": x}


def mobilenet_v2_clip() -> Built:
    """Stem and five inverted residual blocks (expand 6) at 224 px, ReLU6 as Clip."""
    s = _Stack(0)
    lo, hi = s.const("lo", np.array(0.0)), s.const("hi", np.array(6.0))

    def relu6(v: str) -> str:
        return s.op("Clip", [v, lo, hi])

    x, c = relu6(s.conv("x", 3, 16, 3, 2)), 16
    for cout, stride in ((24, 2), (24, 1), (32, 2), (32, 1), (64, 2)):
        e = c * 6
        h = relu6(s.conv(x, c, e))
        h = relu6(s.conv(h, e, e, 3, stride, e))
        h = s.conv(h, e, cout)
        x = s.op("Add", [x, h]) if stride == 1 and cout == c else h
        c = cout
    return s.model([1, 3, 224, 224], x, 13)


def _yolo(activation: str, opset: int) -> Built:
    s = _Stack(1)
    x, c = "x", 3
    for cout in (16, 32, 64, 128, 256):
        y = s.conv(x, c, cout, 3)
        y = s.op(activation, [y], **({"alpha": 0.1} if activation == "LeakyRelu" else {}))
        x, c = s.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2]), cout
    return s.model([1, 3, 416, 416], x, opset)


MODELS = {
    "mnv2_clip": ("MobileNetV2-style stack, Clip ReLU6 (hand-built)", mobilenet_v2_clip),
    "yolo_leaky": ("tiny-YOLO-style stack, LeakyRelu (hand-built)", lambda: _yolo("LeakyRelu", 13)),
    "yolo_mish": ("YOLOv4-style stack, Mish (hand-built)", lambda: _yolo("Mish", 18)),
}


def main(argv: list[str]) -> int:
    bench_families.MODELS.update(MODELS)
    if not any(a == "--models" or a.startswith("--models=") for a in argv):
        argv = [*argv, "--models", ",".join(MODELS)]
    return bench_families.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
