"""Compare two models in the GUI (issue #20): `CompareWindow` (window.py), its colours
(marks.py) and its side-by-side property rows (pair_rows.py).

The main window reaches all of it through one function, `open_compare_window`
(open_compare.py)."""

from onnxviz.ui.diff.open_compare import open_compare_window

__all__ = ["open_compare_window"]
