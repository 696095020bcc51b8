"""A QDQ model's MatMul by a constant weight run as an exact integer product
(fusion_qdq_matmul.QdqMatMul): its rescale pass against numpy's float32 steps at every
level, the fused node against a numpy model of its definition bit for bit, graphs
against stepping within one quantization step, and the compiled QuantizeLinear."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.fusion_qdq_matmul import QdqMatMul
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.kernels.quantize import _dequantize, _quantize
from onnxviz.runtime.session import Session
from tests.runtime.differential import assert_modes_agree, stepped_values
from tests.runtime.native_modules import at_level, compiled
from tests.runtime.qdq_graphs import QdqGraph, quantize_static_qdq

_LEVELS = [lv for lv in native.levels() if lv >= native.AVX2]
needs_int8 = pytest.mark.skipif(
    native.load("int8") is None or not _LEVELS, reason="the int8 kernel needs AVX2"
)


def _numpy_quantize(x: np.ndarray, s: float, z: int, dtype: Any) -> np.ndarray:
    """QuantizeLinear's float32 steps: divide, round half to even, add, clip."""
    info = np.iinfo(dtype)
    q = np.rint(np.divide(x, np.float32(s), dtype=np.float32)) + np.float32(z)
    return np.clip(q, info.min, info.max).astype(dtype)


