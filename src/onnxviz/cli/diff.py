"""`onnxviz diff A B`: what differs between two models (structure, attributes, weights,
and with ``--run`` their numbers).  Exit 0 when equal, 1 when different, 2 when a model
cannot be read (or run).  ``--json`` prints the contract documented in the README."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from onnxviz.errors import ExecutionError
from onnxviz.model.document import Document
from onnxviz.model.text import jsonable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", help="first model (the reference)")
    parser.add_argument("b", help="second model")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument(
        "--anchor",
        action="append",
        default=[],
        metavar="NODE_A=NODE_B",
        help="pin two main-graph nodes (names or #index) as matching",
    )
    parser.add_argument(
        "--no-values", action="store_true", help="compare weights by dtype and shape only"
    )
    parser.add_argument("--run", action="store_true", help="run both and compare their values")
    parser.add_argument(
        "--input", action="append", default=[], metavar="NAME=FILE", help="a feed (of model A)"
    )
    parser.add_argument(
        "--random-inputs", action="store_true", help="random values for inputs not given"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    parser.add_argument(
        "--dim", action="append", default=[], metavar="NAME=N", help="symbolic dimension size"
    )
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (1e-3)")
    parser.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance (1e-4)")
    parser.add_argument(
        "--quant-steps",
        type=float,
        default=4.0,
        help="tolerance of a quantized value, in quantization steps (4)",
    )
    parser.add_argument(
        "--engine", choices=("onnxviz", "onnxruntime"), default="onnxviz", help="runtime for --run"
    )


def _anchors(specs: list[str]) -> list[tuple[str, str]]:
    out = []
    for spec in specs:
        left, sep, right = spec.partition("=")
        if not sep or not left or not right:
            raise ExecutionError(f"--anchor expects NODE_A=NODE_B, got '{spec}'")
        out.append((left, right))
    return out


def _numeric(args: argparse.Namespace, doc_a: Document, doc_b: Document, structural: Any) -> Any:
    from onnxviz.cli.run import gather_inputs
    from onnxviz.runtime.model_diff import numeric_diff
    from onnxviz.runtime.session import Session

    feeds = gather_inputs(args, Session(doc_a))
    return numeric_diff(
        doc_a,
        doc_b,
        structural,
        feeds,
        engine=args.engine,
        atol=args.atol,
        rtol=args.rtol,
        quant_steps=args.quant_steps,
    )


def run(args: argparse.Namespace) -> int:
    from onnxviz.model.diff import diff

    doc_a = Document.open(args.a)
    doc_b = Document.open(args.b)
    structural = diff(
        doc_a, doc_b, anchors=_anchors(args.anchor), compare_values=not args.no_values
    )
    numeric = _numeric(args, doc_a, doc_b, structural) if args.run else None
    equal = structural.equal and (numeric is None or numeric.equal)
    if args.json:
        data = structural.to_json()
        data["a"], data["b"] = args.a, args.b
        data["equal"] = equal
        data["structure_equal"] = structural.equal
        data["numeric"] = None if numeric is None else numeric.to_json()
        json.dump(jsonable(data), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(_human(args, structural, numeric, equal))
    return 0 if equal else 1


def _node(ref: Any) -> str:
    where = "" if ref.graph == "main" else f"{ref.graph}::"
    return f"{where}{ref.label} ({ref.op_type})"


def _human(args: argparse.Namespace, d: Any, numeric: Any, equal: bool) -> str:
    c = d.counts()
    lines = [
        f"{args.a} -> {args.b}: " + ("equal" if equal else "different"),
        f"  nodes     {c['matched']} matched, {c['changed']} changed, {c['added']} added, "
        f"{c['removed']} removed, {c['fused']} fused groups",
        f"  weights   {c['weights_changed']} of {c['weights_compared']} compared differ",
        f"  renamed   {c['renamed_values']} values (not a difference)",
    ]
    for x in d.model:
        lines.append(f"  model     {x.what} {x.name}: {x.a or '-'} -> {x.b or '-'}")
    for g in d.graphs():
        for x in g.io:
            lines.append(f"  {g.path_a}  {x.what} {x.name}: {x.a or '-'} -> {x.b or '-'}")
        for ch in g.changed:
            for det in ch.details:
                lines.append(
                    f"  changed   {_node(ch.a)}: {det.what} {det.name}: {det.a} -> {det.b}"
                )
        lines += [f"  removed   {_node(n)}" for n in g.removed]
        lines += [f"  added     {_node(n)}" for n in g.added]
        for f in g.fused:
            left = ", ".join(_node(n) for n in f.a)
            right = ", ".join(_node(n) for n in f.b)
            lines.append(f"  fused     {left}  <->  {right}")
        for w in g.changed_weights:
            stats = (
                f"max abs {w.max_abs:.3g}, max rel {w.max_rel:.3g}, "
                f"{100 * w.fraction_changed:.2f}% changed"
                if w.fraction_changed is not None
                else ""
            )
            lines.append(
                f"  weight    {w.a} -> {w.b}: {'; '.join(x for x in (w.note, stats) if x)}"
            )
    if numeric is not None:
        lines.append(
            f"  numbers   {len(numeric.values)} matched values compared with {numeric.engine}"
        )
        first = numeric.first
        if first is None:
            lines.append("            all within the tolerance")
        else:
            tol = "" if first.tolerance is None else f" > tolerance {first.tolerance:.3g}"
            step = (
                "" if first.quant_step is None else f" (quantization step {first.quant_step:.3g})"
            )
            # The judged error is what the value's own nodes add; end to end it also
            # carries what came before.
            own = "" if first.local_abs is None else f"its nodes add {first.local_abs:.3g}"
            lines.append(
                f"  first divergence: {first.a} (node {first.node_a}) against {first.b}: "
                + (
                    f"{own}{tol}{step}, max abs {first.max_abs:.3g} end to end"
                    if own
                    else f"max abs {first.max_abs:.3g}{tol}{step}"
                )
            )
    return "\n".join(lines)
