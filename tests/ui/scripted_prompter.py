"""A Prompter for tests: answers from a script instead of dialogs, and records what
the window asked."""

from __future__ import annotations

from typing import Any

from onnxviz.ui.prompter import RecoveryAnswer, UnattendedPrompter, UnsavedAnswer


class ScriptedPrompter(UnattendedPrompter):
    def __init__(self) -> None:
        super().__init__(None)
        self.asked: list[tuple[str, Any]] = []
        self.warnings: list[str] = []
        self.unsaved: UnsavedAnswer = "discard"
        self.overwrite = False
        self.recovery: RecoveryAnswer = "later"
        # the answers of the file choosers, first asked first answered (none left: cancel)
        self.files: list[str] = []

    def open_file(self, title: str, start: str = "", filters: str = "") -> str | None:
        self.asked.append(("open_file", title))
        return self.files.pop(0) if self.files else None

    def save_file(self, title: str, start: str = "", filters: str = "") -> tuple[str, str] | None:
        self.asked.append(("save_file", title))
        return (self.files.pop(0), filters) if self.files else None

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def unsaved_changes(self, name: str) -> UnsavedAnswer:
        self.asked.append(("unsaved", name))
        return self.unsaved

    def overwrite_changed(self, file_name: str) -> bool:
        self.asked.append(("overwrite", file_name))
        return self.overwrite

    def recover(self, source: str, last_edit: str) -> RecoveryAnswer:
        self.asked.append(("recover", source))
        return self.recovery
