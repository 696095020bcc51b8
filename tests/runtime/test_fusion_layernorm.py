"""Written-out layer norms run as one node in unwatched runs (fusion_layernorm.py): the
compiled row kernel in float32 (within float32 rounding of the stepped nodes), the
nodes' own steps otherwise (bit for bit)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import row_norm
from onnxviz.runtime.session import Session
from tests.runtime.differential import RTOL, assert_modes_agree, stepped_values

pytestmark = pytest.mark.numeric


def _layer_norm_model(
    *,
    opset: int = 14,
    dtype: int = TensorProto.FLOAT,
    shape: tuple[int, ...] = (2, 5, 48),
    axis: int = -1,
    square: str = "Pow",
    exponent: float = 2.0,
    affine: bool = True,
    gamma_shape: tuple[int, ...] | None = None,
    outputs: tuple[str, ...] = ("z",),
) -> onnx.ModelProto:
    """TorchScript's export of nn.LayerNorm (axes as an attribute before opset 18, as an
    input from 18 on)."""
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    rng = np.random.default_rng(3)
    width = shape[-1]
    consts: dict[str, np.ndarray] = {
        "two": np.array(exponent, dtype=np_dtype),
        "eps": np.array(0.1, dtype=np_dtype),  # large enough that a lost eps shows
        "gamma": rng.uniform(0.5, 1.5, gamma_shape or (width,)).astype(np_dtype),
        "beta": rng.uniform(-0.5, 0.5, (width,)).astype(np_dtype),
        "axes": np.array([axis], dtype=np.int64),
    }

    def mean(src: str, dst: str) -> onnx.NodeProto:
        if opset >= 18:
            return helper.make_node("ReduceMean", [src, "axes"], [dst], keepdims=1)
        return helper.make_node("ReduceMean", [src], [dst], axes=[axis], keepdims=1)

    sq = (
        helper.make_node("Pow", ["d", "two"], ["p"])
        if square == "Pow"
        else helper.make_node("Mul", ["d", "d"], ["p"])
    )
    nodes = [
        mean("x", "m"),
        helper.make_node("Sub", ["x", "m"], ["d"]),
        sq,
        mean("p", "v"),
        helper.make_node("Add", ["v", "eps"], ["e"]),
        helper.make_node("Sqrt", ["e"], ["s"]),
        helper.make_node("Div", ["d", "s"], ["n" if affine else "z"]),
    ]
    if affine:
        nodes += [
            helper.make_node("Mul", ["gamma", "n"], ["y"]),
            helper.make_node("Add", ["y", "beta"], ["z"]),
        ]
    for i, node in enumerate(nodes):
        node.name = f"n{i}"
    graph = helper.make_graph(
        nodes,
        "ln",
        [helper.make_tensor_value_info("x", dtype, list(shape))],
        [helper.make_tensor_value_info(o, dtype, None) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _feeds(model: onnx.ModelProto) -> dict[str, Any]:
    t = model.graph.input[0].type.tensor_type
    shape = [d.dim_value for d in t.shape.dim]
    np_dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
    x = np.random.default_rng(0).standard_normal(shape) * 3 + 1.5
    return {"x": x.astype(np_dtype)}


def _rtol(dtype: int) -> float:
    """0 (bit for bit) where the fused node runs the nodes' own steps: float64, or float32
    with the compiled row kernel off; float32 rounding where it runs that kernel."""
    return RTOL if dtype == TensorProto.FLOAT and row_norm.enabled() else 0.0


def _fused_count(model: onnx.ModelProto) -> int:
    nodes = run_nodes(Session(model).plan)
    return sum(type(pn.fused).__name__ == "LayerNormChain" for pn in nodes)


@pytest.mark.parametrize("opset", [14, 18])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
@pytest.mark.parametrize("square", ["Pow", "Mul"])
@pytest.mark.parametrize("affine", [True, False])
def test_written_out_layer_norm_runs_as_one_node_with_the_stepped_result(
    opset: int, dtype: int, square: str, affine: bool
) -> None:
    model = _layer_norm_model(opset=opset, dtype=dtype, square=square, affine=affine)
    assert _fused_count(model) == 1
    assert len(run_nodes(Session(model).plan)) == 1
    # Bit for bit where the fused node computes the nodes' own steps (numpy's means
    # included); float32 runs the compiled row kernel, within float32 rounding.
    stepped = assert_modes_agree(model, _feeds(model), rtol=_rtol(dtype))
    # Normalised: each row has mean 0 and variance 1 before the affine step.
    if not affine:
        z = stepped["z"].astype(np.float64)
        np.testing.assert_allclose(z.mean(-1), 0, atol=1e-5)
        np.testing.assert_allclose(z.var(-1), 1, rtol=2e-2)


@pytest.mark.parametrize("gamma_shape", [(48,), (5, 48), (1, 1, 48), (5, 1), (2, 1, 1)])
def test_gamma_of_any_shape_that_keeps_the_result_fuses_bit_for_bit(
    gamma_shape: tuple[int, ...],
) -> None:
    model = _layer_norm_model(gamma_shape=gamma_shape)
    feeds = _feeds(model)
    # One gamma per column: the compiled row kernel (float32 rounding); per position: the
    # nodes' own steps, bit for bit.
    per_column = gamma_shape in ((48,), (1, 1, 48))
    stepped = assert_modes_agree(model, feeds, rtol=_rtol(TensorProto.FLOAT) if per_column else 0)
    assert Session(model).run(feeds)["z"].shape == stepped["z"].shape == (2, 5, 48)


def test_a_kept_intermediate_stops_the_fusion() -> None:
    model = _layer_norm_model(outputs=("z", "v"))
    assert _fused_count(model) == 0
    assert_modes_agree(model, _feeds(model))


@pytest.mark.parametrize(
    "variant",
    [
        {"axis": 1},  # a mean over another axis than the last
        {"opset": 18, "axis": 0},
        {"exponent": 3.0},  # not a variance
        {"gamma_shape": (2, 1, 1, 48)},  # gamma that grows the result
    ],
)
def test_what_the_plan_cannot_check_runs_the_nodes_one_by_one(variant: dict[str, Any]) -> None:
    model = _layer_norm_model(**variant)
    assert _fused_count(model) == 1  # matched by structure, checked at run time
    feeds = _feeds(model)
    stepped = assert_modes_agree(model, feeds)
    assert Session(model).run(feeds)["z"].shape == stepped["z"].shape


def test_the_transformer_exports_fuse_every_layer_norm() -> None:
    """BERT-style block: two layer norms after residual Adds, each one fused node."""
    model = _layer_norm_model(shape=(1, 7, 32))
    graph = model.graph
    # A second layer norm on the first one's output (a residual in between).
    nodes = list(graph.node)
    second = [onnx.NodeProto() for _ in nodes]
    rename = {
        "x": "r",
        **{n: n + "2" for node in nodes for n in node.output},
    }
    for src, dst in zip(nodes, second):
        dst.CopyFrom(src)
        dst.name = src.name + "b"
        dst.input[:] = [rename.get(i, i) for i in src.input]
        dst.output[:] = [rename[o] for o in src.output]
    res = helper.make_node("Add", ["z", "x"], ["r"], name="res")
    del graph.node[:]
    graph.node.extend([*nodes, res, *second])
    graph.output[0].name = "z2"
    assert _fused_count(model) == 2
    assert_modes_agree(model, _feeds(model))


@pytest.mark.parametrize(("opset", "axis"), [(18, -1), (14, -1), (14, 2)])
def test_the_held_kernel_call_follows_the_inputs_rank(opset: int, axis: int) -> None:
    """The fused node holds the compiled kernel's call after a float32 run; runs of
    another rank (a dynamic input) must give the stepped result all the same, and where
    the written-out means no longer reduce the last axis, the nodes' own result."""
    model = _layer_norm_model(opset=opset, axis=axis, shape=(2, 5, 48))
    del model.graph.input[0].type.tensor_type.shape.dim[:]  # any shape
    sess = Session(model)
    chain = next(pn.fused for pn in run_nodes(sess.plan) if pn.kind == "fused")
    rng = np.random.default_rng(1)
    held_calls = 0
    shapes = [(2, 5, 48), (3, 7, 48), (4, 48), (6, 48), (1, 2, 3, 48), (2, 5, 48), (3, 1, 48)]
    for shape in shapes:
        x = (rng.standard_normal(shape) * 2 + 1).astype(np.float32)
        if axis == 2 and len(shape) == 2:  # no axis 2: the node's own error
            with pytest.raises(ExecutionError, match="axis 2"):
                sess.run({"x": x})
            continue
        want = stepped_values(model, {"x": x})["z"]
        held = chain._held is not None and chain._held[0] == x.ndim
        got = sess.run({"x": x})["z"]
        assert got.shape == want.shape
        if axis == 2 and len(shape) != 3:  # means over axis 2 of 4: the nodes one by one
            np.testing.assert_array_equal(got, want)
            continue
        held_calls += held
        np.testing.assert_allclose(got, want, rtol=RTOL * 4, atol=RTOL * 4)
        if row_norm.enabled():
            assert chain._held is not None and chain._held[0] == x.ndim
    assert held_calls >= (3 if row_norm.enabled() and axis == -1 else 0)


