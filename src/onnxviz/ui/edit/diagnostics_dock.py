"""The diagnostics dock: every problem of the model (severity, code, message, where),
kept current by the edit controller; activating one reveals its node or field."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QDockWidget,
    QHeaderView,
    QLabel,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

SEVERITY_COLORS = {"error": "#d32f2f", "warning": "#ef8f00", "info": "#1e88e5"}
MAX_SHOWN = 5000  # a model with more problems lists the first ones (the count says all)


def _location_text(loc: Any) -> str:
    if loc is None:
        return ""
    parts = [loc.graph_path or "main"]
    if loc.node:
        parts.append(f"node {loc.node}")
    if loc.value:
        parts.append(f"value {loc.value}")
    if loc.attribute:
        parts.append(f"attribute {loc.attribute}")
    if loc.field:
        parts.append(loc.field)
    return " · ".join(parts)


class DiagnosticsDock(QDockWidget):
    locate = Signal(object)  # the Diagnostic

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Diagnostics", parent)
        self.setObjectName("dock.diagnostics")
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(2, 2, 2, 2)
        self.summary = QLabel("")
        self.tree = QTreeWidget()
        self.tree.setColumnCount(4)
        self.tree.setHeaderLabels(["Severity", "Code", "Message", "Location"])
        self.tree.setRootIsDecorated(False)
        self.tree.setAlternatingRowColors(True)
        header = self.tree.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(False)
        header.resizeSection(3, 300)
        self.tree.itemActivated.connect(self._activated)
        self.tree.itemClicked.connect(self._activated)
        layout.addWidget(self.summary)
        layout.addWidget(self.tree, 1)
        self.setWidget(body)
        self.diagnostics: list[Any] = []

    def show_diagnostics(self, diagnostics: list[Any]) -> None:
        self.diagnostics = list(diagnostics)
        self.tree.setUpdatesEnabled(False)
        self.tree.clear()
        counts = {"error": 0, "warning": 0, "info": 0}
        rows = []
        for d in self.diagnostics:
            sev = getattr(getattr(d, "severity", None), "value", "info")
            counts[sev] = counts.get(sev, 0) + 1
            if len(rows) >= MAX_SHOWN:
                continue
            item = QTreeWidgetItem(
                [sev, d.code, d.message, _location_text(getattr(d, "location", None))]
            )
            item.setForeground(0, QBrush(QColor(SEVERITY_COLORS.get(sev, "#777"))))
            item.setToolTip(2, d.message + (f"\n\nhint: {d.hint}" if d.hint else ""))
            item.setToolTip(3, item.text(3))
            item.setData(0, Qt.ItemDataRole.UserRole, d)
            rows.append(item)
        self.tree.addTopLevelItems(rows)
        self.tree.setUpdatesEnabled(True)
        if not self.diagnostics:
            self.summary.setText("No problems found.")
        else:
            self.summary.setText(
                f"{counts['error']} errors · {counts['warning']} warnings · {counts['info']} notes"
            )

    def _activated(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        d = item.data(0, Qt.ItemDataRole.UserRole)
        if d is not None:
            self.locate.emit(d)
