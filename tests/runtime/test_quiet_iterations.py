"""Loop, Scan and SequenceMap bodies nobody watches run in one reused frame, a Loop's
iterations in one compiled call (control_flow._Body, native/_runloop.c's `iteration`
and `loop`): the same numbers as a stepped run, bit for bit, every body node once per
iteration, the carried values' small results written again only where nobody else
holds them, and failures that name the node and the iteration (issue 21).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.session import Session

from .differential import stepped_values

pytestmark = pytest.mark.numeric

F = TensorProto.FLOAT
B = TensorProto.BOOL
I64 = TensorProto.INT64
_DTYPES = {np.float32: F, np.float64: TensorProto.DOUBLE, np.int64: I64}


def _vi(name: str, elem: int, shape: list[int] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes: list[onnx.NodeProto], inputs: list[Any], outputs: list[str], **inits: Any):
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [_vi(o, F, None) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _assert_runs_agree(
    model: onnx.ModelProto, feeds: dict[str, Any], runs: int = 3
) -> tuple[Session, Session]:
    """``runs`` unwatched runs of one session (and one of a session without fusion or
    in-place reuse) give the stepped run's outputs bit for bit; the earlier runs'
    outputs, held all along, keep theirs.  The two sessions."""
    want = stepped_values(model, feeds)
    names = [o.name for o in model.graph.output]
    session = Session(model)
    plain = Session(model, fuse_ops=False, inplace_ops=False)
    with np.errstate(all="ignore"):
        held = [session.run(feeds) for _ in range(runs)]
        held.append(plain.run(feeds))
    for k, got in enumerate(held):
        for name in names:
            ref = want[name]
            have = got[name]
            assert have.dtype == ref.dtype and have.shape == ref.shape, (k, name)
            np.testing.assert_array_equal(have, ref, err_msg=f"run {k}, {name}")
    return session, plain


def _body_counts(session: Session) -> dict[str, int]:
    """How many times each body node ran in the session's last run (If branches'
    nodes left out: they share the iterations)."""
    return {
        key: calls
        for key, (calls, _) in session.node_times.items()
        if "/body" in key and "branch" not in key
    }


# -- random Loop bodies -----------------------------------------------------------------


@st.composite
def loop_models(draw: Any) -> tuple[onnx.ModelProto, dict[str, Any], int]:
    """A Loop whose body updates 1-3 carried values of one dtype and shape with 1-3
    arithmetic nodes each (operands: a body constant, another carried value, an
    outer-scope value, the iteration number), with 0-2 scan outputs, a condition that
    stops it or not, with or without a trip count, maybe an If in the body; and how
    many iterations it runs."""
    dtype = draw(st.sampled_from(list(_DTYPES)))
    elem = _DTYPES[dtype]
    shape = draw(st.sampled_from([(), (4,), (3, 5)]))
    n_carried = draw(st.integers(1, 3))
    ops = ["Add", "Sub", "Mul"] + (["Div"] if dtype != np.int64 else [])
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))

    def values() -> np.ndarray:
        if dtype == np.int64:
            return rng.integers(-3, 4, shape).astype(dtype)
        return (rng.standard_normal(shape) * 0.5 + 1.0).astype(dtype)

    body_inits: dict[str, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = [helper.make_node("Cast", ["i"], ["i_t"], to=elem)]
    outs: list[str] = []
    for k in range(n_carried):
        cur = f"c{k}_in"
        for j in range(draw(st.integers(1, 3))):
            source = draw(st.sampled_from(["const", "carried", "outer", "counter"]))
            if source == "const":
                other = f"k{k}_{j}"
                body_inits[other] = values()
            elif source == "carried":
                other = f"c{draw(st.integers(0, n_carried - 1))}_in"
            elif source == "outer":
                other = "x"
            else:
                other = "i_t"
            op = draw(st.sampled_from(ops))
            if op == "Div" and source in ("counter", "carried"):
                op = "Mul"  # (no division by the counter's zero or a shrinking value)
            new = f"c{k}_{j}"
            operands = [cur, other] if draw(st.booleans()) else [other, cur]
            nodes.append(helper.make_node(op, operands, [new]))
            cur = new
        outs.append(cur)
    with_if = draw(st.booleans())
    if with_if:  # an If of the iteration's parity in the body: a nested quiet frame
        parity = helper.make_node("Mod", ["i", "two"], ["odd_i"])
        odd = helper.make_node("Cast", ["odd_i"], ["odd"], to=B)
        then_g = helper.make_graph(
            [helper.make_node("Neg", [outs[0]], ["t"])], "then", [], [_vi("t", elem, None)]
        )
        else_g = helper.make_graph(
            [helper.make_node("Identity", [outs[0]], ["e"])], "else", [], [_vi("e", elem, None)]
        )
        branch = helper.make_node(
            "If", ["odd"], ["flipped"], then_branch=then_g, else_branch=else_g
        )
        nodes += [parity, odd, branch]
        body_inits["two"] = np.array(2, np.int64)
        outs[0] = "flipped"
    cond_kind = draw(st.sampled_from(["none", "pass", "count"]))
    trips = draw(st.integers(0, 12))
    with_trip = cond_kind != "count" or draw(st.booleans())
    stop = draw(st.integers(0, 12))
    if cond_kind == "count":  # goes on while i < stop: stop + 1 iterations
        nodes.append(helper.make_node("Less", ["i", "stop"], ["cond_out"]))
        body_inits["stop"] = np.array(stop, np.int64)
    else:
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    n_scan = draw(st.integers(0, 2))
    scan_names = [draw(st.sampled_from([*outs, "i_t"])) for _ in range(n_scan)]
    for s, name in enumerate(scan_names):  # (a scan output of its own name)
        nodes.append(helper.make_node("Identity", [name], [f"scan{s}"]))
    body = helper.make_graph(
        nodes,
        "body",
        [_vi("i", I64, []), _vi("cond_in", B, [])]
        + [_vi(f"c{k}_in", elem, list(shape)) for k in range(n_carried)],
        [_vi("cond_out", B, [])]
        + [_vi(o, elem, None) for o in outs]
        + [_vi(f"scan{s}", elem, None) for s in range(n_scan)],
        initializer=[numpy_helper.from_array(v, k) for k, v in body_inits.items()],
    )
    loop_outs = [f"y{k}" for k in range(n_carried)] + [f"s{s}" for s in range(n_scan)]
    loop = helper.make_node(
        "Loop",
        ["trips" if with_trip else "", "" if cond_kind == "none" else "go"]
        + [f"c{k}" for k in range(n_carried)],
        loop_outs,
        body=body,
        name="loop",
    )
    graph = helper.make_graph(
        [loop],
        "g",
        [_vi("x", elem, list(shape))] + [_vi(f"c{k}", elem, list(shape)) for k in range(n_carried)],
        [_vi(o, elem, None) for o in loop_outs],
        initializer=[
            numpy_helper.from_array(np.array(trips, np.int64), "trips"),
            numpy_helper.from_array(np.array(True), "go"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": values(), **{f"c{k}": values() for k in range(n_carried)}}
    if cond_kind == "count":
        iterations = min(stop + 1, trips) if with_trip else stop + 1
    else:
        iterations = trips
    return model, feeds, iterations


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loop_models())
def test_random_loops_give_the_stepped_bits_run_after_run(case) -> None:
    model, feeds, iterations = case
    session, plain = _assert_runs_agree(model, feeds)
    # Every body node ran once an iteration (fused ones as one).
    n_body = len(model.graph.node[0].attribute[0].g.node)
    if iterations:
        assert len(_body_counts(plain)) == n_body
    assert set(_body_counts(plain).values()) <= {iterations}
    assert set(_body_counts(session).values()) <= {iterations}


# -- the compiled loop's edges ----------------------------------------------------------


def _counting_loop(body_nodes: list[onnx.NodeProto], shape: list[int], trips: int = 10):
    """Loop(trips) over one carried float value ``s``; the body's nodes make s_out."""
    body = helper.make_graph(
        [*body_nodes, helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond")],
        "body",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("s_in", F, shape)],
        [_vi("cond_out", B, []), _vi("s_out", F, None)],
    )
    loop = helper.make_node("Loop", ["trips", "", "s"], ["y"], body=body, name="loop")
    return _model([loop], [_vi("s", F, shape), _vi("limit", I64, [])], ["y"], trips=trips)


