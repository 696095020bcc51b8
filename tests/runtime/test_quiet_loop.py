"""The compiled node loop of quiet runs (quiet_loop.py, native/_runloop.c) runs what the
Python loop runs: the same kernels on the same values in the same order, so the same
bits, the same profile, the same errors naming the same node (issue 21).

Each test runs a model twice, once with the compiled loop and once with the Python loop
alone (``quiet_loop.loop`` answering None, as with the compiled kernels off), whatever
ONNXVIZ_NATIVE says: the kernels are the same in both runs, only the loop differs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from onnx import helper, numpy_helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native, quiet_loop
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.session import Session

from .differential import assert_modes_agree
from .native_modules import compiled
from .test_differential import random_graphs
from .test_prepared_calls import arithmetic_graphs

pytestmark = pytest.mark.numeric

F = onnx.TensorProto.FLOAT
I64 = onnx.TensorProto.INT64


def _module() -> Any:
    module = compiled("runloop", "the Python loop runs every node")
    module.setup(np.ndarray, quiet_loop._normalize_one)
    return module


@contextmanager
def _loop(on: bool, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    module = _module() if on else None
    with monkeypatch.context() as m:
        m.setattr(quiet_loop, "loop", lambda: module)
        yield


def _run_both(
    model: onnx.ModelProto, feeds: dict[str, Any], monkeypatch: pytest.MonkeyPatch, runs: int = 2
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Session]:
    """Outputs and node times of ``runs`` runs with each loop (a fresh session each, so
    both see the first run's folding); the compiled loop's session last."""
    results: list[tuple[list[dict[str, Any]], dict[str, Any], Session]] = []
    for on in (False, True):
        with _loop(on, monkeypatch):
            sess = Session(model)
            with np.errstate(all="ignore"):
                outs = [sess.run(feeds) for _ in range(runs)]
            results.append((outs, sess.node_times, sess))
    (py_outs, py_times, _), (c_outs, c_times, sess) = results
    assert sorted(c_times) == sorted(py_times)
    assert {k: v[0] for k, v in c_times.items()} == {k: v[0] for k, v in py_times.items()}
    assert all(seconds >= 0 for _, seconds in c_times.values())
    return py_outs, c_outs, sess


def _same_bits(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    for g, w in zip(got, want):
        assert sorted(g) == sorted(w)
        for name in w:
            if isinstance(w[name], np.ndarray):
                assert g[name].dtype == w[name].dtype and g[name].shape == w[name].shape
                np.testing.assert_array_equal(g[name], w[name], err_msg=name)
            else:
                assert g[name] == w[name], name


def _every_mode_model() -> tuple[onnx.ModelProto, dict[str, Any]]:
    """Plain calls (Add, Relu, Reshape), specialized calls of several outputs (Split,
    and LSTM where its compiled loop runs), a context kernel without one (Dropout), a
    fused node (MatMul + Add), a folded one (Shape of an initializer, Cast), control
    flow (If, whose branch runs quietly from the compiled loop) and a function call (the
    Python loop's) in one graph."""
    hidden = 4
    rng = np.random.default_rng(3)
    then_graph = helper.make_graph(
        [helper.make_node("Neg", ["h0"], ["t_out"], name="then_neg")],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", F, None)],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Abs", ["h0"], ["e_out"], name="else_abs")],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", F, None)],
    )
    nodes = [
        helper.make_node("Shape", ["w_mm"], ["w_shape"], name="shape_of_weight"),
        helper.make_node("Cast", ["w_shape"], ["w_shape_f"], to=F, name="cast_shape"),
        helper.make_node("MatMul", ["x", "w_mm"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "b_mm"], ["mm_b"], name="mm_bias"),
        helper.make_node("Relu", ["mm_b"], ["r"], name="relu"),
        # A chain (SiLU, then a scale): its compiled call is held after the first run.
        helper.make_node("Sigmoid", ["r"], ["sg"], name="sigmoid"),
        helper.make_node("Mul", ["r", "sg"], ["silu"], name="silu"),
        helper.make_node("Mul", ["silu", "scale"], ["scaled"], name="scale"),
        helper.make_node("Reshape", ["scaled", "seq_shape"], ["seq"], name="to_seq"),
        helper.make_node(
            "LSTM", ["seq", "W", "R", "B"], ["all_h", "h_last"], hidden_size=hidden, name="lstm"
        ),
        helper.make_node("Split", ["all_h"], ["h0", "h1"], axis=0, name="split"),
        helper.make_node("ReduceSum", ["h1"], ["s"], keepdims=0, name="sum"),
        helper.make_node("Greater", ["s", "zero"], ["positive"], name="positive"),
        helper.make_node(
            "If", ["positive"], ["branch"], then_branch=then_graph, else_branch=else_graph
        ),
        helper.make_node("Mul", ["branch", "h_last"], ["y_pre"], name="mul"),
        # A function call: the compiled loop leaves it to the Python loop (PYTHON).
        helper.make_node("Twice", ["y_pre"], ["y_twice"], domain="local", name="twice"),
        # A context kernel without a specialized call (it may draw): _call_kernel.
        helper.make_node("Dropout", ["y_twice"], ["y"], name="dropout"),
    ]
    inits = {
        "w_mm": rng.standard_normal((6, 8)).astype(np.float32),
        "b_mm": rng.standard_normal(8).astype(np.float32),
        "seq_shape": np.array([2, 1, 8], np.int64),
        "W": rng.standard_normal((1, 4 * hidden, 8)).astype(np.float32) * 0.3,
        "R": rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32) * 0.3,
        "B": rng.standard_normal((1, 8 * hidden)).astype(np.float32) * 0.1,
        "zero": np.array(0.0, np.float32),
        "scale": np.array(0.75, np.float32),
    }
    graph = helper.make_graph(
        nodes,
        "every_mode",
        [helper.make_tensor_value_info("x", F, [2, 6])],
        [
            helper.make_tensor_value_info("y", F, None),
            helper.make_tensor_value_info("w_shape_f", F, None),
        ],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    twice = helper.make_function(
        "local",
        "Twice",
        ["a"],
        ["b"],
        [helper.make_node("Add", ["a", "a"], ["b"])],
        [helper.make_opsetid("", 17)],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[twice],
    )
    return model, {"x": rng.standard_normal((2, 6)).astype(np.float32)}


def test_every_step_mode_gives_the_python_loops_bits_and_profile(monkeypatch) -> None:
    model, feeds = _every_mode_model()
    assert_modes_agree(model, feeds)
    py_outs, c_outs, sess = _run_both(model, feeds, monkeypatch, runs=3)
    _same_bits(c_outs, py_outs)
    # Every mode was there (else this compares the Python loop with itself).
    nodes = run_nodes(sess.plan)
    modes = {quiet_loop.step_mode(pn, None)[0] for pn in nodes}
    assert {quiet_loop.PLAIN, quiet_loop.MANY, quiet_loop.FUSED, quiet_loop.KERNEL} <= modes
    assert {quiet_loop.FOLDED, quiet_loop.PYTHON} <= modes  # Shape/Cast folded; Twice
    if_node = next(pn for pn in nodes if pn.op_type == "If")
    assert quiet_loop.step_mode(if_node, None)[0] == quiet_loop.KERNEL
    assert all(calls == 1 for calls, _ in sess.node_times.values())  # the last run's
    # The MatMul + Add and the chain made their quick calls on the first run, and the
    # later runs took them (held products and chains, compiled).
    # (With the compiled kernels off there are none: the fused calls run.)
    quick = [getattr(pn.fused, "quick", None) for pn in nodes if pn.kind == "fused"]
    if native.level() is not None:
        assert {type(q).__name__ for q in quick} >= {"Product", "HeldChain"}


# Random graphs, each example run with both loops (each opens its own monkeypatch
# context, so the function-scoped fixture is shared safely).
_RANDOM_GRAPHS = settings(
    max_examples=70,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@_RANDOM_GRAPHS
@given(random_graphs())
def test_random_fused_graphs_give_the_python_loops_bits(monkeypatch, case) -> None:
    model, feeds = case
    py_outs, c_outs, _ = _run_both(model, feeds, monkeypatch)
    _same_bits(c_outs, py_outs)


@_RANDOM_GRAPHS
@given(arithmetic_graphs())
def test_random_arithmetic_in_place_gives_the_python_loops_bits(monkeypatch, case) -> None:
    """Values past inplace.MIN_ELEMENTS: the compiled loop leaves those nodes to the
    Python loop, which may compute into a dead input."""
    model, feeds = case
    py_outs, c_outs, _ = _run_both(model, feeds, monkeypatch)
    _same_bits(c_outs, py_outs)


def _failing_models() -> list[tuple[str, onnx.ModelProto, dict[str, Any], str]]:
    """(what, model, feeds that make one node fail, that node's label)."""
    rng = np.random.default_rng(0)
    bad_mm = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="first"),
            helper.make_node("MatMul", ["r", "w"], ["y"], name="product"),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, None)],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=[numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")],
    )
    hidden = 3
    lstm = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="first"),
            helper.make_node("LSTM", ["r", "W", "R"], ["h"], hidden_size=hidden, name="lstm"),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, None)],
        [helper.make_tensor_value_info("h", F, None)],
        initializer=[
            numpy_helper.from_array(np.ones((1, 4 * hidden, 5), np.float32), "W"),
            numpy_helper.from_array(np.ones((1, 4 * hidden, hidden), np.float32), "R"),
        ],
    )
    split = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="first"),
            helper.make_node("Split", ["r", "parts"], ["a", "b"], axis=0, name="split"),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, None)],
        [helper.make_tensor_value_info("a", F, None), helper.make_tensor_value_info("b", F, None)],
        initializer=[numpy_helper.from_array(np.array([1, 1], np.int64), "parts")],
    )
    pool = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="first"),
            helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], name="pool"),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, None)],
        [helper.make_tensor_value_info("p", F, None)],
    )
    fused = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="first"),
            helper.make_node("MatMul", ["r", "w"], ["m"], name="mm"),
            helper.make_node("Add", ["m", "b"], ["y"], name="bias"),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, None)],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=[
            numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b"),
        ],
    )
    opset = [helper.make_opsetid("", 17)]
    return [
        ("plain", helper.make_model(bad_mm, opset_imports=opset), {"x": np.ones((2, 5), np.float32)}, "product"),
        ("many", helper.make_model(lstm, opset_imports=opset), {"x": np.ones((2, 1, 4), np.float32)}, "lstm"),
        ("many-split", helper.make_model(split, opset_imports=opset), {"x": np.ones((5, 2), np.float32)}, "split"),
        ("kernel", helper.make_model(pool, opset_imports=opset), {"x": np.ones((5, 2), np.float32)}, "pool"),
        ("fused", helper.make_model(fused, opset_imports=opset), {"x": np.ones((2, 5), np.float32)}, "mm"),
    ]  # fmt: skip


