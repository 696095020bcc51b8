"""The main window: assembly only.  It builds the canvas with its breadcrumb, the
docks, menus, toolbars and status bar, one `DocumentSession`, and the controllers that
follow it (files, navigation, properties, outline, find, diagnostics, surgery, run,
inspector).  The window's own code keeps title, actions and status bar in step with
the session; its public commands are its controllers' (menus, actions, tests)."""

from __future__ import annotations

import os
import time
from typing import Any

from PySide6.QtCore import Qt, QTimer, QUrl
from PySide6.QtGui import QCloseEvent, QDesktopServices, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMenu,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from onnxviz.model.document import Document
from onnxviz.present.options import ViewOptions
from onnxviz.ui import settings
from onnxviz.ui.actions import SHORTCUTS_HELP, Actions
from onnxviz.ui.canvas.scene import GraphScene
from onnxviz.ui.canvas.view import GraphView
from onnxviz.ui.controllers import (
    BackgroundWork,
    Crumb,
    DiagnosticsController,
    FileController,
    FindController,
    InspectorController,
    NavigationController,
    OutlineController,
    PropertiesController,
    SurgeryController,
)
from onnxviz.ui.doc_session import DocumentSession
from onnxviz.ui.docks.outline import OutlineDock
from onnxviz.ui.docks.properties import PropertiesDock
from onnxviz.ui.docks.run_dock import RunDock
from onnxviz.ui.edit.controller import EditController
from onnxviz.ui.edit.diagnostics_dock import DiagnosticsDock
from onnxviz.ui.edit.menus import add_compare_actions, canvas_menu, properties_menu
from onnxviz.ui.find import FindDock
from onnxviz.ui.inspector import InspectorDock
from onnxviz.ui.log_file import log_dir
from onnxviz.ui.prompter import Prompter
from onnxviz.ui.run import RunPanel
from onnxviz.ui.start_page import StartPage
from onnxviz.ui.status_line import StatusLine
from onnxviz.ui.theme import dark_palette, resolve_theme

RIGHT = Qt.DockWidgetArea.RightDockWidgetArea
LEFT = Qt.DockWidgetArea.LeftDockWidgetArea
BOTTOM = Qt.DockWidgetArea.BottomDockWidgetArea
# Diagnostics' part of the bottom area next to the Run dock (below the least, it gets
# the share): its messages need the width more than the run panel, whose buttons wrap.
BOTTOM_SHARE_MIN = 0.4
BOTTOM_SHARE = 0.45


