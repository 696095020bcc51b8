"""The Tensor Inspector dock: the window's home of one `TensorInspector`, shown (and
tabbed with Properties) the first time a run value is picked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtWidgets import QDockWidget, QWidget

from onnxviz.ui.inspector.tensor_inspector import TensorInspector
from onnxviz.ui.prompter import Prompter


class InspectorDock(QDockWidget):
    def __init__(self, parent: QWidget | None = None, prompter: Prompter | None = None) -> None:
        super().__init__("Tensor Inspector", parent)
        self.setObjectName("dock.inspector")
        self.inspector = TensorInspector(prompter=prompter)
        self.setWidget(self.inspector)
        # Called once, just before the dock is first shown (the run panel tabs it there).
        self.before_first_show: Callable[[], None] | None = None

    def clear(self) -> None:
        """Show that nothing is selected (e.g. after another model was opened)."""
        self.inspector.clear()

    def show_value(self, title: str, value: Any) -> None:
        self.inspector.show_value(title, value)
        first = self.before_first_show
        if first is not None and self.isHidden():
            self.before_first_show = None
            first()
        self.show()
        self.raise_()
