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

import itertools
import threading
import weakref
from collections.abc import Iterator, Mapping, Set
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

_runs = itertools.count(1)


class Executed(Set[tuple[str, int]]):
    """The nodes run so far ((graph path, node index), each once, in the order they
    first ran): the first `count` keys of the worker's append-only list of run number
    `run`.  A snapshot shares that list instead of copying it: a copy of 100k keys on
    every progress report of a big run was 10-20 ms of the UI thread, and the overlay's
    diff against the last one as much again.  A reader that looked before takes only
    what was added since (`added_since`).  Membership is a scan: for tests, not loops."""

    def __init__(self, keys: list[tuple[str, int]] | None = None, count: int = -1, run: int = 0):
        self.keys = keys if keys is not None else []
        self.count = len(self.keys) if count < 0 else count
        self.run = run or next(_runs)

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.keys[: self.count])

    def __contains__(self, key: object) -> bool:
        return key in self.keys[: self.count]

    def added_since(self, before: Executed | None) -> list[tuple[str, int]] | None:
        """The keys added since ``before`` (an earlier look at the same run), or None
        when ``before`` is of another run (or none): then the reader starts over."""
        if before is None or before.run != self.run or before.count > self.count:
            return None
        return self.keys[before.count : self.count]


@dataclass
class Snapshot:
    """What the canvas needs, copied out of the worker's state (`Executed` shared)."""

    executed: Executed = field(default_factory=Executed)
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
        self._executed: set[tuple[str, int]] = set()  # the keys of `_snap.executed`
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
    def snapshot(self, values: bool = True) -> Snapshot:
        """The state now; ``values``: with a copy of the value types (100k of them at
        the end of a big run: leave them out where they are not shown)."""
        with self._lock:
            s = self._snap
            done = s.executed
            return Snapshot(
                Executed(done.keys, done.count, done.run),
                s.current,
                s.current_ref,
                s.stack,
                dict(s.value_types) if values else {},
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
            self._executed = set()
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
                key = (ref.graph_path, ref.index)
                if key not in self._executed:  # (a Loop body's nodes run many times)
                    self._executed.add(key)
                    snap.executed.keys.append(key)
                    snap.executed.count += 1
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