def _product_quantize(x: np.ndarray, s: float, z: int, dtype: Any) -> np.ndarray:
    """The fused MatMul's output quantizer: QuantizeLinear's steps with the division
    taken as a product by float32(1 / s)."""
    info = np.iinfo(dtype)
    r = np.float32(1) / np.float32(s)
    q = np.rint(np.multiply(x, r, dtype=np.float32)) + np.float32(z)
    return np.clip(q, info.min, info.max).astype(dtype)


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 9),
    n=st.integers(1, 70),
    signed=st.booleans(),
    bias=st.booleans(),
    then=st.sampled_from([None, "int8", "uint8"]),
    seed=st.integers(0, 2**16),
)
def test_scale_columns_qdq_is_the_nodes_float32_steps(
    m: int, n: int, signed: bool, bias: bool, then: str | None, seed: int
) -> None:
    """The pass, and with ``then`` its second stage (+ a bias per column, a second pair:
    the Add after a QDQ MatMul's pair), against numpy's float32 steps at every level."""
    mod = compiled("int8")
    rng = np.random.default_rng(seed)
    acc = rng.integers(-(2**20), 2**20, (m, n)).astype(np.int32)
    scale = rng.uniform(1e-5, 1e-3, n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    dtype = np.int8 if signed else np.uint8
    qs, qz = np.float32(rng.uniform(0.01, 0.2)), int(rng.integers(-5, 5) + (0 if signed else 128))
    dqs, dqz = np.float32(rng.uniform(0.01, 0.2)), int(rng.integers(-5, 5) + (0 if signed else 128))
    v = acc.astype(np.float32) * scale
    if bias:
        v = v + b
    want = (_product_quantize(v, qs, qz, dtype).astype(np.float32) - np.float32(dqz)) * dqs
    stage: tuple[Any, ...] = ()
    if then is not None:
        dtype2 = np.dtype(then)
        b2 = (rng.standard_normal(n) * 3).astype(np.float32)
        qs2, dqs2 = np.float32(rng.uniform(0.01, 0.2)), np.float32(rng.uniform(0.01, 0.2))
        qz2 = int(rng.integers(-5, 5) + (0 if then == "int8" else 128))
        dqz2 = int(rng.integers(-5, 5) + (0 if then == "int8" else 128))
        stage = (b2, then == "int8", qs2, qz2, dqs2, dqz2)
        t = _numpy_quantize(want + b2, qs2, qz2, dtype2)
        want = (t.astype(np.float32) - np.float32(dqz2)) * dqs2
    for level in native.levels():
        with at_level("int8", level):
            native.load("int8")
            out = np.empty((m, n), np.float32)
            status = mod.scale_columns_qdq(
                acc.reshape(-1), m, n, scale, b if bias else b"", signed, qs, qz, dqs, dqz,
                out.reshape(-1), *stage,
            )  # fmt: skip
            assert status == 0
            np.testing.assert_array_equal(out, want, err_msg=f"level {level}")


def test_scale_columns_qdq_multiplies_by_the_reciprocal_then_divides() -> None:
    """The output pair's quantizer takes v * float32(1 / qs), the bias Add's pair divides:
    qs = float32(2 / 13) puts odd integers' quotients on ties the product misses (row 0
    meets them in the first stage, row 1, all zeros, in the second through the bias)."""
    mod = compiled("int8")
    odd = np.arange(-35, 36, 2, dtype=np.int32)
    acc = np.stack([odd, np.zeros_like(odd)])
    n = odd.size
    ones = np.ones(n, np.float32)
    qs = np.float32(2 / 13)
    v = acc.astype(np.float32)
    first = _product_quantize(v, qs, 128, np.uint8)
    assert (first[0] != _numpy_quantize(v[0], qs, 128, np.uint8)).sum() >= 4
    b2 = odd.astype(np.float32)
    f = (first.astype(np.float32) - np.float32(128)) * qs + b2
    second = _numpy_quantize(f, qs, 128, np.uint8)
    assert (second[1] != _product_quantize(f[1], qs, 128, np.uint8)).sum() >= 4
    want = (second.astype(np.float32) - np.float32(128)) * qs
    for level in native.levels():
        with at_level("int8", level):
            native.load("int8")
            out = np.empty((2, n), np.float32)
            status = mod.scale_columns_qdq(
                acc.reshape(-1), 2, n, ones, b"", False, qs, 128, qs, 128, out.reshape(-1),
                b2, False, qs, 128, qs, 128,
            )  # fmt: skip
            assert status == 0
            np.testing.assert_array_equal(out, want, err_msg=f"level {level}")


def test_scale_columns_qdq_refuses_a_second_stage_that_does_not_fit() -> None:
    mod = compiled("int8")
    acc = np.zeros(6, np.int32)
    scale = np.ones(3, np.float32)
    out = np.empty(6, np.float32)
    args = (acc, 2, 3, scale, b"", False, np.float32(0.1), 128, np.float32(0.1), 128, out)
    with pytest.raises(ValueError, match="one per column"):
        mod.scale_columns_qdq(*args, np.ones(2, np.float32), False, 0.1, 128, 0.1, 128)
    with pytest.raises(ValueError, match="zero point"):
        mod.scale_columns_qdq(*args, np.ones(3, np.float32), True, 0.1, 128, 0.1, 0)


def _chain_graph(
    seed: int,
    signed: bool,
    per_column: bool,
    weight_signed: bool,
    shape: list[int],
    n: int,
    shared: str,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[str]]:
    """x -> pair -> MatMul(s) by constant weights -> output pairs.  ``shared``: "one"
    MatMul, "two" reading the same dequantized value, or "two+relu" where a Relu reads
    it too (the dequantizer then stays a node)."""
    g = QdqGraph(seed, signed, (100, 156))
    xp = g.pair("x", "xp")
    outs = [g.matmul(xp, "mm0", shape[-1], n, per_column, weight_signed)]
    if shared != "one":
        outs.append(g.matmul(xp, "mm1", shape[-1], n + 3, per_column, weight_signed))
    if shared == "two+relu":
        outs.append(g.relu(xp, "xr"))
    model, feeds = g.model({"x": shape}, outs)
    return model, feeds, outs


def _fused(model: onnx.ModelProto) -> int:
    return sum(isinstance(pn.fused, QdqMatMul) for pn in run_nodes(Session(model).plan))


def _here(count: int) -> int:
    """How many QdqMatMuls a plan made at this process's level holds where ``count``
    are fused when the int8 products run: find_qdq_matmuls' own condition, the compiled
    int8 module at AVX2 or better (int8_products.module(); at ONNXVIZ_NATIVE=generic
    it is None and the nodes run)."""
    return count if int8_products.module() is not None else 0


def _steps(model: onnx.ModelProto, outs: list[str]) -> dict[str, float]:
    """Each MatMul output pair's quantization step (the output dequantizer's scale)."""
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    return {o: float(inits[o + "_s"]) for o in outs if o.startswith("mm")}


@needs_int8
@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    signed=st.booleans(),
    per_column=st.booleans(),
    weight_signed=st.booleans(),
    shape=st.sampled_from([[1, 16], [5, 33], [2, 7, 64], [1, 3, 4, 20]]),
    n=st.integers(1, 40),
    shared=st.sampled_from(["one", "two", "two+relu"]),
)
def test_qdq_matmul_graphs_agree_with_stepping(
    seed: int,
    signed: bool,
    per_column: bool,
    weight_signed: bool,
    shape: list[int],
    n: int,
    shared: str,
) -> None:
    """Within one output step of the stepped float32 MatMul (only at a rounding
    boundary), on the first run and on the held call's later runs with new values."""
    model, feeds, outs = _chain_graph(seed, signed, per_column, weight_signed, shape, n, shared)
    assert _fused(model) == _here(1 if shared == "one" else 2)
    steps = _steps(model, outs)
    for level in _LEVELS:
        with at_level("int8", level):
            assert_modes_agree(model, feeds, steps=steps)
            session = Session(model)
            session.run(feeds)
            other = {"x": np.random.default_rng(seed + 1).normal(0, 2, shape).astype(np.float32)}
            got = session.run(other)  # the held call, new codes
            want = stepped_values(model, other)
            for name, step in steps.items():
                diff = np.abs(got[name] - want[name])
                assert diff.max() <= step * (1 + 1e-4), name
            if "xr" in outs:
                np.testing.assert_array_equal(got["xr"], want["xr"])


