"""onnx's C++ entry points (shape inference, checker, version converter, text parser)
are called in one place, check's worker process: a lint over the source tree (issue 15).  A crash there
must never take the app, and a user's unsaved work, with it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "onnxviz"
CPP_MODULES = {"onnx.shape_inference", "onnx.checker", "onnx.version_converter", "onnx.parser"}
# Where the worker process imports them (inference.py builds and reads its requests).
OWNERS = {"check/worker.py", "check/inference.py"}
# Modules still calling them in the app's process (none: the text-format loader takes
# check.inference.parse_text_model, handed over as model.io.TEXT_PARSER).
PENDING: dict[str, list[str]] = {}


def _uses(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in CPP_MODULES)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in CPP_MODULES:
                found.add(node.module)
            elif node.module == "onnx":
                found.update(
                    f"onnx.{a.name}" for a in node.names if f"onnx.{a.name}" in CPP_MODULES
                )
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "onnx"
            and f"onnx.{node.attr}" in CPP_MODULES
        ):
            found.add(f"onnx.{node.attr}")
    return found


def test_only_the_worker_modules_reach_onnx_cpp_entry_points() -> None:
    offenders = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in OWNERS:
            continue
        used = _uses(ast.parse(path.read_text(encoding="utf-8")))
        if used:
            offenders[rel] = sorted(used)
    assert offenders == PENDING


def test_the_lint_sees_each_form_of_use() -> None:
    forms = [
        "import onnx.shape_inference",
        "from onnx import checker",
        "from onnx.version_converter import convert_version",
        "import onnx\nonnx.shape_inference.infer_shapes(m)",
        "from onnx import parser",
        "from onnx.parser import parse_model",
        "import onnx.version_converter",
    ]
    assert all(_uses(ast.parse(src)) for src in forms)


def test_onnx_compiled_module_is_loaded_only_by_the_worker() -> None:
    """The worker loads onnx's compiled module without the onnx package
    (check/onnx_native.py): only the worker may use that loader, and no other module
    names the compiled module."""
    loaders = {"check/onnx_native.py", "check/worker.py"}
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        text = path.read_text(encoding="utf-8")
        if rel not in loaders and re.search(
            r"onnx_cpp2py_export|import\s+onnx_native\b|onnx_native\s+import", text
        ):
            offenders.append(rel)
    assert offenders == []
