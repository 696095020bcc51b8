"""The Run dock's table models (ui/run/run_tables.py): what a user sees in the cells,
sorting by number with blanks last, sorts of big tables spread over turns of the event
loop, per-value statistics worked out only for the rows shown."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PySide6.QtCore import QItemSelectionModel, Qt, QTimer

from onnxviz.runtime.compare import Comparison, NodeComparison, ValueDiff
from onnxviz.runtime.profile import NodeProfile
from onnxviz.ui.run import run_tables
from onnxviz.ui.run.run_tables import (
    ProfileTable,
    ValuesTable,
    fit_columns,
    ordered_rows,
    table_view,
)
from tests.ui.tables import cell_is_red, cell_text, cell_tooltip, column, row_count

pytestmark = pytest.mark.qt


def _reference(keys: list[float | None], descending: bool) -> list[int]:
    """The plain stepped order: present keys sorted (stable), then blanks in order."""
    present = [i for i, k in enumerate(keys) if k is not None and not math.isnan(k)]
    present = sorted(present, key=lambda i: keys[i], reverse=descending)
    return present + [i for i in range(len(keys)) if i not in set(present)]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.sampled_from([0.0, 1.0, -2.5, math.inf]),  # ties and infinities
            st.floats(allow_nan=True, width=64),
            st.integers(-1000, 1000).map(float),
        ),
        max_size=60,
    ),
    st.booleans(),
)
def test_numpy_order_equals_the_plain_sort(keys: list[float | None], descending: bool) -> None:
    """The numpy path (numeric columns) against a plain stable sort: same rows, same
    order of ties, blanks (None, NaN) last either way."""
    assert ordered_rows(keys, descending, numeric=True) == _reference(keys, descending)
    plain = [None if k is not None and math.isnan(k) else k for k in keys]
    assert ordered_rows(plain, descending) == _reference(keys, descending)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "B", "ab", ""])), max_size=40),
    st.booleans(),
    st.integers(1, 7),
)
def test_names_sorted_in_runs_keep_the_order_of_a_plain_sort(
    keys: list[str | None], descending: bool, run_rows: int
) -> None:
    """A big table's names are sorted in runs merged pairwise, a step per turn: the
    same order as one stable sort (ties in their given order, blanks last), whatever
    the run length and the number of runs (odd ones carried to the next level)."""
    present = [i for i, k in enumerate(keys) if k is not None]
    expected = sorted(present, key=keys.__getitem__, reverse=descending)
    expected += [i for i, k in enumerate(keys) if k is None]
    real = run_tables.SORT_RUN_ROWS
    run_tables.SORT_RUN_ROWS = run_rows
    try:
        steps = run_tables.ordered_rows_steps(keys, descending)
        runs = -(-len(present) // run_rows)
        taken = 0
        while True:
            try:
                next(steps)
                taken += 1
            except StopIteration as done:
                assert done.value == expected
                break
    finally:
        run_tables.SORT_RUN_ROWS = real
    # a step per run and per merge (n - 1 merges of n runs), none for a single run
    assert taken == (0 if runs <= 1 else runs + runs - 1)


def _profile_rows(n: int, seed: int = 0) -> list[NodeProfile]:
    rng = np.random.default_rng(seed)
    secs = rng.random(n) * 1e-3
    secs[::7] = secs[3]  # ties
    return [
        NodeProfile(f"main::n{i}", ("Add", "MatMul")[i % 2], "main", i, 1 + i % 3, float(s), i)
        for i, s in enumerate(secs)
    ]


def test_profile_sorts_by_number_and_keeps_the_selected_row(qtbot) -> None:  # type: ignore[no-untyped-def]
    model = ProfileTable(lambda a: a.replace("main::", "main > "))
    view = table_view(model)
    qtbot.addWidget(view)
    rows = _profile_rows(300)
    view.horizontalHeader().setSortIndicator(3, Qt.SortOrder.DescendingOrder)
    model.set_items(rows)
    # slowest first, the text as the reader names it, the raw address in the tooltip
    expected = sorted(rows, key=lambda p: p.seconds, reverse=True)
    assert column(view, 3) == [f"{p.seconds * 1000:.3f}" for p in expected]
    assert cell_text(view, 0, 0) == expected[0].address.replace("main::", "main > ")
    assert cell_tooltip(view, 0, 0) == expected[0].address
    # the user picks a row, then sorts by calls (a number: 10 after 9, not before 2)
    target = 17
    view.selectionModel().setCurrentIndex(
        model.index(target, 0),
        QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows,
    )
    picked = model.item_at(target).address
    view.sortByColumn(2, Qt.SortOrder.AscendingOrder)
    assert [model.item_at(r).calls for r in range(len(rows))] == sorted(p.calls for p in rows)
    current = view.currentIndex().row()
    assert model.item_at(current).address == picked
    assert [ix.row() for ix in view.selectionModel().selectedRows()] == [current]
    # the same rows again (a new run): still sorted by the user's column
    model.set_items(list(reversed(rows)))
    assert [model.item_at(r).calls for r in range(len(rows))] == sorted(p.calls for p in rows)


def test_a_big_sort_goes_on_over_turns_and_a_newer_one_wins(qtbot, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(run_tables, "SORT_SLICE_SECONDS", 0.0)  # one slice per turn
    monkeypatch.setattr(run_tables, "BIG_TABLE_ROWS", 10)
    model = ValuesTable()
    view = table_view(model)
    qtbot.addWidget(view)
    rng = np.random.default_rng(1)
    values = {f"v{i}": rng.standard_normal(4).astype(np.float32) for i in range(2000)}
    values["text"] = np.array(["a"], dtype=object)  # no statistics: a blank min
    model.set_items(list(values.items()))
    view.sortByColumn(2, Qt.SortOrder.AscendingOrder)
    assert model.sorting
    assert column(view)[:3] == ["v0", "v1", "v2"]  # the order given until the keys are in
    qtbot.waitUntil(lambda: not model.sorting, timeout=10_000)
    by_min = sorted((k for k in values if k != "text"), key=lambda k: float(values[k].min()))
    assert column(view) == [*by_min, "text"]
    assert float(cell_text(view, 0, 2)) == pytest.approx(float(values[by_min[0]].min()), 1e-3)
    # a sort asked while another gathers its keys: the newer one is what shows
    view.sortByColumn(3, Qt.SortOrder.DescendingOrder)
    assert model.sorting
    view.sortByColumn(0, Qt.SortOrder.DescendingOrder)
    qtbot.waitUntil(lambda: not model.sorting, timeout=10_000)
    qtbot.wait(20)
    assert column(view) == sorted(values, reverse=True)


def test_statistics_are_worked_out_for_the_rows_shown_only(qtbot, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen: list[int] = []
    real = run_tables.value_stats
    monkeypatch.setattr(run_tables, "value_stats", lambda v: seen.append(1) or real(v))
    model = ValuesTable()
    view = table_view(model)
    qtbot.addWidget(view)
    view.resize(500, 300)
    view.show()
    values = {f"v{i}": np.full(3, float(i), np.float32) for i in range(20_000)}
    values["v5"] = np.array([np.nan, 1.0, np.inf, np.nan], np.float32)
    model.set_items(list(values.items()))
    fit_columns(view)
    qtbot.wait(30)  # painted
    assert row_count(view) == 20_001 - 1
    assert 0 < len(seen) < 200  # the visible rows and the ones the columns were fitted to
    # a NaN/Inf count is red, with the finite min and max next to it
    assert [cell_text(view, 5, c) for c in range(5)] == ["v5", "float32[4]", "1", "1", "2/1"]
    assert cell_is_red(view, 5, 4) and not cell_is_red(view, 4, 4) and not cell_is_red(view, 5, 2)
    count = len(seen)
    for _ in range(3):
        cell_text(view, 5, 2)
    assert len(seen) == count  # kept, not worked out again


_CELL_TEXT = st.text(
    alphabet=st.sampled_from(list("aAiIlW1m0.9_/:- ") + ["日", "本", "ß", "é", "→"]), max_size=40
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.tuples(_CELL_TEXT, _CELL_TEXT, _CELL_TEXT), max_size=150),
    st.integers(80, 700),
    st.integers(0, 149),
    st.booleans(),
)
# scrolled far below the first rows, to the only long name
@example([("n", "op", "f")] * 140 + [("a much longer name " * 2, "op", "f")] * 10, 200, 145, True)
def test_fitted_columns_are_as_wide_as_qts_own_fit(  # type: ignore[no-untyped-def]
    qtbot, rows, height, scrolled_to, shown
) -> None:
    """The fast column fit (font metrics pick the widest texts; only those are laid
    out) gives Qt's own resizeColumnToContents widths, over the same rows (the shown
    ones, then alternately below and above, up to the header's precision), scrolled
    or not, shown or hidden."""
    model = ProfileTable(lambda address: address.split("::", 1)[-1])
    model.set_items(
        NodeProfile(f"main::{name}", op, "main", i, i % 7, i * 1.2345e-4, 10**i, shapes)
        for i, (name, op, shapes) in enumerate(rows)
    )
    view = table_view(model)
    qtbot.addWidget(view)
    view.resize(600, height)
    if shown:
        view.show()
        qtbot.wait(1)
    if rows:
        view.scrollTo(model.index(min(scrolled_to, len(rows) - 1), 0))
    header = view.horizontalHeader()
    qts = [max(view.sizeHintForColumn(c), header.sectionSizeHint(c)) for c in range(7)]
    assert run_tables._column_hints(view) == qts


def test_fitting_columns_lays_out_a_few_cells_not_every_row_shown(qtbot) -> None:  # type: ignore[no-untyped-def]
    """At a run's end the tables are fitted to their first rows in a turn of the event
    loop (and again on every resize): Qt laid out each of 64 rows' cells, 20-30 ms for
    the profile table; the fit asks the data of each cell once and the delegate for a
    few per column."""
    asked: list[int] = []

    class Counted(ProfileTable):
        def data(self, index, role=Qt.ItemDataRole.DisplayRole):  # type: ignore[no-untyped-def]
            asked.append(role)
            return super().data(index, role)

    model = Counted(lambda address: address)
    model.set_items(
        NodeProfile(f"main::/layers.{i}/MatMul", "MatMul", "main", i, 1, 1e-3, 4096, "float32[8]")
        for i in range(5_000)
    )
    view = table_view(model)
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.show()
    qtbot.wait(10)
    asked.clear()
    hints = run_tables._column_hints(view)
    assert hints[0] > hints[1]  # the names are the widest
    # Qt's own fit asks 8 roles of 64 rows x 7 columns (3,584 calls); here the delegate
    # lays out at most `HINT_CANDIDATES` cells a column
    assert 0 < len(asked) <= 7 * run_tables.HINT_CANDIDATES * 8


def _comparison() -> Comparison:
    def node(i: int, abs_: float | None, note: str = "") -> NodeComparison:
        values = [] if abs_ is None else [ValueDiff(f"y{i}", abs_, abs_ / 10, ref_scale=1.0)]
        return NodeComparison(f"main::n{i}", i, "Add", values, note)

    nodes = [node(0, 1e-6), node(1, 0.5), node(2, None), node(3, 2e-3, "onnxruntime saturates")]
    return Comparison(peer="onnxruntime", nodes=nodes, outputs=[])


def test_compare_keeps_graph_order_until_sorted_and_marks_what_is_beyond(qtbot) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.run.run_panel_widget import RunPanelWidget

    widget = RunPanelWidget([])
    qtbot.addWidget(widget)
    cmp = _comparison()
    widget.set_comparison(cmp, "compared")
    table = widget.compare
    assert column(table) == ["main::n0", "main::n1", "main::n2", "main::n3"]
    atol, rtol = widget.atol.value(), widget.rtol.value()
    for r, n in enumerate(cmp.nodes):
        assert all(cell_is_red(table, r, c) == n.beyond(atol, rtol) for c in range(5))
    assert cell_text(table, 2, 2) == "–"
    assert cell_tooltip(table, 3, 4) == "onnxruntime saturates"  # every cell of that row
    assert cell_tooltip(table, 1, 0) == "main::n1"
    table.sortByColumn(2, Qt.SortOrder.DescendingOrder)
    assert column(table) == ["main::n1", "main::n3", "main::n0", "main::n2"]  # "–" last
    widget.set_comparison(cmp, "again")  # a new comparison: graph order again
    assert column(table) == ["main::n0", "main::n1", "main::n2", "main::n3"]
    assert table.horizontalHeader().sortIndicatorSection() == -1


def test_values_open_sorted_by_name_as_before_and_a_double_click_inspects(qtbot) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.run.run_panel_widget import RunPanelWidget
    from tests.ui.tables import double_click

    widget = RunPanelWidget([])
    qtbot.addWidget(widget)
    widget.resize(900, 400)
    widget.show()
    widget.set_stack(["main"], 0)
    names = ["/model/b", "a", "hidden_states", "/model/a", "z"]
    widget.set_values({n: np.zeros(2, np.float32) for n in names})
    assert column(widget.values) == sorted(names, reverse=True)  # Qt's first indicator
    asked: list[tuple[int, str]] = []
    widget.valueActivated.connect(lambda frame, name: asked.append((frame, name)))
    double_click(qtbot, widget.values, 1, 2)
    assert asked == [(0, sorted(names, reverse=True)[1])]


class _Row:
    """A profiled node that can be watched (weak references) while the table lets go."""

    def __init__(self, i: int) -> None:
        self.address, self.op_type, self.calls = f"main::n{i}", "Relu", 1
        self.seconds = self.mean_seconds = float(i % 17)
        self.output_bytes, self.output_text = i, "float32[1]"


def test_big_rows_come_next_turn_the_latest_wins_and_old_ones_go_in_slices(
    qtbot, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    import weakref

    monkeypatch.setattr(run_tables, "BIG_TABLE_ROWS", 5)
    monkeypatch.setattr(run_tables, "RELEASE_ROWS", 10)
    model = ProfileTable(str)
    view = table_view(model, column=3, order=Qt.SortOrder.DescendingOrder)
    qtbot.addWidget(view)
    first = [_Row(i) for i in range(100)]
    model.set_items(first, later=True)
    assert model.filling and not model.settled and row_count(view) == 0  # next turn
    qtbot.waitUntil(lambda: model.settled, timeout=5_000)
    assert row_count(view) == 100
    assert [model.item_at(r).seconds for r in range(100)] == sorted(
        (r.seconds for r in first), reverse=True
    )
    watched = [weakref.ref(r) for r in first]
    del first
    second = [_Row(i) for i in range(200, 260)]
    counts: list[int] = []  # the old rows alive, at every turn
    ticks = QTimer()
    ticks.setInterval(0)
    ticks.timeout.connect(lambda: counts.append(sum(r() is not None for r in watched)))
    model.set_items([_Row(i) for i in range(900, 1000)], later=True)
    with qtbot.waitSignal(model.filled, timeout=5_000):
        model.set_items(second, later=True)  # asked again before the first came in: this
    assert sum(r() is not None for r in watched) == 100  # none freed in the filling turn
    ticks.start()
    qtbot.waitUntil(lambda: model.settled and not any(r() for r in watched), timeout=5_000)
    ticks.stop()
    assert sorted(column(view)) == sorted(r.address for r in second)
    assert any(0 < c < 100 for c in counts)  # a slice at a time


def test_rows_made_by_a_function_are_made_in_a_later_turn_unless_replaced(qtbot) -> None:  # type: ignore[no-untyped-def]
    model = ValuesTable()
    view = table_view(model)
    qtbot.addWidget(view)
    made: list[str] = []

    def rows(tag: str):  # type: ignore[no-untyped-def]
        def make():  # type: ignore[no-untyped-def]
            made.append(tag)
            return [(f"{tag}{i}", np.zeros(1)) for i in range(3)]

        return make

    model.set_items(rows("old"), later=True)
    model.set_items(rows("new"), later=True)
    assert not made and model.filling  # nothing gathered in the asking turn
    qtbot.waitUntil(lambda: model.settled, timeout=5_000)
    assert made == ["new"] and sorted(column(view)) == ["new0", "new1", "new2"]
    model.set_items(rows("late"), later=True)
    model.set_items({"x": np.zeros(1)}.items())  # small rows given at once win
    qtbot.wait(50)
    assert made == ["new"] and column(view) == ["x"]


@pytest.mark.parametrize("total", [0, 7, 30, 31])
def test_rows_from_a_function_are_listed_a_slice_a_turn_all_of_them_in_order(  # type: ignore[no-untyped-def]
    qtbot, monkeypatch, total
) -> None:
    """A finished run's 50k values listed in one turn were 10-18 ms of a 100 ms budget:
    rows made by a function are listed `LIST_ROWS` a turn (a listing that ends on a
    whole slice ends too), and a newer fill abandons a listing under way."""
    monkeypatch.setattr(run_tables, "LIST_ROWS", 10)
    monkeypatch.setattr(run_tables, "BIG_TABLE_ROWS", 5)
    model = ValuesTable()
    view = table_view(model, column=-1)
    qtbot.addWidget(view)
    made: list[int] = []  # rows made, at each turn of the queue

    def rows():  # type: ignore[no-untyped-def]
        for i in range(total):
            made.append(i)
            yield (f"v{i}", np.float32(i))

    turns: list[int] = []  # rows made so far, at every pass of the event loop
    ticks = QTimer()
    ticks.setInterval(0)
    ticks.timeout.connect(lambda: turns.append(len(made)))
    ticks.start()
    model.set_items(rows, later=True)
    qtbot.waitUntil(lambda: model.settled, timeout=5_000)
    ticks.stop()
    assert column(view) == [f"v{i}" for i in range(total)]
    # never more than a slice made in one pass
    steps = [b - a for a, b in zip(turns, turns[1:], strict=False)]
    assert max(steps, default=0) <= 10 and (total < 11 or steps.count(10) >= total // 10)

    # a newer fill while a listing is under way: only the newer rows show
    made.clear()
    model.set_items(rows, later=True)
    qtbot.waitUntil(lambda: len(made) >= min(total, 10), timeout=5_000)
    model.set_items([("only", np.float32(1))])
    qtbot.wait(50)
    assert column(view) == ["only"] and model.settled