def _definition(inits: dict[str, np.ndarray], codes: np.ndarray, pair: str, mm: str) -> np.ndarray:
    """(A - za) @ (W - zw) exactly, float32(acc) * float32(sa * sw[n]), then the output
    pair's float32 steps (its division a product by the reciprocal), in numpy: the fused
    node's definition."""
    za, sa = inits[pair + "_z"], inits[pair + "_s"]
    acc = (codes.astype(np.int64) - za.astype(np.int64)) @ (
        inits[mm + "_w"].astype(np.int64) - inits[mm + "_wz"].astype(np.int64)
    )
    v = acc.astype(np.float32) * (sa * inits[mm + "_ws"]).astype(np.float32)
    qs, qz = inits[mm + "_p_s"], inits[mm + "_p_z"]
    q = _product_quantize(v, qs, int(qz), qz.dtype)
    return (q.astype(np.float32) - np.float32(qz)) * qs


@needs_int8
@pytest.mark.parametrize("signed", [True, False])
def test_the_fused_node_is_its_definition_bit_for_bit(signed: bool) -> None:
    """A numpy model of the definition gives the same bits, on the first call and the
    held one; so does a second MatMul reading the first one's dequantized output (its
    codes read back from the float value, exactly)."""
    g = QdqGraph(3, signed, (100, 156))
    xp = g.pair("x", "xp")
    first = g.matmul(xp, "mm0", 48, 20, True)
    second = g.matmul(first, "mm1", 20, 9, False)
    model, feeds = g.model({"x": [6, 48]}, [first, second])
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    codes = stepped_values(model, feeds)["xp_q"]
    assert _fused(model) == _here(2)
    for level in _LEVELS:
        with at_level("int8", level):
            session = Session(model)
            for _ in range(2):  # the first call, then the held one
                got = session.run(feeds)
                np.testing.assert_array_equal(got[first], _definition(inits, codes, "xp", "mm0"))
                qs, qz = inits["mm0_p_s"], inits["mm0_p_z"]
                back = _numpy_quantize(got[first], qs, int(qz), qz.dtype)
                want = _definition(inits, back, "mm0_p", "mm1")
                np.testing.assert_array_equal(got[second], want)