def test_a_failing_iteration_names_its_node_and_iteration() -> None:
    """The body reshapes its four values to [2 - i, -1] and back: it fails at its fourth
    iteration (-1 twice; 0 rows, at the third, keeps the input's 4).  The error names
    the body's node, the stack names iteration 4 of 10 as a stepped run's does, and the
    session fails the same way again."""
    nodes = [
        helper.make_node("Sub", ["two", "i"], ["rows"], name="rows"),
        helper.make_node("Concat", ["rows", "any"], ["target"], axis=0, name="target"),
        helper.make_node("Reshape", ["s_in", "target"], ["r"], name="bad_reshape"),
        helper.make_node("Reshape", ["r", "any"], ["r_flat"], name="flatten"),
        helper.make_node("Add", ["r_flat", "r_flat"], ["s_out"], name="double"),
    ]
    model = _counting_loop(nodes, [4])
    body = model.graph.node[0].attribute[0].g
    body.initializer.extend(
        [
            numpy_helper.from_array(np.array([2], np.int64), "two"),
            numpy_helper.from_array(np.array([-1], np.int64), "any"),
        ]
    )
    feeds = {"s": np.arange(4, dtype=np.float32), "limit": np.array(0, np.int64)}
    watched = Session(model)
    for _ in watched.steps(feeds):
        pass
    assert watched.state == "failed"
    session = Session(model)
    for _ in range(2):
        with pytest.raises(ExecutionError, match="bad_reshape"):
            session.run(feeds)
        assert session.state == "failed"
        assert session.stack_text == watched.stack_text
        assert session.stack_text.endswith("iteration 4/10")
        assert session.error.node == watched.error.node == "bad_reshape"


