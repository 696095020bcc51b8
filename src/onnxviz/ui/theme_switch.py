"""`ThemeSwitch`: the theme the user chose (system, light or dark), remembered in the
settings and applied to the application palette and the canvas; "system" follows the
desktop's colour scheme as it changes."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QApplication

from onnxviz.ui import settings
from onnxviz.ui.canvas.scene import GraphScene
from onnxviz.ui.theme import Theme, dark_palette, resolve_theme


class ThemeSwitch(QObject):
    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.mode = settings.load_str("theme", "system")  # "system" | "light" | "dark"
        self.scene: GraphScene | None = None
        hints = QApplication.styleHints()
        if hasattr(hints, "colorSchemeChanged"):
            hints.colorSchemeChanged.connect(lambda _scheme: self.apply())

    def theme(self) -> Theme:
        return resolve_theme(self.mode)

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        settings.save_value("theme", mode)
        self.apply()

    def apply(self) -> None:
        theme = self.theme()
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.setPalette(
                dark_palette() if theme.name == "dark" else app.style().standardPalette()
            )
        if self.scene is not None:
            self.scene.set_theme(theme)