def _bias_graph(
    seed: int,
    signed: bool,
    per_column: bool,
    shape: list[int],
    n: int,
    bias_shape: tuple[int, ...],
    bias_first: bool,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x -> pair -> MatMul -> pair -> Add of a constant bias -> pair "ad_p": what
    onnxruntime.quantization writes for a Linear with a bias."""
    g = QdqGraph(seed, signed, (100, 156))
    y = g.matmul(g.pair("x", "xp"), "mm0", shape[-1], n, per_column)
    bias = (g.rng.standard_normal(bias_shape) * 2).astype(np.float32)
    g.inits.append(onnx.numpy_helper.from_array(bias, "bias"))
    g.add("bias", y, "ad", relu=False) if bias_first else g.add(y, "bias", "ad", relu=False)
    return g.model({"x": shape}, ["ad_p"])


def _ops(model: onnx.ModelProto) -> list[str]:
    return [pn.op_type for pn in run_nodes(Session(model).plan)]


@needs_int8
@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    signed=st.booleans(),
    per_column=st.booleans(),
    shape=st.sampled_from([[1, 16], [5, 33], [2, 7, 64], [1, 3, 4, 20]]),
    n=st.integers(1, 40),
    bias_shape=st.sampled_from(["n", "1n", "1"]),
    bias_first=st.booleans(),
)
def test_a_bias_add_after_the_pair_runs_in_the_node(
    seed: int,
    signed: bool,
    per_column: bool,
    shape: list[int],
    n: int,
    bias_shape: str,
    bias_first: bool,
) -> None:
    """The Add and its pair join the MatMul's node; the result is within one step of
    each pair of stepping (the MatMul's pair may land on the other side of a boundary,
    and the Add's pair then too), on the first run and the held call's later ones."""
    dims = {"n": (n,), "1n": (1, n), "1": (1,)}[bias_shape]
    model, feeds = _bias_graph(seed, signed, per_column, shape, n, dims, bias_first)
    assert _fused(model) == _here(1)
    if _here(1):
        assert "Add" not in _ops(model)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    step = float(inits["mm0_p_s"]) + float(inits["ad_p_s"])
    for level in _LEVELS:
        with at_level("int8", level):
            assert_modes_agree(model, feeds, steps={"ad_p": step})
            session = Session(model)
            session.run(feeds)
            other = {"x": np.random.default_rng(seed + 1).normal(0, 2, shape).astype(np.float32)}
            got = session.run(other)["ad_p"]  # the held call, new codes
            assert np.abs(got - stepped_values(model, other)["ad_p"]).max() <= step * (1 + 1e-4)


@needs_int8
@pytest.mark.parametrize("signed", [True, False])
def test_the_bias_add_stage_is_its_definition_bit_for_bit(signed: bool) -> None:
    model, feeds = _bias_graph(4, signed, True, [6, 48], 20, (20,), False)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    codes = stepped_values(model, feeds)["xp_q"]
    first = _definition(inits, codes, "xp", "mm0") + inits["bias"]
    qs, qz = inits["ad_p_s"], inits["ad_p_z"]
    want = (_numpy_quantize(first, qs, int(qz), qz.dtype).astype(np.float32) - np.float32(qz)) * qs
    for level in _LEVELS:
        with at_level("int8", level):
            session = Session(model)
            for _ in range(2):  # the first call, then the held one
                np.testing.assert_array_equal(session.run(feeds)["ad_p"], want)


@needs_int8
def test_a_bias_add_the_pass_cannot_take_runs_the_nodes() -> None:
    """A bias with more axes than the product (the Add's result grows one) runs the
    chain's nodes, so the stepped values; a sum someone else reads keeps its Add."""
    model, feeds = _bias_graph(7, False, False, [4, 24], 10, (1, 1, 10), False)
    if _here(1):
        assert "Add" not in _ops(model)  # (one of the fused node's steps)
    assert_modes_agree(model, feeds, rtol=0.0)
    model, feeds = _bias_graph(8, True, False, [4, 24], 10, (10,), False)
    model.graph.output.append(helper.make_tensor_value_info("ad_sum", TensorProto.FLOAT, None))
    assert _fused(model) == _here(1) and "Add" in _ops(model)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert_modes_agree(
        model,
        feeds,
        steps={
            "ad_p": float(inits["mm0_p_s"]) + float(inits["ad_p_s"]),
            "ad_sum": float(inits["mm0_p_s"]),
        },
    )


@needs_int8
def test_what_the_node_does_not_take_runs_the_nodes() -> None:
    """A zero weight scale (no normal column scale) and a scale fed at run time (not
    held) give the stepped values exactly: the nodes run, or the call is not kept."""
    model, feeds, outs = _chain_graph(5, False, False, True, [4, 24], 10, "one")
    for init in model.graph.initializer:
        if init.name == "mm0_ws":
            init.CopyFrom(onnx.numpy_helper.from_array(np.array(0.0, np.float32), "mm0_ws"))
    assert_modes_agree(model, feeds, rtol=0.0)
    # The output scale fed as an input: the call is checked every run.
    model2, feeds2, outs2 = _chain_graph(6, True, True, True, [4, 24], 10, "one")
    graph = model2.graph
    kept = [t for t in graph.initializer if t.name != "mm0_p_s"]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    graph.input.append(helper.make_tensor_value_info("mm0_p_s", TensorProto.FLOAT, []))
    steps = {"mm0_p": 0.05}
    for value in (0.05, 0.03):
        feeds2["mm0_p_s"] = np.array(value, np.float32)
        session = Session(model2)
        got = session.run(feeds2)["mm0_p"]
        want = stepped_values(model2, feeds2)["mm0_p"]
        assert np.abs(got - want).max() <= max(steps["mm0_p"], value) * (1 + 1e-4)
        assert np.mean(got == want) > 0.5


@pytest.mark.parametrize("signed", [True, False])
def test_compiled_quantize_linear_is_the_numpy_steps(signed: bool) -> None:
    rng = np.random.default_rng(11)
    dtype = np.int8 if signed else np.uint8
    x = (rng.standard_normal((7, 131)) * 40).astype(np.float32)
    x[0, :4] = [0.5, 1.5, -0.5, -2.5]  # ties round to even
    for scale, zero in ((0.37, 3), (1.0, 0), (1e-3, -7 if signed else 250)):
        s = np.array(scale, np.float32)
        z = np.array(zero, dtype)
        want = _numpy_quantize(x, float(s), zero, dtype)
        for level in [*native.levels(), None]:
            with at_level("int8", level):
                got = _quantize(x, s, z)
                assert got.dtype == dtype
                np.testing.assert_array_equal(got, want, err_msg=f"level {level}")
    with np.errstate(invalid="ignore"):
        nan = _quantize(np.array([np.nan, 1.0], np.float32), np.array(0.5, np.float32), None)
    assert nan.dtype == np.uint8 and nan[1] == 2  # the numpy steps ran
    assert _dequantize(nan, np.array(0.5, np.float32), None)[1] == 1.0


@needs_int8
@pytest.mark.parametrize("activation_type", ["QUInt8", "QInt8"])
@pytest.mark.parametrize("layer", ["MatMul", "Gemm"])
def test_quantize_static_layers_run_fused_as_stepped(
    tmp_path: Path, activation_type: str, layer: str
) -> None:
    """What onnxruntime.quantization writes for a transformer's projections and a
    classifier's Gemm layers (QDQ, per channel), fused and within one output step of
    stepping."""
    rng = np.random.default_rng(2)
    hidden = 32
    nodes, inits = [], []
    x = "x"
    for i, (k, n) in enumerate([(hidden, 3 * hidden), (3 * hidden, hidden)]):
        inits += [
            onnx.numpy_helper.from_array(
                (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), f"w{i}"
            ),
            onnx.numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), f"b{i}"),
        ]
        if layer == "Gemm":  # a classifier's Linear as torch writes it: B transposed
            inits[-2] = onnx.numpy_helper.from_array(
                onnx.numpy_helper.to_array(inits[-2]).T.copy(), f"w{i}"
            )
            nodes += [helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"a{i}"], transB=1)]
        else:
            nodes += [
                helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            ]
        nodes.append(helper.make_node("Relu", [f"a{i}"], [f"r{i}"]))
        x = f"r{i}"
    shape = [16, hidden] if layer == "Gemm" else [2, 8, hidden]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}

    quantized = quantize_static_qdq(model, feeds, tmp_path, activation_type)
    assert _fused(quantized) == _here(2)
    out = quantized.graph.output[0].name
    inits_q = {t.name: onnx.numpy_helper.to_array(t) for t in quantized.graph.initializer}
    # The output's dequantizer scale: the step by which the runs may differ.
    dq = next(n for n in quantized.graph.node if n.output[0] == out)
    steps = {out: float(inits_q[dq.input[1]])} if dq.op_type == "DequantizeLinear" else {}
    for level in _LEVELS:
        with at_level("int8", level):
            assert_modes_agree(quantized, feeds, steps=steps or None)


