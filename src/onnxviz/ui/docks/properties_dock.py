"""Properties dock: shows `present.properties` sections in a two-column tree, with an
editor in the value column of every editable row (rows carry an ``edit`` target).

Names never push values off-screen: the name column is at most `NAME_SHARE` of the
width (the rest is the values'), long names elide (in the middle, or wherever keeps
sibling names apart: distinct_elision.py) with the full name in a tooltip, and a node's or graph's metadata rows (torch exports carry several long
`pkg.torch.onnx.*` keys per node) sit in a collapsed "metadata" group.

The window sets `editor_factory` (row -> widget or None) and `row_menu` (row, menu ->
None, adds the row's actions such as "Remove attribute").  `show_sections` takes the
sections and, optionally, the function that made them, so `refresh()` rebuilds them
after an edit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, QObject, QPoint, Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QDockWidget,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from onnxviz.present.properties import Row, Section
from onnxviz.ui.docks.distinct_elision import DistinctElisionDelegate, WrappedValueDelegate

SectionSource = Callable[[], list[Section]]

NAME_SHARE = 0.45  # the name column's most of the tree's width; values get the rest
NAME_MIN = 70  # px: a name column narrower than this says too little
METADATA_PREFIX = "metadata "  # node and graph metadata rows (present.properties)


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
        # The name column is sized by us (`fit_columns`), never to its longest name: a
        # 300 px metadata key would leave the values and their editors off-screen.
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        self.tree.header().setStretchLastSection(True)
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        # ... or at the end or start, whichever keeps sibling names apart
        self.tree.setItemDelegateForColumn(0, DistinctElisionDelegate(self.tree))
        self.tree.setItemDelegateForColumn(1, WrappedValueDelegate(self.tree))
        self.tree.setIndentation(12)  # two levels of a 20 px indent cost a name 40 px
        self.tree.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.tree.viewport().installEventFilter(self)
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
            self.tree.addTopLevelItem(top)
            top.setFirstColumnSpanned(True)  # a title, not a name: never elided
            metadata = [r for r in section.rows if r.key.startswith(METADATA_PREFIX)]
            group: QTreeWidgetItem | None = None
            for row in section.rows:
                value = row.value + (f"  ({row.note})" if row.note else "")
                name = row.key
                parent = top
                if row.key.startswith(METADATA_PREFIX):
                    if group is None:
                        group = QTreeWidgetItem([f"metadata ({len(metadata)})", ""])
                        group.setToolTip(0, "metadata properties: expand to see or edit")
                        top.addChild(group)
                        group.setFirstColumnSpanned(True)
                    parent, name = group, row.key[len(METADATA_PREFIX) :]
                item = QTreeWidgetItem([name, value])
                item.setToolTip(0, row.key)
                item.setToolTip(1, row.value)
                item.setData(0, Qt.ItemDataRole.UserRole, row)
                if row.note == "default":
                    f = QFont()
                    f.setItalic(True)
                    item.setFont(1, f)
                parent.addChild(item)
                editor = self.editor_for_row(row)
                if editor is not None and row.note == "default":
                    # a schema default, not set on the node: editing it sets it
                    f = QFont(editor.font())
                    f.setItalic(True)
                    editor.setFont(f)
                    editor.setToolTip("the schema's default; not set on the node")
                    item.setText(0, f"{name} (default)")
                    item.setFont(0, f)
                if editor is not None:
                    if isinstance(editor, QLineEdit):
                        editor.setCursorPosition(0)  # a long value shows its start
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
            if group is not None:
                group.setExpanded(False)  # long and rarely needed: one click away
        self.fit_columns()

    def fit_columns(self) -> None:
        """Name column: as wide as its names need, at most `NAME_SHARE` of the width."""
        width = self.tree.viewport().width()
        if width <= 0:
            return
        wanted = self.tree.sizeHintForColumn(0) + 8
        most = max(NAME_MIN, int(width * NAME_SHARE))
        header = self.tree.header()
        size = max(min(wanted, most), min(NAME_MIN, width // 2))
        if header.sectionSize(0) != size:
            header.resizeSection(0, size)
            # rows were measured with the old widths: a value that now needs two lines
            # ("function local.fn.Scale (half)") would show one, cut at a space
            self.tree.doItemsLayout()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.tree.viewport() and event.type() == QEvent.Type.Resize:
            self.fit_columns()
        return super().eventFilter(watched, event)

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
        for item in self._row_items():
            row = item.data(0, Qt.ItemDataRole.UserRole)
            if isinstance(row, Row) and row.field == field:
                group = item.parent()
                if group is not None:
                    group.setExpanded(True)  # a collapsed metadata group
                self.tree.scrollToItem(item)
                self.tree.setCurrentItem(item)
                widget = self.tree.itemWidget(item, 1)
                if widget is not None:
                    widget.setFocus()
                self.focused_field = field
                return True
        return False

    def _row_items(self) -> list[QTreeWidgetItem]:
        """Every item of the tree, groups' children included, in display order."""
        found: list[QTreeWidgetItem] = []
        stack = [self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())]
        stack.reverse()
        while stack:
            item = stack.pop()
            if item is None:
                continue
            found.append(item)
            stack.extend(item.child(j) for j in reversed(range(item.childCount())))
        return found

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
            kind, name = row.target  # ("value" | "tensor" | "node", its name)
            self.navigate.emit(kind, name)
