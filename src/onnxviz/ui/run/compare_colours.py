"""Compare colouring: what colour a node gets after "Compare with onnxruntime", and
the legend that says what the colours mean.

The colour comes from the same test as the text ("all within" / "first node beyond
the tolerance"): a value is beyond when ``max |a - b| > atol + rtol * max |b|``
(`runtime.compare.ValueDiff.beyond`).  Within that allowance a node is "within"
while it uses less than `NEAR` of it, "near" above that; so "all within" never paints
a node red, and a node is red exactly when the text counts it beyond.

Colours are light tints (the box text stays dark on them) with a stronger edge for
the outline the overlay draws."""

from __future__ import annotations

import math

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

from onnxviz.runtime.compare import NodeComparison

NEAR = 0.5  # share of the allowance above which a node is "near the tolerance"

# band -> (fill tint, edge, legend text)
BANDS = {
    "within": ("#c8ebc9", "#2e7d32", "within"),
    "near": ("#ffe49a", "#c77c00", "near the tolerance"),
    "over": ("#f7b4b4", "#c62828", "beyond the tolerance"),
    "none": ("#e2e2e2", "#8a8a8a", "not compared"),
}


def usage(n: NodeComparison, atol: float, rtol: float) -> float | None:
    """The largest share of its allowance a value of the node uses (1.0: exactly at
    the tolerance); None when nothing numeric was compared."""
    found: list[float] = []
    for v in n.values:
        if v.shape_mismatch is not None or v.equal is False:
            found.append(math.inf)
        elif v.equal is True:  # strings, compared whole: the same on both sides
            found.append(0.0)
        elif v.max_abs is not None:
            allowance = atol + rtol * v.ref_scale
            found.append(v.max_abs / allowance if allowance > 0 else (math.inf if v.max_abs else 0))
    return max(found) if found else None


def band(n: NodeComparison, atol: float, rtol: float) -> str:
    """ "over" exactly when the text counts the node beyond; else "near", "within", or
    "none" when it was not compared."""
    if n.beyond(atol, rtol):
        return "over"
    used = usage(n, atol, rtol)
    if used is None:
        return "none"
    return "near" if used > NEAR else "within"


def compare_colour(n: NodeComparison, atol: float, rtol: float) -> QColor:
    """The fill of a node's compare mark."""
    return QColor(BANDS[band(n, atol, rtol)][0])


def edge_colour(fill: QColor) -> QColor | None:
    """The stronger outline that goes with a band's fill (None for other fills)."""
    for tint, edge, _ in BANDS.values():
        if QColor(tint) == fill:
            return QColor(edge)
    return None


class CompareLegend(QWidget):
    """A row of swatches: what each compare colour means at the current tolerance."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QGridLayout(self)  # two a row: narrow enough for a shared dock area
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setHorizontalSpacing(6)
        self.swatches: dict[str, QLabel] = {}
        self.labels: dict[str, QLabel] = {}
        for k, (key, (tint, edge, _text)) in enumerate(BANDS.items()):
            swatch = QLabel()
            swatch.setFixedSize(14, 14)
            swatch.setStyleSheet(
                f"background: {tint}; border: 2px solid {edge}; border-radius: 3px;"
            )
            label = QLabel()
            row, col = divmod(k, 2)
            layout.addWidget(swatch, row, 2 * col)
            layout.addWidget(label, row, 2 * col + 1)
            self.swatches[key], self.labels[key] = swatch, label
        layout.setColumnStretch(4, 1)
        self.set_tolerance(1e-4, 1e-3)

    def set_tolerance(self, atol: float, rtol: float) -> None:
        rule = f"|a − b| ≤ {atol:g} + {rtol:g}·|b|"
        for key, (_tint, _edge, text) in BANDS.items():
            self.labels[key].setText(text)
        tips = {
            "within": f"uses less than {NEAR:.0%} of the tolerance: {rule}",
            "near": f"within the tolerance ({rule}) but uses more than {NEAR:.0%} of it",
            "over": f"beyond the tolerance: |a − b| > {atol:g} + {rtol:g}·|b|",
            "none": "no numeric value to compare (strings, sequences, missing)",
        }
        for key, tip in tips.items():
            self.swatches[key].setToolTip(tip)
            self.labels[key].setToolTip(tip)
        self.setToolTip(f"node colours after Compare: a value is within when {rule}")
