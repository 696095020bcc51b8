"""A Session advanced on a worker thread, paused and cancelled from another thread
(issue 16): a pause lands between two nodes, and resuming gives the numbers of a run
nobody interrupted; a cancel ends the run cleanly and the session can run again."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
from onnx import ModelProto, helper, numpy_helper

from onnxviz.runtime.events import Event, NodeFinished, NodeStarted, Pause
from onnxviz.runtime.frame import ExecutionCancelled
from onnxviz.runtime.session import Session

from .engine_models import I64, B, F, make, vi

N_CHAIN = 120


def chain_model(n: int = N_CHAIN) -> ModelProto:
    """y = (((x + c0) * m1) + c2) ... with random constants: the order of the nodes
    matters for the numbers."""
    rng = np.random.default_rng(5)
    nodes, inits = [], []
    prev = "x"
    for k in range(n):
        op = "Add" if k % 2 == 0 else "Mul"
        c = rng.uniform(0.5, 1.5, 4).astype(np.float32)
        inits.append(numpy_helper.from_array(c, f"c{k}"))
        nodes.append(helper.make_node(op, [prev, f"c{k}"], [f"v{k}"], name=f"n{k}"))
        prev = f"v{k}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    return make(nodes, [vi("x", F, [4])], [vi("y", F, [4])], initializers=inits)


def loop_model() -> ModelProto:
    """acc = acc * 0.999 + x, ``trip`` (an input) times, in a Loop body."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["acc_in", "decay"], ["scaled"], name="body_mul"),
            helper.make_node("Add", ["scaled", "x"], ["acc_out"], name="body_add"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
        ],
        "body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("acc_in", F, [4])],
        [vi("cond_out", B, []), vi("acc_out", F, [4])],
    )
    inits = [
        numpy_helper.from_array(np.array(True), "cond"),
        numpy_helper.from_array(np.zeros(4, dtype=np.float32), "acc0"),
        numpy_helper.from_array(np.array(0.999, dtype=np.float32), "decay"),
    ]
    loop = helper.make_node("Loop", ["trip", "cond", "acc0"], ["acc"], body=body, name="loop")
    return make(
        [loop], [vi("x", F, [4]), vi("trip", I64, [])], [vi("acc", F, [4])], initializers=inits
    )


def loop_feeds(trips: int) -> dict[str, np.ndarray]:
    return {"x": X, "trip": np.array(trips, dtype=np.int64)}


X = np.array([0.25, -1.5, 2.0, 3.25], dtype=np.float32)


class Worker:
    """Runs ``sess.advance(mode)`` on a thread; the Pause (or exception) it ended with."""

    def __init__(self, sess: Session, mode: str = "continue") -> None:
        self.result: Pause | BaseException | None = None
        self.thread = threading.Thread(target=self._work, args=(sess, mode), daemon=True)
        self.thread.start()

    def _work(self, sess: Session, mode: str) -> None:
        try:
            self.result = sess.advance(mode)
        except BaseException as exc:  # handed to the test thread
            self.result = exc

    def join(self) -> Pause:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the worker did not stop"
        assert isinstance(self.result, Pause), self.result
        return self.result


def test_pause_from_another_thread_lands_between_two_nodes_and_resumes_exactly() -> None:
    want = Session(chain_model()).run({"x": X})["y"]
    sess = Session(chain_model())
    finished: list[int] = []
    reached = threading.Event()
    go = threading.Event()

    def on_event(ev: Event) -> None:  # on the worker thread
        if isinstance(ev, NodeFinished):
            finished.append(ev.node.index)
            if len(finished) == 50:
                reached.set()
                assert go.wait(10)  # hold the worker until the test thread has paused

    sess.on_event = on_event
    sess.start({"x": X})
    worker = Worker(sess)
    assert reached.wait(10)
    sess.pause()  # from the test thread, while node 49 is finishing
    go.set()
    pause = worker.join()
    assert pause.reason == "paused" and not pause.finished
    assert isinstance(pause.event, NodeStarted)
    # Between nodes 49 and 50: every earlier node ran, node 50 did not start.
    assert finished == list(range(50))
    assert pause.event.node.index == 50 and sess.current_node == pause.event.node
    assert sess.state == "paused"
    v49 = Session(chain_model()).run({"x": X}, fetch=["v49"])["v49"]
    np.testing.assert_array_equal(sess.value("v49"), v49)
    # The request was honoured once: the next advance runs to the end.
    pause = Worker(sess).join()
    assert pause.reason == "finished" and sess.state == "finished"
    assert finished == list(range(N_CHAIN + 1))
    np.testing.assert_array_equal(sess.outputs["y"], want)


def test_pause_while_running_freely_inside_a_loop_body_then_resume() -> None:
    feeds = loop_feeds(6000)
    want = Session(loop_model()).run(feeds)["acc"]
    sess = Session(loop_model())
    started: list[Any] = []
    sess.on_event = lambda ev: started.append(ev) if isinstance(ev, NodeStarted) else None
    sess.start(feeds)
    worker = Worker(sess)
    deadline = time.monotonic() + 10
    while len(started) < 200 and time.monotonic() < deadline:
        time.sleep(0.001)
    sess.pause()
    pause = worker.join()
    assert pause.reason == "paused"  # 200 of 18,000 nodes had started
    ev = pause.event
    assert isinstance(ev, NodeStarted) and ev is started[-1]
    # Paused in an iteration of the body, before one of its nodes.
    assert ev.depth == 1 and ev.node.graph_path == "main/body:loop"
    assert "iteration" in sess.stack_text
    while True:  # pause again and again: the numbers stay those of a plain run
        worker = Worker(sess)
        time.sleep(0.002)
        sess.pause()
        pause = worker.join()
        if pause.finished:
            break
        assert pause.reason == "paused" and isinstance(pause.event, NodeStarted)
    assert pause.reason == "finished"
    np.testing.assert_array_equal(sess.outputs["acc"], want)


def test_cancel_from_another_thread_ends_the_advance_cleanly() -> None:
    sess = Session(loop_model())
    seen = threading.Event()
    sess.on_event = lambda ev: seen.set()
    sess.start(loop_feeds(10**9))
    worker = Worker(sess)
    assert seen.wait(10)
    sess.cancel()
    pause = worker.join()
    assert pause.reason == "cancelled" and pause.finished
    assert sess.state == "cancelled" and isinstance(sess.error, ExecutionCancelled)
    # Nothing more runs, and the session starts a new run as usual.
    assert sess.advance("continue").reason == "cancelled"
    sess.on_event = None
    out = sess.run(loop_feeds(3))["acc"]
    np.testing.assert_allclose(out, ((X * np.float32(0.999)) + X) * np.float32(0.999) + X)


def test_cancel_while_paused_stops_before_the_next_node() -> None:
    sess = Session(chain_model())
    started: list[int] = []
    sess.on_event = lambda ev: started.append(1) if isinstance(ev, NodeStarted) else None
    sess.start({"x": X})
    assert sess.advance("step").reason == "step"
    sess.cancel()
    assert Worker(sess).join().reason == "cancelled"
    assert len(started) == 1  # the paused-at node never ran


def test_advance_modes_match_the_named_stepping_calls() -> None:
    sess = Session(chain_model(6))
    sess.start({"x": X})
    assert sess.advance("step").event.node.label == "n0"  # type: ignore[union-attr]
    assert sess.advance("step_over").event.node.label == "n1"  # type: ignore[union-attr]
    pause = sess.advance("run_to", "main::n4")
    assert pause.reason == "run_to" and pause.event.node.label == "n4"  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        sess.advance("sideways")
    assert sess.advance("continue").reason == "finished"
