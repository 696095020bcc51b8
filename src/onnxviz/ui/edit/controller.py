"""The one place edits go through in the window: run a command (or a surgery function)
on the session's Document, report refusals, and after every change re-validate, tell
the views (the `DocumentSession`'s ``edited``, ``changed`` and ``diagnostics_changed``
signals) and schedule the crash-recovery snapshot.

The diagnostics live in the session's `check.Validator`; this controller only asks it.
Validation is incremental (`Validator.validate(changes)`) and runs after each change in
a worker thread, so typing stays fluid on big models; the next edit waits for it to
finish (the validator then always sees one command per call, and never a model that
changes under it).  Before it runs, the validator's quick check of the touched names
shows the obvious breakages at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QApplication

from onnxviz.check.quick import index_before
from onnxviz.errors import EditError, OnnxvizError
from onnxviz.model.changes import ChangeSet
from onnxviz.model.commands import Command
from onnxviz.model.diagnostics import Diagnostic, Location, Severity
from onnxviz.model.document import Document

if TYPE_CHECKING:
    from onnxviz.check.validator import Validator
    from onnxviz.model.recovery import Autosaver
    from onnxviz.ui.doc_session import DocumentSession

log = logging.getLogger(__name__)
AUTOSAVE_DELAY_MS = 1500
# Main graphs up to this size redraw inside the edit; bigger ones right after the
# diagnostics dock has shown the quick check (so it appears within 200 ms).
SYNC_VIEW_NODES = 2000

Edit = Command | Callable[[Document], Any]


# Documents with more nodes than this are validated by the validator's worker process.
WORKER_VALIDATION_NODES = 5000


class EditController(QObject):
    """Runs the edits of the session's document; the views follow `DocumentSession`'s
    ``edited``, ``changed`` and ``diagnostics_changed`` signals, which it emits."""

    # a recovery snapshot's writer thread failed (queued to the UI thread)
    autosave_failed = Signal(str)

    def __init__(self, session: DocumentSession) -> None:
        super().__init__(session)
        self.session = session
        self.autosave_failed.connect(self._report_autosave_failure)
        self.doc: Document | None = None
        self.validator: Validator | None = None
        self.failure: Diagnostic | None = None  # the validator itself failed (a bug)
        self.refusal: Diagnostic | None = None
        self.last_validation_s = 0.0
        self._unsubscribe: Callable[[], None] | None = None
        self._pending: ChangeSet | None = None
        self.autosaver: Autosaver | None = None
        self._autosave_timer = QTimer(self)
        self._autosave_timer.setSingleShot(True)
        self._autosave_timer.timeout.connect(self.autosave_now)
        self._validate_timer = QTimer(self)
        self._validate_timer.setSingleShot(True)
        self._validate_timer.timeout.connect(self.validate_pending)
        self._task: Any = None
        self._task_elsewhere = False  # the running task validates in the worker process
        self._before: Any = None
        self._view_changes: ChangeSet | None = None
        self._task_result: list[Any] = []
        self._task_started = 0.0
        self._abandoned: list[Any] = []  # validations of documents no longer open
        self._held = False  # see hold_validation
        self._held_run = False  # a full validation waits for release_validation
        session.document_replaced.connect(lambda _doc: self.follow_session())

    # -- documents --------------------------------------------------------------------
    @property
    def diagnostics(self) -> list[Diagnostic]:
        """The attached document's diagnostics, as its Validator has them."""
        if self.failure is not None:
            return [self.failure]
        return self.validator.diagnostics if self.validator is not None else []

    def follow_session(self) -> None:
        """Edit the session's document with the session's validator and autosaver."""
        self.attach(self.session.doc, self.session.validator, self.session.autosaver)

    def attach(
        self,
        doc: Document | None,
        validator: Validator | None = None,
        autosaver: Autosaver | None = None,
    ) -> None:
        """Edit ``doc``; its diagnostics are kept by ``validator`` and its recovery
        snapshots by ``autosaver`` (made here when the caller has none)."""
        if doc is self.doc:
            self.settle()
        else:
            # The old document's validation is of no use any more: its result is
            # dropped (see `_take_result`) instead of waited for (closing waits).
            self._abandon_task()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.autosaver is not None and self.doc is not None and not self.doc.is_modified:
            self.autosaver.discard()
        self.doc = doc
        self.refusal = None
        self.failure = None
        self._pending = None
        if doc is None:
            self.autosaver = None
            self.validator = None
            self._view_changes = None
            self._publish()  # nothing to show: the dock and badges empty
            return
        from onnxviz.check.validator import Validator

        self.validator = validator if validator is not None else Validator(doc)
        from onnxviz.model.recovery import Autosaver

        self.autosaver = autosaver if autosaver is not None else Autosaver(doc)
        self._unsubscribe = doc.subscribe(self._on_changed)
        self.validate_full()

    def validate_full(self) -> None:
        """Validate the whole document (in the worker; load-time problems show now)."""
        if self.doc is None:
            return
        if self._held:
            self._held_run = True
        else:
            self._start(None, elsewhere=self._big())
        # the Validator has the load-time problems before its first run (the dock says
        # the rest is being checked: `validating`)
        self._publish()

    def hold_validation(self) -> None:
        """Keep the next full validation waiting until `release_validation` (or a
        `settle`): opening a big model holds it until the canvas has its first view, so
        that the validator's seconds of Python in a worker thread do not compete with
        the canvas for the GIL while it fills."""
        self._held = True

    def release_validation(self) -> None:
        self._held = False
        if self._held_run:
            self._held_run = False
            if self.doc is not None:
                self._start(None, elsewhere=self._big())

    # -- editing --------------------------------------------------------------------------
    def execute(self, edit: Edit) -> bool:
        """Run one edit; False (and the reason shown) when it was refused."""
        if self.doc is None or self._refused_while_saving():
            return False
        self.settle()
        self._before = index_before(self.doc)
        try:
            if isinstance(edit, Command):
                self.doc.execute(edit)
            else:
                edit(self.doc)
        except EditError as exc:
            self.refuse(str(exc), getattr(exc, "graph_path", None), getattr(exc, "node", None))
            return False
        except OnnxvizError as exc:
            self.refuse(str(exc))
            return False
        except Exception as exc:  # a bug in an edit must not take the window down
            log.exception("an edit failed")
            self.refuse(f"internal error: {type(exc).__name__}: {exc}")
            return False
        return True

    def refuse(self, message: str, graph_path: str | None = None, node: str | None = None) -> None:
        self.refusal = Diagnostic(
            "EDIT",
            Severity.ERROR,
            f"edit refused: {message}",
            Location(graph_path or "main", node),
        )
        self.session.status(f"edit refused: {message}", 10000)
        self._publish()

    def _refused_while_saving(self) -> bool:
        """A big model's save runs in a worker thread and reads the model: an edit now
        could reach the file half-way.  It is refused with its reason, and tried again
        by the user a moment later."""
        if not self.session.saving:
            return False
        self.refuse("the model is being saved; edit again when the save is done")
        return True

    def undo(self) -> None:
        if self._refused_while_saving():
            return
        self.settle()
        if self.doc is not None and self.doc.can_undo:
            self._before = index_before(self.doc)
            self.doc.undo()

    def redo(self) -> None:
        if self._refused_while_saving():
            return
        self.settle()
        if self.doc is not None and self.doc.can_redo:
            self._before = index_before(self.doc)
            self.doc.redo()

    # -- after each change ------------------------------------------------------------------
    def _on_changed(self, changes: ChangeSet) -> None:
        doc = self.doc
        if doc is None:
            return
        self.refusal = None
        if self._pending is not None:
            # Another edit landed before the last one was validated: validate that first
            # would be wrong now (the model moved on); the validator does a full run.
            self._pending = self._pending.merge(changes)
        else:
            self._pending = changes
        before, self._before = self._before, None
        if self.validator is not None:
            self.validator.quick_check(changes, before)
        self._publish(badges=False)  # badges need the index: they follow with the views
        self.session.edited.emit()
        # The canvas, properties and the validator follow once the dock has painted.
        self._view_changes = (
            changes if self._view_changes is None else self._view_changes.merge(changes)
        )
        if len(doc.model.graph.node) <= SYNC_VIEW_NODES:
            self.flush_views()  # small models redraw at once
        self._autosave_timer.start(AUTOSAVE_DELAY_MS)
        self._validate_timer.start(0)

    def flush_views(self) -> None:
        """Refresh canvas and properties for the changes not shown yet."""
        changes, self._view_changes = self._view_changes, None
        if changes is not None and self.doc is not None:
            self.session.show_changes(changes)

    def validate_pending(self) -> None:
        """Refresh the views, then validate the pending change in a worker thread."""
        self.flush_views()
        self.settle()
        changes, self._pending = self._pending, None
        if changes is None or self.doc is None:
            return
        self._start(changes, elsewhere=self._big())

    def _big(self) -> bool:
        """Whether the document's validations go to the validator's worker process: a
        second or more of rule Python in a thread here shares the GIL with the UI thread
        (every event-loop turn took twice its time), where a worker answers a few
        seconds later with the UI free.  The quick check still answers at once."""
        doc = self.doc
        return doc is not None and doc.node_count > WORKER_VALIDATION_NODES

    def _start(self, changes: ChangeSet | None, elsewhere: bool = False) -> None:
        from onnxviz.ui.workers import Task

        validator = self.validator
        if validator is None:
            return
        box: list[Any] = []
        self._task_result = box

        def job(cancel: threading.Event, _progress: Any) -> None:
            try:
                if elsewhere and validator.validate_in_worker():
                    box.append(None)
                    return
                if cancel.is_set():  # an edit came meanwhile: its own run follows
                    return
                validator.validate(changes)
                box.append(None)
            except Exception as exc:  # a validator bug must not take the window down
                box.append(_internal(exc))

        task = Task(job, self)
        self._task = task
        self._task_elsewhere = elsewhere
        self._task_started = time.perf_counter()
        task.finished.connect(lambda _r: self._take_result(task))
        task.failed.connect(lambda _m: self._take_result(task))
        task.start()

    def settle(self, *, wait_elsewhere: bool = False) -> None:
        """Wait for a running validation and take its result (before the next edit).  A
        validation in the worker process is not waited for (it takes seconds at 100k
        nodes, and the edit makes its answer stale): it is dropped, and the edit's own
        run validates the whole document."""
        self.release_validation()  # a held one runs now
        task = self._task
        if task is not None and self._task_elsewhere and not wait_elsewhere and not task.done:
            task.cancel()
            self._abandon_task()
            return
        if task is not None:
            task.wait()
            self._take_result(task)

    def _abandon_task(self) -> None:
        """Drop the running validation's result (`_take_result` ignores it); closing
        still waits for its thread."""
        if self._task is not None:
            self._abandoned = [t for t in self._abandoned if not t.done] + [self._task]
        self._task = None
        self._task_result = []

    def _take_result(self, task: Any) -> None:
        if task is not self._task:
            return
        self._task = None
        if self._task_result and self.doc is not None:
            self.failure = self._task_result[0]
            self.last_validation_s = time.perf_counter() - self._task_started
            self._publish()
        self._task_result = []

    @property
    def validating(self) -> bool:
        """A validation runs, or follows an edit soon."""
        return self._task is not None or self._pending is not None

    @property
    def validation_due(self) -> bool:
        """`validating`, or a full validation waits for the canvas's first view."""
        return self.validating or self._held_run

    def wait_validated(self) -> None:
        """Tests: run the pending validation now and wait for it."""
        self.settle(wait_elsewhere=True)
        if self._validate_timer.isActive():
            self._validate_timer.stop()
            self.validate_pending()
        self.settle(wait_elsewhere=True)
        QApplication.processEvents()

    def shown(self) -> list[Diagnostic]:
        return ([self.refusal] if self.refusal is not None else []) + self.diagnostics

    def _publish(self, badges: bool = True) -> None:
        shown = self.shown()
        self.session.diagnostics = shown
        self.session.validation_running = self.validation_due
        self.session.diagnostics_changed.emit(shown, badges and self._view_changes is None)

    # -- recovery ---------------------------------------------------------------------------
    def autosave_now(self) -> None:
        """A recovery snapshot of the unsaved edits, its files written by a thread."""
        if self.autosaver is None:
            return
        try:
            self.autosaver.save_in_background(lambda exc: self.autosave_failed.emit(str(exc)))
        except (OSError, OnnxvizError, ValueError) as exc:
            self._report_autosave_failure(str(exc))

    def wait_autosaved(self) -> None:
        """Until the last recovery snapshot is on disk."""
        if self.autosaver is not None:
            self.autosaver.flush()

    def _report_autosave_failure(self, message: str) -> None:
        self.session.status(f"recovery snapshot failed: {message}", 8000)

    def saved(self) -> None:
        if self.autosaver is not None:
            self.autosaver.discard()
        self._autosave_timer.stop()

    def closed_cleanly(self) -> None:
        self.settle()
        for task in self._abandoned:
            task.wait()
        self._abandoned = []
        self._autosave_timer.stop()
        if self.autosaver is not None:
            self.autosaver.discard()


def _internal(exc: Exception) -> Diagnostic:
    return Diagnostic("INTERNAL", Severity.WARNING, f"the validator failed: {exc}", Location())
