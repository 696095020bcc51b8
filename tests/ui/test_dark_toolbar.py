"""Toolbar icons on the dark theme (issue 18, item 18, tried again): their slate
outlines were nearly the dark toolbar's colour, so enabled actions (Open, Save, Zoom)
looked fainter than disabled ones.  The outlines take an ink that reads on each theme."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QIcon, QPalette
from PySide6.QtWidgets import QApplication, QToolBar

pytestmark = pytest.mark.qt


def _luminance(c: QColor) -> float:
    def lin(v: float) -> float:
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    return 0.2126 * lin(c.redF()) + 0.7152 * lin(c.greenF()) + 0.0722 * lin(c.blueF())


def _ink_contrast(action_icon: QIcon, background: QColor) -> float:
    """WCAG contrast of the icon's strongest opaque pixels against the background."""
    image = action_icon.pixmap(20, 20, QIcon.Mode.Normal).toImage()
    inks = [
        image.pixelColor(x, y)
        for x in range(image.width())
        for y in range(image.height())
        if image.pixelColor(x, y).alpha() > 200
    ]
    assert inks
    bg = _luminance(background)
    far = max((_luminance(c) for c in inks), key=lambda v: abs(v - bg))
    hi, lo = max(far, bg), min(far, bg)
    return (hi + 0.05) / (lo + 0.05)


def _toolbar_action(window, text: str):  # type: ignore[no-untyped-def]
    from onnxviz.ui.icons import plain_text

    bar = next(b for b in window.findChildren(QToolBar) if b.objectName() == "toolbar.main")
    return next(a for a in bar.actions() if plain_text(a) == text)


@pytest.mark.parametrize("text", ["Open", "Save", "Zoom In", "Find"])
def test_toolbar_outlines_read_on_the_dark_and_the_light_theme(window, qtbot, text: str) -> None:  # type: ignore[no-untyped-def]
    try:
        window.theme.set_mode("dark")  # View > Theme > Dark
        qtbot.wait(10)
        toolbar = QApplication.palette().color(QPalette.ColorRole.Window)
        assert toolbar.lightness() < 128
        assert _ink_contrast(_toolbar_action(window, text).icon(), toolbar) >= 4.5
        window.theme.set_mode("light")
        qtbot.wait(10)
        toolbar = QApplication.palette().color(QPalette.ColorRole.Window)
        assert toolbar.lightness() > 128
        assert _ink_contrast(_toolbar_action(window, text).icon(), toolbar) >= 4.5
    finally:
        window.theme.set_mode("system")
