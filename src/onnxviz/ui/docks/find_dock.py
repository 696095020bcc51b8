"""Find dock (Ctrl+F): a query box and the result list; activating a result asks the
main window to jump to it (expanding what hides it)."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QVBoxLayout,
    QWidget,
)

from onnxviz.model.document import Document
from onnxviz.present.find import FindResult, find

ROLE = Qt.ItemDataRole.UserRole


class FindDock(QDockWidget):
    jump = Signal(object)  # FindResult

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Find", parent)
        self.setObjectName("dock.find")
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(4, 4, 4, 4)
        self.query = QLineEdit()
        self.query.setPlaceholderText("node, op type, value or initializer name")
        self.query.setClearButtonEnabled(True)
        self.count = QLabel("")
        self.results = QListWidget()
        layout.addWidget(self.query)
        layout.addWidget(self.count)
        layout.addWidget(self.results)
        self.setWidget(body)
        self.doc: Document | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(200)
        self._timer.timeout.connect(self.run_query)
        self.query.textChanged.connect(lambda _t: self._timer.start())
        self.query.returnPressed.connect(self._first)
        self.results.itemActivated.connect(self._activated)

    def set_document(self, doc: Document | None) -> None:
        self.doc = doc
        self.results.clear()
        self.count.setText("")

    def focus_query(self) -> None:
        self.show()
        self.raise_()
        self.query.setFocus()
        self.query.selectAll()

    def run_query(self) -> list[FindResult]:
        self._timer.stop()
        self.results.clear()
        if self.doc is None:
            return []
        found = find(self.doc, self.query.text())
        for r in found[:1000]:
            item = QListWidgetItem(r.describe())
            item.setData(ROLE, r)
            self.results.addItem(item)
        self.count.setText(f"{len(found)} found" if self.query.text().strip() else "")
        return found

    def _first(self) -> None:
        if self._timer.isActive() or self.results.count() == 0:
            self.run_query()
        if self.results.count():
            self.results.setCurrentRow(0)
            self._activated(self.results.item(0))

    def _activated(self, item: QListWidgetItem) -> None:
        result = item.data(ROLE)
        if result is not None:
            self.jump.emit(result)
