"""Properties' cells: names elided so that siblings stay apart, values wrapped.

Eliding every name in the middle turns a TreeEnsembleClassifier's ``nodes_falsenodeids``,
``nodes_featureids``, ``nodes_nodeids`` and ``nodes_treeids`` into four identical
``node…eids``; eliding at the end would do the same to torch's ``pkg.torch.onnx.*``
metadata keys.  `DistinctElisionDelegate` elides a name that does not fit in the first
of middle, end or start that tells it apart from the other names under the same parent
(the end first for a name with a note in brackets: "auto_pad (default)"; the tooltip
still has the whole name)."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem, QTreeWidget

MODES = (Qt.TextElideMode.ElideMiddle, Qt.TextElideMode.ElideRight, Qt.TextElideMode.ElideLeft)
SUFFIXED = (Qt.TextElideMode.ElideRight, Qt.TextElideMode.ElideMiddle, Qt.TextElideMode.ElideLeft)


class DistinctElisionDelegate(QStyledItemDelegate):
    def initStyleOption(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        super().initStyleOption(option, index)
        if index.column() != 0 or not option.text:
            return
        # a name is one line: wrapped at its spaces, "Scale (double)" showed "Scale …"
        option.features &= ~QStyleOptionViewItem.ViewItemFeature.WrapText
        style = option.widget.style() if option.widget is not None else None
        if style is None:
            return
        width = style.subElementRect(
            QStyle.SubElement.SE_ItemViewItemText, option, option.widget
        ).width()
        metrics = option.fontMetrics
        text = option.text
        if width <= 0 or metrics.horizontalAdvance(text) <= width:
            return  # it fits: nothing to elide
        model, parent = index.model(), index.parent()
        others = [
            str(model.index(row, 0, parent).data() or "")
            for row in range(model.rowCount(parent))
            if row != index.row()
        ]
        # "auto_pad (default)", "Scale (double)": the name before the note comes first
        modes = SUFFIXED if text.endswith(")") else MODES
        for mode in modes:
            mine = metrics.elidedText(text, mode, width)
            if all(metrics.elidedText(o, mode, width) != mine for o in others if o != text):
                option.textElideMode = mode
                return
        option.textElideMode = MODES[0]


class WrappedValueDelegate(QStyledItemDelegate):
    """Plain values (no editor) take the lines they need at the column's width, up to
    `MAX_LINES`: a graph named ``function local.fn.Scale (half)`` read ``function
    l…fn.Scale …`` on one line.  Rows with an editor keep the editor's height."""

    MAX_LINES = 4

    def __init__(self, tree: QTreeWidget) -> None:
        super().__init__(tree)
        self.tree = tree

    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        size = super().sizeHint(option, index)
        plain = index if isinstance(index, QModelIndex) else QModelIndex()
        item = self.tree.itemFromIndex(plain) if plain.isValid() else None
        text = str(index.data() or "")
        if item is None or not text or self.tree.itemWidget(item, index.column()) is not None:
            return size
        width = self.tree.header().sectionSize(index.column()) - 8
        if width <= 0:
            return size
        metrics = option.fontMetrics
        bounds = metrics.boundingRect(
            QRect(0, 0, width, metrics.lineSpacing() * self.MAX_LINES),
            int(Qt.TextFlag.TextWordWrap | Qt.AlignmentFlag.AlignLeft),
            text,
        )
        lines = min(self.MAX_LINES, max(1, round(bounds.height() / metrics.lineSpacing())))
        return QSize(size.width(), max(size.height(), lines * metrics.lineSpacing() + 2))
