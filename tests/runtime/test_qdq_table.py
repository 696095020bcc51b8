"""A QDQ model's elementwise chain of one quantized value run as a table of its 256 codes
(fusion_qdq_table.QdqTable): random chains of the steps it takes give the stepped run's
bits at every level, with the pair absorbed or its codes read back, channels-last too,
with NaNs and infinities in the input; the kernel against its definition; what the
finder leaves to the other paths; the table made once."""

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
from onnxviz.runtime.fusion_qdq_table import QdqTable
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.kernels.nn_conv_nhwc import is_channels_last
from onnxviz.runtime.session import Session
from tests.runtime.differential import assert_stepped_bits, stepped_values
from tests.runtime.native_modules import at_level
from tests.runtime.qdq_graphs import QdqGraph

pytestmark = pytest.mark.numeric

_INT8 = native.load("int8")
needs_int8 = pytest.mark.skipif(_INT8 is None, reason="the int8 kernels are not built")
_LEVELS = native.levels()
# Whether plans made at this process's level hold QdqTable nodes: find_qdq_tables' own
# condition, the compiled int8 module at AVX2 or better (int8_products.module(); None at
# ONNXVIZ_NATIVE=generic, where the float chains and pairs run the steps).
_TABLES = int8_products.module() is not None
_COSTLY = {"silu", "tanh", "erf", "sigmoid"}

# The steps a chain is drawn from: (name, how it is written after a value v).
_STEPS = [
    "silu",  # Sigmoid -> pair -> Mul(v, gate): onnxruntime.quantization's SiLU
    "hardswish",
    "hardsigmoid",
    "relu",
    "leakyrelu",
    "clip",
    "tanh",
    "erf",
    "sigmoid",
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "abs",
    "max",
    "min",
    "pair",
]


def _step(g: QdqGraph, v: str, kind: str, name: str) -> str:
    """``kind`` applied to ``v``; its output's name."""
    out = name + "_" + kind

    def node(op: str, ins: list[str], **attrs: Any) -> str:
        g.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def const(value: float) -> str:
        return g.scalar(name + "_c", value, np.float32)

    if kind == "silu":
        g.nodes.append(helper.make_node("Sigmoid", [v], [name + "_sig"]))
        gate = g.pair(name + "_sig", name + "_g")
        return node("Mul", [v, gate] if g.rng.random() < 0.5 else [gate, v])
    if kind == "pair":
        return g.pair(v, out)
    if kind in ("add", "sub", "mul", "div", "max", "min"):
        c = const(float(g.rng.uniform(0.5, 2.0)) * (1 if kind in ("mul", "div") else -1))
        ins = [v, c] if g.rng.random() < 0.5 or kind == "div" else [c, v]
        return node(kind.capitalize(), ins)
    if kind == "clip":
        lo, hi = sorted(g.rng.uniform(-2, 2, 2).tolist())
        return node("Clip", [v, const(lo), g.scalar(name + "_hi", hi, np.float32)])
    if kind == "leakyrelu":
        return node("LeakyRelu", [v], alpha=float(g.rng.uniform(0.01, 0.3)))
    if kind == "hardsigmoid":
        return node("HardSigmoid", [v], alpha=0.2, beta=0.5)
    op = {
        "hardswish": "HardSwish",
        "relu": "Relu",
        "tanh": "Tanh",
        "erf": "Erf",
        "sigmoid": "Sigmoid",
        "neg": "Neg",
        "abs": "Abs",
    }[kind]
    return node(op, [v])


