"""Validator speed on a 100k-node transformer-shaped model, next to onnx.checker.

Run: python benchmarks/bench_check.py [--nodes 100000] [--repeat 3]

Prints, best of N:
* the Document index build (scopes), which every consumer shares;
* a full `validate(doc)`: onnx shape inference (strict, data propagation, on a copy
  without value_info) runs in the worker process while this one runs onnx.checker
  (without its inference part) and our rules; CPU time is this process's only;
* the peer: `onnx.checker.check_model(full_check=True)` on the same model, which stops at
  the first problem and says nothing about where; ratio peer/ours (> 1: we are faster);
* incremental re-checks after one value rename, after one attribute edit (the node
  inferred and checked alone when its types stay) and after a type-changing edit;
* `onnxviz check` from the command line, load included, next to onnx.load + the checker.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.models import transformer_like
from onnxviz.check.validator import Validator
from onnxviz.model.document import Document


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    model = transformer_like(args.nodes)
    # A Cast on the last output, as its own graph output: an edit of its target type
    # changes one value's type near the output (see the type-changing edits below).
    last = model.graph.output[0].name
    model.graph.node.append(onnx.helper.make_node("Cast", [last], ["probe"], to=1))
    model.graph.output.append(onnx.ValueInfoProto(name="probe", type=model.graph.output[0].type))
    pristine = model.SerializeToString()  # the edits below change `model` in place
    print(f"model: {len(model.graph.node)} nodes, {len(model.graph.initializer)} initializers")

    def fresh_index() -> Document:
        doc = Document.from_model(model)
        doc.scopes()
        return doc

    t_index, _ = best_of(fresh_index, args.repeat)
    print(f"document index (scopes):            {t_index:8.3f} s")
    print("(wall times below are best of --repeat; on a loaded machine compare the CPU times)")

    timings: list[dict[str, float]] = []

    def full() -> list[Any]:
        doc = fresh_index()
        start, cpu = time.perf_counter(), time.process_time()
        validator = Validator(doc)
        out = validator.validate()
        state = validator.state
        assert state is not None
        timings.append(
            {
                **state.timings,
                "total": time.perf_counter() - start,
                "cpu": time.process_time() - cpu,
            }
        )
        return out

    best_of(full, args.repeat)
    best = min(timings, key=lambda t: t["total"])
    print(f"validate (full, index built):       {best['total']:8.3f} s   (CPU {best['cpu']:.3f} s)")
    print(
        f"  onnx shape inference (worker):    {best['inference']:8.3f} s   (overlapped; waited {best['inference_wait']:.3f} s for it)"
    )
    print(f"  onnx.checker (its worker):        {best['checker']:8.3f} s")
    print(f"  onnxviz rules (this process):     {best['rules']:8.3f} s")

    peer_cpu: list[float] = []

    def peer() -> None:
        cpu = time.process_time()
        onnx.checker.check_model(model, full_check=True)
        peer_cpu.append(time.process_time() - cpu)

    t_peer, _ = best_of(peer, args.repeat)
    print(
        f"peer CPU time:                      {min(peer_cpu):8.3f} s   CPU ratio peer/ours {min(peer_cpu) / best['cpu']:.2f}"
    )
    print(
        f"peer onnx.checker full_check:       {t_peer:8.3f} s   ratio peer/ours {t_peer / best['total']:.2f}"
    )

    doc = fresh_index()
    validator = Validator(doc)
    validator.validate()
    names = [n.output[0] for n in model.graph.node[100 : 100 + args.repeat * 2]]
    rename_times = []
    for i, name in enumerate(names):
        changes = doc.rename_value(name, f"renamed_{i}")
        start = time.perf_counter()
        validator.validate(changes)
        rename_times.append(time.perf_counter() - start)
    t_rename = min(rename_times)
    print(
        f"incremental after one rename:       {t_rename * 1000:8.1f} ms  ratio peer/ours {t_peer / t_rename:.0f}"
    )

    # Re-set an existing attribute of a node (the model stays valid).
    index = next(i for i, n in enumerate(model.graph.node) if len(n.attribute))
    label = doc.main_scope.node_label(index)
    attr = doc.main_scope.nodes[index].attribute[0]
    attr_times = []
    for _ in range(args.repeat):
        changes = doc.set_attribute(label, attr.name, attr)
        start = time.perf_counter()
        validator.validate(changes)
        attr_times.append(time.perf_counter() - start)
    print(
        f"incremental after an attribute edit:{min(attr_times) * 1000:8.1f} ms  (the node inferred and checked alone; peer/ours {t_peer / min(attr_times):.1f})"
    )
    # Edits that change the node's output type: its downstream cone is inferred again
    # (seeded with the types at its boundary).  A Cast on a graph output (the cone is
    # that node), then a Cast near the input: its cone is the whole model, and doubles
    # reaching float Adds make inference fail there, so the whole model is inferred.
    casts = [i for i, n in enumerate(model.graph.node) if n.op_type == "Cast"]
    for where, cast in (
        ("near the output", len(model.graph.node) - 1),
        ("near the input", casts[0]),
    ):
        cast_label = doc.main_scope.node_label(cast)
        retype_times = []
        for k in range(args.repeat):
            to = onnx.helper.make_attribute("to", onnx.TensorProto.DOUBLE if k % 2 == 0 else 1)
            changes = doc.set_attribute(cast_label, "to", to)
            start = time.perf_counter()
            validator.validate(changes)
            retype_times.append(time.perf_counter() - start)
        print(
            f"type-changing edit {where}: {min(retype_times) * 1000:8.1f} ms  (peer/ours {t_peer / min(retype_times):.2f})"
        )

    # The command line, load included, against onnx.load + onnx.checker in the same run.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        with open(path, "wb") as fh:
            fh.write(pristine)
        cli = [sys.executable, "-m", "onnxviz", "check", path]
        peer = [
            sys.executable,
            "-c",
            "import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)",
            path,
        ]
        ours_cli, peer_cli = [], []
        for _ in range(args.repeat):
            for cmd, times in ((cli, ours_cli), (peer, peer_cli)):
                start = time.perf_counter()
                subprocess.run(cmd, capture_output=True, check=False)
                times.append(time.perf_counter() - start)
    print(
        f"onnxviz check (CLI, load included):   {min(ours_cli):6.2f} s   "
        f"peer onnx.load + checker full_check {min(peer_cli):.2f} s (ratio peer/ours {min(peer_cli) / min(ours_cli):.2f})"
    )


if __name__ == "__main__":
    main()
