"""Diagnostics and Run side by side in the bottom dock area: the Run dock's size hint
would take nearly all the width (Diagnostics then shows "Valu..."), so when both are
shown Diagnostics gets `SHARE` of the width back whenever it has under `LEAST`."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QMainWindow

BOTTOM = Qt.DockWidgetArea.BottomDockWidgetArea
# its messages need the width more than the run panel, whose buttons wrap
LEAST = 0.4
SHARE = 0.45


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

    for dock in (diagnostics, run):
        # after the dock layout has placed the newly shown dock
        dock.visibilityChanged.connect(lambda shown: shown and QTimer.singleShot(0, share))
