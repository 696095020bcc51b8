"""The tensor inspector: statistics, histogram, heatmap slices, channel grid, table,
structured values, export."""

from __future__ import annotations

import numpy as np
import pytest

from onnxviz.ui.inspector import InspectorDock
from onnxviz.ui.inspector.stats import channel_grid, histogram, slice_2d, summarize, table_page

pytestmark = pytest.mark.qt


def test_summary_counts_nan_inf_and_ignores_them_in_stats() -> None:
    a = np.array([1.0, 3.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    s = summarize(a)
    assert (s.nan, s.inf, s.zeros) == (1, 2, 1)
    assert (s.min, s.max, s.mean) == (0.0, 3.0, pytest.approx(4 / 3))
    counts, edges = histogram(a, bins=3)
    assert counts.sum() == 3 and edges[0] == 0.0 and edges[-1] == 3.0
    assert not summarize(np.array(["a"], dtype=object)).numeric


def test_slice_and_table_pages() -> None:
    a = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    np.testing.assert_array_equal(slice_2d(a, 1, 2, {0: 1}), a[1])
    np.testing.assert_array_equal(slice_2d(a, 2, 0, {1: 2}), a[:, 2, :].T)
    rows = table_page(a, 1, 10)
    assert rows[0] == ("[0,2,2]", "10") and len(rows) == 10
    assert len(table_page(a, 2, 10)) == 4 and table_page(a, 3, 10) == []


def test_channel_grid_tiles_each_channel() -> None:
    a = np.zeros((1, 5, 4, 4), np.float32)
    a[0, :, 0, 0] = 1.0  # a bright top-left pixel in every channel
    img, cols, shown = channel_grid(a, gap=1)
    assert (cols, shown) == (3, 5)
    assert img.shape == (2 * 5 - 1, 3 * 5 - 1, 3)
    bright = img[0, 0].tolist()
    for k in range(5):
        r, c = divmod(k, 3)
        assert img[r * 5, c * 5].tolist() == bright
        assert img[r * 5 + 1, c * 5 + 1].tolist() != bright


def test_inspector_shows_tensor_and_exports(qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    dock = InspectorDock()
    qtbot.addWidget(dock)
    a = np.random.default_rng(0).standard_normal((1, 8, 6, 5)).astype(np.float32)
    a[0, 2, 1, 1] = np.nan
    dock.show_value("conv", a)
    ins = dock.inspector
    assert "NaN 1" in ins.header.text() and "1×8×6×5" in ins.header.text()
    assert ins.hist.counts.sum() == a.size - 1
    assert ins.tabs.isTabEnabled(2)
    # heatmap: rows axis 2, columns axis 3, sliders for axes 0 and 1
    assert set(ins.sliders) == {0, 1}
    ins.sliders[1].setValue(2)
    np.testing.assert_array_equal(ins.heatmap_plane(), a[0, 2])
    ins.row_axis.setCurrentIndex(1)  # rows: channels
    assert set(ins.sliders) == {0, 2}
    assert ins.heatmap_plane().shape == (8, 5)
    assert ins.heat_label.pixmap() is not None and not ins.heat_label.pixmap().isNull()
    assert not ins.channels_label.pixmap().isNull()
    assert ins.table.rowCount() == 200 and ins.page_spin.maximum() == 1
    ins.page_spin.setValue(1)
    assert ins.table.rowCount() == a.size - 200
    path = str(tmp_path / "out.npy")
    ins.export(path)
    np.testing.assert_array_equal(np.load(path), a)


def test_inspector_browses_sequences_maps_optionals(qtbot) -> None:  # type: ignore[no-untyped-def]
    dock = InspectorDock()
    qtbot.addWidget(dock)
    value = [np.arange(3), {7: np.ones((2, 2))}, None]
    dock.show_value("seq", value)
    ins = dock.inspector
    assert not ins.tree.isHidden()
    root = ins.tree.topLevelItem(0)
    assert root.childCount() == 3
    ins.tree.setCurrentItem(root.child(0))
    np.testing.assert_array_equal(ins.array, np.arange(3))
    ins.tree.setCurrentItem(root.child(1).child(0))
    np.testing.assert_array_equal(ins.array, np.ones((2, 2)))
    ins.tree.setCurrentItem(root.child(2))
    assert ins.array is None and "empty optional" in ins.header.text()
    assert not ins.tabs.isTabEnabled(2) or ins.array is None


def test_string_tensor_shows_in_table(qtbot) -> None:  # type: ignore[no-untyped-def]
    dock = InspectorDock()
    qtbot.addWidget(dock)
    dock.show_value("s", np.array(["a", "b"], dtype=object))
    ins = dock.inspector
    assert ins.table.item(1, 1).text() == "b"
    assert "string" in ins.header.text()
