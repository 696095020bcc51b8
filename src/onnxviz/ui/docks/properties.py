"""Properties dock: shows `present.properties` sections in a two-column tree.

Read-only for now.  Extension point for the editing issue: every `Row` carries a
``field``; `PropertiesDock.editor_for_row` is where editors will be created."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QDockWidget, QHeaderView, QTreeWidget, QTreeWidgetItem, QWidget

from onnxviz.present.properties import Row, Section


class PropertiesDock(QDockWidget):
    navigate = Signal(str, str)  # ("value"|"node"|"tensor", name or item id)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Properties", parent)
        self.setObjectName("dock.properties")
        self.tree = QTreeWidget()
        self.tree.setColumnCount(2)
        self.tree.setHeaderLabels(["Property", "Value"])
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.setWordWrap(True)
        self.tree.setUniformRowHeights(False)
        self.tree.itemActivated.connect(self._activated)
        self.setWidget(self.tree)
        self.sections: list[Section] = []

    def show_sections(self, sections: list[Section]) -> None:
        self.sections = sections
        self.tree.clear()
        bold = QFont()
        bold.setBold(True)
        for section in sections:
            top = QTreeWidgetItem([section.title])
            top.setFont(0, bold)
            top.setFirstColumnSpanned(False)
            self.tree.addTopLevelItem(top)
            for row in section.rows:
                value = row.value + (f"  ({row.note})" if row.note else "")
                item = QTreeWidgetItem([row.key, value])
                item.setToolTip(1, row.value)
                item.setData(0, Qt.ItemDataRole.UserRole, row)
                if row.note == "default":
                    f = QFont()
                    f.setItalic(True)
                    item.setFont(1, f)
                top.addChild(item)
            if section.text:
                item = QTreeWidgetItem(["", section.text])
                item.setToolTip(1, section.text[:2000])
                top.addChild(item)
            top.setExpanded(True)

    def rows(self) -> list[Row]:
        return [r for s in self.sections for r in s.rows]

    def editor_for_row(self, row: Row) -> QWidget | None:
        """Extension point: the editing issue returns an editor for editable fields."""
        return None

    def _activated(self, item: QTreeWidgetItem, column: int) -> None:
        row = item.data(0, Qt.ItemDataRole.UserRole)
        if isinstance(row, Row) and row.target is not None:
            self.navigate.emit(row.target[0], row.target[1])
