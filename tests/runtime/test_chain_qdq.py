"""QuantizeLinear -> DequantizeLinear pairs as steps of an elementwise chain
(fusion_elementwise's ElementwiseChain, native/_chain.c's QDQ step): the compiled step
gives the QuantizeLinear and DequantizeLinear kernels' bits at every level (ties, both
saturations, signed zeros, infinities, values beyond 2^22, int8 and uint8); random
chains of ops and pairs, built as graphs, form one chain and give the stepped run's bits
on the compiled and the numpy block paths; a NaN met by a pair, and parameters the step
does not take, run the nodes one by one; a quantize_static model's GELU is one chain."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import onnx
import onnx.utils
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import fusion, fusion_elementwise, native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.fusion_elementwise import QDQ, ElementwiseChain, _Step
from onnxviz.runtime.fusion_qdq import QdqPair
from onnxviz.runtime.kernels import chain_program
from onnxviz.runtime.kernels.quantize import dequantize_linear, quantize_linear
from onnxviz.runtime.session import Session
from tests.runtime.differential import assert_modes_agree
from tests.runtime.native_modules import at_level, compiled
from tests.runtime.qdq_graphs import quantize_static_qdq

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
PATHS = ["compiled", "numpy"]


@pytest.fixture(autouse=True)
def _no_code_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """These graphs' pairs before a Sigmoid, Tanh or Erf would be a code table
    (fusion_qdq_table.py, tested in test_qdq_table.py); the chain's pair step, what runs
    where no table is made (the int8 kernels off, a float head), is tested here."""
    monkeypatch.setattr(fusion, "find_qdq_tables", lambda *args: [])


def _module() -> Any:
    return compiled("chain", "chains run their numpy block path")


def _bits(x: np.ndarray) -> np.ndarray:
    """x's bits, every NaN the same one (test_native_chain's _bits: which NaN an op keeps
    is the compiler's choice, in numpy too)."""
    return np.where(np.isnan(x), np.float32(np.nan), x).view(np.int32)


@contextmanager
def _path(path: str, level: int | None = None) -> Iterator[None]:
    """Chains made inside run on ``path``: "compiled" (at ``level``, the process's when
    None; skipped when the kernels are off: the stepped Erf is then numpy's, not the
    compiled step's), or "numpy", the block path, native.load giving no kernel (the
    stepped QuantizeLinear's numpy steps too), as ONNXVIZ_NATIVE=off runs it."""
    if path == "numpy":
        with at_level("chain", None), mock.patch.object(fusion_elementwise, "_NATIVE", None):
            yield
        return
    if fusion_elementwise._NATIVE is None:
        pytest.skip("compiled kernels are off (ONNXVIZ_NATIVE=off): the block path runs")
    level = native.cpu_level() if level is None else level
    with at_level("chain", level):
        _module().set_level(level)
        yield


def _stepped_pair(x: np.ndarray, s: float, z: int, signed: bool, s2: float, z2: int) -> np.ndarray:
    """The QuantizeLinear and DequantizeLinear kernels' result, by their numpy steps."""
    codes = np.int8 if signed else np.uint8
    with at_level("int8", None), np.errstate(all="ignore"):
        q = quantize_linear(x, np.array(s, np.float32), np.array(z, codes))
        return dequantize_linear(q, np.array(s2, np.float32), np.array(z2, codes))


def _edge_values(s: float, signed: bool) -> np.ndarray:
    """Values whose quotient by s is a tie (k + 0.5, exact when s is a power of two),
    just off one, saturates either end, is a signed zero, a subnormal, infinite, or
    beyond 2^22 (where the rounding leaves the value and the clip decides)."""
    k = np.arange(-300, 300, dtype=np.float64)
    ties = ((k + 0.5) * s).astype(np.float32)
    near = np.concatenate(
        [np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))]
    )
    big = np.float32(s) * np.float32(2**22) * np.array([1, 1.25, 1.5, 2, 3, 1000], np.float32)
    low, high = (-128, 127) if signed else (0, 255)
    ends = np.array([low - 1, low, low - 0.5, high, high + 0.5, high + 1, 1e4, -1e4], np.float32)
    special = np.array(
        [0.0, -0.0, 1e-45, -1e-45, 1e-38, -1e-38, np.inf, -np.inf, 3e38, -3e38], np.float32
    )
    return np.concatenate(
        [special, (ends * np.float32(s)).astype(np.float32), big, -big, ties, near]
    ).astype(np.float32)


