"""A QDQ model's 1x1 conv run as an exact integer product over channels-last pixel rows
(fusion_qdq_pointwise.QdqPointwise): graphs against stepping within one quantization
step (random shapes, types and arrangements: the input pair absorbed, shared with another
reader, after a depthwise conv, after another 1x1 conv), the node against a numpy model of
its definition bit for bit on its first call and its held one at every level, its place
in the channels-last layout, and what it leaves to the other paths."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.fusion_layout import is_conv_chain
from onnxviz.runtime.fusion_qdq_pointwise import MIN_CHANNELS, QdqPointwise
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.kernels.nn_conv_nhwc import is_channels_last
from onnxviz.runtime.session import Session
from tests.runtime.differential import assert_modes_agree, stepped_values
from tests.runtime.native_modules import at_level
from tests.runtime.qdq_graphs import QdqGraph

pytestmark = pytest.mark.numeric

_LEVELS = [lv for lv in native.levels() if lv >= native.AVX2]
needs_int8 = pytest.mark.skipif(
    native.load("int8") is None or not _LEVELS, reason="the int8 kernel needs AVX2"
)
# Whether plans made at this process's level hold QdqPointwise nodes: find_qdq_pointwise's
# own condition, the compiled int8 module at AVX2 or better (int8_products.module(); None
# at ONNXVIZ_NATIVE=generic, where the float conv chains and their pairs run the 1x1 convs).
_FUSES = int8_products.module() is not None
needs_the_node = pytest.mark.skipif(
    not _FUSES, reason="no QdqPointwise at this level: the int8 products need AVX2"
)


def _graph(
    seed: int,
    signed: bool,
    arrangement: str,
    c: int,
    m: int,
    per_channel: bool = True,
    weight_signed: bool = True,
    bias: bool = True,
    shape: tuple[int, int, int] = (1, 5, 6),
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, float]]:
    """x -> ... -> a 1x1 conv's chain (model, feeds, each conv output pair's step).
    ``arrangement``: "alone" (the input pair only the conv reads: absorbed), "shared" (a
    Relu reads the pair's value too: the codes read back from it), "depthwise" (after a
    depthwise conv and a Relu: a channels-last input), "chained" (a second 1x1 conv
    reads the first one's output pair).  Every graph has a depthwise conv."""
    g = QdqGraph(seed, signed, (100, 156))
    n, h, w = shape
    outs: list[str] = []
    if arrangement == "depthwise":
        d = g.depthwise(g.pair("x", "xp"), "dw", c)
        xp = g.pair(g.relu(d, "dr"), "hp")
    else:
        xp = g.pair("x", "xp")
    first = g.pointwise(xp, "pw0", c, m, per_channel, weight_signed, bias)
    outs.append(first)
    if arrangement == "shared":
        outs.append(g.relu(xp, "xr"))
    if arrangement == "chained":
        outs.append(g.pointwise(first, "pw1", m, c + 3, per_channel, weight_signed, bias))
    if arrangement != "depthwise":
        # A depthwise conv beside them: a separable model, whose 1x1 convs the NCHW QDQ
        # conv node (fusion_qdq_conv.py) leaves to this one.
        outs.append(g.depthwise(g.pair("x", "sp"), "side", c))
    model, feeds = g.model({"x": [n, c, h, w]}, outs)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    steps = {o: float(inits[o + "_s"]) for o in outs if o.startswith("pw")}
    return model, feeds, steps


def _fused(model: onnx.ModelProto) -> list[QdqPointwise]:
    return [pn.fused for pn in run_nodes(Session(model).plan) if isinstance(pn.fused, QdqPointwise)]


@needs_int8
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    signed=st.booleans(),
    arrangement=st.sampled_from(["alone", "shared", "depthwise", "chained"]),
    c=st.sampled_from([MIN_CHANNELS, 40, 64, 97]),
    m=st.integers(1, 80),
    per_channel=st.booleans(),
    weight_signed=st.booleans(),
    bias=st.booleans(),
    shape=st.sampled_from([(1, 1, 1), (1, 5, 6), (2, 7, 3), (1, 14, 14)]),
)
def test_pointwise_graphs_agree_with_stepping(
    seed: int,
    signed: bool,
    arrangement: str,
    c: int,
    m: int,
    per_channel: bool,
    weight_signed: bool,
    bias: bool,
    shape: tuple[int, int, int],
) -> None:
    """Within one output step of the stepped float32 conv (only at a rounding boundary),
    on the first run and on the held call's later runs with new values; the other
    readers' values exactly."""
    model, feeds, steps = _graph(
        seed, signed, arrangement, c, m, per_channel, weight_signed, bias, shape
    )
    # (the second conv of a chain reads m channels: below MIN_CHANNELS it stays float)
    fused = 1 + (arrangement == "chained" and m >= MIN_CHANNELS)
    assert len(_fused(model)) == (fused if _FUSES else 0)
    for level in _LEVELS:
        with at_level("int8", level):
            assert_modes_agree(model, feeds, steps=steps)
            session = Session(model)
            session.run(feeds)
            other = {"x": np.random.default_rng(seed + 1).normal(0, 2, feeds["x"].shape)}
            other["x"] = other["x"].astype(np.float32)
            got = session.run(other)  # the held call, new values
            want = stepped_values(model, other)
            for name, step in steps.items():
                assert np.abs(got[name] - want[name]).max() <= step * (1 + 1e-4), name
            if "xr" in got:
                np.testing.assert_array_equal(got["xr"], want["xr"])


