"""Saving a model and its external data file as one step that a kill cannot split.

Each file is written in full to a hidden temporary file beside its target and synced
(`SaveCommit.stage`).  With one file, a rename puts it in place.  With two (the model and
its data file), a small journal naming both renames is written first; then the renames
run, then the journal goes.  A process killed at any point leaves, once the model is next
opened (`finish_interrupted`, called by the loader):

* before the journal: the old model and the old data file, and the temporary files are
  removed;
* after it: the renames the journal names are finished, so both files are the new ones.

Never the new model with the old data (its offsets would point at the wrong bytes) or
the other way round.  Temporary files are named after the model (``.<model>.onnxviz-…``)
so that the cleanup touches nothing else in the folder.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile
from collections.abc import Callable
from typing import IO

WriteFn = Callable[[IO[bytes]], object]  # a file.write that returns a count is fine


def _umask() -> int:
    """The process's umask (reading it means setting it; set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _prefix(model_path: str) -> str:
    return f".{os.path.basename(model_path)}.onnxviz-"


def journal_path(model_path: str) -> str:
    folder, name = os.path.split(os.path.abspath(model_path))
    return os.path.join(folder, f".{name}.onnxviz-commit")


def _sync_folder(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


class SaveCommit:
    """The files of one save, staged, then put in place together."""

    def __init__(self, model_path: str) -> None:
        self.model_path = os.path.abspath(model_path)
        self.folder = os.path.dirname(self.model_path)
        self.staged: list[tuple[str, str]] = []  # (temporary file, target)

    def stage(self, target: str, write: WriteFn) -> None:
        """Write ``target``'s new content to a synced temporary file beside it, with the
        mode the target has (a new file: 0666 less the umask, as open() would give)."""
        folder = os.path.dirname(os.path.abspath(target)) or "."
        fd, tmp = tempfile.mkstemp(prefix=_prefix(self.model_path), suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            with contextlib.suppress(OSError):
                if os.path.exists(target):
                    os.chmod(tmp, os.stat(target).st_mode & 0o7777)
                else:
                    os.chmod(tmp, 0o666 & ~_umask())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self.staged.append((tmp, os.path.abspath(target)))

    def commit(self) -> None:
        """Put every staged file in place (see the module docstring for the order)."""
        journal = journal_path(self.model_path) if len(self.staged) > 1 else None
        if journal is not None:
            # The journal itself appears whole or not at all.
            pending = journal + ".tmp"
            with open(pending, "w", encoding="utf-8") as fh:
                json.dump({"renames": self.staged}, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(pending, journal)
            _sync_folder(self.folder)
        for tmp, target in self.staged:
            os.replace(tmp, target)
        _sync_folder(self.folder)
        if journal is not None:
            os.unlink(journal)
            _sync_folder(self.folder)
        self.staged = []

    def abort(self) -> None:
        for tmp, _ in self.staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self.staged = []


def finish_interrupted(model_path: str) -> list[str]:
    """Complete or undo a save of ``model_path`` that a kill interrupted; returns what
    was done, in words (empty when nothing was pending)."""
    model_path = os.path.abspath(model_path)
    done: list[str] = []
    journal = journal_path(model_path)
    keep: set[str] = set()
    if os.path.exists(journal):
        try:
            with open(journal, encoding="utf-8") as fh:
                renames = json.load(fh)["renames"]
            for tmp, target in renames:
                if os.path.exists(tmp):
                    os.replace(tmp, target)
                    keep.add(os.path.abspath(target))
            done.append("finished a save that was interrupted after its files were written")
        except (OSError, ValueError, KeyError, TypeError):
            pass
        with contextlib.suppress(OSError):
            os.unlink(journal)
        _sync_folder(os.path.dirname(model_path))
    leftovers = glob.glob(
        os.path.join(glob.escape(os.path.dirname(model_path)), _prefix(model_path) + "*")
    )
    for tmp in leftovers:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    if leftovers and not done:
        done.append("removed the temporary files of a save that was interrupted")
    return done
