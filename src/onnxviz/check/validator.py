"""`Validator`: the one store of an open document's diagnostics.

It holds the rule results of the last run (per graph, name and node; see
`check.incremental`) so that `validate(changes)` after an edit re-checks only what the
edit touched, plus the quick check's provisional findings shown until that run ends.
Whoever owns the open document owns its Validator (the window's document session);
the CLI and the facade make a throw-away one per call (`check.validate`).

Listeners (`subscribe`) are called with the new diagnostics after each change of the
store, on the thread that changed it: a validation run in a worker thread notifies
from there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from onnxviz.check.checkable import Checkable
from onnxviz.check.incremental import ValidationState, assemble, full_run, incremental_run
from onnxviz.check.inference import TypeMap
from onnxviz.check.quick import IndexBefore, quick_check
from onnxviz.check.targets import DEFAULT_TARGET, check_target, using_target
from onnxviz.model.changes import ChangeSet
from onnxviz.model.diagnostics import Diagnostic
from onnxviz.model.node_id import NodeId

Listener = Callable[[list[Diagnostic]], None]


class Validator:
    """Validates one document, incrementally after each edit, and keeps the answer."""

    def __init__(self, doc: Checkable, *, target: str = DEFAULT_TARGET) -> None:
        self.doc = doc
        self._target = check_target(target)
        self._state: ValidationState | None = None
        self._results: list[Diagnostic] = list(doc.diagnostics)
        self._provisional: list[Diagnostic] = []
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()  # one run at a time: the state is updated in place

    # -- the store ---------------------------------------------------------------------
    @property
    def diagnostics(self) -> list[Diagnostic]:
        """The last run's diagnostics (the loader's only, before the first run), then the
        quick check's findings since that run."""
        return self._results + self._provisional

    @property
    def validated_revision(self) -> int | None:
        """The document revision the last run saw; None before the first run."""
        return None if self._state is None else self._state.revision

    @property
    def current(self) -> bool:
        """Whether the last run saw the document as it is now."""
        return self._state is not None and self._state.revision == self.doc.revision

    @property
    def state(self) -> ValidationState | None:
        """The engine's per-graph, per-name and per-node results of the last run (kept and
        updated in place by re-checks; tests and benchmarks tell from it which path ran)."""
        return self._state

    @property
    def timings(self) -> dict[str, float]:
        """Seconds spent in the last full run's parts (inference, checker, rules)."""
        return {} if self._state is None else dict(self._state.timings)

    @property
    def target(self) -> str:
        """What the document is checked against: "onnx" or "onnxruntime" (`check.targets`)."""
        return self._target

    def set_target(self, target: str) -> list[Diagnostic]:
        """Check against another target from now on (a full run: the kept per-rule results
        were for the other one)."""
        self._target = check_target(target)
        self._state = None
        return self.validate()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(diagnostics)`` after each change; returns the unsubscriber."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _publish(self) -> None:
        shown = self.diagnostics
        for listener in list(self._listeners):
            listener(shown)

    # -- checking ------------------------------------------------------------------------
    def validate(self, changes: ChangeSet | None = None) -> list[Diagnostic]:
        """Every diagnostic for the document.  With ``changes`` (the ChangeSet of the one
        command executed, undone or redone since the previous call) only what it touched
        is re-checked; the answer equals a full run's.  When more than one edit happened
        since the previous call (the document's revision says so) a full run is made:
        merge ChangeSets if you validate less often."""
        with self._lock, using_target(self._target):
            doc = self.doc
            scopes = list(doc.scopes())
            load_diags = list(doc.diagnostics)
            state = self._state if changes is not None else None
            if (
                state is not None
                and state.revision is not None
                and doc.revision != state.revision + 1
            ):
                state = None  # `changes` covers only the last command; others were missed
            result = None
            if state is not None and changes is not None:
                result = incremental_run(doc, state, scopes, changes, load_diags)
            if result is None:
                result = full_run(doc, doc.model, scopes, load_diags)
            self._state = result
            self._results = assemble(result, load_diags)
            self._provisional = []
        self._publish()
        return self.diagnostics

    def validate_unedited_file(self) -> bool:
        """A full run of the unedited document's file in a worker process, which frees
        this process's GIL for its UI (`check.file_validation`); False when the document
        is edited or not its file, or the worker could not answer: call `validate`.  The
        answer is kept only if no edit came meanwhile; the next re-check after an edit is
        then a full run here (the per-rule results stayed in the worker)."""
        from onnxviz.check.file_validation import validate_file_in_worker

        doc = self.doc
        unedited = doc.unedited_file()
        if unedited is None:
            return False
        revision = doc.revision
        return self._keep_worker_answer(
            validate_file_in_worker(unedited[0], unedited[1], self._target), revision
        )

    def validate_in_worker(self) -> bool:
        """A full run in the validator's worker process: of the file while the document
        is unedited (`validate_unedited_file`), else of the model sent as bytes
        (`Document.model_bytes`, in small steps next to the UI, where the rules would be
        a second of Python).  False when it could not answer: call `validate`."""
        from onnxviz.check.file_validation import validate_model_in_worker

        if self.validate_unedited_file():
            return True
        doc = self.doc
        revision = doc.revision
        try:
            data = doc.model_bytes()
        except ValueError:  # over protobuf's 2 GB: only this process can hold it
            return False
        if data is None:  # edits kept coming: this run would be stale
            return False
        found = validate_model_in_worker(data, doc.path, list(doc.diagnostics), self._target)
        return self._keep_worker_answer(found, revision)

    def _keep_worker_answer(self, found: list[Diagnostic] | None, revision: int) -> bool:
        doc = self.doc
        if found is None:
            return False
        with self._lock:
            if doc.revision != revision:
                return False
            self._state = None
            self._results = found
            self._provisional = []
        self._publish()
        return True

    def quick_check(
        self, changes: ChangeSet, before: IndexBefore | None = None
    ) -> list[Diagnostic]:
        """Add at once what `check.quick.quick_check` finds about an edit (``before``: from
        `check.quick.index_before` before the edit), kept until the
        next run replaces them; returns the findings that were new."""
        found = quick_check(self.doc, changes, before)
        known = {(d.code, d.location, d.message) for d in self.diagnostics}
        new = [d for d in found if (d.code, d.location, d.message) not in known]
        if new:
            self._provisional = self._provisional + new
            self._publish()
        return new

    def inferred_types(self) -> TypeMap:
        """Types shape inference found, by (graph path, value name), apart from the
        declared ones: the last run's when it is current, else after a full run."""
        if not self.current:
            self.validate()
        state = self._state
        if state is None or state.inference is None:
            return TypeMap()
        return state.inference.types


def diagnostics_by_node(
    doc: Checkable, diagnostics: list[Diagnostic]
) -> dict[NodeId, list[Diagnostic]]:
    """The diagnostics located at a node, by the node's identity (its graph path and
    label resolved on the document's index); the others are left out."""
    scopes = {s.path: s for s in doc.scopes()}
    out: dict[NodeId, list[Diagnostic]] = {}
    for d in diagnostics:
        loc = d.location
        scope = scopes.get(loc.graph_path or "main") if loc.node else None
        index = scope.node_index(loc.node) if scope is not None and loc.node else None
        if scope is not None and index is not None:
            out.setdefault(NodeId(scope.path, index, loc.node or ""), []).append(d)
    return out
