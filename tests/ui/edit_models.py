"""Small models for the editing tests (built with onnx.helper)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_loop_if_model() -> onnx.ModelProto:
    """x -> Conv -> Relu -> Loop (body adds the outer 'relu_out') -> If -> y."""
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
            helper.make_node("Add", ["acc_in", "relu_out"], ["acc_out"], name="body_add"),
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", f, [1, 4, 8, 8]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", f, [1, 4, 8, 8]),
        ],
    )
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["loop_out"], ["then_y"], name="then_id")],
        "then_branch",
        [],
        [helper.make_tensor_value_info("then_y", f, [1, 4, 8, 8])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["loop_out"], ["else_y"], name="else_neg")],
        "else_branch",
        [],
        [helper.make_tensor_value_info("else_y", f, [1, 4, 8, 8])],
    )
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [
            helper.make_node(
                "Conv",
                ["x", "W", "B"],
                ["conv_out"],
                name="conv",
                kernel_shape=[3, 3],
                strides=[1, 1],
                pads=[1, 1, 1, 1],
            ),
            helper.make_node("Relu", ["conv_out"], ["relu_out"], name="relu"),
            helper.make_node(
                "Loop", ["trip", "cond", "relu_out"], ["loop_out"], name="loop", body=body
            ),
            helper.make_node(
                "If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g
            ),
        ],
        "edit_test",
        [
            helper.make_tensor_value_info("x", f, [1, 3, 8, 8]),
            helper.make_tensor_value_info("trip", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", f, [1, 4, 8, 8])],
        [
            numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W"),
            numpy_helper.from_array(np.zeros(4, np.float32), "B"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.producer_name = "edit-tests"
    return model


def write(model: onnx.ModelProto, path: str) -> str:
    onnx.save(model, path)
    return path