# (scale, zero point, scale2, zero point2) per code type: a power-of-two scale (exact
# ties, with an odd zero point too: adding it before rounding would move them), the zero
# points at the range's ends and middle, equal and not; a scale that is not a power of
# two, a negative one, and a second scale of -0 (the signs of zeros).
PAIR_PARAMS = {
    False: [
        (0.0625, 128, 0.0625, 128),
        (0.0625, 127, 0.0625, 127),
        (0.0625, 0, 0.03125, 255),
        (0.0371, 255, 0.0413, 0),
        (-0.05, 17, 0.05, 200),
        (0.02, 128, -0.0, 128),
    ],
    True: [
        (0.0625, 0, 0.0625, 0),
        (0.0625, 1, 0.0625, -1),
        (0.0625, -128, 0.03125, 127),
        (0.0371, 127, 0.0413, -128),
        (-0.05, 3, 0.05, -7),
        (0.02, 0, -0.0, 0),
    ],
}


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("n", [1, 5, 16, 17, 1023, 1024, 1025, 4099])
def test_the_pair_step_gives_the_kernels_bits_at_every_level(signed: bool, n: int) -> None:
    """The compiled step at every level, and the numpy block path's (ElementwiseChain's
    steps in numpy, for ONNXVIZ_NATIVE=off and chains the compiled program lacks)."""
    module = _module()
    block_path = ElementwiseChain([], [_Step(QDQ, qdq=(1, 2, 3, 4))], {})
    codes = np.int8 if signed else np.uint8
    rng = np.random.default_rng(n * 2 + signed)
    for s, z, s2, z2 in PAIR_PARAMS[signed]:
        pool = np.concatenate(
            [_edge_values(s, signed), (rng.standard_normal(3000) * 200 * s).astype(np.float32)]
        )
        x = rng.choice(pool, size=n).astype(np.float32)
        if n >= 1024:  # the edge values in order (all of them from 1833 on), the tail too
            edges = _edge_values(s, signed)[: n - 3]
            x[: edges.size] = edges
            x[-3:] = edges[:3]
        want = _stepped_pair(x, s, z, signed, s2, z2)
        program = chain_program.qdq(s, z, signed, s2, z2)
        for level in LEVELS:
            module.set_level(level)
            got = np.full_like(x, 7.0)
            assert module.run(x, got, program) == 0
            np.testing.assert_array_equal(
                got.view(np.int32), want.view(np.int32), f"level {level}, params {s, z, s2, z2}"
            )
        params = [np.array(s, np.float32), np.array(z, codes), np.array(s2, np.float32)]
        params.append(np.array(z2, codes))
        got = np.full_like(x, 7.0)
        with np.errstate(all="ignore"):
            assert block_path._run_block(x, got, dict(enumerate(params, 1)))
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32), "numpy steps")
    module.set_level(native.cpu_level())


