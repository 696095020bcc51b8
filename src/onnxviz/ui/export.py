"""Export the canvas: SVG (vector), PNG (raster at a chosen scale, painted in tiles so
the painter never needs more than one tile of intermediate memory), PDF (vector)."""

from __future__ import annotations

import os

from PySide6.QtCore import QMarginsF, QRectF, QSize, QSizeF, Qt
from PySide6.QtGui import QColor, QImage, QPageSize, QPainter, QPdfWriter
from PySide6.QtWidgets import QGraphicsScene

from onnxviz.errors import OnnxvizError

MAX_PNG_SIDE = 20_000
TILE = 4096


class ExportError(OnnxvizError):
    pass


def _source(scene: QGraphicsScene, rect: QRectF | None) -> QRectF:
    return QRectF(rect) if rect is not None else scene.sceneRect()


def export_svg(
    scene: QGraphicsScene, path: str, rect: QRectF | None = None, title: str = ""
) -> None:
    from PySide6.QtSvg import QSvgGenerator

    src = _source(scene, rect)
    gen = QSvgGenerator()
    gen.setFileName(path)
    gen.setSize(QSize(int(src.width()), int(src.height())))
    gen.setViewBox(QRectF(0, 0, src.width(), src.height()))
    gen.setTitle(title or "onnxviz graph")
    gen.setDescription("drawn by onnxviz")
    painter = QPainter(gen)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.fillRect(QRectF(0, 0, src.width(), src.height()), scene.backgroundBrush())
    scene.render(painter, QRectF(0, 0, src.width(), src.height()), src)
    painter.end()


def png_scale(src: QRectF, scale: float) -> float:
    """The scale actually used: at most MAX_PNG_SIDE pixels on a side."""
    longest = max(src.width(), src.height(), 1.0)
    return min(scale, MAX_PNG_SIDE / longest)


def export_png(
    scene: QGraphicsScene, path: str, rect: QRectF | None = None, scale: float = 2.0
) -> QSize:
    src = _source(scene, rect)
    scale = png_scale(src, scale)
    width = max(1, round(src.width() * scale))
    height = max(1, round(src.height() * scale))
    image = QImage(width, height, QImage.Format.Format_ARGB32_Premultiplied)
    if image.isNull():
        raise ExportError(f"an image of {width}×{height} pixels does not fit in memory")
    image.fill(
        scene.backgroundBrush().color()
        if scene.backgroundBrush().style() != Qt.BrushStyle.NoBrush
        else QColor("white")
    )
    painter = QPainter(image)
    painter.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
    for ty in range(0, height, TILE):
        for tx in range(0, width, TILE):
            tw, th = min(TILE, width - tx), min(TILE, height - ty)
            target = QRectF(tx, ty, tw, th)
            source = QRectF(src.x() + tx / scale, src.y() + ty / scale, tw / scale, th / scale)
            painter.save()
            painter.setClipRect(target)
            scene.render(painter, target, source)
            painter.restore()
    painter.end()
    if not image.save(path, "PNG"):  # type: ignore[call-overload]  # the stub wants bytes, Qt a str
        raise ExportError(f"cannot write {path}")
    return image.size()


def export_pdf(scene: QGraphicsScene, path: str, rect: QRectF | None = None) -> None:
    src = _source(scene, rect)
    writer = QPdfWriter(path)
    writer.setResolution(72)
    # points = scene units; a page the size of the drawing
    size = QSizeF(max(src.width(), 10.0), max(src.height(), 10.0))
    writer.setPageSize(QPageSize(size, QPageSize.Unit.Point, "graph"))
    writer.setPageMargins(QMarginsF(0, 0, 0, 0))
    painter = QPainter(writer)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    target = QRectF(0, 0, writer.width(), writer.height())
    painter.fillRect(target, scene.backgroundBrush())
    scene.render(painter, target, src)
    painter.end()


def export_any(
    scene: QGraphicsScene,
    path: str,
    rect: QRectF | None = None,
    scale: float = 2.0,
    title: str = "",
) -> None:
    """Export by file extension.  Exports always paint the detailed items, also when
    the view shows the overview."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".svg", ".png", ".pdf"):
        raise ExportError(f"cannot export to '{ext or path}': use .svg, .png or .pdf")
    # an export draws every item: a fill or run marks still coming a slice per turn
    # are completed first
    finish = getattr(scene, "finish_filling", None)
    if finish is not None:
        finish()
    exporting = getattr(scene, "exporting", None)
    if exporting is not None:
        exporting.emit()
    overview = bool(getattr(scene, "overview_shown", False))
    if overview:
        scene.set_overview(False)  # type: ignore[attr-defined]
    try:
        if ext == ".svg":
            export_svg(scene, path, rect, title)
        elif ext == ".png":
            export_png(scene, path, rect, scale)
        else:
            export_pdf(scene, path, rect)
    finally:
        if overview:
            scene.set_overview(True)  # type: ignore[attr-defined]
