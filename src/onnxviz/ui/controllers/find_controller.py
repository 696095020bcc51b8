"""The Find dock searches the open document (again after names or structure change);
a result reveals its node on the canvas."""

from __future__ import annotations

from PySide6.QtCore import QObject

from onnxviz.model.changes import ChangeSet
from onnxviz.ui.controllers.navigation_controller import NavigationController
from onnxviz.ui.doc_session import DocumentSession
from onnxviz.ui.docks.find_dock import FindDock


class FindController(QObject):
    def __init__(
        self, session: DocumentSession, dock: FindDock, navigation: NavigationController
    ) -> None:
        super().__init__(session)
        self.session = session
        self.dock = dock
        session.document_replaced.connect(dock.set_document)
        session.changed.connect(self._changed)
        dock.jump.connect(navigation.jump_to)

    def _changed(self, changes: ChangeSet) -> None:
        if changes.structural or changes.reindex or changes.names:
            self.dock.set_document(self.session.doc)
