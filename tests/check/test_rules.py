"""Every registered rule has a failing and a passing model (tests/check/cases.py)."""

from __future__ import annotations

import pytest

from onnxviz.check import validate
from onnxviz.check.registry import FAMILIES, RULES
from onnxviz.model.diagnostics import Severity
from onnxviz.model.document import Document
from tests.check.cases import CASES
from tests.check.conftest import LooseDoc

# The loader reports containment of external data itself (D102); D205 shows where there
# is no loader, as for a bare ModelProto.
LOOSE = {"D205"}


def _codes(model: object, loose: bool) -> list[str]:
    doc = LooseDoc(model) if loose else Document.from_model(model)  # type: ignore[arg-type]
    return [d.code for d in validate(doc)]


def test_every_rule_has_a_case() -> None:
    assert sorted(RULES) == sorted(CASES), "rules without a case / cases without a rule"


def test_registry_entries_are_complete() -> None:
    for code, rule in RULES.items():
        assert rule.family in FAMILIES, code
        assert len(code) == 4 and code[1:].isdigit()
        assert rule.spec and rule.description and rule.hint, code
        assert isinstance(rule.severity, Severity)


@pytest.mark.parametrize("code", sorted(CASES))
def test_failing_model_reports_code(code: str) -> None:
    assert code in _codes(CASES[code](True), code in LOOSE)


@pytest.mark.parametrize("code", sorted(CASES))
def test_passing_model_does_not(code: str) -> None:
    assert code not in _codes(CASES[code](False), code in LOOSE)


@pytest.mark.parametrize("code", sorted(CASES))
def test_diagnostics_carry_registry_metadata(code: str) -> None:
    doc = LooseDoc(CASES[code](True))
    for d in validate(doc):
        rule = RULES[d.code]
        assert d.spec == rule.spec
        assert d.hint
        assert d.message.endswith((".", ")")) or d.code in ("I001", "I002", "C001"), d.message
        assert d.location.graph_path
