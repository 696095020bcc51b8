"""The compiled elementwise chain (runtime/native/_chain.c) that fusion_elementwise runs
float32 chains through: the numpy block path's bits at every level this CPU has, for
random chains of every step it takes, on values with NaN, infinities, signed zeros and
subnormals; a model's GELU chain runs it and the stepped run agrees; a GroupNorm's tail
(per-channel gamma and beta, then SiLU inside the chain) is one chain with the nodes'
bits, NCHW and channels-last; a wrong program or buffer is a ValueError."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import fusion_elementwise, native
from onnxviz.runtime.fusion_elementwise import ElementwiseChain, _Step
from onnxviz.runtime.kernels import chain_program
from onnxviz.runtime.session import Session
from tests.runtime.differential import assert_modes_agree
from tests.runtime.native_modules import compiled

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
BINARY = ["Add", "Sub", "Mul", "Div"]
UNARY = ["Erf", "Neg", "Abs", "Relu", "Tanh"]
SPECIAL = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-38, 3e38, -3e38, 1.0, -1.0],
    np.float32,
)


def _module() -> Any:
    return compiled("chain", "chains run their numpy block path")


def _values(rng: np.random.Generator, n: int) -> np.ndarray:
    x = (rng.standard_normal(n) * rng.choice([0.01, 1.0, 100.0])).astype(np.float32)
    picks = rng.integers(0, n, size=min(n, 24))
    x[picks] = rng.choice(SPECIAL, size=picks.size)
    return x


def _bits(x: np.ndarray) -> np.ndarray:
    """x's bits with every NaN the same: which NaN a sum of two NaNs keeps depends on
    the order the compiler gives the operands of a commutative op, in numpy too."""
    return np.where(np.isnan(x), np.float32(np.nan), x).view(np.int32)


def _block_path(chain: ElementwiseChain, x: np.ndarray, scalars: dict[int, Any]) -> np.ndarray:
    """The numpy block path, its Erf, Tanh and Sigmoid the compiled ones even with the kernels off
    (ONNXVIZ_NATIVE=off: numpy's own erf and tanh then make other bits, and the chain
    kernel does not run)."""
    out = np.empty_like(x)
    erf = compiled("erf")
    erf.set_level(native.cpu_level())
    module = _module()
    module.set_level(native.cpu_level())
    saved = dict(fusion_elementwise._UNARY)
    fusion_elementwise._UNARY["Erf"] = lambda v, o: erf.erf(np.ascontiguousarray(v), o)
    for op in ("Tanh", "Sigmoid"):
        one_step = chain_program.program([(op, chain_program.NONE, True, 0.0)])
        fusion_elementwise._UNARY[op] = lambda v, o, p=one_step: module.run(
            np.ascontiguousarray(v), o, p
        )
    try:
        with np.errstate(all="ignore"):
            for start in range(0, x.size, 32768):
                stop = min(start + 32768, x.size)
                chain._run_block(x[start:stop], out[start:stop], scalars)
    finally:
        fusion_elementwise._UNARY.update(saved)
    return out


step_strategy = st.one_of(
    st.tuples(st.sampled_from(UNARY), st.just(None), st.just(True)),
    st.tuples(st.sampled_from(BINARY), st.sampled_from(["scalar", "input"]), st.booleans()),
    # A Pow of the running value by 2 or 3 (the compiled SQUARE and CUBE steps).
    st.tuples(st.just("Pow"), st.sampled_from([2.0, 3.0]), st.just(True)),
    # A side value: (side op of x and the step's scalar, whether the scalar comes first).
    st.tuples(
        st.sampled_from(BINARY),
        st.tuples(st.sampled_from(BINARY), st.booleans()),
        st.booleans(),
    ),
)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(step_strategy, min_size=1, max_size=7),
    scalars=st.lists(
        st.one_of(
            st.floats(-1e4, 1e4, width=32),
            st.sampled_from([0.0, -0.0, 0.5, 1.4142135, float("inf"), float("nan")]),
        ),
        min_size=7,
        max_size=7,
    ),
    n=st.sampled_from([1, 3, 15, 16, 17, 1023, 1024, 1025, 5000, 40000]),
    seed=st.integers(0, 2**16),
)
def test_a_random_chain_gives_the_block_paths_bits_at_every_level(
    steps: list[tuple[str, Any, bool]], scalars: list[float], n: int, seed: int
) -> None:
    module = _module()
    chain_steps: list[_Step] = []
    operands: dict[int, Any] = {}
    for i, (op, other, value_first) in enumerate(steps):
        if other is None:
            chain_steps.append(_Step(op))
        elif other == "input":
            chain_steps.append(_Step(op, -1, value_first))
        elif isinstance(other, float):
            operands[i + 1] = np.array(other, np.float32)
            chain_steps.append(_Step(op, i + 1, value_first))
        elif isinstance(other, tuple):
            operands[i + 1] = np.array(scalars[i], np.float32)
            chain_steps.append(_Step(op, -2, value_first, (other[0], i + 1, other[1])))
        else:
            operands[i + 1] = np.array(scalars[i], np.float32)
            chain_steps.append(_Step(op, i + 1, value_first))
    x = _values(np.random.default_rng(seed), n)
    chain = ElementwiseChain([], chain_steps, {})
    assert chain.native == (fusion_elementwise._NATIVE is not None)
    want = _block_path(chain, x, operands)
    program = chain._program(operands)
    for level in LEVELS:
        module.set_level(level)
        got = np.full_like(x, 7.0)
        module.run(x, got, program)
        np.testing.assert_array_equal(_bits(got), _bits(want), f"level {level}")
    module.set_level(native.cpu_level())
    in_place = x.copy()
    module.run(in_place, in_place, program)  # y may be x
    np.testing.assert_array_equal(_bits(in_place), _bits(want))


def _gelu_model() -> Any:
    """BERT's GELU as TorchScript writes it: Div by sqrt 2, Erf, Add 1, Mul by x, Mul 0.5,
    then a Relu and an Abs (steps only the compiled chain and the block path share)."""
    f = TensorProto.FLOAT
    consts = {"sqrt2": 1.4142135, "one": 1.0, "half": 0.5}
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["g"]),
        helper.make_node("Sub", ["half", "g"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Abs", ["r"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", f, [2, 8, 3072])],
        [helper.make_tensor_value_info("y", f, None)],
        [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_models_gelu_chain_runs_the_kernel_and_agrees_with_the_stepped_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = _module()
    if fusion_elementwise._NATIVE is None:
        pytest.skip("compiled kernels are off (ONNXVIZ_NATIVE=off): the block path runs")
    calls: list[int] = []

    class Counting:
        def run(self, *args: Any) -> None:
            calls.append(1)
            module.run(*args)

        def held(self, *args: Any) -> Any:
            # The node loop's call of the chain once its scalars are held: counted too.
            made = module.held(*args)

            def call(*ins: Any) -> Any:
                calls.append(1)
                return made(*ins)

            return call

    monkeypatch.setattr(fusion_elementwise, "_NATIVE", Counting())
    model = _gelu_model()
    x = _values(np.random.default_rng(3), 2 * 8 * 3072).reshape(2, 8, 3072)
    stepped = assert_modes_agree(model, {"x": x}, rtol=0.0)  # the same bits
    assert calls, "the chain did not run the compiled kernel"
    fused = Session(model).run({"x": x})["y"]
    np.testing.assert_array_equal(_bits(fused), _bits(stepped["y"]))


def test_a_float64_chain_keeps_the_block_path(monkeypatch: pytest.MonkeyPatch) -> None:
    _module()
    calls: list[int] = []

    class Counting:
        def run(self, *args: Any) -> None:
            calls.append(1)

    monkeypatch.setattr(fusion_elementwise, "_NATIVE", Counting())
    model = _gelu_model()
    for value in model.graph.input:
        value.type.tensor_type.elem_type = TensorProto.DOUBLE
    for init in model.graph.initializer:
        init.CopyFrom(
            numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float64), init.name)
        )
    x = np.random.default_rng(4).standard_normal((2, 8, 3072))
    assert_modes_agree(model, {"x": x})
    assert not calls


def test_wrong_programs_and_buffers_raise_value_error() -> None:
    module = _module()
    x = np.ones(10, np.float32)
    y = np.empty(10, np.float32)
    step = struct.Struct("=BBBxf")
    side = struct.Struct("=BBBBf")
    bad = [
        b"\x00" * 7,  # not 8 bytes a step
        step.pack(chain_program.CUBE + 1, 0, 1, 0.0),  # no such op
        step.pack(chain_program.CUBE, 1, 1, 3.0),  # a Pow step takes no operand
        side.pack(2, chain_program.CHANNEL, 1, 0, 0.0),  # a per-channel step without tables
        step.pack(0, 0, 1, 0.0),  # Add without its operand
        step.pack(4, 1, 1, 0.0),  # Erf with one
        step.pack(0, 4, 1, 0.0),  # no such operand kind
        side.pack(2, 3, 1, 4, 0.5),  # a side value by Erf
        side.pack(2, 3, 1, 0x22, 0.5),  # a side byte with a stray bit
        side.pack(2, 1, 1, 2, 0.5),  # a side op on a scalar operand
        step.pack(4, 0, 1, 0.0) * 65,  # too many steps
    ]
    module.run(x, y, side.pack(2, 3, 1, 0x12, 0.5))  # Mul by (0.5 * x): a side value
    for program in bad:
        with pytest.raises(ValueError):
            module.run(x, y, program)
    with pytest.raises(ValueError):
        module.run(x, np.empty(9, np.float32), step.pack(4, 0, 1, 0.0))
    with pytest.raises(ValueError):
        module.run(x.astype(np.float64), y, step.pack(4, 0, 1, 0.0))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the infinities and NaNs in x
def test_gelu_through_the_chain_gives_the_numpy_steps_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Gelu kernel (approximate "none") runs its five steps as one chain program: the
    same bits as its numpy steps, which call the same compiled erf."""
    from onnxviz.runtime.kernels import chain_program, math_activation, math_erf

    chain, erf = _module(), compiled("erf")
    for module in (chain, erf):
        module.set_level(native.cpu_level())
    monkeypatch.setattr(math_erf, "_NATIVE", erf)
    x = _values(np.random.default_rng(6), 50_000).reshape(50, 1000)
    monkeypatch.setattr(chain_program, "CHAIN", None)
    want = math_activation.gelu(x)
    want16 = math_activation.gelu(x.astype(np.float16))
    calls: list[int] = []

    class Counting:
        def run(self, *args: Any) -> None:
            calls.append(1)
            chain.run(*args)

    monkeypatch.setattr(chain_program, "CHAIN", Counting())
    got = math_activation.gelu(x)
    assert calls and got.shape == x.shape and got.dtype == np.float32
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # float16 goes through float32 and back, float64 keeps its numpy steps
    got16 = math_activation.gelu(x.astype(np.float16))
    assert got16.dtype == np.float16
    np.testing.assert_array_equal(_bits(got16.astype(np.float32)), _bits(want16.astype(np.float32)))
    calls.clear()
    assert math_activation.gelu(x.astype(np.float64)).dtype == np.float64 and not calls


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


