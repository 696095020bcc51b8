"""The Outline dock follows the open document and its structural changes; activating
an entry reveals the node, or shows the value or graph in the Properties dock."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject

from onnxviz.model.changes import ChangeSet
from onnxviz.ui.controllers.navigation_controller import NavigationController
from onnxviz.ui.controllers.properties_controller import PropertiesController
from onnxviz.ui.doc_session import DocumentSession
from onnxviz.ui.docks.outline_dock import OutlineDock


class OutlineController(QObject):
    def __init__(
        self,
        session: DocumentSession,
        dock: OutlineDock,
        navigation: NavigationController,
        properties: PropertiesController,
    ) -> None:
        super().__init__(session)
        self.session = session
        self.dock = dock
        self.navigation = navigation
        self.properties = properties
        session.document_replaced.connect(dock.show_document)
        session.changed.connect(self._changed)
        dock.activated.connect(self._activated)

    def _changed(self, changes: ChangeSet) -> None:
        if changes.structural or changes.reindex or changes.names:
            self.dock.show_document(self.session.doc)

    def _activated(self, kind: str, path: str, target: Any) -> None:
        if self.session.doc is None:
            return
        if kind == "node":
            self.navigation.reveal(path, int(target))
        elif kind == "value":
            self.properties.show_value(path, str(target))
        elif kind == "graph":
            self.properties.show_graph_properties(path)
