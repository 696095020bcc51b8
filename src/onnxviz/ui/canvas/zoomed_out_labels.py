"""Op-type labels over a zoomed-out canvas (issue 18, item 12's leftover).

Below `lod.SMALL_TITLE_MIN` the boxes are too small for any text inside them: a fitted
BERT (9-11 %) was a column of unlabelled fills.  The view then draws, over the boxes, a
label per box at a readable screen size (`LABEL_PX`), as a small pill in the box's own
colour, centred on the box or just beside it.  Labels never overlap: they are placed
greedily, the operators that say most about the model first (layers, normalizations,
activations before shape plumbing and constants), and a label with no free place is
left out; its box's tooltip still tells.  Boxes smaller than `MIN_BOX_PX` on screen get
none (a pixel-sized box is not something a label can point at), and past
`MAX_CANDIDATES` visible boxes none at all (the overview of a huge graph stays fast).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from PySide6.QtCore import QRectF

LABEL_PX = 10  # screen pixels: the font of a label
PAD_X, PAD_Y = 3.0, 1.0  # inside the pill
MIN_BOX_PX = 2.0  # a box narrower or lower than this on screen gets no label
MAX_CANDIDATES = 4000
CELL = 64.0  # px: the collision grid

# What is most worth naming first: the model's structure, then its arithmetic, then
# the plumbing (shapes, casts, constants) that the others are connected by.
PRIORITY = {
    "group": 0,  # a collapsed group: a part of the model by name (layer.0, attention)
    "layer": 0,
    "normalization": 1,
    "control": 1,
    "activation": 2,
    "pooling": 2,
    "quantization": 2,
    "ml": 2,
    "custom": 2,
    "math": 3,
    "logic": 4,
    "other": 4,
    "creation": 5,
    "shape": 5,
}


@dataclass(frozen=True)
class Candidate:
    """A box that may get a label: its rectangle on screen, its text and category."""

    item_id: str
    box: QRectF
    text: str
    category: str


@dataclass(frozen=True)
class Label:
    item_id: str
    rect: QRectF  # on screen
    text: str
    category: str


def place_labels(
    candidates: Iterable[Candidate],
    text_width: Callable[[str], float],
    viewport: QRectF,
    obstacles: Iterable[QRectF] = (),
) -> list[Label]:
    """Non-overlapping labels for ``candidates``: ``text_width(text)`` measures a text
    in screen pixels; labels stay inside ``viewport`` and off ``obstacles`` (the
    titles of expanded frames)."""
    grid: dict[tuple[int, int], list[QRectF]] = {}

    def cells(r: QRectF) -> list[tuple[int, int]]:
        cols = range(int(r.left() // CELL), int(r.right() // CELL) + 1)
        rows = range(int(r.top() // CELL), int(r.bottom() // CELL) + 1)
        return [(i, j) for i in cols for j in rows]

    def free(r: QRectF) -> bool:
        return viewport.contains(r) and not any(
            o.intersects(r) for c in cells(r) for o in grid.get(c, ())
        )

    for r in obstacles:
        for c in cells(r):
            grid.setdefault(c, []).append(r)
    ordered = sorted(
        candidates,
        key=lambda c: (PRIORITY.get(c.category, 4), -c.box.width() * c.box.height()),
    )
    height = LABEL_PX + 2 * PAD_Y + 2
    placed: list[Label] = []
    for cand in ordered:
        box = cand.box
        width = text_width(cand.text) + 2 * PAD_X
        centre = box.center()
        top = centre.y() - height / 2
        for left in (
            centre.x() - width / 2,  # on the box
            box.right() + 2,  # beside it, right
            box.left() - 2 - width,  # beside it, left
        ):
            r = QRectF(left, top, width, height)
            if free(r):
                for c in cells(r):
                    grid.setdefault(c, []).append(r)
                placed.append(Label(cand.item_id, r, cand.text, cand.category))
                break
    return placed
