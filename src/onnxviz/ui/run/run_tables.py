"""The Run dock's tables (values, profile, compare, dropped values) as item models.

A finished run of a big model hands over 100k values and 100k profiled nodes.  A
QTableWidget made seven items per row and sorted them through a Python ``__lt__`` per
comparison: 19 s with the UI thread stopped.  Here each table keeps its rows as the
plain objects it was given; a cell's text is made in `data()` when the view asks for it
(the visible rows only), costly per-row work (a value's min/max) is done then and
cached, and sorting is done by the model with one key per row.  The keys of a column
are gathered in time slices across turns of the event loop (`SORT_SLICE_SECONDS`), so
that a sort that must look at every value first never stops the UI for long; until
they are all there the rows keep their order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from itertools import islice
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
from PySide6.QtCore import (
    QAbstractTableModel,
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    Signal,
)
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView

from onnxviz.runtime.compare import Comparison, NodeComparison
from onnxviz.runtime.memory import DroppedValue
from onnxviz.runtime.profile import NodeProfile
from onnxviz.runtime.values import describe
from onnxviz.ui.turn_queue import run_later

STATS_MAX_SIZE = 65_536
# Time given to gathering sort keys per turn of the event loop: a sort whose keys take
# longer (the min of every one of 100k values) goes on over the next turns.  (Kept to
# well under half of the 100 ms budget: two queued slices can run between two ticks of
# a 10 ms timer, with Qt's painting between them; see canvas_overlay's
# MARK_SLICE_SECONDS.)
SORT_SLICE_SECONDS = 0.012
# Up to this many rows a table is filled and sorted at once; a bigger one is filled in
# a later turn (``later``) and sorted from the turn after (filling it is enough for one).
BIG_TABLE_ROWS = 5_000
# Rows let go per turn when a big table's old rows are replaced: the last references to
# a finished run's 100k values go with them, and freeing them all took 30-60 ms at once.
RELEASE_ROWS = 8_000
# Rows listed per turn when a big table's rows come from a function (`set_items`):
# listing a finished run's 50k values at once was 10-18 ms (30 in a slow phase).
LIST_ROWS = 10_000

_DISPLAY = int(Qt.ItemDataRole.DisplayRole)
_TOOLTIP = int(Qt.ItemDataRole.ToolTipRole)
_FOREGROUND = int(Qt.ItemDataRole.ForegroundRole)
_USER = int(Qt.ItemDataRole.UserRole)
_RED = QBrush(QColor(Qt.GlobalColor.red))

Stats = tuple[float | None, float | None, int, int]  # min, max, NaN, Inf


def value_stats(value: Any) -> Stats | None:
    """min and max of the finite elements and the NaN and Inf counts; None for big or
    non-numeric values (statistics of big tensors are left to the inspector)."""
    if not isinstance(value, np.ndarray) or not 0 < value.size <= STATS_MAX_SIZE:
        return None
    if value.dtype.kind not in "biuf":
        return None
    f = value.astype(np.float64, copy=False)
    finite = np.isfinite(f)
    n_finite = int(finite.sum())
    nan = inf = 0
    if n_finite < f.size:
        nan = int(np.isnan(f).sum())
        inf = f.size - n_finite - nan
    if not n_finite:
        return None, None, nan, inf
    vals = f[finite] if n_finite < f.size else f
    return float(vals.min()), float(vals.max()), nan, inf


def stats_text(stats: Stats | None) -> tuple[str, str, str]:
    """`value_stats` as the values table writes it: min, max and "NaN/Inf" counts
    (blank when there are none, or no statistics)."""
    if stats is None:
        return "", "", ""
    lo, hi, nan, inf = stats
    bad = f"{nan}/{inf}" if nan or inf else ""
    if lo is None or hi is None:
        return "", "", bad
    return f"{lo:.4g}", f"{hi:.4g}", bad


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class RowTable(QAbstractTableModel):
    """Rows of plain objects; subclasses say what a cell shows (`text`) and how its
    column sorts (`key`).  Sorting reorders a list of row numbers, never the objects."""

    resorted = Signal()  # a sort (the user's, or the kept one after new rows) is in place
    filled = Signal()  # new rows are in (the view fits its columns to them)

    headers: Sequence[str] = ()
    numeric_columns: frozenset[int] = frozenset()  # keys are numbers (or None): numpy sorts

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.items: list[Any] = []
        self.order: list[int] | None = None  # view row -> index in items; None: as given
        self.sort_column = -1  # -1: the order given
        self.sort_order = Qt.SortOrder.AscendingOrder
        self.sorting = False  # keys still being gathered over the next turns
        self.filling = False  # new rows wait for the next turn (`set_items` ``later``)
        self._generation = 0  # a newer sort or newer rows abandon an older sort
        self._fills = 0  # newer rows abandon older rows still waiting

    # -- what subclasses say -------------------------------------------------------------
    def text(self, i: int, col: int) -> str:
        raise NotImplementedError

    def key(self, i: int, col: int) -> Any:
        """The sort key of a cell; None sorts last in either order (a blank cell)."""
        return self.text(i, col) or None

    def item_key(self, col: int) -> Callable[[Any], Any] | None:
        """A column's key as a function of the row's object, when it is a plain field:
        mapped over all rows at once (C speed) instead of `key` per row."""
        return None

    def tooltip(self, i: int, col: int) -> str | None:
        return self.text(i, 0) if col == 0 else None

    def red(self, i: int, col: int) -> bool:
        return False

    def user(self, i: int) -> Any:
        return None

    # -- the rows --------------------------------------------------------------------------
    @property
    def settled(self) -> bool:
        """The rows last given are in, in their final order."""
        return not self.filling and not self.sorting

    def set_items(
        self, items: Iterable[Any] | Callable[[], Iterable[Any]], later: bool = False
    ) -> None:
        """Show ``items`` (sorted by the current sort column).  ``later``: more than
        `BIG_TABLE_ROWS` are filled in a later turn of the event loop (a run's take-over
        fills several tables, and the canvas too: one turn for all of them stopped the
        UI).  ``items`` may be a function that makes them: called then, and always later."""
        self._fills += 1
        fill = self._fills
        if not callable(items):
            rows = list(items)
            if not later or len(rows) <= BIG_TABLE_ROWS:
                self._fill(rows)
                return
            self.filling = True
            run_later(lambda: self._fill(rows) if fill == self._fills else None)
            return
        make = items
        self.filling = True

        def gather() -> None:  # a turn each: make them, list them, fill
            if fill == self._fills:
                made = make()
                run_later(lambda: listed(made))

        def listed(made: Iterable[Any], rows: list[Any] | None = None) -> None:
            if fill != self._fills:
                return
            if rows is None:  # the first turn of this listing
                rows, made = [], iter(made)
            before = len(rows)
            rows.extend(islice(made, LIST_ROWS))
            if len(rows) - before == LIST_ROWS:  # maybe more: the next turn
                run_later(lambda: listed(made, rows))
            else:
                run_later(lambda: self._fill(rows) if fill == self._fills else None)

        run_later(gather)

    def _fill(self, rows: list[Any]) -> None:
        self.filling = False
        self.beginResetModel()
        old, self.items = self.items, rows
        self.order = None
        self.forget()
        self._generation += 1
        self.sorting = False
        self.endResetModel()
        let_go(old)
        self.filled.emit()
        if self.sort_column >= 0 and self.items:
            self._start_sort()

    def forget(self) -> None:
        """Drop what was cached of the previous rows (subclasses' caches)."""

    def source(self, row: int) -> int:
        """The index in `items` of a view row."""
        return row if self.order is None else self.order[row]

    def item_at(self, row: int) -> Any:
        return self.items[self.source(row)]

    def cell_text(self, row: int, col: int) -> str:
        return self.text(self.source(row), col)

    # -- QAbstractTableModel ---------------------------------------------------------------
    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.items)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.headers)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = _DISPLAY) -> Any:
        if (
            role == _DISPLAY
            and orientation == Qt.Orientation.Horizontal
            and 0 <= section < len(self.headers)
        ):
            return self.headers[section]
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = _DISPLAY) -> Any:
        row = index.row()
        if not 0 <= row < len(self.items):
            return None
        if role == _DISPLAY:
            return self.text(self.source(row), index.column())
        if role == _FOREGROUND:
            return _RED if self.red(self.source(row), index.column()) else None
        if role == _TOOLTIP:
            return self.tooltip(self.source(row), index.column())
        if role == _USER:
            return self.user(self.source(row))
        return None

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        self.sort_column, self.sort_order = column, order
        self._generation += 1
        self.sorting = False
        if column < 0 or column >= len(self.headers):
            self.sort_column = -1
            self._reorder(None)  # the order given
            return
        self._start_sort()

    # -- sorting in slices -----------------------------------------------------------------
    def _start_sort(self) -> None:
        column, generation = self.sort_column, self._generation
        n = len(self.items)
        plain = self.item_key(column)
        keys: list[Any] = []

        def gather() -> None:
            if generation != self._generation:
                return  # newer rows or a newer sort
            deadline = time.perf_counter() + SORT_SLICE_SECONDS
            if plain is not None and not keys:  # (a turn of its own for a big table)
                keys.extend(map(plain, self.items))
            key = self.key
            while len(keys) < n:
                # (64 between looks at the clock: a value's statistics can be 0.1 ms)
                stop = min(n, len(keys) + 64)
                keys.extend(key(i, column) for i in range(len(keys), stop))
                if time.perf_counter() > deadline:
                    break
            if len(keys) < n:
                run_later(gather)  # the rest next turn
            elif n > BIG_TABLE_ROWS:
                run_later(place)  # the sort itself from the next turn (its first step
                # beside 50k keys made in one go was a 35 ms slice)
            else:
                place()

        def place() -> None:
            # A big table's sort goes on over turns too (`ordered_rows_steps`): 100k
            # names sorted in one go were 40-55 ms, and the two tables of a run's end
            # sorted back to back a 110 ms stop.
            if generation != self._generation:
                return
            descending = self.sort_order == Qt.SortOrder.DescendingOrder
            steps = ordered_rows_steps(keys, descending, column in self.numeric_columns)
            if n <= BIG_TABLE_ROWS:
                finish(ordered_rows_from(steps))
            else:
                step(steps)

        def step(steps: Iterator[None]) -> None:
            if generation != self._generation:
                return
            try:
                next(steps)
            except StopIteration as done:
                order = done.value
                run_later(lambda: finish(order))  # the reorder in a turn of its own
            else:
                run_later(lambda: step(steps))

        def finish(order: list[int]) -> None:
            if generation != self._generation:
                return
            self.sorting = False
            self._reorder(order)

        self.sorting = True
        if n <= BIG_TABLE_ROWS:
            gather()
        else:
            run_later(gather)

    def _reorder(self, order: list[int] | None) -> None:
        """Show the rows in ``order``; selected and current rows stay on their items."""
        self.layoutAboutToBeChanged.emit()
        old = self.persistentIndexList()
        sources = [self.source(ix.row()) for ix in old]
        self.order = order
        if old:
            rows = sources
            if order is not None:  # row of each source: the inverse of `order`
                # (numpy: a dict of 100k rows was 20-25 ms of a big table's reorder)
                row_of = np.empty(len(order), dtype=np.int64)
                row_of[np.fromiter(order, dtype=np.int64, count=len(order))] = np.arange(len(order))
                rows = row_of[sources].tolist()
            self.changePersistentIndexList(
                old, [self.index(r, ix.column()) for r, ix in zip(rows, old, strict=True)]
            )
        self.layoutChanged.emit()
        self.resorted.emit()


