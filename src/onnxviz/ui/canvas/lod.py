"""Level of detail: what an item paints at a given zoom (scale of the view transform).

Below `TEXT_MIN` the text inside boxes would be unreadable: operator and group boxes
then keep just their title, drawn at `SMALL_TITLE_PX` screen pixels (elided to the box)
down to `SMALL_TITLE_MIN`, so a fitted ResNet still says Conv, Relu, Add; below that
boxes are plain fills.  Frames of expanded groups and bodies keep their title at that
screen size at any zoom while they are `FRAME_TITLE_MIN_W` screen pixels wide, so a
fitted BERT still says layers.0, layers.1.  Below `LABEL_MIN` edges lose their type labels; below
`ARROW_MIN` arrowheads go too.
"""

from __future__ import annotations

from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QStyleOptionGraphicsItem

TEXT_MIN = 0.38
SMALL_TITLE_MIN = 0.12
SMALL_TITLE_PX = 9.0
SMALL_TITLE_MIN_PX = 6.0
FRAME_TITLE_MIN_W = 40.0  # screen px: a frame this wide names itself at any zoom
LABEL_MIN = 0.6
ARROW_MIN = 0.3
ROW_MIN = 0.5


def level(painter: QPainter) -> float:
    return QStyleOptionGraphicsItem.levelOfDetailFromTransform(painter.worldTransform())
