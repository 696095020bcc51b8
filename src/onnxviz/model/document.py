"""The Document: a ModelProto (the truth) with derived indexes and an undo stack.

Everything that changes a model goes through `Document.execute(command)`; views
subscribe to the ChangeSets it reports.  Indexes (`scopes()`) are derived and rebuilt
or patched after each command; the ModelProto is never copied for an edit.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from onnx import AttributeProto, ModelProto, TensorProto, helper

from onnxviz.errors import EditError
from onnxviz.model import io
from onnxviz.model.changes import ChangeSet
from onnxviz.model.commands import (
    Command,
    RenameValue,
    SetAttribute,
)
from onnxviz.model.diagnostics import Diagnostic
from onnxviz.model.node_id import NodeId
from onnxviz.model.scopes import GraphScope, build_scopes, reindex_scope
from onnxviz.model.wire import MAX_PROTO, serialize_in_pieces

Listener = Callable[[ChangeSet], None]
_BYTES_ATTEMPTS = 20  # serializations of a model that edits keep overlapping
_EDIT_WAIT = 5.0  # seconds a reader waits for a command half-way (they take milliseconds)
_KEPT_BYTES = 1 << 28  # bytes kept for the next reader of the same edit; above, rebuilt
_entry_ids = itertools.count(1)


class _Entry:
    """One undo step: one command, or several merged edits of the same field."""

    def __init__(self, command: Command) -> None:
        self.commands = [command]
        self.id = next(_entry_ids)

    @property
    def label(self) -> str:
        return self.commands[-1].label


class Document:
    """One open model: its ModelProto (the truth, never copied for an edit), where it
    came from (path, source format, the loader's diagnostics, the original bytes or
    in-place map), the derived per-graph indexes (`scopes`, `scope(path)`), and the undo
    and redo stacks of the commands `execute` ran.  ``revision`` counts every change;
    listeners (`subscribe`) get each command's ChangeSet."""

    def __init__(
        self,
        model: ModelProto,
        path: str | None = None,
        *,
        diagnostics: list[Diagnostic] | None = None,
        original_bytes: io.Original | None = None,
        source_format: io.SourceFormat = "protobuf",
    ) -> None:
        self.model = model
        self.path = os.path.abspath(path) if path else None
        self.diagnostics: list[Diagnostic] = list(diagnostics or [])
        self.source_format = source_format
        self._original_bytes = original_bytes
        self._scopes: list[GraphScope] | None = None
        self._by_path: dict[str, GraphScope] = {}
        self._undo: list[_Entry] = []
        self._redo: list[_Entry] = []
        self._listeners: list[Listener] = []
        self._saved_marker: int | None = 0  # id of the top undo entry when last saved
        self.revision = 0
        # A sequence lock for readers in other threads (`model_bytes`): a command counts
        # itself in `_edits_begun` and `_editing` before it touches the model, and leaves
        # `_editing` when done; a copy taken while both stayed unchanged and `_editing`
        # was 0 saw no edit half-way.
        self._edits_begun = 0
        self._editing = 0
        self._bytes_lock = threading.Lock()
        self._bytes: tuple[int, bytes] | None = None  # (edits begun, the model's bytes)
        # The file as we last read or wrote it, to notice another program rewriting it.
        self._disk_identity = _identity(self.path) if self.path else None

    # -- opening ---------------------------------------------------------------------
    @classmethod
    def open(cls, path: str) -> Document:
        loaded = io.load(path)
        return cls(
            loaded.model,
            path,
            diagnostics=loaded.diagnostics,
            original_bytes=loaded.original_bytes,
            source_format=loaded.source_format,
        )

    @classmethod
    def from_model(cls, model: ModelProto, path: str | None = None) -> Document:
        base = os.path.dirname(os.path.abspath(path)) if path else None
        io.inplace.adopt(model, base)  # weights another process left in place
        return cls(model, path, diagnostics=io.external_diagnostics(model, base))

    @property
    def base_dir(self) -> str | None:
        return os.path.dirname(self.path) if self.path else None

    @property
    def display_name(self) -> str:
        return os.path.basename(self.path) if self.path else (self.model.graph.name or "untitled")

    # -- indexes -----------------------------------------------------------------------
    def scopes(self) -> list[GraphScope]:
        if self._scopes is None:
            self._scopes = build_scopes(self.model)
            self._by_path = {s.path: s for s in self._scopes}
        return self._scopes

    def scope(self, path: str = "main") -> GraphScope:
        self.scopes()
        return self._by_path[path]

    @property
    def main_scope(self) -> GraphScope:
        return self.scope("main")

    @property
    def node_count(self) -> int:
        """Nodes in every graph: the main one, every subgraph body and every function."""
        return sum(len(s.nodes) for s in self.scopes())

    def find_node(self, label: str, graph_path: str = "main") -> NodeId | None:
        """The node with this label (name or ``#index``) in a graph; None when the graph
        or the node does not exist."""
        self.scopes()
        scope = self._by_path.get(graph_path)
        if scope is None:
            return None
        index = scope.node_index(label)
        return None if index is None else NodeId(graph_path, index, scope.node_label(index))

    def tensor_array(self, tensor: TensorProto) -> Any:
        """Decode a tensor (external data mapped from this document's folder)."""
        from onnxviz.model.tensors import to_array

        return to_array(tensor, self.base_dir)

    # -- editing ------------------------------------------------------------------------
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _notify(self, changes: ChangeSet) -> None:
        self.revision += 1
        for listener in list(self._listeners):
            listener(changes)

    def _update_index(self, changes: ChangeSet) -> None:
        if self._scopes is None:
            return
        if changes.structural and not changes.index_kept:
            self._scopes = None
            self._by_path = {}
            return
        for path in changes.relabel:
            scope = self._by_path.get(path)
            if scope is None:
                self._scopes = None
                return
            scope.forget_labels()
        for path in changes.reindex:
            scope = self._by_path.get(path)
            if scope is None:
                self._scopes = None
                return
            reindex_scope(scope)

    def rename_in_index(self, paths: list[str], old: str, new: str) -> None:
        """Patch the index of the graphs at ``paths`` after a rename of ``old`` to ``new``
        done outside a command's own bookkeeping (a rename's undo: the index the document
        holds then may be a rebuilt one).  No-op while there is no index."""
        if self._scopes is None:
            return
        for path in paths:
            scope = self._by_path.get(path)
            if scope is not None:
                scope.rename_in_index(old, new)

    def apply_unrecorded(self, command: Command) -> ChangeSet:
        """Apply ``command`` and update the index, without an undo entry and without
        telling listeners: for a command that is part of another (a macro), which is
        recorded and reported as one."""
        self.scopes()
        with self._changing():
            changes = command.apply(self)
        self._update_index(changes)
        return changes

    def revert_unrecorded(self, command: Command) -> ChangeSet:
        """Revert a command applied by `apply_unrecorded` (index updated, nobody told)."""
        self.scopes()
        with self._changing():
            changes = command.revert(self)
        self._update_index(changes)
        return changes

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """Around every change of the model: the sequence lock `model_bytes` reads."""
        self._edits_begun += 1
        self._editing += 1
        try:
            yield
        finally:
            self._editing -= 1

    def execute(self, command: Command) -> ChangeSet:
        """Apply ``command`` and push it on the undo stack (EditError: nothing changed)."""
        changes = self.apply_unrecorded(command)
        key = command.merge_key()
        top = self._undo[-1] if self._undo else None
        if (
            key is not None
            and top is not None
            and not self._redo
            and top.commands[-1].merge_key() == key
            and top.id != self._saved_marker
        ):
            top.commands.append(command)
        else:
            self._undo.append(_Entry(command))
        self._redo.clear()
        self._notify(changes)
        return changes

    def unedited_bytes(self) -> bytes | None:
        """The protobuf file's bytes as read, while no edit stands (else None): the
        worker processes take these instead of a fresh serialization, which at 100k nodes
        holds the GIL for about 100 ms and so stops the UI thread."""
        original = self._original_bytes
        if self._undo or self.source_format != "protobuf" or not isinstance(original, bytes):
            return None
        return original

    def model_bytes(self) -> bytes | None:
        """The model's protobuf bytes as it is now, from any thread; None when edits
        kept coming meanwhile; TooBig (a ValueError) over protobuf's 2 GB, which no
        worker process could read.
        The file's own bytes while no edit stands, else a serialization in small steps
        (`model.wire`: one call held the GIL, and so stopped the UI thread, for 20-60 ms
        at 100k nodes), kept until the next edit: validation, inference and the recovery
        snapshot of one edit share it.  A copy that an edit overlapped is thrown away
        and taken again."""
        original = self.unedited_bytes()
        if original is not None and len(original) <= MAX_PROTO:
            return original
        with self._bytes_lock:
            attempts = 0
            deadline = time.monotonic() + _EDIT_WAIT
            while attempts < _BYTES_ATTEMPTS:
                begun = self._edits_begun
                kept = self._bytes
                if self._editing:  # a command of the UI thread is half-way
                    if time.monotonic() > deadline:
                        return None
                    time.sleep(0.002)
                    continue
                if kept is not None and kept[0] == begun:
                    return kept[1]
                model = self.model
                data = serialize_in_pieces(model)
                if self._edits_begun == begun and not self._editing and model is self.model:
                    self._bytes = (begun, data) if len(data) <= _KEPT_BYTES else None
                    return data
                attempts += 1
        return None

    def unedited_file(self) -> tuple[str, tuple[int, int, int]] | None:
        """(path, identity) of the protobuf file this document is, while no edit stands
        and the file on disk is still the one read (another process may open it to the
        same model); else None."""
        if self._undo or self.source_format != "protobuf" or not self.path:
            return None
        identity = _identity(self.path)
        if identity is None or identity != self._disk_identity:
            return None
        return self.path, identity

    def close(self) -> None:
        """The document is done with (another one replaced it, or its window closed):
        forget its history and listeners.  Undo steps are closures over the document, a
        reference cycle; the app keeps a loaded model's objects out of the cycle
        collector's reach (ui/workers.py freezes them, so that a collection never scans a
        100k-node index), and a cycle would keep a closed model in memory for good.
        Without them, reference counting frees it the moment its last user lets go."""
        self._undo.clear()
        self._redo.clear()
        self._listeners.clear()

    def undo(self) -> ChangeSet:
        if not self._undo:
            raise EditError("nothing to undo")
        entry = self._undo.pop()
        changes = ChangeSet()
        for command in reversed(entry.commands):
            changes = changes.merge(self.revert_unrecorded(command))
        self._redo.append(entry)
        self._notify(changes)
        return changes

    def redo(self) -> ChangeSet:
        if not self._redo:
            raise EditError("nothing to redo")
        entry = self._redo.pop()
        changes = ChangeSet()
        for command in entry.commands:
            changes = changes.merge(self.apply_unrecorded(command))
        self._undo.append(entry)
        self._notify(changes)
        return changes

    @property
    def can_undo(self) -> bool:
        return bool(self._undo)

    @property
    def can_redo(self) -> bool:
        return bool(self._redo)

    @property
    def undo_label(self) -> str | None:
        return self._undo[-1].label if self._undo else None

    @property
    def redo_label(self) -> str | None:
        return self._redo[-1].label if self._redo else None

    @property
    def is_modified(self) -> bool:
        top = self._undo[-1].id if self._undo else 0
        return top != self._saved_marker

    def mark_unsaved(self) -> None:
        """Say the document differs from its file although no edit was made here (a
        recovered snapshot): it shows as modified until saved."""
        self._saved_marker = -1

    @property
    def _unchanged_since_load(self) -> bool:
        return not self._undo

    # -- facade (docs/architecture.md §9) ------------------------------------------------
    def _node_index(self, node: str, graph: str | None) -> tuple[str, int]:
        path = graph or "main"
        try:
            scope = self.scope(path)
        except KeyError:
            raise EditError(f"there is no graph '{path}'") from None
        index = scope.node_index(node)
        if index is None:
            raise EditError(f"graph '{path}' has no node '{node}'", graph_path=path)
        return path, index

    def rename_value(self, name: str, new_name: str, graph: str | None = None) -> ChangeSet:
        return self.execute(RenameValue(graph or "main", name, new_name))

    def set_attribute(
        self, node: str, name: str, value: Any, graph: str | None = None
    ) -> ChangeSet:
        path, index = self._node_index(node, graph)
        if isinstance(value, AttributeProto):
            attr = AttributeProto()
            attr.CopyFrom(value)
            attr.name = name
        else:
            try:
                attr = helper.make_attribute(name, value)
            except Exception as exc:
                raise EditError(f"cannot use {value!r} as attribute '{name}': {exc}") from None
        return self.execute(SetAttribute(path, index, attr))

    # -- saving ---------------------------------------------------------------------------
    def save(
        self,
        path: str | None = None,
        external_data: io.ExternalMode = "keep",
        *,
        threshold: int = 1024,
        overwrite_changed: bool = False,
    ) -> str:
        """Save atomically; returns the path written.  The Document then refers to it.
        Saving over the document's own file after another program changed it raises
        FileChangedError, unless ``overwrite_changed``."""
        target = os.path.abspath(path or self.path or "")
        if not target or os.path.isdir(target):
            from onnxviz.errors import SaveError

            raise SaveError("no file name to save to", file=path)
        if (
            not overwrite_changed
            and target == self.path
            and self._disk_identity is not None
            and _identity(target) not in (None, self._disk_identity)
        ):
            from onnxviz.errors import FileChangedError

            raise FileChangedError(
                "the file changed on disk since it was opened (another program wrote it); "
                "saving would overwrite that",
                file=target,
            )
        original = None
        if (
            self._unchanged_since_load
            and external_data == "keep"
            and self._original_bytes is not None
            and not io.is_text_path(target)
        ):
            original = self._original_bytes
        # A save may move tensors' data (external files, in-place weights): readers of
        # the model in other threads (`model_bytes`) wait for it as for an edit.
        with self._changing():
            saved = io.save(
                self.model,
                target,
                source_dir=self.base_dir,
                external_data=external_data,
                threshold=threshold,
                original_bytes=original,
            )
            if saved is not self.model:
                self._adopt_tensor_storage(saved)
                self._original_bytes = None
        self.path = target
        self._disk_identity = _identity(target)
        self._saved_marker = self._undo[-1].id if self._undo else 0
        from onnxviz.model.external import MAPPED_FILES

        MAPPED_FILES.forget()
        return target

    def _adopt_tensor_storage(self, saved: ModelProto) -> None:
        """After a save that moved tensor data, point our tensors where it now is (in
        place, so references held by undo journals stay valid)."""
        ours = [s.tensor for s in io.iter_tensors(self.model)]
        theirs = [s.tensor for s in io.iter_tensors(saved)]
        if len(ours) != len(theirs):
            return
        for mine, new in zip(ours, theirs):
            if mine.data_location == new.data_location and list(mine.external_data) == list(
                new.external_data
            ):
                continue
            name, doc = mine.name, mine.doc_string
            mine.CopyFrom(new)
            mine.name, mine.doc_string = name, doc


def _identity(path: str | None) -> tuple[int, int, int] | None:
    """(modification time in ns, size, inode) of a file, or None when there is none."""
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return None if st is None else (st.st_mtime_ns, st.st_size, st.st_ino)
