"""`Debugger`: drives a `Session` event by event for the run panel (no Qt here).

The session's own stepping calls (`resume`, `step_over`, ...) run to their stop
without looking back, so a Pause pressed in the UI could not reach them.  The
debugger walks `Session.steps()` itself and checks, at every node, the user's
breakpoints, the stepping goal and a pause request set from another thread; it also
records what the canvas shows: executed nodes, the current node, the runtime type
of every computed value, and the per-node profile.

Everything here runs on the worker thread; the UI reads `snapshot()` (taken under a
lock) while a run goes on and the full state once the worker has stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from onnxviz.runtime.events import (
    Event,
    FrameEntered,
    FrameLeft,
    NodeFailed,
    NodeFinished,
    NodeStarted,
    Pause,
    RunFinished,
)
from onnxviz.runtime.profile import Profiler
from onnxviz.runtime.session import Session, node_matches
from onnxviz.runtime.values import describe, has_nonfinite

MODES = ("continue", "step", "step_over", "step_out", "run_to")


@dataclass
class Snapshot:
    """What the canvas needs, copied out of the worker's state."""

    executed: set[tuple[str, int]] = field(default_factory=set)  # (graph path, node index)
    current: str | None = None  # address of the node paused at / running
    current_ref: Any = None  # its NodeRef
    stack: str = ""
    value_types: dict[tuple[str, str], str] = field(default_factory=dict)
    nodes_done: int = 0


class Debugger:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.profiler = Profiler()
        self.node_breakpoints: set[str] = set()  # addresses
        self.break_on_nonfinite = False
        self.pause_requested = threading.Event()
        self._lock = threading.Lock()
        self._snap = Snapshot()
        self.hits: dict[str, int] = {}
        # names computed in each frame of the stack (by depth) since it was entered: the
        # values table shows these, even the ones already freed (from the kept store)
        self.frame_names: list[set[str]] = [set()]

    # -- state -----------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        with self._lock:
            s = self._snap
            return Snapshot(
                set(s.executed),
                s.current,
                s.current_ref,
                s.stack,
                dict(s.value_types),
                s.nodes_done,
            )

    @property
    def depth(self) -> int:
        ev = self.session.last_event
        if ev is None or isinstance(ev, RunFinished):
            return 0
        if isinstance(ev, FrameLeft):
            return ev.depth - 1
        return ev.depth

    def start(self, feeds: Mapping[str, Any]) -> None:
        """A new run, paused before its first node."""
        self.session.start(feeds)
        self.profiler.clear()
        self.hits = {}
        self.frame_names = [set()]
        with self._lock:
            self._snap = Snapshot()
            for name, value in feeds.items():
                self._snap.value_types[("main", name)] = describe(value)

    # -- running -----------------------------------------------------------------------------
    def advance(self, mode: str, target: str | None = None) -> Pause:
        """Run until the goal of ``mode`` (see MODES), a breakpoint, a NaN/Inf output
        (when enabled), a pause request, the end, or a failure."""
        if mode not in MODES:
            raise ValueError(f"unknown stepping mode {mode!r}")
        sess = self.session
        depth0 = self.depth
        for ev in sess.steps():
            self._record(ev)
            if isinstance(ev, RunFinished):
                return Pause("finished", ev)
            if isinstance(ev, NodeFailed):
                return Pause(sess.state, ev)
            if isinstance(ev, NodeStarted):
                address = ev.node.address
                if self.pause_requested.is_set():
                    self.pause_requested.clear()
                    return Pause("paused", ev)
                if address in self.node_breakpoints:
                    self.hits[address] = self.hits.get(address, 0) + 1
                    return Pause("breakpoint", ev, address)
                if mode == "step":
                    return Pause("step", ev)
                if mode == "step_over" and ev.depth <= depth0:
                    return Pause("step", ev)
                if mode == "step_out" and ev.depth < depth0:
                    return Pause("step", ev)
                if mode == "run_to" and target is not None and node_matches(target, ev.node):
                    return Pause("run_to", ev)
            elif isinstance(ev, NodeFinished):
                if self.break_on_nonfinite and any(has_nonfinite(v) for v in ev.outputs.values()):
                    return Pause("nonfinite", ev)
            elif (
                isinstance(ev, FrameLeft)
                and mode == "step_out"
                and ev.depth == depth0
                and depth0 > 0
            ):
                return Pause("frame_left", ev)
        return Pause(sess.state, sess.last_event)

    def request_pause(self) -> None:
        """Pause before the next node (a request made before `advance` starts counts:
        the caller clears the flag when it issues a new command)."""
        self.pause_requested.set()

    def cancel(self) -> None:
        self.session.cancel()

    def _record(self, ev: Event) -> None:
        kind = type(ev)
        if kind is FrameEntered:
            del self.frame_names[ev.depth :]
            while len(self.frame_names) <= ev.depth:
                self.frame_names.append(set())
        if kind is NodeFinished:
            self.profiler.feed(ev)
            while len(self.frame_names) <= ev.depth:
                self.frame_names.append(set())
            self.frame_names[ev.depth].update(ev.outputs)  # type: ignore[attr-defined]
            path = ev.node.graph_path  # type: ignore[attr-defined]
            with self._lock:
                snap = self._snap
                ref = ev.node  # type: ignore[attr-defined]
                snap.executed.add((ref.graph_path, ref.index))
                snap.nodes_done += 1
                for name, value in ev.outputs.items():  # type: ignore[attr-defined]
                    snap.value_types[(path, name)] = describe(value)
                snap.stack = ev.stack
        elif kind is NodeStarted:
            with self._lock:
                self._snap.current = ev.node.address  # type: ignore[attr-defined]
                self._snap.current_ref = ev.node  # type: ignore[attr-defined]
                self._snap.stack = ev.stack
        elif kind in (RunFinished, NodeFailed):
            with self._lock:
                if kind is RunFinished:
                    self._snap.current = None
                    self._snap.current_ref = None
                    for name, value in ev.outputs.items():  # type: ignore[attr-defined]
                        self._snap.value_types[("main", name)] = describe(value)
                self._snap.stack = ev.stack
