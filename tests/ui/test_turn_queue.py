"""The UI thread's shared queue of sliced work (ui/turn_queue.py): one slice per pass
of the event loop, whoever asked, so that slicers do not stack up in one pass."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QTimer

from onnxviz.ui import turn_queue
from onnxviz.ui.turn_queue import Slices, run_later

pytestmark = pytest.mark.qt


def test_slicers_take_turns_one_slice_per_pass(qtbot) -> None:  # type: ignore[no-untyped-def]
    seen: list[str] = []
    left = {"a": 3, "b": 3}

    def step(name: str, slicer: list[Slices]) -> None:
        seen.append(name)
        left[name] -= 1
        if not left[name]:
            slicer[0].stop()

    a: list[Slices] = []
    b: list[Slices] = []
    a.append(Slices(lambda: step("a", a)))
    b.append(Slices(lambda: step("b", b)))
    # another zero-interval timer fires once in every pass: the passes' boundaries
    tick = QTimer()
    tick.setInterval(0)
    tick.timeout.connect(lambda: seen.append("|"))
    tick.start()
    a[0].start()
    b[0].start()
    run_later(lambda: seen.append("job"))
    qtbot.waitUntil(lambda: not left["a"] and not left["b"] and "job" in seen, timeout=5000)
    tick.stop()
    work = [s for s in seen if s != "|"]
    assert work == ["a", "b", "job", "a", "b", "a", "b"]  # in the order asked, round robin
    passes = "".join("." if s != "|" else "|" for s in seen).split("|")
    assert max(len(p) for p in passes) == 1  # never two slices in one pass
    assert not a[0].isActive() and turn_queue.pending() == 0


def test_a_stopped_slicer_started_again_is_queued_once(qtbot) -> None:  # type: ignore[no-untyped-def]
    count = [0]
    slicer: list[Slices] = []

    def step() -> None:
        count[0] += 1
        if count[0] == 2:
            slicer[0].stop()

    slicer.append(Slices(step))
    slicer[0].start()
    slicer[0].stop()
    slicer[0].start()  # before its queued turn ran: still one turn a pass
    qtbot.waitUntil(lambda: count[0] == 2, timeout=5000)
    qtbot.wait(30)
    assert count[0] == 2 and not slicer[0].isActive()


def test_a_background_job_starts_after_the_turn_that_asked_for_it(qtbot) -> None:  # type: ignore[no-untyped-def]
    """A Task's thread starts at the end of the pass that started it (the rest of that
    turn runs without a second thread taking the GIL), or at once when waited for."""
    import threading

    from onnxviz.ui.workers import Task

    began = threading.Event()
    task = Task(lambda _cancel, _progress: began.set() or 7)
    results: list[object] = []
    task.finished.connect(results.append)
    task.start()
    assert not began.wait(0.05)  # not during the turn that started it
    qtbot.waitUntil(lambda: results == [7], timeout=5000)
    other = Task(lambda _cancel, _progress: began.clear() or 8)
    other.start()
    assert other.wait(5000) and not began.is_set()  # waited for: it ran at once
    qtbot.waitUntil(lambda: other.done, timeout=5000)


def test_a_slice_never_pays_for_a_young_collection_it_comes_in_a_job_of_its_own(qtbot) -> None:  # type: ignore[no-untyped-def]
    """A slice that allocates past the collector's threshold (a big run's take-over: a
    collection of 14-24 ms started inside a slice of 10-20) runs without collections;
    the collection it held back follows as a job of its own (the collector off until
    then: turned on at once, the next allocation of the same pass would start it), and
    the collector is on again after it, however the slice ended."""
    import gc

    where = ["outside"]
    collections: list[str] = []  # where each collection started
    kept: list[object] = []
    queued_after: list[int] = []

    def noted(phase: str, info: dict) -> None:  # type: ignore[type-arg]
        if phase == "start":
            collections.append(where[0])

    def slice_() -> None:
        where[0] = "slice"
        kept.extend([i] for i in range(gc.get_threshold()[0] * 3))  # tracked containers
        where[0] = "outside"

    gc.collect()
    gc.callbacks.append(noted)
    try:
        run_later(slice_)
        run_later(lambda: queued_after.append(turn_queue.pending()))
        qtbot.waitUntil(lambda: bool(queued_after) and not turn_queue.pending(), timeout=5000)
        assert kept and gc.isenabled()
        assert collections and "slice" not in collections
        # the collection was queued behind the job asked after the slice
        assert queued_after == [1]
        # a block past the threshold: the collector stays off until its collection runs
        collections.clear()
        with turn_queue.young_collection_after():
            kept.extend([i] for i in range(gc.get_threshold()[0] * 3))
        assert not gc.isenabled() and turn_queue.pending() == 1 and not collections
        qtbot.waitUntil(lambda: not turn_queue.pending(), timeout=5000)
        assert gc.isenabled() and collections
        with pytest.raises(RuntimeError), turn_queue.young_collection_after():
            kept.extend([i] for i in range(gc.get_threshold()[0] * 3))
            raise RuntimeError("a slice that fails")
        qtbot.waitUntil(lambda: not turn_queue.pending(), timeout=5000)
        assert gc.isenabled()
    finally:
        gc.callbacks.remove(noted)
