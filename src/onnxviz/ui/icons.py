"""Toolbar icons: our own small SVGs (resources/icons, found through `onnxviz.bundled`),
given to every toolbar action by what it does, with the action's name and shortcut in
the tooltip.

`decorate_toolbars(window)` covers the toolbars the window has and any added later
(the run panel adds its toolbar after the main one): it watches for new toolbars and
new actions, so an action gets its icon however and whenever it is added.  Menus keep
their text; toolbars show icons only (the text is in the tooltip)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, QTimer
from PySide6.QtGui import QAction, QActionEvent, QIcon, QKeySequence, QPalette, QPixmap
from PySide6.QtWidgets import QApplication, QMainWindow, QToolBar

from onnxviz import bundled

ICON_SIZE = 20
# action text (without '&' and '…') -> icon file (resources/icons/<name>.svg)
ICONS = {
    "Open": "open",
    "Save": "save",
    "Export Image": "export",
    "Zoom In": "zoom-in",
    "Zoom Out": "zoom-out",
    "Fit to Window": "fit",
    "Actual Size": "actual",
    "Back": "back",
    "Find": "find",
    "Run": "run",
    "Continue": "continue",
    "Step": "step",
    "Step Over": "step-over",
    "Step Out": "step-out",
    "Pause": "pause",
    "Stop": "stop",
    "Toggle Breakpoint": "breakpoint",
}

# The icons' neutral ink (outlines of folders, magnifiers, arrows); the coloured parts
# (run green, breakpoint red) read on both themes.  On a dark palette this slate is
# nearly the toolbar's colour, so it is swapped for `DARK_INK` there.
INK = "#4a5566"
DARK_INK = "#c9d0da"

_CACHE: dict[tuple[str, str], QIcon] = {}


def ink() -> str:
    """The neutral ink for the application's palette: `INK`, or `DARK_INK` on a dark
    window colour."""
    app = QApplication.instance()
    palette = app.palette() if isinstance(app, QApplication) else None
    dark = palette is not None and palette.color(QPalette.ColorRole.Window).lightness() < 128
    return DARK_INK if dark else INK


def plain_text(action: QAction) -> str:
    return action.text().replace("&", "").replace("…", "").replace("...", "").strip()


def icon(name: str, colour: str = INK) -> QIcon:
    """The icon ``resources/icons/<name>.svg`` drawn with ``colour`` as its neutral ink
    (an empty icon if the file is missing)."""
    found = _CACHE.get((name, colour))
    if found is None:
        found = QIcon()
        data = b""
        # the bundled files, else a source checkout's resources/ (an editable install
        # of another checkout can own the package name)
        for folder in (bundled.root, lambda: bundled.CHECKOUT):
            try:
                data = (folder() / "icons" / f"{name}.svg").read_bytes()
                data = data.replace(INK.encode(), colour.encode())
                break
            except OSError:  # FileNotFoundError too: no bundled files at all
                continue
        for size in (16, ICON_SIZE, 24, 32, 48):
            pixmap = QPixmap(size, size)
            if data and pixmap.loadFromData(data, "SVG"):
                found.addPixmap(pixmap.scaled(size, size))
        _CACHE[(name, colour)] = found
    return found


def tooltip(action: QAction) -> str:
    """What the action does, and its shortcut: "Zoom In (Ctrl++)"."""
    text = action.toolTip() or plain_text(action)
    if text.replace("&", "") == action.text().replace("&", ""):
        text = plain_text(action)
    keys = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
    if keys and keys not in text:
        text += f" ({keys})"
    return text


def decorate(action: QAction, recolour: bool = False) -> None:
    """Our icon on a toolbar action that has none (``recolour``: also on one that has
    ours, in the ink of the palette now: the theme changed)."""
    name = ICONS.get(plain_text(action))
    if name is not None and (action.icon().isNull() or recolour):
        action.setIcon(icon(name, ink()))
    action.setToolTip(tooltip(action))


class _Watcher(QObject):
    """Decorates toolbars as they appear and actions as they are added to them."""

    def __init__(self, window: QMainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.seen: set[int] = set()
        window.installEventFilter(self)
        for bar in window.findChildren(QToolBar):
            self.adopt(bar)

    def rescan(self) -> None:
        for bar in self.window.findChildren(QToolBar):
            self.adopt(bar)

    def adopt(self, bar: QToolBar) -> None:
        if id(bar) in self.seen:
            return
        self.seen.add(id(bar))
        bar.setIconSize(QSize(ICON_SIZE, ICON_SIZE))
        for action in bar.actions():
            decorate(action)
        bar.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.ChildAdded and watched is self.window:
            # a toolbar is added while it is still being built (not yet a QToolBar
            # here): look once the event loop is back
            QTimer.singleShot(0, self.rescan)
        elif kind == QEvent.Type.ChildPolished and watched is self.window:
            child = event.child()  # type: ignore[attr-defined]
            if isinstance(child, QToolBar):
                self.adopt(child)
        elif kind == QEvent.Type.PaletteChange and watched is self.window:
            # light <-> dark: the outlines take the new palette's ink
            for bar in self.window.findChildren(QToolBar):
                for each in bar.actions():
                    decorate(each, recolour=True)
        elif kind == QEvent.Type.ActionAdded and isinstance(watched, QToolBar):
            action = event.action() if isinstance(event, QActionEvent) else None
            if action is not None:
                decorate(action)
        return False


def decorate_toolbars(window: QMainWindow) -> QObject:
    """Icons and tooltips on every toolbar of ``window``, now and later."""
    return _Watcher(window)