def test_the_pair_step_reports_a_nan_and_only_a_real_one() -> None:
    """A NaN in the input or made by the steps before a pair (0 / 0) stops the run with
    1, wherever it is (a short block's tail too); a NaN only in a block's zero padding
    (x / x over 5 values) is no NaN of the input's."""
    module = _module()
    pair = chain_program.qdq(0.05, 128, False, 0.05, 128)
    divide_by_x = chain_program.program([("Div", chain_program.INPUT, True, 0.0)])
    divide_by_zero = chain_program.program([("Div", chain_program.SCALAR, True, 0.0)])
    relu = chain_program.program([("Relu", chain_program.NONE, True, 0.0)])
    for level in LEVELS:
        module.set_level(level)
        for n, at in [(1, 0), (5, 4), (1024, 1023), (1025, 1024), (3000, 17), (3000, 2999)]:
            x = np.linspace(-3, 3, n, dtype=np.float32)
            y = np.empty_like(x)
            x[at] = np.nan
            assert module.run(x, y, pair) == 1, (level, n, at)
            assert module.run(x, y, relu + pair) == 1, (level, n, at)
            x[at] = 0.0
            assert module.run(x, y, divide_by_zero + pair) == 1, (level, n, at)
            x[at] = 1.0
            x[x == 0] = 1.0
            assert module.run(x, y, divide_by_zero + pair) == 0, (level, n, at)  # +-inf: clipped
        for n in (1, 5, 13, 1029):
            ones = np.ones(n, np.float32)
            y = np.empty_like(ones)
            assert module.run(ones, y, divide_by_x + pair) == 0, (level, n)
            np.testing.assert_array_equal(y, _stepped_pair(ones, 0.05, 128, False, 0.05, 128))
    module.set_level(native.cpu_level())


def test_programs_that_are_not_pairs_raise_value_error() -> None:
    module = _module()
    x = np.ones(8, np.float32)
    y = np.empty_like(x)
    step = struct.Struct("=BBBBf")
    qdq, args = chain_program.QDQ, chain_program.QDQ_ARGS
    module.run(x, y, step.pack(qdq, 0, 1, 0xFF, 0.5) + step.pack(args, 0, 0, 0x80, 0.5))
    bad = [
        step.pack(qdq, 0, 0, 3, 0.5),  # no second step
        step.pack(qdq, 0, 0, 3, 0.5) + step.pack(0, 1, 1, 0, 1.0),  # an Add after it
        step.pack(qdq, 0, 0, 3, 0.5) + step.pack(4, 0, 0, 3, 0.5),  # an Erf after it
        step.pack(args, 0, 0, 3, 0.5),  # the second step alone
        step.pack(qdq, 0, 2, 3, 0.5) + step.pack(args, 0, 0, 3, 0.5),  # signed byte 2
        step.pack(qdq, 1, 0, 3, 0.5) + step.pack(args, 0, 0, 3, 0.5),  # a scalar operand
        step.pack(qdq, 0, 0, 3, 0.5) + step.pack(args, 2, 0, 3, 0.5),  # an operand
        step.pack(qdq, 0, 0, 3, 0.5) + step.pack(args, 0, 1, 3, 0.5),  # a stray byte
        step.pack(chain_program.CUBE + 1, 0, 0, 0, 0.0),  # no such op
        (step.pack(qdq, 0, 0, 3, 0.5) + step.pack(args, 0, 0, 3, 0.5)) * 32
        + step.pack(4, 0, 1, 0, 0),  # 65 steps
    ]
    for program in bad:
        with pytest.raises(ValueError):
            module.run(x, y, program)
        with pytest.raises(ValueError):
            module.held(program, (), 0, print, np.ndarray, np.empty_like)
    for z, z2, signed in [(256, 0, False), (0, -1, False), (128, 0, True), (0, -129, True)]:
        with pytest.raises(ValueError):
            chain_program.qdq(0.1, z, signed, 0.1, z2)


# ---- chains built as graphs -----------------------------------------------------------

BINARY = ["Add", "Sub", "Mul", "Div"]
UNARY = ["Erf", "Relu", "Neg"]


