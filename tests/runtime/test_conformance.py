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


def test_at_least_99_percent_of_node_cases_are_expected_to_pass() -> None:
    """Each expected case passes in both modes (test_node_case_passes), so this is the
    conformance floor of both."""
    node_names = {c.name for c in node_cases()}
    assert sum(n in node_names for n in EXPECTED_NODE_CASES) >= 0.99 * len(node_names)


# The families whose numbers depend on the BLAS kernels: CI runs them again under each
# OPENBLAS_CORETYPE (the `numeric` marker).
_BLAS_FAMILIES = ("conv", "gemm", "matmul", "einsum", "attention", "lstm", "gru", "rnn")


def _param(name: str) -> Any:
    numeric = any(f in name.lower() for f in _BLAS_FAMILIES)
    return pytest.param(name, marks=[pytest.mark.numeric] if numeric else [], id=name)


@pytest.mark.parametrize("name", [_param(n) for n in EXPECTED_NODE_CASES])
def test_node_case_passes(name: str) -> None:
    """In both modes: the unwatched run (fused lists, in-place reuse, direct BLAS) and
    the stepped run the debugger shows."""
    case = _cases_by_name()[name]
    for stepped in (False, True):
        result = run_node_case(case, stepped=stepped)
        mode = "stepped" if stepped else "unwatched"
        assert result.status == "pass", f"{mode} run: {result.status}: {result.detail}"


def test_the_node_case_cache_is_read_back_and_a_torn_file_is_remade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ONNXVIZ_CASE_CACHE: the cases onnx makes are pickled once and read back equal;
    onnx is not asked again while the file is good, and is when the file is torn."""
    import onnx.backend.test.case.node as onnx_node_cases

    few = node_cases()[:3]
    asked: list[int] = []

    def collect(_: Any) -> list[Any]:
        asked.append(1)
        return list(few)

    monkeypatch.setattr(onnx_node_cases, "collect_testcases", collect)
    monkeypatch.setenv("ONNXVIZ_CASE_CACHE", str(tmp_path / "cache"))
    made = node_cases.__wrapped__()
    (path,) = (tmp_path / "cache").iterdir()
    read = node_cases.__wrapped__()
    assert len(asked) == 1
    assert [c.name for c in read] == [c.name for c in few] == [c.name for c in made]
    assert all(a.model == b.model for a, b in zip(read, few))
    path.write_bytes(path.read_bytes()[:100])  # torn
    again = node_cases.__wrapped__()
    assert len(asked) == 2 and [c.name for c in again] == [c.name for c in few]
    assert node_cases.__wrapped__() and len(asked) == 2  # rewritten whole


def test_cases_the_cache_cannot_keep_are_still_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A case pickle cannot take (or a folder that cannot be written) only leaves the
    cache out: the cases come back, and no partial file stays behind."""
    import onnx.backend.test.case.node as onnx_node_cases

    few = [*node_cases()[:2], lambda: None]  # a function pickles by name: not this one
    monkeypatch.setattr(onnx_node_cases, "collect_testcases", lambda _: list(few))
    monkeypatch.setenv("ONNXVIZ_CASE_CACHE", str(tmp_path / "cache"))
    assert node_cases.__wrapped__() == few
    assert list((tmp_path / "cache").iterdir()) == []
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("ONNXVIZ_CASE_CACHE", str(tmp_path / "file" / "cache"))
    assert node_cases.__wrapped__() == few
