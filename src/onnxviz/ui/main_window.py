"""The main window: canvas with breadcrumb, docks, menus, status bar, and the glue
between the Document, the Presenter and the canvas."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QRectF, Qt, QTimer
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from onnxviz.errors import FileChangedError, OnnxvizError
from onnxviz.model.document import Document
from onnxviz.present.options import ViewOptions
from onnxviz.present.presenter import Presenter
from onnxviz.present.scene import Scene
from onnxviz.ui import settings as cfg
from onnxviz.ui.actions import SHORTCUTS_HELP, Actions
from onnxviz.ui.canvas.scene import GraphScene
from onnxviz.ui.canvas.view import GraphView
from onnxviz.ui.docks.outline import OutlineDock
from onnxviz.ui.docks.placeholders import RunDock
from onnxviz.ui.docks.properties import PropertiesDock
from onnxviz.ui.edit.controller import EditController
from onnxviz.ui.edit.diagnostics_dock import DiagnosticsDock
from onnxviz.ui.edit.menus import add_compare_actions
from onnxviz.ui.edit.window_edits import EditingMixin
from onnxviz.ui.find import FindDock
from onnxviz.ui.navigation import Crumb, NavigationMixin
from onnxviz.ui.run import install_run_panel
from onnxviz.ui.start_page import StartPage
from onnxviz.ui.theme import TextMetrics, dark_palette, resolve_theme
from onnxviz.ui.workers import Opened, Task, layout_job, open_model_job

# Re-layouts of scenes with more boxes than this run in a worker thread.
BACKGROUND_LAYOUT_ITEMS = 3000


class MainWindow(EditingMixin, NavigationMixin, QMainWindow):
    def __init__(self) -> None:
        super().__init__()
        self.setWindowTitle("onnxviz")
        self.resize(1280, 860)
        self.setAcceptDrops(True)
        self.doc: Document | None = None
        self.presenter: Presenter | None = None
        self.display: Scene | None = None
        self.task: Task | None = None
        self.crumbs: list[Crumb] = []
        self.is_example = False
        self.theme_mode = cfg.load_str("theme", "system")
        self.options = ViewOptions(
            show_shapes=cfg.load_bool("show_shapes", True),
            show_initializers=cfg.load_bool("show_initializers", True),
            show_names=cfg.load_bool("show_names", False),
            direction="LR" if cfg.load_str("direction", "TB") == "LR" else "TB",
        )
        self.graph_scene = GraphScene(resolve_theme(self.theme_mode), self)
        self.graph_scene.filled.connect(self._apply_badges)  # big scenes fill in slices
        self.view = GraphView(self.graph_scene)
        self._build_central()
        self.properties_dock = PropertiesDock(self)
        self.outline_dock = OutlineDock(self)
        self.find_dock = FindDock(self)
        self.diagnostics_dock = DiagnosticsDock(self)
        self.run_dock = RunDock(self)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.properties_dock)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.outline_dock)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.find_dock)
        self.tabifyDockWidget(self.outline_dock, self.find_dock)
        self.outline_dock.raise_()
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.diagnostics_dock)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.run_dock)
        self.diagnostics_dock.hide()
        self.run_dock.hide()
        self.edits = EditController(self)
        from onnxviz.ui.edit.wiring import WireDrag

        self.wire_drag = WireDrag(self)
        self.view.viewport().installEventFilter(self.wire_drag)
        self.badges: dict[str, list[str]] = {}
        self.properties_dock.editor_factory = self.make_row_editor
        self.properties_dock.row_menu = self.fill_row_menu
        self.actions_ = Actions(self)
        self.actions_.build_menus()
        # The open Compare window (kept alive here; a new compare replaces it).
        self.compare_window: QWidget | None = None
        self.compare_actions = add_compare_actions(self)  # File > Compare (issue #20)
        self._build_status()
        self._sync_actions()
        self._connect()
        self._refresh_recent()
        # Before restoring the saved layout, so the run panel's docks take part in it.
        self.run_panel = install_run_panel(self)
        self._restore_window()
        self.apply_theme()
        QTimer.singleShot(0, self.offer_recovery)

    # -- construction ------------------------------------------------------------------
    def docks(self) -> list[Any]:
        return [
            self.properties_dock,
            self.outline_dock,
            self.find_dock,
            self.diagnostics_dock,
            self.run_dock,
        ]

    def _build_central(self) -> None:
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        self.crumb_bar = QWidget()
        bar = QHBoxLayout(self.crumb_bar)
        bar.setContentsMargins(6, 2, 6, 2)
        self.back_button = QToolButton()
        self.back_button.setText("◀ Back")
        self.back_button.clicked.connect(self.back)
        self.crumb_label = QLabel()
        bar.addWidget(self.back_button)
        bar.addWidget(self.crumb_label, 1)
        self.crumb_bar.hide()
        layout.addWidget(self.crumb_bar)
        layout.addWidget(self.view, 1)
        self.setCentralWidget(central)
        self.start_page = StartPage(self.view)
        self.start_page.move(12, 12)
        self.start_page.hide()

    def _build_status(self) -> None:
        status = self.statusBar()
        self.summary_label = QLabel("")
        self.zoom_label = QLabel("")
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(140)
        self.progress_label = QLabel("")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_task)
        status.addWidget(self.summary_label, 1)
        status.addPermanentWidget(self.progress_label)
        status.addPermanentWidget(self.progress)
        status.addPermanentWidget(self.cancel_button)
        status.addPermanentWidget(self.zoom_label)
        self._set_busy(None)

    def _connect(self) -> None:
        gs = self.graph_scene
        gs.toggleRequested.connect(self.toggle)
        gs.rowClicked.connect(self._row_clicked)
        gs.jumpRequested.connect(self.select_item)
        gs.selectionChanged.connect(self._selection_changed)
        self.view.zoomChanged.connect(lambda z: self.zoom_label.setText(f"{z * 100:.0f}%"))
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._context_menu)
        self.find_dock.jump.connect(self.jump_to)
        self.outline_dock.activated.connect(self._outline_activated)
        self.properties_dock.navigate.connect(self._navigate)
        self.diagnostics_dock.locate.connect(self.locate_diagnostic)
        self.start_page.openRequested.connect(
            lambda p: self.open_path(p) if p else self.open_dialog()
        )
        hints = QApplication.styleHints()
        if hasattr(hints, "colorSchemeChanged"):
            hints.colorSchemeChanged.connect(lambda _s: self.apply_theme())

    def _sync_actions(self) -> None:
        a = self.actions_
        for action, value in (
            (a.shapes, self.options.show_shapes),
            (a.inits, self.options.show_initializers),
            (a.names, self.options.show_names),
        ):
            action.blockSignals(True)
            action.setChecked(value)
            action.blockSignals(False)
        (a.left_right if self.options.direction == "LR" else a.top_bottom).setChecked(True)
        {"light": a.theme_light, "dark": a.theme_dark}.get(
            self.theme_mode, a.theme_system
        ).setChecked(True)
        has_doc = self.doc is not None
        for action in (
            a.save,
            a.save_as,
            a.export,
            a.close,
            a.expand_all,
            a.expand_bodies,
            a.collapse_all,
        ):
            action.setEnabled(has_doc)
        a.undo.setEnabled(bool(self.doc and self.doc.can_undo))
        a.redo.setEnabled(bool(self.doc and self.doc.can_redo))
        self.sync_undo_labels()
        a.back.setEnabled(bool(self.crumbs))

    def _restore_window(self) -> None:
        geometry = cfg.load_bytes("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        state = cfg.load_bytes("window_state")
        if state is not None:
            self.restoreState(state)

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.maybe_save():
            event.ignore()
            return
        self.edits.closed_cleanly()
        inference = getattr(self, "inference_task", None)
        if inference is not None and not inference.done:
            inference.cancel()
            inference.wait(5000)
        if not getattr(self, "_closed", False):
            self._closed = True
            self.graph_scene.selectionChanged.disconnect(self._selection_changed)
        if self.task is not None:
            self.task.cancel()
            self.task.wait(5000)
        cfg.save_value("geometry", self.saveGeometry())
        cfg.save_value("window_state", self.saveState())
        super().closeEvent(event)

    # -- theme ---------------------------------------------------------------------------
    def set_theme_mode(self, mode: str) -> None:
        self.theme_mode = mode
        cfg.save_value("theme", mode)
        self.apply_theme()

    def apply_theme(self) -> None:
        theme = resolve_theme(self.theme_mode)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            if theme.name == "dark":
                app.setPalette(dark_palette())
            else:
                app.setPalette(app.style().standardPalette())
        self.graph_scene.set_theme(theme)

    # -- background work ------------------------------------------------------------------
    def _set_busy(self, message: str | None) -> None:
        busy = message is not None
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.progress_label.setText(message or "")
        self.progress_label.setVisible(busy)

    def cancel_task(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def _run(
        self,
        fn: Callable[[threading.Event, Callable[[str], None]], Any],
        on_done: Callable[[Any], None],
        background: bool,
        label: str,
    ) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None
        if not background:
            try:
                result = fn(threading.Event(), lambda _m: None)
            except OnnxvizError as exc:
                self._failed(str(exc))
                return
            on_done(result)
            self.graph_scene.finish_filling()  # done when this returns, canvas included
            return
        task = Task(fn, self)
        self.task = task
        self._set_busy(label)

        def done(result: Any) -> None:
            if self.task is task:
                self.task = None
                self._set_busy(None)
                on_done(result)

        def failed(message: str) -> None:
            if self.task is task:
                self.task = None
                self._set_busy(None)
                if message:
                    self._failed(message)
                else:
                    self.statusBar().showMessage("cancelled", 4000)

        task.finished.connect(done)
        task.failed.connect(failed)
        task.progress.connect(
            lambda m: self.progress_label.setText(m) if self.task is task else None
        )
        task.start()

    def _failed(self, message: str) -> None:
        self.statusBar().showMessage(message, 10000)
        self.last_error = message
        if os.environ.get("QT_QPA_PLATFORM") != "offscreen":
            box = QMessageBox(
                QMessageBox.Icon.Warning, "onnxviz", message, QMessageBox.StandardButton.Ok, self
            )
            box.open()

    def wait_idle(self, ms: int = 60_000) -> None:
        """Process events until no background task runs (tests and --screenshot)."""
        import time

        end = time.monotonic() + ms / 1000
        while (self.task is not None or self.graph_scene.filling) and time.monotonic() < end:
            QApplication.processEvents()
            time.sleep(0.005)
        QApplication.processEvents()

    # -- opening --------------------------------------------------------------------------
    def open_dialog(self) -> None:
        start = os.path.dirname(cfg.recent_files()[0]) if cfg.recent_files() else ""
        path, _ = QFileDialog.getOpenFileName(
            self, "Open model", start, "ONNX models (*.onnx *.onnxtxt *.txt);;All files (*)"
        )
        if path:
            self.open_path(path)

    def open_path(self, path: str, *, background: bool = True, example: bool = False) -> None:
        if not self.maybe_save():
            return
        self.last_error = ""
        job = open_model_job(path, self.options, TextMetrics)
        self._run(
            job,
            lambda opened: self._adopt(opened, path, example),
            background,
            f"opening {os.path.basename(path)}",
        )

    def _adopt(self, opened: Opened, path: str, example: bool) -> None:
        previous = getattr(self, "inference_task", None)
        if previous is not None and not previous.done:
            previous.cancel()  # shapes of the model being replaced are not needed
        self.doc = opened.doc
        self.presenter = opened.presenter
        self.crumbs = []
        self.is_example = example
        self._show(opened.scene)
        self.view.fit_width_top()
        if not example:
            cfg.add_recent(path)
            self._refresh_recent()
        self.start_page.set_recent(cfg.recent_files())
        self.start_page.setVisible(example)
        self.setWindowTitle(f"{self.doc.display_name} — onnxviz")
        self._update_summary()
        self.outline_dock.show_document(self.doc)
        self.find_dock.set_document(self.doc)
        self.edits.attach(self.doc)
        if any(d.severity.value == "error" for d in self.edits.diagnostics):
            self.diagnostics_dock.show()
        self.run_dock.attach(self.doc)
        self.show_model_properties()
        self._sync_actions()
        if self.presenter.types is not None and not self.presenter.types.complete:
            self._start_inference()

    def _start_inference(self) -> None:
        """Big models: shapes are inferred after the first paint, in another process."""
        from onnxviz.present.typeinfo import add_inferred_texts
        from onnxviz.ui.workers import inference_job

        assert self.doc is not None and self.presenter is not None
        presenter = self.presenter
        task = Task(inference_job(self.doc.model), self)
        self.inference_task = task
        self.statusBar().showMessage("inferring shapes in the background…")

        def done(texts: dict[str, dict[str, str]]) -> None:
            if self.presenter is presenter and presenter.types is not None:
                add_inferred_texts(presenter.types, texts)
                self.statusBar().showMessage("inferred shapes added", 3000)
                self.relayout()

        task.finished.connect(done)
        task.start()

    def close_model(self) -> None:
        if not self.maybe_save():
            return
        self.edits.closed_cleanly()
        self.edits.attach(None)
        self.diagnostics_dock.show_diagnostics([])
        self.doc = None
        self.presenter = None
        self.display = None
        self.crumbs = []
        self.graph_scene.clear()
        self.graph_scene.nodes = {}
        self.outline_dock.show_document(None)
        self.find_dock.set_document(None)
        self.properties_dock.show_sections([])
        self.setWindowTitle("onnxviz")
        self.summary_label.setText("")
        self.crumb_bar.hide()
        self._sync_actions()

    def _update_summary(self) -> None:
        if self.doc is None:
            return
        m = self.doc.model
        opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in m.opset_import)
        total = sum(len(s.nodes) for s in self.doc.scopes())
        shown = len(self.display.items) if self.display else 0
        self.summary_label.setText(
            f"{self.doc.display_name} · IR {m.ir_version} · {opsets} · {len(m.graph.node)} nodes"
            f" ({total} in all graphs) · {shown} boxes shown"
        )

    def _refresh_recent(self) -> None:
        menu = self.actions_.recent_menu
        menu.clear()
        files = cfg.recent_files()
        for path in files:
            action = menu.addAction(os.path.basename(path))
            action.setToolTip(path)
            action.triggered.connect(lambda _c=False, p=path: self.open_path(p))
        if files:
            menu.addSeparator()
            menu.addAction("Clear", lambda: (cfg.clear_recent(), self._refresh_recent()))
        menu.setEnabled(bool(files))

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        urls = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if urls:
            self.open_path(urls[0])
            event.acceptProposedAction()

    # -- saving ---------------------------------------------------------------------------
    def save(self) -> None:
        if self.doc is None:
            return
        if self.doc.path is None or self.is_example:
            self.save_as()
            return
        self._save_to(self.doc.path)

    def ask_overwrite_changed(self, path: str) -> bool:
        """Another program rewrote the file since it was opened: overwrite it?"""
        answer = QMessageBox.question(
            self,
            "File changed on disk",
            f"{os.path.basename(path)} was changed by another program since it was opened.\n"
            "Save over it and lose those changes?",
            QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        return answer == QMessageBox.StandardButton.Save

    def save_as(self) -> None:
        if self.doc is None:
            return
        path, _ = QFileDialog.getSaveFileName(
            self, "Save model as", self.doc.path or "", "ONNX models (*.onnx)"
        )
        if not path:
            return
        mode = self.ask_external_mode()
        if mode is not None:
            self._save_to(path, mode)

    def _save_to(self, path: str, external_data: str = "keep") -> bool:
        assert self.doc is not None
        try:
            try:
                self.doc.save(path, external_data=external_data)  # type: ignore[arg-type]
            except FileChangedError:
                if not self.ask_overwrite_changed(path):
                    self.statusBar().showMessage("not saved: the file changed on disk", 8000)
                    return False
                self.doc.save(path, external_data=external_data, overwrite_changed=True)  # type: ignore[arg-type]
        except OnnxvizError as exc:
            self._failed(str(exc))
            return False
        self.edits.saved()
        self.update_title()
        self.is_example = False
        cfg.add_recent(path)
        self._refresh_recent()
        self.statusBar().showMessage(f"saved {path}", 5000)
        return True

    def undo(self) -> None:
        self.edits.undo()
        self._sync_actions()

    def redo(self) -> None:
        self.edits.redo()
        self._sync_actions()

    # -- export ---------------------------------------------------------------------------
    def export_dialog(self) -> None:
        from onnxviz.ui.export import export_any

        if self.doc is None:
            return
        base = os.path.splitext(self.doc.path or "graph")[0]
        path, chosen = QFileDialog.getSaveFileName(
            self,
            "Export image",
            base + ".svg",
            "SVG, whole graph (*.svg);;PNG, whole graph (*.png);;PDF (*.pdf);;PNG, current view (*.png)",
        )
        if not path:
            return
        rect = self.visible_rect() if "current view" in chosen else None
        scale = 2.0
        if path.lower().endswith(".png"):
            from PySide6.QtWidgets import QInputDialog

            scale, ok = QInputDialog.getDouble(
                self, "PNG scale", "Pixels per scene unit (sharpness):", 2.0, 0.1, 16.0, 1
            )
            if not ok:
                return
        try:
            export_any(self.graph_scene, path, rect, scale=scale, title=self.doc.display_name)
        except OnnxvizError as exc:
            self._failed(str(exc))
            return
        self.statusBar().showMessage(f"exported {path}", 5000)

    def visible_rect(self) -> QRectF:
        return self.view.mapToScene(self.view.viewport().rect()).boundingRect()

    # -- scene ------------------------------------------------------------------------------
    def _show(self, scene: Scene) -> None:
        self.display = scene
        self.graph_scene.show_scene(scene, self.options.show_shapes)
        self.view.refresh_detail()
        self._update_crumbs()
        self._update_summary()

    def _apply_badges(self) -> None:
        for item_id, problems in self.badges.items():
            node = self.graph_scene.nodes.get(item_id)
            if node is not None:
                node.set_problems(problems)

    def relayout(
        self,
        anchor: str | None = None,
        after: Callable[[], None] | None = None,
        background: bool | None = None,
    ) -> None:
        """Rebuild and re-place the scene, keeping ``anchor`` (an item id) where it is
        (``background`` None: in a worker thread when the scene is big)."""
        if self.presenter is None:
            return
        before = None
        if anchor and (pos := self.graph_scene.item_pos(anchor)) is not None:
            before = self.view.mapFromScene(pos)
        center = self.view.mapToScene(self.view.viewport().rect().center())
        if background is None:
            background = bool(self.display and len(self.display.items) > BACKGROUND_LAYOUT_ITEMS)

        def done(scene: Scene) -> None:
            self._show(scene)
            pos = self.graph_scene.item_pos(anchor) if anchor else None
            if before is not None and pos is not None:
                now = self.view.mapFromScene(pos)
                delta = now - before
                self.view.horizontalScrollBar().setValue(
                    self.view.horizontalScrollBar().value() + delta.x()
                )
                self.view.verticalScrollBar().setValue(
                    self.view.verticalScrollBar().value() + delta.y()
                )
            else:
                self.view.centerOn(center)
            if after is not None:
                after()

        self._run(layout_job(self.presenter, TextMetrics), done, background, "laying out")

    def toggle(self, item_id: str) -> None:
        if self.presenter is None:
            return
        self.presenter.toggle(item_id)
        self.relayout(anchor=item_id, after=lambda: self.select_item(item_id, center=False))

    def expand_all(self) -> None:
        if self.presenter is not None:
            self.presenter.expanded |= self.presenter.all_group_ids()
            self.relayout()

    def collapse_all(self) -> None:
        if self.presenter is not None:
            groups = self.presenter.all_group_ids()
            self.presenter.expanded -= groups
            self.relayout(after=self.view.fit)

    def _set_options(self, **changes: Any) -> None:
        from dataclasses import replace

        self.options = replace(self.options, **changes)
        for key, value in changes.items():
            cfg.save_value(key, value)
        if self.presenter is not None:
            self.presenter.options = self.options
            self.relayout()

    def toggle_shapes(self) -> None:
        self._set_options(show_shapes=self.actions_.shapes.isChecked())

    def toggle_initializers(self) -> None:
        self._set_options(show_initializers=self.actions_.inits.isChecked())

    def toggle_names(self) -> None:
        self._set_options(show_names=self.actions_.names.isChecked())

    def set_direction(self, direction: str) -> None:
        if direction != self.options.direction:
            self._set_options(direction=direction)
            self.view.fit()

    # -- help -----------------------------------------------------------------------------------
    def about(self) -> None:
        from onnxviz import __version__

        QMessageBox.about(
            self,
            "About onnxviz",
            f"onnxviz {__version__}\nExplore, edit, validate and debug ONNX models.",
        )

    def shortcuts_help(self) -> None:
        box = QMessageBox(
            QMessageBox.Icon.Information,
            "Keyboard shortcuts",
            SHORTCUTS_HELP,
            QMessageBox.StandardButton.Ok,
            self,
        )
        box.setStyleSheet("QLabel { font-family: monospace; }")
        box.open()

    def showEvent(self, event: Any) -> None:
        super().showEvent(event)
        QTimer.singleShot(0, lambda: None)
