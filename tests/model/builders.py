"""Small model builders shared by the model, CLI and hostile-input tests."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def simple_model() -> onnx.ModelProto:
    """x -> Relu -> Add(bias) -> y, with one initializer and metadata."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Add", ["r", "bias"], ["y"], name="add"),
        ],
        "simple",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(np.arange(4, dtype=np.float32), "bias")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, {"k": "v"})
    return model


def matmul_model(size: int = 64) -> onnx.ModelProto:
    """y = x @ w with a size x size weight of ones: big enough to go to a data file."""
    w = numpy_helper.from_array(np.ones((size, size), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, size])],
        initializer=[w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def loop_model() -> onnx.ModelProto:
    """A Loop whose body uses the outer value 'scale' and holds an If using it too."""
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "scale"], ["t_out"], name="then_mul")],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [2])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["acc_in"], ["e_out"], name="else_id")],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [2])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond"], ["cond_out"], name="cond_id"),
            helper.make_node("Add", ["acc_in", "scale"], ["summed"], name="body_add"),
            helper.make_node(
                "If", ["flag"], ["acc_out"], name="body_if", then_branch=then_g, else_branch=else_g
            ),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2]),
        ],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["scale"], name="make_scale"),
            helper.make_node("Loop", ["n", "", "x"], ["out"], name="loop", body=body),
        ],
        "outer",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def with_external(folder: str, *, location: str = "weights.bin", write: bool = True) -> str:
    """A model whose initializer 'w' (float32[2,3]) is stored in ``location``."""
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(arr.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [t],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(folder, exist_ok=True)
    if write:
        with open(os.path.join(folder, "weights.bin"), "wb") as fh:
            fh.write(arr.tobytes())
    path = os.path.join(folder, "model.onnx")
    with open(path, "wb") as fh:
        fh.write(model.SerializeToString())
    return path


# -- raw protobuf encoding, for models the protobuf library refuses to build ----------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def deeply_nested_model_bytes(depth: int) -> bytes:
    """A model with ``depth`` nested If bodies, encoded by hand (python-protobuf refuses
    to build messages deeper than its parse limit)."""
    leaf = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "leaf",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    ).SerializeToString()
    graph = leaf
    for _ in range(depth):
        attr = _field(1, b"then_branch") + _field(6, graph) + _varint((20 << 3) | 0) + _varint(5)
        node = _field(1, b"c") + _field(2, b"y") + _field(4, b"If") + _field(5, attr)
        graph = _field(1, node) + _field(2, b"g") + _field(12, _field(1, b"y"))
    model = _varint((1 << 3) | 0) + _varint(8) + _field(7, graph)
    model += _field(8, _field(1, b"") + _varint((2 << 3) | 0) + _varint(17))
    return model
