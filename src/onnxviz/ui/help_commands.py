"""The Help menu's commands: About, Keyboard Shortcuts and Open Log Folder."""

from __future__ import annotations

import os

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QStatusBar

from onnxviz.ui.actions import SHORTCUTS_HELP
from onnxviz.ui.log_file import log_dir
from onnxviz.ui.prompter import Prompter


class HelpCommands:
    def __init__(self, prompter: Prompter, status_bar: QStatusBar) -> None:
        self.prompter = prompter
        self.status_bar = status_bar

    def about(self) -> None:
        from onnxviz import __version__

        self.prompter.inform(
            "About onnxviz",
            f"onnxviz {__version__}\nExplore, edit, validate and debug ONNX models.",
        )

    def shortcuts(self) -> None:
        self.prompter.inform("Keyboard shortcuts", SHORTCUTS_HELP, monospace=True)

    def open_log_folder(self) -> None:
        """The folder of the log file, and its path in the status bar."""
        folder = log_dir()
        os.makedirs(folder, exist_ok=True)
        self.status_bar.showMessage(f"log folder: {folder}", 15000)
        QDesktopServices.openUrl(QUrl.fromLocalFile(folder))
