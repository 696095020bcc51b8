"""`RunPanelWidget`: the body of the Run dock.

A row of run buttons and the frame stack breadcrumb on top; tabs below: frames and
their values, breakpoints, profile, compare and memory.  The widget only shows things
and emits what the user asks for; `RunPanel` (run_panel.py) does the work.  Its tables
are views over the item models of run_tables.py (100k rows must fill at once).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from PySide6.QtCore import QModelIndex, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from onnxviz.runtime.compare import Comparison
from onnxviz.runtime.memory import DroppedValue
from onnxviz.runtime.profile import NodeProfile
from onnxviz.ui.flow_layout import FlowLayout
from onnxviz.ui.run.compare_colours import CompareLegend
from onnxviz.ui.run.run_tables import (
    CompareTable,
    DroppedTable,
    ProfileTable,
    ValuesTable,
    fit_columns,
    fmt_bytes,
    table_view,
)


def _scrolling(page: QWidget) -> QScrollArea:
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QScrollArea.Shape.NoFrame)
    area.setWidget(page)
    return area


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
        self.values_model = ValuesTable()
        # by name, as the table has always opened (Qt's first sort indicator: descending)
        self.values = table_view(self.values_model, column=0, order=Qt.SortOrder.DescendingOrder)
        self.values.activated.connect(self._value_clicked)  # double-click or Enter
        self.values_model.filled.connect(lambda: fit_columns(self.values))
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
        self.profile_model = ProfileTable(lambda a: self.address_text(a))
        self.profile = table_view(self.profile_model)
        self.profile.activated.connect(self._node_clicked)
        self.profile_model.filled.connect(lambda: fit_columns(self.profile))
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
        self.compare_model = CompareTable(lambda a: self.address_text(a))
        self.compare = table_view(self.compare_model)
        self.compare.activated.connect(self._node_clicked)
        self.compare_model.filled.connect(lambda: fit_columns(self.compare))
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
        self.dropped_model = DroppedTable(lambda a: self.address_text(a))
        self.dropped = table_view(self.dropped_model, sortable=False)
        self.dropped_model.filled.connect(lambda: fit_columns(self.dropped))
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

    def set_values(self, values: Mapping[str, Any] | Callable[[], Mapping[str, Any]]) -> None:
        """The values of the frame shown, sorted by the column the user chose; a big
        frame's in a later turn of the event loop.  ``values`` may be a function that
        gathers them (a big run's: then called in that later turn)."""
        if callable(values):
            gather = values
            self.values_model.set_items(lambda: gather().items(), later=True)
        else:
            self.values_model.set_items(values.items(), later=True)

    def set_breakpoints(self, addresses: list[str], hits: dict[str, int]) -> None:
        self.breakpoints.clear()
        for a in addresses:
            n = hits.get(a, 0)
            item = QListWidgetItem(self.address_text(a) + (f"   (hit {n}×)" if n else ""))
            item.setData(Qt.ItemDataRole.UserRole, a)
            item.setToolTip(a)
            self.breakpoints.addItem(item)

    def set_profile(self, rows: list[NodeProfile]) -> None:
        """The profiled nodes, slowest first until the user sorts otherwise (a big
        profile's in the next turn of the event loop)."""
        self.profile.horizontalHeader().setSortIndicator(3, Qt.SortOrder.DescendingOrder)
        self.profile_model.set_items(rows, later=True)  # sorted by the indicator's column

    def set_comparison(self, cmp: Comparison | None, message: str = "") -> None:
        # graph order until the user sorts: the first divergence reads top-down
        self.compare.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        self.compare_model.set_comparison(cmp, self.atol.value(), self.rtol.value())
        if message:
            self.compare_status.setText(message)

    def set_memory(self, kept: int, count: int, cap: int, dropped: list[DroppedValue]) -> None:
        self.memory_label.setText(
            f"{count} intermediate values kept, {fmt_bytes(kept)} of a {fmt_bytes(cap)} cap."
            + (f" {len(dropped)} values were dropped, listed below." if dropped else "")
        )
        self.dropped_model.set_items(dropped)
        if dropped:
            self.tabs.setTabText(4, f"Memory ({len(dropped)} dropped)")
        else:
            self.tabs.setTabText(4, "Memory")

    # -- internals -------------------------------------------------------------------------
    def _value_clicked(self, index: QModelIndex) -> None:
        if index.isValid():
            self.valueActivated.emit(
                self.frames.currentRow(), self.values_model.name_at(index.row())
            )

    def _node_clicked(self, index: QModelIndex) -> None:
        """A row of the profile or the compare table: its node on the canvas."""
        address = index.data(Qt.ItemDataRole.UserRole) if index.isValid() else None
        if address:
            self.nodeActivated.emit(str(address))

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
