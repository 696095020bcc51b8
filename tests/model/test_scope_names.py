"""Readable graph paths: owners by name, or by op type and index when unnamed."""

from __future__ import annotations

from onnxviz.model.document import Document
from onnxviz.model.scope_names import graph_trail, readable_path
from tests.present.models import example, nested_control_flow, overloads_and_nested_calls


def test_unnamed_owners_read_as_op_type_and_index_with_the_branch() -> None:
    doc = Document.from_model(nested_control_flow())
    assert readable_path(doc.scope("main/body:#0/else_branch:#1")) == "main > Loop#0 > If#1 (else)"
    assert graph_trail(doc.scope("main/body:#0/then_branch:#1")) == [
        "main",
        "Loop#0",
        "If#1 (then)",
    ]
    assert graph_trail(doc.scope("main/body:#0")) == ["main", "Loop#0"]


def test_named_owners_keep_their_names() -> None:
    doc = Document.open(example("loop_with_if.onnx"))
    paths = {readable_path(s) for s in doc.scopes()}
    assert "main > accumulate > maybe_add (else)" in paths


def test_function_bodies_name_the_function_and_its_overload() -> None:
    doc = Document.from_model(overloads_and_nested_calls())
    labels = {readable_path(s) for s in doc.scopes() if s.kind == "function"}
    assert {"function local.Scale (double)", "function local.Scale (square)"} <= labels
