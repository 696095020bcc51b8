"""Weights left in place: big tensors of a single-file model read from a map of the file.

A 1 GiB model with embedded weights must not cost 1 GiB (or, through protobuf's parser
and the copies it hands out, several GiB) to open.  `scan` walks the protobuf wire format
of the file once and builds a small copy of it in which every large ``raw_data`` field is
replaced by an external-data reference to the same bytes in the file itself::

    data_location: EXTERNAL
    external_data { location: "<the file's name>", offset, length,
                    "onnxviz-inplace": "<token>" }

so the Document, the inspector, the runtime and save read these tensors exactly as they
read external data (`external.read_external_bytes`).  The token names the `InplaceSource`
(an open descriptor and a read-only map of the file as it was opened) that holds the
bytes, so a save over the very file that is mapped still reads the old bytes; without the
token (in a worker process) the location and offset still name the right bytes.

Saving writes such tensors back embedded (`write_model`): the model is serialized with a
short unique marker in place of each tensor's bytes, the length prefixes of the messages
that enclose a marker are recomputed, and the bytes are streamed from the old file in
chunks, never held whole in memory.

Only messages that can hold tensors are walked (model, graph, node, attribute, sparse
tensor, function, training info), and only those at least as long as the threshold: a
message shorter than the threshold cannot contain a field that long.
"""

from __future__ import annotations

import itertools
import mmap
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from onnx import ModelProto, TensorProto

INPLACE_KEY = "onnxviz-inplace"
# Files below this size are parsed whole (cheap, and every tensor keeps its raw_data).
MIN_FILE_SIZE = 32 * 2**20
# raw_data fields at least this long are left in the file.
MIN_TENSOR_BYTES = 64 * 2**10
_CHUNK = 16 * 2**20

# Length-delimited fields that hold messages which can contain tensors, per message kind.
_MODEL, _GRAPH, _NODE, _ATTR, _SPARSE, _TENSOR, _FUNCTION, _TRAINING = range(8)
_CHILDREN: dict[int, dict[int, int]] = {
    _MODEL: {7: _GRAPH, 25: _FUNCTION, 20: _TRAINING},
    _GRAPH: {1: _NODE, 5: _TENSOR, 15: _SPARSE},
    _NODE: {5: _ATTR},
    _ATTR: {5: _TENSOR, 6: _GRAPH, 10: _TENSOR, 11: _GRAPH, 22: _SPARSE, 23: _SPARSE},
    _SPARSE: {1: _TENSOR, 2: _TENSOR},
    _FUNCTION: {7: _NODE},
    _TRAINING: {1: _GRAPH, 2: _GRAPH},
    _TENSOR: {},
}
_RAW_DATA, _EXTERNAL_DATA, _DATA_LOCATION = 9, 13, 14


class WireError(ValueError):
    """The bytes are not well-formed protobuf (the caller falls back to a full parse)."""


