"""One queue for the UI thread's work done in slices: one slice per pass of the event
loop, whoever asked.

Every zero-interval QTimer fires once in each pass of the event loop, so slicers with a
timer each share a pass: at a 100k-node run's end, the run tables' fill, the sort of
its keys and the canvas' value badges each took a slice of 25-45 ms in the same pass, a
125 ms stop.  Work queued here takes turns instead (`run_later`: once; `Slices`: a step
again and again until stopped), in the order asked, so a pass holds a single slice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from PySide6.QtCore import QTimer

_jobs: deque[Callable[[], None]] = deque()
_runner: list[QTimer] = []  # made with the first job (a QApplication exists by then)


def run_later(job: Callable[[], None]) -> None:
    """Run ``job`` in a later pass of the event loop, after the jobs asked before it,
    one job per pass."""
    _jobs.append(job)
    if not _runner:
        timer = QTimer()
        timer.setInterval(0)
        timer.timeout.connect(_run_one)
        _runner.append(timer)
    if not _runner[0].isActive():
        _runner[0].start()


def _run_one() -> None:
    if _jobs:
        _jobs.popleft()()
    if not _jobs:
        _runner[0].stop()


def pending() -> int:
    """Jobs still queued (tests)."""
    return len(_jobs)


class Slices:
    """``step`` run a pass at a time from the queue until `stop`: the start, stop and
    isActive of a zero-interval QTimer, taking turns with the other queued work."""

    def __init__(self, step: Callable[[], object]) -> None:
        self._step = step
        self._active = False
        self._queued = False  # a turn of ours is in the queue

    def start(self) -> None:
        self._active = True
        if not self._queued:
            self._queued = True
            run_later(self._turn)

    def stop(self) -> None:
        self._active = False

    def isActive(self) -> bool:  # (QTimer's name)
        return self._active

    def _turn(self) -> None:
        self._queued = False
        if not self._active:
            return
        self._step()
        if self._active and not self._queued:  # behind what was asked meanwhile
            self._queued = True
            run_later(self._turn)