def test_a_condition_of_two_values_names_the_loop() -> None:
    """A body condition of two values fails as the Loop's own input problem, as the
    stepped run says it, not as a body node's."""
    nodes = [
        helper.make_node("Add", ["s_in", "s_in"], ["s_out"], name="double"),
        helper.make_node("Less", ["s_out", "s_in"], ["wide"], name="wide"),
    ]
    body = helper.make_graph(
        nodes,
        "body",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("s_in", F, [2])],
        [_vi("wide", B, None), _vi("s_out", F, None)],
    )
    loop = helper.make_node("Loop", ["trips", "go", "s"], ["y"], body=body, name="the_loop")
    model = _model([loop], [_vi("s", F, [2])], ["y"], trips=5, go=True)
    feeds = {"s": np.ones(2, np.float32)}
    watched = Session(model)
    for _ in watched.steps(feeds):
        pass
    with pytest.raises(ExecutionError, match="condition must hold one element") as failure:
        Session(model).run(feeds)
    assert failure.value.node == "the_loop" == watched.error.node


def test_an_iteration_left_to_the_node_loop_goes_on_there(monkeypatch) -> None:
    """A body node with a big input whose buffer may be reused (an in-place candidate)
    is the node loop's: each iteration leaves the compiled loop there and comes back.
    Every node runs once an iteration and the numbers are the stepped ones."""
    from onnxviz.runtime.executor import Executor

    starts: list[Any] = []
    run_frame = Executor.run_frame

    def spy(self: Executor, frame: Any, start: Any = None) -> Any:
        if "body" in frame.plan.path:
            starts.append(start)
        return run_frame(self, frame, start)

    monkeypatch.setattr(Executor, "run_frame", spy)
    nodes = [
        helper.make_node("Floor", ["s_in"], ["f"], name="floor"),
        helper.make_node("Add", ["f", "s_in"], ["a"], name="add_big"),
        # (not elementwise: no chain takes add_big in)
        helper.make_node("Transpose", ["a"], ["s_out"], name="turn"),
    ]
    model = _counting_loop(nodes, [100, 100], trips=7)
    rng = np.random.default_rng(2)
    feeds = {
        "s": (rng.standard_normal((100, 100)) * 8).astype(np.float32),
        "limit": np.array(0, np.int64),
    }
    session, plain = _assert_runs_agree(model, feeds)
    assert _body_counts(plain) == {
        f"main/body:loop::{n}": 7 for n in ("floor", "add_big", "turn", "cond")
    }
    assert set(_body_counts(session).values()) == {7}
    if native.level() is not None:  # (the fused sessions' iterations: from add_big on)
        assert starts.count(1) == 3 * 7


