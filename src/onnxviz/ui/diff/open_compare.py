"""`open_compare_window`: the main window's one way into the Compare window (issue #20),
asking through the window's Prompter which file to compare with."""

from __future__ import annotations

from typing import Any

from onnxviz.errors import OnnxvizError
from onnxviz.model.document import Document
from onnxviz.ui.prompter import Prompter

COMPARE_FILTERS = "ONNX models (*.onnx *.onnxtxt);;All files (*)"


def open_compare_window(
    parent: Any,
    doc: Document,
    other_path: str | None = None,
    *,
    with_disk: bool = False,
    prompter: Prompter | None = None,
) -> Any:
    """Open a Compare window for ``doc``: against ``other_path`` (None: ask for a file),
    or, ``with_disk``, the file on disk (A) against the document's unsaved edits (B).
    Returns the window, or None when nothing was opened (cancelled, or an error shown)."""
    from onnxviz.ui.diff.compare_window import CompareWindow

    ask = prompter or Prompter(parent)
    try:
        if with_disk:
            if not doc.path:
                ask.inform("Compare", "The model has no file on disk yet.")
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
                other_path = ask.open_file("Compare With", doc.base_dir or "", COMPARE_FILTERS)
                if not other_path:
                    return None
            window = CompareWindow(doc, Document.open(other_path), parent=parent)
    except OnnxvizError as exc:
        ask.warn(f"Compare: {exc}")
        return None
    window.show()
    return window