def _chain_model(steps: list[tuple[Any, ...]], shape: list[int], seed: int) -> onnx.ModelProto:
    """x through ``steps``: ("pair", scale, zero point, scale2, zero point2, signed,
    shared: the dequantizer reads the quantizer's parameters), (op, constant, whether
    the running value comes first), ("input", op) (the op of the running value and x),
    or (unary op,)."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    v = "x"

    def const(name: str, value: Any, dtype: Any) -> str:
        inits.append(numpy_helper.from_array(np.array(value, dtype), name))
        return name

    for i, step in enumerate(steps):
        out = f"v{i}"
        if step[0] == "pair":
            _, s, z, s2, z2, signed, shared = step
            codes = np.int8 if signed else np.uint8
            qs, qz = const(f"s{i}", s, np.float32), const(f"z{i}", z, codes)
            ds, dz = (
                (qs, qz)
                if shared
                else (const(f"s2{i}", s2, np.float32), const(f"z2{i}", z2, codes))
            )
            nodes.append(helper.make_node("QuantizeLinear", [v, qs, qz], [f"q{i}"]))
            nodes.append(helper.make_node("DequantizeLinear", [f"q{i}", ds, dz], [out]))
        elif step[0] == "input":
            nodes.append(helper.make_node(step[1], [v, "x"], [out]))
        elif step[0] in BINARY:
            c = const(f"c{i}", step[1], np.float32)
            nodes.append(helper.make_node(step[0], [v, c] if step[2] else [c, v], [out]))
        else:
            nodes.append(helper.make_node(step[0], [v], [out]))
        v = out
    graph = helper.make_graph(
        nodes,
        f"chain{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(v, TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _chains(model: onnx.ModelProto) -> list[ElementwiseChain]:
    return [
        pn.fused for pn in run_nodes(Session(model).plan) if isinstance(pn.fused, ElementwiseChain)
    ]


def _holds_a_pair(chain: ElementwiseChain) -> bool:
    return any(step.op_type == QDQ for step in chain.steps)


def _assert_stepped_bits(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    """The fused runs (the first, and the second, which runs the held calls the first
    made) give the stepped run's bits, the signs of zeros and NaN positions included."""
    stepped = assert_modes_agree(model, feeds, rtol=0.0)
    name = model.graph.output[0].name
    session = Session(model)
    with np.errstate(all="ignore"):
        for run in range(2):
            got = session.run(feeds)[name]
            np.testing.assert_array_equal(_bits(got), _bits(stepped[name]), f"run {run}")


scales = st.floats(0.0078125, 0.5, width=32)
pair_steps = st.builds(
    lambda s, s2, signed, z, z2, shared: (
        "pair",
        s,
        z - (128 if signed else 0),
        s2,
        z2 - (128 if signed else 0),
        signed,
        shared,
    ),
    scales,
    scales,
    st.booleans(),
    st.integers(0, 255),
    st.integers(0, 255),
    st.booleans(),
)
op_steps = st.one_of(
    st.tuples(
        st.sampled_from(BINARY),
        st.one_of(
            st.floats(-8, 8, width=32).filter(lambda c: c != 0),
            st.sampled_from([0.5, 1.0, 1.4142135]),
        ),
        st.booleans(),
    ),
    st.tuples(st.sampled_from(UNARY)),
    st.tuples(st.just("input"), st.sampled_from(["Add", "Mul"])),
)


@st.composite
def chains_with_pairs(draw: Any) -> list[tuple[Any, ...]]:
    """A list of ops and pairs with at least one of each, in any order."""
    steps = draw(st.lists(st.one_of(pair_steps, op_steps), max_size=6))
    steps.insert(draw(st.integers(0, len(steps))), draw(pair_steps))
    steps.insert(draw(st.integers(0, len(steps))), draw(op_steps))
    return steps


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=chains_with_pairs(),
    n=st.sampled_from([1, 7, 1025, 3000]),
    spread=st.sampled_from([0.1, 1.0, 10.0]),
    seed=st.integers(0, 2**16),
)
def test_random_chains_with_pairs_form_one_chain_with_the_stepped_bits(
    steps: list[tuple[Any, ...]], n: int, spread: float, seed: int
) -> None:
    model = _chain_model(steps, [1, n], seed)
    chains = _chains(model)
    assert len(run_nodes(Session(model).plan)) == 1 and len(chains) == 1  # every node in it
    assert _holds_a_pair(chains[0])
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((1, n)) * spread).astype(np.float32)
    x.reshape(-1)[rng.integers(0, n, 3)] = rng.choice(
        np.array([0.0, -0.0, 1e-40, 50.0], np.float32), 3
    )
    for level in LEVELS:
        with _path("compiled", level):
            _assert_stepped_bits(model, {"x": x})
    with _path("numpy"):
        _assert_stepped_bits(model, {"x": x})


