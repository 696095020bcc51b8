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
