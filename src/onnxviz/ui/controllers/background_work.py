"""The window's one background job at a time (opening a model, laying out a scene):
a new job cancels the one before; big jobs run in a worker thread with a progress
label and Cancel, small ones at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

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

    def run(self, fn: Job, on_done: Callable[[Any], None], background: bool, label: str) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None
        if not background:
            try:
                result = fn(threading.Event(), lambda _m: None)
            except OnnxvizError as exc:
                self.failed.emit(str(exc))
                return
            on_done(result)
            self.ran_inline.emit()
            return
        task = Task(fn, self)
        self.task = task
        self.busy.emit(label)

        def done(result: Any) -> None:
            if self.task is task:
                self.task = None
                self.busy.emit(None)
                on_done(result)

        def failed(message: str) -> None:
            if self.task is task:
                self.task = None
                self.busy.emit(None)
                if message:
                    self.failed.emit(message)
                else:
                    self.cancelled.emit()

        task.finished.connect(done)
        task.failed.connect(failed)
        task.progress.connect(lambda m: self.progress.emit(m) if self.task is task else None)
        task.start()
