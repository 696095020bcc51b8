"""Docks that later issues fill: diagnostics (the validator) and run (the interpreter).

They are real docks with a stable object name (so saved dock layouts keep them) and a
small API the later issues implement: `DiagnosticsDock.show_diagnostics`,
`RunDock.attach`."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QVBoxLayout,
    QWidget,
)


class DiagnosticsDock(QDockWidget):
    locate = Signal(str, str)  # graph path, node label

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Diagnostics", parent)
        self.setObjectName("dock.diagnostics")
        self.list = QListWidget()
        self.setWidget(self.list)
        self.list.itemActivated.connect(self._activated)

    def show_diagnostics(self, diagnostics: list[Any]) -> None:
        self.list.clear()
        for d in diagnostics:
            loc = getattr(d, "location", None)
            text = f"{getattr(d, 'code', '')} {getattr(d, 'message', d)}"
            item = QListWidgetItem(text.strip())
            item.setData(
                256, (getattr(loc, "graph_path", "") or "main", getattr(loc, "node", "") or "")
            )
            self.list.addItem(item)
        if not diagnostics:
            self.list.addItem(QListWidgetItem("No load-time problems."))

    def _activated(self, item: QListWidgetItem) -> None:
        where = item.data(256)
        if where:
            self.locate.emit(where[0], where[1])


class RunDock(QDockWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Run", parent)
        self.setObjectName("dock.run")
        body = QWidget()
        layout = QVBoxLayout(body)
        self.message = QLabel(
            "Running models from the window comes with the run panel.\n"
            "Meanwhile: onnxviz run MODEL --random-inputs"
        )
        self.message.setWordWrap(True)
        layout.addWidget(self.message)
        layout.addStretch(1)
        self.setWidget(body)

    def attach(self, document: Any) -> None:
        """Extension point: the run-panel issue binds a runtime Session here."""
        self.document = document