_graveyard: list[list[Any]] = []  # old rows let go of a slice per turn


def let_go(rows: list[Any]) -> None:
    """Drop a list of rows (the caller's last use of it) `RELEASE_ROWS` per turn."""
    if len(rows) <= RELEASE_ROWS:
        return  # freed with the caller's reference, at once
    _graveyard.append(rows)
    if len(_graveyard) == 1:
        run_later(_release_some)


def _release_some() -> None:
    rows = _graveyard[0]
    del rows[-RELEASE_ROWS:]
    if not rows:
        _graveyard.pop(0)
    if _graveyard:
        run_later(_release_some)


SORT_RUN_ROWS = 8_192  # a big table's names are sorted in runs of this many a turn
# (16,384 names and their listing were a 16-18 ms step)


def ordered_rows(keys: list[Any], descending: bool, numeric: bool = False) -> list[int]:
    """Row numbers by key (stable: equal keys keep their order), blanks (None; NaN for
    numbers) last in either order."""
    return ordered_rows_from(ordered_rows_steps(keys, descending, numeric))


def ordered_rows_from(steps: Iterator[None]) -> list[int]:
    """All the steps of `ordered_rows_steps` at once: its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def ordered_rows_steps(
    keys: list[Any], descending: bool, numeric: bool = False
) -> Generator[None, None, list[int]]:
    """`ordered_rows` in steps of a few ms each (a generator that returns the rows).

    Numbers are one numpy step.  Other keys are sorted in runs of `SORT_RUN_ROWS`, a
    step each, then the runs merged pairwise, a merge a step.  Python's sort is
    stable, also with ``reverse``, and finds the two sorted runs of a merge in linear
    time, so each merge of neighbours keeps the order of equal keys."""
    if numeric:
        arr = np.array(keys, dtype=np.float64)  # None -> NaN
        blank = np.isnan(arr)
        present = np.flatnonzero(~blank)
        values = arr[present]
        by = np.argsort(-values if descending else values, kind="stable")
        return [*present[by].tolist(), *np.flatnonzero(blank).tolist()]
    blanks = [i for i, k in enumerate(keys) if k is None] if None in keys else []
    rows = [i for i, k in enumerate(keys) if k is not None] if blanks else list(range(len(keys)))
    key = keys.__getitem__
    runs = []
    for start in range(0, len(rows), SORT_RUN_ROWS):
        run = rows[start : start + SORT_RUN_ROWS]
        run.sort(key=key, reverse=descending)
        runs.append(run)
        if len(rows) > SORT_RUN_ROWS:
            yield
    while len(runs) > 1:
        merged = []
        for a in range(0, len(runs) - 1, 2):
            pair = runs[a] + runs[a + 1]
            pair.sort(key=key, reverse=descending)
            merged.append(pair)
            yield
        if len(runs) % 2:
            merged.append(runs[-1])
        runs = merged
    return (runs[0] if runs else []) + blanks


def _number(x: float | None) -> float | None:
    """A number as a sort key: None (sorted last) for a missing or NaN one."""
    return None if x is None or math.isnan(x) else x


# -- the four tables ---------------------------------------------------------------------
class ValuesTable(RowTable):
    """(name, value) pairs: the value's type, min, max and NaN/Inf counts, worked out
    for a row when it is first shown (or sorted on) and kept."""

    headers = ("value", "type", "min", "max", "NaN/Inf")
    numeric_columns = frozenset({2, 3})

    def forget(self) -> None:
        self._types: list[str | None] = [None] * len(self.items)
        self._stats: list[tuple[tuple[str, str, str], Stats | None] | None]
        self._stats = [None] * len(self.items)

    def type_text(self, i: int) -> str:
        t = self._types[i]
        if t is None:
            t = self._types[i] = describe(self.items[i][1])
        return t

    def stats(self, i: int) -> tuple[tuple[str, str, str], Stats | None]:
        """The row's min, max and NaN/Inf texts and numbers (worked out once)."""
        s = self._stats[i]
        if s is None:
            stats = value_stats(self.items[i][1])
            s = self._stats[i] = (stats_text(stats), stats)
        return s

    def item_key(self, col: int) -> Callable[[Any], Any] | None:
        return itemgetter(0) if col == 0 else None

    def text(self, i: int, col: int) -> str:
        if col == 0:
            return str(self.items[i][0])
        if col == 1:
            return self.type_text(i)
        return self.stats(i)[0][col - 2]

    def key(self, i: int, col: int) -> Any:
        if col < 2:
            return self.text(i, col)
        stats = self.stats(i)[1]
        if stats is None:
            return None
        lo, hi, nan, inf = stats
        if col == 2:
            return lo
        if col == 3:
            return hi
        return (nan + inf, nan) if nan or inf else None

    def red(self, i: int, col: int) -> bool:
        return col == 4 and bool(self.stats(i)[0][2])

    def name_at(self, row: int) -> str:
        return str(self.item_at(row)[0])


