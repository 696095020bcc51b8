"""External tensor data: safe location resolution and lazy, mmap-backed reads.

A tensor stored outside the model names a file relative to the model's folder.  We
never follow a location out of that folder (``..``, an absolute path, or a symlink that
points outside are refused), never read a data file until someone needs the values,
and then map it instead of reading it whole.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from onnxviz.errors import ExternalDataError

if TYPE_CHECKING:
    from onnx import TensorProto

# TensorProto.EXTERNAL: this module imports no onnx, so that check's worker process can
# read small external tensors without importing onnx's Python package (check.prepare).
_EXTERNAL = 1


@dataclass(frozen=True)
class ExternalRef:
    location: str
    offset: int
    length: int | None  # None: to the end of the file
    checksum: str | None


def external_ref(tensor: TensorProto) -> ExternalRef:
    """Parse a tensor's ``external_data`` key/value list."""
    fields = {e.key: e.value for e in tensor.external_data}
    name = tensor.name or "<unnamed>"
    location = fields.get("location", "")
    if not location:
        raise ExternalDataError(f"tensor '{name}' is marked external but has no 'location'")
    try:
        offset = int(fields.get("offset", "0") or 0)
        length = int(fields["length"]) if fields.get("length") else None
    except ValueError as exc:
        raise ExternalDataError(
            f"tensor '{name}' has a non-numeric external offset or length ({exc})"
        ) from None
    if offset < 0 or (length is not None and length < 0):
        raise ExternalDataError(f"tensor '{name}' has a negative external offset or length")
    return ExternalRef(location, offset, length, fields.get("checksum"))


def is_external(tensor: TensorProto) -> bool:
    return tensor.data_location == _EXTERNAL


def resolve_location(base_dir: str | None, location: str, tensor_name: str = "") -> str:
    """The real path of ``location`` inside ``base_dir``; ExternalDataError if it escapes."""
    label = f"tensor '{tensor_name}'" if tensor_name else "external data"
    if base_dir is None:
        raise ExternalDataError(f"{label} refers to '{location}' but the model has no folder")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location[:3]:
        raise ExternalDataError(f"{label} uses an absolute external path '{location}' (refused)")
    norm = os.path.normpath(location)
    if norm == ".." or norm.startswith(".." + os.sep) or norm.startswith("../"):
        raise ExternalDataError(f"{label} location '{location}' escapes the model's folder")
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, norm))
    if os.path.commonpath([root, path]) != root:
        raise ExternalDataError(
            f"{label} location '{location}' resolves outside the model's folder (symlink?)"
        )
    return path


class _MappedFiles:
    """Read-only maps of external data files, opened on first use, shared per path."""

    def __init__(self) -> None:
        self._maps: dict[str, mmap.mmap | bytes] = {}
        self._lock = threading.Lock()

    def get(self, path: str) -> mmap.mmap | bytes:
        with self._lock:
            cached = self._maps.get(path)
            if cached is not None:
                return cached
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                # mmap of an empty file is an error; an empty bytes object behaves the same.
                mapped: mmap.mmap | bytes = (
                    mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
                )
            self._maps[path] = mapped
            return mapped

    def forget(self, path: str | None = None) -> None:
        """Drop maps (all, or one path); views handed out earlier stay valid."""
        with self._lock:
            if path is None:
                self._maps.clear()
            else:
                self._maps.pop(path, None)


MAPPED_FILES = _MappedFiles()


# location -> (real path, size), or why it has neither; shared by one pass over a model.
SizeCache = dict[str, tuple[str, int] | ExternalDataError | OSError]


def check_external(
    tensor: TensorProto,
    base_dir: str | None,
    expected_nbytes: int | None,
    sizes: SizeCache | None = None,
) -> tuple[str, str] | None:
    """Cheap validity check without reading data: None, or (code, sentence).

    Codes: D101 missing file, D102 location escapes the folder, D103 range past the end,
    D104 length does not match the dims, D105 malformed external_data fields.
    """
    name = tensor.name or "<unnamed>"
    try:
        ref = external_ref(tensor)
    except ExternalDataError as exc:
        return "D105", exc.message
    # An LLM export has thousands of tensors in one or a few files: ``sizes`` keeps each
    # location's resolved path and size (or why it has none) for the next tensor.
    known = sizes.get(ref.location) if sizes is not None else None
    if known is None:
        try:
            path = resolve_location(base_dir, ref.location, name)
            known = (path, os.stat(path).st_size)
        except (ExternalDataError, OSError) as exc:
            known = exc
        if sizes is not None:
            sizes[ref.location] = known
    if isinstance(known, ExternalDataError):
        problem = resolve_problem(base_dir, ref.location, name)
        return "D102", problem
    if isinstance(known, OSError):
        return "D101", f"tensor '{name}': external data file '{ref.location}' is missing"
    size = known[1]
    end = ref.offset + (ref.length if ref.length is not None else 0)
    if ref.offset > size or end > size:
        return "D103", (
            f"tensor '{name}': external range offset {ref.offset}"
            f"{'' if ref.length is None else f' + length {ref.length}'} runs past the end of "
            f"'{ref.location}' ({size} bytes)"
        )
    available = ref.length if ref.length is not None else size - ref.offset
    if expected_nbytes is not None and available != expected_nbytes:
        return "D104", (
            f"tensor '{name}': external data has {available} bytes but its dims and type "
            f"need {expected_nbytes}"
        )
    return None


def resolve_problem(base_dir: str | None, location: str, tensor_name: str) -> str:
    """Why ``location`` cannot be used, in a sentence naming the tensor."""
    try:
        resolve_location(base_dir, location, tensor_name)
    except ExternalDataError as exc:
        return exc.message
    return f"tensor '{tensor_name}': external location '{location}' cannot be used"


def read_external_bytes(tensor: TensorProto, base_dir: str | None) -> memoryview:
    """A read-only view of a tensor's external bytes (mapped, not copied).  A tensor
    left in place in its own model file (`inplace`) reads from that file's map as it
    was opened, whatever has been written over the path since."""
    # A tensor is in place only when its source file was opened in this process, by
    # model.inplace: a process that never imported it (check's worker) has none.
    inplace = sys.modules.get("onnxviz.model.inplace")
    kept = inplace.read_inplace(tensor) if inplace is not None else None
    if kept is not None:
        return kept  # type: ignore[no-any-return]
    name = tensor.name or "<unnamed>"
    ref = external_ref(tensor)
    path = resolve_location(base_dir, ref.location, name)
    try:
        mapped = MAPPED_FILES.get(path)
    except OSError as exc:
        raise ExternalDataError(
            f"tensor '{name}': cannot open external data file '{ref.location}' ({exc.strerror})"
        ) from None
    size = len(mapped)
    end = size if ref.length is None else ref.offset + ref.length
    if ref.offset > size or end > size:
        raise ExternalDataError(
            f"tensor '{name}': external range {ref.offset}..{end} is past the end of "
            f"'{ref.location}' ({size} bytes)"
        )
    return memoryview(mapped)[ref.offset : end]