def test_a_fed_gamma_is_not_read_from_the_held_call() -> None:
    """IR 3: gamma is an initializer that a feed may replace; the held call is for the
    initializer's gamma only."""
    model = _layer_norm_model()
    model.ir_version = 3
    gamma = next(t for t in model.graph.initializer if t.name == "gamma")
    model.graph.input.append(helper.make_tensor_value_info("gamma", TensorProto.FLOAT, [48]))
    sess = Session(model)
    feeds = _feeds(model)
    first = sess.run(feeds)["z"]
    np.testing.assert_array_equal(sess.run(feeds)["z"], first)
    doubled = {**feeds, "gamma": numpy_helper.to_array(gamma) * 2}
    want = stepped_values(model, doubled)["z"]
    np.testing.assert_allclose(sess.run(doubled)["z"], want, rtol=RTOL * 4, atol=RTOL * 4)
    assert not np.allclose(want, first)
    np.testing.assert_array_equal(sess.run(feeds)["z"], first)


def test_the_compiled_loops_quick_call_gives_the_held_calls_bits(monkeypatch) -> None:
    """Once the call is held, the fused node's quick call (native/_norm.c's held norm,
    for that rank and those constants) runs from the compiled loop: the same bits as the
    held Python call, which runs when there is no quick call."""
    model = _layer_norm_model(shape=(3, 7, 48))
    rng = np.random.default_rng(4)
    feeds = {"x": (rng.standard_normal((3, 7, 48)) * 3 + 2).astype(np.float32)}
    sess = Session(model)
    runs = [sess.run(feeds)["z"] for _ in range(3)]
    chain = next(pn.fused for pn in run_nodes(sess.plan) if pn.kind == "fused")
    if row_norm.enabled():
        assert type(chain.quick).__name__ == "HeldNorm"
    monkeypatch.setattr(row_norm, "module", lambda: None)  # no quick call is made
    plain = Session(model)
    without = [plain.run(feeds)["z"] for _ in range(3)]
    assert next(pn.fused for pn in run_nodes(plain.plan) if pn.kind == "fused").quick is None
    for a, b in zip(runs, without):
        np.testing.assert_array_equal(a, b)
