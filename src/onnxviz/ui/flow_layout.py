"""`FlowLayout`: widgets left to right, wrapping onto another line when the width runs
out (a row of buttons in a narrow dock stays whole instead of forcing the dock wide).

Qt ships no flow layout (only a C++ example); this one is ours: items keep their size
hints, lines are as tall as their tallest item, and the layout's minimum width is its
widest item, so a dock holding it can be as narrow as one button."""

from __future__ import annotations

from PySide6.QtCore import QMargins, QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QLayoutItem, QSizePolicy, QSpacerItem, QWidget


class FlowLayout(QLayout):
    def __init__(self, parent: QWidget | None = None, spacing: int = 4) -> None:
        super().__init__(parent)
        self.items: list[QLayoutItem] = []
        self._width: int | None = None  # the width of the last placement
        self.setSpacing(spacing)
        self.setContentsMargins(QMargins(0, 0, 0, 0))

    # -- QLayout's item list -----------------------------------------------------------
    def addItem(self, item: QLayoutItem) -> None:
        self.items.append(item)

    def addSpacing(self, width: int) -> None:
        """A gap between two groups of buttons (dropped where a line starts)."""
        self.addItem(QSpacerItem(width, 0, QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Minimum))

    def _shown(self) -> list[QLayoutItem]:
        """The items that take room: spacers, and widgets that are not hidden."""
        return [i for i in self.items if i.spacerItem() is not None or not i.isEmpty()]

    def count(self) -> int:
        return len(self.items)

    def itemAt(self, index: int) -> QLayoutItem | None:  # type: ignore[override]
        return self.items[index] if 0 <= index < len(self.items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:  # type: ignore[override]
        return self.items.pop(index) if 0 <= index < len(self.items) else None

    # -- sizes ---------------------------------------------------------------------------
    def expandingDirections(self) -> Qt.Orientation:
        return Qt.Orientation(0)

    # Not Qt's height-for-width: a box layout would then ask the whole dock for its
    # preferred height (tables included) and squeeze the canvas.  The height the lines
    # need at the width last given is the minimum height instead.
    def heightForWidth(self, width: int) -> int:
        return self._place(QRect(0, 0, width, 0), move=False)

    def sizeHint(self) -> QSize:
        """Everything on one line, as tall as the lines need at the current width."""
        margins = self.contentsMargins()
        shown = [i.sizeHint() for i in self._shown()]
        width = sum(s.width() for s in shown) + self.spacing() * max(len(shown) - 1, 0)
        return QSize(width + margins.left() + margins.right(), self._height())

    def minimumSize(self) -> QSize:
        """The widest item (the others wrap below it)."""
        margins = self.contentsMargins()
        size = QSize()
        for item in self.items:
            size = size.expandedTo(item.minimumSize())
        return QSize(size.width() + margins.left() + margins.right(), self._height())

    def _height(self) -> int:
        if self._width is not None:
            return self.heightForWidth(self._width)
        return self.heightForWidth(1 << 20)  # not placed yet: one line

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        before = self._height()
        self._width = rect.width()
        self._place(rect, move=True)
        if self._height() != before:
            self.invalidate()  # lines were added or removed: the parent re-lays out

    def _place(self, rect: QRect, move: bool) -> int:
        """Lay the items out in ``rect`` (moving them when ``move``); the height used."""
        margins = self.contentsMargins()
        area = rect.marginsRemoved(margins)
        x, y, line_height = area.x(), area.y(), 0
        gap = self.spacing()
        for item in self._shown():
            hint = item.sizeHint()
            if item.spacerItem() is not None and x == area.x():
                continue  # no gap at the start of a line
            width = min(hint.width(), area.width())  # a long label is cut, not overflowing
            if x > area.x() and x + width > area.x() + area.width():
                x, y = area.x(), y + line_height + gap
                line_height = 0
            if move:
                item.setGeometry(QRect(QPoint(x, y), QSize(width, hint.height())))
            x += width + gap
            line_height = max(line_height, hint.height())
        return y + line_height - rect.y() + margins.bottom()
