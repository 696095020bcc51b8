"""The tensor inspector: a dock that shows one runtime value in detail."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtWidgets import QDockWidget, QWidget

from onnxviz.ui.inspector.widget import TensorInspector

__all__ = ["InspectorDock", "TensorInspector"]


class InspectorDock(QDockWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Tensor Inspector", parent)
        self.setObjectName("dock.inspector")
        self.inspector = TensorInspector()
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
