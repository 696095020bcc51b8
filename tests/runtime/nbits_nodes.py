"""The MatMulNBits nodes of a committed onnxruntime-genai export, each with the inputs a
run gave it: what the MatMulNBits kernels' tests feed their kernel node by node."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

EXPORTERS = os.path.join(os.path.dirname(__file__), "..", "data", "exporters")


def genai_export(name: str, level: int | None = None) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """The export ``name`` and its feeds; with ``level``, every MatMulNBits at that
    accuracy_level."""
    path = os.path.join(EXPORTERS, name + ".onnx")
    model = onnx.load(path)
    if level is not None:
        for node in model.graph.node:
            for attr in node.attribute:
                if node.op_type == "MatMulNBits" and attr.name == "accuracy_level":
                    attr.i = level
    return model, dict(np.load(path[:-5] + ".npz"))


def nbits_nodes(
    model: onnx.ModelProto, values: dict[str, Any]
) -> Iterator[tuple[onnx.NodeProto, dict[str, Any], list[Any]]]:
    """(node, its attributes, its six inputs: A as rows [M, K], then B, scales, zero
    points, g_idx and bias, None where absent) for every MatMulNBits, the values from a
    run's ``values`` (tests.runtime.differential.stepped_values)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        attrs = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        ins = [values[i] if i in values else inits.get(i) if i else None for i in node.input]
        ins += [None] * (6 - len(ins))
        ins[0] = np.asarray(ins[0], np.float32).reshape(-1, attrs["K"])
        yield node, attrs, ins


def nbits_relu_model(
    b: np.ndarray,
    scales: np.ndarray,
    zp: np.ndarray,
    bias: np.ndarray,
    K: int,
    N: int,
    block: int,
    level: int = 0,
) -> onnx.ModelProto:
    """MatMulNBits (4-bit, these constants, at accuracy ``level``) of an input ``a`` [*,
    *, K] into ``y``, then Relu into the output ``r``."""
    from onnx import TensorProto

    node = helper.make_node(
        "MatMulNBits",
        ["a", "b", "s", "z", "", "bias"],
        ["y"],
        domain="com.microsoft",
        K=K,
        N=N,
        block_size=block,
        bits=4,
        accuracy_level=level,
    )
    relu = helper.make_node("Relu", ["y"], ["r"])
    graph = helper.make_graph(
        [node, relu],
        "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [None, None, K])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(b, "b"),
            numpy_helper.from_array(scales, "s"),
            numpy_helper.from_array(zp, "z"),
            numpy_helper.from_array(bias, "bias"),
        ],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)
