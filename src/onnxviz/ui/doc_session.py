"""The open document and everything that lives exactly as long as it does.

`DocumentSession` owns the Document, its Presenter, its Validator (the one store of its
diagnostics), the crash-recovery Autosaver and the run controller.  Commands change the
Document; the panels never hold a model of their own: they follow the session's signals.
So "another model was opened" (``document_replaced``) and "the model changed"
(``changed``) reach every panel by construction, and none can show a stale model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from onnxviz.model.changes import ChangeSet
from onnxviz.model.document import Document
from onnxviz.present.options import ViewOptions
from onnxviz.present.presenter import Presenter
from onnxviz.present.scene import Scene
from onnxviz.ui.run.run_controller import RunController

if TYPE_CHECKING:
    from onnxviz.check.validator import Validator
    from onnxviz.model.diagnostics import Diagnostic
    from onnxviz.model.recovery import Autosaver


class DocumentSession(QObject):
    """One open model, or none.

    Signals, in the order a panel meets them:

    * ``document_replaced(doc)``: another document (or None) is open; forget the old one;
    * ``edited()``: the document changed: undo state, title, dirty mark follow at once;
    * ``changed(ChangeSet)``: the views follow the change (for big models a moment
      after ``edited``: the diagnostics dock shows the quick check first);
    * ``diagnostics_changed(list, badges)``: what the validator and the last refused edit
      say; ``badges``: the canvas may badge them now (False while a relayout is pending);
      ``validation_running`` says whether a validation will still complete the list;
    * ``scene_ready(Scene)``: a (re)laid-out scene is on the canvas;
    * ``selection_changed(subject)``: the properties pane shows ``subject``
      (("node", path, index), ("value", path, name), ...);
    * ``run_state_changed()``: a run started, paused, finished or was dropped;
    * ``message(text, ms)``: a line for the status bar (``ms`` 0: until replaced).
    """

    document_replaced = Signal(object)
    edited = Signal()
    changed = Signal(object)
    diagnostics_changed = Signal(object, bool)
    scene_ready = Signal(object)
    selection_changed = Signal(object)
    run_state_changed = Signal()
    message = Signal(str, int)

    def __init__(self, options: ViewOptions, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.options = options
        self.doc: Document | None = None
        self.presenter: Presenter | None = None
        self.display: Scene | None = None  # the scene on the canvas
        self.validator: Validator | None = None
        self.autosaver: Autosaver | None = None
        # what the diagnostics dock shows: the refused edit, then the validator's list
        self.diagnostics: list[Diagnostic] = []
        # and whether that list is still to be completed by a running validation
        self.validation_running = False
        # a big model's save under way in a worker thread: edits wait for it (the save
        # reads the model and may move its tensors' data)
        self.saving = False
        self.is_example = False
        self.runner = RunController(self)
        self.runner.started.connect(self.run_state_changed.emit)
        self.runner.stopped.connect(lambda _result: self.run_state_changed.emit())

    def replace(
        self,
        doc: Document | None,
        presenter: Presenter | None = None,
        *,
        example: bool = False,
        validator: Validator | None = None,
    ) -> None:
        """Make ``doc`` the open document (None: close); every panel is told."""
        from onnxviz.check.validator import Validator
        from onnxviz.model.recovery import Autosaver

        previous = self.doc
        self.doc = doc
        self.presenter = presenter
        self.display = None
        self.is_example = example and doc is not None
        self.validator = None if doc is None else (validator or Validator(doc))
        self.autosaver = None if doc is None else Autosaver(doc)
        self.document_replaced.emit(doc)
        self.run_state_changed.emit()
        if previous is not None and previous is not doc:
            previous.close()  # every panel has let go of it (see Document.close)

    def subscribe(self, listener: Callable[[ChangeSet], Any]) -> Callable[[], None]:
        """Hear every change of the open document as the Document makes it (the edit
        pipeline does; panels use ``changed``)."""
        assert self.doc is not None
        return self.doc.subscribe(listener)

    def show_changes(self, changes: ChangeSet) -> None:
        """The edit pipeline: the views may follow ``changes`` now."""
        self.changed.emit(changes)

    def status(self, text: str, ms: int = 8000) -> None:
        self.message.emit(text, ms)

    @property
    def total_nodes(self) -> int:
        return self.doc.node_count if self.doc is not None else 0