def _model(
    seed: int,
    signed: bool,
    kinds: list[str],
    head: str,
    end_pair: bool,
    shape: tuple[int, ...] = (1, 8, 5, 6),
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x -> [head] -> pair = v -> the steps ``kinds`` [-> pair] -> output "y".
    ``head``: "input" (x's own pair, only the chain reads it: absorbed), "shared" (a
    graph output reads the pair's value too: its codes are read back), "depthwise" (a
    QDQ depthwise conv's output pair, then another depthwise conv reads the chain: a
    channels-last value through the chain)."""
    g = QdqGraph(seed, signed, (100, 156))
    outputs = ["y"]
    if head == "depthwise":
        v = g.depthwise(g.pair("x", "xp"), "dw", shape[1])
    else:
        v = g.pair("x", "xp")
    if head == "shared":
        outputs.append(g.relu(v, "shared"))
    for k, kind in enumerate(kinds):
        v = _step(g, v, kind, f"s{k}")
    if end_pair:
        v = g.pair(v, "yp")
    if head == "depthwise":
        v = g.depthwise(v, "dw2", shape[1])
    g.nodes.append(helper.make_node("Identity", [v], ["y"]))
    model, feeds = g.model({"x": list(shape)}, outputs)
    model.opset_import[0].version = 17  # (HardSwish: 14)
    feeds["x"] = (feeds["x"] * 3).astype(np.float32)
    return model, feeds


def _tables(model: onnx.ModelProto) -> list[QdqTable]:
    return [pn.fused for pn in run_nodes(Session(model).plan) if isinstance(pn.fused, QdqTable)]


@needs_int8
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    signed=st.booleans(),
    kinds=st.lists(st.sampled_from(_STEPS), min_size=1, max_size=4),
    head=st.sampled_from(["input", "shared", "depthwise"]),
    end_pair=st.booleans(),
    shape=st.sampled_from([(1, 8, 5, 6), (2, 3, 7, 1), (1, 16, 9, 9), (3, 17)]),
)
def test_chains_give_the_stepped_bits(
    seed: int, signed: bool, kinds: list[str], head: str, end_pair: bool, shape: tuple[int, ...]
) -> None:
    """Every graph output equals the stepped run's bits at every level, first run and
    kept table, with new input values too."""
    if head == "depthwise" and len(shape) != 4:
        shape = (1, 8, 5, 6)
    model, feeds = _model(seed, signed, kinds, head, end_pair, shape)
    if _COSTLY.intersection(kinds):
        assert len(_tables(model)) == (1 if _TABLES else 0)
    else:
        assert not _tables(model)  # (cheap steps: the float chain's one pass)
    other = {"x": np.random.default_rng(seed + 1).normal(0, 4, shape).astype(np.float32)}
    for level in _LEVELS:
        with at_level("int8", level):
            session, _ = assert_stepped_bits(model, feeds)
            got, want = session.run(other), stepped_values(model, other)
            for name in got:
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@needs_int8
@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("head", ["input", "shared"])
def test_nan_and_infinities_give_the_stepped_values(signed: bool, head: str) -> None:
    """A NaN runs the nodes one by one (QuantizeLinear's cast of it is the platform's);
    infinities and values far outside the codes' range clip as stepped."""
    model, feeds = _model(3, signed, ["silu"], head, True)
    x = feeds["x"]
    x.reshape(-1)[:6] = [np.inf, -np.inf, 1e30, -1e30, 3.4e38, -0.0]
    for level in _LEVELS:
        with at_level("int8", level):
            assert_stepped_bits(model, {"x": x})
    x.reshape(-1)[7] = np.nan
    want = stepped_values(model, {"x": x})
    got = Session(model).run({"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])


@needs_int8
def test_channels_last_passes_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between two depthwise convs the chain reads and writes the channels-last buffer
    (no transposing copy) and the second conv's output is the stepped one."""
    model, feeds = _model(5, False, ["silu"], "depthwise", True, (1, 16, 9, 9))
    seen: list[bool] = []
    real = QdqTable.__call__

    def spy(self: QdqTable, ex: Any, ins: list[Any]) -> list[Any]:
        out = real(self, ex, ins)
        seen.append(is_channels_last(ins[0]) and is_channels_last(out[0]))
        return out

    monkeypatch.setattr(QdqTable, "__call__", spy)
    assert_stepped_bits(model, feeds)
    assert seen == ([True, True] if _TABLES else [])


@needs_int8
@pytest.mark.parametrize("level", _LEVELS)
@pytest.mark.parametrize("signed", [False, True])
def test_the_kernel_is_its_definition(level: int, signed: bool) -> None:
    """table[byte of QuantizeLinear(x)] for every length up to two vectors and a long
    one, every level: the same bits, a NaN reported."""
    assert _INT8 is not None
    rng = np.random.default_rng(level * 2 + signed)
    table = rng.normal(0, 1, 256).astype(np.float32)
    z = -7 if signed else 131
    lo, hi = (-128, 127) if signed else (0, 255)
    with at_level("int8", level):
        for n in [*range(0, 40), 1000]:
            x = (rng.normal(0, 200, n) * 0.05).astype(np.float32)
            if n > 3:
                x[:3] = [np.inf, -np.inf, 0.025]  # (a tie: half to even)
            s = np.float32(0.05)
            codes = np.clip(np.rint(x / s) + z, lo, hi).astype(np.int8 if signed else np.uint8)
            out = np.empty_like(x)
            assert _INT8.qdq_table(x, s, z, signed, table, out) == 0
            np.testing.assert_array_equal(out, table[codes.view(np.uint8)], err_msg=str(n))
            if n:
                x[n // 2] = np.nan
                assert _INT8.qdq_table(x, s, z, signed, table, out) == -1
        with pytest.raises(ValueError, match="qdq_table"):
            _INT8.qdq_table(np.zeros(4, np.float32), 0.1, 0, False, table[:255], np.zeros(4))


def _one_chain(extra: str) -> onnx.ModelProto:
    """x -> pair -> SiLU -> pair, with ``extra`` changing one thing."""
    g = QdqGraph(11, False, (100, 156))
    v = g.pair("x", "xp")
    outputs = ["y"]
    if extra in ("per_channel", "live_operand"):
        c = g.scalar("pc", np.linspace(0.5, 1.5, 4).reshape(1, 4, 1, 1), np.float32)
        g.nodes.append(helper.make_node("Mul", [v, c if extra == "per_channel" else "x"], ["m"]))
        v = _step(g, "m", "silu", "s")
    elif extra == "cheap":
        v = _step(g, _step(g, v, "relu", "r"), "add", "a")
    elif extra == "codes_out":
        g.nodes.append(helper.make_node("Sigmoid", [v], ["sg"]))
        g.nodes.append(helper.make_node("QuantizeLinear", ["sg", "xp_s", "xp_z"], ["codes"]))
        g.nodes.append(helper.make_node("Cast", ["codes"], ["y"], to=onnx.TensorProto.FLOAT))
        return g.model({"x": [1, 4, 3, 3]}, outputs)[0]
    else:
        v = _step(g, v, "silu", "s")
    if extra == "middle_read":
        outputs.append("s_sig")  # the gate is a graph output
    g.nodes.append(helper.make_node("Identity", [g.pair(v, "yp")], ["y"]))
    return g.model({"x": [1, 4, 3, 3]}, outputs)[0]


@needs_int8
def test_what_it_leaves_to_the_other_paths() -> None:
    assert len(_tables(_one_chain("plain"))) == (1 if _TABLES else 0)
    # A per-channel operand or a live one before the SiLU, or only cheap steps: the
    # nodes stay for the float chains and pairs.
    for extra in ("per_channel", "live_operand", "cheap"):
        assert not _tables(_one_chain(extra)), extra
    if _TABLES:
        # Codes out (a table is of floats): the chain ends before the quantizer.
        (codes_out,) = _tables(_one_chain("codes_out"))
        steps = [s.op_type for s in codes_out.steps]
        assert steps == ["QuantizeLinear", "DequantizeLinear", "Sigmoid"]
    # The gate is read outside: no chain holds both the Sigmoid and the Mul.
    for table in _tables(_one_chain("middle_read")):
        assert not {"Sigmoid", "Mul"} <= {s.op_type for s in table.steps}
    for extra in ("plain", "per_channel", "live_operand", "cheap", "codes_out", "middle_read"):
        model = _one_chain(extra)
        feeds = {"x": np.random.default_rng(1).normal(0, 3, (1, 4, 3, 3)).astype(np.float32)}
        assert_stepped_bits(model, feeds)


@needs_int8
def test_the_table_is_made_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Later runs with the same constants reuse the table; the kernels off run the nodes."""
    model, feeds = _model(9, True, ["silu", "hardswish"], "input", True)
    made: list[int] = []
    real = QdqTable._make

    def counting(self: QdqTable, ex: Any, ins: list[Any]) -> Any:
        made.append(1)
        return real(self, ex, ins)

    monkeypatch.setattr(QdqTable, "_make", counting)
    session = Session(model)
    for _ in range(4):
        session.run(feeds)
    assert len(made) == (1 if _TABLES else 0)
    with at_level("int8", None):
        assert not _tables(model)
        assert_stepped_bits(model, feeds)
