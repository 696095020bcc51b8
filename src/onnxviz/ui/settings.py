"""Persistent settings (QSettings, INI format): recent files, window geometry and dock
state, theme and view options."""

from __future__ import annotations

import os

from PySide6.QtCore import QByteArray, QSettings
from PySide6.QtWidgets import QMainWindow

from onnxviz.present.options import ViewOptions

MAX_RECENT = 10


def settings() -> QSettings:
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, "onnxviz", "onnxviz")


def recent_files() -> list[str]:
    value = settings().value("recent_files", [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [str(v) for v in value if v]


def add_recent(path: str) -> list[str]:
    path = os.path.abspath(path)
    files = [p for p in recent_files() if p != path]
    files.insert(0, path)
    files = files[:MAX_RECENT]
    settings().setValue("recent_files", files)
    return files


def clear_recent() -> None:
    settings().setValue("recent_files", [])


def load_bytes(key: str) -> QByteArray | None:
    value = settings().value(key)
    return value if isinstance(value, QByteArray) else None


def save_value(key: str, value: object) -> None:
    settings().setValue(key, value)


def load_str(key: str, default: str) -> str:
    value = settings().value(key, default)
    return str(value) if value is not None else default


def load_bool(key: str, default: bool) -> bool:
    value = settings().value(key, default)
    if isinstance(value, str):
        return value.lower() in ("1", "true", "yes")
    return bool(value)


def view_options() -> ViewOptions:
    """The view options the user left set (View > Show ..., the direction)."""
    return ViewOptions(
        show_shapes=load_bool("show_shapes", True),
        show_initializers=load_bool("show_initializers", True),
        show_names=load_bool("show_names", False),
        direction="LR" if load_str("direction", "TB") == "LR" else "TB",
    )


def restore_window(window: QMainWindow) -> None:
    """The window's size, place and dock layout as the user left them."""
    geometry = load_bytes("geometry")
    if geometry is not None:
        window.restoreGeometry(geometry)
    state = load_bytes("window_state")
    if state is not None:
        window.restoreState(state)


def save_window(window: QMainWindow) -> None:
    save_value("geometry", window.saveGeometry())
    save_value("window_state", window.saveState())
