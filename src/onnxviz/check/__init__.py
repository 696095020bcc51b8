"""onnxviz.check: validate a Document against the ONNX IR spec and operator schemas.

`validate(doc)` returns every problem at once as located `Diagnostic` records: the
loader's own (first), then the rule families (see `registry.RULES`), then inference (I)
and the onnx.checker fallback (C).  An open document's diagnostics live in its
`Validator` (check.validator), whose `validate(changes)` re-checks only what an edit
touched and returns what a full run would.

Importing this package costs nothing: its names are imported when first used (PEP 562),
so `onnxviz check` can start its worker processes (`check.worker`) before this process
imports onnx, and a worker does not import the rules it never runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from onnxviz.check.targets import DEFAULT_TARGET, TARGETS, Target
from onnxviz.model import hooks

if TYPE_CHECKING:
    from onnx import ModelProto, TypeProto

    from onnxviz.check.checkable import Checkable
    from onnxviz.check.registry import RULES, Rule
    from onnxviz.check.validator import Validator
    from onnxviz.model.diagnostics import Diagnostic

__all__ = ["RULES", "TARGETS", "Checkable", "Rule", "Target", "Validator", "validate"]

_LAZY = {
    "Checkable": "onnxviz.check.checkable",
    "RULES": "onnxviz.check.registry",
    "Rule": "onnxviz.check.registry",
    "Validator": "onnxviz.check.validator",
    "infer_value_types": "onnxviz.check.inference",
    "parse_text_model": "onnxviz.check.inference",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'onnxviz.check' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def _type_inference(model: ModelProto) -> dict[str, dict[str, TypeProto]]:
    from onnxviz.check.inference import infer_value_types

    return infer_value_types(model)


def _text_parser(data: bytes) -> ModelProto:
    from onnxviz.check.inference import parse_text_model

    return parse_text_model(data)


# Surgery (insert, extract) types new values by shape inference, and the loader parses
# the text format, both in this package's worker process; the model layer cannot import
# check, so they are handed over (the functions import inference when first called).
hooks.TYPE_INFERENCE = _type_inference
hooks.TEXT_PARSER = _text_parser


def validate(doc: Checkable, *, target: str = DEFAULT_TARGET) -> list[Diagnostic]:
    """Every diagnostic for the document, from a full run (a document open for editing
    keeps a `Validator` instead, which re-checks only what each edit touched).
    ``target``: "onnx" (strict to the spec) or "onnxruntime" (its extensions accepted,
    its contrib ops checked against its schemas): see `check.targets`."""
    from onnxviz.check.validator import Validator

    return Validator(doc, target=target).validate()
