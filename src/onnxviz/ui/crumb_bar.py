"""`CrumbBar`: the strip above the canvas while a subgraph has its own view, with a
Back button and the path of views that led there (the navigation controller fills it)."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget


class CrumbBar(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        bar = QHBoxLayout(self)
        bar.setContentsMargins(6, 2, 6, 2)
        self.back_button = QToolButton()
        self.back_button.setText("◀ Back")
        self.label = QLabel()
        bar.addWidget(self.back_button)
        bar.addWidget(self.label, 1)
        self.hide()  # shown while the view is a subgraph's
