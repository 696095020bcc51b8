"""Menus, toolbar and shortcuts of the main window (one place to read them all)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QMenu

from onnxviz.present.recent import recent_labels

if TYPE_CHECKING:
    from onnxviz.ui.main_window import MainWindow

SHORTCUTS_HELP = """\
Ctrl+O  open            Ctrl+S  save          Ctrl+Shift+S  save as
Ctrl+E  export image    Ctrl+W  close         Ctrl+Q  quit
Ctrl+Z  undo            Ctrl+Shift+Z  redo    Ctrl+F  find
Ctrl++  zoom in         Ctrl+-  zoom out      Ctrl+0  fit       Ctrl+1  actual size
wheel / pinch  zoom around the pointer        drag background or hold Space  pan
arrow keys  next node in that direction       Enter / double-click  expand or collapse
Alt+Left  back (from a subgraph view)
Alt+drag from a node to another  wire one of its inputs      Del  delete node (bypass)
Ctrl+Shift+A  add a node from the operator palette           right-click  edit menu
"""


class Actions:
    def __init__(self, window: MainWindow) -> None:
        self.window = window
        mk = self._make
        self.open = mk("&Open…", window.files.open_dialog, QKeySequence.StandardKey.Open)
        self.save = mk("&Save", window.files.save, QKeySequence.StandardKey.Save)
        self.save_as = mk("Save &As…", window.files.save_as, QKeySequence.StandardKey.SaveAs)
        self.export = mk("&Export Image…", window.files.export_dialog, "Ctrl+E")
        self.close = mk("&Close", window.files.close_model, QKeySequence.StandardKey.Close)
        self.quit = mk("&Quit", window.close, QKeySequence.StandardKey.Quit)
        self.undo = mk("&Undo", window.edits.undo, QKeySequence.StandardKey.Undo)
        self.redo = mk("&Redo", window.edits.redo, QKeySequence.StandardKey.Redo)
        self.find = mk("&Find…", window.find_dock.focus_query, QKeySequence.StandardKey.Find)
        self.zoom_in = mk("Zoom &In", window.view.zoom_in, QKeySequence.StandardKey.ZoomIn)
        self.zoom_out = mk("Zoom &Out", window.view.zoom_out, QKeySequence.StandardKey.ZoomOut)
        self.fit = mk("&Fit to Window", window.view.fit, "Ctrl+0")
        self.actual = mk("&Actual Size", window.view.actual_size, "Ctrl+1")
        options = window.navigation.set_options
        # the View > Show toggles change the presenter's options (and relayout)
        self.shapes: QAction
        self.inits: QAction
        self.names: QAction
        self.shapes = mk(
            "Show &Shapes on Edges",
            lambda: options(show_shapes=self.shapes.isChecked()),
            checkable=True,
        )
        self.inits = mk(
            "Show &Initializers",
            lambda: options(show_initializers=self.inits.isChecked()),
            checkable=True,
        )
        self.names = mk(
            "Show Node &Names", lambda: options(show_names=self.names.isChecked()), checkable=True
        )
        self.expand_all = mk("E&xpand All Groups", window.navigation.expand_all)
        self.expand_bodies = mk(
            "Expand All &Bodies", window.navigation.expand_all_bodies, "Ctrl+Shift+B"
        )
        self.collapse_all = mk("&Collapse All Groups", window.navigation.collapse_all)
        self.back = mk("&Back", window.navigation.back, "Alt+Left")
        self.direction = QActionGroup(window)
        self.top_bottom = mk(
            "&Top to Bottom", lambda: window.navigation.set_direction("TB"), checkable=True
        )
        self.left_right = mk(
            "&Left to Right", lambda: window.navigation.set_direction("LR"), checkable=True
        )
        for a in (self.top_bottom, self.left_right):
            self.direction.addAction(a)
        self.theme = QActionGroup(window)
        self.theme_system = mk(
            "Follow &System", lambda: window.theme.set_mode("system"), checkable=True
        )
        self.theme_light = mk("&Light", lambda: window.theme.set_mode("light"), checkable=True)
        self.theme_dark = mk("&Dark", lambda: window.theme.set_mode("dark"), checkable=True)
        for a in (self.theme_system, self.theme_light, self.theme_dark):
            self.theme.addAction(a)
        self.run_panel = mk("Show &Run Panel", window.show_run_dock)
        self.about = mk("&About onnxviz", window.help.about)
        self.keys = mk("&Keyboard Shortcuts", window.help.shortcuts, "F1")
        self.log_folder = mk("Open &Log Folder", window.help.open_log_folder)
        self.recent_menu = QMenu("Open &Recent", window)

    def _make(self, text, slot, shortcut=None, checkable: bool = False) -> QAction:  # type: ignore[no-untyped-def]
        action = QAction(text, self.window)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.setCheckable(checkable)
        if checkable:
            action.toggled.connect(lambda _checked: slot())
        else:
            action.triggered.connect(lambda _checked=False: slot())
        return action

    def build_menus(self) -> None:
        window = self.window
        bar = window.menuBar()
        file = bar.addMenu("&File")
        file.addAction(self.open)
        file.addMenu(self.recent_menu)
        file.addSeparator()
        for a in (self.save, self.save_as, self.export):
            file.addAction(a)
        file.addSeparator()
        file.addAction(self.close)
        file.addAction(self.quit)
        edit = bar.addMenu("&Edit")
        for a in (self.undo, self.redo):
            edit.addAction(a)
        edit.addSeparator()
        edit.addAction(self.find)
        from onnxviz.ui.edit.menus import build_edit_actions

        self.edit_menu = edit
        self.edit_actions = build_edit_actions(window, edit)
        view = bar.addMenu("&View")
        for a in (self.zoom_in, self.zoom_out, self.fit, self.actual):
            view.addAction(a)
        view.addSeparator()
        for a in (self.shapes, self.inits, self.names):
            view.addAction(a)
        view.addSeparator()
        view.addAction(self.top_bottom)
        view.addAction(self.left_right)
        view.addSeparator()
        view.addAction(self.expand_all)
        view.addAction(self.expand_bodies)
        view.addAction(self.collapse_all)
        view.addAction(self.back)
        view.addSeparator()
        theme = view.addMenu("T&heme")
        for a in (self.theme_system, self.theme_light, self.theme_dark):
            theme.addAction(a)
        docks = view.addMenu("&Panels")
        for dock in window.docks():
            docks.addAction(dock.toggleViewAction())
        self.run_menu = bar.addMenu("&Run")
        self.run_menu.addAction(self.run_panel)
        help_ = bar.addMenu("&Help")
        help_.addAction(self.keys)
        help_.addAction(self.log_folder)
        help_.addAction(self.about)
        tools = window.addToolBar("Main")
        tools.setObjectName("toolbar.main")
        for a in (self.open, self.save, self.export):
            tools.addAction(a)
        tools.addSeparator()
        for a in (self.zoom_in, self.zoom_out, self.fit, self.actual):
            tools.addAction(a)
        tools.addSeparator()
        tools.addAction(self.back)
        tools.addAction(self.find)
        from onnxviz.ui.icons import decorate_toolbars

        # icons with the text and shortcut in tooltips, on this toolbar and later ones
        self.toolbar_icons = decorate_toolbars(window)

    def sync(self, doc: Any, options: Any, theme_mode: str, can_go_back: bool) -> None:
        """Checked and enabled states follow the document, the view options and theme."""
        for action, value in (
            (self.shapes, options.show_shapes),
            (self.inits, options.show_initializers),
            (self.names, options.show_names),
        ):
            action.blockSignals(True)
            action.setChecked(value)
            action.blockSignals(False)
        (self.left_right if options.direction == "LR" else self.top_bottom).setChecked(True)
        {"light": self.theme_light, "dark": self.theme_dark}.get(
            theme_mode, self.theme_system
        ).setChecked(True)
        has_doc = doc is not None
        for action in (self.save, self.save_as, self.export, self.close, self.expand_all):
            action.setEnabled(has_doc)
        self.expand_bodies.setEnabled(has_doc)
        self.collapse_all.setEnabled(has_doc)
        self.undo.setEnabled(bool(doc and doc.can_undo))
        self.redo.setEnabled(bool(doc and doc.can_redo))
        self.undo.setText(f"&Undo {doc.undo_label}" if doc and doc.undo_label else "&Undo")
        self.redo.setText(f"&Redo {doc.redo_label}" if doc and doc.redo_label else "&Redo")
        for action in getattr(self, "edit_actions", []):
            action.setEnabled(has_doc)
        self.back.setEnabled(can_go_back)

    def fill_recent(
        self, files: list[str], open_path: Callable[[str], Any], clear: Callable[[], Any]
    ) -> None:
        menu = self.recent_menu
        menu.clear()
        for path, label in zip(files, recent_labels(files)):
            action = menu.addAction(label)
            action.setToolTip(path)
            action.triggered.connect(lambda _c=False, p=path: open_path(p))
        if files:
            menu.addSeparator()
            menu.addAction("Clear", clear)
        menu.setEnabled(bool(files))
