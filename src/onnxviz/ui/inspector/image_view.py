"""`ImageView`: a heatmap or channel grid that fits its dock when first shown, then
zooms (wheel, +/-; double-click fits again).

A picture the user has not zoomed follows the dock's size, so the whole channel grid
shows at once; once they zoom it keeps their zoom and scrolls.  Pixels are scaled
without smoothing: a cell of a tensor stays a sharp square."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtGui import QKeyEvent, QMouseEvent, QPixmap, QWheelEvent
from PySide6.QtWidgets import QLabel, QScrollArea, QWidget

ZOOM_STEP = 1.25
MAX_ZOOM = 64.0  # screen pixels per tensor pixel, at most
FIT_MAX = 16.0  # a tiny tensor is blown up at most this much when fitted


class ImageView(QScrollArea):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = QLabel()
        self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setWidget(self.label)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setWidgetResizable(False)
        self.source = QPixmap()
        self.zoom = 1.0
        self.fitted = True  # follow the viewport until the user zooms
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.viewport().installEventFilter(self)

    # -- the QLabel part of the API (the inspector used labels before) --------------------
    def setPixmap(self, pixmap: QPixmap) -> None:
        """A new picture: fitted to the view (a new tensor starts whole)."""
        self.source = pixmap
        self.fitted = True
        self.label.setText("")
        self._render()

    def setText(self, text: str) -> None:
        self.source = QPixmap()
        self.label.setPixmap(QPixmap())
        self.label.setText(text)
        self.label.adjustSize()
        self.label.resize(self.viewport().size())

    def pixmap(self) -> QPixmap:
        return self.label.pixmap()

    # -- zoom -------------------------------------------------------------------------------
    def fit_zoom(self) -> float:
        if self.source.isNull():
            return 1.0
        view = self.viewport().size()
        w, h = self.source.width(), self.source.height()
        return max(min((view.width() - 4) / w, (view.height() - 4) / h, FIT_MAX), 1e-3)

    def fit(self) -> None:
        self.fitted = True
        self._render()

    def set_zoom(self, zoom: float) -> None:
        self.fitted = False
        self.zoom = min(max(zoom, self.fit_zoom() / 4, 1e-3), MAX_ZOOM)
        self._render()

    def shown_size(self) -> QSize:
        return self.label.size()

    def _render(self) -> None:
        if self.source.isNull():
            return
        if self.fitted:
            self.zoom = self.fit_zoom()
        size = QSize(
            max(1, round(self.source.width() * self.zoom)),
            max(1, round(self.source.height() * self.zoom)),
        )
        self.label.setPixmap(
            self.source.scaled(
                size,
                Qt.AspectRatioMode.IgnoreAspectRatio,
                Qt.TransformationMode.FastTransformation,
            )
        )
        self.label.resize(size.expandedTo(self.viewport().size()) if self.fitted else size)

    # -- events -----------------------------------------------------------------------------
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.viewport() and event.type() == QEvent.Type.Resize and self.fitted:
            self._render()
        return super().eventFilter(watched, event)

    def wheelEvent(self, event: QWheelEvent) -> None:
        delta = event.angleDelta().y()
        if delta and not self.source.isNull():
            self.set_zoom(self.zoom * (ZOOM_STEP if delta > 0 else 1 / ZOOM_STEP))
            event.accept()
            return
        super().wheelEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        key = event.key()
        if key in (Qt.Key.Key_Plus, Qt.Key.Key_Equal):
            self.set_zoom(self.zoom * ZOOM_STEP)
        elif key == Qt.Key.Key_Minus:
            self.set_zoom(self.zoom / ZOOM_STEP)
        elif key == Qt.Key.Key_0:
            self.fit()
        else:
            super().keyPressEvent(event)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        self.fit()
        event.accept()
