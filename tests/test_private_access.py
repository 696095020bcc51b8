"""No module reads or writes another module's private names (issue 16): `obj._name` on
anything but self/cls is allowed only when this module defines `_name` itself.  What a
caller needs is a public method or property of its owner (GraphScope.other_definitions,
Document.apply_unrecorded, RenameValue.check, ...)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "onnxviz"

# Known, owned elsewhere: each names who should add the public seam.
ALLOWED: set[tuple[str, str]] = set()


def _own_names(tree: ast.AST) -> set[str]:
    """Names this module defines: functions, classes, variables, fields, arguments and
    attributes it sets on self or cls."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            own.add(node.attr)
    return own


def private_uses(source: str) -> list[str]:
    """Each `x._name` in ``source`` that reaches into another module's private name."""
    tree = ast.parse(source)
    own = _own_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in own:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append(ast.unparse(node))
    return found


def test_no_module_reaches_into_another_modules_private_names() -> None:
    offenders = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for use in private_uses(path.read_text(encoding="utf-8")):
            offenders.add((rel, use))
    assert offenders - ALLOWED == set()


def test_the_allowed_list_holds_only_what_still_exists() -> None:
    present = set()
    for rel, use in ALLOWED:
        if use in private_uses((SRC / rel).read_text(encoding="utf-8")):
            present.add((rel, use))
    assert present == ALLOWED  # a fixed one must leave the list


def test_the_lint_sees_reads_writes_and_calls_but_not_a_modules_own_names() -> None:
    flagged = private_uses(
        "def f(doc, scope, io):\n"
        "    doc._saved_marker = -1\n"
        "    scope._other_defs.get('x')\n"
        "    return io._is_text_path('p')\n"
    )
    assert sorted(flagged) == ["doc._saved_marker", "io._is_text_path", "scope._other_defs"]
    own = (
        "class A:\n"
        "    def __init__(self):\n"
        "        self._cache = {}\n"
        "    def merge(self, other):\n"
        "        return other._cache, self._cache, other.__class__\n"
        "def _helper():\n"
        "    pass\n"
        "import mod\n"
        "mod._helper = _helper\n"
    )
    assert private_uses(own) == []
