"""`Debugger`: the run panel's view of a `Session` (no Qt here).

Stepping, breakpoints, pause and cancel are the session's (`Session.advance`, `pause`,
`cancel`, callable from another thread).  The debugger only keeps what the canvas and
the panel show, fed by the session's ``on_event`` hook: executed nodes, the current
node, the runtime type of every computed value, the names computed in each frame, the
per-node profile and breakpoint hit counts.

Everything here runs on the worker thread; the UI reads `snapshot()` (taken under a
lock) while a run goes on and the full state once the worker has stopped.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from onnxviz.runtime.events import (
    Event,
    FrameEntered,
    NodeFailed,
    NodeFinished,
    NodeStarted,
    Pause,
    RunFinished,
)
from onnxviz.runtime.profile import Profiler
from onnxviz.runtime.session import MODES, Breakpoint, Session
from onnxviz.runtime.values import describe


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
        # The session calls back through a weak reference: a bound method made a cycle
        # of the two, and a finished run (with every value it kept) then waited for a
        # full garbage collection, which at 100k values stops the app for a second or
        # more.  Without the cycle it is freed as soon as the next run replaces it.
        me = weakref.ref(self)

        def record(ev: Event) -> None:
            debugger = me()
            if debugger is not None:
                debugger._record(ev)

        session.on_event = record
        self.profiler = Profiler()
        self._node_breakpoints: set[str] = set()  # addresses
        self._break_on_nonfinite = False
        self._lock = threading.Lock()
        self._snap = Snapshot()
        self.hits: dict[str, int] = {}
        # names computed in each frame of the stack (by depth) since it was entered: the
        # values table shows these, even the ones already freed (from the kept store)
        self.frame_names: list[set[str]] = [set()]

    # -- breakpoints and pause: the session's ------------------------------------------------
    @property
    def node_breakpoints(self) -> set[str]:
        return self._node_breakpoints

    @node_breakpoints.setter
    def node_breakpoints(self, addresses: set[str]) -> None:
        self._node_breakpoints = set(addresses)
        self._sync_breakpoints()

    @property
    def break_on_nonfinite(self) -> bool:
        return self._break_on_nonfinite

    @break_on_nonfinite.setter
    def break_on_nonfinite(self, on: bool) -> None:
        self._break_on_nonfinite = on
        self._sync_breakpoints()

    @property
    def pause_requested(self) -> threading.Event:
        return self.session.pause_requested

    @pause_requested.setter
    def pause_requested(self, event: threading.Event) -> None:
        # The controller shares one Event with every session it makes, so a Pause
        # pressed while a session is still being built is not lost.
        self.session.pause_requested = event

    def _sync_breakpoints(self) -> None:
        bps = [Breakpoint(node=a) for a in sorted(self._node_breakpoints)]
        if self._break_on_nonfinite:
            bps.append(Breakpoint(nonfinite=True))
        # One assignment of a new list: the session reads it again when it changes.
        self.session.breakpoints = bps

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
        """`Session.advance`: until the goal of ``mode`` (see MODES), a breakpoint, a
        NaN/Inf output (when enabled), a pause request, the end, or a failure."""
        if mode not in MODES:
            raise ValueError(f"unknown stepping mode {mode!r}")
        pause = self.session.advance(mode, target)
        bp = pause.breakpoint
        if pause.reason == "breakpoint" and isinstance(bp, Breakpoint) and bp.node:
            self.hits[bp.node] = self.hits.get(bp.node, 0) + 1
            return Pause("breakpoint", pause.event, bp.node)
        return pause

    def request_pause(self) -> None:
        """Pause before the next node (a request made before `advance` starts counts:
        the caller clears the flag when it issues a new command)."""
        self.session.pause()

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
