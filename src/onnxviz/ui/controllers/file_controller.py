"""Files: open (in a worker thread), close, save and Save As with the external-data
choice, the unsaved-work question, crash recovery at start, image export."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from PySide6.QtCore import QObject, Signal

from onnxviz.errors import FileChangedError, OnnxvizError
from onnxviz.ui import collector, settings
from onnxviz.ui.canvas.scene import GraphScene
from onnxviz.ui.controllers.background_work import BackgroundWork
from onnxviz.ui.controllers.navigation_controller import NavigationController
from onnxviz.ui.doc_session import DocumentSession
from onnxviz.ui.edit.controller import EditController
from onnxviz.ui.prompter import Prompter
from onnxviz.ui.theme import TextMetrics
from onnxviz.ui.workers import Opened, Task, open_model_job

MODEL_FILTERS = "ONNX models (*.onnx *.onnxtxt *.txt);;All files (*)"
# Models with more nodes are taken over in steps, one per turn of the event loop.
STAGED_ADOPT_NODES = 5000
# Models with more nodes are saved in a worker thread: at 100k nodes a save is 0.3-0.5 s
# of walking tensors and serializing, which on the UI thread froze the window.
BACKGROUND_SAVE_NODES = 5000
OPEN_HOLDER = "open"  # this controller's name when it holds full collections
SETTLE_LIMIT_S = 120.0  # full garbage collections are held at most this long after an open
EXTERNAL_CHOICES = [
    ("keep", "Keep external data where it is"),
    ("embed", "Embed all tensors in the model file"),
    ("external", "Write big tensors to a data file next to the model"),
]


class FileController(QObject):
    recent_changed = Signal()  # the recent-files list changed
    failed = Signal(str)  # a file could not be opened, saved or exported

    def __init__(
        self,
        session: DocumentSession,
        edits: EditController,
        navigation: NavigationController,
        work: BackgroundWork,
        scene: GraphScene,
        prompter: Prompter,
    ) -> None:
        super().__init__(session)
        self.session = session
        self.edits = edits
        self.navigation = navigation
        self.work = work
        self.graph_scene = scene
        self.prompter = prompter
        # After an open, full garbage collections wait until the model has settled
        # (`ui.collector`): this timer looks for that moment.
        self._settled = collector.HoldUntilQuiet(OPEN_HOLDER, self.quiet, self, SETTLE_LIMIT_S)
        self._save_task: Task | None = None  # a big model's save under way

    # -- opening ------------------------------------------------------------------------------
    def open_dialog(self) -> None:
        recent = settings.recent_files()
        start = os.path.dirname(recent[0]) if recent else ""
        path = self.prompter.open_file("Open model", start, MODEL_FILTERS)
        if path:
            self.open_path(path)

    def open_path(self, path: str, *, background: bool = True, example: bool = False) -> None:
        if not self.maybe_save():
            return
        job = open_model_job(path, self.session.options, TextMetrics)
        self._settled.start()  # full collections wait until the model has settled
        self.work.run(
            job,
            lambda opened: self.adopt_steps(opened, path, example, inline=not background),
            background,
            f"opening {os.path.basename(path)}",
        )

    def quiet(self) -> bool:
        """Nothing runs for the open model: no open or relayout job, no canvas fill,
        no validation due, no shape inference, no save."""
        inference = self.navigation.inference_task
        return (
            self._save_task is None
            and self.work.task is None
            and not self.graph_scene.filling
            and not self.edits.validation_due
            and (inference is None or inference.done)
        )

    def adopt(self, opened: Opened, path: str, example: bool) -> None:
        """Make a freshly opened model the session's document."""
        for _ in self.adopt_steps(opened, path, example, inline=True):
            pass

    def adopt_steps(
        self, opened: Opened, path: str, example: bool, inline: bool = False
    ) -> Iterator[None]:
        """`adopt` in steps (BackgroundWork runs one per turn of the event loop; ``inline``:
        all at once, the canvas filled before the last step): at 100k
        nodes the panels, the canvas's first slice and the recent-files list each take
        tens of milliseconds, and under load their sum stopped the UI for half a second."""
        staged = opened.doc.node_count > STAGED_ADOPT_NODES
        if staged:  # validated once the canvas has its first view (see hold_validation)
            self.edits.hold_validation()
        try:
            self.session.replace(opened.doc, opened.presenter, example=example)
            if staged:
                yield
                if self.session.doc is not opened.doc:  # closed or replaced meanwhile
                    return
            self.navigation.adopt_scene(opened.scene)
            if not example:
                if staged:
                    yield
                settings.add_recent(path)
                self.recent_changed.emit()
            if staged and inline:  # no event loop turns between the steps
                self.graph_scene.finish_filling()
            while staged and self.graph_scene.filling:
                yield
        finally:
            self.edits.release_validation()

    def close_model(self) -> None:
        if not self.maybe_save():
            return
        self.edits.closed_cleanly()
        self.session.replace(None)

    # -- saving -------------------------------------------------------------------------------
    def save(self, *, background: bool = True) -> None:
        doc = self.session.doc
        if doc is None:
            return
        if doc.path is None or self.session.is_example:
            self.save_as(background=background)
            return
        self.save_to(doc.path, background=background)

    def save_as(self, *, background: bool = True) -> None:
        doc = self.session.doc
        if doc is None:
            return
        chosen = self.prompter.save_file("Save model as", doc.path or "", "ONNX models (*.onnx)")
        if chosen is None:
            return
        mode = self.prompter.choose("Tensor data", "Weights", EXTERNAL_CHOICES)
        if mode is not None:
            self.save_to(chosen[0], mode, background=background)

    def save_to(self, path: str, external_data: Any = "keep", *, background: bool = True) -> bool:
        """Save the open model to ``path``; True when saved.  A big model (over
        `BACKGROUND_SAVE_NODES`) is saved by a worker thread unless ``background`` is
        False: then True means the save started, and edits wait until it is done
        (`saving`, `wait_saved`)."""
        doc = self.session.doc
        assert doc is not None
        self.wait_saved()  # one save at a time, in the order asked
        if background and doc.node_count > BACKGROUND_SAVE_NODES:
            self._save_in_background(path, external_data, overwrite_changed=False)
            return True
        try:
            try:
                doc.save(path, external_data=external_data)
            except FileChangedError:
                if not self.prompter.overwrite_changed(os.path.basename(path)):
                    self.session.status("not saved: the file changed on disk", 8000)
                    return False
                doc.save(path, external_data=external_data, overwrite_changed=True)
        except OnnxvizError as exc:
            self.failed.emit(str(exc))
            return False
        self._saved(path)
        return True

    @property
    def saving(self) -> bool:
        return self._save_task is not None

    def wait_saved(self) -> None:
        """Block until a save under way in the background is done and reported (closing
        the window or the model, a second save)."""
        task = self._save_task
        if task is None:
            return
        task.wait()
        from PySide6.QtCore import QCoreApplication

        while self._save_task is task:  # its report is queued for this thread
            QCoreApplication.processEvents()
            time.sleep(0.001)

    def _save_in_background(self, path: str, external_data: Any, overwrite_changed: bool) -> None:
        doc = self.session.doc
        assert doc is not None

        def job(_cancel: Any, progress: Any) -> bool:
            progress(f"saving {os.path.basename(path)}")
            try:
                doc.save(path, external_data=external_data, overwrite_changed=overwrite_changed)
            except FileChangedError:
                return False
            return True

        task = Task(job, self)
        self._save_task = task
        self.session.saving = True
        self.session.status(f"saving {path}…", 0)

        def over() -> bool:
            if self._save_task is not task:
                return False
            self._save_task = None
            self.session.saving = False
            return self.session.doc is doc

        def done(written: bool) -> None:
            if not over():
                return
            if written:
                self._saved(path)
            elif self.prompter.overwrite_changed(os.path.basename(path)):
                self._save_in_background(path, external_data, overwrite_changed=True)
            else:
                self.session.status("not saved: the file changed on disk", 8000)

        def failed(message: str) -> None:
            if over():
                self.session.status("", 1)
                self.failed.emit(message or "the save was stopped")

        task.finished.connect(done)
        task.failed.connect(failed)
        task.start()

    def _saved(self, path: str) -> None:
        """What follows a save: the clean mark, the title, recent files, the status."""
        self.edits.saved()
        self.session.is_example = False
        self.session.edited.emit()  # the title loses its dirty mark
        settings.add_recent(path)
        self.recent_changed.emit()
        self.session.status(f"saved {path}", 5000)

    def maybe_save(self) -> bool:
        """Before closing unsaved work: save, discard or cancel.  True: go on.  A save
        under way is finished first: it may be the one that leaves nothing unsaved."""
        self.wait_saved()
        doc = self.session.doc
        if doc is None or not doc.is_modified:
            return True
        answer = self.prompter.unsaved_changes(doc.display_name)
        if answer == "cancel":
            return False
        if answer == "save":
            self.save(background=False)
            return not doc.is_modified
        return True

    # -- recovery -------------------------------------------------------------------------------
    def offer_recovery(self) -> None:
        """At start: snapshots left by a crashed session can be restored."""
        from onnxviz.model.recovery import pending

        entries = pending()
        if not entries:
            return
        entry = entries[0]
        answer = self.prompter.recover(entry.source or "an unsaved model", entry.last_edit or "")
        if answer == "restore":
            self.restore_recovery(entry)
        elif answer == "discard":
            entry.discard()

    def restore_recovery(self, entry: Any) -> None:
        from onnxviz.ui.workers import build_opened

        doc = entry.restore()
        self.adopt(build_opened(doc, self.session.options), doc.path or "", example=False)
        entry.discard()
        self.edits.autosave_now()
        self.edits.wait_autosaved()  # the restored state is safe again before anything else
        self.session.edited.emit()

    # -- export ---------------------------------------------------------------------------------
    def export_dialog(self) -> None:
        from onnxviz.ui.export import export_any

        doc = self.session.doc
        if doc is None:
            return
        base = os.path.splitext(doc.path or "graph")[0]
        chosen = self.prompter.save_file(
            "Export image",
            base + ".svg",
            "SVG, whole graph (*.svg);;PNG, whole graph (*.png);;PDF (*.pdf);;"
            "PNG, current view (*.png)",
        )
        if chosen is None:
            return
        path, kind = chosen
        rect = self.navigation.visible_rect() if "current view" in kind else None
        scale = 2.0
        if path.lower().endswith(".png"):
            chosen_scale = self.prompter.number(
                "PNG scale", "Pixels per scene unit (sharpness):", 2.0, 0.1, 16.0, 1
            )
            if chosen_scale is None:
                return
            scale = chosen_scale
        try:
            export_any(self.graph_scene, path, rect, scale=scale, title=doc.display_name)
        except OnnxvizError as exc:
            self.failed.emit(str(exc))
            return
        self.session.status(f"exported {path}", 5000)
