"""View options and drawing metrics shared by the builder, the placement and the UI."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from onnxviz.model.text import as_text

Direction = Literal["TB", "LR"]

# Text measure: (text, bold) -> width in scene units.  The UI passes one built on
# QFontMetricsF; headless code uses `approximate_width`.
TextMeasure = Callable[[str, bool], float]


@dataclass(frozen=True)
class ViewOptions:
    show_shapes: bool = True  # element type and shape on edges
    show_initializers: bool = True  # initializer rows inside nodes
    show_names: bool = False  # node name line under the op type
    direction: Direction = "TB"


# Metrics (scene units).  Fonts: title 9pt bold, text 8pt (see ui.theme).
PAD_X = 10.0
TITLE_H = 22.0
LINE_H = 15.0
ROW_H = 15.0
PILL_H = 24.0
MIN_NODE_W = 56.0
GROUP_PAD = 12.0
GROUP_HEADER = 22.0
SLOT_LABEL_H = 16.0
SLOT_GAP = 20.0
PROXY_W = 16.0
PROXY_H = 12.0
MARKER_W = 16.0  # the expand/collapse marker at the top right of a box or frame
MAX_TEXT_CHARS = 48


def approximate_width(text: str, bold: bool = False) -> float:
    return len(text) * (6.6 if bold else 5.9) + 2.0


def elide(text: str | bytes, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters (a name that is not UTF-8 shown escaped)."""
    text = as_text(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
