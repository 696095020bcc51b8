"""Where the app's log goes: a rotating file in the user's data folder, which Help >
Open Log Folder shows.  Internal errors caught to keep the window alive (a bug in an
edit, a worker or the validator) are logged there with their traceback."""

from __future__ import annotations

import logging
import logging.handlers
import os

from PySide6.QtCore import QStandardPaths

LOG_NAME = "onnxviz.log"


def log_dir() -> str:
    """$ONNXVIZ_LOG_DIR, else the application's local data folder (on Linux
    ~/.local/share/onnxviz/onnxviz/logs)."""
    override = os.environ.get("ONNXVIZ_LOG_DIR")
    if override:
        return override
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppLocalDataLocation)
    if not base:
        base = os.path.join(os.path.expanduser("~"), ".local", "share", "onnxviz")
    return os.path.join(base, "logs")


def log_path() -> str:
    return os.path.join(log_dir(), LOG_NAME)


def setup_logging() -> str | None:
    """Send the `onnxviz` loggers to the log file (and warnings to stderr); the file's
    path, or None when the folder cannot be written (the app runs on without it)."""
    root = logging.getLogger("onnxviz")
    root.setLevel(logging.INFO)
    path = log_path()
    for old in [h for h in root.handlers if isinstance(h, logging.handlers.RotatingFileHandler)]:
        if old.baseFilename == os.path.abspath(path):
            return path
        root.removeHandler(old)  # the log folder moved ($ONNXVIZ_LOG_DIR)
        old.close()
    try:
        os.makedirs(log_dir(), exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=1_000_000, backupCount=2, encoding="utf-8"
        )
    except OSError:
        return None
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    return path
