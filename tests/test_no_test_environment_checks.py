"""Production code never asks whether it runs under test (issue 17): no branch on the
Qt platform plugin or on pytest.  Questions to the user go through `ui.prompter`,
which tests replace."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "onnxviz"


def environment_reads(source: str) -> list[str]:
    """Each read of QT_QPA_PLATFORM or of a pytest marker in ``source`` (setting the
    platform for a headless command, `os.environ.setdefault`, is not a read)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text in ("QT_QPA_PLATFORM", "PYTEST_CURRENT_TEST") or "in_tests" in text:
                found.append(text)
        elif isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if "in_tests" in name or name == "OFFSCREEN":
                found.append(name)
    return found


def _setdefault_only(source: str) -> bool:
    return all(
        "setdefault" in line
        for line in source.splitlines()
        if "QT_QPA_PLATFORM" in line and not line.lstrip().startswith("#")
    )


def test_no_production_module_branches_on_the_test_environment() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        reads = environment_reads(source)
        if reads and not (set(reads) == {"QT_QPA_PLATFORM"} and _setdefault_only(source)):
            offenders.append((path.relative_to(SRC).as_posix(), reads))
    assert offenders == []


def test_the_check_sees_the_old_hooks() -> None:
    assert environment_reads('import os\nOFFSCREEN = os.environ.get("QT_QPA_PLATFORM")\n')
    assert environment_reads('if getattr(self, "prompt_in_tests", False):\n    pass\n')
    assert not _setdefault_only('if os.environ.get("QT_QPA_PLATFORM") != "offscreen": x()\n')
    assert _setdefault_only('os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")\n')
