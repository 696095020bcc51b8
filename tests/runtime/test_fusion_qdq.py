"""QuantizeLinear -> DequantizeLinear pairs as one float pass in unwatched runs
(fusion_qdq.py): bit for bit the stepped result."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.session import Session
from tests.runtime.differential import assert_modes_agree, stepped_values

pytestmark = pytest.mark.numeric


_ZP = np.array(3, np.int8)
_SCALE = np.array(0.05, np.float32)


def _qdq_model(
    *,
    zp: np.ndarray | None = _ZP,
    scale: np.ndarray = _SCALE,
    zp2: np.ndarray | None | str = "same",
    scale2: np.ndarray | None = None,
    opset: int = 13,
    outputs: tuple[str, ...] = ("y",),
    second_reader: bool = False,
    q_attrs: dict[str, Any] | None = None,
) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(scale, "s")]
    q_ins = ["x", "s"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "zp"))
        q_ins.append("zp")
    dq_ins = ["q", "s2" if scale2 is not None else "s"]
    if scale2 is not None:
        inits.append(numpy_helper.from_array(scale2, "s2"))
    if isinstance(zp2, str):
        if zp is not None:
            dq_ins.append("zp")
    elif zp2 is not None:
        inits.append(numpy_helper.from_array(zp2, "zp2"))
        dq_ins.append("zp2")
    nodes = [
        helper.make_node("QuantizeLinear", q_ins, ["q"], name="quant", **(q_attrs or {})),
        helper.make_node("DequantizeLinear", dq_ins, ["y"], name="dequant"),
    ]
    if second_reader:
        nodes.append(helper.make_node("DequantizeLinear", dq_ins, ["y2"], name="dequant2"))
    qtype = helper.np_dtype_to_tensor_dtype(zp.dtype) if zp is not None else TensorProto.UINT8
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 40])],
        [
            helper.make_tensor_value_info(o, qtype if o == "q" else TensorProto.FLOAT, None)
            for o in outputs
        ],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _x(scale: float = 0.05) -> np.ndarray:
    """Values across the whole integer range and beyond, with exact .5 ties."""
    rng = np.random.default_rng(4)
    x = rng.uniform(-2000, 2000, (2, 3, 40)) * scale / 8
    x[0, 0, :8] = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e6, -1e6]) * scale
    return x.astype(np.float32)


def _pairs(model: onnx.ModelProto) -> int:
    return sum(type(pn.fused).__name__ == "QdqPair" for pn in run_nodes(Session(model).plan))


def _assert_bitwise(model: onnx.ModelProto, x: np.ndarray) -> None:
    want = stepped_values(model, {"x": x})
    got = Session(model).run({"x": x})
    for name, value in got.items():
        assert value.dtype == want[name].dtype
        np.testing.assert_array_equal(value, want[name], err_msg=name)


_ZERO_POINTS = {
    "int8": np.array(3, np.int8),
    "uint8": np.array(130, np.uint8),
    "no-zero-point": None,
}


@pytest.mark.parametrize(
    ("zp", "opset"),
    [
        *((zp, opset) for zp in _ZERO_POINTS.values() for opset in (10, 13, 21)),
        (np.array(-7, np.int16), 21),  # 16-bit types from opset 21 on
    ],
    ids=[*(f"{k}-opset{o}" for k in _ZERO_POINTS for o in (10, 13, 21)), "int16-opset21"],
)
def test_pair_is_one_node_with_the_stepped_bits(zp: np.ndarray | None, opset: int) -> None:
    model = _qdq_model(zp=zp, opset=opset)
    assert _pairs(model) == 1
    _assert_bitwise(model, _x())


def test_other_scale_and_zero_point_on_the_way_back() -> None:
    model = _qdq_model(zp2=np.array(-5, np.int8), scale2=np.array(0.3, np.float32))
    assert _pairs(model) == 1
    _assert_bitwise(model, _x())


def test_nan_inputs_run_the_nodes_themselves() -> None:
    model = _qdq_model()
    x = _x()
    x[1, 2, 5] = np.nan
    _assert_bitwise(model, x)


@pytest.mark.parametrize(
    "variant",
    [
        {"outputs": ("y", "q")},  # the integer value is a graph output
        {"second_reader": True, "outputs": ("y", "y2")},  # two readers of it
    ],
)
def test_a_visible_integer_value_stops_the_pairing(variant: dict[str, Any]) -> None:
    model = _qdq_model(**variant)
    assert _pairs(model) == 0
    _assert_bitwise(model, _x())


@pytest.mark.parametrize(
    "variant",
    [
        {"scale": np.full(3, 0.05, np.float32), "zp": np.array([1, 2, 3], np.int8)},
        {"q_attrs": {"output_dtype": TensorProto.UINT8}, "zp": None, "opset": 21},
        {"zp2": np.array(1, np.uint8)},  # zero point type differs: the kernel's error
    ],
    ids=["per-axis", "output-dtype", "mismatched-zero-point"],
)
def test_what_the_float_pass_does_not_cover_runs_the_nodes(variant: dict[str, Any]) -> None:
    model = _qdq_model(**variant)
    assert _pairs(model) == 1
    if "zp2" in variant:
        with pytest.raises(ExecutionError, match="dequant"):
            Session(model).run({"x": _x()})
        return
    _assert_bitwise(model, _x())
    assert_modes_agree(model, {"x": _x()})
