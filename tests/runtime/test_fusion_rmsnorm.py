"""Written-out RMS norms (Llama's, T5's, as torch exports them) run as one node in
unwatched runs (fusion_layernorm.find_rms_norms, RmsNormChain): the compiled row
kernel's RMS form in float32, within float32 rounding of the stepped nodes; the nodes one
by one otherwise (float64, kernels off, anything the plan could not check), bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import row_norm
from onnxviz.runtime.session import Session
from tests.runtime.differential import RTOL, assert_modes_agree

pytestmark = pytest.mark.numeric


def _rms_model(
    *,
    opset: int = 17,
    dtype: int = TensorProto.FLOAT,
    shape: tuple[int, ...] = (2, 3, 64),
    axis: int = -1,
    square: str = "Pow",
    exponent: float = 2.0,
    inverse: str = "div_one",
    one: float = 1.0,
    cast: bool = True,
    gamma: bool = True,
    gamma_first: bool = True,
    eps_shape: tuple[int, ...] = (),
    outputs: tuple[str, ...] = ("y",),
) -> onnx.ModelProto:
    """HF's LlamaRMSNorm as torch exports it: Pow -> ReduceMean -> Add(eps) -> Sqrt ->
    Div(1, s) -> Mul(x, r) -> Cast(float) -> Mul(weight, n); or Reciprocal(s), or x / s."""
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    rng = np.random.default_rng(3)
    consts: dict[str, np.ndarray] = {
        "two": np.array(exponent, dtype=np_dtype),
        "eps": np.full(eps_shape, 0.05, dtype=np_dtype),  # large enough that a lost eps shows
        "one": np.array(one, dtype=np_dtype),
        "weight": rng.uniform(0.5, 1.5, shape[-1:]).astype(np_dtype),
        "axes": np.array([axis], dtype=np.int64),
    }
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["p"])
        if square == "Pow"
        else helper.make_node("Mul", ["x", "x"], ["p"]),
        helper.make_node("ReduceMean", ["p", "axes"], ["v"], keepdims=1)
        if opset >= 18
        else helper.make_node("ReduceMean", ["p"], ["v"], axes=[axis], keepdims=1),
        helper.make_node("Add", ["v", "eps"], ["e"]),
        helper.make_node("Sqrt", ["e"], ["s"]),
    ]
    if inverse == "div_one":
        nodes += [
            helper.make_node("Div", ["one", "s"], ["r"]),
            helper.make_node("Mul", ["x", "r"], ["n"]),
        ]
    elif inverse == "reciprocal":
        nodes += [
            helper.make_node("Reciprocal", ["s"], ["r"]),
            helper.make_node("Mul", ["r", "x"], ["n"]),
        ]
    else:
        nodes.append(helper.make_node("Div", ["x", "s"], ["n"]))
    last = "n"
    if cast:
        nodes.append(helper.make_node("Cast", ["n"], ["c"], to=dtype))
        last = "c"
    if gamma:
        operands = ["weight", last] if gamma_first else [last, "weight"]
        nodes.append(helper.make_node("Mul", operands, ["g"]))
        last = "g"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    graph = helper.make_graph(
        nodes,
        "rms",
        [helper.make_tensor_value_info("x", dtype, list(shape))],
        [helper.make_tensor_value_info(o, dtype, None) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _feeds(model: onnx.ModelProto) -> dict[str, Any]:
    t = model.graph.input[0].type.tensor_type
    shape = [d.dim_value for d in t.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape) * 3 + 0.5
    return {"x": x.astype(helper.tensor_dtype_to_np_dtype(t.elem_type))}


def _chains(model: onnx.ModelProto) -> list[Any]:
    session = Session(model)
    session.run(_feeds(model))
    return [pn.fused for pn in run_nodes(session.plan) if type(pn.fused).__name__ == "RmsNormChain"]


def _rtol(dtype: int) -> float:
    return RTOL if dtype == TensorProto.FLOAT and row_norm.enabled() else 0.0


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("square", ["Pow", "Mul"])
@pytest.mark.parametrize("inverse", ["div_one", "reciprocal", "div"])
@pytest.mark.parametrize(("cast", "gamma"), [(True, True), (False, True), (False, False)])
def test_a_written_out_rms_norm_runs_as_one_node_with_the_stepped_result(
    opset: int, square: str, inverse: str, cast: bool, gamma: bool
) -> None:
    model = _rms_model(opset=opset, square=square, inverse=inverse, cast=cast, gamma=gamma)
    chains = _chains(model)
    assert len(chains) == 1
    stepped = assert_modes_agree(model, _feeds(model), rtol=_rtol(TensorProto.FLOAT))
    if row_norm.enabled() and gamma:
        assert type(chains[0].quick).__name__ == "HeldNorm"  # the compiled loop's call
    if not gamma:  # each row's mean square is 1 (up to eps)
        ms = (stepped["y"].astype(np.float64) ** 2).mean(-1)
        np.testing.assert_allclose(ms, 1, rtol=2e-2)


def test_float64_runs_the_nodes_bit_for_bit() -> None:
    model = _rms_model(dtype=TensorProto.DOUBLE)
    assert len(_chains(model)) == 1
    assert_modes_agree(model, _feeds(model), rtol=0.0)


@pytest.mark.parametrize(
    "variant",
    [
        {"axis": 1},  # a mean over another axis than the last
        {"opset": 18, "axis": 0},
        {"exponent": 3.0},  # not a mean square
        {"one": 2.0},  # 2 / s
        {"eps_shape": (3, 1)},  # an epsilon per row
        {"gamma_first": False, "shape": (4, 64)},
    ],
)
def test_what_the_plan_cannot_check_runs_the_nodes_one_by_one(variant: dict[str, Any]) -> None:
    model = _rms_model(**variant)
    assert len(_chains(model)) == 1  # matched by structure, checked at run time
    feeds = _feeds(model)
    exact = variant.get("gamma_first") is not False  # (that one fuses: within rounding)
    assert_modes_agree(model, feeds, rtol=0.0 if exact else _rtol(TensorProto.FLOAT))


def test_a_kept_intermediate_stops_the_fusion() -> None:
    model = _rms_model(outputs=("y", "s"))
    assert _chains(model) == []
    assert_modes_agree(model, _feeds(model), rtol=0.0)


def test_the_kernel_off_runs_the_nodes_bit_for_bit(monkeypatch: Any) -> None:
    monkeypatch.setattr(row_norm, "enabled", lambda: False)
    model = _rms_model()
    assert len(_chains(model)) == 1
    assert_modes_agree(model, _feeds(model), rtol=0.0)