def _chains_with_inputs(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> tuple[Session, list[tuple[QdqMatMul, list[Any]]]]:
    """A session after its first run, and each QdqMatMul with the inputs of its call."""
    seen: list[tuple[QdqMatMul, list[Any]]] = []
    real = QdqMatMul.__call__

    def recorded(self: QdqMatMul, ex: Any, ins: list[Any]) -> list[Any]:
        seen.append((self, list(ins)))
        return real(self, ex, ins)

    monkeypatch.setattr(QdqMatMul, "__call__", recorded)
    session = Session(model)
    session.run(feeds)
    monkeypatch.setattr(QdqMatMul, "__call__", real)
    return session, seen


@needs_int8
@pytest.mark.parametrize("shared", ["one", "two+relu"])
@pytest.mark.parametrize("signed", [True, False])
def test_the_held_qdq_matmul_gives_the_kept_calls_bits(
    shared: str, signed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From its second run the node loop calls the chain's compiled call (`quick`,
    native/_int8.c's held_rows_qdq): `_again`'s bits for new values (codes, or with a
    Relu reading the dequantized value too, the float values turned back into codes),
    without the Python call; anything `_again` would not take goes to the Python call."""
    model, feeds, outs = _chain_graph(9, signed, True, True, [3, 5, 40], 24, shared)
    session, seen = _chains_with_inputs(model, feeds, monkeypatch)
    chains = {id(chain): (chain, ins) for chain, ins in seen}
    assert len(chains) == _here(1 if shared == "one" else 2)  # none: no held call
    rng = np.random.default_rng(10)
    for chain, ins in chains.values():
        assert chain.quick is not None and chain._ready is not None
        a_at = chain.a_places[0]
        a = ins[a_at]
        assert chain.from_float == (a.dtype == np.float32)
        for value in (a, np.ascontiguousarray(a[:1]), a.reshape(-1, a.shape[-1])):
            args = list(ins)
            args[a_at] = value
            want = chain._again(chain._ready, value)
            assert want is not None
            np.testing.assert_array_equal(chain.quick(*args), want)
        declined = [
            a.astype(np.float64),
            np.asfortranarray(a.reshape(-1, a.shape[-1])),
            a[..., :-1],  # another width
            a.reshape(-1),  # one axis
        ]
        if chain.from_float:
            nan = a.copy()
            nan.flat[3] = np.nan
            declined.append(nan)  # the codes' pass meets a NaN: the nodes run
        else:
            declined.append(a.view(np.int8 if a.dtype == np.uint8 else np.uint8))
        for value in declined:
            args = list(ins)
            args[a_at] = value
            assert chain.quick(*args) is None  # quiet_loop.decline: the Python call
        other = next(p for p, _ in chain._ready.params)
        args = list(ins)
        args[other] = ins[other].copy()  # another constant object
        assert chain.quick(*args) is None
    # later runs: the held calls alone, the stepped run's numbers within one step
    calls: list[int] = []
    real = QdqMatMul.__call__

    def counted(self: QdqMatMul, ex: Any, ins: list[Any]) -> list[Any]:
        calls.append(1)
        return real(self, ex, ins)

    monkeypatch.setattr(QdqMatMul, "__call__", counted)
    steps = _steps(model, outs)
    for shape in ([3, 5, 40], [1, 2, 40]):
        other_feeds = {"x": rng.normal(0, 2, shape).astype(np.float32)}
        got = session.run(other_feeds)
        want_runs = stepped_values(model, other_feeds)
        for name, step in steps.items():
            assert np.abs(got[name] - want_runs[name]).max() <= step * (1 + 1e-4), name
    assert not calls


@needs_int8
def test_a_kept_qdq_gemm_given_a_3d_input_fails_as_stepping(tmp_path: Path) -> None:
    """A QDQ Gemm kept for its 2-D input (`_Ready`, its held call) given a 3-D one later:
    Gemm's own error naming the node, as the stepped run gives it, not a product of the
    rows (the kept call had computed one)."""
    rng = np.random.default_rng(6)
    w = (rng.standard_normal((48, 32)) / 6).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            onnx.numpy_helper.from_array(w, "w"),
            onnx.numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    feeds = {"x": rng.standard_normal((16, 32)).astype(np.float32)}
    quantized = quantize_static_qdq(model, feeds, tmp_path, "QUInt8")
    assert _fused(quantized) == _here(1)
    session = Session(quantized)
    for _ in range(2):  # the call kept, then the held one
        session.run(feeds)
    flat = {"x": rng.standard_normal((2, 8, 32)).astype(np.float32)}
    for run in (session, Session(quantized, fuse_ops=False)):
        with pytest.raises(ExecutionError, match="Gemm needs 2-D A"):
            run.run(flat)
