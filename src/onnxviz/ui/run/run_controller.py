"""`RunController`: one debugging session, run on a worker thread.

Each command (run, continue, step, ...) starts a Python thread that calls
`Debugger.advance`; while it runs the session belongs to that thread, and the UI only
reads `Debugger.snapshot()`.  Pause sets a flag the worker checks before every node;
Stop cancels the session (it stops before its next node).  Signals emitted from the
worker reach the UI thread queued, so slots always run on the UI thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QApplication

from onnxviz.runtime.events import Pause
from onnxviz.runtime.session import Session
from onnxviz.ui import collector
from onnxviz.ui.run.debugger import Debugger
from onnxviz.ui.run.worker_thread import start_worker_thread
from onnxviz.ui.turn_queue import run_later, young_collection_after

PROGRESS_MS = 100


RUN_HOLDER = "run"  # this controller's name when it holds full garbage collections


class RunController(QObject):
    stopped = Signal(object)  # Pause (or an OnnxvizError when the run could not start)
    started = Signal()
    progress = Signal()  # while running, every PROGRESS_MS
    # The worker's result, queued to the UI thread, where `_delivered` marks the run
    # stopped and only then emits `stopped`, so its slots run inside that one delivery.
    # (The worker emitted `stopped` itself before: one queued event per slot, posted one
    # after the other, so under load `wait` could see the run stopped, by the first, and
    # return before the panel's slot had run: a stepping test then found the last node
    # not yet marked executed.)
    _result = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.debugger: Debugger | None = None
        self.last_pause: Pause | None = None
        self.last_feeds: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(PROGRESS_MS)
        self._timer.timeout.connect(self.progress.emit)
        self._result.connect(self._delivered)
        # Breakpoints live here so they survive a new session (a new run).
        self.breakpoints: set[str] = set()
        # shared with every Debugger: a Pause pressed while the session is still being
        # compiled is not lost
        self.pause_event = threading.Event()
        self.stop_event = threading.Event()
        self.break_on_nonfinite = False
        # Time the run spent computing, its steps added up: a stepped run's wall time
        # counts the user's pauses, which are not the model's.
        self.compute_seconds = 0.0

    # -- state ---------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def session(self) -> Session | None:
        return self.debugger.session if self.debugger is not None else None

    @property
    def can_continue(self) -> bool:
        s = self.session
        return not self.busy and s is not None and s.state == "paused"

    # -- commands ------------------------------------------------------------------------
    def start_run(
        self,
        session_factory: Callable[[], Session],
        feeds: Mapping[str, Any],
        mode: str = "continue",
        target: str | None = None,
    ) -> bool:
        """Begin a new run (the old one is abandoned) and advance it by ``mode``."""
        if self.busy:
            return False
        feeds = dict(feeds)

        def work() -> Pause:
            sess = session_factory()
            dbg = Debugger(sess)
            dbg.pause_requested = self.pause_event
            self._sync_breakpoints(dbg)
            self.debugger = dbg
            self.compute_seconds = 0.0
            t0 = time.perf_counter()
            try:
                dbg.start(feeds)
                if self.stop_event.is_set():
                    dbg.cancel()
                self.last_feeds = feeds
                if mode == "start":
                    return Pause("step", None)
                return dbg.advance(mode, target)
            finally:
                self.compute_seconds += time.perf_counter() - t0

        self._launch(work)
        return True

    def advance(self, mode: str, target: str | None = None) -> bool:
        """Continue the paused run (step, step_over, step_out, continue, run_to)."""
        dbg = self.debugger
        if not self.can_continue or dbg is None:
            return False
        self._sync_breakpoints(dbg)
        self._launch(lambda: self._timed(lambda: dbg.advance(mode, target)))
        return True

    def _timed(self, step: Callable[[], Pause]) -> Pause:
        t0 = time.perf_counter()
        try:
            return step()
        finally:
            self.compute_seconds += time.perf_counter() - t0

    def pause(self) -> None:
        if self.busy:
            self.pause_event.set()

    def stop(self) -> None:
        """Cancel: a running run stops before its next node; a paused one ends now."""
        self.stop_event.set()  # seen by a run whose session is still being built
        dbg = self.debugger
        if dbg is None:
            return
        dbg.cancel()
        if not self.busy and dbg.session.state == "paused":
            self._launch(lambda: dbg.advance("continue"))

    def set_breakpoint(self, address: str, on: bool) -> None:
        (self.breakpoints.add if on else self.breakpoints.discard)(address)
        if self.debugger is not None:
            self._sync_breakpoints(self.debugger)

    def set_break_on_nonfinite(self, on: bool) -> None:
        self.break_on_nonfinite = on
        if self.debugger is not None:
            self.debugger.break_on_nonfinite = on

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Process events until the worker has stopped and its signal was delivered
        (tests, benchmarks)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            QApplication.processEvents()
            if not self.busy and not self._pending:
                QApplication.processEvents()
                return True
            time.sleep(0.002)
        return False

    # -- internals ------------------------------------------------------------------------
    _pending = False

    def _sync_breakpoints(self, dbg: Debugger) -> None:
        # Replace the set object: the worker reads it without a lock.
        dbg.node_breakpoints = set(self.breakpoints)
        dbg.break_on_nonfinite = self.break_on_nonfinite

    _holds_collections = False

    def _launch(self, work: Callable[[], Pause]) -> None:
        # No full garbage collection while the run goes and its result is taken over:
        # one scans every value and profile row the run made (a second at 100k nodes,
        # with the GIL held, whichever thread starts it); they are frozen afterwards.
        if not collector.holding(RUN_HOLDER):
            collector.hold_full(RUN_HOLDER)
            self._holds_collections = True
        self._pending = True
        self.pause_event.clear()
        self.stop_event.clear()
        self.started.emit()
        self._timer.start()
        self._thread = start_worker_thread(
            work, self._result.emit, name="onnxviz-run", failure="internal error"
        )

    def _delivered(self, result: Any) -> None:
        self._timer.stop()
        self._pending = False
        # The worker has handed its result over and is only returning: not busy any more
        # (its thread may still be alive when this runs; the panel's slots that follow
        # must see the run stopped, or they skip the values of the run that just ended).
        self._thread = None
        if self._holds_collections:
            self._holds_collections = False
            # after the take-over (this signal's slots), in a pass of its own (a zero
            # timer of its own could fire in the pass of a queued slice); an open's
            # hold goes on meanwhile
            run_later(lambda: collector.settle(RUN_HOLDER))
        self.last_pause = result if isinstance(result, Pause) else None
        with young_collection_after():  # (a take-over of 50k values: 14-24 ms of it)
            self.stopped.emit(result)
