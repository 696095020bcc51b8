"""The status bar's permanent parts: the model summary, the progress of the background
job with its Cancel button (shown once the job has run `PROGRESS_DELAY_MS`: a quick job
does not flash it), and the zoom."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QProgressBar, QPushButton, QStatusBar

from onnxviz.model.document import Document
from onnxviz.present.scene import Scene

PROGRESS_DELAY_MS = 500


class StatusLine:
    def __init__(self, bar: QStatusBar) -> None:
        self.summary_label = QLabel("")
        self.zoom_label = QLabel("")
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(140)
        self.progress_label = QLabel("")
        self.cancel_button = QPushButton("Cancel")
        bar.addWidget(self.summary_label, 1)
        bar.addPermanentWidget(self.progress_label)
        bar.addPermanentWidget(self.progress)
        bar.addPermanentWidget(self.cancel_button)
        bar.addPermanentWidget(self.zoom_label)
        self._reveal = QTimer(bar)
        self._reveal.setSingleShot(True)
        self._reveal.timeout.connect(lambda: self._show_progress(True))
        self.set_busy(None)

    def set_busy(self, message: str | None) -> None:
        """A job is under way (``message``: its label) or none (None)."""
        self.progress_label.setText(message or "")
        if message is None:
            self._reveal.stop()
            self._show_progress(False)
        elif self.progress.isHidden() and not self._reveal.isActive():
            self._reveal.start(PROGRESS_DELAY_MS)

    def _show_progress(self, on: bool) -> None:
        self.progress.setVisible(on)
        self.cancel_button.setVisible(on)
        self.progress_label.setVisible(on)

    def set_zoom(self, zoom: float) -> None:
        self.zoom_label.setText(f"{zoom * 100:.0f}%")

    def show_summary(self, doc: Document | None, display: Scene | None) -> None:
        if doc is None:
            self.summary_label.setText("")
            return
        m = doc.model
        opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in m.opset_import)
        total = doc.node_count
        shown = len(display.items) if display else 0
        self.summary_label.setText(
            f"{doc.display_name} · IR {m.ir_version} · {opsets} · {len(m.graph.node)} nodes"
            f" ({total} in all graphs) · {shown} boxes shown"
        )
