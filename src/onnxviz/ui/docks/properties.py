"""Properties dock: shows `present.properties` sections in a two-column tree, with an
editor in the value column of every editable row (rows carry an ``edit`` target).

The window sets `editor_factory` (row -> widget or None) and `row_menu` (row, menu ->
None, adds the row's actions such as "Remove attribute").  `show_sections` takes the
sections and, optionally, the function that made them, so `refresh()` rebuilds them
after an edit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QDockWidget,
    QHeaderView,
    QLabel,
    QMenu,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from onnxviz.present.properties import Row, Section

SectionSource = Callable[[], list[Section]]


class PropertiesDock(QDockWidget):
    navigate = Signal(str, str)  # ("value"|"node"|"tensor", name or item id)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Properties", parent)
        self.setObjectName("dock.properties")
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(0, 0, 0, 0)
        self.tree = QTreeWidget()
        self.tree.setColumnCount(2)
        self.tree.setHeaderLabels(["Property", "Value"])
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        # editors fill the value column, whatever the dock's width
        self.tree.header().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.tree.setWordWrap(True)
        self.tree.setUniformRowHeights(False)
        self.tree.itemActivated.connect(self._activated)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._context_menu)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.setStyleSheet("color: #c62828; padding: 2px 4px;")
        self.message.hide()
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.message)
        self.setWidget(body)
        self.sections: list[Section] = []
        self.source: SectionSource | None = None
        self.subject: tuple[Any, ...] | None = None
        self.editor_factory: Callable[[Row], QWidget | None] | None = None
        self.row_menu: Callable[[Row | None, QMenu], None] | None = None
        self.editors: dict[str, QWidget] = {}  # row key (section/key) -> editor
        self.focused_field = ""

    def show_sections(
        self,
        sections: list[Section],
        source: SectionSource | None = None,
        subject: tuple[Any, ...] | None = None,
    ) -> None:
        """``subject``: what the sections describe, for row menus: ("node", path, index),
        ("value", path, name), ("graph", path) or ("model",)."""
        self.sections = sections
        self.source = source
        self.subject = subject
        self.editors = {}
        self.show_problem("")
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
                editor = self.editor_for_row(row)
                if editor is not None and row.note == "default":
                    # a schema default, not set on the node: editing it sets it
                    f = QFont(editor.font())
                    f.setItalic(True)
                    editor.setFont(f)
                    editor.setToolTip("the schema's default; not set on the node")
                    item.setText(0, f"{row.key} (default)")
                    item.setFont(0, f)
                if editor is not None:
                    self.tree.setItemWidget(item, 1, editor)
                    self.editors[f"{section.title}/{row.key}"] = editor
                    problem = getattr(editor, "problem", None)
                    if problem is not None:
                        problem.connect(self.show_problem)
            if section.text:
                item = QTreeWidgetItem(["", section.text])
                item.setToolTip(1, section.text[:2000])
                top.addChild(item)
            top.setExpanded(True)

    def refresh(self) -> None:
        """Rebuild from the source after an edit (the subject may be gone: then clear)."""
        if self.source is None:
            return
        try:
            sections = self.source()
        except (KeyError, IndexError, ValueError):
            sections = []
        self.show_sections(sections, self.source if sections else None, self.subject)

    def show_problem(self, reason: str) -> None:
        self.message.setText(reason)
        self.message.setVisible(bool(reason))

    def rows(self) -> list[Row]:
        return [r for s in self.sections for r in s.rows]

    def editor(self, section: str, key: str) -> Any:
        return self.editors.get(f"{section}/{key}")

    def focus_field(self, field: str) -> bool:
        """Scroll to the row editing ``field`` (e.g. "attribute:strides", "input:0") and
        give its editor the focus."""
        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            for j in range(top.childCount()):
                item = top.child(j)
                row = item.data(0, Qt.ItemDataRole.UserRole)
                if isinstance(row, Row) and row.field == field:
                    self.tree.scrollToItem(item)
                    self.tree.setCurrentItem(item)
                    widget = self.tree.itemWidget(item, 1)
                    if widget is not None:
                        widget.setFocus()
                    self.focused_field = field
                    return True
        return False

    def editor_for_row(self, row: Row) -> QWidget | None:
        """An editor for editable rows (set by the window's edit controller)."""
        if self.editor_factory is None or row.edit is None:
            return None
        return self.editor_factory(row)

    def _context_menu(self, pos: QPoint) -> None:
        if self.row_menu is None:
            return
        item = self.tree.itemAt(pos)
        row = item.data(0, Qt.ItemDataRole.UserRole) if item is not None else None
        menu = QMenu(self)
        self.row_menu(row if isinstance(row, Row) else None, menu)
        if not menu.isEmpty():
            menu.popup(self.tree.viewport().mapToGlobal(pos))

    def _activated(self, item: QTreeWidgetItem, column: int) -> None:
        row = item.data(0, Qt.ItemDataRole.UserRole)
        if isinstance(row, Row) and row.target is not None:
            self.navigate.emit(row.target[0], row.target[1])
