"""`onnxviz check MODEL [--json] [--target onnx|onnxruntime]`: every problem in a model,
located (docs/architecture.md §9).  The target says what the model is checked against
(`check.targets`).

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
    parser.add_argument(
        "--target",
        choices=("onnx", "onnxruntime"),
        default="onnx",
        help="onnx (default): strict to the ONNX spec; onnxruntime: accept onnxruntime's "
        "extensions and check its contrib operators against onnxruntime's own schemas",
    )


def run(args: argparse.Namespace) -> int:
    from onnxviz.check import validate
    from onnxviz.check.prefetch import discard, prefetch
    from onnxviz.model.document import Document
    from onnxviz.model.text import jsonable

    # onnx's inference and checker start on the file in their workers while this
    # process loads, indexes and runs its own rules.
    prefetch(args.model)
    try:
        doc = Document.open(args.model)
        diags = validate(doc, target=args.target)
    finally:
        discard(args.model)  # a file that did not load leaves its answers unread
    if args.json:
        json.dump(jsonable([d.to_json() for d in diags]), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_report(args.model, diags, _node_order(doc, diags)))
    return 1 if any(d.severity is Severity.ERROR for d in diags) else 0


def _node_order(doc: object, diags: list[Diagnostic]) -> dict[tuple[str, str], int]:
    """(graph path, node label) -> node index for the nodes the diagnostics name, to list
    them in graph order (looked up per named node: a clean 100k-node model needs none)."""
    by_path = {s.path: s for s in doc.scopes()}  # type: ignore[attr-defined]
    order: dict[tuple[str, str], int] = {}
    for d in diags:
        path, label = d.location.graph_path, d.location.node
        scope = by_path.get(path)
        if label is None or scope is None or (path, label) in order:
            continue
        index = scope.node_index(label)
        if index is not None:
            order[(path, label)] = index
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