@pytest.mark.parametrize("case", _failing_models(), ids=lambda c: c[0])
def test_a_failing_node_is_named_as_the_python_loop_names_it(monkeypatch, case) -> None:
    _, model, feeds, label = case
    good = {k: np.ones((2, 4) if k == "x" else v.shape, np.float32) for k, v in feeds.items()}
    errors: list[ExecutionError] = []
    for on in (False, True):
        with _loop(on, monkeypatch):
            sess = Session(model)
            if case[0] in ("plain", "fused"):
                sess.run(good)  # the compiled program exists and ran once
            with pytest.raises(ExecutionError) as info:
                sess.run(feeds)
            errors.append(info.value)
            assert sess.state == "failed"
            failed = sess.frames[-1].current  # the frame stays, at the failed node
            assert failed is not None and failed.label == label
    py_err, c_err = errors
    assert str(c_err) == str(py_err)
    assert c_err.node is not None and c_err.node.startswith(label)


def test_a_fed_initializer_is_not_read_from_the_folded_steps(monkeypatch) -> None:
    """IR 3: an initializer that is also an input.  Runs with its default fold the
    nodes that read it; a run that feeds it must compute them again."""
    graph = helper.make_graph(
        [
            helper.make_node("Neg", ["c"], ["nc"], name="neg"),
            helper.make_node("Add", ["x", "nc"], ["y"], name="add"),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, [3]), helper.make_tensor_value_info("c", F, [3])],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=[numpy_helper.from_array(np.float32([1, 2, 3]), "c")],
    )
    model = helper.make_model(graph, ir_version=3, opset_imports=[helper.make_opsetid("", 9)])
    x = np.float32([10, 20, 30])
    for on in (False, True):
        with _loop(on, monkeypatch):
            sess = Session(model)
            for _ in range(2):  # the second run reads the folded Neg
                np.testing.assert_array_equal(sess.run({"x": x})["y"], [9, 18, 27])
            fed = sess.run({"x": x, "c": np.float32([0, 0, 1])})["y"]
            np.testing.assert_array_equal(fed, [10, 20, 29])
            np.testing.assert_array_equal(sess.run({"x": x})["y"], [9, 18, 27])


