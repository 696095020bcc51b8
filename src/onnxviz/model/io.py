"""Load and save models: protobuf and ONNX text format, external data, atomic writes.

The loader never repairs silently and never decodes tensor data: external references
are checked with ``stat`` only (problems become D1xx diagnostics on the tensor) and
values are decoded later, on demand.  Saving writes a temporary file in the target
folder, fsyncs and renames it over the target, so a crash leaves either the old file or
the new one, never half of either.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Literal

from google.protobuf.message import DecodeError
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto

from onnxviz.errors import LoadError, SaveError
from onnxviz.model import inplace
from onnxviz.model.diagnostics import Diagnostic, Location, Severity
from onnxviz.model.external import (
    SizeCache,
    check_external,
    is_external,
    read_external_bytes,
)
from onnxviz.model.save_commit import SaveCommit, finish_interrupted

TEXT_SUFFIXES = (".onnxtxt", ".onnxtext", ".txt")
SourceFormat = Literal["protobuf", "text"]
ExternalMode = Literal["keep", "embed", "external"]
WriteFn = Callable[[IO[bytes]], object]
# Protobuf's wire format cannot hold a message above 2 GiB.
PROTOBUF_LIMIT = 2**31 - 1


# An unmodified document's file: its bytes, or the map its big tensors were left in.
Original = bytes | inplace.InplaceSource


@dataclass
class Loaded:
    model: ModelProto
    diagnostics: list[Diagnostic] = field(default_factory=list)
    original_bytes: Original | None = None
    source_format: SourceFormat = "protobuf"
    # What the loader did about a save of this file that a kill interrupted (save_commit).
    recovered: list[str] = field(default_factory=list)


def is_text_path(path: str) -> bool:
    return path.lower().endswith(TEXT_SUFFIXES)


def _looks_like_text(data: bytes) -> bool:
    head = data[:4096]
    if not head.strip():
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return head.lstrip()[:1] in (b"<", b"#") or b"=>" in head


# onnx.parser is C++ code: on a user's file it runs in the checker's worker process, never
# in the app's.  The model layer cannot import check, so check hands its parser over on
# import (as surgery.TYPE_INFERENCE); the CLI and the GUI do so before they load anything.
# It raises ValueError with the parser's complaint.
TEXT_PARSER: Callable[[bytes], ModelProto] | None = None


def _parse_text(path: str, data: bytes) -> ModelProto:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise LoadError("the text model is not valid UTF-8", file=path) from None
    if TEXT_PARSER is None:
        raise LoadError(
            "cannot parse the ONNX text format: its parser runs in onnxviz's checker "
            "process (import onnxviz.check, or open it with onnxviz.open_model)",
            file=path,
        )
    try:
        return TEXT_PARSER(data)
    except ValueError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LoadError(f"cannot parse the ONNX text format: {first}", file=path) from None


def _parse_protobuf(path: str, data: bytes) -> ModelProto:
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as exc:
        reason = str(exc) or "malformed protobuf"
        if "depth" in reason.lower() or "recursion" in reason.lower():
            raise LoadError(
                f"the model nests subgraphs deeper than protobuf can parse ({reason})",
                file=path,
            ) from None
        raise LoadError(
            f"not an ONNX model: the file is truncated or is not protobuf ({reason})", file=path
        ) from None
    except RecursionError:
        raise LoadError("the model nests subgraphs too deeply to parse", file=path) from None
    if not model.HasField("graph"):
        raise LoadError(
            "not an ONNX model: the protobuf holds no graph "
            "(is it another kind of message, such as a tensor?)",
            file=path,
        )
    return model


def load(path: str) -> Loaded:
    """Read a model file.  Raises LoadError with one clear sentence if it cannot."""
    path = os.fspath(path)
    # A save of this model that a kill interrupted is finished or undone first.
    recovered = finish_interrupted(path) if os.path.isfile(path) else []
    kept = _load_inplace(path)
    if kept is not None:
        model, source = kept
        loaded = Loaded(model, original_bytes=source, source_format="protobuf")
        loaded.diagnostics.extend(
            external_diagnostics(model, os.path.dirname(os.path.abspath(path)))
        )
        loaded.recovered = recovered
        return loaded
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise LoadError("no such file", file=path) from None
    except IsADirectoryError:
        raise LoadError("is a folder, not a model file", file=path) from None
    except OSError as exc:
        raise LoadError(f"cannot read the file ({exc.strerror})", file=path) from None
    if not data:
        raise LoadError("the file is empty", file=path)
    if is_text_path(path) or (_looks_like_text(data) and not _parses_as_model(data)):
        model = _parse_text(path, data)
        loaded = Loaded(model, source_format="text")
    else:
        model = _parse_protobuf(path, data)
        loaded = Loaded(model, original_bytes=data, source_format="protobuf")
    loaded.diagnostics.extend(external_diagnostics(model, os.path.dirname(os.path.abspath(path))))
    loaded.recovered = recovered
    return loaded


def _load_inplace(path: str) -> tuple[ModelProto, inplace.InplaceSource] | None:
    """A big protobuf file parsed with its big tensors left in the file (`inplace`);
    None for small files, text, or anything the scan does not understand (the ordinary
    parse then runs and names the problem)."""
    if is_text_path(path):
        return None
    try:
        if os.path.getsize(path) < inplace.MIN_FILE_SIZE:
            return None
        with open(path, "rb") as fh:
            if _looks_like_text(fh.read(4096)):
                return None
        kept = inplace.load_inplace(path)
    except (OSError, ValueError):
        return None
    except DecodeError:
        return None
    if kept is None or not kept[0].HasField("graph"):
        return None
    return kept


def _parses_as_model(data: bytes) -> bool:
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:
        return False
    return model.HasField("graph")


# -- walking tensors -----------------------------------------------------------------


@dataclass(frozen=True)
class TensorSite:
    """Where a tensor lives: for messages and diagnostics."""

    tensor: TensorProto
    graph_path: str
    node: str | None = None
    attribute: str | None = None


# Attribute kinds that can hold tensors (UNDEFINED: old files, check the fields).
_TENSOR_KINDS = frozenset(
    {
        AttributeProto.UNDEFINED,
        AttributeProto.TENSOR,
        AttributeProto.TENSORS,
        AttributeProto.SPARSE_TENSOR,
        AttributeProto.SPARSE_TENSORS,
    }
)


def iter_tensors(model: ModelProto) -> Iterator[TensorSite]:
    """Every TensorProto in the model: initializers, sparse initializers' parts and
    tensor attributes, in every graph and function body.

    A light walk (`scopes.iter_graphs`, no index): opening a 100k-node model must not
    pay for an index just to find its few external tensors.
    """
    from onnxviz.model.scopes import iter_graphs

    for scope in iter_graphs(model):
        graph = scope.graph
        if graph is not None:
            for t in graph.initializer:
                yield TensorSite(t, scope.path)
            for s in graph.sparse_initializer:
                yield TensorSite(s.values, scope.path)
                yield TensorSite(s.indices, scope.path)
        for i, node in enumerate(scope.nodes):
            if not node.attribute:
                continue
            for attr in node.attribute:
                if attr.type not in _TENSOR_KINDS:
                    continue
                if attr.HasField("t"):
                    yield TensorSite(attr.t, scope.path, scope.node_label(i), attr.name)
                for t in attr.tensors:
                    yield TensorSite(t, scope.path, scope.node_label(i), attr.name)
                if attr.HasField("sparse_tensor"):
                    st = attr.sparse_tensor
                    yield TensorSite(st.values, scope.path, scope.node_label(i), attr.name)
    for info in model.training_info:
        for t in info.initialization.initializer:
            yield TensorSite(t, "training_info/initialization")
        for t in info.algorithm.initializer:
            yield TensorSite(t, "training_info/algorithm")


def _declared_nbytes(tensor: TensorProto) -> int | None:
    try:
        from onnxviz.model.tensors import tensor_nbytes
    except ImportError:
        return None
    try:
        return int(tensor_nbytes(tensor))
    except Exception:
        return None


def external_diagnostics(model: ModelProto, base_dir: str | None) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    sizes: SizeCache = {}
    for site in iter_tensors(model):
        t = site.tensor
        if not is_external(t):
            continue
        problem = check_external(t, base_dir, _declared_nbytes(t), sizes)
        if problem is None:
            continue
        code, message = problem
        out.append(
            Diagnostic(
                code=code,
                severity=Severity.ERROR,
                message=message,
                location=Location(
                    graph_path=site.graph_path,
                    node=site.node,
                    value=t.name or None,
                    attribute=site.attribute,
                    field="external_data",
                ),
                spec="IR#external-tensor-data",
                hint="Fix the data file or its location, or re-save with the data embedded.",
            )
        )
    return out


# -- saving -------------------------------------------------------------------------


def _atomic_write(target: str, write: WriteFn) -> None:
    """Write one file so that a crash leaves the old bytes or the new ones (save_commit)."""
    commit = SaveCommit(target)
    commit.stage(target, write)
    commit.commit()


def _external_tensors(model: ModelProto) -> list[TensorProto]:
    return [s.tensor for s in iter_tensors(model) if is_external(s.tensor)]


def _tensor_bytes(tensor: TensorProto, base_dir: str | None) -> bytes | memoryview:
    if is_external(tensor):
        return read_external_bytes(tensor, base_dir)
    return tensor.raw_data


def _make_raw(tensor: TensorProto) -> bool:
    """Move typed-field data into raw_data so it can be written externally."""
    if tensor.HasField("raw_data") or tensor.data_type == TensorProto.STRING:
        return tensor.HasField("raw_data")
    try:
        from onnxviz.model.tensors import from_array, to_array

        arr = to_array(tensor)
        new = from_array(arr, tensor.name)
    except Exception:
        return False
    if not new.HasField("raw_data"):
        return False
    keep_name, keep_doc = tensor.name, tensor.doc_string
    tensor.Clear()
    tensor.CopyFrom(new)
    tensor.name, tensor.doc_string = keep_name, keep_doc
    return True


def save(
    model: ModelProto,
    path: str,
    *,
    source_dir: str | None,
    external_data: ExternalMode = "keep",
    threshold: int = 1024,
    data_file: str | None = None,
    original_bytes: Original | None = None,
    text: bool | None = None,
) -> ModelProto:
    """Write ``model`` atomically to ``path``; returns the model as saved (external
    locations may differ from ``model``'s).  ``source_dir`` is where the model's current
    external files live.  ``original_bytes`` (an unmodified document's file) is written
    as is when nothing about the layout changes, so an unmodified save is byte-identical.
    """
    path = os.path.abspath(os.fspath(path))
    target_dir = os.path.dirname(path)
    as_text = is_text_path(path) if text is None else text
    same_dir = source_dir is not None and os.path.realpath(source_dir) == os.path.realpath(
        target_dir
    )
    try:
        if as_text:
            from onnx import printer

            out = ModelProto()
            out.CopyFrom(model)
            _embed_all(out, source_dir)
            data = printer.to_text(out).encode("utf-8")
            _atomic_write(path, lambda fh: fh.write(data))
            return out
        externals = [t for t in _external_tensors(model) if not inplace.is_inplace(t)]
        if external_data == "keep" and (not externals or same_dir):
            if isinstance(original_bytes, inplace.InplaceSource):
                source = original_bytes
                size = len(source.data)
                _atomic_write(path, lambda fh: source.copy_to(fh, 0, size))
                return model
            if original_bytes is not None:
                data = original_bytes
                _atomic_write(path, lambda fh: fh.write(data))
                return model
            _write_model(model, path)
            return model
        out = ModelProto()
        out.CopyFrom(model)
        if external_data == "embed":
            _embed_all(out, source_dir, keep_inplace=True)
            _write_model(out, path)
            return out
        # "external", or "keep" into another folder: one fresh data file beside the model,
        # put in place together with the model (save_commit: a kill never splits them).
        data_name = data_file or (os.path.splitext(os.path.basename(path))[0] + ".data")
        min_size = threshold if external_data == "external" else None
        commit = SaveCommit(path)
        try:
            _write_external(out, source_dir, target_dir, data_name, min_size, commit)
            streamed = inplace.serialize(out)
            if streamed is None:
                payload = out.SerializeToString()
                _check_size(len(payload), path)
                commit.stage(path, lambda fh: fh.write(payload))
                commit.commit()
            else:
                _check_size(streamed.size, path)
                starts: list[int] = []
                commit.stage(path, lambda fh: starts.extend(streamed.write(fh)))
                commit.commit()
                inplace.repoint(streamed.tensors, starts, path)
        except BaseException:
            commit.abort()
            raise
        from onnxviz.model.external import MAPPED_FILES

        MAPPED_FILES.forget(os.path.realpath(os.path.join(target_dir, data_name)))
        return out
    except SaveError:
        raise
    except OSError as exc:
        raise SaveError(f"cannot write the model ({exc.strerror or exc})", file=path) from None
    except Exception as exc:
        raise SaveError(f"cannot save the model ({type(exc).__name__}: {exc})", file=path) from None


def _write_model(model: ModelProto, path: str) -> None:
    """Write ``model`` atomically, streaming its in-place tensors' bytes from their
    files (never a copy of the whole model in memory); then those tensors refer to
    the new file."""
    streamed = inplace.serialize(model)
    if streamed is None:
        payload = model.SerializeToString()
        _check_size(len(payload), path)
        _atomic_write(path, lambda fh: fh.write(payload))
        return
    _check_size(streamed.size, path)
    starts: list[int] = []
    _atomic_write(path, lambda fh: starts.extend(streamed.write(fh)))
    inplace.repoint(streamed.tensors, starts, path)


def _check_size(size: int, path: str) -> None:
    if size > PROTOBUF_LIMIT:
        raise SaveError(
            "the model is over 2 GiB, the protobuf limit: save with external data",
            file=path,
        )


def _embed_all(model: ModelProto, source_dir: str | None, *, keep_inplace: bool = False) -> None:
    """Embed external tensors' bytes (with ``keep_inplace``, in-place ones stay as they
    are: the streamed save embeds them without a copy in memory)."""
    for tensor in _external_tensors(model):
        if keep_inplace and inplace.is_inplace(tensor):
            continue
        data = bytes(read_external_bytes(tensor, source_dir))
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT
        tensor.raw_data = data


def _write_external(
    model: ModelProto,
    source_dir: str | None,
    target_dir: str,
    data_name: str,
    min_size: int | None,
    commit: SaveCommit,
) -> None:
    """Put external tensors (and, with ``min_size``, every tensor at least that big) into
    one data file written atomically beside the model.  Sources are read through maps of
    the old files, which stay valid after the new file replaces them."""
    chosen: list[tuple[TensorProto, bytes | memoryview]] = []
    for site in iter_tensors(model):
        t = site.tensor
        if min_size is None and inplace.is_inplace(t):
            continue  # "keep": weights embedded in the model stay embedded (streamed)
        if is_external(t):
            chosen.append((t, read_external_bytes(t, source_dir)))
        elif (
            min_size is not None
            and t.data_type != TensorProto.STRING
            and _make_raw(t)
            and len(t.raw_data) >= min_size
        ):
            chosen.append((t, t.raw_data))
    if not chosen:
        return
    data_path = os.path.join(target_dir, data_name)
    placements: list[tuple[TensorProto, int, int]] = []

    def write(fh: IO[bytes]) -> None:
        offset = 0
        for tensor, data in chosen:
            pad = (-offset) % 64  # aligned so readers can map values directly
            if pad:
                fh.write(b"\0" * pad)
                offset += pad
            fh.write(data)
            placements.append((tensor, offset, len(data)))
            offset += len(data)

    commit.stage(data_path, write)
    for tensor, offset, length in placements:
        tensor.ClearField("raw_data")
        del tensor.external_data[:]
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (
            ("location", data_name),
            ("offset", str(offset)),
            ("length", str(length)),
        ):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value


def graph_of(model: ModelProto) -> GraphProto:
    return model.graph
