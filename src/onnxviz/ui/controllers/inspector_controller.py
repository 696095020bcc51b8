"""The Tensor Inspector shows values of the open document's run: another model (or
none) empties it."""

from __future__ import annotations

from PySide6.QtCore import QObject

from onnxviz.ui.doc_session import DocumentSession
from onnxviz.ui.inspector import InspectorDock


class InspectorController(QObject):
    def __init__(self, session: DocumentSession, dock: InspectorDock) -> None:
        super().__init__(session)
        self.dock = dock
        session.document_replaced.connect(lambda _doc: dock.inspector.clear())
