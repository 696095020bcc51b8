"""The tensor inspector: a dock that shows one runtime value in detail."""

from __future__ import annotations

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

    def show_value(self, title: str, value: Any) -> None:
        self.inspector.show_value(title, value)
        self.show()
        self.raise_()
