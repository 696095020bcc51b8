"""The compiled LSTM and GRU time loops (runtime/native/_recurrent.c), at every level this
CPU has.

* Its sigmoid and tanh against float64 over the whole float range (random bit patterns,
  dense grids, the branch points, subnormals, infinities): within 2 ulp (tanh) and 3
  (sigmoid), saturating to exactly 0 and +-1, NaN in NaN out, tanh(-0) = -0.
* The layers (nn_rnn.lstm and nn_rnn.gru, both linear_before_reset values) on random
  shapes, directions, layouts, with and without biases and initial states: the C loop
  runs, padded batches too, and its Y and final states are the float64 ONNX equations'
  within a few float32 roundings per step, as close as the numpy loops get, and close to
  the numpy loops.
* A NaN in one sample's input makes exactly the values the float64 equations make NaN.
* Wrong sizes, dtypes, non-contiguous or read-only outputs and overlapping buffers raise
  ValueError.
* ONNX models made with onnx.helper (LSTM, GRU with and without linear_before_reset,
  weights as initializers: packed once, from the weight cache) against onnxruntime, and
  a stepped run gives the plain run's numbers bit for bit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import _weight_cache, nn_rnn, packed_gemm
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import compiled

from .differential import stepped_values

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
GATES = {"LSTM": 4, "GRU": 3, "GRU_lbr": 3}


def _module() -> Any:
    return compiled("recurrent")


@contextlib.contextmanager
def _native_at(level: int) -> Iterator[Any]:
    """The layers run their C loops at ``level`` (whatever ONNXVIZ_NATIVE says: the test
    command also runs with it off); the process's level afterwards."""
    module = _module()
    module.set_level(level)
    try:
        with mock.patch.object(nn_rnn, "_RECURRENT", module):
            yield module
    finally:
        module.set_level(native.level() or native.GENERIC)


# ---- the activations -------------------------------------------------------------------


