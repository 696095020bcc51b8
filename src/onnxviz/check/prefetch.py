"""Start onnx's inference and checker on a model file before its Document exists.

At 100k nodes, inference is the longest part of a check (about two seconds) and it needs
nothing of ours: only the file's bytes.  `prefetch(path)` sends them to the worker
processes at once, so they parse and infer while this process loads and indexes the
model and runs its own rules; `validate` then takes the answers (`take`) instead of
sending the model again, when the Document is that file, unedited.  `onnxviz check`
uses it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onnxviz.check.checkable import Checkable

_lock = threading.Lock()
_pending: dict[str, tuple[tuple[int, int], Callable[[], Any], Callable[[], Any]]] = {}


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


def prefetch(path: str) -> None:
    """Send the file at ``path`` to the inference and checker workers (no-op for a file
    that cannot be read or is too big: the loader will say what is wrong)."""
    from onnxviz.check.worker import CHECKER, WORKER
    from onnxviz.model import inplace, io

    path = os.path.abspath(path)
    try:
        ident = _identity(path)
        if ident[1] >= inplace.MIN_FILE_SIZE:
            # The loader leaves such a file's big tensors in place (model.inplace): the
            # workers get that small copy once it is loaded, not every weight to parse
            # (a 200 MB file sent whole cost a worker 600 MB).
            return
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return
    if io.may_be_text(path, data[:4096]):
        # Parsed by the checker's worker as the loader opens it: a request sent now
        # would hold that worker until read, and the parse would wait for it for ever.
        return
    base_dir = os.path.dirname(path)
    with _lock:
        _drain(_pending.pop(path, None))
        inference = WORKER.begin(data, "prepare+infer", base_dir)
        checker = CHECKER.begin(data, "check", base_dir)
        _pending[path] = (ident, inference, checker)


def take(doc: Checkable) -> tuple[Callable[[], Any], Callable[[], Any]] | None:
    """The pending (inference, checker) answers for ``doc`` when it is the prefetched
    file as it was read, unedited and in protobuf form; else None (a prefetch for its
    path is dropped)."""
    path = doc.path
    if not path:
        return None
    with _lock:
        entry = _pending.pop(path, None)
    if entry is None:
        return None
    ident, inference, checker = entry
    try:
        same = _identity(path) == ident
    except OSError:
        same = False
    if not same or doc.revision != 0 or doc.source_format != "protobuf":
        _drain(entry)
        return None
    return inference, checker


def discard(path: str) -> None:
    """Drop a prefetch nobody took (the file did not load): its answers hold the
    workers until read."""
    with _lock:
        entry = _pending.pop(os.path.abspath(path), None)
    _drain(entry)


def _drain(entry: tuple[Any, Callable[[], Any], Callable[[], Any]] | None) -> None:
    """Read and drop answers nobody will use (each holds its worker until read)."""
    if entry is not None:
        entry[1]()
        entry[2]()
