"""Level of detail: what an item paints at a given zoom (scale of the view transform).

Below `TEXT_MIN` boxes are plain fills (text would be unreadable and costs the most);
below `LABEL_MIN` edges lose their type labels; below `ARROW_MIN` arrowheads go too.
"""

from __future__ import annotations

from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QStyleOptionGraphicsItem

TEXT_MIN = 0.38
LABEL_MIN = 0.6
ARROW_MIN = 0.3
ROW_MIN = 0.5


def level(painter: QPainter) -> float:
    return QStyleOptionGraphicsItem.levelOfDetailFromTransform(painter.worldTransform())
