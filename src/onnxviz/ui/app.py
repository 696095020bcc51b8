"""GUI entry: `run_app(model, screenshot=...)` (called by `onnxviz [MODEL]`)."""

from __future__ import annotations

import sys

from PySide6.QtCore import QTimer
from PySide6.QtGui import QIcon, QPixmap
from PySide6.QtWidgets import QApplication

from onnxviz.ui.examples import example_path


def _icon() -> QIcon:
    from onnxviz import bundled

    ref = bundled.root() / "icons" / "onnxviz.svg"
    try:
        data = ref.read_bytes()
    except OSError:
        return QIcon()
    pixmap = QPixmap()
    pixmap.loadFromData(data, "SVG")
    return QIcon(pixmap)


def application() -> QApplication:
    app = QApplication.instance()
    if app is None:
        app = QApplication(sys.argv[:1])
        app.setApplicationName("onnxviz")
        app.setOrganizationName("onnxviz")
        app.setWindowIcon(_icon())
    return app  # type: ignore[return-value]


def run_app(model: str | None, screenshot: str | None = None) -> int:
    app = application()
    from onnxviz.ui.log_file import setup_logging
    from onnxviz.ui.main_window import MainWindow
    from onnxviz.ui.prompter import UnattendedPrompter

    setup_logging()
    # nobody answers questions while a screenshot is taken
    window = MainWindow(UnattendedPrompter() if screenshot is not None else None)
    path = model or example_path()
    if screenshot is not None:
        window.resize(1400, 900)
    window.show()
    if screenshot is not None:
        window.files.open_path(path, background=True, example=model is None)
        window.wait_idle()
        if window.session.doc is None:
            print(
                f"onnxviz: {getattr(window, 'last_error', '') or 'the model did not open'}",
                file=sys.stderr,
            )
            return 2
        window.edits.wait_validated()  # its diagnostics in the picture, not "Validating…"
        app.processEvents()  # the view as it opens: readable top, or the whole if small
        image = window.grab()
        if not image.save(screenshot, "PNG"):
            print(f"onnxviz: cannot write {screenshot}", file=sys.stderr)
            return 2
        window.close()
        return 0
    QTimer.singleShot(0, lambda: window.files.open_path(path, example=model is None))
    return int(app.exec())