@pytest.mark.parametrize("op", ["Tanh", "Sigmoid"])
def test_the_compiled_tanh_and_sigmoid_are_within_a_few_ulp_at_every_level(op: str) -> None:
    """vector_math.h's tanh and sigmoid (the Tanh and Sigmoid kernels' for float32 and
    the chain's steps): within 2 and 3 ulp of the float64 value over the whole range (both
    sides of tanh's switch at atanh(1/2), tiny and huge values, sigmoid down to the
    subnormals), the same bits at every level; NaN kept, tanh keeps -0 and takes +-inf
    to +-1, sigmoid takes +-inf to 1 and 0."""
    module = _module()
    rng = np.random.default_rng(8)
    x = np.concatenate(
        [
            rng.standard_normal(200_000).astype(np.float32) * 3,
            np.linspace(-12, 12, 100_001, dtype=np.float32),
            np.float32(0.54930615) + np.arange(-500, 500, dtype=np.float32) * 1e-7,
            (rng.random(5000) * 1e-6).astype(np.float32),
            SPECIAL,
        ]
    )
    if op == "Sigmoid":
        # and every float32 from -104.9 to -86 (2M values): results from the smallest
        # normals down through the subnormals, where exp's scaling by 2^n rounds (two
        # products below AVX-512, one vscalefps there: the same single rounding)
        low = np.arange(
            np.float32(-86).view(np.uint32), np.float32(-104.9).view(np.uint32), dtype=np.uint32
        ).view(np.float32)
        x = np.concatenate([x, np.linspace(-104, 89, 20_001, dtype=np.float32), low])
    step = chain_program.program([(op, chain_program.NONE, True, 0.0)])
    outs = []
    for level in LEVELS:
        module.set_level(level)
        got = np.empty_like(x)
        module.run(x, got, step)
        outs.append(got)
    module.set_level(native.cpu_level())
    for level, got in zip(LEVELS, outs):
        np.testing.assert_array_equal(_bits(got), _bits(outs[0]), f"level {level}")
    got = outs[0]
    with np.errstate(all="ignore"):
        exact = (np.tanh if op == "Tanh" else _sigmoid64)(x.astype(np.float64))
    finite = np.isfinite(x) & (np.abs(exact) >= np.finfo(np.float32).tiny)
    ulp = np.spacing(np.abs(exact[finite]).astype(np.float32)).astype(np.float64)
    worst = np.max(np.abs(got[finite] - exact[finite]) / ulp)
    assert worst <= (2.0 if op == "Tanh" else 3.0), worst
    tiny = np.isfinite(x) & ~finite  # sigmoid's subnormal results: within a few of their ulp
    np.testing.assert_allclose(got[tiny], exact[tiny], rtol=0, atol=1e-44)
    assert np.isnan(got[np.isnan(x)]).all()
    inf = np.isinf(x)
    limits = np.sign(x[inf]) if op == "Tanh" else (x[inf] > 0).astype(np.float32)
    np.testing.assert_array_equal(got[inf], limits)
    if op == "Tanh":
        zeros = x == 0
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(x[zeros]))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_tanh_gelu_and_tanh_through_the_chain_give_their_steps_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Gelu(approximate="tanh") as one chain program: the bits of its nine numpy steps
    with the Tanh kernel's tanh; the Tanh kernel's own float32 result is the chain's."""
    from onnxviz.runtime.kernels import math_activation, math_elementwise

    chain = _module()
    chain.set_level(native.cpu_level())
    monkeypatch.setattr(chain_program, "CHAIN", chain)
    x = _values(np.random.default_rng(9), 30_000).reshape(30, 1000)
    got = math_activation.gelu(x, approximate="tanh")
    with np.errstate(all="ignore"):
        inner = x * x
        inner *= np.float32(0.044715)
        inner += np.float32(1)
        inner *= x
        inner *= np.float32(np.sqrt(2 / np.pi))
        want = math_elementwise._tanh(inner)
        want += np.float32(1)
        want *= x
        want *= np.float32(0.5)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    t = math_elementwise._tanh(x)
    step = chain_program.program([("Tanh", chain_program.NONE, True, 0.0)])
    direct = np.empty_like(x)
    chain.run(x, direct, step)
    np.testing.assert_array_equal(_bits(t), _bits(direct))
    np.testing.assert_allclose(t, np.tanh(x.astype(np.float64)), rtol=3e-7, atol=1e-37)


