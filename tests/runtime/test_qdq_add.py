"""The residual Add between QDQ pairs run over the codes (fusion_qdq_add.QdqAdd): the C
pass against the nodes' numpy steps at every level, and whole graphs with and without the
fusion, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from onnxviz.runtime import fusion, fusion_qdq_add, native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level
from tests.runtime.qdq_graphs import QdqGraph

_LEVELS = [lv for lv in native.levels() if lv >= native.AVX2]
pytestmark = pytest.mark.skipif(
    native.load("int8") is None or not _LEVELS, reason="the int8 kernel needs AVX2"
)


def _module() -> Any:
    return native.load("int8")


def _quantize(v: np.ndarray, s: np.float32, z: int, dtype: Any) -> np.ndarray:
    info = np.iinfo(dtype)
    t = np.rint(np.divide(v, s, dtype=np.float32)) + np.float32(z)
    return np.clip(t, info.min, info.max).astype(dtype)


def _dequantize(t: np.ndarray, s: np.float32, z: int) -> np.ndarray:
    return (t.astype(np.float32) - np.float32(z)) * s


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 300),
    a_codes=st.booleans(),
    b_codes=st.booleans(),
    signs=st.tuples(st.booleans(), st.booleans(), st.booleans()),
    relu=st.booleans(),
    with_float=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_qadd_is_the_nodes_float32_steps(
    n: int,
    a_codes: bool,
    b_codes: bool,
    signs: tuple[bool, bool, bool],
    relu: bool,
    with_float: bool,
    seed: int,
) -> None:
    """DequantizeLinear of each 8-bit input (a float input as it is), Add, [Relu],
    QuantizeLinear, DequantizeLinear: the same bytes and floats as the numpy steps."""
    rng = np.random.default_rng(seed)
    inputs = []
    for codes, signed in ((a_codes, signs[0]), (b_codes, signs[1])):
        dtype = np.int8 if signed else np.uint8
        info = np.iinfo(dtype)
        s = np.float32(rng.uniform(0.005, 0.1))
        z = int(rng.integers(info.min, info.max + 1))
        if codes:
            x = rng.integers(info.min, info.max + 1, n).astype(dtype)
            inputs.append((x, True, signed, s, z, _dequantize(x, s, z)))
        else:
            x = rng.normal(0, 3, n).astype(np.float32)
            inputs.append((x, False, False, np.float32(1), 0, x))
    o_signed = signs[2]
    odt = np.int8 if o_signed else np.uint8
    qs, qz = (
        np.float32(rng.uniform(0.01, 0.1)),
        int(rng.integers(-20, 20) + (0 if o_signed else 100)),
    )
    v = inputs[0][5] + inputs[1][5]
    if relu:
        v = np.maximum(v, np.float32(0))
    want_t = _quantize(v, qs, qz, odt)
    want_f = _dequantize(want_t, qs, qz)
    for level in _LEVELS:
        with at_level("int8", level):
            t = np.empty(n, odt)
            f = np.empty(n, np.float32) if with_float else bytearray()
            args = []
            for x, codes, signed, s, z, _ in inputs:
                args += [x, codes, signed, float(s), z]
            status = _module().qadd(*args, relu, o_signed, float(qs), qz, float(qs), qz, t, f)
            assert status == 0
            np.testing.assert_array_equal(t, want_t, err_msg=f"level {level}")
            if with_float:
                np.testing.assert_array_equal(f, want_f, err_msg=f"level {level}")
    # A NaN met by the quantizer is reported (the node then runs its nodes).
    if not a_codes:
        bad = inputs[0][0].copy()
        bad[n // 2] = np.nan
        args = [bad, False, False, 1.0, 0, *inputs[1][:5]]
        assert (
            _module().qadd(*args, relu, o_signed, 0.05, 0, 0.05, 0, np.empty(n, odt), bytearray())
            == -1
        )


def _residual_model(
    seed: int,
    c: int,
    size: int,
    signed: bool,
    relu_after_add: bool,
    keep_block: bool,
    tail_conv: bool = False,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x -> pair -> conv -> pair -> conv -> pair -> Add(skip: x's pair) -> [Relu] -> pair
    (block 1), then conv -> pair -> Add(block 1's pair) -> pair (block 2), then Add(block
    2's pair, x2 float) -> pair: every way a QdqAdd reads an input."""
    g = QdqGraph(seed, signed, (100, 140))
    x = g.pair("x", "in")
    block1 = g.add(
        g.conv(g.conv(x, "c1", c, c, 3), "c2", c, c, 3, relu=False), x, "a1", relu_after_add
    )
    if tail_conv:  # (``tail_conv``: block 1's pair read by one conv alone, then the end)
        out = g.conv(block1, "c3", c, c, 3, relu=False)
        g.nodes.append(helper.make_node("Add", [out, "x2"], ["x2_sum"]))  # keeps x2 an input
        out = "x2_sum"
    else:
        block2 = g.add(g.conv(block1, "c3", c, c, 3, relu=False), block1, "a2", relu_after_add)
        out = g.add(block2, "x2", "a3", False)
    shape = [1, c, size, size]
    return g.model({"x": shape, "x2": shape}, [out, block1] if keep_block else [out])


