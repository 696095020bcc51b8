"""Work off the UI thread: opening a model and laying out a scene.

A `Task` runs a function in a QThread and reports ``finished(result)`` or
``failed(message)`` on the UI thread; ``cancel()`` sets the event the function polls
(layout and scene building check it), after which the result is dropped.  Errors reach
the user as the loader's one-sentence message, never as a traceback.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QThread, QTimer, Signal

from onnxviz.errors import OnnxvizError
from onnxviz.layout import LayoutCancelled
from onnxviz.model.document import Document
from onnxviz.model.gc_pause import collector_paused
from onnxviz.present.build import BuildCancelled
from onnxviz.present.options import ViewOptions
from onnxviz.present.presenter import Presenter, display_graph
from onnxviz.present.scene import Scene
from onnxviz.present.typeinfo import InferredEntries, inferred_entries, type_table

log = logging.getLogger(__name__)
Progress = Callable[[str], None]


# While a worker thread runs Python, the UI thread waits up to this long for the GIL at
# each of its many small calls into Qt and at each call Qt makes back into Python (a
# paint, an item's wrapper going away in a scene clear): Python's default is 5 ms.  At
# 1 ms an edit of a 100k-node model still stopped the event loop for up to 390 ms while
# the old scene was cleared next to the validation thread; at 0.1 ms, 190 ms.  The
# workers lose little (their work is in long calls).
GIL_SWITCH_SECONDS = 0.0001


class Cancelled(Exception):
    pass


class _Runner(QObject):
    finished = Signal(object)
    failed = Signal(str)
    progress = Signal(str)

    def __init__(
        self, fn: Callable[[threading.Event, Progress], Any], cancel: threading.Event
    ) -> None:
        super().__init__()
        self._fn: Callable[[threading.Event, Progress], Any] | None = fn
        self._cancel = cancel

    def run(self) -> None:
        try:
            assert self._fn is not None, "a task runs once"
            result = self._fn(self._cancel, self.progress.emit)
        except (Cancelled, LayoutCancelled, BuildCancelled):
            self.failed.emit("")
        except OnnxvizError as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # never a traceback dialog: one sentence, details on stderr
            log.exception("a background task failed")
            self.failed.emit(f"internal error: {type(exc).__name__}: {exc}")
        else:
            if self._cancel.is_set():
                self.failed.emit("")
            else:
                self.finished.emit(result)
        finally:
            # The job's closure holds its document (and its validator, presenter...): a
            # finished task must not keep a closed model alive.
            self._fn = None
            # end the thread's event loop from inside: waiting for the UI thread to
            # quit it would deadlock when the UI thread is the one waiting (closing)
            thread = QThread.currentThread()
            if thread is not None:
                thread.quit()


class Task(QObject):
    """One background job.  Keep a reference until it reports."""

    finished = Signal(object)
    failed = Signal(str)  # "" when cancelled
    progress = Signal(str)

    def __init__(
        self, fn: Callable[[threading.Event, Progress], Any], parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.cancel_event = threading.Event()
        self._thread = QThread()
        self._runner = _Runner(fn, self.cancel_event)
        self._runner.moveToThread(self._thread)
        self._thread.started.connect(self._runner.run)
        self._runner.finished.connect(self._on_finished)
        self._runner.failed.connect(self._on_failed)
        self._runner.progress.connect(self.progress)
        self.done = False
        self._start_pending = False  # asked to start, in this pass of the event loop

    def start(self) -> None:
        """Start the job at the end of this pass of the event loop.  Started at once, its
        thread shared the GIL with the rest of the turn that asked for it: an edit of a
        100k-node model started the layout and type inference, then refreshed the
        Properties dock, 15 ms of work that took 60 ms next to the two threads."""
        if sys.getswitchinterval() > GIL_SWITCH_SECONDS:
            sys.setswitchinterval(GIL_SWITCH_SECONDS)
        self._start_pending = True
        QTimer.singleShot(0, self, self._start_now)

    def _start_now(self) -> None:
        if self._start_pending:
            self._start_pending = False
            self._thread.start()

    def cancel(self) -> None:
        self.cancel_event.set()

    def _stop(self) -> None:
        self.done = True
        self._thread.quit()
        self._thread.wait()

    def _on_finished(self, result: object) -> None:
        self._stop()
        self.finished.emit(result)
        self._forget_receivers()

    def _on_failed(self, message: str) -> None:
        self._stop()
        self.failed.emit(message)
        self._forget_receivers()

    def _forget_receivers(self) -> None:
        """A task reports once.  Its receivers are closures over the document, presenter
        and validator of their day, and the task lives on as its controller's child: kept
        connected, every model ever opened would stay in memory."""
        with warnings.catch_warnings():  # disconnecting a signal nobody connected warns
            warnings.simplefilter("ignore")
            for signal in (self.finished, self.failed, self.progress):
                with suppress(RuntimeError, TypeError, SystemError):
                    signal.disconnect()

    def wait(self, ms: int = 60_000) -> bool:
        self._start_now()  # (a job waited for before the end of its pass starts now)
        return self._thread.wait(ms)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Load and index a model with the cyclic garbage collector off, then freeze what
    was made.  A full collection scans every tracked object holding the GIL: with a
    100k-node index that is 150-250 ms in which the UI thread cannot run, and the first
    allocation after the index build re-enabled the collector paid exactly that.  The
    model's objects live as long as it is open, so they leave the collector's
    generations before it runs again, and later collections stay short.  When the model
    is closed, reference counting frees them (`Document.close` breaks its cycles)."""
    with collector_paused():
        try:
            yield
        finally:
            gc.freeze()  # (and no full collection until the model settles: `ui.collector`)