def test_a_gpt2_tanh_gelu_chain_runs_the_kernel_and_agrees_with_the_stepped_run() -> None:
    """GPT-2's GELU as TorchScript writes it (x * x * x through Pow or Mul, * 0.044715,
    + x, * sqrt(2 / pi), Tanh, + 1, * x, * 0.5): one fused chain, the stepped bits."""
    f = TensorProto.FLOAT
    consts = {"a": 0.044715, "k": float(np.sqrt(2 / np.pi)), "one": 1.0, "half": 0.5}
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["x2"]),
        helper.make_node("Mul", ["x2", "x"], ["x3"]),
        helper.make_node("Mul", ["x3", "a"], ["ax3"]),
        helper.make_node("Add", ["x", "ax3"], ["s"]),
        helper.make_node("Mul", ["s", "k"], ["u"]),
        helper.make_node("Tanh", ["u"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["x", "t1"], ["xt"]),
        helper.make_node("Mul", ["xt", "half"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", f, [2, 3, 1024])],
        [helper.make_tensor_value_info("y", f, None)],
        initializer=[numpy_helper.from_array(np.float32(v), k) for k, v in consts.items()],
    )
    from onnx import helper as h

    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    x = np.random.default_rng(10).standard_normal((2, 3, 1024)).astype(np.float32) * 3
    assert_modes_agree(model, {"x": x}, rtol=0)
    sess = Session(model)
    sess.run({"x": x})
    from onnxviz.runtime.fusion import run_nodes

    chains = [pn.fused for pn in run_nodes(sess.plan) if isinstance(pn.fused, ElementwiseChain)]
    assert len(chains) == 1
    assert chains[0].native == (fusion_elementwise._NATIVE is not None)


def test_a_silu_chain_runs_the_kernel_and_agrees_with_the_stepped_run() -> None:
    """x * Sigmoid(x) (a Llama MLP's SiLU, EfficientNet's Swish) then a scale: one
    fused chain, the stepped run's bits (the Sigmoid kernel is the chain's step)."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Mul", ["x", "s"], ["silu"]),
        helper.make_node("Mul", ["silu", "k"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "silu",
        [helper.make_tensor_value_info("x", f, [4, 2816])],
        [helper.make_tensor_value_info("y", f, None)],
        initializer=[numpy_helper.from_array(np.float32(1.5), "k")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(12).standard_normal((4, 2816)).astype(np.float32) * 6
    x[0, :4] = [np.inf, -np.inf, np.nan, -100.0]
    with np.errstate(all="ignore"):
        assert_modes_agree(model, {"x": x}, rtol=0)
    sess = Session(model)
    with np.errstate(all="ignore"):
        sess.run({"x": x})
    from onnxviz.runtime.fusion import run_nodes

    chains = [pn.fused for pn in run_nodes(sess.plan) if isinstance(pn.fused, ElementwiseChain)]
    assert len(chains) == 1 and [st.op_type for st in chains[0].steps][:2] == ["Sigmoid", "Mul"]
    assert chains[0].native == (fusion_elementwise._NATIVE is not None)


def test_a_held_chain_runs_its_program_and_hands_on_what_it_does_not_take() -> None:
    """`held` (a chain node's call from the node loop): the program's bits on a float32
    C-contiguous x with exactly its scalars, in a fresh array of x's shape; any other call
    goes to the fallback with the same arguments."""
    module = _module()
    scale = np.array(0.75, np.float32).reshape(1, 1)  # 2-D: x needs at least 2 dims
    scale.flags.writeable = False
    program = chain_program.program(
        [
            ("Sigmoid", chain_program.NONE, True, 0.0, 0),
            ("Mul", chain_program.INPUT, True, 0.0, 0),
            ("Mul", chain_program.SCALAR, True, float(scale[0, 0]), 0),
        ]
    )
    seen: list[tuple[Any, ...]] = []

    def fallback(*args: Any, **kw: Any) -> str:
        seen.append(args)
        return "fallback"

    held = module.held(program, (scale,), 2, fallback, np.ndarray, np.empty_like)
    rng = np.random.default_rng(9)
    x = _values(rng, 6 * 50).reshape(6, 50)
    want = np.empty_like(x)
    module.run(x, want, program)
    got = held(x, scale)
    assert got.shape == x.shape and got.dtype == np.float32 and got is not held(x, scale)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    wide = _values(rng, 6 * 100).reshape(6, 100)
    for args in [
        (x, scale.copy()),  # another scalar object, equal
        (x.astype(np.float64), scale),
        (wide[:, ::2], scale),  # strided
        (x[0], scale),  # fewer dimensions than the scalar: a broadcast adds one
        (np.empty((0, 3), np.float32), scale),
        (x,),
        (x, scale, scale),
    ]:
        assert held(*args) == "fallback"
        assert len(seen) == 1 and all(a is b for a, b in zip(seen.pop(), args))
    assert held(x, scale=scale) == "fallback"
    seen.clear()
    with pytest.raises(ValueError):
        module.held(b"\x00" * 7, (), 0, fallback, np.ndarray, np.empty_like)
    with pytest.raises(ValueError):
        module.held(program, (scale,), 2, None, np.ndarray, np.empty_like)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    shape=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    data=st.data(),
)
def test_a_held_chain_runs_rows_of_a_part_of_a_wider_array(shape: list[int], data: Any) -> None:
    """A float32 x whose last axis is contiguous but whose rows are not one block (a
    Split's or Slice's part: an LSTM cell's gates): the held chain runs it row by row
    into a fresh C-contiguous array, with the bits of the same values made contiguous;
    a NaN met by a pair (the flat run's refusal) and a program with per-channel tables
    go to the fallback."""
    module = _module()
    program = chain_program.program(
        [
            ("Sigmoid", chain_program.NONE, True, 0.0, 0),
            ("Mul", chain_program.INPUT, True, 0.0, 0),
            ("Add", chain_program.SCALAR, False, 0.25, 0),
            ("Tanh", chain_program.NONE, True, 0.0, 0),
        ]
    )
    seen: list[Any] = []

    def fallback(*args: Any) -> str:
        seen.append(args)
        return "fallback"

    held = module.held(program, (), 1, fallback, np.ndarray, np.empty_like)
    rng = np.random.default_rng(len(shape) * 100 + sum(shape))
    # x: a window of a bigger array along every axis but the last's stride
    pad = [data.draw(st.integers(0, 3)) for _ in shape]
    big = _values(rng, int(np.prod([d + p for d, p in zip(shape, pad)])))
    big = big.reshape([d + p for d, p in zip(shape, pad)])
    starts = [data.draw(st.integers(0, p)) for p in pad]
    x = big[tuple(slice(s0, s0 + d) for s0, d in zip(starts, shape))]
    got = held(x)
    assert not seen
    want = held(np.ascontiguousarray(x))
    assert got.shape == x.shape and got.flags.c_contiguous and got.dtype == np.float32
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # A pair meeting a NaN: the fallback, as for a contiguous x.
    pair = chain_program.qdq(0.5, 0, True, 0.5, 0) + chain_program.program(
        [("Tanh", chain_program.NONE, True, 0.0, 0)]
    )
    held_pair = module.held(pair, (), 1, fallback, np.ndarray, np.empty_like)
    y = big.copy()
    y.reshape(-1)[-1] = np.nan
    window = y[tuple(slice(s0, s0 + d) for s0, d in zip(starts, shape))]
    if np.isnan(window).any():
        assert held_pair(window) == "fallback" and seen.pop()[0] is window
    else:
        assert held_pair(window).shape == window.shape
    assert not seen


def test_a_held_chain_hands_on_strided_rows_it_cannot_take() -> None:
    """Values with gaps between them and per-channel programs stay with the fallback; a
    dense buffer in another axis order (a transpose, Fortran order, a channels-last
    image: a conv chain's output) runs flat into empty_like's array of that order, with
    the bits of the same values made C-contiguous."""
    module = _module()
    program = chain_program.program(
        [("Sigmoid", chain_program.NONE, True, 0.0, 0), ("Mul", chain_program.INPUT, True, 0.0, 0)]
    )
    seen: list[Any] = []

    def fallback(*args: Any) -> str:
        seen.append(args)
        return "fallback"

    held = module.held(program, (), 1, fallback, np.ndarray, np.empty_like)
    rng = np.random.default_rng(2)
    x = _values(rng, 8 * 12).reshape(8, 12)
    for bad in (x[:, ::2], x[:, ::2].T, x.T[::2], x.astype(np.float64)[:, :3]):
        assert held(bad) == "fallback" and seen.pop()[0] is bad
    image = _values(rng, 2 * 5 * 6 * 16).reshape(2, 5, 6, 16).transpose(0, 3, 1, 2)
    for dense in (x.T, np.asfortranarray(x), np.asfortranarray(x)[:, 1:5], image):
        got = held(dense)
        assert not seen and got.shape == dense.shape and got.strides == dense.strides
        np.testing.assert_array_equal(_bits(got), _bits(held(np.ascontiguousarray(dense))))
    pair = chain_program.qdq(0.5, 0, True, 0.5, 0)  # a NaN met by a pair: the fallback
    held_pair = module.held(pair, (), 1, fallback, np.ndarray, np.empty_like)
    nan_image = image.copy(order="K")
    nan_image[1, 3, 2, 4] = np.nan
    assert held_pair(nan_image) == "fallback" and seen.pop()[0] is nan_image
    channel = chain_program.channel_step("Mul", True, 0)
    table = np.arange(1, 4, dtype=np.float32)
    held_channels = module.held(channel, (), 3, fallback, np.ndarray, np.empty_like, (table,))
    image = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    part = image[:, :, :, 1:5]
    assert held_channels(part) == "fallback" and seen.pop()[0] is part
    np.testing.assert_array_equal(held_channels(image), image * table.reshape(1, 3, 1, 1))
    # a channels-last image (one dense NHWC buffer): its flat run, channel i % C, into
    # empty_like's array of its layout (tables tiled from 2 blocks of 1024 floats on)
    for shape in ((2, 3, 4, 6), (1, 3, 40, 40)):
        last = rng.standard_normal(shape).astype(np.float32).transpose(0, 2, 3, 1).copy()
        last = last.transpose(0, 3, 1, 2)
        got = held_channels(last)
        assert not isinstance(got, str) and got.strides == last.strides
        np.testing.assert_array_equal(got, last * table.reshape(1, 3, 1, 1))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize(
    "shape", [(1, 96, 32, 32), (2, 5, 3, 7), (1, 3, 1, 1), (1, 300, 9, 9), (3, 2, 40, 40)]
)
def test_per_channel_steps_and_silu_give_numpys_bits(
    level: int, last: bool, shape: tuple[int, ...]
) -> None:
    module = _module()
    rng = np.random.default_rng(sum(shape))
    x = _values(rng, int(np.prod(shape))).reshape(shape)
    c = shape[1]
    gamma = rng.standard_normal((c, 1, 1)).astype(np.float32)
    beta = rng.standard_normal((1, c, 1, 1)).astype(np.float32)
    with np.errstate(all="ignore"):
        v = x * gamma + beta
        sigmoid = np.empty_like(v)
        # the Sigmoid kernel's compiled values (the chain's one-step program; under
        # ONNXVIZ_NATIVE=off the kernel runs numpy's own, which the chain never does)
        one = chain_program.program([("Sigmoid", chain_program.NONE, True, 0.0)])
        module.run(np.ascontiguousarray(v).reshape(-1), sigmoid.reshape(-1), one)
        want = v * sigmoid
    dense = np.ascontiguousarray(x.transpose(0, 2, 3, 1) if last else x)
    program = (
        chain_program.channel_step("Mul", True, 0)
        + chain_program.channel_step("Add", False, 1)
        + chain_program.silu()
    )
    out = np.empty_like(dense)
    plane = 1 if last else shape[2] * shape[3]
    tables = (gamma.reshape(-1), beta.reshape(-1))
    module.set_level(level)
    try:
        with np.errstate(all="ignore"):
            assert (
                module.run(dense.reshape(-1), out.reshape(-1), program, (tables, c, plane, last))
                == 0
            )
    finally:
        module.set_level(native.cpu_level())
    got = out.transpose(0, 3, 1, 2) if last else out
    np.testing.assert_array_equal(_bits(got), _bits(want))
    with pytest.raises(ValueError, match="whole images"):
        module.run(dense.reshape(-1)[:-1], out.reshape(-1)[:-1], program, (tables, c, plane, last))
    with pytest.raises(ValueError):
        module.run(
            dense.reshape(-1), out.reshape(-1), program, ((gamma.reshape(-1),), c, plane, last)
        )


def _group_norm_model(groups: int, c: int, size: int) -> Any:
    """torch's GroupNorm + SiLU export: Reshape -> InstanceNormalization (ones, zeros) ->
    Reshape -> Mul(gamma (C, 1, 1)) -> Add(beta (C, 1, 1)) -> Sigmoid, Mul, then a Relu
    after (a reader of the SiLU that is not part of it)."""
    rng = np.random.default_rng(c)
    init = [
        numpy_helper.from_array(np.array([1, groups, -1], np.int64), "gshape"),
        numpy_helper.from_array(np.array([1, c, size, size], np.int64), "back"),
        numpy_helper.from_array(np.ones(groups, np.float32), "ones"),
        numpy_helper.from_array(np.zeros(groups, np.float32), "zeros"),
        numpy_helper.from_array(rng.standard_normal((c, 1, 1)).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.standard_normal((c, 1, 1)).astype(np.float32), "beta"),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "gshape"], ["g1"]),
        helper.make_node("InstanceNormalization", ["g1", "ones", "zeros"], ["g2"]),
        helper.make_node("Reshape", ["g2", "back"], ["g3"]),
        helper.make_node("Mul", ["g3", "gamma"], ["g4"]),
        helper.make_node("Add", ["g4", "beta"], ["g5"]),
        helper.make_node("Sigmoid", ["g5"], ["s"]),
        helper.make_node("Mul", ["g5", "s"], ["silu"]),
        helper.make_node("Relu", ["silu"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "group_norm_silu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, c, size, size)).astype(np.float32)}


def test_a_group_norms_tail_is_one_chain_with_the_stepped_runs_bits() -> None:
    model, feeds = _group_norm_model(8, 64, 16)
    with np.errstate(all="ignore"):
        assert_modes_agree(model, feeds, rtol=0)
    sess = Session(model)
    sess.run(feeds)
    from onnxviz.runtime.fusion import run_nodes

    chains = [pn.fused for pn in run_nodes(sess.plan) if isinstance(pn.fused, ElementwiseChain)]
    assert len(chains) == 1
    assert [st.op_type for st in chains[0].steps] == ["Mul", "Add", fusion_elementwise.SILU, "Relu"]
    assert chains[0].native == (fusion_elementwise._NATIVE is not None)


def test_a_per_channel_operand_that_does_not_line_up_runs_the_nodes() -> None:
    # gamma of 8 values against x's 4 channels (it broadcasts along another axis):
    # the nodes one by one, their numbers and their broadcasting.
    rng = np.random.default_rng(2)
    gamma = rng.standard_normal((8, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Mul", ["x", "gamma"], ["a"]),
        helper.make_node("Add", ["a", "beta"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "misaligned",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(gamma, "gamma"),
            numpy_helper.from_array(np.float32(0.5), "beta"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((1, 4, 8, 1)).astype(np.float32)
    stepped = assert_modes_agree(model, {"x": x}, rtol=0)
    np.testing.assert_array_equal(stepped["y"], x * gamma + np.float32(0.5))
