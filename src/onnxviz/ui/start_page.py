"""The start page shown over the bundled example: recent files and an Open button."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from onnxviz.present.recent import recent_labels


class StartPage(QFrame):
    openRequested = Signal(str)  # a path, or "" for the Open dialog

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("startPage")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        layout = QVBoxLayout(self)
        head = QHBoxLayout()
        title = QLabel("<b>onnxviz</b>: a bundled example")
        close = QPushButton("×")
        close.setFlat(True)
        close.setFixedWidth(24)
        close.setToolTip("Hide the start page")
        close.clicked.connect(self.hide)
        head.addWidget(title, 1)
        head.addWidget(close)
        layout.addLayout(head)
        hint = QLabel("Open a model, or drop a .onnx file on the window.")
        hint.setWordWrap(True)
        layout.addWidget(hint)
        button = QPushButton("Open…")
        button.clicked.connect(lambda: self.openRequested.emit(""))
        layout.addWidget(button)
        layout.addWidget(QLabel("Recent files:"))
        self.recent = QListWidget()
        self.recent.setMaximumHeight(90)
        # long labels (folders that tell same-named files apart) elided in the middle,
        # the name and "(missing)" kept in view, not behind a horizontal scroll bar
        self.recent.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.recent.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.recent.itemActivated.connect(
            lambda it: self.openRequested.emit(it.data(Qt.ItemDataRole.UserRole))
        )
        layout.addWidget(self.recent)
        self.setFixedWidth(260)

    def set_recent(self, files: list[str]) -> None:
        self.recent.clear()
        for path, label in zip(files, recent_labels(files)):
            item = QListWidgetItem(label)
            item.setToolTip(path)
            item.setData(Qt.ItemDataRole.UserRole, path)
            self.recent.addItem(item)
        if not files:
            item = QListWidgetItem("(none yet)")
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            self.recent.addItem(item)
        self.adjustSize()
