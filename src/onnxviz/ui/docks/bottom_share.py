"""Diagnostics and Run side by side in the bottom dock area: the Run dock's size hint
would take nearly all the width (Diagnostics then shows "Valu..."), so when both are
shown Diagnostics gets `SHARE` of the width back whenever it has under `LEAST`.

Its size hint would also take most of the height of a small window (443 of 720 px,
leaving the canvas 190 px), so a bottom dock that appears taller than `MOST_HEIGHT`
of the window is brought down to `HEIGHT_SHARE` (or to its minimum, if more)."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QMainWindow

BOTTOM = Qt.DockWidgetArea.BottomDockWidgetArea
# its messages need the width more than the run panel, whose buttons wrap
LEAST = 0.4
SHARE = 0.45
# the canvas keeps most of the height: the bottom docks list and scroll
MOST_HEIGHT = 0.5
HEIGHT_SHARE = 0.38


def keep_bottom_share(window: QMainWindow, diagnostics: QDockWidget, run: QDockWidget) -> None:
    """From now on, showing either dock next to the other shares the bottom area."""

    def share() -> None:
        side_by_side = all(
            d.isVisible() and not d.isFloating() and window.dockWidgetArea(d) == BOTTOM
            for d in (diagnostics, run)
        ) and not window.tabifiedDockWidgets(run)
        if not side_by_side:
            return
        total = diagnostics.width() + run.width()
        if diagnostics.width() < LEAST * total:
            part = int(total * SHARE)
            window.resizeDocks([diagnostics, run], [part, total - part], Qt.Orientation.Horizontal)

    def keep_canvas_height(dock: QDockWidget) -> None:
        if not dock.isVisible() or dock.isFloating() or window.dockWidgetArea(dock) != BOTTOM:
            return
        height = window.height()
        if dock.height() > MOST_HEIGHT * height:
            window.resizeDocks([dock], [int(HEIGHT_SHARE * height)], Qt.Orientation.Vertical)

    def placed(dock: QDockWidget) -> None:
        keep_canvas_height(dock)
        share()

    for dock in (diagnostics, run):
        # after the dock layout has placed the newly shown dock
        dock.visibilityChanged.connect(
            lambda shown, d=dock: shown and QTimer.singleShot(0, lambda: placed(d))
        )