def _run_without_adds(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    before = fusion.find_qdq_adds
    fusion.find_qdq_adds = lambda *args: []  # type: ignore[assignment]
    try:
        session = Session(model)
        assert not any(type(pn.fused).__name__ == "QdqAdd" for pn in run_nodes(session.plan))
        return session.run(feeds)
    finally:
        fusion.find_qdq_adds = before


@settings(max_examples=20, deadline=None)
@given(
    c=st.sampled_from([8, 16]),
    size=st.sampled_from([5, 12]),
    signed=st.booleans(),
    relu_after_add=st.booleans(),
    keep_block=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_residual_blocks_over_codes_are_the_float_adds_bit_for_bit(
    c: int, size: int, signed: bool, relu_after_add: bool, keep_block: bool, seed: int
) -> None:
    """A QDQ residual graph's unwatched run with its Adds over the codes equals, bit for
    bit, the same run with the Adds as float nodes between float pairs (the convs the
    same integer products both ways): each input read as absorbed codes, another Add's
    exposed codes or a float, the block's float written only when a graph output."""
    model, feeds = _residual_model(seed, c, size, signed, relu_after_add, keep_block)
    want = _run_without_adds(model, feeds)
    for level in _LEVELS:
        with at_level("int8", level):
            session = Session(model)
            adds = [
                pn.fused for pn in run_nodes(session.plan) if type(pn.fused).__name__ == "QdqAdd"
            ]
            assert [a.modes for a in adds] == [
                ("absorbed", "float"),
                ("absorbed", "exposed"),
                ("exposed", "float"),
            ]
            assert [a.float_needed for a in adds] == [keep_block, False, True]
            for _ in range(2):  # the first call, then the converted arguments
                got = session.run(feeds)
                assert got.keys() == want.keys()
                for name in want:
                    np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("signed", [False, True])
def test_a_block_read_by_one_conv_alone_gives_it_the_codes(signed: bool) -> None:
    """A block whose output pair only one conv reads: that conv's chain gives up the pair
    (it had taken it as its input pair) and reads the Add's codes; bit for bit the run
    with the Adds as nodes."""
    model, feeds = _residual_model(11, 8, 7, signed, True, False, tail_conv=True)
    want = _run_without_adds(model, feeds)
    for level in _LEVELS:
        with at_level("int8", level):
            session = Session(model)
            fused = [pn.fused for pn in run_nodes(session.plan) if pn.kind == "fused"]
            adds = [f for f in fused if type(f).__name__ == "QdqAdd"]
            convs = [f for f in fused if type(f).__name__ == "QdqConv"]
            assert [a.float_needed for a in adds] == [False]
            assert convs[-1].codes_dq is not None  # the last conv reads the Add's codes
            got = session.run(feeds)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_a_nan_runs_the_nodes_with_exposed_codes_dequantized_first() -> None:
    """A NaN in the float input of the last Add: that node runs its nodes one by one,
    its exposed input dequantized first, and gives the values of the same run with the
    Adds as nodes."""
    model, feeds = _residual_model(3, 8, 6, False, True, False)
    feeds["x2"][0, 1, 2, 3] = np.nan
    want = _run_without_adds(model, feeds)
    fallbacks: list[tuple[str, ...]] = []
    original = fusion_qdq_add.QdqAdd._one_by_one

    def counted(self: Any, ex: Any, ins: list[Any]) -> list[Any]:
        fallbacks.append(self.modes)
        return original(self, ex, ins)

    fusion_qdq_add.QdqAdd._one_by_one = counted  # type: ignore[method-assign]
    try:
        with at_level("int8", _LEVELS[-1]):
            got = Session(model).run(feeds)
    finally:
        fusion_qdq_add.QdqAdd._one_by_one = original  # type: ignore[method-assign]
    assert fallbacks == [("exposed", "float")]  # the last Add only
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
