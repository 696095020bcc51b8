"""`RunPanelWidget`: the body of the Run dock.

A row of run buttons and the frame stack breadcrumb on top; tabs below: frames and
their values, breakpoints, profile, compare and memory.  The widget only shows things
and emits what the user asks for; `RunPanel` (run_panel.py) does the work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from onnxviz.runtime.compare import Comparison
from onnxviz.runtime.memory import DroppedValue
from onnxviz.runtime.profile import NodeProfile
from onnxviz.runtime.values import describe, nbytes
from onnxviz.ui.flow_layout import FlowLayout
from onnxviz.ui.run.compare_colours import CompareLegend

STATS_MAX_SIZE = 65_536


def quick_stats(value: Any) -> tuple[str, str, str]:
    """min, max and NaN/Inf counts as table text; blank for big or non-numeric values
    (statistics of big tensors are left to the inspector: the table must fill at once
    even when a finished run keeps hundreds of feature maps)."""
    if not isinstance(value, np.ndarray) or not 0 < value.size <= STATS_MAX_SIZE:
        return "", "", ""
    if value.dtype.kind not in "biuf":
        return "", "", ""
    f = value.astype(np.float64, copy=False)
    finite = np.isfinite(f)
    n_finite = int(finite.sum())
    bad = ""
    if n_finite < f.size:
        nan = int(np.isnan(f).sum())
        bad = f"{nan}/{f.size - n_finite - nan}"
    if not n_finite:
        return "", "", bad
    vals = f[finite] if n_finite < f.size else f
    return f"{vals.min():.4g}", f"{vals.max():.4g}", bad


class NumberItem(QTableWidgetItem):
    """A table cell that sorts by its number, not its text."""

    def __init__(self, text: str, number: float) -> None:
        super().__init__(text)
        self.number = number

    def __lt__(self, other: QTableWidgetItem) -> bool:
        if isinstance(other, NumberItem):
            return self.number < other.number
        return super().__lt__(other)


def _table(headers: list[str]) -> QTableWidget:
    t = QTableWidget(0, len(headers))
    t.setHorizontalHeaderLabels(headers)
    t.verticalHeader().hide()
    t.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    t.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
    t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    t.horizontalHeader().setResizeContentsPrecision(64)  # fit columns to the first rows only
    t.horizontalHeader().setStretchLastSection(True)
    # torch's value names (/stages/stages.0/pw1/MatMul_output_0) are long at both ends
    t.setTextElideMode(Qt.TextElideMode.ElideMiddle)
    t.viewport().installEventFilter(_FirstColumnShare(t))
    return t


# The first column (a value's name, a node's address) gets at most this share of the
# width when the columns after it would not fit: they hold the numbers.
FIRST_COLUMN_SHARE = 0.45


def share_first_column(table: QTableWidget) -> None:
    """Shrink the first column, fitted to its names, so that the other columns fit
    the viewport (each at its content width), but not below `FIRST_COLUMN_SHARE`;
    long names are elided in the middle with the whole name in their tooltip."""
    width = table.viewport().width()
    if width <= 0 or table.columnCount() < 2:
        return
    header = table.horizontalHeader()
    others = sum(
        max(table.sizeHintForColumn(c), header.sectionSizeHint(c))
        for c in range(1, table.columnCount())
    )
    wanted = max(table.sizeHintForColumn(0), header.sectionSizeHint(0))
    header.resizeSection(0, min(wanted, max(int(width * FIRST_COLUMN_SHARE), width - others)))


class _FirstColumnShare(QObject):
    """Shares the width again when the table's viewport changes size (the dock is
    resized, or first shown after it was filled hidden)."""

    def __init__(self, table: QTableWidget) -> None:
        super().__init__(table)
        self.table = table

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize:
            share_first_column(self.table)
        return False


def _scrolling(page: QWidget) -> QScrollArea:
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QScrollArea.Shape.NoFrame)
    area.setWidget(page)
    return area


def _cell(table: QTableWidget, row: int, col: int = 0) -> str:
    item = table.item(row, col)
    return item.text() if item is not None else ""


def _address(table: QTableWidget, row: int) -> str:
    """The node address of a row (kept under the readable text of its first cell)."""
    item = table.item(row, 0)
    if item is None:
        return ""
    address = item.data(Qt.ItemDataRole.UserRole)
    return str(address) if address else item.text()


@contextmanager
def filling(table: QTableWidget, sort: bool = True) -> Iterator[None]:
    """Fill a table in one go: no sorting, no repaint and no column fitting per cell
    (fitting columns to contents per cell made refills quadratic: 80 s for 700 rows)."""
    table.setSortingEnabled(False)
    table.setUpdatesEnabled(False)
    try:
        yield
    finally:
        table.resizeColumnsToContents()
        for row in range(table.rowCount()):
            item = table.item(row, 0)
            if item is not None and not item.toolTip():
                item.setToolTip(item.text())  # the whole name when it is elided
        share_first_column(table)
        table.setUpdatesEnabled(True)
        table.setSortingEnabled(sort)


def fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


class RunPanelWidget(QWidget):
    frameChosen = Signal(int)  # index in the stack, 0 = main
    valueActivated = Signal(int, str)  # frame index, value name
    nodeActivated = Signal(str)  # node address
    breakpointRemoved = Signal(str)
    compareRequested = Signal()
    jumpToDivergence = Signal()
    colouringChanged = Signal(str)  # "none" | "heat" | "error"

    def __init__(self, actions: list[QAction], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # node addresses and graph paths as the reader names them (set by RunPanel,
        # which knows the document): "main > Loop#0::#3", not "main/body:#0::#3"
        self.address_text: Callable[[str], str] = str
        # The buttons wrap onto a second line in a narrow dock rather than making the
        # dock wide: at 1024 px the Run dock shares the bottom with Diagnostics.
        top = FlowLayout()
        for action in actions:
            if action is None:
                top.addSpacing(8)
                continue
            b = QToolButton()
            b.setDefaultAction(action)
            top.addWidget(b)
        self.status = QLabel("not started")
        top.addWidget(self.status)
        self.stack_label = QLabel("")
        self.stack_label.setTextFormat(Qt.TextFormat.RichText)
        self.stack_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tabs = QTabWidget()
        self.tabs.addTab(self._build_frames(), "Frames && Values")
        # The pages with rows of controls above their list scroll when the dock is at
        # its smallest: their full height made the window taller than a 720 px screen.
        self.tabs.addTab(_scrolling(self._build_breakpoints()), "Breakpoints")
        self.tabs.addTab(self._build_profile(), "Profile")
        self.tabs.addTab(_scrolling(self._build_compare()), "Compare")
        self.tabs.addTab(_scrolling(self._build_memory()), "Memory")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(top)
        lay.addWidget(self.stack_label)
        lay.addWidget(self.tabs, 1)

    # -- tabs ----------------------------------------------------------------------------
    def _build_frames(self) -> QWidget:
        split = QSplitter()
        self.frames = QListWidget()
        self.frames.currentRowChanged.connect(self.frameChosen.emit)
        self.values = _table(["value", "type", "min", "max", "NaN/Inf"])
        self.values.setSortingEnabled(True)
        self.values.cellDoubleClicked.connect(self._value_clicked)
        split.addWidget(self.frames)
        split.addWidget(self.values)
        split.setSizes([220, 600])
        return split

    def _build_breakpoints(self) -> QWidget:
        w = QWidget()
        lay = QVBoxLayout(w)
        self.break_nonfinite = QCheckBox("Break when a node outputs NaN or Inf")
        lay.addWidget(self.break_nonfinite)
        self.breakpoints = QListWidget()
        self.breakpoints.itemActivated.connect(
            lambda it: self.nodeActivated.emit(it.data(Qt.ItemDataRole.UserRole))
        )
        lay.addWidget(self.breakpoints, 1)
        remove = QPushButton("Remove")
        remove.clicked.connect(self._remove_breakpoint)
        row = QHBoxLayout()
        hint = QLabel("F9 toggles a breakpoint on the selected node")
        hint.setWordWrap(True)
        row.addWidget(hint, 1)
        row.addWidget(remove)
        lay.addLayout(row)
        return w

    def _build_profile(self) -> QWidget:
        w = QWidget()
        lay = QVBoxLayout(w)
        self.heat = QCheckBox("Colour nodes by time on the canvas")
        self.heat.toggled.connect(lambda on: self._colouring("heat", on))
        lay.addWidget(self.heat)
        self.profile = _table(["node", "op", "calls", "total ms", "mean ms", "output", "type"])
        self.profile.setSortingEnabled(True)
        self.profile.cellDoubleClicked.connect(
            lambda r, _c: self.nodeActivated.emit(_address(self.profile, r))
        )
        lay.addWidget(self.profile, 1)
        return w

    def _build_compare(self) -> QWidget:
        w = QWidget()
        lay = QVBoxLayout(w)
        # two short rows, not one long one: the Run dock stays narrow enough to share
        # the bottom area with the Diagnostics dock
        row = QHBoxLayout()
        self.compare_button = QPushButton("Compare with onnxruntime")
        self.compare_button.clicked.connect(self.compareRequested.emit)
        row.addWidget(self.compare_button)
        self.jump_button = QPushButton("Jump to first divergence")
        self.jump_button.clicked.connect(self.jumpToDivergence.emit)
        row.addWidget(self.jump_button)
        row.addStretch(1)
        lay.addLayout(row)
        row = QHBoxLayout()
        row.addWidget(QLabel("atol"))
        self.atol = QDoubleSpinBox()
        self.atol.setDecimals(8)
        self.atol.setRange(0, 1e6)
        self.atol.setValue(1e-4)
        row.addWidget(self.atol)
        row.addWidget(QLabel("rtol"))
        self.rtol = QDoubleSpinBox()
        self.rtol.setDecimals(8)
        self.rtol.setRange(0, 1e6)
        self.rtol.setValue(1e-3)
        row.addWidget(self.rtol)
        row.addStretch(1)
        lay.addLayout(row)
        self.error_colours = QCheckBox("Colour nodes by error")
        self.error_colours.toggled.connect(lambda on: self._colouring("error", on))
        lay.addWidget(self.error_colours)
        self.compare_legend = CompareLegend()
        self.compare_legend.setVisible(False)  # shown while the nodes are coloured
        self.error_colours.toggled.connect(self.compare_legend.setVisible)
        for spin in (self.atol, self.rtol):
            spin.valueChanged.connect(
                lambda _v: self.compare_legend.set_tolerance(self.atol.value(), self.rtol.value())
            )
        lay.addWidget(self.compare_legend)
        self.compare_status = QLabel(
            "Runs the same inputs in onnxruntime, every main-graph value exposed as an output."
        )
        self.compare_status.setWordWrap(True)
        lay.addWidget(self.compare_status)
        self.compare = _table(["node", "op", "max abs", "max rel", "values"])
        self.compare.setSortingEnabled(True)
        self.compare.cellDoubleClicked.connect(
            lambda r, _c: self.nodeActivated.emit(_address(self.compare, r))
        )
        lay.addWidget(self.compare, 1)
        return w

    def _build_memory(self) -> QWidget:
        w = QWidget()
        lay = QVBoxLayout(w)
        row = QHBoxLayout()
        row.addWidget(QLabel("Keep intermediate values up to"))
        self.memory_cap = QSpinBox()
        self.memory_cap.setRange(1, 1024 * 1024)
        self.memory_cap.setSuffix(" MiB")
        self.memory_cap.setToolTip("applies from the next run; values past the cap are dropped")
        row.addWidget(self.memory_cap)
        row.addStretch(1)
        lay.addLayout(row)
        self.memory_label = QLabel("")
        self.memory_label.setWordWrap(True)
        lay.addWidget(self.memory_label)
        self.dropped = _table(["graph", "value", "size", "why"])
        lay.addWidget(self.dropped, 1)
        return w

    # -- filling -------------------------------------------------------------------------
    def set_stack(self, titles: list[str], current: int) -> None:
        self.frames.blockSignals(True)
        self.frames.clear()
        for t in titles:
            self.frames.addItem(QListWidgetItem(t))
        if titles:
            self.frames.setCurrentRow(current)
        self.frames.blockSignals(False)
        crumbs = [f"<b>{t}</b>" if i == len(titles) - 1 else t for i, t in enumerate(titles)]
        self.stack_label.setText(" › ".join(crumbs))

    def set_values(self, values: dict[str, Any]) -> None:
        t = self.values
        with filling(t):
            t.setRowCount(0)
            t.setRowCount(len(values))
            for r, (name, value) in enumerate(values.items()):
                lo, hi, bad = quick_stats(value)
                for c, text in enumerate((name, describe(value), lo, hi, bad)):
                    item = QTableWidgetItem(text)
                    if c == 4 and text:
                        item.setForeground(Qt.GlobalColor.red)
                    t.setItem(r, c, item)

    def _address_item(self, address: str) -> QTableWidgetItem:
        """A node address as the reader names it, the address itself kept (activation)
        and in the tooltip."""
        item = QTableWidgetItem(self.address_text(address))
        item.setData(Qt.ItemDataRole.UserRole, address)
        item.setToolTip(address)
        return item

    def set_breakpoints(self, addresses: list[str], hits: dict[str, int]) -> None:
        self.breakpoints.clear()
        for a in addresses:
            n = hits.get(a, 0)
            item = QListWidgetItem(self.address_text(a) + (f"   (hit {n}×)" if n else ""))
            item.setData(Qt.ItemDataRole.UserRole, a)
            item.setToolTip(a)
            self.breakpoints.addItem(item)

    def set_profile(self, rows: list[NodeProfile]) -> None:
        t = self.profile
        with filling(t):
            t.setRowCount(0)
            t.setRowCount(len(rows))
            for r, p in enumerate(rows):
                t.setItem(r, 0, self._address_item(p.address))
                t.setItem(r, 1, QTableWidgetItem(p.op_type))
                t.setItem(r, 2, NumberItem(str(p.calls), p.calls))
                t.setItem(r, 3, NumberItem(f"{p.seconds * 1000:.3f}", p.seconds))
                t.setItem(r, 4, NumberItem(f"{p.mean_seconds * 1000:.3f}", p.mean_seconds))
                t.setItem(r, 5, NumberItem(fmt_bytes(p.output_bytes), p.output_bytes))
                t.setItem(r, 6, QTableWidgetItem(p.output_text))
        t.sortItems(3, Qt.SortOrder.DescendingOrder)

    def set_comparison(self, cmp: Comparison | None, message: str = "") -> None:
        t = self.compare
        # graph order until the user sorts: the first divergence reads top-down
        t.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        with filling(t):
            t.setRowCount(0)
            if cmp is not None:
                atol, rtol = self.atol.value(), self.rtol.value()
                t.setRowCount(len(cmp.nodes))
                for r, n in enumerate(cmp.nodes):
                    a, rel = n.max_abs, n.max_rel
                    cells = [
                        self._address_item(n.address),
                        QTableWidgetItem(n.op_type),
                        NumberItem("–" if a is None else f"{a:.3g}", a or 0.0),
                        NumberItem("–" if rel is None else f"{rel:.3g}", rel or 0.0),
                        QTableWidgetItem(", ".join(v.name for v in n.values)),
                    ]
                    beyond = n.beyond(atol, rtol)
                    for c, cell in enumerate(cells):
                        if beyond:
                            cell.setForeground(Qt.GlobalColor.red)
                        if n.peer_note:  # the peer's number is the wrong one: say so
                            cell.setToolTip(n.peer_note)
                        t.setItem(r, c, cell)
        if message:
            self.compare_status.setText(message)

    def set_memory(self, kept: int, count: int, cap: int, dropped: list[DroppedValue]) -> None:
        self.memory_label.setText(
            f"{count} intermediate values kept, {fmt_bytes(kept)} of a {fmt_bytes(cap)} cap."
            + (f" {len(dropped)} values were dropped, listed below." if dropped else "")
        )
        t = self.dropped
        with filling(t, sort=False):
            t.setRowCount(0)
            t.setRowCount(len(dropped))
            for r, d in enumerate(dropped):
                t.setItem(r, 0, QTableWidgetItem(self.address_text(d.graph_path)))
                t.setItem(r, 1, QTableWidgetItem(d.name))
                t.setItem(r, 2, QTableWidgetItem(fmt_bytes(d.nbytes)))
                t.setItem(r, 3, QTableWidgetItem(d.reason))
        if dropped:
            self.tabs.setTabText(4, f"Memory ({len(dropped)} dropped)")
        else:
            self.tabs.setTabText(4, "Memory")

    # -- internals -------------------------------------------------------------------------
    def _value_clicked(self, row: int, _col: int) -> None:
        item = self.values.item(row, 0)
        if item is not None:
            self.valueActivated.emit(self.frames.currentRow(), item.text())

    def _remove_breakpoint(self) -> None:
        item = self.breakpoints.currentItem()
        if item is not None:
            self.breakpointRemoved.emit(item.data(Qt.ItemDataRole.UserRole))

    def _colouring(self, mode: str, on: bool) -> None:
        other = self.error_colours if mode == "heat" else self.heat
        if on:
            other.blockSignals(True)
            other.setChecked(False)
            other.blockSignals(False)
        self.colouringChanged.emit(mode if on else "none")


def value_bytes(values: dict[str, Any]) -> int:
    return sum(nbytes(v) for v in values.values())
