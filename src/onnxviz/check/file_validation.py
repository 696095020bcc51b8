"""A full validation of an unedited model file in a worker process.

Validating 100k nodes is seconds of Python.  In a thread of the app's process it shares
the GIL with the UI thread, which then gets about half of it: every turn of the event
loop took twice its own time while a big model's first view filled in.  A model that
nobody has edited yet is the file on disk, so another process can open and validate it
just as well; the app gets the diagnostics back (plain data) and its own process stays
free for the canvas.  The worker runs the very `Validator` the app would (its inference
and checker in their own worker processes, as always), so the answer is the same list.

`Validator.validate_unedited_file` is the caller; the request kind is "validate"
(`check.worker`).
"""

from __future__ import annotations

import os
from typing import Any

from onnxviz.model.diagnostics import Diagnostic

Identity = tuple[int, int, int]


def validate_file_here(path: str, identity: Identity, target: str) -> list[Diagnostic] | str:
    """In the worker: the diagnostics of the file at ``path`` when it is still the file
    the app read (``identity``: modification time, size, inode), else why not."""
    from onnxviz.errors import OnnxvizError
    from onnxviz.model.document import Document

    try:
        doc = Document.open(path)
    except OnnxvizError as exc:
        return f"the file could not be read again: {exc}"
    if doc.unedited_file() != (os.path.abspath(path), identity):
        return "the file changed on disk since the app read it"
    return _validated(doc, target)


def validate_model_here(
    data: bytes, path: str | None, load_diagnostics: list[Diagnostic], target: str
) -> list[Diagnostic] | str:
    """In the worker: the diagnostics of an edited model sent as bytes, with the open
    document's path (its folder holds the external data) and load-time problems."""
    from onnx import ModelProto

    from onnxviz.model import inplace
    from onnxviz.model.document import Document

    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:
        return f"the model could not be read here: {exc}"
    inplace.adopt(model, os.path.dirname(os.path.abspath(path)) if path else None)
    # The bytes stand for the model as it is (`Document.unedited_bytes`): this process's
    # inference and checker workers get them without a second serialization.
    doc = Document(model, path, diagnostics=load_diagnostics, original_bytes=data)
    return _validated(doc, target)


def _validated(doc: Any, target: str) -> list[Diagnostic]:
    from onnxviz.check.validator import Validator
    from onnxviz.check.worker import CHECKER, SCHEMAS, WORKER

    try:
        return Validator(doc, target=target).validate()
    finally:
        # This process's own inference and checker workers held the model too (about
        # 450 MB at 100k nodes), and onnxruntime's registry its own: they start again
        # with the next request that needs them.
        WORKER.close()
        CHECKER.close()
        SCHEMAS.close()


def validate_model_in_worker(
    data: bytes, path: str | None, load_diagnostics: list[Diagnostic], target: str
) -> list[Diagnostic] | None:
    """`validate_model_here` in the validator's worker process; None when it could not
    answer (validate here then)."""
    return _ask("validate-model", (data, path, load_diagnostics, target))


def validate_file_in_worker(path: str, identity: Identity, target: str) -> list[Diagnostic] | None:
    """The diagnostics of the unedited file, from the validator's worker process; None
    when it could not say (the file changed, the worker failed): validate here then."""
    return _ask("validate", (path, identity, target))


def answer_here(kind: str, request: tuple[Any, ...]) -> list[Diagnostic] | str:
    """The worker's side of both requests (`check.worker` hands them over as they came)."""
    if kind == "validate-model":
        return validate_model_here(*request)
    return validate_file_here(*request)


def _ask(kind: str, request: tuple[Any, ...]) -> list[Diagnostic] | None:
    from onnxviz.check.worker import VALIDATOR

    answer: Any = VALIDATOR.begin(request, kind)()
    if isinstance(answer, tuple) and answer[0] == "validated" and isinstance(answer[1], list):
        return answer[1]
    return None  # a crash report, or why the worker could not validate
