"""The main window: assembly only.  It builds the canvas with its breadcrumb, the
docks, menus, toolbars and status bar, one `DocumentSession`, and the controllers that
follow it (files, navigation, properties, outline, find, diagnostics, surgery, run,
inspector).  The window's own code keeps title, actions and status bar in step with
the session; its public commands are its controllers' (menus, actions, tests)."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QDockWidget, QMainWindow, QVBoxLayout, QWidget

from onnxviz.check.worker import run_workers_below
from onnxviz.model.document import Document
from onnxviz.ui import settings
from onnxviz.ui.actions import Actions
from onnxviz.ui.canvas.scene import GraphScene
from onnxviz.ui.canvas.view import GraphView
from onnxviz.ui.controllers import (
    BackgroundWork,
    DiagnosticsController,
    FileController,
    FindController,
    InspectorController,
    NavigationController,
    OutlineController,
    PropertiesController,
    SurgeryController,
)
from onnxviz.ui.crumb_bar import CrumbBar
from onnxviz.ui.doc_session import DocumentSession
from onnxviz.ui.docks.bottom_share import keep_bottom_share
from onnxviz.ui.docks.find_dock import FindDock
from onnxviz.ui.docks.outline_dock import OutlineDock
from onnxviz.ui.docks.properties_dock import PropertiesDock
from onnxviz.ui.docks.run_dock import RunDock
from onnxviz.ui.edit.controller import EditController
from onnxviz.ui.edit.diagnostics_dock import DiagnosticsDock
from onnxviz.ui.edit.editors import row_editor_factory
from onnxviz.ui.edit.menus import add_compare_actions, canvas_context_menu, properties_menu
from onnxviz.ui.help_commands import HelpCommands
from onnxviz.ui.inspector import InspectorDock
from onnxviz.ui.prompter import Prompter
from onnxviz.ui.run import RunPanel
from onnxviz.ui.start_page import StartPage
from onnxviz.ui.status_line import StatusLine
from onnxviz.ui.theme_switch import ThemeSwitch

RIGHT = Qt.DockWidgetArea.RightDockWidgetArea
LEFT = Qt.DockWidgetArea.LeftDockWidgetArea
BOTTOM = Qt.DockWidgetArea.BottomDockWidgetArea
WORKER_NICE = 10  # the window's worker processes run below it (`check.worker`)


class MainWindow(QMainWindow):
    def __init__(self, prompter: Prompter | None = None) -> None:
        super().__init__()
        self.setWindowTitle("onnxviz")
        self.resize(1280, 860)
        self.setAcceptDrops(True)
        self.prompter = prompter or Prompter(self)
        self.last_error = ""  # the last failure, for --screenshot's message
        run_workers_below(WORKER_NICE)  # their seconds must not take the UI thread's core
        self.theme = ThemeSwitch(self)
        self.session = session = DocumentSession(settings.view_options(), self)
        self.graph_scene = GraphScene(self.theme.theme(), self)
        self.theme.scene = self.graph_scene
        self.view = GraphView(self.graph_scene)
        self._build_central()
        self._build_docks()
        self.work = BackgroundWork(self)
        self.edits = EditController(session)  # first: the editors of every pane need it
        self.navigation = NavigationController(
            session, self.graph_scene, self.view, self.work, self.crumb_bar, self.crumb_bar.label
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
        self.properties_dock.editor_factory = row_editor_factory(
            self.edits, session, self.navigation.open_graph, self.prompter
        )
        self.properties_dock.row_menu = lambda row, menu: properties_menu(
            self, row, self.properties_dock.subject, menu
        )
        self.help = HelpCommands(self.prompter, self.statusBar())
        self.actions_ = Actions(self)
        self.actions_.build_menus()
        self._build_run_menu()
        # The open Compare window (kept alive here; a new compare replaces it).
        self.compare_window: QWidget | None = None
        self.compare_actions = add_compare_actions(self)  # File > Compare (issue #20)
        self.status_line = StatusLine(self.statusBar())
        self._connect()
        self.sync_actions()
        self.refresh_recent()
        settings.restore_window(self)
        self.theme.apply()
        QTimer.singleShot(0, self.files.offer_recovery)

    # -- construction ------------------------------------------------------------------
    def _build_central(self) -> None:
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        self.crumb_bar = CrumbBar()
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
        keep_bottom_share(self, self.diagnostics_dock, self.run_dock)

    def docks(self) -> list[QDockWidget]:
        """The docks View > Panels lists."""
        docks = (self.properties_dock, self.outline_dock, self.find_dock, self.diagnostics_dock)
        return [*docks, self.run_dock]

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
        self.crumb_bar.back_button.clicked.connect(self.navigation.back)
        self.view.zoomChanged.connect(self.status_line.set_zoom)
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.customContextMenuRequested.connect(lambda pos: canvas_context_menu(self, pos))
        self.start_page.openRequested.connect(
            lambda p: self.files.open_path(p) if p else self.files.open_dialog()
        )

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
            self.session.doc, self.session.options, self.theme.mode, bool(self.navigation.crumbs)
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

    # -- commands ---------------------------------------------------------------------------
    def show_run_dock(self) -> None:
        self.run_dock.show()
        self.run_dock.raise_()

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
        settings.save_window(self)
        super().closeEvent(event)


__all__ = ["MainWindow"]
