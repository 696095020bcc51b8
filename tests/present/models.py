"""Small models for present/ui tests, built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def example(name: str) -> str:
    from onnxviz import bundled

    return bundled.as_path("examples", name)


def scan_model() -> onnx.ModelProto:
    """A Scan whose body reads an outer value ('scale') it does not declare."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["sum_in", "x_t"], ["sum_mid"], name="scan_add"),
            helper.make_node("Mul", ["sum_mid", "scale"], ["sum_out"], name="scan_mul"),
            helper.make_node("Identity", ["sum_out"], ["y_t"], name="scan_id"),
        ],
        "scan_body",
        [
            helper.make_tensor_value_info("sum_in", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("sum_out", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [2]),
        ],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Neg", ["s"], ["scale"], name="make_scale"),
            helper.make_node(
                "Scan", ["init", "xs"], ["final", "ys"], name="scan", num_scan_inputs=1, body=body
            ),
        ],
        "scan_graph",
        [
            helper.make_tensor_value_info("init", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("xs", TensorProto.FLOAT, [5, 2]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("final", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("ys", TensorProto.FLOAT, [5, 2]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def scoped_model(layers: int = 3) -> onnx.ModelProto:
    """torch-style scoped names: /encoder/layer.{i}/{attn,mlp}/Op."""
    nodes = []
    inits = []
    x = "x"
    for i in range(layers):
        for part in ("attn", "mlp"):
            scope = f"/encoder/layer.{i}/{part}"
            w = f"{scope}.weight"
            inits.append(numpy_helper.from_array(np.eye(4, dtype=np.float32), w))
            nodes.append(
                helper.make_node("MatMul", [x, w], [f"{scope}/mm"], name=f"{scope}/MatMul")
            )
            nodes.append(
                helper.make_node("Relu", [f"{scope}/mm"], [f"{scope}/r"], name=f"{scope}/Relu")
            )
            nodes.append(
                helper.make_node("Add", [f"{scope}/r", x], [f"{scope}/out"], name=f"{scope}/Add")
            )
            x = f"{scope}/out"
    nodes.append(helper.make_node("Softmax", [x], ["y"], name="/head/Softmax"))
    graph = helper.make_graph(
        nodes,
        "scoped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def layernorm_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="ln")],
        "ln",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [
            numpy_helper.from_array(np.ones(4, np.float32), "g"),
            numpy_helper.from_array(np.zeros(4, np.float32), "b"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def nested_control_flow() -> onnx.ModelProto:
    """An unnamed Loop whose body holds an unnamed If (as torch exports them)."""
    t = helper.make_tensor_value_info
    branch = {
        which: helper.make_graph(
            [helper.make_node(op, ["x_in", "x_in"], [f"{which}_out"])],
            which,
            [],
            [t(f"{which}_out", TensorProto.FLOAT, [2])],
        )
        for which, op in (("then", "Add"), ("else", "Mul"))
    }
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["x"], ["x_in"]),
            helper.make_node(
                "If",
                ["c_in"],
                ["x_out"],
                then_branch=branch["then"],
                else_branch=branch["else"],
            ),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        "body",
        [
            t("i", TensorProto.INT64, []),
            t("c_in", TensorProto.BOOL, []),
            t("x", TensorProto.FLOAT, [2]),
        ],
        [t("c_out", TensorProto.BOOL, []), t("x_out", TensorProto.FLOAT, [2])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "c", "x0"], ["y"], body=body)],
        "g",
        [
            t("n", TensorProto.INT64, []),
            t("c", TensorProto.BOOL, []),
            t("x0", TensorProto.FLOAT, [2]),
        ],
        [t("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def overloads_and_nested_calls() -> onnx.ModelProto:
    """Two overloads of local.Scale (IR 10) and a function that calls another."""
    t = helper.make_tensor_value_info
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])

    def fn(name: str, overload: str, nodes: list[onnx.NodeProto]) -> onnx.FunctionProto:
        f = helper.make_function("local", name, ["a"], ["b"], nodes, [helper.make_opsetid("", 18)])
        f.overload = overload
        return f

    mul = fn("Scale", "double", [helper.make_node("Add", ["a", "a"], ["b"])])
    sqr = fn("Scale", "square", [helper.make_node("Mul", ["a", "a"], ["b"])])
    inner = fn("Inner", "", [helper.make_node("Relu", ["a"], ["b"])])
    outer = fn("Outer", "", [helper.make_node("Inner", ["a"], ["b"], domain="local")])
    calls = [
        helper.make_node("Scale", ["x"], ["y1"], domain="local"),
        helper.make_node("Scale", ["y1"], ["y2"], domain="local"),
        helper.make_node("Outer", ["y2"], ["y"], domain="local"),
    ]
    calls[0].overload = "double"
    calls[1].overload = "square"
    graph = helper.make_graph(
        calls,
        "g",
        [t("x", TensorProto.FLOAT, [2])],
        [t("y", TensorProto.FLOAT, [2])],
        initializer=[one],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)],
        functions=[mul, sqr, inner, outer],
    )
    model.ir_version = 10
    return model
