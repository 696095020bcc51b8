"""Crash recovery: snapshots of unsaved edits, offered again at the next start.

While a document has unsaved edits, `Autosaver.save_now()` (the UI calls it on a timer
after edits) writes the model atomically to a recovery folder with a small JSON record
of where it came from.  Saving or closing the document cleanly discards the snapshot;
after a crash, `pending()` lists what can be restored.  The snapshot keeps external data
references relative to the original folder, so restoring reads the same data files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from onnx import ModelProto

from onnxviz.model.document import Document
from onnxviz.model.io import _atomic_write


def recovery_dir() -> str:
    """$ONNXVIZ_RECOVERY_DIR, else $XDG_STATE_HOME/onnxviz/recovery (~/.local/state)."""
    override = os.environ.get("ONNXVIZ_RECOVERY_DIR")
    if override:
        return override
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(state, "onnxviz", "recovery")


@dataclass(frozen=True)
class RecoveryEntry:
    snapshot: str  # the .onnx snapshot
    record: str  # its .json record
    source: str | None  # the file the edits were made to (None: never saved)
    saved_at: float
    last_edit: str | None

    def restore(self) -> Document:
        """The snapshot as a modified Document pointing at its original file."""
        with open(self.snapshot, "rb") as fh:
            model = ModelProto()
            model.ParseFromString(fh.read())
        doc = Document.from_model(model, self.source)
        doc.mark_unsaved()  # not what is on disk: the user must save it
        return doc

    def discard(self) -> None:
        for path in (self.snapshot, self.record):
            with contextlib.suppress(OSError):
                os.unlink(path)


class Autosaver:
    def __init__(self, doc: Document, directory: str | None = None) -> None:
        self.doc = doc
        self.directory = directory or recovery_dir()
        key = doc.path or f"untitled-{id(doc)}-{time.time()}"
        self._stem = hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]
        self._writer: threading.Thread | None = None  # see save_in_background

    @property
    def snapshot_path(self) -> str:
        return os.path.join(self.directory, f"{self._stem}.onnx")

    @property
    def record_path(self) -> str:
        return os.path.join(self.directory, f"{self._stem}.json")

    def save_now(self) -> bool:
        """Snapshot the document if it has unsaved edits; True if written."""
        self._wait_for_writer()
        record = self._record()
        if record is None:
            return False
        payload = self.doc.model_bytes()
        if payload is None:  # only when another thread edits: never this caller's case
            return False
        self._write(payload, record)
        return True

    def save_in_background(self, on_error: Callable[[Exception], object]) -> bool:
        """`save_now` from a thread: the model's bytes (`Document.model_bytes`, shared
        with the edit's validation and never torn by an edit) and the disk writes with
        their fsyncs all run off the caller's thread; at 100k nodes they were a 100 ms
        stop of the UI.  ``on_error`` is called from that thread.  True if a snapshot is
        on its way.  A snapshot overlapped by edits is skipped: the next one, which those
        edits ask for, has them."""
        self._wait_for_writer()
        record = self._record()
        if record is None:
            return False
        doc = self.doc

        def write() -> None:
            try:
                payload = doc.model_bytes()
                if payload is not None:
                    self._write(payload, record)
            except (OSError, ValueError) as exc:
                on_error(exc)

        self._writer = threading.Thread(target=write, name="onnxviz-autosave", daemon=True)
        self._writer.start()
        return True

    def _record(self) -> bytes | None:
        """The snapshot's record, or None (and any old snapshot removed) when there are
        no unsaved edits."""
        if not self.doc.is_modified:
            self.discard()
            return None
        record = {
            "source": self.doc.path,
            "saved_at": time.time(),
            "last_edit": self.doc.undo_label,
        }
        return json.dumps(record).encode("utf-8")

    def _write(self, payload: bytes, record: bytes) -> None:
        os.makedirs(self.directory, exist_ok=True)
        _atomic_write(self.snapshot_path, lambda fh: fh.write(payload))
        _atomic_write(self.record_path, lambda fh: fh.write(record))

    def flush(self) -> None:
        """Wait until a snapshot being written is on disk."""
        self._wait_for_writer()

    def _wait_for_writer(self) -> None:
        writer = self._writer
        if writer is not None:
            writer.join()
            self._writer = None

    def discard(self) -> None:
        """After a clean save or close: nothing to recover (a snapshot still being
        written is waited for first, so that it cannot appear after)."""
        self._wait_for_writer()
        for path in (self.snapshot_path, self.record_path):
            with contextlib.suppress(OSError):
                os.unlink(path)


def pending(directory: str | None = None) -> list[RecoveryEntry]:
    """Snapshots left by sessions that did not end cleanly, newest first."""
    folder = directory or recovery_dir()
    out: list[RecoveryEntry] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        record_path = os.path.join(folder, name)
        snapshot = record_path[: -len(".json")] + ".onnx"
        try:
            with open(record_path, encoding="utf-8") as fh:
                record = json.load(fh)
        except (OSError, ValueError):
            continue
        if not os.path.exists(snapshot):
            continue
        out.append(
            RecoveryEntry(
                snapshot,
                record_path,
                record.get("source"),
                float(record.get("saved_at", 0.0)),
                record.get("last_edit"),
            )
        )
    out.sort(key=lambda e: -e.saved_at)
    return out