def _ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in units of the float32 spacing at the exact value (subnormal floor)."""
    spacing = np.maximum(np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64), 2.0**-149)
    return np.abs(got.astype(np.float64) - exact) / spacing  # type: ignore[no-any-return]


def _activation_inputs() -> np.ndarray:
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, 2_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = [0.0, -0.0, 1e-45, -1e-45, 1e-30, 0.549306, 0.5493062, -0.5493062, 9.5, -9.5,
               9.0, 20.0, 87.0, -87.0, -88.0, -103.0, -104.0, -105.0, 105.0, 3.4e38, -3.4e38]  # fmt: skip
    return np.concatenate([
        bits[np.isfinite(bits)],
        np.linspace(-12, 12, 1_000_001, dtype=np.float32),
        np.linspace(-110, 110, 200_001, dtype=np.float32),
        np.array(special, dtype=np.float32),
    ])  # fmt: skip


@pytest.mark.parametrize("level", LEVELS)
def test_activations_are_within_a_few_ulp_everywhere(level: int) -> None:
    with _native_at(level) as module:
        _check_activations(module)


def _exact_sigmoid(x: np.ndarray) -> np.ndarray:
    # Not 0.5 (1 + tanh(x / 2)): that cancels below -20 or so, in float64 too.
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))  # type: ignore[no-any-return]


def _check_activations(module: Any) -> None:
    x = _activation_inputs()
    x64 = x.astype(np.float64)
    for name, fn, exact, bound in [
        ("tanh", module.tanh, np.tanh(x64), 2.0),
        ("sigmoid", module.sigmoid, _exact_sigmoid(x64), 3.0),
    ]:
        out = np.empty_like(x)
        fn(x, out)
        worst = _ulps(out, exact)
        assert worst.max() <= bound, f"{name}: {worst.max()} ulp at {x[np.argmax(worst)]}"
        assert np.all(np.abs(out) <= 1), name
    out = np.empty(7, np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, 50.0, -50.0, -0.0, -np.nan], np.float32)
    module.tanh(specials, out)
    np.testing.assert_array_equal(out[1:5], [1, -1, 1, -1])
    assert np.isnan(out[0]) and np.isnan(out[6])
    assert out[5] == 0 and np.signbit(out[5])
    module.sigmoid(specials, out)
    np.testing.assert_array_equal(out[[1, 2, 3, 5]], [1, 0, 1, 0.5])
    assert np.isnan(out[0]) and np.isnan(out[6])
    module.sigmoid(np.array([-50.0, -100.0, -200.0], np.float32), out[:3])
    # Relative accuracy far below 0 (0.5 + 0.5 tanh(x / 2) would give 0 below -17 or so),
    # the subnormal e^-100 to its spacing, then exactly 0.
    np.testing.assert_allclose(out[:2], [1.9287498e-22, 3.7200760e-44], rtol=3e-7, atol=2e-45)
    assert out[2] == 0


# ---- the layers --------------------------------------------------------------------------


def _sig(v: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(v / 2))  # type: ignore[no-any-return]


def _reference(op: str, ins: list[Any], direction: str, layout: int) -> list[np.ndarray]:
    """The ONNX equations in float64, one direction at a time, step by step."""
    vals: list[Any] = [None if v is None else np.asarray(v, np.float64) for v in ins]
    x, w, r, b, lens, h0, *rest = vals
    if layout:
        x = x.transpose(1, 0, 2)
        h0 = None if h0 is None else h0.transpose(1, 0, 2)
        rest = [None if v is None else v.transpose(1, 0, 2) for v in rest]
    steps, batch = x.shape[:2]
    lens = np.full(batch, steps) if lens is None else lens
    dirs, gh = w.shape[:2]
    hs = gh // GATES[op]
    y = np.zeros((steps, dirs, batch, hs))
    finals: list[list[np.ndarray]] = [[], []]
    for d in range(dirs):
        wb, rb = (b[d, :gh], b[d, gh:]) if b is not None else (np.zeros(gh), np.zeros(gh))
        h = np.zeros((batch, hs)) if h0 is None else h0[d]
        c = np.zeros((batch, hs)) if not rest or rest[0] is None else rest[0][d]
        order = range(steps - 1, -1, -1) if direction == "reverse" or d == 1 else range(steps)
        for t in order:
            # A sample's steps from its length on are not taken: its state stays, its Y is 0.
            going = (t < lens)[:, None]
            h_was, c_was = h, c
            xw = x[t] @ w[d].T + wb
            if op == "LSTM":
                g = xw + h @ r[d].T + rb
                i, o, f, cc = (g[:, k * hs : (k + 1) * hs] for k in range(4))
                c = _sig(f) * c + _sig(i) * np.tanh(cc)
                h = _sig(o) * np.tanh(c)
            else:
                hr = h @ r[d].T
                z = _sig(xw[:, :hs] + hr[:, :hs] + rb[:hs])
                rg = _sig(xw[:, hs : 2 * hs] + hr[:, hs : 2 * hs] + rb[hs : 2 * hs])
                if op == "GRU_lbr":
                    cand = xw[:, 2 * hs :] + rg * (hr[:, 2 * hs :] + rb[2 * hs :])
                else:
                    cand = xw[:, 2 * hs :] + (rg * h) @ r[d, 2 * hs :].T + rb[2 * hs :]
                h = (1 - z) * np.tanh(cand) + z * h
            h, c = np.where(going, h, h_was), np.where(going, c, c_was)
            y[t, d] = np.where(going, h, 0)
        finals[0].append(h)
        finals[1].append(c)
    outs = [y, np.stack(finals[0])] + ([np.stack(finals[1])] if op == "LSTM" else [])
    if layout:
        outs = [outs[0].transpose(2, 0, 1, 3)] + [s.transpose(1, 0, 2) for s in outs[1:]]
    return outs


def _inputs(
    rng: np.random.Generator, op: str, steps: int, batch: int, n_in: int, hidden: int,
    dirs: int, layout: int, bias: bool, states: bool, padded: bool = False,
) -> list[Any]:  # fmt: skip
    gates = GATES[op]
    # Padding: each sample's length anywhere from 0 to all the steps.
    lens = rng.integers(0, steps + 1, batch).astype(np.int32) if padded else None
    scale = 1 / np.sqrt(hidden)  # a trained layer's weights: PyTorch's initial range

    def rand(*shape: int, s: float = 1.0) -> np.ndarray:
        return (rng.uniform(-s, s, shape)).astype(np.float32)

    x = rand(batch, steps, n_in, s=2) if layout else rand(steps, batch, n_in, s=2)
    w = rand(dirs, gates * hidden, n_in, s=scale)
    r = rand(dirs, gates * hidden, hidden, s=scale)
    b = rand(dirs, 2 * gates * hidden, s=scale) if bias else None

    def state() -> np.ndarray | None:
        if not states:
            return None
        return rand(batch, dirs, hidden) if layout else rand(dirs, batch, hidden)

    return [x, w, r, b, lens, state()] + ([state()] if op == "LSTM" else [])


def _run(op: str, ins: list[Any], **attrs: Any) -> list[np.ndarray]:
    if op == "LSTM":
        return list(nn_rnn.lstm(*ins, **attrs))
    return list(nn_rnn.gru(*ins, linear_before_reset=int(op == "GRU_lbr"), **attrs))


def _errors(got: list[np.ndarray], want: list[np.ndarray]) -> list[float]:
    """Per output, max |got - want|; the cell state (LSTM's third output, unbounded)
    relative to max(1, |want|)."""
    errs = []
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        diff = np.abs(g.astype(np.float64) - w)
        errs.append(float((diff / np.maximum(1, np.abs(w)) if k == 2 else diff).max()))
    return errs


SETTINGS = settings(
    max_examples=50, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip


@SETTINGS
@given(
    op=st.sampled_from(sorted(GATES)),
    steps=st.integers(1, 20),
    batch=st.integers(1, 9),
    n_in=st.integers(1, 9),
    hidden=st.one_of(st.integers(1, 70), st.sampled_from([8, 15, 16, 17, 31, 32, 33, 48, 64])),
    direction=st.sampled_from(["forward", "reverse", "bidirectional"]),
    layout=st.integers(0, 1),
    bias=st.booleans(),
    states=st.booleans(),
    padded=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_loops_give_the_float64_equations_at_every_level(
    op: str, steps: int, batch: int, n_in: int, hidden: int, direction: str, layout: int,
    bias: bool, states: bool, padded: bool, seed: int,
) -> None:  # fmt: skip
    _module()
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(seed)
    ins = _inputs(rng, op, steps, batch, n_in, hidden, dirs, layout, bias, states, padded)
    attrs = {"hidden_size": hidden, "direction": direction, "layout": layout}
    want = _reference(op, ins, direction, layout)
    with mock.patch.object(nn_rnn, "_RECURRENT", None):
        numpy_loop = _run(op, ins, **attrs)
    numpy_err = _errors(numpy_loop, want)
    for level in LEVELS:
        spy = "_lstm_loop" if op == "LSTM" else "_gru_loop"
        with (
            _native_at(level),
            mock.patch.object(nn_rnn, spy, wraps=getattr(nn_rnn, spy)) as called,
        ):
            got = _run(op, ins, **attrs)
        assert called.call_count == dirs
        for g, w in zip(got, want, strict=True):
            assert g.dtype == np.float32 and g.shape == w.shape
        # A few float32 roundings per step, compounded by the steps: as close as the numpy
        # loops (whose products and tanh round too), and 2e-6 for short sequences.
        bound = 1e-7 * steps + 1e-6
        for k, (err, ref_err) in enumerate(zip(_errors(got, want), numpy_err, strict=True)):
            assert err <= max(bound, 2 * ref_err), (level, k, err, ref_err)
        for g, n in zip(got, numpy_loop, strict=True):
            np.testing.assert_allclose(g, n, rtol=1e-5, atol=2 * bound)


@pytest.mark.parametrize("op", sorted(GATES))
def test_short_loops_are_within_2e_6_of_the_float64_equations(op: str) -> None:
    _module()
    rng = np.random.default_rng(3)
    for level in LEVELS:
        for hidden in (5, 16, 37, 70):
            ins = _inputs(rng, op, 4, 3, 6, hidden, 2, 0, True, True)
            want = _reference(op, ins, "bidirectional", 0)
            with _native_at(level):
                got = _run(op, ins, hidden_size=hidden, direction="bidirectional")
            assert max(_errors(got, want)) <= 2e-6, (level, hidden)


@pytest.mark.parametrize("op", sorted(GATES))
def test_a_nan_goes_where_the_equations_send_it(op: str) -> None:
    _module()
    rng = np.random.default_rng(4)
    ins = _inputs(rng, op, 6, 4, 5, 19, 1, 0, True, True)
    ins[0][2, 1, 3] = np.nan  # sample 1 from step 2 on; the other samples never
    with np.errstate(invalid="ignore"):
        want = _reference(op, ins, "forward", 0)
    assert np.isnan(want[0]).any() and not np.isnan(want[0]).all()
    for level in LEVELS:
        with _native_at(level):
            got = _run(op, ins, hidden_size=19)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            ok = ~np.isnan(w)
            np.testing.assert_allclose(g[ok], w[ok], rtol=0, atol=2e-6)


@pytest.mark.parametrize("op", sorted(GATES))
def test_other_dtypes_and_activations_stay_on_the_numpy_loops(op: str) -> None:
    _module()
    rng = np.random.default_rng(6)
    ins = _inputs(rng, op, 5, 3, 4, 9, 1, 0, True, True)
    spy = "_lstm_loop" if op == "LSTM" else "_gru_loop"
    acts = ["Sigmoid", "Tanh", "Relu"] if op == "LSTM" else ["Sigmoid", "Relu"]
    with _native_at(LEVELS[-1]), mock.patch.object(nn_rnn, spy) as called:
        _run(op, [v if v is None else v.astype(np.float64) for v in ins], hidden_size=9)
        _run(op, ins, hidden_size=9, clip=3.0)
        _run(op, ins, hidden_size=9, activations=acts)
    assert called.call_count == 0


def _raw_args(op: str, steps: int = 3, batch: int = 2, hidden: int = 5) -> list[Any]:
    g = GATES[op]
    blocks = -(-hidden // 16)
    f = np.zeros
    proj = f((steps, batch, g * hidden), np.float32)
    y = f((steps, 1, batch, hidden), np.float32)
    state = f((batch, hidden), np.float32)
    dims = [steps, batch, hidden, 1, 0, False]
    if op == "LSTM":
        w = f((blocks, hidden, 4, 16), np.float32)
        return [proj, w, state, state.copy(), y, state.copy(), state.copy(), *dims]
    if op == "GRU_lbr":
        w = f((blocks, hidden, 3, 16), np.float32)
        return [proj, w, None, f(hidden, np.float32), state, y, state.copy(), *dims, True]
    w1, w2 = f((blocks, hidden, 2, 16), np.float32), f((blocks, hidden, 1, 16), np.float32)
    return [proj, w1, w2, None, state, y, state.copy(), *dims, False]


@pytest.mark.parametrize("op", sorted(GATES))
def test_wrong_calls_raise_value_error(op: str) -> None:
    module = _module()
    call = module.lstm if op == "LSTM" else module.gru
    good = _raw_args(op)
    call(*good)  # the well-formed call runs
    outputs = [4, 5, 6] if op == "LSTM" else [5, 6]
    bad: list[list[Any]] = []
    for k, v in enumerate(good):
        if isinstance(v, np.ndarray):
            bad.append([*good[:k], v[..., :-1].copy(), *good[k + 1 :]])  # one float short
            bad.append([*good[:k], v.astype(np.float64), *good[k + 1 :]])
    for k in outputs:
        ro = good[k].copy()
        ro.flags.writeable = False
        bad.append([*good[:k], ro, *good[k + 1 :]])
        bad.append([*good[:k], good[0 if k != 0 else 1], *good[k + 1 :]])  # wrong buffer
    n = 7
    for pos, value in [(n, 0), (n + 1, 0), (n + 2, 0), (n + 3, 3), (n + 4, 1), (n + 4, -1)]:
        bad.append([*good[:pos], value, *good[pos + 1 :]])
    # Overlapping buffers: h_out inside y; h_out the initial h (an input).
    y_view = np.frombuffer(good[outputs[0]], np.float32)[: 2 * 5]
    bad.append([*good[: outputs[1]], y_view, *good[outputs[1] + 1 :]])
    h0 = 2 if op == "LSTM" else 4
    bad.append([*good[: outputs[1]], good[h0], *good[outputs[1] + 1 :]])
    if op == "LSTM":  # h_out and c_out one array
        bad.append([*good[:6], good[5], *good[7:]])
    for lens in (np.zeros(3, np.int64), np.zeros(2, np.int32), np.zeros(2, np.float64)):
        bad.append([*good, lens])  # batch 2: two int64 lengths
    if op != "LSTM":
        bad.append([*good[:2], good[1], good[3] if good[3] is not None else None, *good[4:]])
        swapped = list(good)
        swapped[-1] = not good[-1]
        bad.append(swapped)
    for args in bad:
        with pytest.raises(ValueError):
            call(*args)


# ---- models against onnxruntime ------------------------------------------------------------


def _model(op: str, steps: int, batch: int, n_in: int, hidden: int, direction: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:  # fmt: skip
    rng = np.random.default_rng(12)
    dirs = 2 if direction == "bidirectional" else 1
    ins = _inputs(rng, op, steps, batch, n_in, hidden, dirs, 0, True, True)
    names = ["x", "w", "r", "b", "", "h0"] + (["c0"] if op == "LSTM" else [])
    inits = [numpy_helper.from_array(v, n) for n, v in zip(names[1:4], ins[1:4], strict=True)]
    outs = ["y", "h"] + (["c"] if op == "LSTM" else [])
    attrs: dict[str, Any] = {"hidden_size": hidden, "direction": direction}
    if op != "LSTM":
        attrs["linear_before_reset"] = int(op == "GRU_lbr")
    node = helper.make_node(op.split("_")[0], names, outs, **attrs)
    feeds = {"x": ins[0], "h0": ins[5]} | ({"c0": ins[6]} if op == "LSTM" else {})
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outs],
        initializer=inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model, feeds


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", sorted(GATES))
def test_models_give_onnxruntimes_numbers(op: str, direction: str) -> None:
    _module()
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _model(op, 12, 5, 10, 40, direction)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    names = [o.name for o in model.graph.output]
    for level in LEVELS:
        _weight_cache.clear()
        with _native_at(level), mock.patch.object(
            nn_rnn, "_lstm_loop" if op == "LSTM" else "_gru_loop",
            wraps=getattr(nn_rnn, "_lstm_loop" if op == "LSTM" else "_gru_loop"),
        ) as called:  # fmt: skip
            session = Session(model)
            first = session.run(feeds)
            stored = _weight_cache.stored_bytes()
            again = session.run(feeds)  # the packed weights from the cache, unchanged
            assert stored > 0 and _weight_cache.stored_bytes() == stored
            stepped = stepped_values(model, feeds)
        # The unwatched runs' loops run in the node's held layer (native/_recurrent.c's
        # `held`, no Python wrapper to count), the stepped run's through `_*_loop`.
        layer = next(pn for pn in run_nodes(session.plan) if pn.op_type in ("LSTM", "GRU"))
        assert type(layer.call_many or layer.call).__name__ == "HeldLayer"
        assert called.call_count == (2 if direction == "bidirectional" else 1)
        for name, ref in zip(names, want, strict=True):
            np.testing.assert_allclose(first[name], ref, rtol=1e-5, atol=2e-6, err_msg=name)
            np.testing.assert_array_equal(again[name], first[name])
            np.testing.assert_array_equal(stepped[name], first[name])


@pytest.mark.parametrize("op", sorted(GATES))
def test_a_one_step_projection_past_the_small_products_runs_in_c(op: str) -> None:
    # One step of batch 1 from 128 inputs: X.W^T is 1 x 128 x (G*128), more multiply-adds
    # than packed_gemm.small_macs() at AVX2, fewer than projection_macs(): the held layer
    # makes it in C (its Python projection, OpenBLAS and the bias add, cost 10 us more a
    # call), and the stepped run's Python projection routes it to the same kernel.
    _module()
    model, feeds = _model(op, 1, 1, 128, 128, "forward")
    names = [o.name for o in model.graph.output]
    gates = GATES[op]
    assert packed_gemm.SMALL_MACS < 128 * gates * 128 <= packed_gemm.projection_macs()
    for level in LEVELS:
        _weight_cache.clear()
        with _native_at(level), mock.patch.object(
            nn_rnn, "_projected", wraps=nn_rnn._projected
        ) as projected:  # fmt: skip
            session = Session(model)
            first = session.run(feeds)
            again = session.run(feeds)
            unwatched_calls = projected.call_count
            stepped = stepped_values(model, feeds)
        if packed_gemm.module() is not None:  # (off: the packed GEMM too, numpy's product)
            assert unwatched_calls == 0, f"level {level}: the projection left C"
        for name in names:
            np.testing.assert_array_equal(again[name], first[name])
            np.testing.assert_array_equal(stepped[name], first[name], err_msg=f"level {level}")


@pytest.mark.parametrize("op", sorted(GATES))
def test_float16_layers_run_the_loop_in_float32(op: str) -> None:
    # float16 (and the ml_dtypes floats) compute in float32 (nn_geometry.compute_dtype):
    # the C loop runs, and the outputs are the float32 layer's rounded to float16.
    _module()
    rng = np.random.default_rng(13)
    ins16 = [None if v is None else v.astype(np.float16) for v in _inputs(rng, op, 7, 3, 5, 21, 2, 0, True, True)]  # fmt: skip
    ins32 = [None if v is None else v.astype(np.float32) for v in ins16]
    spy = "_lstm_loop" if op == "LSTM" else "_gru_loop"
    for level in LEVELS:
        with _native_at(level), mock.patch.object(
            nn_rnn, spy, wraps=getattr(nn_rnn, spy)
        ) as called:  # fmt: skip
            half = _run(op, ins16, hidden_size=21, direction="bidirectional")
            single = _run(op, ins32, hidden_size=21, direction="bidirectional")
        assert called.call_count == 4
        for a, b in zip(half, single, strict=True):
            assert a.dtype == np.float16
            np.testing.assert_array_equal(a, b.astype(np.float16))


# ---- the held layer (native/_recurrent.c's `held`) ----------------------------------------


def _held_layer(op: str, ins: list[Any], n: int, **attrs: Any) -> Any:
    """The node's specialized call for constant W, R, B (the held layer)."""
    from onnxviz.runtime.registry import RUNTIME, specializer_of

    kernel = nn_rnn.lstm if op == "LSTM" else nn_rnn.gru
    if op != "LSTM":
        attrs["linear_before_reset"] = int(op == "GRU_lbr")
    known = (RUNTIME, ins[1], ins[2], ins[3], None, RUNTIME, RUNTIME)[: len(ins)]
    maker = specializer_of(kernel)
    assert maker is not None
    return maker(attrs, known, n)


@pytest.mark.parametrize("op", sorted(GATES))
def test_the_held_layer_gives_its_calls_outputs_bit_for_bit(op: str) -> None:
    """Every direction, with and without B and initial states, one to three outputs, one
    step and several, a batch of one and more, 1 to 24 input features (a projection the
    held product takes and one it hands to Python): the outputs of the Python call it
    fronts, to the bit, in fresh arrays, at every level."""
    _module()
    rng = np.random.default_rng(21)
    for level in LEVELS:
        with _native_at(level):
            for direction, dirs in [("forward", 1), ("reverse", 1), ("bidirectional", 2)]:
                for steps, batch, n_in, bias, states in [
                    (1, 1, 8, True, False), (5, 3, 24, False, True), (3, 2, 1, True, True),
                ]:  # fmt: skip
                    ins = _inputs(rng, op, steps, batch, n_in, 16, dirs, 0, bias, states)
                    n_out = 3 if op == "LSTM" else 2
                    for n in range(1, n_out + 1):
                        held = _held_layer(op, ins, n, hidden_size=16, direction=direction)
                        assert type(held).__name__ == "HeldLayer"
                        got, again = held(*ins), held(*ins)
                        want = held.fallback(*ins)
                        got_l = [got] if n == 1 else got
                        want_l = [want] if n == 1 else want
                        assert len(got_l) == n
                        for g, w, a in zip(got_l, want_l, [again] if n == 1 else again):
                            assert g.dtype == np.float32 and g.shape == w.shape
                            np.testing.assert_array_equal(g, w)
                            assert not np.shares_memory(g, a)


def test_the_held_layer_hands_on_every_call_it_does_not_take() -> None:
    with _native_at(max(LEVELS)):  # (whatever ONNXVIZ_NATIVE says)
        _hands_on()


def _hands_on() -> None:
    rng = np.random.default_rng(22)
    ins = _inputs(rng, "LSTM", 3, 2, 8, 16, 1, 0, True, True)
    held = _held_layer("LSTM", ins, 3, hidden_size=16)
    seen: list[tuple[Any, ...]] = []
    inner = held.fallback

    def recorder(*args: Any, **kw: Any) -> Any:
        seen.append(args)
        return inner(*args, **kw)

    module = nn_rnn._RECURRENT
    assert module is not None
    x, w, r, b, lens, h0, c0 = ins
    compiled_ = nn_rnn._compiled_case(
        4, w, r, b, None, {"hidden_size": 16}, ["Sigmoid", "Tanh", "Tanh"]
    )
    assert compiled_ is not None
    compiled_.hold_projections(w)
    expect = ((1, w), (2, r), (3, b), (4, None), (7, None))
    fronted = compiled_.held_layer(w, expect, 3, recorder)
    lens3 = np.full(2, 3, np.int32)
    others: list[tuple[Any, ...]] = [
        (x, w.copy(), r, b, None, h0, c0),  # another W, equal
        (x, w, r, b, lens3, h0, c0),  # sequence_lens
        (x, w, r, b, None, h0, c0, np.zeros((1, 48), np.float32)),  # peepholes
        (x.astype(np.float64), w, r, b, None, h0, c0),
        (np.asfortranarray(x), w, r, b, None, h0, c0),
        (x[:, :, :4], w, r, b, None, h0, c0),  # other features: the kernel's error
        (x, w, r, b, None, h0.astype(np.float64), c0),
        (x, w, r, b, None, h0[:, :1], c0),  # a state of another batch
        (x[:, :0], w, r, b, None, None, None),  # an empty batch
        (x, w),
    ]
    for args in others:
        try:
            want = inner(*args)
        except Exception as exc:
            with pytest.raises(type(exc)):
                fronted(*args)
        else:
            got = fronted(*args)
            for g, v in zip(got, want):
                np.testing.assert_array_equal(g, v)
        assert len(seen) == 1 and all(a is c for a, c in zip(seen.pop(), args))
    got = fronted(x, w, r, b, None, h0, c0)
    assert not seen
    for g, v in zip(got, held(x, w, r, b, None, h0, c0)):
        np.testing.assert_array_equal(g, v)
    with pytest.raises(ValueError):
        module.held(
            5,
            False,
            16,
            8,
            (False,),
            (print,),
            (None,),
            (None,),
            (None,),
            (None,),
            (),
            1,
            print,
            np.ndarray,
            np.empty,
            np.dtype(np.float32),
        )