def test_small_carried_results_are_written_again_only_when_unheld() -> None:
    """The carried value's arithmetic result is written again in place from the second
    iteration on (the body's slots alone hold it), yet every run's output stays its
    own: the result the caller holds is never written."""
    nodes = [
        helper.make_node("Mul", ["s_in", "k"], ["m"], name="scale"),
        helper.make_node("Add", ["m", "one"], ["s_out"], name="shift"),
    ]
    model = _counting_loop(nodes, [6], trips=50)
    body = model.graph.node[0].attribute[0].g
    body.initializer.extend(
        [
            numpy_helper.from_array(np.float32(0.999), "k"),
            numpy_helper.from_array(np.float32(0.25), "one"),
        ]
    )
    feeds = {"s": np.linspace(-1, 1, 6).astype(np.float32), "limit": np.array(0, np.int64)}
    want = stepped_values(model, feeds)["y"]
    session = Session(model)
    outputs = [session.run(feeds)["y"] for _ in range(4)]
    assert len({id(y) for y in outputs}) == 4
    for y in outputs:
        np.testing.assert_array_equal(y, want)
    feeds_after = feeds["s"].copy()
    session.run(feeds)
    np.testing.assert_array_equal(feeds["s"], feeds_after)


def test_a_cancel_stops_a_loop_without_end() -> None:
    """A Loop with neither trip count nor condition runs until cancelled: a cancel from
    another thread ends it."""
    from onnxviz.runtime.frame import ExecutionCancelled

    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "one"], ["s_out"], name="inc"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond"),
        ],
        "body",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("s_in", F, [])],
        [_vi("cond_out", B, []), _vi("s_out", F, None)],
        initializer=[numpy_helper.from_array(np.float32(1.0), "one")],
    )
    loop = helper.make_node("Loop", ["", "", "s"], ["y"], body=body, name="forever")
    model = _model([loop], [_vi("s", F, [])], ["y"])
    session = Session(model)
    timer = threading.Timer(0.3, session.cancel)
    timer.start()
    with pytest.raises(ExecutionCancelled):
        session.run({"s": np.float32(0)})
    timer.join()
    assert session.state == "cancelled"


# -- Scan and SequenceMap ---------------------------------------------------------------


