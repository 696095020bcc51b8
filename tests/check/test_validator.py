"""The Validator: one store of an open document's diagnostics."""

from __future__ import annotations

from onnx import helper

from onnxviz.check import Validator, validate
from onnxviz.model import commands as cmd
from onnxviz.model.diagnostics import Diagnostic, Location, Severity
from onnxviz.model.document import Document
from tests.check.cases import model, vi


def _doc() -> Document:
    m = model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="r"),
            helper.make_node("Neg", ["a"], ["y"], name="n"),
        ],
        [vi("x")],
        [vi("y")],
    )
    loaded = Diagnostic("D101", Severity.ERROR, "external file missing", Location("main"))
    doc = Document.from_model(m)
    doc.diagnostics.append(loaded)  # as the loader would have reported it
    return doc


def test_before_its_first_run_it_holds_the_loaders_findings() -> None:
    doc = _doc()
    validator = Validator(doc)
    assert [d.code for d in validator.diagnostics] == ["D101"]
    assert validator.validated_revision is None and not validator.current
    assert validator.validate() == validate(doc)
    assert validator.diagnostics[0].code == "D101" and validator.current


def test_listeners_hear_each_change_until_they_unsubscribe() -> None:
    doc = _doc()
    validator = Validator(doc)
    heard: list[list[Diagnostic]] = []
    unsubscribe = validator.subscribe(heard.append)
    validator.validate()
    changes = doc.execute(cmd.RewireInput("main", 1, 0, "x"))
    validator.validate(changes)
    assert len(heard) == 2 and heard[-1] == validator.diagnostics
    unsubscribe()
    validator.validate()
    assert len(heard) == 2


def test_an_edit_it_did_not_see_makes_the_next_run_a_full_one() -> None:
    doc = _doc()
    validator = Validator(doc)
    validator.validate()
    state = validator.state
    doc.rename_value("a", "b")  # not reported to the validator
    changes = doc.rename_value("b", "c")
    got = validator.validate(changes)
    assert validator.state is not state  # a full run, not a patch of the old state
    assert got == validate(doc) and validator.validated_revision == doc.revision


def test_two_documents_keep_apart_stores() -> None:
    first, second = _doc(), _doc()
    one, two = Validator(first), Validator(second)
    one.validate()
    two.validate()
    first.execute(cmd.RewireInput("main", 1, 0, "x"))
    assert not one.current and two.current
    assert one.state is not two.state