def test_a_loop_body_runs_compiled_and_gives_the_python_loops_bits(monkeypatch) -> None:
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["acc_in", "k"], ["scaled"], name="scale"),
            helper.make_node("Add", ["scaled", "one"], ["acc_out"], name="shift"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", F, [4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", F, [4]),
        ],
        initializer=[
            numpy_helper.from_array(np.float32(1.0009765), "k"),
            numpy_helper.from_array(np.float32(0.25), "one"),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["acc"], body=body, name="loop")],
        "g",
        [helper.make_tensor_value_info("x", F, [4]), helper.make_tensor_value_info("n", I64, [])],
        [helper.make_tensor_value_info("acc", F, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.float32([1, -2, 3.5, 1e-3]), "n": np.array(300, np.int64)}
    py_outs, c_outs, sess = _run_both(model, feeds, monkeypatch)
    _same_bits(c_outs, py_outs)
    assert sess.node_times["main/body:loop::scale"][0] == 300


# -- the compiled module itself --------------------------------------------------------


class _Executor:
    cancelled = False


def _program(module: Any, steps: list[tuple[Any, ...]], n_slots: int) -> Any:
    return module.compile(steps, n_slots)


def test_the_loop_stops_where_the_python_loop_must_take_over() -> None:
    module = _module()
    calls: list[str] = []

    def twice(a: Any) -> Any:
        calls.append("twice")
        return a * 2

    big = np.ones(1000, np.float32)
    steps = [
        (quiet_loop.PLAIN, True, twice, None, (0,), (1,), ()),  # an in-place candidate
        (quiet_loop.PLAIN, False, twice, None, (1,), (2,), (1,)),
        (quiet_loop.PYTHON, False, None, None, (2,), (3,), ()),
    ]
    program = module.compile(steps, 4)
    times = bytearray(16 * len(steps))
    where = [0]
    values: list[Any] = [big, None, None, None]
    ex = _Executor()
    # In place on, the first input big enough: the Python loop decides.
    assert module.run(program, 0, values, ex, times, where, 1000, True) == 0
    assert calls == []
    # Off (or the input too small): both plain steps run, then the PYTHON one stops it.
    assert module.run(program, 0, values, ex, times, where, -1, True) == 2
    assert calls == ["twice", "twice"]
    assert values[1] is None  # freed after its last reader
    np.testing.assert_array_equal(values[2], big * 4)
    counts = np.frombuffer(times, np.float64).reshape(-1, 2)
    assert counts[:, 0].tolist() == [1.0, 1.0, 0.0] and (counts[:2, 1] >= 0).all()
    # Cancelled: it stops before the next step.
    ex.cancelled = True
    assert module.run(program, 1, values, ex, times, where, -1, True) == 1


def test_a_cancel_stops_the_loop_within_32_steps_or_after_a_slow_one() -> None:
    """`cancelled` is read at the first step, then every 32 steps and after any 100 us of
    steps: a cancel set by a step (another thread's, in the app) stops the run soon."""
    module = _module()
    ex = _Executor()
    seen: list[int] = []

    def step(k: int, slow: bool) -> Any:
        def call(a: Any) -> Any:
            seen.append(k)
            if k == 10:
                ex.cancelled = True
            if slow:
                time.sleep(0.002)
            return a

        return call

    for slow in (False, True):
        seen.clear()
        ex.cancelled = False
        steps = [(quiet_loop.PLAIN, False, step(k, slow), None, (0,), (0,), ()) for k in range(200)]
        program = _program(module, steps, 1)
        times = bytearray(16 * len(steps))
        stopped = module.run(program, 0, [np.ones(2)], ex, times, [0], -1, True)
        assert stopped == len(seen)  # it ran every step before the one it stopped at
        assert 11 <= stopped <= (11 if slow else 11 + 32)


def test_step_times_are_seconds_once_read() -> None:
    """The loop keeps ticks (the time-stamp counter where it is invariant); node_times
    gives seconds: a node that sleeps 20 ms shows about that."""

    module = _module()
    ex = _Executor()

    def sleeper(a: Any) -> Any:
        time.sleep(0.02)
        return a

    program = _program(module, [(quiet_loop.PLAIN, False, sleeper, None, (0,), (0,), ())], 1)
    times = bytearray(16)
    module.run(program, 0, [np.ones(2)], ex, times, [0], -1, True)
    calls, ticks = np.frombuffer(times, np.float64)
    seconds = ticks * module.seconds_per_tick()  # (quiet_loop.seconds_per_tick: this)
    assert calls == 1 and 0.019 <= seconds <= 0.2, seconds


def test_a_fused_steps_quick_call_comes_first_and_none_hands_over() -> None:
    """A FUSED step whose extra has a ``quick`` callable: its result is the node's one
    output; None from it (or no quick yet) makes the fused call; an error in it says
    where, as any call's."""
    module = _module()
    calls: list[str] = []

    class Fused:
        quick: Any = None

        def __call__(self, ex: Any, ins: list[Any]) -> list[Any]:
            calls.append("fused")
            return [ins[0] + 1]

    fused = Fused()
    steps = [(quiet_loop.FUSED, False, fused, fused, (0,), (1,), ())]
    program = module.compile(steps, 2)
    times = bytearray(16)
    where = [-1]
    x = np.zeros(3, np.float32)

    def run() -> Any:
        values: list[Any] = [x, None]
        assert module.run(program, 0, values, _Executor(), times, where, -1, True) == 1
        return values[1]

    np.testing.assert_array_equal(run(), x + 1)  # no quick: the fused call
    assert calls == ["fused"]
    fused.quick = lambda a: calls.append("quick") or a + 5
    np.testing.assert_array_equal(run(), x + 5)
    assert calls == ["fused", "quick"]
    fused.quick = lambda a: calls.append("declined")
    np.testing.assert_array_equal(run(), x + 1)
    assert calls == ["fused", "quick", "declined", "fused"]

    def fails(a: Any) -> Any:
        raise ZeroDivisionError("quick boom")

    fused.quick = fails
    with pytest.raises(ZeroDivisionError, match="quick boom"):
        run()
    assert where == [0]
    assert np.frombuffer(times, np.float64)[0] == 3.0  # three runs counted, not the failed


def test_a_failing_call_says_where_and_folded_steps_wait_for_fold() -> None:
    module = _module()

    def fails(a: Any) -> Any:
        raise ZeroDivisionError("boom")

    folded = [np.float32([7.0])]
    steps = [
        (quiet_loop.FOLDED, False, None, folded, (), (0,), ()),
        (quiet_loop.MANY, False, lambda a: [a, a + 1], None, (0,), (1, -1), ()),
        (quiet_loop.PLAIN, False, fails, None, (1,), (2,), ()),
    ]
    program = module.compile(steps, 3)
    times = bytearray(16 * 3)
    values: list[Any] = [None] * 3
    where = [-1]
    assert module.run(program, 0, values, _Executor(), times, where, -1, False) == 0
    with pytest.raises(ZeroDivisionError, match="boom"):
        module.run(program, 0, values, _Executor(), times, where, -1, True)
    assert where == [2]
    assert values[0] is folded[0] and values[1] is folded[0]


@pytest.mark.parametrize(
    ("steps", "n_slots", "error"),
    [
        ([(0, False, abs, None, (5,), (0,), ())], 2, ValueError),  # slot past the frame
        ([(0, False, abs, None, (0,), (1,), (-1,))], 2, ValueError),  # freeing slot -1
        ([(9, False, abs, None, (0,), (1,), ())], 2, ValueError),  # no such mode
        ([(0, False, abs, None, [0], (1,), ())], 2, TypeError),  # slots not a tuple
        ([(0, False, abs, None, (0,), (1,))], 2, TypeError),  # a field missing
    ],
)
def test_a_malformed_program_is_refused(steps, n_slots, error) -> None:
    with pytest.raises(error):
        _module().compile(steps, n_slots)


def test_run_checks_its_buffers_before_it_reads_them() -> None:
    module = _module()
    program = module.compile([(0, False, abs, None, (0,), (1,), ())], 2)
    ex = _Executor()
    with pytest.raises(ValueError, match="slots"):
        module.run(program, 0, [1.0], ex, bytearray(16), [0], -1, True)
    with pytest.raises(ValueError, match="two doubles"):
        module.run(program, 0, [1.0, None], ex, bytearray(8), [0], -1, True)
    with pytest.raises(TypeError):
        module.run(program, 0, [1.0, None], ex, b"\0" * 16, [0], -1, True)  # read-only
    with pytest.raises(ValueError, match="one item"):
        module.run(program, 0, [1.0, None], ex, bytearray(16), [], -1, True)
    with pytest.raises(ValueError):
        module.run("not a program", 0, [1.0, None], ex, bytearray(16), [0], -1, True)


def test_a_failure_in_a_quietly_run_branch_names_its_node_and_frame() -> None:
    """An If branch run by the compiled loop (run_control_quietly, then run_quietly) fails
    as the Python loop's would: the error names the branch's node, the stack shows the
    branch, and the next run of the session is fine."""
    then_g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["then_y"], name="bad_reshape")],
        "then",
        [],
        [helper.make_tensor_value_info("then_y", F, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["else_y"], name="else_neg")],
        "else",
        [],
        [helper.make_tensor_value_info("else_y", F, None)],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="cond")],
        "g",
        [
            helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", F, [4]),
            helper.make_tensor_value_info("shape", onnx.TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", F, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = Session(model)
    x = np.arange(4, dtype=np.float32)
    ok = {"c": np.array(True), "x": x, "shape": np.array([2, 2], np.int64)[:1] * 2}
    np.testing.assert_array_equal(session.run(ok)["y"], x)
    with pytest.raises(ExecutionError, match="bad_reshape") as failure:
        session.run({**ok, "shape": np.array([3], np.int64)})
    assert failure.value.node and "bad_reshape" in failure.value.node
    assert session.state == "failed" and "then_branch" in session.stack_text
    np.testing.assert_array_equal(session.run({**ok, "c": np.array(False)})["y"], -x)
    if native.level() is not None:  # (the If was the compiled loop's step)
        if_node = next(pn for pn in run_nodes(session.plan) if pn.op_type == "If")
        assert quiet_loop.step_mode(if_node, None)[0] == quiet_loop.KERNEL


def test_a_quiet_frame_stopped_early_goes_on_from_that_node(monkeypatch) -> None:
    """run_quietly runs the nodes before an in-place candidate (a big input), then
    run_frame(frame, start) runs the rest: every node once, numbers as stepped."""
    from onnxviz.runtime.executor import Executor

    starts: list[int] = []
    run_frame = Executor.run_frame

    def spy(self: Executor, frame: Any, start: int = 0) -> Any:
        starts.append(start)
        return run_frame(self, frame, start)

    monkeypatch.setattr(Executor, "run_frame", spy)
    nodes = [
        helper.make_node("Floor", ["x"], ["r"], name="floor"),  # (never in place)
        helper.make_node("Add", ["r", "x"], ["a"], name="add_big"),  # r dies here: in place
        helper.make_node("Neg", ["a"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(  # (a is an output too: no elementwise chain takes it)
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [100, 100])],
        [helper.make_tensor_value_info(v, F, None) for v in ("a", "y")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.random.default_rng(5).standard_normal((100, 100)).astype(np.float32)}
    stepped = assert_modes_agree(model, feeds)
    session = Session(model)
    for _ in range(3):
        starts.clear()
        np.testing.assert_array_equal(session.run(feeds)["y"], stepped["y"])
        assert all(calls == 1 for calls, _ in session.node_times.values())
        assert set(session.node_times) == {"main::floor", "main::add_big", "main::neg"}
        if native.level() is not None:
            assert starts == [1]  # the node loop only from add_big
