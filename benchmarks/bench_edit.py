"""Editing latency on a big model: what the window pays after each edit.

For a 10k-node transformer-like model, per kind of edit: applying the command, the
instant quick check the diagnostics dock shows first, and the validator's incremental
re-check, next to the peer a user would otherwise run after an edit, onnx.checker with
full_check (checker + strict shape inference), measured in the same run.

    python benchmarks/bench_edit.py [n_nodes]
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import onnx
from onnx import helper

from benchmarks.models import transformer_like
from onnxviz.check.quick import index_before
from onnxviz.check.validator import Validator
from onnxviz.model import commands as C
from onnxviz.model.document import Document


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    doc = Document.from_model(transformer_like(n))
    scope = doc.main_scope
    validator = Validator(doc)
    t0 = time.perf_counter()
    validator.validate()
    full = time.perf_counter() - t0
    t0 = time.perf_counter()
    with contextlib.suppress(Exception):  # the peer's verdict is not what we time
        onnx.checker.check_model(doc.model, full_check=True)
    peer = time.perf_counter() - t0
    print(f"model: {len(scope.nodes)} nodes")
    print(f"full validation (ours)           {_ms(full)}")
    print(f"onnx.checker full_check (peer)   {_ms(peer)}   ratio ours/peer {full / peer:.2f}")
    print()
    ints_node = next(
        i for i, node in enumerate(scope.nodes) if any(a.type == a.INTS for a in node.attribute)
    )
    ints_name = next(a.name for a in scope.nodes[ints_node].attribute if a.type == a.INTS)
    value = scope.nodes[5].output[0]
    used = next(i for i, node in enumerate(scope.nodes) if scope.consumers.get(node.output[0]))
    edits = [
        (
            "set attribute",
            lambda: C.SetAttribute(
                "main", ints_node, helper.make_attribute(ints_name, [0, 1, 2, 3])
            ),
        ),
        ("rename value", lambda: C.RenameValue("main", value, value + "_renamed")),
        ("delete used producer", lambda: C.RemoveNode("main", used)),
    ]
    print(f"{'edit':24} {'apply':>11} {'quick check':>11} {'incremental':>11} {'vs peer':>8}")
    for label, make in edits:
        before = index_before(doc)
        t0 = time.perf_counter()
        changes = doc.execute(make())
        t1 = time.perf_counter()
        validator.quick_check(changes, before)
        t2 = time.perf_counter()
        validator.validate(changes)
        t3 = time.perf_counter()
        print(f"{label:24} {_ms(t1 - t0)} {_ms(t2 - t1)} {_ms(t3 - t2)} {(t3 - t2) / peer:7.2f}x")


if __name__ == "__main__":
    main()
