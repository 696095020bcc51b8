"""onnxviz.check: validate a Document against the ONNX IR spec and operator schemas.

`validate(doc)` returns every problem at once as located `Diagnostic` records: the
loader's own (first), then the rule families (see `registry.RULES`), then inference (I)
and the onnx.checker fallback (C).  An open document's diagnostics live in its
`Validator` (check.validator), whose `validate(changes)` re-checks only what an edit
touched and returns what a full run would.
"""

from __future__ import annotations

from onnxviz.check.checkable import Checkable
from onnxviz.check.inference import infer_value_types, parse_text_model
from onnxviz.check.registry import RULES, Rule
from onnxviz.check.targets import DEFAULT_TARGET, TARGETS, Target
from onnxviz.check.validator import Validator
from onnxviz.model import io, surgery
from onnxviz.model.diagnostics import Diagnostic

# Surgery (insert, extract) types new values by shape inference, which only this package
# runs, in its worker process; the model layer cannot import it, so it is handed over.
surgery.TYPE_INFERENCE = infer_value_types
io.TEXT_PARSER = parse_text_model

__all__ = ["RULES", "TARGETS", "Checkable", "Rule", "Target", "Validator", "validate"]


def validate(doc: Checkable, *, target: str = DEFAULT_TARGET) -> list[Diagnostic]:
    """Every diagnostic for the document, from a full run (a document open for editing
    keeps a `Validator` instead, which re-checks only what each edit touched).
    ``target``: "onnx" (strict to the spec) or "onnxruntime" (its extensions accepted,
    its contrib ops checked against its schemas): see `check.targets`."""
    return Validator(doc, target=target).validate()
