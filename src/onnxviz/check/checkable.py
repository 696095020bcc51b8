"""`Checkable`: what the validator needs of a document, as a typed protocol.

`onnxviz.model.document.Document` is the one real implementation; tests validate bare
ModelProtos through a small stand-in with the same members.
"""

from __future__ import annotations

from typing import Protocol

from onnx import ModelProto

from onnxviz.model.diagnostics import Diagnostic
from onnxviz.model.scopes import GraphScope


class Checkable(Protocol):
    """A model to validate, with its index and the loader's findings."""

    @property
    def model(self) -> ModelProto: ...

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """The loader's problems (D1xx and the like): reported first, never re-computed."""
        ...

    @property
    def revision(self) -> int:
        """Counts the edits: the validator tells from it whether it saw every one."""
        ...

    @property
    def path(self) -> str | None: ...

    @property
    def base_dir(self) -> str | None:
        """The folder external tensor data is read from."""
        ...

    @property
    def source_format(self) -> str:
        """ "protobuf" or "text": only a protobuf file's prefetched answers are reused."""
        ...

    def scopes(self) -> list[GraphScope]: ...

    def unedited_bytes(self) -> bytes | None:
        """The file's protobuf bytes as read while nothing is edited, else None: sent to
        the worker processes as they are, instead of serializing the model again."""
        ...

    def model_bytes(self) -> bytes | None:
        """The model's protobuf bytes as it is now, from any thread, without one long
        hold of the GIL; None when edits kept coming, ValueError over 2 GB."""
        ...

    def unedited_file(self) -> tuple[str, tuple[int, int, int]] | None:
        """(path, identity) of the file the document is, while unedited and unchanged on
        disk, else None: such a document can be validated by another process."""
        ...
