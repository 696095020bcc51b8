"""The run panel's Debugger over a Session (no Qt): stepping is the session's, the
debugger keeps display state; a breakpoint set while the worker runs takes effect."""

from __future__ import annotations

import threading

import numpy as np

from onnxviz.runtime.events import NodeFinished
from onnxviz.runtime.session import Session
from onnxviz.ui.run.debugger import Debugger

from ..runtime.test_session_threads import N_CHAIN, X, chain_model


def test_breakpoint_set_from_another_thread_mid_run_is_honoured() -> None:
    sess = Session(chain_model())
    dbg = Debugger(sess)
    reached = threading.Event()
    go = threading.Event()
    record = sess.on_event  # the debugger's display hook

    def on_event(ev) -> None:  # type: ignore[no-untyped-def]
        assert record is not None
        record(ev)
        if isinstance(ev, NodeFinished) and ev.node.label == "n10":
            reached.set()
            assert go.wait(10)

    sess.on_event = on_event
    dbg.start({"x": X})
    result: list = []
    worker = threading.Thread(target=lambda: result.append(dbg.advance("continue")))
    worker.start()
    assert reached.wait(10)
    dbg.node_breakpoints = {"main::n40"}  # the UI thread sets it while the worker runs
    go.set()
    worker.join(10)
    pause = result[0]
    assert pause.reason == "breakpoint" and pause.breakpoint == "main::n40"
    assert dbg.hits == {"main::n40": 1}
    snap = dbg.snapshot()
    assert snap.nodes_done == 40 and snap.current == "main::n40"
    assert {("main", i) for i in range(40)} == snap.executed
    assert dbg.advance("continue").reason == "finished"
    assert dbg.snapshot().nodes_done == N_CHAIN + 1
    want = Session(chain_model()).run({"x": X})["y"]
    np.testing.assert_array_equal(sess.outputs["y"], want)


def test_a_later_look_at_a_run_takes_only_the_nodes_run_since() -> None:
    """The canvas follows a run from snapshots that share the worker's list of executed
    nodes: a later look gets just what ran since; a new run starts the reader over."""
    sess = Session(chain_model())
    dbg = Debugger(sess)
    dbg.start({"x": X})
    dbg.node_breakpoints = {"main::n10"}
    assert dbg.advance("continue").reason == "breakpoint"
    first = dbg.snapshot(values=False)
    assert first.value_types == {}  # (left out when asked)
    assert list(first.executed) == [("main", i) for i in range(10)]
    dbg.node_breakpoints = {"main::n25"}
    assert dbg.advance("continue").reason == "breakpoint"
    second = dbg.snapshot()
    assert ("main", "x") in second.value_types
    assert second.executed.added_since(first.executed) == [("main", i) for i in range(10, 25)]
    assert len(first.executed) == 10  # an earlier look stays what it was
    assert second.executed.added_since(None) is None
    dbg.start({"x": X})  # a new run: the old looks are of another run
    assert dbg.snapshot().executed.added_since(second.executed) is None
    assert len(dbg.snapshot().executed) == 0
