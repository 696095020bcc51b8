"""A zero Pad of the spatial axes whose only reader is a Conv runs as the Conv with that
padding in unwatched runs (fusion_conv_pad.py): the stepped Pad -> Conv's numbers within
float32 rounding; every pair the rewrite must not take keeps its Pad."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.session import Session
from tests.runtime.differential import assert_modes_agree

pytestmark = pytest.mark.numeric


def _model(
    *,
    opset: int = 13,
    rank: int = 2,
    pads: tuple[int, ...] = (0, 0, 0, 0, 0, 0, 1, 1),
    value: float | None = None,
    mode: str = "constant",
    conv_pads: tuple[int, ...] | None = None,
    strides: int = 2,
    weight_special: float | None = None,
    outputs: tuple[str, ...] = ("y",),
    second_reader: bool = False,
) -> onnx.ModelProto:
    """x -> Pad -> Conv(3 x 3 or 3, 6 -> 8 channels) -> y, TensorFlow's SAME padding."""
    rng = np.random.default_rng(4)
    kernel = (3,) * rank
    w = rng.standard_normal((8, 6, *kernel)).astype(np.float32)
    if weight_special is not None:
        w.reshape(-1)[5] = weight_special
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
    ]
    if opset >= 11:
        inits.append(numpy_helper.from_array(np.array(pads, np.int64), "pads"))
        pad_inputs = ["x", "pads"]
        if value is not None:
            inits.append(numpy_helper.from_array(np.array(value, np.float32), "value"))
            pad_inputs.append("value")
        pad = helper.make_node("Pad", pad_inputs, ["p"], mode=mode)
    else:
        pad = helper.make_node("Pad", ["x"], ["p"], mode=mode, pads=list(pads), value=value or 0.0)
    attrs: dict[str, Any] = {"kernel_shape": list(kernel), "strides": [strides] * rank}
    if conv_pads is not None:
        attrs["pads"] = list(conv_pads)
    nodes = [pad, helper.make_node("Conv", ["p", "w", "b"], ["y"], **attrs)]
    if second_reader:
        nodes.append(helper.make_node("Relu", ["p"], ["r"]))
        outputs = (*outputs, "r")
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _feeds(rank: int = 2) -> dict[str, np.ndarray]:
    shape = (2, 6, 15, 14)[: 2 + rank]
    return {"x": np.random.default_rng(5).standard_normal(shape).astype(np.float32)}


def _pads_left(model: onnx.ModelProto) -> int:
    return sum(pn.op_type == "Pad" for pn in run_nodes(Session(model).plan))


@pytest.mark.parametrize(
    "case",
    [
        {},
        {"opset": 9},
        {"value": 0.0},
        {"pads": (0, 0, 1, 2, 0, 0, 2, 1), "conv_pads": (1, 0, 0, 1), "strides": 1},
        {"rank": 1, "pads": (0, 0, 2, 0, 0, 1)},
        {"opset": 19},
    ],
)
def test_a_zero_pad_before_a_conv_is_the_convs_padding(case: dict[str, Any]) -> None:
    model = _model(**case)
    assert _pads_left(model) == 0
    rank = case.get("rank", 2)
    stepped = assert_modes_agree(model, _feeds(rank))
    assert stepped["y"].shape[0] == 2


@pytest.mark.parametrize(
    "case",
    [
        {"value": 0.5},  # not zeros
        {"mode": "reflect", "pads": (0, 0, 1, 1, 0, 0, 1, 1)},
        {"pads": (1, 0, 1, 1, 0, 0, 1, 1)},  # the batch padded
        {"weight_special": float("inf")},  # 0 * inf would be NaN in the stepped run
        {"outputs": ("y", "p")},  # the padded value is an output
        {"second_reader": True},
    ],
)
def test_what_the_rewrite_must_not_take_keeps_its_pad(case: dict[str, Any]) -> None:
    model = _model(**case)
    assert _pads_left(model) == 1
    assert_modes_agree(model, _feeds())


def _qdq_model(pair: str) -> onnx.ModelProto:
    """x -> quantize-dequantize -> Pad -> quantize-dequantize -> Conv (an int8 weight
    dequantized) -> y: onnxruntime.quantization's QDQ form of TensorFlow's SAME padding.
    ``pair``: how the pair between the Pad and the Conv is made."""
    rng = np.random.default_rng(6)
    w = rng.integers(-127, 128, (8, 6, 3, 3)).astype(np.int8)
    inits = [
        numpy_helper.from_array(w, "w_q"),
        numpy_helper.from_array(np.array(0.02, np.float32), "w_s"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "pads"),
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(128, np.uint8), "z"),
        numpy_helper.from_array(np.array(0.05, np.float32), "s_copy"),
        numpy_helper.from_array(np.array(128, np.uint8), "z_copy"),
        numpy_helper.from_array(np.array(127, np.uint8), "z_other"),
        numpy_helper.from_array(np.full(6, 0.05, np.float32), "s_axis"),
        numpy_helper.from_array(np.full(6, 128, np.uint8), "z_axis"),
    ]
    q_args, dq_args, axis = ["s", "z"], ["s", "z"], {}
    if pair == "equal":
        dq_args = ["s_copy", "z_copy"]
    elif pair == "zero_points_differ":
        dq_args = ["s", "z_other"]
    elif pair == "per_axis":
        q_args = dq_args = ["s_axis", "z_axis"]
        axis = {"axis": 1}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "s", "z"], ["x_dq"]),
        helper.make_node("Pad", ["x_dq", "pads"], ["p"]),
        helper.make_node("QuantizeLinear", ["p", *q_args], ["p_q"], **axis),
        helper.make_node("DequantizeLinear", ["p_q", *dq_args], ["p_dq"], **axis),
        helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"]),
        helper.make_node("Conv", ["p_dq", "w", "b"], ["y"], kernel_shape=[3, 3], strides=[2, 2]),
    ]
    outputs = ["y"]
    if pair == "codes_read_twice":
        nodes.append(helper.make_node("Cast", ["p_q"], ["codes"], to=TensorProto.FLOAT))
        outputs.append("codes")
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 15, 14])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    # Shape inference's declared shapes, the padded ones among them, as a real
    # quantized model has them: the rewrite must not trust those of the pair it moves.
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("pair", ["same", "equal"])
def test_a_zero_pad_before_a_quantize_dequantize_pair_and_a_conv_is_the_convs(pair: str) -> None:
    """The pair maps zero to zero, so it reads the unpadded image and the Conv pads:
    the stepped run's numbers within float32 rounding (the pair's codes are the same
    integers), over three runs."""
    model = _qdq_model(pair)
    assert any(v.name == "p_dq" for v in model.graph.value_info)  # (declared padded)
    assert _pads_left(model) == 0
    feeds = _feeds()
    stepped = assert_modes_agree(model, feeds)
    session = Session(model)
    for _ in range(3):
        np.testing.assert_allclose(session.run(feeds)["y"], stepped["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pair", ["zero_points_differ", "per_axis", "codes_read_twice"])
def test_a_pair_that_does_not_keep_zeros_or_is_read_elsewhere_keeps_its_pad(pair: str) -> None:
    model = _qdq_model(pair)
    assert _pads_left(model) == 1
    assert_modes_agree(model, _feeds())
