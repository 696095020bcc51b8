"""Colours and fonts of the canvas, light and dark.  "system" follows the platform's
colour scheme (Qt 6.5+ style hints)."""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QGuiApplication, QPalette

from onnxviz.model.text import as_text

TITLE_PX = 12
TEXT_PX = 11


@dataclass(frozen=True)
class Theme:
    name: str
    background: QColor
    text: QColor
    muted: QColor
    node_border: QColor
    edge: QColor
    edge_label: QColor
    highlight: QColor
    selection: QColor
    group_fill: QColor
    group_border: QColor
    frame_fill: QColor
    input_fill: QColor
    output_fill: QColor
    outer_fill: QColor
    categories: dict[str, QColor] = field(default_factory=dict)

    def category(self, name: str) -> QColor:
        return self.categories.get(name, self.categories["other"])


def _c(hex_: str, alpha: int = 255) -> QColor:
    c = QColor(hex_)
    c.setAlpha(alpha)
    return c


LIGHT = Theme(
    name="light",
    background=_c("#fbfbfb"),
    text=_c("#1d1d1f"),
    muted=_c("#5a5f66"),
    node_border=_c("#6b6f76"),
    edge=_c("#7d828a"),
    edge_label=_c("#4a4f57"),
    highlight=_c("#e0500f"),
    selection=_c("#1a73e8"),
    group_fill=_c("#e9edf3"),
    group_border=_c("#9aa5b5"),
    frame_fill=_c("#7f8fa6", 22),
    input_fill=_c("#d5ecd4"),
    output_fill=_c("#f6dcc4"),
    outer_fill=_c("#e3e3e3"),
    categories={
        "layer": _c("#c8dcf5"),
        "activation": _c("#f8d2d2"),
        "pooling": _c("#d4eede"),
        "normalization": _c("#e2d6f3"),
        "shape": _c("#e8e8e8"),
        "creation": _c("#f3ecc6"),
        "control": _c("#ffd59a"),
        "quantization": _c("#cdeeee"),
        "logic": _c("#f1d9ea"),
        "math": _c("#dfe6cf"),
        "ml": _c("#d7e3c6"),
        "custom": _c("#f5c6e0"),
        "other": _c("#eeeeee"),
    },
)

DARK = Theme(
    name="dark",
    background=_c("#1e1f22"),
    text=_c("#e8e8ea"),
    muted=_c("#a5a9b0"),
    node_border=_c("#8c919a"),
    edge=_c("#8d939c"),
    edge_label=_c("#b9bec6"),
    highlight=_c("#ff8a3d"),
    selection=_c("#5ea1ff"),
    group_fill=_c("#2c313a"),
    group_border=_c("#6b7686"),
    frame_fill=_c("#9fb3d1", 18),
    input_fill=_c("#2f4d32"),
    output_fill=_c("#5a3f27"),
    outer_fill=_c("#3a3b3f"),
    categories={
        "layer": _c("#2b4a73"),
        "activation": _c("#6e2f33"),
        "pooling": _c("#2d5a3f"),
        "normalization": _c("#4b3a6b"),
        "shape": _c("#3c3f44"),
        "creation": _c("#5e5527"),
        "control": _c("#7a5215"),
        "quantization": _c("#245757"),
        "logic": _c("#5e3552"),
        "math": _c("#434d2e"),
        "ml": _c("#3d4f2c"),
        "custom": _c("#6b2c55"),
        "other": _c("#3a3c40"),
    },
)


def system_is_dark() -> bool:
    app = QGuiApplication.instance()
    if app is None:
        return False
    hints = QGuiApplication.styleHints()
    scheme = getattr(hints, "colorScheme", None)
    if scheme is not None:
        value = scheme()
        if value == Qt.ColorScheme.Dark:
            return True
        if value == Qt.ColorScheme.Light:
            return False
    window = QGuiApplication.palette().color(QPalette.ColorRole.Window)
    return window.lightness() < 128


def resolve_theme(mode: str) -> Theme:
    """mode: "light", "dark" or "system"."""
    if mode == "dark" or (mode == "system" and system_is_dark()):
        return DARK
    return LIGHT


def title_font() -> QFont:
    f = QFont()
    f.setPixelSize(TITLE_PX)
    f.setBold(True)
    return f


def text_font() -> QFont:
    f = QFont()
    f.setPixelSize(TEXT_PX)
    return f


def italic_font() -> QFont:
    f = text_font()
    f.setItalic(True)
    return f


class TextMetrics:
    """A `TextMeasure` for the presenter, using the fonts the items paint with."""

    def __init__(self) -> None:
        self._title = QFontMetricsF(title_font())
        self._text = QFontMetricsF(text_font())

    def __call__(self, text: str, bold: bool = False) -> float:
        # (bytes: a string field that is not UTF-8, measured as it is shown, escaped)
        return (self._title if bold else self._text).horizontalAdvance(as_text(text))


def dark_palette() -> QPalette:
    p = QPalette()
    base, text = QColor("#26272b"), QColor("#e8e8ea")
    p.setColor(QPalette.ColorRole.Window, QColor("#2b2d31"))
    p.setColor(QPalette.ColorRole.WindowText, text)
    p.setColor(QPalette.ColorRole.Base, base)
    p.setColor(QPalette.ColorRole.AlternateBase, QColor("#303236"))
    p.setColor(QPalette.ColorRole.Text, text)
    p.setColor(QPalette.ColorRole.Button, QColor("#34363b"))
    p.setColor(QPalette.ColorRole.ButtonText, text)
    p.setColor(QPalette.ColorRole.ToolTipBase, QColor("#34363b"))
    p.setColor(QPalette.ColorRole.ToolTipText, text)
    p.setColor(QPalette.ColorRole.Highlight, QColor("#3d6fb6"))
    p.setColor(QPalette.ColorRole.HighlightedText, QColor("#ffffff"))
    p.setColor(QPalette.ColorRole.PlaceholderText, QColor("#8a8d93"))
    disabled = QColor("#6d7077")
    for role in (
        QPalette.ColorRole.WindowText,
        QPalette.ColorRole.Text,
        QPalette.ColorRole.ButtonText,
    ):
        p.setColor(QPalette.ColorGroup.Disabled, role, disabled)
    return p