@dataclass
class Opened:
    doc: Document
    presenter: Presenter
    scene: Scene
    seconds: dict[str, float]


def open_model_job(
    path: str, options: ViewOptions, measure_factory: Callable[[], Any] | None = None
) -> Callable[[threading.Event, Progress], Opened]:
    """Load, type, expand and lay out: everything up to the first paint."""

    def job(cancel: threading.Event, progress: Progress) -> Opened:
        import time

        t0 = time.perf_counter()
        progress("reading model")
        with _collector_paused():
            doc = Document.open(path)
            if cancel.is_set():
                raise Cancelled()
            progress("indexing graphs")
            for scope in doc.scopes():
                # node labels too: built on first use they were 90 ms of the UI thread at
                # 100k nodes, in the first click or edit
                scope.labels  # noqa: B018
        t1 = time.perf_counter()
        progress("inferring shapes")
        types = type_table(doc)
        t2 = time.perf_counter()
        if cancel.is_set():
            raise Cancelled()
        presenter = Presenter(doc, options=options, types=types)
        presenter.expanded |= presenter.default_expansion()
        progress("laying out")
        measure = measure_factory() if measure_factory else None
        scene = display_graph(presenter, measure=measure, cancel=cancel.is_set)
        t3 = time.perf_counter()
        return Opened(doc, presenter, scene, {"load": t1 - t0, "types": t2 - t1, "layout": t3 - t2})

    return job


def layout_job(
    presenter: Presenter, measure_factory: Callable[[], Any] | None = None
) -> Callable[[threading.Event, Progress], Scene]:
    def job(cancel: threading.Event, progress: Progress) -> Scene:
        progress("laying out")
        measure = measure_factory() if measure_factory else None
        return display_graph(presenter, measure=measure, cancel=cancel.is_set)

    return job


def inference_job(doc: Document) -> Callable[[threading.Event, Progress], InferredEntries]:
    """Shape inference as type texts per graph path.  It runs in check's worker process
    (onnx's C++ code never runs in the app's, where a crash would take the window and its
    unsaved edits with it), which also reads an unedited model's file itself and turns
    the types into text: this thread only waits for plain strings and makes the type
    table's entries of them, so the UI thread merely merges dicts."""
    from onnxviz.check.inference import infer_type_texts
    from onnxviz.model import inplace

    path = doc.path
    if path is not None and (
        doc.is_modified
        or doc.source_format != "protobuf"
        or os.path.splitext(path)[1].lower() in (".onnxtxt", ".txt")  # saved as text
        or not os.path.isfile(path)
        or os.path.getsize(path) >= inplace.MIN_FILE_SIZE  # big weights left in place
    ):
        path = None  # the model as it is now goes over the pipe
    model, base_dir = doc.model, doc.base_dir

    def job(cancel: threading.Event, progress: Progress) -> InferredEntries:
        progress("inferring shapes")
        # The document's bytes, shared with validation and built in small steps: a
        # serialization here in one call stopped the UI thread.
        try:
            data = doc.model_bytes() if path is None and model is doc.model else None
        except ValueError:  # over 2 GB: no worker can read it
            return inferred_entries({})
        texts = infer_type_texts(model if data is None else data, base_dir, path)
        if cancel.is_set():
            raise Cancelled()
        return inferred_entries(texts)

    return job


def build_opened(
    doc: Document, options: ViewOptions, measure_factory: Callable[[], Any] | None = None
) -> Opened:
    """An already loaded Document (recovered edits) made ready to show, synchronously."""
    types = type_table(doc)
    presenter = Presenter(doc, options=options, types=types)
    presenter.expanded |= presenter.default_expansion()
    measure = measure_factory() if measure_factory else None
    scene = display_graph(presenter, measure=measure)
    return Opened(doc, presenter, scene, {})