class AddressNamed(RowTable):
    """Rows named by a node address, shown as the reader names it (``address_text``)
    and kept raw for activation and the tooltip."""

    def __init__(self, address_text: Callable[[str], str], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.address_text = address_text

    def forget(self) -> None:
        self._names: list[str | None] = [None] * len(self.items)

    def address(self, i: int) -> str:
        return str(self.items[i].address)

    def readable(self, i: int) -> str:
        name = self._names[i]
        if name is None:
            name = self._names[i] = self.address_text(self.address(i))
        return name

    def tooltip(self, i: int, col: int) -> str | None:
        return self.address(i) if col == 0 else None

    def user(self, i: int) -> Any:
        return self.address(i)


class ProfileTable(AddressNamed):
    headers = ("node", "op", "calls", "total ms", "mean ms", "output", "type")
    numeric_columns = frozenset({2, 3, 4, 5})
    _FIELDS = {1: "op_type", 2: "calls", 3: "seconds", 4: "mean_seconds", 5: "output_bytes"}

    def text(self, i: int, col: int) -> str:
        p: NodeProfile = self.items[i]
        if col == 0:
            return self.readable(i)
        if col == 1:
            return p.op_type
        if col == 2:
            return str(p.calls)
        if col == 3:
            return f"{p.seconds * 1000:.3f}"
        if col == 4:
            return f"{p.mean_seconds * 1000:.3f}"
        if col == 5:
            return fmt_bytes(p.output_bytes)
        return p.output_text

    def item_key(self, col: int) -> Callable[[Any], Any] | None:
        field = self._FIELDS.get(col)
        return attrgetter(field) if field is not None else None


class CompareTable(AddressNamed):
    """A comparison's nodes; a row beyond the tolerance (as set when it was filled) is
    red, and the peer's own note (onnxruntime is the inexact side) is every cell's
    tooltip."""

    headers = ("node", "op", "max abs", "max rel", "values")
    numeric_columns = frozenset({2, 3})

    def set_comparison(self, cmp: Comparison | None, atol: float, rtol: float) -> None:
        self.atol, self.rtol = atol, rtol
        self.set_items(cmp.nodes if cmp is not None else [])

    def text(self, i: int, col: int) -> str:
        n: NodeComparison = self.items[i]
        if col == 0:
            return self.readable(i)
        if col == 1:
            return n.op_type
        if col in (2, 3):
            x = n.max_abs if col == 2 else n.max_rel
            return "–" if x is None else f"{x:.3g}"
        return ", ".join(v.name for v in n.values)

    def key(self, i: int, col: int) -> Any:
        n: NodeComparison = self.items[i]
        if col == 2:
            return _number(n.max_abs)
        if col == 3:
            return _number(n.max_rel)
        return self.text(i, col) or None

    def tooltip(self, i: int, col: int) -> str | None:
        note = self.items[i].peer_note
        if note:  # the peer's number is the wrong one: say so
            return str(note)
        return super().tooltip(i, col)

    def red(self, i: int, col: int) -> bool:
        return bool(self.items[i].beyond(self.atol, self.rtol))


class DroppedTable(RowTable):
    headers = ("graph", "value", "size", "why")

    def __init__(self, address_text: Callable[[str], str], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.address_text = address_text

    def text(self, i: int, col: int) -> str:
        d: DroppedValue = self.items[i]
        if col == 0:
            return self.address_text(d.graph_path)
        if col == 1:
            return d.name
        if col == 2:
            return fmt_bytes(d.nbytes)
        return d.reason


# -- the views ---------------------------------------------------------------------------
def table_view(
    model: RowTable, sortable: bool = True, column: int = -1, order: Qt.SortOrder | None = None
) -> QTableView:
    """A view of ``model``: whole rows selected, long first cells elided in the middle;
    sorted by ``column`` (-1: the order given) until the user sorts."""
    t = QTableView()
    t.setModel(model)
    model.setParent(t)
    t.verticalHeader().hide()
    t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    t.horizontalHeader().setResizeContentsPrecision(64)  # fit columns to the first rows only
    t.horizontalHeader().setStretchLastSection(True)
    # torch's value names (/stages/stages.0/pw1/MatMul_output_0) are long at both ends
    t.setTextElideMode(Qt.TextElideMode.ElideMiddle)
    t.viewport().installEventFilter(_FirstColumnShare(t))
    if sortable:
        # (setSortingEnabled sorts by the indicator)
        t.horizontalHeader().setSortIndicator(column, order or Qt.SortOrder.AscendingOrder)
        t.setSortingEnabled(True)
    return t


def fit_columns(table: QTableView) -> None:
    """Columns fitted to the first rows' contents, the first one shared (new rows).
    The header's sort arrow is hidden meanwhile: shown, it widens every column's hint
    by its room, and the numbers pushed the last columns out of a narrow dock."""
    header = table.horizontalHeader()
    shown = header.isSortIndicatorShown()
    header.setSortIndicatorShown(False)
    # resizeColumnsToContents, with its hints kept for the share (asked twice, they
    # were 40 ms of a 100k-row table's fill: each asks 64 rows' data in every role)
    hints = _column_hints(table)
    for c, hint in enumerate(hints):
        header.resizeSection(c, hint)
    share_first_column(table, hints)
    header.setSortIndicatorShown(shown)


# Cells per column whose delegate is asked for its width: the widest texts by font
# metrics (a few, since a laid-out text can be a pixel wider than its advance says).
HINT_CANDIDATES = 3


def _column_hints(table: QTableView) -> list[int]:
    """Each column's width for its contents and its header: what resizeColumnToContents
    gives, over the rows it looks at (`_hint_rows`).  Qt asks the delegate of each of
    those rows' cells, eight data roles through Python and a text layout each: 20-30 ms
    for a 7-column table, a whole turn's budget at a run's end, and again on every
    resize of the viewport.  The cells' texts are measured by font metrics here and
    only the widest few are laid out by the delegate (``tests/ui/test_run_tables``
    checks the result against Qt's own)."""
    model = table.model()
    assert isinstance(model, RowTable)  # (a table_view's)
    header = table.horizontalHeader()
    columns = model.columnCount()
    rows = _hint_rows(table)
    width = table.fontMetrics().horizontalAdvance
    grid = 1 if table.showGrid() else 0
    hints = []
    for c in range(columns):
        hint = 0
        if rows:
            widest: dict[str, int] = {}
            for r in rows:
                widest.setdefault(model.cell_text(r, c), r)
            ranked = sorted(widest, key=width, reverse=True)[:HINT_CANDIDATES]
            hint = grid + max(
                table.sizeHintForIndex(model.index(widest[text], c)).width() for text in ranked
            )
        hints.append(max(hint, header.sectionSizeHint(c)))
    return hints


def _hint_rows(table: QTableView) -> list[int]:
    """The rows QTableView::sizeHintForColumn looks at: those shown, from the top one
    down, then alternately one below and one above them, up to the horizontal header's
    resize-contents precision (all rows when it is 0)."""
    n = table.model().rowCount()
    vertical = table.verticalHeader()
    most = table.horizontalHeader().resizeContentsPrecision()
    most = n if most <= 0 else min(most, n)
    top = max(0, vertical.visualIndexAt(0))
    bottom = vertical.visualIndexAt(table.viewport().height())
    if not table.isVisible() or bottom == -1:
        bottom = n - 1
    rows = list(range(top, min(bottom + 1, top + most)))
    above, below = top, top + len(rows)
    while len(rows) < most and (above > 0 or below < n):
        if (len(rows) % 2 and above > 0) or below >= n:
            above -= 1
            rows.append(above)
        else:
            rows.append(below)
            below += 1
    return rows


# The first column (a value's name, a node's address) gets at most this share of the
# width when the columns after it would not fit: they hold the numbers.
FIRST_COLUMN_SHARE = 0.45


def share_first_column(table: QTableView, hints: list[int] | None = None) -> None:
    """Shrink the first column, fitted to its names, so that the other columns fit
    the viewport (each at its content width, ``hints`` when already asked), but not
    below `FIRST_COLUMN_SHARE`; long names are elided in the middle with the whole name
    in their tooltip."""
    width = table.viewport().width()
    columns = table.model().columnCount()
    if width <= 0 or columns < 2:
        return
    hints = hints if hints is not None else _column_hints(table)
    others = sum(hints[1:])
    table.horizontalHeader().resizeSection(
        0, min(hints[0], max(int(width * FIRST_COLUMN_SHARE), width - others))
    )


class _FirstColumnShare(QObject):
    """Shares the width again when the table's viewport changes size (the dock is
    resized, or first shown after it was filled hidden)."""

    def __init__(self, table: QTableView) -> None:
        super().__init__(table)
        self.table = table

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize:
            share_first_column(self.table)
        return False