def test_a_long_chain_with_pairs_over_several_numpy_blocks_has_the_stepped_bits() -> None:
    """The block path's 32K-value blocks (the last one partial) and the compiled one's."""
    steps: list[tuple[Any, ...]] = [
        ("pair", 0.04, 131, 0.04, 131, False, True),
        ("Div", 1.4142135, True),
        ("Erf",),
        ("pair", 0.0078125, 127, 0.0078125, 127, False, True),
        ("Add", 1.0, False),
        ("input", "Mul"),
        ("pair", 0.03, -3, 0.031, 2, True, False),
        ("Mul", 0.5, True),
    ]
    model = _chain_model(steps, [3, 40_000], 0)
    x = (np.random.default_rng(1).standard_normal((3, 40_000)) * 2).astype(np.float32)
    for path in PATHS:
        with _path(path):
            _assert_stepped_bits(model, {"x": x})


class _Counting:
    """fusion_elementwise._NATIVE counted: the chains' Python calls' runs, and the
    calls of the held chains it makes."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.runs = 0
        self.held_calls = 0

    def run(self, *args: Any) -> Any:
        self.runs += 1
        return self.module.run(*args)

    def held(self, *args: Any) -> Any:
        made = self.module.held(*args)

        def call(*ins: Any) -> Any:
            self.held_calls += 1
            return made(*ins)

        return call


@contextmanager
def _counted(path: str) -> Iterator[tuple[_Counting | None, list[int]]]:
    """(the counting compiled module, None on the numpy path; the one-by-one runs)."""
    one_by_one: list[int] = []
    original = ElementwiseChain._one_by_one

    def counted(self: ElementwiseChain, ex: Any, ins: list[Any]) -> list[Any]:
        one_by_one.append(1)
        return original(self, ex, ins)

    with _path(path), mock.patch.object(ElementwiseChain, "_one_by_one", counted):
        counting = _Counting(fusion_elementwise._NATIVE) if path == "compiled" else None
        with mock.patch.object(fusion_elementwise, "_NATIVE", counting):
            yield counting, one_by_one


GELU_STEPS: list[tuple[Any, ...]] = [
    ("Div", 1.4142135, True),
    ("Erf",),
    ("pair", 0.0078125, 127, 0.0078125, 127, False, True),
    ("Add", 1.0, True),
    ("pair", 0.0079, 0, 0.0079, 0, False, True),
    ("input", "Mul"),
    ("pair", 0.02, 13, 0.02, 13, False, True),
    ("Mul", 0.5, True),
]


@pytest.mark.parametrize("path", PATHS)
def test_a_nan_met_by_a_pair_runs_the_nodes_one_by_one(path: str) -> None:
    """A NaN in x: the chain (its Python call, then its held call on the second run)
    runs its nodes one by one, the stepped values at every position; a clean x after it
    takes the chain's own path again."""
    model = _chain_model(GELU_STEPS, [4, 700], 3)
    rng = np.random.default_rng(4)
    clean = (rng.standard_normal((4, 700)) * 3).astype(np.float32)
    nan = clean.copy()
    nan[1, 5] = nan[3, 699] = np.nan
    with _counted(path) as (counting, one_by_one):
        (chain,) = _chains(model)
        assert _holds_a_pair(chain)
        _assert_stepped_bits(model, {"x": nan})
        assert len(one_by_one) >= 4  # assert_modes_agree's two runs and ours
        session = Session(model)
        want_clean = assert_modes_agree(model, {"x": clean}, rtol=0.0)["v7"]
        want_nan = assert_modes_agree(model, {"x": nan}, rtol=0.0)["v7"]
        one_by_one.clear()
        if counting is not None:
            counting.held_calls = 0  # (the sessions above made held calls too)
        np.testing.assert_array_equal(_bits(session.run({"x": clean})["v7"]), _bits(want_clean))
        with np.errstate(all="ignore"):
            got = session.run({"x": nan})["v7"]  # the held call, where compiled
        np.testing.assert_array_equal(_bits(got), _bits(want_nan))
        assert len(one_by_one) == 1
        np.testing.assert_array_equal(_bits(session.run({"x": clean})["v7"]), _bits(want_clean))
        assert len(one_by_one) == 1
        if counting is not None:
            assert counting.held_calls == 2  # the NaN run's and the clean run's after it


