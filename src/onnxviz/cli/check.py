"""`onnxviz check MODEL [--json]`: every problem in a model, located (DESIGN.md §7).

Exit status: 0 when no error was found (warnings and infos may be), 1 when errors were
found, 2 when the model cannot be read (raised as LoadError and reported by cli.main).
Human output groups the diagnostics by graph, then by node; ``--json`` prints one JSON
list of diagnostics (code, severity, message, location, spec, hint).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from onnxviz.model.diagnostics import Diagnostic, Severity

_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to a .onnx model")
    parser.add_argument(
        "--json", action="store_true", help="print the diagnostics as one JSON list"
    )


def run(args: argparse.Namespace) -> int:
    from onnxviz.check import validate
    from onnxviz.model.document import Document

    doc = Document.open(args.model)
    diags = validate(doc)
    if args.json:
        json.dump([d.to_json() for d in diags], sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_report(args.model, diags, _node_order(doc)))
    return 1 if any(d.severity is Severity.ERROR for d in diags) else 0


def _node_order(doc: object) -> dict[tuple[str, str], int]:
    """(graph path, node label) -> node index, to list nodes in graph order."""
    order: dict[tuple[str, str], int] = {}
    for scope in doc.scopes():  # type: ignore[attr-defined]
        for i in range(len(scope.nodes)):
            order[(scope.path, scope.node_label(i))] = i
    return order


def format_report(
    model_path: str, diags: list[Diagnostic], node_order: dict[tuple[str, str], int] | None = None
) -> str:
    counts = Counter(d.severity for d in diags)
    parts = [f"{counts[s]} {s.value}{'' if counts[s] == 1 else 's'}" for s in _ORDER if counts[s]]
    lines = [f"{model_path}: " + (", ".join(parts) if parts else "no problems found")]
    graphs: dict[str, dict[str | None, list[Diagnostic]]] = {}
    for d in diags:
        graphs.setdefault(d.location.graph_path, {}).setdefault(d.location.node, []).append(d)
    for graph_path, by_node in graphs.items():
        lines.append(f"graph {graph_path}")
        # Graph-level problems first, then nodes in graph order.
        order = node_order or {}
        for node in sorted(
            by_node, key=lambda n: (n is not None, order.get((graph_path, n or ""), 1 << 60))
        ):
            indent = "  "
            if node is not None:
                lines.append(f"  node {node}")
                indent = "    "
            for d in sorted(by_node[node], key=lambda x: _ORDER[x.severity]):
                where = _where(d)
                lines.append(f"{indent}{d.severity.value} {d.code}: {d.message}{where}")
                if d.hint and d.severity is not Severity.INFO:
                    lines.append(f"{indent}  hint: {d.hint}")
    return "\n".join(lines) + "\n"


def _where(d: Diagnostic) -> str:
    loc = d.location
    bits = []
    if loc.attribute:
        bits.append(f"attribute {loc.attribute}")
    if loc.field and not loc.attribute:
        bits.append(loc.field)
    return f" [{', '.join(bits)}]" if bits else ""
