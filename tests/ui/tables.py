"""Reading the Run dock's tables (QTableView over an item model) as a user sees them:
a cell's text, its tooltip and colour, the rows shown."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt


def row_count(table: Any) -> int:
    return int(table.model().rowCount())


def cell_text(table: Any, row: int, col: int = 0) -> str:
    return str(table.model().index(row, col).data() or "")


def cell_tooltip(table: Any, row: int, col: int = 0) -> str:
    return str(table.model().index(row, col).data(Qt.ItemDataRole.ToolTipRole) or "")


def cell_is_red(table: Any, row: int, col: int) -> bool:
    brush = table.model().index(row, col).data(Qt.ItemDataRole.ForegroundRole)
    return brush is not None and brush.color() == Qt.GlobalColor.red


def column(table: Any, col: int = 0) -> list[str]:
    return [cell_text(table, r, col) for r in range(row_count(table))]


def double_click(qtbot: Any, table: Any, row: int, col: int = 0) -> None:
    """Scroll a row into view and double-click it, as a user would."""
    index = table.model().index(row, col)
    table.scrollTo(index)
    at = table.visualRect(index).center()
    # a press first, as a real double-click has: the view activates the row it was
    # pressed on (QTest's double-click event alone comes without one)
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=at)
    qtbot.mouseDClick(table.viewport(), Qt.MouseButton.LeftButton, pos=at)
