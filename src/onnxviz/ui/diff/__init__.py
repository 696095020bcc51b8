"""Compare two models in the GUI (issue #20): `CompareWindow` (window.py), its colours
(marks.py) and its side-by-side property rows (pair_rows.py).

The main window reaches all of it through one function, `open_compare_window`."""

from __future__ import annotations

from typing import Any

__all__ = ["open_compare_window"]


def open_compare_window(
    parent: Any, doc: Any, other_path: str | None = None, *, with_disk: bool = False
) -> Any:
    """Open a Compare window for ``doc``: against ``other_path`` (None: ask for a file),
    or, ``with_disk``, the file on disk (A) against the document's unsaved edits (B).
    Returns the window, or None when nothing was opened (cancelled, or an error shown)."""
    from PySide6.QtWidgets import QFileDialog, QMessageBox

    from onnxviz.errors import OnnxvizError
    from onnxviz.model.document import Document
    from onnxviz.ui.diff.window import CompareWindow

    try:
        if with_disk:
            if not doc.path:
                QMessageBox.information(parent, "Compare", "The model has no file on disk yet.")
                return None
            window = CompareWindow(
                Document.open(doc.path),
                doc,
                title_a=f"{doc.display_name} (on disk)",
                title_b=f"{doc.display_name} (edited)",
                parent=parent,
            )
        else:
            if other_path is None:
                other_path, _ = QFileDialog.getOpenFileName(
                    parent,
                    "Compare With",
                    doc.base_dir or "",
                    "ONNX models (*.onnx *.onnxtxt);;All files (*)",
                )
                if not other_path:
                    return None
            window = CompareWindow(doc, Document.open(other_path), parent=parent)
    except OnnxvizError as exc:
        QMessageBox.warning(parent, "Compare", str(exc))
        return None
    window.show()
    return window
