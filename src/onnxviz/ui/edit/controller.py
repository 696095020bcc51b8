"""The one place edits go through in the window: run a command (or a surgery function)
on the Document, report refusals, and after every change re-validate, refresh the
canvas, the properties and the title, and schedule the crash-recovery snapshot.

Validation is incremental (`check.validate(doc, changed)`) and runs right after each
change, so the validator always sees one command per call.  Before it runs, a quick
check (`quick_check`) of the touched names shows the obvious breakages at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QApplication

from onnxviz.errors import EditError, OnnxvizError
from onnxviz.model.changes import ChangeSet
from onnxviz.model.commands import Command
from onnxviz.model.diagnostics import Diagnostic, Location, Severity
from onnxviz.model.document import Document
from onnxviz.ui.edit.quick_check import quick_check

if TYPE_CHECKING:
    from onnxviz.ui.main_window import MainWindow

AUTOSAVE_DELAY_MS = 1500

Edit = Command | Callable[[Document], Any]


class EditController(QObject):
    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.w = window
        self.doc: Document | None = None
        self.diagnostics: list[Diagnostic] = []
        self.refusal: Diagnostic | None = None
        self.last_validation_s = 0.0
        self._unsubscribe: Callable[[], None] | None = None
        self._pending: ChangeSet | None = None
        self.autosaver: Any = None
        self._autosave_timer = QTimer(self)
        self._autosave_timer.setSingleShot(True)
        self._autosave_timer.timeout.connect(self.autosave_now)
        self._validate_timer = QTimer(self)
        self._validate_timer.setSingleShot(True)
        self._validate_timer.timeout.connect(self.validate_pending)

    # -- documents --------------------------------------------------------------------
    def attach(self, doc: Document | None) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.autosaver is not None and self.doc is not None and not self.doc.is_modified:
            self.autosaver.discard()
        self.doc = doc
        self.refusal = None
        self._pending = None
        if doc is None:
            self.autosaver = None
            self.diagnostics = []
            return
        from onnxviz.model.recovery import Autosaver

        self.autosaver = Autosaver(doc)
        self._unsubscribe = doc.subscribe(self._on_changed)
        self.validate_full()

    def validate_full(self) -> None:
        from onnxviz.check import validate

        if self.doc is None:
            return
        t0 = time.perf_counter()
        try:
            self.diagnostics = validate(self.doc)
        except Exception as exc:  # a validator bug must not take the window down
            self.diagnostics = [_internal(exc)]
        self.last_validation_s = time.perf_counter() - t0
        self._publish()

    # -- editing --------------------------------------------------------------------------
    def execute(self, edit: Edit) -> bool:
        """Run one edit; False (and the reason shown) when it was refused."""
        if self.doc is None:
            return False
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
        return True

    def refuse(self, message: str, graph_path: str | None = None, node: str | None = None) -> None:
        self.refusal = Diagnostic(
            "EDIT",
            Severity.ERROR,
            f"edit refused: {message}",
            Location(graph_path or "main", node),
        )
        self.w.statusBar().showMessage(f"edit refused: {message}", 10000)
        self._publish()

    def undo(self) -> None:
        if self.doc is not None and self.doc.can_undo:
            self.doc.undo()

    def redo(self) -> None:
        if self.doc is not None and self.doc.can_redo:
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
        quick = quick_check(doc, changes)
        if quick:
            known = {(d.code, d.location, d.message) for d in self.diagnostics}
            self.diagnostics = self.diagnostics + [
                d for d in quick if (d.code, d.location, d.message) not in known
            ]
        self._publish()
        self.w.document_changed(changes)
        self._autosave_timer.start(AUTOSAVE_DELAY_MS)
        self._validate_timer.start(0)

    def validate_pending(self) -> None:
        from onnxviz.check import validate

        changes, self._pending = self._pending, None
        if changes is None or self.doc is None:
            return
        t0 = time.perf_counter()
        try:
            self.diagnostics = validate(self.doc, changes)
        except Exception as exc:
            self.diagnostics = [_internal(exc)]
        self.last_validation_s = time.perf_counter() - t0
        self._publish()

    def wait_validated(self) -> None:
        """Tests: run the pending validation now."""
        self._validate_timer.stop()
        self.validate_pending()
        QApplication.processEvents()

    def _publish(self) -> None:
        shown = ([self.refusal] if self.refusal is not None else []) + self.diagnostics
        self.w.diagnostics_dock.show_diagnostics(shown)
        self.w.show_diagnostic_badges(shown)

    # -- recovery ---------------------------------------------------------------------------
    def autosave_now(self) -> None:
        if self.autosaver is None:
            return
        try:
            self.autosaver.save_now()
        except (OSError, OnnxvizError, ValueError) as exc:
            self.w.statusBar().showMessage(f"recovery snapshot failed: {exc}", 8000)

    def saved(self) -> None:
        if self.autosaver is not None:
            self.autosaver.discard()
        self._autosave_timer.stop()

    def closed_cleanly(self) -> None:
        self._autosave_timer.stop()
        if self.autosaver is not None:
            self.autosaver.discard()


def _internal(exc: Exception) -> Diagnostic:
    return Diagnostic("INTERNAL", Severity.WARNING, f"the validator failed: {exc}", Location())
