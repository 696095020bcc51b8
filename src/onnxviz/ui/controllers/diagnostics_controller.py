"""The Diagnostics dock shows what the session's validator (and the last refused edit)
says, comes forward when errors appear, and locates a diagnostic on the canvas and in
the Properties dock."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject

from onnxviz.model.diagnostics import Diagnostic, Severity
from onnxviz.model.scope_names import readable_graph_path
from onnxviz.ui.controllers.navigation_controller import NavigationController
from onnxviz.ui.controllers.properties_controller import PropertiesController
from onnxviz.ui.doc_session import DocumentSession
from onnxviz.ui.edit.diagnostics_dock import DiagnosticsDock


class DiagnosticsController(QObject):
    def __init__(
        self,
        session: DocumentSession,
        dock: DiagnosticsDock,
        navigation: NavigationController,
        properties: PropertiesController,
    ) -> None:
        super().__init__(session)
        self.session = session
        self.dock = dock
        self.navigation = navigation
        self.properties = properties
        self.errors_shown = 0
        self.doc_seen: object = None
        session.diagnostics_changed.connect(self._diagnostics_changed)
        dock.locate.connect(self.locate)

    def _diagnostics_changed(self, shown: list[Diagnostic], _badges: bool) -> None:
        if self.session.doc is not self.doc_seen:  # another model: its errors are new
            self.doc_seen = self.session.doc
            self.errors_shown = 0
        self.dock.show_diagnostics(
            shown, self._graph_label(), validating=self.session.validation_running
        )
        errors = sum(1 for d in shown if d.severity == Severity.ERROR)
        if errors and not self.errors_shown:
            # problems appeared: bring the list forward (once; the user may close it)
            self.dock.show()
            self.dock.raise_()
        self.errors_shown = errors

    def _graph_label(self) -> Callable[[str], str] | None:
        """Graph paths as the breadcrumbs name them, each worked out once per list."""
        doc = self.session.doc
        if doc is None:
            return None
        labels: dict[str, str] = {}

        def label(path: str) -> str:
            if path not in labels:
                labels[path] = readable_graph_path(doc, path)
            return labels[path]

        return label

    def locate(self, d: Diagnostic) -> None:
        """Select and reveal the node of a diagnostic, and show its field."""
        doc = self.session.doc
        if doc is None:
            return
        loc = d.location
        path = loc.graph_path or "main"
        try:
            doc.scope(path)
        except KeyError:
            return
        node = doc.find_node(loc.node, path) if loc.node else None
        if node is not None:
            index = node.index
            self.navigation.reveal(path, index)
            self.properties.show_node_properties(path, index)
            field = ""
            if loc.attribute:
                field = f"attribute:{loc.attribute}"
            elif loc.field and loc.field.startswith(("input[", "output[")):
                kind, _, rest = loc.field.partition("[")
                field = f"{kind}:{rest.rstrip(']')}"
            if field:
                self.properties.dock.focus_field(field)
        elif loc.value:
            self.properties.show_value(path, loc.value)
        elif path == "main":
            self.properties.show_model_properties()