def _pair_graph(kind: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x -> Mul 1.5 -> pair -> Add 0.25, the pair's parameters of ``kind``: "per-axis"
    (one scale and zero point per channel), "int16" (16-bit codes), "no zero point",
    "fed" (the scale a graph input), or "per-tensor"."""
    rng = np.random.default_rng(5)
    shape = [2, 3, 50]
    inits = [
        numpy_helper.from_array(np.array(1.5, np.float32), "k"),
        numpy_helper.from_array(np.array(0.25, np.float32), "b"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    params = ["s", "z"]
    if kind == "per-axis":
        inits += [
            numpy_helper.from_array(np.array([0.02, 0.05, 0.1], np.float32), "s"),
            numpy_helper.from_array(np.array([120, 128, 140], np.uint8), "z"),
        ]
    elif kind == "int16":
        inits += [
            numpy_helper.from_array(np.array(0.001, np.float32), "s"),
            numpy_helper.from_array(np.array(-300, np.int16), "z"),
        ]
    elif kind == "no zero point":
        inits.append(numpy_helper.from_array(np.array(0.02, np.float32), "s"))
        params = ["s"]
    elif kind == "fed":
        inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, None))
        inits.append(numpy_helper.from_array(np.array(128, np.uint8), "z"))
    else:
        inits += [
            numpy_helper.from_array(np.array(0.03, np.float32), "s"),
            numpy_helper.from_array(np.array(128, np.uint8), "z"),
        ]
    nodes = [
        helper.make_node("Mul", ["x", "k"], ["m"]),
        helper.make_node("QuantizeLinear", ["m", *params], ["q"], axis=1),
        helper.make_node("DequantizeLinear", ["q", *params], ["d"], axis=1),
        helper.make_node("Add", ["d", "b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "pair", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return model, {"x": (rng.standard_normal(shape) * 2).astype(np.float32)}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", ["per-axis", "int16", "no zero point"])
def test_a_pair_the_step_cannot_take_is_left_to_its_own_node(path: str, kind: str) -> None:
    """Parameters known not to fit the compiled step (per-axis, 16-bit, no zero point):
    no chain takes the pair (it would run its nodes one by one every time); QdqPair
    runs it, with the stepped bits."""
    model, feeds = _pair_graph(kind)
    with _path(path):
        fused = run_nodes(Session(model).plan)
        assert not any(isinstance(pn.fused, ElementwiseChain) for pn in fused)
        assert sum(isinstance(pn.fused, QdqPair) for pn in fused) == 1
        _assert_stepped_bits(model, feeds)


@pytest.mark.parametrize("path", PATHS)
def test_a_scale_fed_at_run_time_takes_the_chain_only_when_it_fits(path: str) -> None:
    """A scale that is a graph input: the chain takes the pair; a one-value float32
    scale runs the chain's path (one with more dimensions than x too: the kernels take
    any one-value scale as per-tensor, no broadcast), a per-axis one (three values) runs
    the nodes one by one: the stepped bits each time."""
    model, feeds = _pair_graph("fed")
    with _counted(path) as (counting, one_by_one):
        (chain,) = _chains(model)
        assert _holds_a_pair(chain) and [st.op_type for st in chain.steps] == ["Mul", QDQ, "Add"]
        for s in (np.array(0.03, np.float32), np.full((1, 1, 1, 1), 0.07, np.float32)):
            _assert_stepped_bits(model, {**feeds, "s": s})
            assert not one_by_one
        if counting is not None:
            assert counting.runs >= 6
        _assert_stepped_bits(model, {**feeds, "s": np.array([0.02, 0.05, 0.1], np.float32)})
        assert len(one_by_one) == 4  # assert_modes_agree's two fused runs and ours


def test_pairs_join_only_chains_the_compiled_program_runs() -> None:
    """A chain with an op the compiled program lacks (Exp, Sqrt) takes no pair: the
    pair is its own node (faster than numpy's steps of it), or starts a chain of its
    own after the op; a pair alone, or pairs alone, are no chain."""
    cases: list[tuple[list[tuple[Any, ...]], list[list[str]], int]] = [
        # (steps, the chains' steps, QdqPairs)
        ([("Exp",), ("Mul", 0.5, True), ("pair", 0.05, 9, 0.05, 9, False, True), ("Add", 1.0, True)],
         [["Exp", "Mul"], [QDQ, "Add"]], 0),
        ([("Add", 1.0, True), ("pair", 0.05, 9, 0.05, 9, False, True), ("Sqrt",)], [["Add", QDQ]], 0),
        ([("pair", 0.05, 9, 0.05, 9, False, True), ("Sqrt",), ("Mul", 2.0, True)], [["Sqrt", "Mul"]], 1),
        ([("pair", 0.05, 9, 0.05, 9, False, True)], [], 1),
        ([("pair", 0.05, 9, 0.05, 9, False, True), ("pair", 0.1, 0, 0.1, 0, True, True)], [], 2),
        ([("pair", 0.05, 9, 0.05, 9, False, True), ("Div", 3.0, True), ("pair", 0.1, 0, 0.1, 0, True, True)],
         [[QDQ, "Div", QDQ]], 0),
    ]  # fmt: skip
    rng = np.random.default_rng(6)
    for steps, want, pairs in cases:
        model = _chain_model(steps, [2, 100], 0)
        fused = run_nodes(Session(model).plan)
        got = [
            [st.op_type for st in pn.fused.steps]
            for pn in fused
            if isinstance(pn.fused, ElementwiseChain)
        ]
        assert got == want, steps
        assert sum(isinstance(pn.fused, QdqPair) for pn in fused) == pairs, steps
        x = np.abs(rng.standard_normal((2, 100))).astype(np.float32)
        _assert_stepped_bits(model, {"x": x})


def test_a_held_chain_with_a_pair_hands_a_nan_to_its_fallback() -> None:
    module = _module()
    scale = np.array(0.5, np.float32)
    s, z = np.array(0.04, np.float32), np.array(128, np.uint8)
    for value in (scale, s, z):
        value.flags.writeable = False
    program = chain_program.program([("Mul", chain_program.SCALAR, True, 0.5)])
    program += chain_program.qdq(0.04, 128, False, 0.04, 128)
    seen: list[tuple[Any, ...]] = []

    def fallback(*args: Any) -> str:
        seen.append(args)
        return "fallback"

    held = module.held(program, (scale, s, z), 0, fallback, np.ndarray, np.empty_like)
    x = np.linspace(-9, 9, 3000, dtype=np.float32).reshape(3, 1000)
    want = np.empty_like(x)
    assert module.run(x, want, program) == 0
    np.testing.assert_array_equal(_bits(held(x, scale, s, z)), _bits(want))
    assert not seen
    x[2, 999] = np.nan
    assert held(x, scale, s, z) == "fallback"
    assert len(seen) == 1 and all(a is b for a, b in zip(seen[0], (x, scale, s, z)))


# ---- a quantize_static model ----------------------------------------------------------


def _quantized_gelu(tmp_path: Path) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A linear layer then a GELU written out (Div, Erf, Add, Mul by x, Mul), quantized
    by onnxruntime.quantization.quantize_static: QDQ, uint8 activations, weights per
    channel."""
    pytest.importorskip("onnxruntime.quantization")
    rng = np.random.default_rng(7)
    k, n = 32, 96
    inits = [
        numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b"),
        numpy_helper.from_array(np.array(1.4142135, np.float32), "sqrt2"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["h", "a"], ["g"]),
        helper.make_node("Mul", ["g", "half"], ["y"]),
    ]
    shape = [2, 16, k]
    graph = helper.make_graph(
        nodes,
        "linear_gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}

    return quantize_static_qdq(model, feeds, tmp_path, "QUInt8"), feeds


@pytest.mark.parametrize("path", PATHS)
def test_a_quantize_static_gelu_is_one_chain_with_the_stepped_bits(
    tmp_path: Path, path: str
) -> None:
    """Its GELU and the pairs between its ops (and the output's) are one chain.  The
    whole model agrees with stepping within one output step (the QDQ MatMul before it
    is an exact integer product: a value on a rounding boundary may land on the other
    side); from the chain's input on, the graph cut there gives the stepped bits."""
    quantized, feeds = _quantized_gelu(tmp_path)
    (node,) = [
        pn for pn in run_nodes(Session(quantized).plan) if isinstance(pn.fused, ElementwiseChain)
    ]
    steps = [st.op_type for st in node.fused.steps]
    assert steps == ["Div", "Erf", QDQ, "Add", QDQ, "Mul", QDQ, "Mul", QDQ]  # fmt: skip
    inits = {t.name: numpy_helper.to_array(t) for t in quantized.graph.initializer}
    out_dq = next(nd for nd in quantized.graph.node if nd.output[0] == "y")
    head = node.input_names[0]
    inferred = onnx.shape_inference.infer_shapes(quantized)
    cut = onnx.utils.Extractor(inferred).extract_model([head], ["y"])
    levels = LEVELS if path == "compiled" else [None]
    for level in levels:
        with _path(path, level):
            stepped = assert_modes_agree(
                quantized, feeds, steps={"y": float(inits[out_dq.input[1]])}
            )
            (cut_chain,) = _chains(cut)
            assert [st.op_type for st in cut_chain.steps] == steps
            _assert_stepped_bits(cut, {head: stepped[head]})


def test_one_value_parameters_of_any_rank_take_the_held_call() -> None:
    """A pair's one-value parameters are per-tensor whatever their rank (the kernels
    take them so: no broadcast), so a scale of four dimensions on a 3-D x runs the held
    call on the second run; an op's one-value constant with more dimensions than x
    broadcasts (a 2-D result from 1-D x): the nodes run one by one."""
    rng = np.random.default_rng(8)
    for shape, k_shape, held in [([2, 3, 50], (), True), ([50], (1, 1), False)]:
        model, _ = _pair_graph("per-tensor")
        for init in model.graph.initializer:
            if init.name == "s":
                init.CopyFrom(numpy_helper.from_array(np.full((1, 1, 1, 1), 0.03, np.float32), "s"))
            if init.name == "k":
                init.CopyFrom(numpy_helper.from_array(np.full(k_shape, 1.5, np.float32), "k"))
        model.graph.input[0].type.tensor_type.shape.Clear()
        x = (rng.standard_normal(shape) * 2).astype(np.float32)
        with _counted("compiled") as (counting, one_by_one):
            (chain,) = _chains(model)
            assert [st.op_type for st in chain.steps] == ["Mul", QDQ, "Add"]
            _assert_stepped_bits(model, {"x": x})
            assert counting is not None
            session = Session(model)
            session.run({"x": x})
            runs, calls, one_by_one[:] = counting.runs, counting.held_calls, []
            session.run({"x": x})
            assert bool(one_by_one) != held
            if held:  # no Python call: the held one ran it
                assert counting.runs == runs and counting.held_calls == calls + 1


@pytest.mark.parametrize("path", PATHS)
def test_a_channels_last_input_gives_the_stepped_bits(path: str) -> None:
    """An (N, C, H, W) view of an NHWC buffer (what a channels-last conv hands on,
    fusion_layout.py) is not C-contiguous: the held call declines it and the chain's
    call runs over a contiguous copy, the stepped values in NCHW order."""
    model = _chain_model(GELU_STEPS, [2, 3, 8, 8], 9)
    nhwc = (np.random.default_rng(10).standard_normal((2, 8, 8, 3)) * 3).astype(np.float32)
    x = nhwc.transpose(0, 3, 1, 2)
    assert not x.flags.c_contiguous
    with _counted(path) as (_, one_by_one):
        _assert_stepped_bits(model, {"x": x})
        assert not one_by_one
