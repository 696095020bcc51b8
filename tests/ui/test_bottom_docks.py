"""Diagnostics next to the Run dock on a small screen (issue 18 item 8's leftover): the
run buttons wrap instead of widening the Run dock, and Diagnostics gets its share."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QPushButton, QToolButton, QWidget

from onnxviz.ui.flow_layout import FlowLayout

pytestmark = pytest.mark.qt

EXAMPLES = Path(__file__).resolve().parents[2] / "resources" / "examples"


def _buttons(qtbot, count: int) -> tuple[QWidget, list[QPushButton]]:  # type: ignore[no-untyped-def]
    host = QWidget()
    qtbot.addWidget(host)
    flow = FlowLayout(host)
    buttons = [QPushButton(f"button number {k}") for k in range(count)]
    for k, button in enumerate(buttons):
        if k == 3:
            flow.addSpacing(8)
        flow.addWidget(button)
    host.show()
    return host, buttons


def test_flow_layout_wraps_buttons_into_lines_that_fit(qtbot) -> None:  # type: ignore[no-untyped-def]
    host, buttons = _buttons(qtbot, 6)
    flow = host.layout()
    widest = max(b.sizeHint().width() for b in buttons)
    assert flow.minimumSize().width() == widest  # as narrow as one button
    one_line = flow.sizeHint().width()
    host.resize(one_line, 40)
    qtbot.waitUntil(lambda: buttons[-1].geometry().right() < host.width())
    assert len({b.y() for b in buttons}) == 1
    # narrower: several lines, each button whole and inside, none overlapping
    narrow = one_line // 2
    host.resize(narrow, 200)
    qtbot.waitUntil(lambda: len({b.y() for b in buttons}) > 1)
    for b in buttons:
        assert b.geometry().right() < narrow and b.width() == b.sizeHint().width()
    rects = [b.geometry() for b in buttons]
    assert not any(a.intersects(c) for i, a in enumerate(rects) for c in rects[i + 1 :])
    # the host is asked to be as tall as its lines
    lines = len({b.y() for b in buttons})
    assert flow.minimumSize().height() >= lines * buttons[0].sizeHint().height()


def test_diagnostics_and_run_share_the_bottom_at_1024(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    window.resize(1024, 640)
    window.files.open_path(str(EXAMPLES / "small_cnn.onnx"), background=False)
    window.diagnostics_dock.show()
    window.run_dock.show()
    diagnostics, run = window.diagnostics_dock, window.run_dock
    qtbot.waitUntil(lambda: diagnostics.width() >= 0.4 * (diagnostics.width() + run.width()))
    assert diagnostics.y() == run.y()  # side by side
    # every run button stays whole and reachable inside the narrower Run dock
    panel = window.run_panel.widget
    for button in panel.findChildren(QToolButton):
        if button.isVisible() and button.parent() is panel:
            right = button.mapTo(panel, button.rect().bottomRight()).x()
            assert right < panel.width(), button.defaultAction().text()
    # the message column has room for words, not "Valu..."
    tree = diagnostics.tree
    assert tree.header().sectionSize(2) >= 0.5 * tree.viewport().width() >= 150
