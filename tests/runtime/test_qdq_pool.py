"""The MaxPool between QDQ pairs run over the codes (fusion_qdq_pool.QdqMaxPool): the C
pool against numpy at every level, and graphs with and without the fusion, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import fusion, native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level
from tests.runtime.qdq_graphs import QdqGraph

_LEVELS = [lv for lv in native.levels() if lv >= native.AVX2]
pytestmark = pytest.mark.skipif(
    native.load("int8") is None or not _LEVELS, reason="the int8 kernel needs AVX2"
)


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(1, 20),
    w=st.integers(1, 40),
    kernel=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pads=st.tuples(*(st.integers(0, 3) for _ in range(4))),
    signed=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_max_pool_codes_is_the_window_max(
    h: int,
    w: int,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
    signed: bool,
    seed: int,
) -> None:
    kh, kw = kernel
    pt, pl, pb, pr = (min(p, k - 1) for p, k in zip(pads, (kh, kw, kh, kw)))
    if h + pt + pb < kh or w + pl + pr < kw:
        return
    rng = np.random.default_rng(seed)
    dtype = np.int8 if signed else np.uint8
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (2, 3, h, w)).astype(dtype)
    oh, ow = (h + pt + pb - kh) // stride[0] + 1, (w + pl + pr - kw) // stride[1] + 1
    padded = np.pad(x.astype(np.int32), ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=-999)
    windows = [
        padded[:, :, i : i + stride[0] * oh : stride[0], j : j + stride[1] * ow : stride[1]]
        for i in range(kh)
        for j in range(kw)
    ]
    want = np.max(np.stack(windows), axis=0).astype(dtype)
    module = native.load("int8")
    for level in _LEVELS:
        with at_level("int8", level):
            got = np.empty((2, 3, oh, ow), dtype)
            module.max_pool_codes(x, 6, h, w, kh, kw, *stride, pt, pl, pb, pr, signed, got)
            np.testing.assert_array_equal(got, want, err_msg=f"level {level}")


def _pool_model(
    seed: int, signed: bool, same_pair: bool, keep_pool: bool, stride: int
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x -> pair -> conv 7x7/2 -> pair -> MaxPool 3x3 -> pair -> (conv -> pair) + pool's
    pair -> Add -> pair: the stem of a QDQ ResNet."""
    g = QdqGraph(seed, signed, (0, 40))
    x = g.pair("x", "in")
    stem = g.conv(x, "stem", 3, 8, 7, 2)
    g.nodes.append(
        helper.make_node(
            "MaxPool", [stem], ["mp"], kernel_shape=[3, 3], strides=[stride] * 2, pads=[1] * 4
        )
    )
    pooled = g.pair("mp", "mp_p", "stem_p" if same_pair else None)
    branch = g.conv(pooled, "c1", 8, 8, 3)
    g.nodes.append(helper.make_node("Add", [branch, pooled], ["sum"]))
    out = g.pair("sum", "out")
    return g.model({"x": [1, 3, 30, 30]}, [out, pooled] if keep_pool else [out])


def _run_without_pools(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    before = fusion.find_qdq_max_pools
    fusion.find_qdq_max_pools = lambda *args: []  # type: ignore[assignment]
    try:
        session = Session(model)
        kinds = {type(pn.fused).__name__ for pn in run_nodes(session.plan)}
        assert "QdqMaxPool" not in kinds
        return session.run(feeds)
    finally:
        fusion.find_qdq_max_pools = before


@settings(max_examples=20, deadline=None)
@given(
    signed=st.booleans(),
    same_pair=st.booleans(),
    keep_pool=st.booleans(),
    stride=st.sampled_from([1, 2]),
    seed=st.integers(0, 2**16),
)
def test_stem_pool_over_codes_is_the_float_pool_bit_for_bit(
    signed: bool, same_pair: bool, keep_pool: bool, stride: int, seed: int
) -> None:
    """The pool over the stem's codes gives, bit for bit, the run with the pool over the
    dequantized floats: with its pair the stem's (the identity table) or its own (a table
    of the 256 codes), its float written only when a graph output."""
    model, feeds = _pool_model(seed, signed, same_pair, keep_pool, stride)
    want = _run_without_pools(model, feeds)
    for level in _LEVELS:
        with at_level("int8", level):
            session = Session(model)
            pools = [
                pn.fused
                for pn in run_nodes(session.plan)
                if type(pn.fused).__name__ == "QdqMaxPool"
            ]
            assert len(pools) == 1 and pools[0].float_needed == keep_pool
            for _ in range(2):
                got = session.run(feeds)
                for name in want:
                    np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("signed", [False, True])
def test_a_pool_read_by_one_conv_alone_gives_it_the_codes(signed: bool) -> None:
    """conv -> pair -> MaxPool -> pair -> conv, the pool's pair read by the second conv
    alone (a VGG-style chain): that conv gives up the pair it had taken as its input
    pair and reads the pool's codes; bit for bit the run with the pool over floats."""
    model, feeds = _pool_model(13, signed, True, False, 2)
    graph = model.graph
    kept = [n for n in graph.node if n.op_type != "Add" and not n.output[0].startswith("out")]
    del graph.node[:]
    graph.node.extend(kept)
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("c1_p", TensorProto.FLOAT, None))
    want = _run_without_pools(model, feeds)
    for level in _LEVELS:
        with at_level("int8", level):
            session = Session(model)
            fused = [pn.fused for pn in run_nodes(session.plan) if pn.kind == "fused"]
            kinds = [type(f).__name__ for f in fused]
            assert kinds == ["QdqConv", "QdqMaxPool", "QdqConv"]
            assert not fused[1].float_needed and fused[2].codes_dq is not None
            got = session.run(feeds)
        np.testing.assert_array_equal(got["c1_p"], want["c1_p"], err_msg=f"level {level}")


def test_a_negative_scale_runs_the_nodes() -> None:
    """A dequantizer with a negative scale is decreasing (the max is the dequantized least
    code): the node runs its nodes, and gives their values."""
    model, feeds = _pool_model(5, False, True, True, 2)
    for t in model.graph.initializer:
        if t.name == "stem_p_s":
            t.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(t), t.name))
    want = _run_without_pools(model, feeds)
    with at_level("int8", _LEVELS[-1]):
        got = Session(model).run(feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
