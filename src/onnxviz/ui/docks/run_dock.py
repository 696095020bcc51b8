"""The Run dock: the run panel's widget, under a stable object name so that saved dock
layouts keep it."""

from __future__ import annotations

from PySide6.QtWidgets import QDockWidget, QWidget


class RunDock(QDockWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Run", parent)
        self.setObjectName("dock.run")