# -- varints -------------------------------------------------------------------------------
def _varint(buf: memoryview | bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError("varint too long")


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _fields(buf: memoryview, pos: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, payload start, payload end) of each field.

    The loop decodes one-byte keys and lengths inline: a graph of 100k nodes is 100k
    fields, and this is the whole cost of scanning it."""
    while pos < end:
        start = pos
        key = buf[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(buf, pos, end)
        wire = key & 7
        if wire == 2:
            if pos >= end:
                raise WireError("truncated length")
            length = buf[pos]
            if length < 0x80:
                pos += 1
            elif pos + 1 < end and buf[pos + 1] < 0x80:  # 128 to 16383 bytes: most nodes
                length = (length & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                length, pos = _varint(buf, pos, end)
            lo = pos
            pos += length
            if pos > end:
                raise WireError("a field runs past the end of its message")
            yield key >> 3, 2, start, lo, pos
        elif wire == 0:
            _, pos = _varint(buf, pos, end)
            yield key >> 3, 0, start, pos, pos
        elif wire == 1 or wire == 5:
            size = 8 if wire == 1 else 4
            pos += size
            if pos > end:
                raise WireError("a field runs past the end of its message")
            yield key >> 3, wire, start, pos - size, pos
        else:
            raise WireError(f"unsupported wire type {wire}")


# -- scanning ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class InplaceSource:
    """The file a model's in-place tensors live in, as it was when opened."""

    path: str
    token: str
    fd: int
    data: mmap.mmap

    def view(self, offset: int, length: int) -> memoryview:
        return memoryview(self.data)[offset : offset + length]

    def copy_to(self, fh: IO[bytes], offset: int, length: int) -> None:
        """Write ``length`` bytes from ``offset`` in chunks read with pread (the pages
        go through the page cache, not into this process's resident memory)."""
        pread = getattr(os, "pread", None)  # (not on Windows: read through the map)
        while length > 0:
            size = min(length, _CHUNK)
            chunk = (
                pread(self.fd, size, offset)
                if pread is not None
                else bytes(self.data[offset : offset + size])
            )
            if not chunk:
                raise OSError(f"'{self.path}' is shorter than when it was opened")
            fh.write(chunk)
            offset += len(chunk)
            length -= len(chunk)


class _Registry:
    """Open in-place sources by token (kept open while a model may refer to them)."""

    def __init__(self) -> None:
        self._sources: dict[str, InplaceSource] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def open(self, path: str) -> InplaceSource:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            data = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            token = f"{os.getpid()}-{next(self._ids)}"
            source = InplaceSource(os.path.abspath(path), token, fd, data)
            self._sources[token] = source
        return source

    def get(self, token: str) -> InplaceSource | None:
        with self._lock:
            return self._sources.get(token)


SOURCES = _Registry()


@dataclass(frozen=True)
class InplaceRef:
    token: str
    offset: int
    length: int


def inplace_ref(tensor: TensorProto) -> InplaceRef | None:
    """The in-place reference of a tensor loaded by `scan`, or None."""
    if tensor.data_location != TensorProto.EXTERNAL:
        return None
    entries = tensor.external_data
    # The token is written last (`_reference`, `repoint`): one look tells most tensors apart.
    if not entries or entries[len(entries) - 1].key != INPLACE_KEY:
        return None
    fields = {e.key: e.value for e in entries}
    token = fields.get(INPLACE_KEY)
    if token is None:
        return None
    try:
        return InplaceRef(token, int(fields["offset"]), int(fields["length"]))
    except (KeyError, ValueError):
        return None


def is_inplace(tensor: TensorProto) -> bool:
    return inplace_ref(tensor) is not None


def read_inplace(tensor: TensorProto) -> memoryview | None:
    """The tensor's bytes from its source's map, or None when it is not in place (or its
    source is not open in this process: the caller resolves location and offset)."""
    ref = inplace_ref(tensor)
    if ref is None:
        return None
    source = SOURCES.get(ref.token)
    if source is None:
        return None
    return source.view(ref.offset, ref.length)


def adopt(model: ModelProto, base_dir: str | None) -> None:
    """Give in-place tensors whose source is not open in this process (a crash-recovery
    snapshot, a model sent from another process) a source again: the file their location
    names in ``base_dir``, which holds their bytes at their offsets.  Without this a save
    would write them as references to a map that no longer exists."""
    from onnxviz.errors import ExternalDataError
    from onnxviz.model.external import resolve_location
    from onnxviz.model.io import iter_tensors

    opened: dict[str, InplaceSource | None] = {}
    for site in iter_tensors(model):
        tensor = site.tensor
        ref = inplace_ref(tensor)
        if ref is None or SOURCES.get(ref.token) is not None:
            continue
        location = {e.key: e.value for e in tensor.external_data}.get("location", "")
        if location not in opened:
            try:
                opened[location] = SOURCES.open(resolve_location(base_dir, location))
            except (ExternalDataError, OSError, ValueError):
                opened[location] = None
        source = opened[location]
        if source is None or ref.offset + ref.length > len(source.data):
            # Leave it as plain external data: the loader's D10x rules say what is wrong.
            entries = [(e.key, e.value) for e in tensor.external_data if e.key != INPLACE_KEY]
        else:
            entries = [
                (e.key, source.token if e.key == INPLACE_KEY else e.value)
                for e in tensor.external_data
            ]
        del tensor.external_data[:]
        for key, value in entries:
            e = tensor.external_data.add()
            e.key, e.value = key, value


def plain_external_copy(model: ModelProto) -> ModelProto:
    """A copy in which in-place tensors are plain external data (location: the model
    file, offset, length; no token), for peers such as onnxruntime that read external
    data themselves relative to the model's folder and refuse keys they do not know."""
    from onnxviz.model.io import iter_tensors

    copy = ModelProto()
    copy.CopyFrom(model)
    for site in iter_tensors(copy):
        tensor = site.tensor
        if inplace_ref(tensor) is None:
            continue
        entries = [(e.key, e.value) for e in tensor.external_data if e.key != INPLACE_KEY]
        del tensor.external_data[:]
        for key, value in entries:
            e = tensor.external_data.add()
            e.key, e.value = key, value
    return copy


def _entry(key: str, value: str) -> bytes:
    k, v = key.encode(), value.encode()
    body = b"\x0a" + encode_varint(len(k)) + k + b"\x12" + encode_varint(len(v)) + v
    return b"\x6a" + encode_varint(len(body)) + body  # field 13, wire type 2


def _reference(location: str, token: str, offset: int, length: int) -> bytes:
    return (
        _entry("location", location)
        + _entry("offset", str(offset))
        + _entry("length", str(length))
        + _entry(INPLACE_KEY, token)
        + b"\x70\x01"  # data_location (14) = EXTERNAL
    )


def scan(
    buf: memoryview, location: str, token: str, min_tensor_bytes: int = MIN_TENSOR_BYTES
) -> tuple[bytes, int]:
    """A copy of the serialized ModelProto ``buf`` with every ``raw_data`` of at least
    ``min_tensor_bytes`` replaced by a reference into ``buf``; and how many were."""
    count = 0

    def message(kind: int, start: int, end: int) -> bytes | None:
        """The rewritten message, or None when nothing inside it changes."""
        nonlocal count
        children = _CHILDREN[kind]
        pieces: list[bytes | memoryview] = []
        copied = start  # bytes before this position are in ``pieces`` already
        changed = False
        if kind == _TENSOR:
            numbers = []
            raw = None
            for number, wire, field_start, lo, hi in _fields(buf, start, end):
                numbers.append(number)
                if number == _RAW_DATA and wire == 2:
                    raw = (field_start, lo, hi)
            if (
                raw is None
                or raw[2] - raw[1] < min_tensor_bytes
                or _EXTERNAL_DATA in numbers
                or _DATA_LOCATION in numbers
                or numbers.count(_RAW_DATA) != 1
            ):
                return None
            field_start, lo, hi = raw
            count += 1
            return (
                bytes(buf[start:field_start])
                + bytes(buf[hi:end])
                + _reference(location, token, lo, hi - lo)
            )
        for number, wire, field_start, lo, hi in _fields(buf, start, end):
            child = children.get(number)
            if child is None or wire != 2 or hi - lo < min_tensor_bytes:
                continue
            inner = message(child, lo, hi)
            if inner is None:
                continue
            changed = True
            pieces.append(buf[copied:field_start])
            pieces.append(bytes(buf[field_start:lo][: _key_length(buf, field_start)]))
            pieces.append(encode_varint(len(inner)))
            pieces.append(inner)
            copied = hi
        if not changed:
            return None
        pieces.append(buf[copied:end])
        return b"".join(pieces)

    rewritten = message(_MODEL, 0, len(buf))
    return (bytes(buf) if rewritten is None else rewritten), count


def _key_length(buf: memoryview, pos: int) -> int:
    _, after = _varint(buf, pos, len(buf))
    return after - pos


def load_inplace(
    path: str, min_tensor_bytes: int | None = None
) -> tuple[ModelProto, InplaceSource] | None:
    """Parse ``path`` with its big tensors left in place, or None when it has none (or is
    not well-formed protobuf: the caller then parses it the ordinary way, which names
    the problem).  The returned source also holds the whole file for a byte-identical
    unmodified save."""
    source = SOURCES.open(path)
    threshold = MIN_TENSOR_BYTES if min_tensor_bytes is None else min_tensor_bytes
    try:
        skeleton, count = scan(
            memoryview(source.data), os.path.basename(path), source.token, threshold
        )
    except (WireError, IndexError, RecursionError):
        return None
    if not count:
        return None
    model = ModelProto()
    model.ParseFromString(skeleton)
    return model, source


# -- saving -----------------------------------------------------------------------------------
_MARK = b"\xfeONNXVIZ-INPLACE\xfe"
_MARKER_LENGTH = len(_MARK) + 16


def _marker(index: int) -> bytes:
    return _MARK + index.to_bytes(8, "little") + os.urandom(8)


@dataclass(frozen=True)
class _Span:
    source: InplaceSource
    offset: int
    length: int
    index: int  # which tensor of `Serialized.tensors`


Piece = bytes | _Span


@dataclass
class Serialized:
    """A model serialized as byte strings and spans of in-place sources."""

    pieces: list[Piece]
    tensors: list[TensorProto]  # the in-place tensors, in span order

    @property
    def size(self) -> int:
        return sum(p.length if isinstance(p, _Span) else len(p) for p in self.pieces)

    def write(self, fh: IO[bytes]) -> list[int]:
        """Write the model; returns where each tensor's bytes start in the output."""
        starts = [0] * len(self.tensors)
        position = 0
        for piece in self.pieces:
            if isinstance(piece, _Span):
                starts[piece.index] = position
                piece.source.copy_to(fh, piece.offset, piece.length)
                position += piece.length
            else:
                fh.write(piece)
                position += len(piece)
        return starts


def serialize(model: ModelProto) -> Serialized | None:
    """The model serialized with every in-place tensor embedded again, its bytes left
    as spans of their sources; None when the model has no in-place tensor whose source
    is open here (then ``SerializeToString`` is the whole answer)."""
    from onnxviz.model.io import iter_tensors

    saved: list[tuple[TensorProto, list[tuple[str, str]], int]] = []
    spans: dict[bytes, _Span] = {}
    for site in iter_tensors(model):
        tensor = site.tensor
        ref = inplace_ref(tensor)
        if ref is None:
            continue
        source = SOURCES.get(ref.token)
        if source is None:
            continue
        marker = _marker(len(spans))
        spans[marker] = _Span(source, ref.offset, ref.length, len(saved))
        saved.append(
            (tensor, [(e.key, e.value) for e in tensor.external_data], tensor.data_location)
        )
        del tensor.external_data[:]
        tensor.ClearField("data_location")
        tensor.raw_data = marker
    if not spans:
        return None
    try:
        skeleton = model.SerializeToString()
    finally:
        for tensor, entries, location in saved:
            tensor.ClearField("raw_data")
            for key, value in entries:
                e = tensor.external_data.add()
                e.key, e.value = key, value
            tensor.data_location = location  # type: ignore[assignment]
    pieces, _ = _expand(memoryview(skeleton), 0, len(skeleton), spans, _MODEL)
    return Serialized(pieces, [t for t, _, _ in saved])


def repoint(tensors: list[TensorProto], starts: list[int], path: str) -> None:
    """After a save wrote ``tensors`` embedded into ``path`` at ``starts``: refer to the
    new file (its map), so the old one can go and later saves copy from the new one."""
    source = SOURCES.open(path)
    location = os.path.basename(path)
    for tensor, start in zip(tensors, starts):
        ref = inplace_ref(tensor)
        if ref is None:
            continue
        del tensor.external_data[:]
        for key, value in (
            ("location", location),
            ("offset", str(start)),
            ("length", str(ref.length)),
            (INPLACE_KEY, source.token),
        ):
            e = tensor.external_data.add()
            e.key, e.value = key, value


def _expand(
    buf: memoryview, start: int, end: int, spans: dict[bytes, _Span], kind: int
) -> tuple[list[Piece], int]:
    """The pieces of buf[start:end] with markers replaced by their spans, and the
    length of the result."""
    pieces: list[Piece] = []
    total = 0
    copied = start
    for number, wire, field_start, lo, hi in _fields(buf, start, end):
        if wire != 2:
            continue
        payload = bytes(buf[lo:hi]) if hi - lo == _MARKER_LENGTH else None
        span = spans.get(payload) if payload is not None and kind == _TENSOR else None
        child = _CHILDREN[kind].get(number)
        if span is None and (child is None or not _holds_marker(buf, lo, hi)):
            continue
        head = (
            bytes(buf[copied:field_start])
            + bytes(buf[field_start:lo])[: _key_length(buf, field_start)]
        )
        if span is not None:
            inner: list[Piece] = [span]
            length = span.length
        else:
            assert child is not None
            inner, length = _expand(buf, lo, hi, spans, child)
        prefix = head + encode_varint(length)
        pieces.append(prefix)
        pieces.extend(inner)
        total += len(prefix) + length
        copied = hi
    tail = bytes(buf[copied:end])
    pieces.append(tail)
    total += len(tail)
    return pieces, total


def _holds_marker(buf: memoryview, lo: int, hi: int) -> bool:
    return bytes(buf[lo:hi]).find(_MARK) >= 0