def _product_quantize(v: np.ndarray, s: np.ndarray, z: np.ndarray) -> np.ndarray:
    """The output quantizer as the node takes it: QuantizeLinear's float32 steps with the
    division a product by float32(1 / s)."""
    info = np.iinfo(z.dtype)
    r = np.float32(1) / np.float32(s)
    q = np.rint(np.multiply(v, r, dtype=np.float32)) + np.float32(z)
    return np.clip(q, info.min, info.max).astype(z.dtype)


def _quantize(v: np.ndarray, s: np.ndarray, z: np.ndarray) -> np.ndarray:
    """QuantizeLinear's float32 steps: divide, round half to even, add, clip."""
    info = np.iinfo(z.dtype)
    q = np.rint(np.divide(v, np.float32(s), dtype=np.float32)) + np.float32(z)
    return np.clip(q, info.min, info.max).astype(z.dtype)


def _definition(inits: dict[str, Any], codes: np.ndarray, pair: str, conv: str) -> np.ndarray:
    """(t - zd) . (W - zw) exactly, float32(acc) * float32(sd * sw[m]) + b[m], then the
    output pair's float32 steps, in numpy (NCHW)."""
    zd, sd = inits[pair + "_z"], inits[pair + "_s"]
    w = inits[conv + "_w"].astype(np.int64)[:, :, 0, 0] - inits[conv + "_wz"].astype(np.int64).reshape(-1, 1)  # fmt: skip
    acc = np.einsum("nchw,mc->nmhw", codes.astype(np.int64) - np.int64(zd), w)
    scale = (sd * inits[conv + "_ws"]).astype(np.float32).reshape(1, -1, 1, 1)
    v = acc.astype(np.float32) * scale
    if conv + "_b" in inits:
        v = v + inits[conv + "_b"].reshape(1, -1, 1, 1)
    qs, qz = inits[conv + "_p_s"], inits[conv + "_p_z"]
    q = _product_quantize(v, qs, qz)
    return (q.astype(np.float32) - np.float32(qz)) * qs


@needs_int8
@pytest.mark.parametrize("arrangement", ["alone", "shared", "depthwise", "chained"])
@pytest.mark.parametrize("signed", [True, False])
def test_the_fused_node_is_its_definition_bit_for_bit(arrangement: str, signed: bool) -> None:
    """The numpy model of the definition gives the same bits on the first call and the
    held one, at every level: with the input codes from its quantizer (absorbed) or read
    back from the dequantized value (shared, chained: exactly the stepped codes)."""
    model, feeds, _steps = _graph(21, signed, arrangement, 48, 37, shape=(2, 9, 7))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    stepped = stepped_values(model, feeds)
    pair = "hp" if arrangement == "depthwise" else "xp"
    want = _definition(inits, stepped[pair + "_q"], pair, "pw0")
    for level in _LEVELS:
        with at_level("int8", level):
            session = Session(model)
            for _ in range(2):  # the first call, then the held one
                got = session.run(feeds)
                np.testing.assert_array_equal(got["pw0_p"], want, err_msg=f"level {level}")
                if arrangement == "chained":
                    # the second conv reads its codes back from the first one's value
                    back = _quantize(got["pw0_p"], inits["pw0_p_s"], inits["pw0_p_z"])
                    second = _definition(inits, back, "pw0_p", "pw1")
                    np.testing.assert_array_equal(got["pw1_p"], second)


