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
from onnxviz.ui.workers import Task

ROLE = Qt.ItemDataRole.UserRole
# Documents with more nodes are searched in a worker thread: at 100k nodes a search is
# 0.1-0.5 s of Python, which on the UI thread froze the window for as long.
BACKGROUND_FIND_NODES = 5000


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
        self._search: Task | None = None  # a big document's search under way
        self._jump_when_found = False  # Enter came while it ran
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(200)
        self._timer.timeout.connect(self.run_query)
        self.query.textChanged.connect(lambda _t: self._timer.start())
        self.query.returnPressed.connect(self._first)
        self.results.itemActivated.connect(self._activated)

    def set_document(self, doc: Document | None) -> None:
        self.doc = doc
        self._search = None
        self.results.clear()
        self.count.setText("")

    def focus_query(self) -> None:
        self.show()
        self.raise_()
        self.query.setFocus()
        self.query.selectAll()

    def run_query(self) -> list[FindResult]:
        """Search for the query's text and list what is found; returns the results, or
        [] while a big document's search runs in the background (`searching`)."""
        self._timer.stop()
        self._search = None  # a search under way is for an older query: dropped
        self.results.clear()
        doc = self.doc
        if doc is None:
            return []
        text = self.query.text()
        if doc.node_count > BACKGROUND_FIND_NODES and text.strip():
            self._search_in_background(doc, text)
            return []
        found = find(doc, text)
        self._show(found, text)
        return found

    @property
    def searching(self) -> bool:
        return self._search is not None

    def _search_in_background(self, doc: Document, text: str) -> None:
        revision = doc.revision
        task = Task(lambda _cancel, _progress: find(doc, text), self)
        self._search = task
        self.count.setText("searching…")

        def done(found: list[FindResult]) -> None:
            if self._search is not task:
                return  # another query, document or edit came meanwhile
            self._search = None
            if doc.revision != revision:  # an edit came: its names may differ now
                self.run_query()
                return
            jump = self._jump_when_found
            self._show(found, text)
            if jump:
                self._jump_to_first()

        def failed(message: str) -> None:
            if self._search is task:
                self._search = None
                self.count.setText(message or "")

        task.finished.connect(done)
        task.failed.connect(failed)
        task.start()

    def _show(self, found: list[FindResult], text: str) -> None:
        self._jump_when_found = False
        for r in found[:1000]:
            item = QListWidgetItem(r.describe())
            item.setData(ROLE, r)
            self.results.addItem(item)
        self.count.setText(f"{len(found)} found" if text.strip() else "")

    def _first(self) -> None:
        if self._timer.isActive() or (self.results.count() == 0 and not self.searching):
            self.run_query()
        if self.searching:  # Enter while a big document is searched: jump when found
            self._jump_when_found = True
            return
        self._jump_to_first()

    def _jump_to_first(self) -> None:
        if self.results.count():
            self.results.setCurrentRow(0)
            self._activated(self.results.item(0))

    def _activated(self, item: QListWidgetItem) -> None:
        result = item.data(ROLE)
        if result is not None:
            self.jump.emit(result)