class MainWindow(QMainWindow):
    def __init__(self, prompter: Prompter | None = None) -> None:
        super().__init__()
        self.setWindowTitle("onnxviz")
        self.resize(1280, 860)
        self.setAcceptDrops(True)
        self.prompter = prompter or Prompter(self)
        self.last_error = ""
        self.theme_mode = settings.load_str("theme", "system")
        options = ViewOptions(
            show_shapes=settings.load_bool("show_shapes", True),
            show_initializers=settings.load_bool("show_initializers", True),
            show_names=settings.load_bool("show_names", False),
            direction="LR" if settings.load_str("direction", "TB") == "LR" else "TB",
        )
        self.session = session = DocumentSession(options, self)
        self.graph_scene = GraphScene(resolve_theme(self.theme_mode), self)
        self.view = GraphView(self.graph_scene)
        self._build_central()
        self._build_docks()
        self.work = BackgroundWork(self)
        self.edits = EditController(session)  # first: the editors of every pane need it
        self.navigation = NavigationController(
            session, self.graph_scene, self.view, self.work, self.crumb_bar, self.crumb_label
        )
        self.properties = PropertiesController(
            session, self.properties_dock, self.graph_scene, self.view, self.navigation
        )
        self.outline = OutlineController(
            session, self.outline_dock, self.navigation, self.properties
        )
        self.finder = FindController(session, self.find_dock, self.navigation)
        self.diagnostics = DiagnosticsController(
            session, self.diagnostics_dock, self.navigation, self.properties
        )
        self.surgery = SurgeryController(session, self.edits, self.view, self.prompter, self)
        self.files = FileController(
            session, self.edits, self.navigation, self.work, self.graph_scene, self.prompter
        )
        self.inspector = InspectorController(session, self.inspector_dock)
        self.run_panel = RunPanel(
            session,
            self.navigation,
            self.graph_scene,
            self.view,
            self.inspector_dock,
            self.prompter,
            self,
        )
        from onnxviz.ui.edit.wiring import WireDrag

        self.wire_drag = WireDrag(self)
        self.view.viewport().installEventFilter(self.wire_drag)
        self.properties_dock.editor_factory = self.make_row_editor
        self.properties_dock.row_menu = lambda row, menu: properties_menu(
            self, row, self.properties_dock.subject, menu
        )
        self.actions_ = Actions(self)
        self.actions_.build_menus()
        self._build_run_menu()
        # The open Compare window (kept alive here; a new compare replaces it).
        self.compare_window: QWidget | None = None
        self.compare_actions = add_compare_actions(self)  # File > Compare (issue #20)
        self.status_line = StatusLine(self.statusBar())
        self.summary_label = self.status_line.summary_label
        self.progress = self.status_line.progress
        self._connect()
        self.sync_actions()
        self.refresh_recent()
        self._restore_window()
        self.apply_theme()
        QTimer.singleShot(0, self.files.offer_recovery)

    # -- construction ------------------------------------------------------------------
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

    def _build_docks(self) -> None:
        self.properties_dock = PropertiesDock(self)
        self.outline_dock = OutlineDock(self)
        self.find_dock = FindDock(self)
        self.diagnostics_dock = DiagnosticsDock(self)
        self.run_dock = RunDock(self)
        self.inspector_dock = InspectorDock(self, self.prompter)
        self.addDockWidget(RIGHT, self.properties_dock)
        self.addDockWidget(LEFT, self.outline_dock)
        self.addDockWidget(LEFT, self.find_dock)
        self.tabifyDockWidget(self.outline_dock, self.find_dock)
        self.outline_dock.raise_()
        self.addDockWidget(BOTTOM, self.diagnostics_dock)
        self.addDockWidget(BOTTOM, self.run_dock)
        self.diagnostics_dock.hide()
        self.run_dock.hide()
        # Added hidden and tabbed with Properties only when first shown: tabifying a dock
        # that is then hidden before the window is laid out leaves a stray tab bar.
        self.addDockWidget(RIGHT, self.inspector_dock)
        self.inspector_dock.hide()
        self.inspector_dock.before_first_show = lambda: self.tabifyDockWidget(
            self.properties_dock, self.inspector_dock
        )
        for dock in (self.diagnostics_dock, self.run_dock):
            # after the dock layout has placed the newly shown dock
            dock.visibilityChanged.connect(
                lambda shown: shown and QTimer.singleShot(0, self._share_bottom)
            )

    def _share_bottom(self) -> None:
        """Diagnostics and Run side by side: the Run dock's size hint would take nearly
        all the width (Diagnostics then shows "Valu..."); give Diagnostics its share."""
        diagnostics, run = self.diagnostics_dock, self.run_dock
        side_by_side = all(
            d.isVisible() and not d.isFloating() and self.dockWidgetArea(d) == BOTTOM
            for d in (diagnostics, run)
        ) and not self.tabifiedDockWidgets(run)
        if not side_by_side:
            return
        total = diagnostics.width() + run.width()
        if diagnostics.width() < BOTTOM_SHARE_MIN * total:
            share = int(total * BOTTOM_SHARE)
            self.resizeDocks([diagnostics, run], [share, total - share], Qt.Orientation.Horizontal)

    def docks(self) -> list[Any]:
        return [
            self.properties_dock,
            self.outline_dock,
            self.find_dock,
            self.diagnostics_dock,
            self.run_dock,
        ]

    def _build_run_menu(self) -> None:
        panel = self.run_panel
        self.run_dock.setWidget(panel.widget)
        panel.fill_menu(self.actions_.run_menu)
        self.actions_.run_menu.addAction(self.inspector_dock.toggleViewAction())
        bar = self.addToolBar("Run")
        bar.setObjectName("toolbar.run")
        panel.fill_toolbar(bar)
        panel.toolbar = bar

    def _connect(self) -> None:
        session = self.session
        session.document_replaced.connect(self._document_replaced)
        session.edited.connect(self.sync_actions)
        session.scene_ready.connect(
            lambda scene: self.status_line.show_summary(self.session.doc, scene)
        )
        self.status_line.cancel_button.clicked.connect(self.work.cancel)
        session.message.connect(self.statusBar().showMessage)
        self.navigation.crumbs_changed.connect(self.sync_actions)
        self.run_panel.show_requested.connect(self.run_dock.show)
        self.files.recent_changed.connect(self.refresh_recent)
        self.files.failed.connect(self.report_failure)
        self.work.failed.connect(self.report_failure)
        self.work.busy.connect(self.status_line.set_busy)
        self.work.progress.connect(self.status_line.progress_label.setText)
        self.work.cancelled.connect(lambda: self.statusBar().showMessage("cancelled", 4000))
        self.work.ran_inline.connect(self.graph_scene.finish_filling)  # canvas included
        self.back_button.clicked.connect(self.navigation.back)
        self.view.zoomChanged.connect(self.status_line.set_zoom)
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._context_menu)
        self.start_page.openRequested.connect(
            lambda p: self.files.open_path(p) if p else self.files.open_dialog()
        )
        hints = QApplication.styleHints()
        if hasattr(hints, "colorSchemeChanged"):
            hints.colorSchemeChanged.connect(lambda _s: self.apply_theme())

    def _restore_window(self) -> None:
        geometry = settings.load_bytes("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        state = settings.load_bytes("window_state")
        if state is not None:
            self.restoreState(state)

    # -- following the session -------------------------------------------------------------
    def _document_replaced(self, doc: Document | None) -> None:
        self.statusBar().clearMessage()  # refusals and messages about the old model
        if doc is not None:
            self.last_error = ""  # the failure of an earlier open is over
        self.status_line.show_summary(None, None)
        self.start_page.set_recent(settings.recent_files())
        self.start_page.setVisible(doc is not None and self.session.is_example)
        self.sync_actions()

    def sync_actions(self) -> None:
        """Title, undo labels and enabled actions follow the document and the view."""
        self.actions_.sync(
            self.session.doc, self.session.options, self.theme_mode, bool(self.navigation.crumbs)
        )
        self.update_title()

    def update_title(self) -> None:
        doc = self.session.doc
        dirty = " *" if doc is not None and doc.is_modified else ""
        self.setWindowTitle(f"{doc.display_name}{dirty} — onnxviz" if doc else "onnxviz")

    def report_failure(self, message: str) -> None:
        self.statusBar().showMessage(message, 10000)
        self.last_error = message
        self.prompter.warn(message)

    def refresh_recent(self) -> None:
        self.actions_.fill_recent(settings.recent_files(), self.files.open_path, self._clear_recent)

    def _clear_recent(self) -> None:
        settings.clear_recent()
        self.refresh_recent()

    def _context_menu(self, pos: Any) -> None:
        if self.session.doc is None:
            return
        item = self.view.itemAt(pos)
        menu = QMenu(self)
        self.navigation.fill_context_menu(item, menu)
        canvas_menu(self, item, menu)
        menu.addSeparator()
        menu.addAction(self.actions_.fit)
        if self.navigation.crumbs:
            menu.addAction(self.actions_.back)
        menu.popup(self.view.viewport().mapToGlobal(pos))

    def make_row_editor(self, row: Any) -> Any:
        from onnxviz.ui.edit.editors import make_editor

        presenter = self.session.presenter
        types = presenter.types if presenter else None
        return make_editor(self.edits, row, types, self.navigation.open_graph, self.prompter)

    # -- commands ---------------------------------------------------------------------------
    def set_theme_mode(self, mode: str) -> None:
        self.theme_mode = mode
        settings.save_value("theme", mode)
        self.apply_theme()

    def apply_theme(self) -> None:
        theme = resolve_theme(self.theme_mode)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.setPalette(
                dark_palette() if theme.name == "dark" else app.style().standardPalette()
            )
        self.graph_scene.set_theme(theme)

    def about(self) -> None:
        from onnxviz import __version__

        self.prompter.inform(
            "About onnxviz",
            f"onnxviz {__version__}\nExplore, edit, validate and debug ONNX models.",
        )

    def shortcuts_help(self) -> None:
        self.prompter.inform("Keyboard shortcuts", SHORTCUTS_HELP, monospace=True)

    def show_run_dock(self) -> None:
        self.run_dock.show()
        self.run_dock.raise_()

    def open_log_folder(self) -> None:
        """Help > Open Log Folder: the folder of the log file, and its path in the status bar."""
        folder = log_dir()
        os.makedirs(folder, exist_ok=True)
        self.statusBar().showMessage(f"log folder: {folder}", 15000)
        QDesktopServices.openUrl(QUrl.fromLocalFile(folder))

    # -- window events ------------------------------------------------------------------------
    def wait_idle(self, ms: int = 60_000) -> None:
        """Process events until no background task runs (tests and --screenshot)."""
        end = time.monotonic() + ms / 1000
        while (self.work.task is not None or self.graph_scene.filling) and time.monotonic() < end:
            QApplication.processEvents()
            time.sleep(0.005)
        QApplication.processEvents()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        urls = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if urls:
            self.files.open_path(urls[0])
            event.acceptProposedAction()

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.files.maybe_save():
            event.ignore()
            return
        self.edits.closed_cleanly()
        self.run_panel.stop()  # the run's worker must not outlive its window
        self.navigation.stop()
        if not getattr(self, "closed", False):
            self.closed = True
            self.properties.disconnect_scene()
        self.work.stop()
        settings.save_value("geometry", self.saveGeometry())
        settings.save_value("window_state", self.saveState())
        super().closeEvent(event)


__all__ = ["Crumb", "MainWindow"]