def _scan_model(opset: int) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """A cumulative sum of rows with a running product as the state, scanned in
    reverse on its second input; opset 8's form has a batch axis."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "row"], ["acc_out"], name="acc"),
            helper.make_node("Mul", ["acc_out", "back"], ["mixed"], name="mix"),
        ],
        "body",
        [_vi("acc_in", F, [3]), _vi("row", F, [3]), _vi("back", F, [3])],
        [_vi("acc_out", F, [3]), _vi("mixed", F, [3])],
    )
    rng = np.random.default_rng(4)
    if opset >= 9:
        scan = helper.make_node(
            "Scan",
            ["acc0", "rows", "rows"],
            ["acc", "mixed_all"],
            body=body,
            num_scan_inputs=2,
            scan_input_directions=[0, 1],
            name="scan",
        )
        shapes = {"acc0": [3], "rows": [7, 3]}
    else:
        scan = helper.make_node(
            "Scan",
            ["", "acc0", "rows", "rows"],
            ["acc", "mixed_all"],
            body=body,
            num_scan_inputs=2,
            directions=[0, 1],
            name="scan",
        )
        shapes = {"acc0": [2, 3], "rows": [2, 7, 3]}
    graph = helper.make_graph(
        [scan],
        "g",
        [_vi(k, F, v) for k, v in shapes.items()],
        [_vi("acc", F, None), _vi("mixed_all", F, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}
    return model, feeds


@pytest.mark.parametrize("opset", [8, 17])
def test_scans_give_the_stepped_bits(opset: int) -> None:
    model, feeds = _scan_model(opset)
    session, plain = _assert_runs_agree(model, feeds)
    per_run = 7 * (2 if opset == 8 else 1)
    assert _body_counts(plain) == {f"main/body:scan::{n}": per_run for n in ("acc", "mix")}
    assert set(_body_counts(session).values()) == {per_run}


def test_a_failing_scan_iteration_is_named_as_stepped() -> None:
    model, feeds = _scan_model(17)
    body = model.graph.node[0].attribute[0].g
    body.node[0].CopyFrom(helper.make_node("Add", ["acc_in", "row"], ["acc_out"], name="acc"))
    bad = {**feeds, "acc0": np.zeros(4, np.float32)}  # (3 values a row against 4)
    watched = Session(model)
    for _ in watched.steps(bad):
        pass
    session = Session(model)
    with pytest.raises(ExecutionError, match="acc"):
        session.run(bad)
    assert session.stack_text == watched.stack_text
    assert session.stack_text.endswith("iteration 1/7")


def test_sequence_map_gives_the_stepped_bits() -> None:
    body = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["item"], ["total"], keepdims=0, name="sum"),
            helper.make_node("Mul", ["item", "scale"], ["scaled"], name="scale"),
        ],
        "body",
        [_vi("item", F, None), _vi("scale", F, [])],
        [_vi("total", F, None), _vi("scaled", F, None)],
    )
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["seq"], axis=0, keepdims=0),
        helper.make_node("SequenceMap", ["seq", "k"], ["totals", "scaled"], body=body),
        helper.make_node("ConcatFromSequence", ["totals"], ["t"], axis=0, new_axis=1),
        helper.make_node("ConcatFromSequence", ["scaled"], ["s"], axis=0, new_axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [_vi("x", F, [5, 3]), _vi("k", F, [])],
        [_vi("t", F, None), _vi("s", F, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(9)
    feeds = {"x": rng.standard_normal((5, 3)).astype(np.float32), "k": np.float32(1.5)}
    _, plain = _assert_runs_agree(model, feeds)
    assert set(_body_counts(plain).values()) == {5} and len(_body_counts(plain)) == 2


def test_the_compiled_loop_runs_a_loops_iterations_in_one_call(monkeypatch) -> None:
    """With the compiled loop built, an unwatched Loop's iterations are one `loop`
    call of the reused frame (its Python path would call run_iteration or run_frame
    each iteration)."""
    if native.level() is None:
        pytest.skip("the compiled loop is not built here (kernels off): nothing to count")
    from onnxviz.runtime.executor import Executor

    calls: dict[str, int] = {"loop": 0, "frame": 0, "iteration": 0}
    for name, key in (("run_loop", "loop"), ("run_frame", "frame"), ("run_iteration", "iteration")):
        original = getattr(Executor, name)

        def spy(self: Any, *args: Any, _original: Any = original, _key: str = key) -> Any:
            calls[_key] += 1
            return _original(self, *args)

        monkeypatch.setattr(Executor, name, spy)
    nodes = [helper.make_node("Add", ["s_in", "s_in"], ["s_out"], name="double")]
    model = _counting_loop(nodes, [3], trips=40)
    session = Session(model)
    y = session.run({"s": np.ones(3, np.float32), "limit": np.array(0, np.int64)})["y"]
    np.testing.assert_array_equal(y, np.full(3, 2.0**40, np.float32))
    assert calls == {"loop": 1, "frame": 0, "iteration": 0}


# -- bodies reading the main graph's initializers ---------------------------------------


def _outer_weights_loop(ir_version: int | None = None) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """A recurrent cell as torch's TorchScript export writes a scripted loop: the
    body's Gemm, MatMul and Add read the main graph's initializers (outer scope), and
    an If in the body reads one two graphs up.  With ``ir_version`` 3, the bias is
    also a graph input (a default a feed may replace)."""
    rng = np.random.default_rng(11)
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["t", "w2"], ["flip"], name="then_mm")],
        "then",
        [],
        [_vi("flip", F, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["t"], ["flip_e"], name="else_neg")],
        "else",
        [],
        [_vi("flip_e", F, None)],
    )
    body_nodes = [
        helper.make_node("Gemm", ["h_in", "w", "bias"], ["g"], transB=1, name="gemm"),
        helper.make_node("Tanh", ["g"], ["t"], name="tanh"),
        helper.make_node("Mod", ["i", "two"], ["odd_i"], name="odd_i"),
        helper.make_node("Cast", ["odd_i"], ["odd"], to=B, name="odd"),
        helper.make_node("If", ["odd"], ["f"], then_branch=then_g, else_branch=else_g),
        helper.make_node("MatMul", ["f", "w2"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "bias"], ["h_out"], name="add_bias"),
        helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond"),
    ]
    body = helper.make_graph(
        body_nodes,
        "body",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("h_in", F, [2, 16])],
        [_vi("cond_out", B, []), _vi("h_out", F, None)],
        initializer=[numpy_helper.from_array(np.array(2, np.int64), "two")],
    )
    loop = helper.make_node("Loop", ["trips", "", "h"], ["y"], body=body, name="cell_loop")
    inits = {
        "w": (rng.standard_normal((16, 16)) * 0.3).astype(np.float32),
        "w2": (rng.standard_normal((16, 16)) * 0.3).astype(np.float32),
        "bias": (rng.standard_normal(16) * 0.1).astype(np.float32),
        "trips": np.array(9, np.int64),
    }
    inputs = [_vi("h", F, [2, 16])]
    if ir_version == 3:
        inputs.append(_vi("bias", F, [16]))
    model = _model([loop], inputs, ["y"], **inits)
    if ir_version is not None:
        model.ir_version = ir_version
    return model, {"h": rng.standard_normal((2, 16)).astype(np.float32)}


def test_a_body_reading_outer_initializers_gets_their_specialized_calls() -> None:
    """The body's Gemm and MatMul by the main graph's weights get the specialized
    calls their initializers would get in the main graph (a packed weight found once):
    a scripted RNN's loop ran every product through the kernel's general route, 7x
    onnxruntime's time.  The numbers are the stepped run's."""
    model, feeds = _outer_weights_loop()
    session, _ = _assert_runs_agree(model, feeds)
    loop = next(pn for pn in session.plan.nodes if pn.op_type == "Loop")
    body = loop.subplans["body"]
    assert sorted(body.outer_constants) == sorted(body.slots[n] for n in ("w", "w2", "bias"))
    products = {pn.op_type: pn for pn in run_nodes(body) if pn.op_type in ("Gemm", "MatMul")}
    stepped = {pn.op_type: pn for pn in body.nodes if pn.op_type in ("Gemm", "MatMul")}
    if native.level() is not None:  # (the specializers pack for the compiled GEMM)
        for op in ("Gemm", "MatMul"):
            assert products[op].call is not stepped[op].call, op
    branch = next(pn for pn in body.nodes if pn.op_type == "If").subplans["then_branch"]
    assert branch.outer_constants == {branch.slots["w2"]: body.outer_constants[body.slots["w2"]]}


def test_a_fed_default_read_by_a_body_is_the_fed_value() -> None:
    """An IR 3 initializer that is also a graph input is no constant for the body: a
    run that feeds it computes with the fed bias, a run that does not with the
    initializer's, in any order, as stepped."""
    model, feeds = _outer_weights_loop(ir_version=3)
    loop_body = model.graph.node[0].attribute[0].g
    assert any(n.op_type == "Gemm" for n in loop_body.node)
    fed = {**feeds, "bias": np.full(16, 0.5, np.float32)}
    session = Session(model)
    for run in (feeds, fed, feeds, fed):
        want = stepped_values(model, run)["y"]
        np.testing.assert_array_equal(session.run(run)["y"], want)
    loop = next(pn for pn in session.plan.nodes if pn.op_type == "Loop")
    body = loop.subplans["body"]
    assert body.slots["bias"] not in body.outer_constants
    assert body.slots["w"] in body.outer_constants
