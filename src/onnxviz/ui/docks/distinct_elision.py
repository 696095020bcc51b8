"""Names elided so that siblings stay apart.

Eliding every name in the middle turns a TreeEnsembleClassifier's ``nodes_falsenodeids``,
``nodes_featureids``, ``nodes_nodeids`` and ``nodes_treeids`` into four identical
``node…eids``; eliding at the end would do the same to torch's ``pkg.torch.onnx.*``
metadata keys.  `DistinctElisionDelegate` elides a name that does not fit in the first
of middle, end or start that tells it apart from the other names under the same parent
(the tooltip still has the whole name)."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem

MODES = (Qt.TextElideMode.ElideMiddle, Qt.TextElideMode.ElideRight, Qt.TextElideMode.ElideLeft)


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
        for mode in MODES:
            mine = metrics.elidedText(text, mode, width)
            if all(metrics.elidedText(o, mode, width) != mine for o in others if o != text):
                option.textElideMode = mode
                return
        option.textElideMode = MODES[0]
