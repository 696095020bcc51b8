"""The diagnostics dock: every problem of the model (severity, code, message, where),
kept current by the edit controller; activating one reveals its node or field.

Errors come first, then warnings, then notes (each in the checker's order).  The
message is what a user reads: it gets the width, the location column at most
`LOCATION_SHARE` of it (elided, whole in the tooltip).  Squeezed next to the Run dock
(under `NARROW`), only the code (with its severity's coloured dot) and the message
columns stay; the tooltip says the rest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, QObject, QSize, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QIcon, QPainter, QPixmap
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
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
LOCATION_SHARE = 0.25  # of the tree's width, at most, for the location column
MIN_WIDTH = 280  # px: the code and a readable part of a message
NARROW = 480  # px: below this the severity and location columns hide (icon and tooltip)
MAX_SHOWN = 5000  # a model with more problems lists the first ones (the count says all)


def _location_text(loc: Any, graph_label: Callable[[str], str] | None = None) -> str:
    if loc is None:
        return ""
    path = loc.graph_path or "main"
    parts = [graph_label(path) if graph_label is not None else path]
    if loc.node:
        parts.append(f"node {loc.node}")
    if loc.value:
        parts.append(f"value {loc.value}")
    if loc.attribute:
        parts.append(f"attribute {loc.attribute}")
    if loc.field:
        parts.append(loc.field)
    return " · ".join(parts)


_ICONS: dict[str, QIcon] = {}


def severity_icon(severity: str) -> QIcon:
    """A dot in the severity's colour (cached: one per severity)."""
    icon = _ICONS.get(severity)
    if icon is None:
        pixmap = QPixmap(10, 10)
        pixmap.fill(QColor(0, 0, 0, 0))
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(SEVERITY_COLORS.get(severity, "#777")))
        painter.drawEllipse(1, 1, 8, 8)
        painter.end()
        icon = _ICONS[severity] = QIcon(pixmap)
    return icon


class _Body(QWidget):
    """The dock's body: asks for a width where messages read in full (the window
    splits a dock area by its docks' size hints) and keeps `MIN_WIDTH` next to the
    Run dock (which asks for much more)."""

    def sizeHint(self) -> QSize:
        return QSize(560, 180)

    def minimumSizeHint(self) -> QSize:
        return QSize(MIN_WIDTH, 80)


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _severity(d: Any) -> str:
    return str(getattr(getattr(d, "severity", None), "value", "info"))


class DiagnosticsDock(QDockWidget):
    locate = Signal(object)  # the Diagnostic

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Diagnostics", parent)
        self.setObjectName("dock.diagnostics")
        body = _Body()
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
        header.resizeSection(3, 160)
        self.tree.setTextElideMode(Qt.TextElideMode.ElideRight)  # a message reads from its start
        self.tree.viewport().installEventFilter(self)
        self.tree.itemActivated.connect(self._activated)
        self.tree.itemClicked.connect(self._activated)
        layout.addWidget(self.summary)
        layout.addWidget(self.tree, 1)
        self.setWidget(body)
        self.diagnostics: list[Any] = []

    def show_diagnostics(
        self,
        diagnostics: list[Any],
        graph_label: Callable[[str], str] | None = None,
        validating: bool = False,
    ) -> None:
        """``graph_label`` names a graph path as a reader wants it (``Scan#0 > If#2
        (else)``); without it the location shows the path.  ``validating``: the list is
        not the whole answer yet (a big model's first run takes seconds); the summary
        must not say there are no problems."""
        self.diagnostics = list(diagnostics)
        self.tree.setUpdatesEnabled(False)
        self.tree.clear()
        counts = {"error": 0, "warning": 0, "info": 0}
        rows: list[QTreeWidgetItem] = []
        self.diagnostics.sort(key=lambda d: SEVERITY_ORDER.get(_severity(d), len(SEVERITY_ORDER)))
        for d in self.diagnostics:
            sev = _severity(d)
            counts[sev] = counts.get(sev, 0) + 1
            if len(rows) >= MAX_SHOWN:
                continue
            item = QTreeWidgetItem(
                [sev, d.code, d.message, _location_text(getattr(d, "location", None), graph_label)]
            )
            item.setForeground(0, QBrush(QColor(SEVERITY_COLORS.get(sev, "#777"))))
            item.setIcon(1, severity_icon(sev))
            where = item.text(3)
            tip = f"{sev} {d.code}: {d.message}" + (f"\n{where}" if where else "")
            item.setToolTip(2, tip + (f"\n\nhint: {d.hint}" if d.hint else ""))
            item.setToolTip(1, tip)
            item.setToolTip(3, where)
            item.setData(0, Qt.ItemDataRole.UserRole, d)
            rows.append(item)
        self.tree.addTopLevelItems(rows)
        self.tree.setUpdatesEnabled(True)
        self.fit_columns()
        found = " · ".join(
            _count(counts[k], word)
            for k, word in (("error", "error"), ("warning", "warning"), ("info", "note"))
            if counts[k] or not validating
        )
        if validating:
            self.summary.setText(f"Validating… ({found} so far)" if found else "Validating…")
        elif not self.diagnostics:
            self.summary.setText("No problems found.")
        else:
            self.summary.setText(found)

    def fit_columns(self) -> None:
        """The location column: what its texts need, at most `LOCATION_SHARE` of the
        width; the message column (stretched) gets the rest."""
        width = self.tree.viewport().width()
        if width <= 0:
            return
        narrow = width < NARROW
        self.tree.setColumnHidden(0, narrow)
        self.tree.setColumnHidden(3, narrow)
        if not narrow:
            wanted = self.tree.sizeHintForColumn(3) if self.tree.topLevelItemCount() else 80
            share = int(width * LOCATION_SHARE)
            self.tree.header().resizeSection(3, max(60, min(wanted + 8, share)))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.tree.viewport() and event.type() == QEvent.Type.Resize:
            self.fit_columns()
        return super().eventFilter(watched, event)

    def _activated(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        d = item.data(0, Qt.ItemDataRole.UserRole)
        if d is not None:
            self.locate.emit(d)
