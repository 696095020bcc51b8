"""Small models for the engine and stepping tests, built with onnx.helper."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
B = TensorProto.BOOL


def make(
    nodes: list,
    inputs: list,
    outputs: list,
    *,
    initializers: list | None = None,
    opset: int = 18,
    functions: list | None = None,
    extra_opsets: dict[str, int] | None = None,
) -> ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers or [])
    imports = [helper.make_opsetid("", opset)]
    for dom, ver in (extra_opsets or {}).items():
        imports.append(helper.make_opsetid(dom, ver))
    model = helper.make_model(graph, opset_imports=imports, functions=functions or [])
    model.ir_version = 8
    return model


def vi(name: str, elem: int = F, shape: list | None = None) -> object:
    return helper.make_tensor_value_info(name, elem, shape)


def chain_model() -> ModelProto:
    """y = relu(x + w) * 2 with named nodes add, relu, mul."""
    w = numpy_helper.from_array(np.array([1.0, -5.0, 0.5], dtype=np.float32), "w")
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    nodes = [
        helper.make_node("Add", ["x", "w"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "two"], ["y"], name="mul"),
    ]
    return make(nodes, [vi("x", F, [3])], [vi("y", F, [3])], initializers=[w, two])


def loop_model(with_trip: bool = True, with_cond: bool = True) -> ModelProto:
    """Loop: acc += x each iteration (outer-scope x), scan output acc per iteration,
    body cond = i < 2 (stops after 3 iterations when cond is used)."""
    one = helper.make_tensor("one", I64, [], [1])
    limit = helper.make_tensor("limit", I64, [], [2])
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "x"], ["acc_out"], name="body_add"),
            helper.make_node("Constant", [], ["lim"], value=limit, name="body_lim"),
            helper.make_node("Less", ["i", "lim"], ["cond_out"], name="body_less"),
            helper.make_node("Identity", ["acc_out"], ["scan_out"], name="body_id"),
        ],
        "body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("acc_in", F, [2])],
        [vi("cond_out", B, []), vi("acc_out", F, [2]), vi("scan_out", F, [2])],
    )
    del one
    inits = [
        numpy_helper.from_array(np.array(10, dtype=np.int64), "trip"),
        numpy_helper.from_array(np.array(True), "cond"),
        numpy_helper.from_array(np.zeros(2, dtype=np.float32), "acc0"),
    ]
    loop = helper.make_node(
        "Loop",
        ["trip" if with_trip else "", "cond" if with_cond else "", "acc0"],
        ["acc", "scans"],
        body=body,
        name="loop",
    )
    return make(
        [loop], [vi("x", F, [2])], [vi("acc", F, [2]), vi("scans", F, None)], initializers=inits
    )


def if_model() -> ModelProto:
    """y = x * 2 if c else x - 1, both branches read outer x."""
    two = helper.make_tensor("two", F, [], [2.0])
    one = helper.make_tensor("one", F, [], [1.0])
    then_g = helper.make_graph(
        [
            helper.make_node("Constant", [], ["t2"], value=two, name="then_const"),
            helper.make_node("Mul", ["x", "t2"], ["then_y"], name="then_mul"),
        ],
        "then",
        [],
        [vi("then_y", F, [2])],
    )
    else_g = helper.make_graph(
        [
            helper.make_node("Constant", [], ["e1"], value=one, name="else_const"),
            helper.make_node("Sub", ["x", "e1"], ["else_y"], name="else_sub"),
        ],
        "else",
        [],
        [vi("else_y", F, [2])],
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="cond")
    return make([node], [vi("c", B, []), vi("x", F, [2])], [vi("y", F, [2])])
