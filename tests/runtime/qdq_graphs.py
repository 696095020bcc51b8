"""Small QDQ graphs as onnxruntime.quantization writes them, for the tests of the fused
QDQ nodes (test_qdq_add.py, test_qdq_pool.py, test_qdq_matmul.py,
test_qdq_pointwise.py): pairs, quantized convs (depthwise and 1x1 too) and MatMuls, Adds;
and quantize_static's own output of a float model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def quantize_static_qdq(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path: Path, activation_type: str
) -> onnx.ModelProto:
    """``model`` as onnxruntime.quantization.quantize_static writes it: QDQ format, weights
    per channel, activations of ``activation_type`` ("QUInt8" or "QInt8"), calibrated on
    ``feeds``."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([feeds])

        def get_next(self) -> Any:
            return next(self.items, None)

    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model, src)
    quantize_static(
        str(src),
        str(dst),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=getattr(QuantType, activation_type),
    )
    return onnx.load(dst)


class QdqGraph:
    """A graph being built: random parameters from ``seed``; activations int8 (zero
    points in [-10, 10)) or uint8 (in ``unsigned_zero_points``)."""

    def __init__(self, seed: int, signed: bool, unsigned_zero_points: tuple[int, int]) -> None:
        self.rng = np.random.default_rng(seed)
        self.signed = signed
        self.unsigned_zero_points = unsigned_zero_points
        self.inits: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []

    def scalar(self, name: str, value: Any, dtype: Any) -> str:
        self.inits.append(numpy_helper.from_array(np.array(value, dtype), name))
        return name

    def pair(self, x: str, name: str, like: str | None = None) -> str:
        """x -> QuantizeLinear -> DequantizeLinear (output ``name``), with new parameters,
        or the pair ``like``'s."""
        if like:
            s, z = like + "_s", like + "_z"
        else:
            s = self.scalar(name + "_s", self.rng.uniform(0.02, 0.06), np.float32)
            zp = (
                self.rng.integers(-10, 10)
                if self.signed
                else self.rng.integers(*self.unsigned_zero_points)
            )
            z = self.scalar(name + "_z", zp, np.int8 if self.signed else np.uint8)
        self.nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [name + "_q"]))
        self.nodes.append(helper.make_node("DequantizeLinear", [name + "_q", s, z], [name]))
        return name

    def conv(
        self, x: str, name: str, c: int, m: int, k: int, stride: int = 1, relu: bool = True
    ) -> str:
        """A quantized conv (int8 weights per tensor, pads k // 2) [-> Relu] -> its output
        pair ``name + "_p"``."""
        w = self.rng.integers(-60, 60, (m, c, k, k)).astype(np.int8)
        self.inits.append(numpy_helper.from_array(w, name + "_w"))
        ws = self.scalar(name + "_ws", self.rng.uniform(0.002, 0.01), np.float32)
        wz = self.scalar(name + "_wz", 0, np.int8)
        self.nodes.append(
            helper.make_node("DequantizeLinear", [name + "_w", ws, wz], [name + "_wd"])
        )
        self.nodes.append(
            helper.make_node(
                "Conv", [x, name + "_wd"], [name + "_y"], pads=[k // 2] * 4, strides=[stride] * 2
            )
        )
        return self.pair(self.relu(name + "_y", name + "_r") if relu else name + "_y", name + "_p")

    def weight(
        self, name: str, shape: tuple[int, ...], axis: int, per_axis: bool, signed: bool
    ) -> None:
        """A constant 8-bit weight of ``shape`` dequantized to ``name + "_wd"``: int8
        symmetric (zero points 0) or uint8 of zero point 128, one scale or one per entry
        of ``axis``."""
        count = shape[axis] if per_axis else ()
        if signed:
            w = self.rng.integers(-100, 100, shape).astype(np.int8)
            zw = np.zeros(count, np.int8)
        else:
            w = self.rng.integers(0, 256, shape).astype(np.uint8)
            zw = np.full(count, 128, np.uint8)
        ws = self.rng.uniform(0.002, 0.01, count).astype(np.float32)
        self.inits += [
            numpy_helper.from_array(w, name + "_w"),
            numpy_helper.from_array(ws, name + "_ws"),
            numpy_helper.from_array(zw, name + "_wz"),
        ]
        self.nodes.append(
            helper.make_node(
                "DequantizeLinear",
                [name + "_w", name + "_ws", name + "_wz"],
                [name + "_wd"],
                axis=axis,
            )
        )

    def depthwise(self, x: str, name: str, c: int, k: int = 3) -> str:
        """A quantized depthwise conv (int8 weights per tensor, pads k // 2, a float32
        bias) -> its output pair ``name + "_p"``: what a MobileNet's 1x1 convs read."""
        w = self.rng.integers(-60, 60, (c, 1, k, k)).astype(np.int8)
        self.inits.append(numpy_helper.from_array(w, name + "_w"))
        ws = self.scalar(name + "_ws", self.rng.uniform(0.01, 0.05), np.float32)
        wz = self.scalar(name + "_wz", 0, np.int8)
        b = self.rng.normal(0, 0.1, c).astype(np.float32)
        self.inits.append(numpy_helper.from_array(b, name + "_b"))
        self.nodes.append(
            helper.make_node("DequantizeLinear", [name + "_w", ws, wz], [name + "_wd"])
        )
        self.nodes.append(
            helper.make_node(
                "Conv", [x, name + "_wd", name + "_b"], [name + "_y"], pads=[k // 2] * 4, group=c
            )
        )
        return self.pair(name + "_y", name + "_p")

    def pointwise(
        self,
        x: str,
        name: str,
        c: int,
        m: int,
        per_channel: bool,
        weight_signed: bool = True,
        bias: bool = True,
    ) -> str:
        """A quantized 1x1 conv (int8 symmetric weights, or uint8 ones of zero point 128;
        one scale, or one per output channel on axis 0; a float32 bias, as
        quantize_static folds its int32 one, or none) -> its output pair ``name + "_p"``."""
        self.weight(name, (m, c, 1, 1), 0, per_channel, weight_signed)
        ins = [x, name + "_wd"]
        if bias:
            b = self.rng.normal(0, 0.2, m).astype(np.float32)
            self.inits.append(numpy_helper.from_array(b, name + "_b"))
            ins.append(name + "_b")
        self.nodes.append(helper.make_node("Conv", ins, [name + "_y"]))
        return self.pair(name + "_y", name + "_p")

    def matmul(
        self, x: str, name: str, k: int, n: int, per_column: bool, weight_signed: bool = True
    ) -> str:
        """A quantized MatMul by a constant [k, n] weight (int8 symmetric, or uint8 with a
        zero point; one scale, or one per column on axis 1) -> its output pair
        ``name + "_p"``."""
        self.weight(name, (k, n), 1, per_column, weight_signed)
        self.nodes.append(helper.make_node("MatMul", [x, name + "_wd"], [name + "_y"]))
        return self.pair(name + "_y", name + "_p")

    def add(self, a: str, b: str, name: str, relu: bool) -> str:
        """Add [-> Relu] -> its output pair ``name + "_p"``."""
        self.nodes.append(helper.make_node("Add", [a, b], [name + "_sum"]))
        y = self.relu(name + "_sum", name + "_r") if relu else name + "_sum"
        return self.pair(y, name + "_p")

    def relu(self, x: str, name: str) -> str:
        self.nodes.append(helper.make_node("Relu", [x], [name]))
        return name

    def model(
        self, inputs: dict[str, list[int]], outputs: list[str]
    ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        """The model (float inputs of those shapes, float outputs) and random feeds."""
        graph = helper.make_graph(
            self.nodes,
            "qdq",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        feeds = {n: self.rng.normal(0, 1, s).astype(np.float32) for n, s in inputs.items()}
        return model, feeds
