"""Build the example models bundled in resources/examples/ (the wheel's onnxviz.resources).

Run: .venv/bin/python scripts/make_examples.py   (deterministic; commit the outputs)
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(__file__), "..", "resources", "examples")
rng = np.random.default_rng(7)


def f32(*shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.1).astype(np.float32)


def small_cnn() -> onnx.ModelProto:
    """An MNIST-sized CNN: Conv-BN-Relu-Pool twice, a residual add, Flatten, Gemm, Softmax."""
    inits = [
        numpy_helper.from_array(f32(8, 1, 3, 3), "conv1.weight"),
        numpy_helper.from_array(f32(8), "conv1.bias"),
        numpy_helper.from_array(np.ones(8, np.float32), "bn1.scale"),
        numpy_helper.from_array(np.zeros(8, np.float32), "bn1.bias"),
        numpy_helper.from_array(np.zeros(8, np.float32), "bn1.mean"),
        numpy_helper.from_array(np.ones(8, np.float32), "bn1.var"),
        numpy_helper.from_array(f32(8, 8, 3, 3), "conv2.weight"),
        numpy_helper.from_array(f32(8), "conv2.bias"),
        numpy_helper.from_array(f32(10, 8 * 7 * 7), "fc.weight"),
        numpy_helper.from_array(f32(10), "fc.bias"),
    ]
    n = helper.make_node
    nodes = [
        n(
            "Conv",
            ["image", "conv1.weight", "conv1.bias"],
            ["c1"],
            name="/features/conv1/Conv",
            pads=[1, 1, 1, 1],
        ),
        n(
            "BatchNormalization",
            ["c1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"],
            ["b1"],
            name="/features/bn1/BatchNormalization",
        ),
        n("Relu", ["b1"], ["r1"], name="/features/relu1/Relu"),
        n(
            "MaxPool",
            ["r1"],
            ["p1"],
            name="/features/pool1/MaxPool",
            kernel_shape=[2, 2],
            strides=[2, 2],
        ),
        n(
            "Conv",
            ["p1", "conv2.weight", "conv2.bias"],
            ["c2"],
            name="/features/conv2/Conv",
            pads=[1, 1, 1, 1],
        ),
        n("Relu", ["c2"], ["r2"], name="/features/relu2/Relu"),
        n("Add", ["r2", "p1"], ["res"], name="/features/residual/Add"),
        n(
            "MaxPool",
            ["res"],
            ["p2"],
            name="/features/pool2/MaxPool",
            kernel_shape=[2, 2],
            strides=[2, 2],
        ),
        n("Flatten", ["p2"], ["flat"], name="/classifier/Flatten", axis=1),
        n(
            "Gemm",
            ["flat", "fc.weight", "fc.bias"],
            ["logits"],
            name="/classifier/fc/Gemm",
            transB=1,
        ),
        n("Softmax", ["logits"], ["probabilities"], name="/classifier/Softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 28, 28])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnxviz-examples"
    )
    model.ir_version = 8
    model.doc_string = "A small CNN bundled with onnxviz as the start-up example."
    helper.set_model_props(model, {"author": "onnxviz", "task": "digit classification"})
    return model


def loop_with_if() -> onnx.ModelProto:
    """A Loop whose body holds an If: sums x*i over iterations, adding only on even i."""
    n = helper.make_node
    then_g = helper.make_graph(
        [n("Add", ["acc_in", "scaled"], ["then_out"], name="then_add")],
        "then_branch",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [3])],
    )
    else_g = helper.make_graph(
        [n("Identity", ["acc_in"], ["else_out"], name="else_identity")],
        "else_branch",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [3])],
    )
    body = helper.make_graph(
        [
            n("Cast", ["iter"], ["iter_f"], name="iter_to_float", to=TensorProto.FLOAT),
            n("Mul", ["x", "iter_f"], ["scaled"], name="scale"),
            n("Mod", ["iter", "two"], ["parity"], name="parity"),
            n("Equal", ["parity", "zero"], ["is_even"], name="is_even"),
            n(
                "If",
                ["is_even"],
                ["acc_out"],
                name="maybe_add",
                then_branch=then_g,
                else_branch=else_g,
            ),
            n("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3]),
        ],
    )
    graph = helper.make_graph(
        [n("Loop", ["trip_count", "", "acc0"], ["total"], name="accumulate", body=body)],
        "loop_with_if",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("trip_count", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, [3])],
        [
            numpy_helper.from_array(np.zeros(3, np.float32), "acc0"),
            numpy_helper.from_array(np.array(2, np.int64), "two"),
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnxviz-examples"
    )
    model.ir_version = 8
    return model


def with_functions() -> onnx.ModelProto:
    """Model-local functions: a Swish-like activation with an attribute default, used twice."""
    n = helper.make_node
    fn = helper.make_function(
        "custom",
        "ScaledSwish",
        ["X"],
        ["Y"],
        [
            n("Constant", [], ["beta"], value_float=1.0),
            n("Constant", [], ["alpha_c"], name="alpha_const", value_float=0.0),
            n("Mul", ["X", "beta"], ["xb"]),
            n("Sigmoid", ["xb"], ["s"]),
            n("Mul", ["X", "s"], ["Y"]),
        ],
        [helper.make_opsetid("", 17)],
        [],
    )
    # The 'alpha' attribute reference shows ref_attr_name in a function body.
    fn.node[1].attribute[0].ref_attr_name = "alpha"
    fn.attribute_proto.extend([helper.make_attribute("alpha", 0.5)])
    fn.node[1].attribute[0].ClearField("f")
    fn.doc_string = "x * sigmoid(x)"
    graph = helper.make_graph(
        [
            n("MatMul", ["x", "w1"], ["h1"], name="fc1"),
            n("ScaledSwish", ["h1"], ["a1"], name="act1", domain="custom"),
            n("MatMul", ["a1", "w2"], ["h2"], name="fc2"),
            n("ScaledSwish", ["h2"], ["y"], name="act2", domain="custom"),
        ],
        "with_functions",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(f32(4, 4), "w1"), numpy_helper.from_array(f32(4, 4), "w2")],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
        functions=[fn],
        producer_name="onnxviz-examples",
    )
    model.ir_version = 9
    return model


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    for name, build in (
        ("small_cnn", small_cnn),
        ("loop_with_if", loop_with_if),
        ("with_functions", with_functions),
    ):
        model = build()
        onnx.checker.check_model(model, full_check=True)
        with open(os.path.join(OUT, f"{name}.onnx"), "wb") as fh:
            fh.write(model.SerializeToString())
        print("wrote", name)


if __name__ == "__main__":
    main()
