"""Stepping through a run: breakpoints, step into/over/out of a Loop body, run_to,
NaN breakpoints, failures that leave the session inspectable, cancel, events."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime.events import (
    FrameEntered,
    FrameLeft,
    NodeFailed,
    NodeFinished,
    NodeStarted,
    RunFinished,
)
from onnxviz.runtime.session import Session
from tests.runtime.engine_models import F, chain_model, if_model, loop_model, make, vi

X2 = np.array([1.0, 2.0], np.float32)


def test_node_breakpoint_pauses_before_the_node_with_its_inputs() -> None:
    sess = Session(chain_model())
    bp = sess.add_breakpoint("main::relu")
    sess.start({"x": np.array([1.0, 1.0, 1.0], np.float32)})
    pause = sess.resume()
    assert pause.reason == "breakpoint" and pause.breakpoint is bp and bp.hits == 1
    assert isinstance(pause.event, NodeStarted) and pause.event.node.label == "relu"
    np.testing.assert_allclose(pause.event.inputs["s"], [2.0, -4.0, 1.5])
    assert sess.current_node is not None and sess.current_node.address == "main::relu"
    with pytest.raises(KeyError):
        sess.value("r")  # not computed yet
    assert sess.resume().reason == "finished"
    np.testing.assert_allclose(sess.outputs["y"], [4.0, 0.0, 3.0])


def test_op_type_breakpoint_hits_in_every_loop_iteration() -> None:
    sess = Session(loop_model())
    sess.add_breakpoint(op_type="Less")
    sess.start({"x": X2})
    texts = []
    while (pause := sess.resume()).reason == "breakpoint":
        texts.append(sess.stack_text)
    assert pause.reason == "finished"
    assert texts == [f"main › loop iteration {i}/10" for i in (1, 2, 3)]


def test_step_into_loop_body_iteration_by_iteration() -> None:
    sess = Session(loop_model())
    sess.start({"x": X2})
    pause = sess.step()
    assert pause.event.node.label == "loop"  # paused before the Loop node
    seen = []
    pause = sess.step()  # into the body, first iteration
    for iteration in range(3):
        assert isinstance(pause.event, NodeStarted)
        assert pause.event.node.graph_path == "main/body:loop"
        assert sess.stack_text == f"main › loop iteration {iteration + 1}/10"
        assert sess.stack[-1].iteration == iteration
        assert int(sess.value("i")) == iteration
        np.testing.assert_allclose(sess.value("acc_in"), X2 * iteration)
        np.testing.assert_allclose(sess.value("x"), X2)  # outer scope, seen from the body
        np.testing.assert_allclose(sess.value("acc0", frame=0), np.zeros(2))  # main frame
        seen.append(pause.event.node.label)
        pause = sess.step()  # body_add runs
        np.testing.assert_allclose(sess.value("acc_out"), X2 * (iteration + 1))
        pause = sess.step_out()  # finish this iteration
        assert pause.reason == "frame_left" and isinstance(pause.event, FrameLeft)
        assert sess.stack_text == "main"
        pause = sess.step()
    assert pause.reason == "finished"
    assert seen == ["body_add"] * 3
    np.testing.assert_allclose(sess.outputs["acc"], X2 * 3)


def test_step_over_runs_the_whole_loop() -> None:
    model = loop_model()
    model.graph.node.append(helper.make_node("Neg", ["acc"], ["neg"], name="after"))
    model.graph.output.append(vi("neg", F, [2]))
    sess = Session(model)
    sess.start({"x": X2})
    assert sess.step().event.node.label == "loop"
    pause = sess.step_over()
    assert pause.event.node.label == "after" and pause.event.depth == 0
    np.testing.assert_allclose(sess.value("acc"), X2 * 3)


def test_run_to_a_node_inside_a_subgraph() -> None:
    sess = Session(loop_model())
    sess.start({"x": X2})
    pause = sess.run_to("main/body:loop::body_less")
    assert pause.reason == "run_to"
    assert pause.event.node.address == "main/body:loop::body_less"
    assert int(sess.value("i")) == 0
    pause = sess.run_to("body_less")  # bare label: any graph
    assert int(sess.value("i")) == 1


def test_run_to_if_branch_shows_branch_in_stack() -> None:
    sess = Session(if_model())
    sess.start({"c": np.array(False), "x": X2})
    pause = sess.run_to("main/else_branch:cond::else_sub")
    assert pause.reason == "run_to"
    assert sess.stack_text == "main › cond else_branch"
    np.testing.assert_allclose(sess.value("e1"), 1.0)


def test_nonfinite_breakpoint_stops_after_the_node_that_made_nan() -> None:
    nodes = [
        helper.make_node("Sub", ["x", "x"], ["zero"], name="sub"),
        helper.make_node("Div", ["zero", "zero"], ["nan"], name="div"),
        helper.make_node("Relu", ["nan"], ["y"], name="relu"),
    ]
    sess = Session(make(nodes, [vi("x", F, [2])], [vi("y", F, [2])]))
    sess.add_breakpoint(nonfinite=True)
    sess.start({"x": X2})
    pause = sess.resume()
    assert pause.reason == "nonfinite"
    assert isinstance(pause.event, NodeFinished) and pause.event.node.label == "div"
    assert np.isnan(pause.event.outputs["nan"]).all()


def test_failure_leaves_the_session_inspectable_at_the_node() -> None:
    nodes = [
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "b"], ["c"], name="bad_matmul"),
    ]
    sess = Session(make(nodes, [vi("a", F, None), vi("b", F, None)], [vi("c", F, None)]))
    sess.start({"a": np.ones((2, 3), np.float32), "b": np.ones((2, 2), np.float32)})
    pause = sess.resume()
    assert pause.reason == "failed" and isinstance(pause.event, NodeFailed)
    assert sess.state == "failed"
    err = sess.error
    assert isinstance(err, ExecutionError)
    assert err.node == "bad_matmul" and err.op_type == "MatMul"
    assert err.input_summaries == ["r: float32[2,3]", "b: float32[2,2]"]
    assert sess.current_node is not None and sess.current_node.label == "bad_matmul"
    np.testing.assert_allclose(sess.value("r"), np.ones((2, 3)))


def test_failure_inside_a_loop_body_keeps_the_frame_stack() -> None:
    model = loop_model()
    body = model.graph.node[0].attribute[0].g
    body.node[0].op_type = "MatMul"  # acc_in[2] @ bad[3,3] cannot work
    body.node[0].input[1] = "bad"
    model.graph.initializer.append(
        helper.make_tensor("bad", F, [3, 3], np.zeros(9, np.float32).tolist())
    )
    sess = Session(model)
    with pytest.raises(ExecutionError) as info:
        sess.run({"x": X2})
    assert info.value.graph_path == "main/body:loop"
    assert sess.stack_text == "main › loop iteration 1/10"
    assert int(sess.value("i")) == 0


def test_cancel_stops_before_the_next_node() -> None:
    sess = Session(loop_model())
    sess.start({"x": X2})
    sess.run_to("body_less")
    sess.cancel()
    pause = sess.resume()
    assert pause.reason == "cancelled" and sess.state == "cancelled"


def test_event_stream_shape_and_timings() -> None:
    sess = Session(chain_model())
    events = list(sess.steps({"x": np.zeros(3, np.float32)}))
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "FrameEntered" and kinds[-2] == "FrameLeft" and kinds[-1] == "RunFinished"
    started = [e.node.label for e in events if isinstance(e, NodeStarted)]
    finished = [e for e in events if isinstance(e, NodeFinished)]
    assert started == ["add", "relu", "mul"] == [e.node.label for e in finished]
    assert all(e.seconds >= 0 for e in finished)
    assert isinstance(events[0], FrameEntered) and events[0].frame.title == "main"
    assert isinstance(events[-1], RunFinished) and set(events[-1].outputs) == {"y"}
    assert set(sess.node_times) == {"main::add", "main::relu", "main::mul"}


def test_breakpoint_on_unknown_main_node_is_refused() -> None:
    sess = Session(chain_model())
    with pytest.raises(ExecutionError, match="no node 'nope'"):
        sess.add_breakpoint("main::nope")
    with pytest.raises(ExecutionError, match="no graph"):
        sess.run_to("main/body:nope::add")
    loop = Session(loop_model())
    assert loop.add_breakpoint("main/body:loop::body_add").node == "main/body:loop::body_add"
    with pytest.raises(ExecutionError, match="no node 'body_nope'"):
        loop.add_breakpoint("main/body:loop::body_nope")
    with pytest.raises(ValueError):
        sess.add_breakpoint()


def test_infinite_loop_form_runs_until_cancelled() -> None:
    sess = Session(loop_model(with_trip=False, with_cond=False))
    bp = sess.add_breakpoint("body_add")
    sess.start({"x": X2})
    for _ in range(25):  # well past the body's own cond, which this form ignores
        assert sess.resume().reason == "breakpoint"
    assert sess.stack_text == "main › loop iteration 25"
    sess.remove_breakpoint(bp)
    sess.cancel()
    assert sess.resume().reason == "cancelled"
    assert isinstance(sess.error, ExecutionError)


def test_step_into_a_model_local_function_call() -> None:
    fn = helper.make_function(
        "local",
        "Twice",
        ["a"],
        ["b"],
        [helper.make_node("Add", ["a", "a"], ["b"], name="inner_add")],
        [helper.make_opsetid("", 18)],
    )
    call = helper.make_node("Twice", ["x"], ["y"], domain="local", name="call")
    model = make(
        [call], [vi("x", F, [2])], [vi("y", F, [2])], functions=[fn], extra_opsets={"local": 1}
    )
    sess = Session(model)
    sess.start({"x": X2})
    assert sess.step().event.node.address == "main::call"
    pause = sess.step()
    assert pause.event.node.address == "function:local:Twice::inner_add"
    assert sess.stack_text == "main › call (Twice function)"
    np.testing.assert_allclose(sess.value("a"), X2)
    with pytest.raises(KeyError):
        sess.value("x")  # a function body does not see its caller's scope
    np.testing.assert_allclose(sess.value("x", frame=0), X2)
    assert sess.step_out().reason == "frame_left"
    assert sess.step().reason == "finished"
    np.testing.assert_allclose(sess.outputs["y"], X2 * 2)


def test_cancel_from_another_thread_stops_a_running_infinite_loop() -> None:
    import threading
    import time

    from onnxviz.runtime.frame import ExecutionCancelled

    sess = Session(loop_model(with_trip=False, with_cond=False))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            sess.run({"x": X2})
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    deadline = time.monotonic() + 10
    while sess.state != "running" and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    sess.cancel()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ExecutionCancelled)
    assert sess.state == "cancelled" and sess.stack_text.startswith("main")