@needs_the_node
def test_it_reads_and_writes_channels_last() -> None:
    """After a depthwise conv the node's input arrives channels-last (the depthwise conv
    keeps its layout for it: no transposing copy in between) and its output is
    channels-last rows too."""
    model, feeds, _steps = _graph(4, False, "depthwise", 64, 40, shape=(1, 8, 8))
    session = Session(model)
    session.run(feeds)
    plan = run_nodes(session.plan)
    (depthwise,) = [pn for pn in plan if is_conv_chain(pn)]
    assert depthwise.fused.layout.emit
    node = next(pn.fused for pn in plan if isinstance(pn.fused, QdqPointwise))
    seen: list[tuple[bool, bool]] = []
    rows = QdqPointwise._rows

    def watched(mod: Any, ready: Any, x: np.ndarray) -> np.ndarray | None:
        y = rows(mod, ready, x)
        seen.append((is_channels_last(x), y is not None and is_channels_last(y)))
        return y

    node._rows = watched  # type: ignore[method-assign]
    session.run(feeds)
    assert seen == [(True, True)]


@needs_int8
def test_what_the_node_does_not_take_stays_as_before() -> None:
    """Fewer than MIN_CHANNELS input channels, weight zero points that differ by channel,
    a strided or padded 1x1: no node (the float conv chain and its pairs run them); a NaN
    met at run time: the node runs its steps one by one, the stepped values exactly."""
    few, feeds, _ = _graph(1, False, "alone", MIN_CHANNELS - 1, 20)
    assert not _fused(few)
    assert_modes_agree(few, feeds)
    zeros, feeds, _ = _graph(2, False, "alone", 40, 20, weight_signed=False)
    for init in zeros.graph.initializer:
        if init.name == "pw0_wz":
            varied = np.arange(20).astype(np.uint8) + 120
            init.CopyFrom(onnx.numpy_helper.from_array(varied, "pw0_wz"))
    assert not _fused(zeros)
    assert_modes_agree(zeros, feeds)
    for attrs in ({"strides": [2, 2]}, {"pads": [1, 1, 1, 1]}):
        model, feeds, _ = _graph(3, True, "alone", 40, 20)
        conv = next(n for n in model.graph.node if n.op_type == "Conv")
        conv.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
        assert not _fused(model), attrs
    model, feeds, _ = _graph(5, True, "shared", 40, 20)
    assert bool(_fused(model)) == _FUSES
    feeds["x"][0, 3, 1, 1] = np.nan
    session = Session(model)
    want = stepped_values(model, feeds)
    with np.errstate(invalid="ignore"):
        for _ in range(2):
            got = session.run(feeds)
            for name in ("pw0_p", "xr"):
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@needs_the_node
def test_a_separable_models_pairs_go_into_the_node() -> None:
    """The input pair the conv alone reads and its output pair are the node's: no other
    node of the plan makes their codes or values (a QdqPair pass each, before)."""
    model, _feeds, _ = _graph(6, True, "depthwise", 64, 24)
    plan = run_nodes(Session(model).plan)
    (node,) = [pn for pn in plan if isinstance(pn.fused, QdqPointwise)]
    assert node.output_names == ("pw0_p",)
    made = {name for pn in plan if pn is not node for name in pn.output_names}
    assert not made.intersection({"hp_q", "hp", "pw0_y", "pw0_p_q", "pw0_p"})
    assert "dr" in made  # the Relu's value the absorbed pair quantizes
