"""`TensorInspector`: one runtime value in detail.

Tensors: dtype, shape, min/max/mean/std, NaN/Inf counts; tabs with a histogram, a
heatmap of a 2-D slice (axis pickers, a slider per other axis), a channel grid for
NCHW feature maps and a paged table.  Sequences, maps and optionals are browsed in a
tree on the left; picking an element shows it.  Export writes the shown tensor as .npy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QImage, QPainter, QPen, QPixmap, QResizeEvent, QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from onnxviz.runtime.values import describe
from onnxviz.ui.inspector.image_view import ImageView
from onnxviz.ui.inspector.stats import (
    channel_grid,
    colorize,
    histogram,
    slice_2d,
    summarize,
    table_page,
)
from onnxviz.ui.prompter import Prompter

PAGE_SIZE = 200
NOTHING_SELECTED = "nothing selected: pick a value on the canvas or in Frames & Values"


def to_pixmap(img: np.ndarray, scale: int = 1) -> QPixmap:
    h, w = img.shape[:2]
    data = np.ascontiguousarray(img)
    qimg = QImage(data.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()
    if scale > 1:
        qimg = qimg.scaled(w * scale, h * scale, mode=Qt.TransformationMode.FastTransformation)
    return QPixmap.fromImage(qimg)


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.6g}"


HISTOGRAM_MIN_HEIGHT = 96
TREE_SHARE = 0.45  # the element tree's most of the inspector's width
TREE_SHARE_STACKED = 0.35  # its share of the height when it sits above the details


class HistogramView(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.counts = np.zeros(0, np.int64)
        self.edges = np.zeros(0)
        self.empty_text = NOTHING_SELECTED
        # readable at this height; at 160 the inspector next to the Run dock made the
        # window taller than a 1280x720 screen (738 px)
        self.setMinimumHeight(HISTOGRAM_MIN_HEIGHT)

    def set_data(
        self, counts: np.ndarray, edges: np.ndarray, empty_text: str = "no finite values"
    ) -> None:
        self.counts, self.edges = counts, edges
        self.empty_text = empty_text
        self.update()

    def paintEvent(self, event: Any) -> None:
        p = QPainter(self)
        r = QRectF(self.rect()).adjusted(64, 10, -10, -24)
        p.fillRect(self.rect(), self.palette().base())
        if not self.counts.size:
            p.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, self.empty_text)
            return
        top = float(self.counts.max()) or 1.0
        n = len(self.counts)
        bw = r.width() / n
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(59, 110, 190))
        for i, c in enumerate(self.counts.tolist()):  # ≤ 64 bars
            h = r.height() * c / top
            p.drawRect(QRectF(r.left() + i * bw, r.bottom() - h, max(bw - 1, 1), h))
        p.setPen(QPen(self.palette().text().color()))
        p.drawLine(r.bottomLeft(), r.bottomRight())
        p.drawText(
            QRectF(r.left(), r.bottom() + 4, 120, 16),
            Qt.AlignmentFlag.AlignLeft,
            f"{self.edges[0]:.4g}",
        )
        p.drawText(
            QRectF(r.right() - 120, r.bottom() + 4, 120, 16),
            Qt.AlignmentFlag.AlignRight,
            f"{self.edges[-1]:.4g}",
        )
        p.drawText(QRectF(0, r.top() - 6, 60, 16), Qt.AlignmentFlag.AlignRight, str(int(top)))
        p.drawText(QRectF(0, r.bottom() - 12, 60, 16), Qt.AlignmentFlag.AlignRight, "0")


class TensorInspector(QWidget):
    def __init__(self, parent: QWidget | None = None, prompter: Prompter | None = None) -> None:
        super().__init__(parent)
        self.prompter = prompter or Prompter(self)  # asks where Export writes
        self.value: Any = None
        self.array: np.ndarray | None = None
        self.title = ""
        self._tree_fit_pending = False
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["element", "type"])
        self.tree.currentItemChanged.connect(self._tree_pick)
        self.header = QLabel()
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.header.setWordWrap(True)
        self.export_button = QPushButton("Export .npy…")
        self.export_button.clicked.connect(self._export_dialog)
        self.tabs = QTabWidget()
        self.hist = HistogramView()
        self.tabs.addTab(self.hist, "Histogram")
        self.tabs.addTab(self._build_heatmap(), "Heatmap")
        self.tabs.addTab(self._build_channels(), "Channels")
        self.tabs.addTab(self._build_table(), "Table")
        right = QWidget()
        lay = QVBoxLayout(right)
        lay.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        top.addWidget(self.header, 1)
        top.addWidget(self.export_button)
        lay.addLayout(top)
        lay.addWidget(self.tabs, 1)
        self.details = right  # header, Export and the tabs
        self.split = split = QSplitter()
        split.addWidget(self.tree)
        split.addWidget(right)
        split.setSizes([160, 600])
        outer = QVBoxLayout(self)
        outer.setContentsMargins(2, 2, 2, 2)
        outer.addWidget(split)
        self.tree.hide()
        self.clear()

    def clear(self) -> None:
        """Nothing selected (at start, and when the value shown is gone: another model)."""
        self.value = None
        self.array = None
        self.title = ""
        self.tree.clear()
        self.tree.hide()
        self.header.setText(f"<i>{NOTHING_SELECTED}</i>")
        self.hist.set_data(np.zeros(0, np.int64), np.zeros(0), NOTHING_SELECTED)
        self.heat_label.setText(NOTHING_SELECTED)
        self.channels_label.setText(NOTHING_SELECTED)
        self.table.setRowCount(0)

    # -- building ----------------------------------------------------------------------
    def _build_heatmap(self) -> QWidget:
        w = QWidget()
        lay = QVBoxLayout(w)
        pick = QHBoxLayout()
        self.row_axis = QComboBox()
        self.col_axis = QComboBox()
        pick.addWidget(QLabel("rows"))
        pick.addWidget(self.row_axis)
        pick.addWidget(QLabel("columns"))
        pick.addWidget(self.col_axis)
        pick.addStretch(1)
        lay.addLayout(pick)
        self.sliders_box = QGridLayout()
        lay.addLayout(self.sliders_box)
        self.sliders: dict[int, QSlider] = {}
        self.heat_label = ImageView()
        self.heat_label.setToolTip("wheel or +/- to zoom, double-click to fit")
        lay.addWidget(self.heat_label, 1)
        self.heat_range = QLabel()
        lay.addWidget(self.heat_range)
        self.row_axis.currentIndexChanged.connect(self._axes_changed)
        self.col_axis.currentIndexChanged.connect(self._axes_changed)
        return w

    def _build_channels(self) -> QWidget:
        w = QWidget()
        lay = QVBoxLayout(w)
        row = QHBoxLayout()
        row.addWidget(QLabel("batch"))
        self.batch_spin = QSpinBox()
        self.batch_spin.valueChanged.connect(lambda _v: self._draw_channels())
        row.addWidget(self.batch_spin)
        self.channels_note = QLabel()
        row.addWidget(self.channels_note, 1)
        lay.addLayout(row)
        self.channels_label = ImageView()
        self.channels_label.setToolTip("wheel or +/- to zoom, double-click to fit")
        lay.addWidget(self.channels_label, 1)
        return w

    def _build_table(self) -> QWidget:
        w = QWidget()
        lay = QVBoxLayout(w)
        row = QHBoxLayout()
        row.addWidget(QLabel("page"))
        self.page_spin = QSpinBox()
        self.page_spin.valueChanged.connect(lambda _v: self._fill_table())
        row.addWidget(self.page_spin)
        self.page_note = QLabel()
        row.addWidget(self.page_note, 1)
        lay.addLayout(row)
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["index", "value"])
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.verticalHeader().hide()
        lay.addWidget(self.table, 1)
        return w

    # -- showing -----------------------------------------------------------------------
    def show_value(self, title: str, value: Any) -> None:
        """Show any runtime value; structured ones get the element tree."""
        self.title = title
        self.value = value
        self.tree.clear()
        if isinstance(value, np.ndarray):
            self.tree.hide()
            self._show_tensor(title, value)
            return
        self.tree.show()
        root = self._tree_item(title, value)
        self.tree.addTopLevelItem(root)
        root.setExpanded(True)
        # after the layout has made room for the tree it just showed
        self._tree_fit_pending = True
        QTimer.singleShot(0, self._fit_tree)
        self.tree.setCurrentItem(root)

    def _fit_tree(self) -> None:
        """The element tree of a structured value gets room for its names.  Side by
        side, it takes the width they need, up to `TREE_SHARE`; in a dock too narrow
        for that next to the histogram's least width (it kept 70 px: "outp..." and a
        scroll bar), the tree goes above the details instead.  A hidden inspector (its
        dock behind Properties) fits when it is first laid out."""
        if not self._tree_fit_pending or not self.tree.isVisible():
            return  # nothing to fit, or not laid out yet (a later show or resize fits)
        self.tree.resizeColumnToContents(0)
        frame = self.tree.frameWidth() * 2 + self.tree.indentation() + 8
        wanted = self.tree.columnWidth(0) + frame
        details = self.details.minimumSizeHint().width()
        side_by_side = self.width() >= wanted + details + self.split.handleWidth()
        self.split.setOrientation(
            Qt.Orientation.Horizontal if side_by_side else Qt.Orientation.Vertical
        )
        total = sum(self.split.sizes())
        if total <= 0:
            return
        self._tree_fit_pending = False
        if side_by_side:
            tree = min(max(wanted, self.split.sizes()[0]), int(total * TREE_SHARE))
        else:
            tree = int(total * TREE_SHARE_STACKED)
        self.split.setSizes([tree, total - tree])

    def _tree_item(self, label: str, value: Any) -> QTreeWidgetItem:
        item = QTreeWidgetItem([label, describe(value)])
        item.setData(0, Qt.ItemDataRole.UserRole, value)
        children: list[tuple[str, Any]] = []
        if isinstance(value, list):
            children = [(f"[{i}]", v) for i, v in enumerate(value[:1000])]
        elif isinstance(value, dict):
            children = [(repr(k), v) for k, v in list(value.items())[:1000]]
        for name, v in children:
            item.addChild(self._tree_item(name, v))
        return item

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self.tree.isVisible() and event.size().width() != event.oldSize().width():
            self._tree_fit_pending = True  # wide enough to go side by side, or not
        self._fit_tree()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self._fit_tree()

    def _tree_pick(self, item: QTreeWidgetItem | None, _prev: Any = None) -> None:
        if item is None:
            return
        value = item.data(0, Qt.ItemDataRole.UserRole)
        if isinstance(value, np.ndarray):
            self._show_tensor(f"{self.title} {item.text(0)}", value)
        elif isinstance(value, np.generic):
            self._show_tensor(f"{self.title} {item.text(0)}", np.asarray(value))
        else:
            self.array = None
            what = "empty optional" if value is None else describe(value)
            # the root is the value itself: its name once, not "name (main) name (main):"
            where = "" if item.parent() is None else f" {item.text(0)}"
            self.header.setText(f"<b>{self.title}</b>{where}: {what}")
            self.hist.set_data(np.zeros(0, np.int64), np.zeros(0), "pick a tensor in the tree")

    def _show_tensor(self, title: str, arr: np.ndarray) -> None:
        self.array = arr
        s = summarize(arr)
        shape = "×".join(str(d) for d in s.shape) or "scalar"
        parts = [f"<b>{title}</b>", f"{s.dtype} [{shape}] · {s.size} values"]
        if s.numeric:
            parts.append(
                f"min {_fmt(s.min)} · max {_fmt(s.max)} · mean {_fmt(s.mean)} · std {_fmt(s.std)}"
            )
            bad = f"NaN {s.nan} · Inf {s.inf} · zeros {s.zeros}"
            if s.nan or s.inf:
                bad = f"<span style='color:#c22'>{bad}</span>"
            parts.append(bad)
        self.header.setText("<br>".join(parts))
        counts, edges = histogram(arr)
        self.hist.set_data(counts, edges, "no values" if not arr.size else "no finite values")
        self._setup_axes(arr)
        self._draw_channels()
        pages = max(1, -(-arr.size // PAGE_SIZE))
        self.page_spin.blockSignals(True)
        self.page_spin.setRange(0, pages - 1)
        self.page_spin.setValue(0)
        self.page_spin.blockSignals(False)
        self.page_note.setText(f"of {pages} ({PAGE_SIZE} values a page)")
        self._fill_table()

    # heatmap
    def _setup_axes(self, arr: np.ndarray) -> None:
        for combo in (self.row_axis, self.col_axis):
            combo.blockSignals(True)
            combo.clear()
            for ax in range(arr.ndim):
                combo.addItem(f"axis {ax} ({arr.shape[ax]})", ax)
            combo.blockSignals(False)
        if arr.ndim >= 2:
            self.row_axis.setCurrentIndex(arr.ndim - 2)
            self.col_axis.setCurrentIndex(arr.ndim - 1)
        self._axes_changed()

    def _axes_changed(self) -> None:
        arr = self.array
        if arr is None:
            return
        while self.sliders_box.count():
            taken = self.sliders_box.takeAt(0)
            w = taken.widget() if taken is not None else None
            if w is not None:
                w.hide()  # deleteLater waits for the event loop: do not show it meanwhile
                w.deleteLater()
        self.sliders = {}
        ra, ca = self.row_axis.currentData(), self.col_axis.currentData()
        for k, ax in enumerate(a for a in range(arr.ndim) if a not in (ra, ca)):
            slider = QSlider(Qt.Orientation.Horizontal)
            slider.setRange(0, arr.shape[ax] - 1)
            label = QLabel(f"axis {ax}: 0")
            slider.valueChanged.connect(lambda v, lab=label, a=ax: self._slider_moved(lab, a, v))
            self.sliders_box.addWidget(label, k, 0)
            self.sliders_box.addWidget(slider, k, 1)
            self.sliders[ax] = slider
        self._draw_heatmap()

    def _slider_moved(self, label: QLabel, axis: int, value: int) -> None:
        label.setText(f"axis {axis}: {value}")
        self._draw_heatmap()

    def heatmap_plane(self) -> np.ndarray | None:
        arr = self.array
        if arr is None:
            return None
        ra = self.row_axis.currentData()
        ca = self.col_axis.currentData()
        if arr.ndim >= 2 and (ra is None or ca is None or ra == ca):
            return None
        index = {ax: s.value() for ax, s in self.sliders.items()}
        return slice_2d(arr, ra if ra is not None else 0, ca if ca is not None else 1, index)

    def _draw_heatmap(self) -> None:
        plane = self.heatmap_plane()
        if plane is None:
            self.heat_label.setText("pick two different axes")
            return
        self.heat_label.setPixmap(to_pixmap(colorize(plane)))  # fitted to the view
        s = summarize(plane)
        self.heat_range.setText(
            f"slice {plane.shape[0]}×{plane.shape[1]} · colour from {_fmt(s.min)} to {_fmt(s.max)}"
        )

    # channels
    def _draw_channels(self) -> None:
        arr = self.array
        if arr is None or arr.ndim not in (3, 4) or arr.dtype.kind not in "biuf":
            self.channels_label.setText("channel grid: for 3-D or 4-D (NCHW) numeric tensors")
            self.channels_note.setText("")
            self.tabs.setTabEnabled(2, False)
            return
        self.tabs.setTabEnabled(2, True)
        self.batch_spin.setRange(0, arr.shape[0] - 1 if arr.ndim == 4 else 0)
        img, cols, shown = channel_grid(arr, self.batch_spin.value())
        self.channels_label.setPixmap(to_pixmap(img))  # fitted to the view
        total = arr.shape[1] if arr.ndim == 4 else arr.shape[0]
        self.channels_note.setText(
            f"{shown} of {total} channels, {cols} a row, each scaled to its own range"
        )

    # table
    def _fill_table(self) -> None:
        arr = self.array
        rows = table_page(arr, self.page_spin.value(), PAGE_SIZE) if arr is not None else []
        self.table.setRowCount(len(rows))
        for i, (where, text) in enumerate(rows):
            self.table.setItem(i, 0, QTableWidgetItem(where))
            self.table.setItem(i, 1, QTableWidgetItem(text))

    # export
    def export(self, path: str) -> None:
        if self.array is None:
            raise ValueError("nothing to export: pick a tensor")
        np.save(path, self.array, allow_pickle=self.array.dtype == object)

    def _export_dialog(self) -> None:
        if self.array is None:
            return
        safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in self.title) or "value"
        chosen = self.prompter.save_file("Export tensor", safe + ".npy", "NumPy (*.npy)")
        if chosen is not None:
            self.export(chosen[0])
