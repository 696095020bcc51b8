"""ONNX backend node-test cases through the Session: every case on the committed
expected-to-pass list (tests/runtime/expected_pass.txt) must still pass.

Refresh the list with ``python tools/conformance_report.py --write-expected
tests/runtime/expected_pass.txt`` (it only ever holds cases that pass).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from onnxviz.runtime.conformance import node_cases, run_node_case, simple_model_cases

EXPECTED_FILE = Path(__file__).with_name("expected_pass.txt")


def _expected() -> list[str]:
    lines = EXPECTED_FILE.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def _cases_by_name() -> dict[str, Any]:
    return {c.name: c for c in [*node_cases(), *simple_model_cases()]}


EXPECTED_NODE_CASES = [n for n in _expected() if not n.startswith("light_")]


def test_expected_list_names_real_cases() -> None:
    known = _cases_by_name()
    unknown = [n for n in EXPECTED_NODE_CASES if n not in known]
    assert not unknown, f"expected_pass.txt names unknown cases: {unknown[:5]}"


def test_at_least_three_quarters_of_node_cases_are_expected_to_pass() -> None:
    node_names = {c.name for c in node_cases()}
    assert sum(n in node_names for n in EXPECTED_NODE_CASES) >= 0.75 * len(node_names)


@pytest.mark.parametrize("name", EXPECTED_NODE_CASES)
def test_node_case_passes(name: str) -> None:
    case = _cases_by_name()[name]
    result = run_node_case(case)
    assert result.status == "pass", f"{result.status}: {result.detail}"
