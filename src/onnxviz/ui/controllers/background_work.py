"""The window's one background job at a time (opening a model, laying out a scene):
a new job cancels the one before; big jobs run in a worker thread with a progress
label and Cancel, small ones at once.

A job's ``on_done`` may return an iterator: its steps then run one per turn of the
event loop (the job still counts as under way meanwhile), so taking over a big result
on the UI thread (a new document: panels, canvas, recent files) never stops the event
loop for the sum of the steps."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from onnxviz.errors import OnnxvizError
from onnxviz.ui.workers import Task

Job = Callable[[threading.Event, Callable[[str], None]], Any]


class BackgroundWork(QObject):
    busy = Signal(object)  # the label of the job under way, or None when idle
    progress = Signal(str)
    failed = Signal(str)  # a job's one-sentence error
    cancelled = Signal()
    ran_inline = Signal()  # a job finished without a worker thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.task: Task | None = None

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def stop(self, ms: int = 5000) -> None:
        """Cancel the job and wait for its thread (closing the window)."""
        if self.task is not None:
            self.task.cancel()
            self.task.wait(ms)

    def run(self, fn: Job, on_done: Callable[[Any], Any], background: bool, label: str) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None
        if not background:
            try:
                result = fn(threading.Event(), lambda _m: None)
            except OnnxvizError as exc:
                self.failed.emit(str(exc))
                return
            steps = on_done(result)
            if isinstance(steps, Iterator):
                for _ in steps:
                    pass
            self.ran_inline.emit()
            return
        task = Task(fn, self)
        self.task = task
        self.busy.emit(label)

        def done(result: Any) -> None:
            if self.task is not task:
                return
            # still under way while on_done runs: a job it starts replaces this one
            steps = on_done(result)
            if isinstance(steps, Iterator):
                self._step(task, steps)
            else:
                self._idle(task)

        def failed(message: str) -> None:
            if self.task is task:
                self._idle(task)
                if message:
                    self.failed.emit(message)
                else:
                    self.cancelled.emit()

        task.finished.connect(done)
        task.failed.connect(failed)
        task.progress.connect(lambda m: self.progress.emit(m) if self.task is task else None)
        task.start()

    def _idle(self, task: Task) -> None:
        if self.task is task:
            self.task = None
            self.busy.emit(None)

    def _step(self, task: Task, steps: Iterator[Any]) -> None:
        """One step of a job's taking over, the next in the next turn of the event loop;
        a new job dropped the rest (its result replaces this one's)."""
        if self.task is not task:
            return
        if next(steps, StopIteration) is StopIteration:
            self._idle(task)
            return
        # A real timer, not a zero-time one: Qt runs the zero-time callbacks posted while
        # it runs such callbacks in the same pass, before any timer, input or paint.
        QTimer.singleShot(1, lambda: self._step(task, steps))
