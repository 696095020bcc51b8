"""Every question the window asks its user: file choosers, yes/no prompts, warnings.

Controllers never open a dialog themselves; they ask the window's `Prompter`.  The
interactive one shows Qt dialogs; `UnattendedPrompter` answers each question with the
answer that changes nothing (used by `--screenshot`, which nobody watches), and tests
hand the window a scripted one of their own.
"""

from __future__ import annotations

import logging
from typing import Literal

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QWidget,
)

log = logging.getLogger(__name__)

UnsavedAnswer = Literal["save", "discard", "cancel"]
RecoveryAnswer = Literal["restore", "discard", "later"]


class Prompter:
    """Asks the user, with dialogs parented to ``parent``."""

    def __init__(self, parent: QWidget | None = None) -> None:
        self.parent = parent

    def warn(self, message: str) -> None:
        """A failure the user must see (non-modal: the window stays usable)."""
        box = QMessageBox(
            QMessageBox.Icon.Warning, "onnxviz", message, QMessageBox.StandardButton.Ok, self.parent
        )
        box.open()

    def inform(self, title: str, text: str, monospace: bool = False) -> None:
        box = QMessageBox(
            QMessageBox.Icon.Information, title, text, QMessageBox.StandardButton.Ok, self.parent
        )
        if monospace:
            box.setStyleSheet("QLabel { font-family: monospace; }")
        box.open()

    def unsaved_changes(self, name: str) -> UnsavedAnswer:
        box = QMessageBox(self.parent)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("Unsaved changes")
        box.setText(f"Save the changes to {name}?")
        buttons = QMessageBox.StandardButton
        box.setStandardButtons(buttons.Save | buttons.Discard | buttons.Cancel)
        answer = box.exec()
        if answer == buttons.Save:
            return "save"
        if answer == buttons.Discard:
            return "discard"
        return "cancel"

    def overwrite_changed(self, file_name: str) -> bool:
        """Another program rewrote the file since it was opened: overwrite it?"""
        buttons = QMessageBox.StandardButton
        answer = QMessageBox.question(
            self.parent,
            "File changed on disk",
            f"{file_name} was changed by another program since it was opened.\n"
            "Save over it and lose those changes?",
            buttons.Save | buttons.Cancel,
            buttons.Cancel,
        )
        return answer == buttons.Save

    def recover(self, source: str, last_edit: str) -> RecoveryAnswer:
        """onnxviz did not close cleanly: restore the unsaved edits, or drop them?"""
        buttons = QMessageBox.StandardButton
        answer = QMessageBox.question(
            self.parent,
            "Recover unsaved edits",
            f"onnxviz did not close cleanly. Restore the unsaved edits to {source}"
            + (f" (last edit: {last_edit})" if last_edit else "")
            + "?",
            buttons.Yes | buttons.No,
        )
        return "restore" if answer == buttons.Yes else "discard"

    def open_file(self, title: str, start: str = "", filters: str = "") -> str | None:
        path, _ = QFileDialog.getOpenFileName(self.parent, title, start, filters)
        return path or None

    def save_file(self, title: str, start: str = "", filters: str = "") -> tuple[str, str] | None:
        """The chosen path and the filter it was chosen with, or None."""
        path, chosen = QFileDialog.getSaveFileName(self.parent, title, start, filters)
        return (path, chosen) if path else None

    def text(self, title: str, label: str, text: str = "") -> str | None:
        value, ok = QInputDialog.getText(self.parent, title, label, QLineEdit.EchoMode.Normal, text)
        return value if ok else None

    def number(
        self, title: str, label: str, value: float, low: float, high: float, decimals: int
    ) -> float | None:
        chosen, ok = QInputDialog.getDouble(self.parent, title, label, value, low, high, decimals)
        return chosen if ok else None

    def choose(self, title: str, label: str, choices: list[tuple[str, str]]) -> str | None:
        """One of ``choices`` (value, label) from a combo box; None when cancelled."""
        dialog = QDialog(self.parent)
        dialog.setWindowTitle(title)
        form = QFormLayout(dialog)
        combo = QComboBox()
        for value, text in choices:
            combo.addItem(text, value)
        form.addRow(label, combo)
        if not _accepted(dialog, form):
            return None
        return str(combo.currentData())

    def form(self, title: str, note: str, fields: list[tuple[str, str]]) -> list[str] | None:
        """A few lines of text (label, initial text) in one dialog; None when cancelled."""
        dialog = QDialog(self.parent)
        dialog.setWindowTitle(title)
        layout = QFormLayout(dialog)
        layout.addRow(QLabel(note))
        edits = []
        for label, text in fields:
            edit = QLineEdit(text)
            layout.addRow(label, edit)
            edits.append(edit)
        if not _accepted(dialog, layout):
            return None
        return [e.text() for e in edits]

    def ask(self, dialog: QDialog) -> bool:
        """Show a dialog of the window's own (it reports through its signals); False
        when it was not shown."""
        dialog.open()
        return True


class UnattendedPrompter(Prompter):
    """Nobody is watching (``--screenshot``): every question gets the answer that
    changes nothing, and warnings go to the log."""

    def warn(self, message: str) -> None:
        log.warning("%s", message)

    def inform(self, title: str, text: str, monospace: bool = False) -> None:
        log.info("%s: %s", title, text)

    def unsaved_changes(self, name: str) -> UnsavedAnswer:
        return "discard"  # nothing is edited without a user

    def overwrite_changed(self, file_name: str) -> bool:
        return False

    def recover(self, source: str, last_edit: str) -> RecoveryAnswer:
        return "later"  # the snapshot stays for the next interactive start

    def open_file(self, title: str, start: str = "", filters: str = "") -> str | None:
        return None

    def save_file(self, title: str, start: str = "", filters: str = "") -> tuple[str, str] | None:
        return None

    def text(self, title: str, label: str, text: str = "") -> str | None:
        return None

    def number(
        self, title: str, label: str, value: float, low: float, high: float, decimals: int
    ) -> float | None:
        return None

    def choose(self, title: str, label: str, choices: list[tuple[str, str]]) -> str | None:
        return None

    def form(self, title: str, note: str, fields: list[tuple[str, str]]) -> list[str] | None:
        return None

    def ask(self, dialog: QDialog) -> bool:
        return False


def _accepted(dialog: QDialog, form: QFormLayout) -> bool:
    """Add OK and Cancel under ``form``, show ``dialog`` modally; whether OK was chosen."""
    buttons = QDialogButtonBox(
        QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
    )
    buttons.accepted.connect(dialog.accept)
    buttons.rejected.connect(dialog.reject)
    form.addRow(buttons)
    return dialog.exec() == QDialog.DialogCode.Accepted
