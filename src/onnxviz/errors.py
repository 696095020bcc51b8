"""Exceptions for operations that cannot complete.

Problems *in* a model are `Diagnostic` records (see `onnxviz.model.diagnostics`);
exceptions are reserved for an operation that cannot go on: a file that cannot be
read, a save that failed, an edit that is refused, a kernel that failed.  Each one
carries where it happened (file, graph path, node) so the CLI and the UI can print
one clear sentence without a traceback.
"""

from __future__ import annotations


class OnnxvizError(Exception):
    """Base class: a one-sentence message plus the place it concerns."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        graph_path: str | None = None,
        node: str | None = None,
        graph_label: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.graph_path = graph_path  # where, for a program (a Location)
        self.graph_label = graph_label  # where, for a reader (``main > Loop#0``)
        self.node = node

    def __str__(self) -> str:
        # The place is appended unless the message already names it ("... already
        # defined in graph 'main'" must not read "... (graph 'main')" after it).
        where = [
            place
            for place in (
                f"graph '{self.graph_label or self.graph_path}'" if self.graph_path else "",
                f"node '{self.node}'" if self.node else "",
            )
            if place and place not in self.message
        ]
        text = f"{self.file}: {self.message}" if self.file else self.message
        return f"{text} ({', '.join(where)})" if where else text


class LoadError(OnnxvizError):
    """The file cannot be opened as an ONNX model at all."""


class SaveError(OnnxvizError):
    """Saving failed; the previous file on disk is untouched."""


class FileChangedError(SaveError):
    """The file changed on disk since it was opened or saved (another program wrote it):
    saving would overwrite that work, so the caller must ask first."""


class ExternalDataError(OnnxvizError):
    """External tensor data cannot be read (missing file, escaping path, bad range)."""


class EditError(OnnxvizError):
    """An edit command was refused; the Document is unchanged."""


class ExecutionError(OnnxvizError):
    """A node failed while the interpreter ran it; the session stays inspectable."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        graph_path: str | None = None,
        node: str | None = None,
        op_type: str | None = None,
        input_summaries: list[str] | None = None,
    ) -> None:
        super().__init__(message, file=file, graph_path=graph_path, node=node)
        self.op_type = op_type
        self.input_summaries = list(input_summaries or [])
