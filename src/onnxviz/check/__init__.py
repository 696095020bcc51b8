"""onnxviz.check: validate a Document against the ONNX IR spec and operator schemas.

`validate(doc)` returns every problem at once as located `Diagnostic` records: the
loader's own (first), then the rule families (see `registry.RULES`), then inference (I)
and the onnx.checker fallback (C).  `validate(doc, changed=change_set)` re-checks only
what a command touched and returns what a full run would.
"""

from __future__ import annotations

from typing import Any

from onnxviz.check.incremental import _store, assemble, full_run, incremental_run, state_of
from onnxviz.check.inference import infer_value_types
from onnxviz.check.registry import RULES, Rule
from onnxviz.check.targets import DEFAULT_TARGET, TARGETS, Target, using_target
from onnxviz.model import surgery
from onnxviz.model.diagnostics import Diagnostic

# Surgery (insert, extract) types new values by shape inference, which only this package
# runs, in its worker process; the model layer cannot import it, so it is handed over.
surgery.TYPE_INFERENCE = infer_value_types

__all__ = ["RULES", "TARGETS", "Rule", "Target", "validate"]

# The target of each document's latest run (by id: the incremental state it left is only
# reusable for the same target).
_TARGET_OF: dict[int, str] = {}


def validate(doc: Any, changed: Any = None, *, target: str = DEFAULT_TARGET) -> list[Diagnostic]:
    """Every diagnostic for the document; with `changed` (the ChangeSet of the one command
    executed, undone or redone since the previous call), re-check only what it touched.
    When more than one edit happened since the previous call (the Document's revision
    says so), a full run is made; merge ChangeSets if you validate less often.
    ``target``: "onnx" (strict to the spec) or "onnxruntime" (its extensions accepted,
    its contrib ops checked against its schemas): see `check.targets`."""
    with using_target(target) as chosen:
        if _TARGET_OF.get(id(doc)) != chosen:
            changed = None  # the previous run's results were for the other target
        _TARGET_OF[id(doc)] = chosen
        return _validate(doc, changed)


def _validate(doc: Any, changed: Any) -> list[Diagnostic]:
    scopes = list(doc.scopes())
    load_diags = list(getattr(doc, "diagnostics", []) or [])
    state = state_of(doc) if changed is not None else None
    revision = getattr(doc, "revision", None)
    if (
        state is not None
        and revision is not None
        and state.revision is not None
        and revision != state.revision + 1
    ):
        # `changed` covers only the last command; edits in between were not seen.
        state = None
    result = None
    if state is not None:
        result = incremental_run(doc, state, scopes, changed, load_diags)
    if result is None:
        result = full_run(doc, doc.model, scopes, load_diags)
    _store(doc, result)
    return assemble(result, load_diags)
