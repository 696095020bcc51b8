"""One queue for the UI thread's work done in slices: one slice per pass of the event
loop, whoever asked.

Every zero-interval QTimer fires once in each pass of the event loop, so slicers with a
timer each share a pass: at a 100k-node run's end, the run tables' fill, the sort of
its keys and the canvas' value badges each took a slice of 25-45 ms in the same pass, a
125 ms stop.  Work queued here takes turns instead (`run_later`: once; `Slices`: a step
again and again until stopped), in the order asked, so a pass holds a single slice.
The cyclic collector's young collections, which a slice's allocations would start in
the middle of it, wait for a pass of their own too (`young_collection_after`).
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from PySide6.QtCore import QTimer

from onnxviz.model.gc_pause import collector_paused

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
        with young_collection_after():
            _jobs.popleft()()
    if not _jobs:
        _runner[0].stop()


@contextmanager
def young_collection_after() -> Iterator[None]:
    """Run a block (a slice, a run's take-over) without the cyclic collector, and
    leave the young collection it held back to a job of its own.  A big run's take-over
    makes lists and dicts of 50k entries, and a collection of the generation they sit
    in, started by whichever allocation crossed the threshold, traversed them for
    14-24 ms in the middle of a slice of 10-20.  When the block ends past the
    threshold the collector stays off until that job (turned on at once, the next
    allocation, in this pass, would start the collection); a collector that was off
    before (another block's, a worker's pause) is left to whoever turned it off."""
    with collector_paused(stay_off=_collection_queued):
        yield


def _collection_queued() -> bool:
    """Past the threshold: the collection is queued (and the collector left off)."""
    if gc.get_count()[0] < gc.get_threshold()[0]:
        return False
    run_later(_collect_young)
    return True


def _collect_young() -> None:
    """The collection a block held back, then the collector on again: the generation
    Python would have collected (the middle one every `gc.get_threshold()[1]` young
    ones; the oldest is left to Python's own trigger, which `ui.collector` holds while
    a big model settles or runs)."""
    count, threshold = gc.get_count(), gc.get_threshold()
    try:
        if count[0] >= threshold[0]:
            gc.collect(1 if count[1] + 1 >= threshold[1] else 0)
    finally:
        gc.enable()


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
