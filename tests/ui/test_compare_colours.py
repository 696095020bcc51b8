"""Compare colouring (issue 18 item 6): a node's colour comes from the same
within/beyond test as the text (atol and rtol), a legend says what colours mean, and
the box text stays readable under the colour."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PySide6.QtGui import QColor

from onnxviz.runtime.compare import Comparison, NodeComparison, ValueDiff
from onnxviz.ui.run.compare_colours import BANDS, NEAR, band, compare_colour, usage

EXPORTERS = Path(__file__).resolve().parent.parent / "data" / "exporters"

_finite = st.floats(0, 1e3, allow_nan=False, allow_infinity=False)
_value = st.builds(
    ValueDiff,
    name=st.just("v"),
    max_abs=st.one_of(st.none(), _finite),
    max_rel=st.one_of(st.none(), _finite),
    ref_scale=_finite,
    shape_mismatch=st.one_of(st.none(), st.just(((1,), (2,)))),
    equal=st.one_of(st.none(), st.booleans()),
)
_node = st.builds(
    NodeComparison,
    address=st.just("main::n"),
    index=st.just(0),
    op_type=st.just("Add"),
    values=st.lists(_value, max_size=3),
)
_tol = st.floats(0, 1.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(nodes=st.lists(_node, min_size=1, max_size=6), atol=_tol, rtol=_tol)
def test_the_colour_says_what_the_text_says(nodes, atol: float, rtol: float) -> None:  # type: ignore[no-untyped-def]
    cmp = Comparison(peer="onnxruntime", nodes=nodes, outputs=[])
    text = cmp.summary(atol, rtol)
    bands = [band(n, atol, rtol) for n in nodes]
    for n, b in zip(nodes, bands):
        assert (b == "over") == n.beyond(atol, rtol)
        assert compare_colour(n, atol, rtol) == QColor(BANDS[b][0])
        used = usage(n, atol, rtol)
        if b in ("within", "near"):
            assert used is not None and used <= 1.0 or math.isclose(used or 0, 1.0)
            assert (b == "near") == (used is not None and used > NEAR)
    assert text.endswith("all within") == ("over" not in bands)


def test_equal_strings_are_within_and_missing_values_not_compared() -> None:
    same = NodeComparison("main::enc", 0, "LabelEncoder", [ValueDiff("s", equal=True)])
    differ = NodeComparison("main::enc", 0, "LabelEncoder", [ValueDiff("s", equal=False)])
    missing = NodeComparison("main::seq", 1, "SequenceConstruct", [ValueDiff("q")])
    assert [band(n, 1e-4, 1e-3) for n in (same, differ, missing)] == ["within", "over", "none"]


def test_atol_alone_decides_a_zero_reference() -> None:
    # the old colouring read max_rel / rtol only: a reference of zeros is then "over"
    # although |a - b| = 1e-6 is well within atol 1e-4
    n = NodeComparison("main::relu", 0, "Relu", [ValueDiff("r", 1e-6, math.inf, 0.0)])
    assert not n.beyond(1e-4, 1e-3)
    assert band(n, 1e-4, 1e-3) == "within"
    assert band(n, 1e-4, 0.0) == "within"
    assert band(n, 1.5e-6, 0.0) == "near"
    assert band(n, 0.5e-6, 0.0) == "over"


def _text_pixels(window, node) -> int:  # type: ignore[no-untyped-def]
    """Pixels of the box that stand out from its fill (its text): a contrast ratio of
    3 or more against the box's most common colour."""
    from collections import Counter

    from onnxviz.ui.canvas.items import luminance

    window.view.viewport().repaint()
    rect = window.view.mapFromScene(node.sceneBoundingRect()).boundingRect().adjusted(5, 5, -5, -5)
    image = window.view.viewport().grab(rect).toImage()
    colours = [
        image.pixelColor(x, y).rgb() for x in range(image.width()) for y in range(image.height())
    ]
    ground = luminance(QColor.fromRgb(Counter(colours).most_common(1)[0][0]))
    seen: dict[int, float] = {}
    count = 0
    for rgb in colours:
        lum = seen.get(rgb)
        if lum is None:
            lum = seen[rgb] = luminance(QColor.fromRgb(rgb))
        hi, lo = max(lum, ground), min(lum, ground)
        count += (hi + 0.05) / (lo + 0.05) >= 3.0
    return count


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("fill", [*(b[0] for b in BANDS.values()), "#ff2300", "#fff0a0"])
def test_coloured_boxes_keep_their_text_readable(window, fill: str, theme: str) -> None:  # type: ignore[no-untyped-def]
    window.theme.set_mode(theme)
    try:
        _check_contrast(window, fill)
    finally:
        window.theme.set_mode("light")  # the theme is the application's, not the window's


def _check_contrast(window, fill: str) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(str(EXPORTERS / "torch_dynamo_cnn.onnx"), background=False)
    window.view.actual_size()
    panel = window.run_panel
    panel.overlay.update(set(), None, set(), {}, {}, {})
    panel.overlay.make_marks()  # (a run would: nothing to mark makes none)
    key, mark = next(
        (k, m) for k, m in panel.overlay.marks.items() if m.parentItem().data_item.title == "Conv"
    )
    conv = mark.parentItem()
    window.view.centerOn(conv)
    plain = _text_pixels(window, conv)
    assert plain > 30  # the title and the weight rows
    panel.overlay.update(set(), None, set(), {key: QColor(fill)}, {}, {})
    coloured = _text_pixels(window, conv)
    assert coloured >= 0.7 * plain, (coloured, plain)  # (anti-aliased edges count less)


def test_the_compare_tab_shows_a_legend_that_follows_the_tolerance(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(str(EXPORTERS / "torch_dynamo_cnn.onnx"), background=False)
    widget = window.run_panel.widget
    window.run_dock.show()
    widget.tabs.setCurrentIndex(
        next(i for i in range(widget.tabs.count()) if widget.tabs.tabText(i) == "Compare")
    )
    legend = widget.compare_legend
    assert not legend.isVisible()
    widget.error_colours.setChecked(True)  # the user turns colouring on
    qtbot.waitUntil(legend.isVisible)
    texts = {k: legend.labels[k].text() for k in BANDS}
    assert texts == {k: b[2] for k, b in BANDS.items()}
    widget.atol.setValue(0.05)
    widget.rtol.setValue(0.25)
    assert "0.05 + 0.25·|b|" in legend.swatches["over"].toolTip()
    assert "0.05 + 0.25·|b|" in legend.labels["within"].toolTip()
    # the four swatches sit in the dock, not past its right edge
    right = max(legend.labels[k].geometry().right() for k in BANDS)
    assert right <= legend.width()


def test_a_scene_nobody_runs_gets_no_run_marks_until_a_run_has_something_to_show(window) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(str(EXPORTERS / "torch_dynamo_cnn.onnx"), background=False)
    overlay = window.run_panel.overlay
    overlay.update(set(), None, set(), {}, {}, {})
    assert overlay.marks == {}
    boxes = window.graph_scene.nodes
    conv = next(it for it in boxes.values() if it.data_item.title == "Conv")
    key = (conv.data_item.graph_path, conv.data_item.node_index)
    overlay.update({key}, None, set(), {}, {}, {})  # the Conv ran
    assert overlay.marks and overlay.marks[key].executed
    assert overlay.marks[key].parentItem() is conv
