"""The engine side of `onnxviz run`: ``--engine onnxruntime``, ``--profile``,
``--chunk-mb``, ``--first-divergence`` and the chunked ``--compare onnxruntime``.

`cli/run.py` owns inputs, outputs and the human report; this module runs the model in
onnxruntime (`runtime.ort_engine`) and adds its sections to the same report:

- ``engine``: onnxruntime with the providers the session used;
- ``intermediates``: with ``--intermediates``, fetched in chunks of at most
  ``--chunk-mb`` (estimated) and written to ``--output-dir``/intermediates as each chunk
  arrives, so memory holds one chunk at a time; ``chunks`` lists each chunk's plan and
  actual size;
- ``node_times``: with ``--profile``, onnxruntime's profiler mapped onto our node
  addresses;
- ``first_divergence``: the first node whose outputs differ between our interpreter and
  onnxruntime beyond ``--atol`` + ``--rtol`` * |onnxruntime's|, found by bisection.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from onnxviz.errors import ExecutionError
from onnxviz.runtime.values import describe

ENGINES = ("onnxviz", "onnxruntime")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="onnxviz",
        help="onnxviz: the bundled interpreter; onnxruntime: for models too big or slow to step",
    )
    parser.add_argument(
        "--provider",
        action="append",
        default=[],
        metavar="NAME",
        help="onnxruntime execution provider to prefer (repeatable; default: CUDA, ROCm, "
        "DirectML, CoreML when installed, CPU last)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="per-node times (onnxruntime: its profiler)"
    )
    parser.add_argument(
        "--chunk-mb",
        type=float,
        default=256.0,
        metavar="N",
        help="onnxruntime fetches intermediates in runs of at most N MB each (default 256)",
    )
    parser.add_argument(
        "--first-divergence",
        action="store_true",
        help="find the first node where onnxviz and onnxruntime differ (bisection)",
    )
    parser.add_argument("--atol", type=float, default=1e-4, help="tolerance for divergence")
    parser.add_argument("--rtol", type=float, default=1e-3, help="tolerance for divergence")


def chunk_bytes(args: argparse.Namespace) -> int:
    if args.chunk_mb <= 0:
        raise ExecutionError(f"--chunk-mb must be positive, got {args.chunk_mb}")
    return max(int(args.chunk_mb * 2**20), 1)


def options(args: argparse.Namespace) -> Any:
    from onnxviz.runtime.ort_engine import EngineOptions

    return EngineOptions(providers=list(args.provider) or None)


class GraphInputs:
    """The inputs a caller feeds, read off the graph (no interpreter plan is built for
    the onnxruntime engine: compiling one costs time on a big model)."""

    def __init__(self, model: Any) -> None:
        inits = {t.name for t in model.graph.initializer}
        self.inputs = [
            (vi.name, vi.type if vi.type.WhichOneof("value") else None)
            for vi in model.graph.input
            if vi.name not in inits
        ]
        self.input_names = [n for n, _ in self.inputs]


def onnxruntime_report(
    args: argparse.Namespace, doc: Any, feeds: dict[str, Any], write_value: Any, stats: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``doc`` in onnxruntime: (the report's engine part, the outputs)."""
    from onnxviz.runtime import ort_engine

    if args.compare == "onnxruntime":
        raise ExecutionError("--compare onnxruntime needs --engine onnxviz (the other engine)")
    result = ort_engine.run(doc, feeds, options=options(args), profile=bool(args.profile))
    report: dict[str, Any] = {
        "engine": {"name": "onnxruntime", "providers": result.providers},
        "seconds": result.seconds,
        "outputs": [{"name": n, **stats(v)} for n, v in result.outputs.items()],
        "node_times": [],
    }
    if result.profile is not None:
        report["node_times"] = [
            {"node": r.address, "op_type": r.op_type, "calls": r.calls, "seconds": r.seconds}
            for r in result.profile.rows()
        ]
    if args.intermediates:
        used: set[str] = set()
        sub = os.path.join(args.output_dir, "intermediates") if args.output_dir else None
        entries: list[dict[str, Any]] = []
        chunks: list[dict[str, Any]] = []
        skip = set(result.outputs) | set(feeds)
        for chunk, values in ort_engine.iter_intermediates(
            doc, feeds, chunk_bytes=chunk_bytes(args), options=options(args)
        ):
            chunks.append(
                {
                    "values": len(chunk.names),
                    "planned_bytes": chunk.planned_bytes,
                    "actual_bytes": chunk.actual_bytes,
                    "resumed_from": chunk.resumed,  # held values the run started from
                    "seconds": chunk.seconds,
                }
            )
            for name, value in values.items():
                if name in skip:
                    continue
                entry = {"name": name, "type": describe(value)}
                if sub:
                    entry["file"] = write_value(sub, name, value, used)
                entries.append(entry)
            del values  # one chunk at a time
        report["intermediates"] = entries
        report["chunks"] = chunks
    return report, result.outputs


def compare_report(
    doc: Any,
    feeds: dict[str, Any],
    outputs: dict[str, Any],
    intermediates: dict[str, Any],
    args: argparse.Namespace,
    diff_json: Any,
    explainer: Any,
) -> dict[str, Any]:
    """``--compare onnxruntime``: outputs in one run, intermediates in bounded chunks."""
    from onnxviz.runtime import compare, ort_engine

    theirs = compare.run_onnxruntime(doc, feeds, [])
    explain = explainer(doc.model, {**intermediates, **outputs}, feeds)
    found: list[Any] = []
    out: dict[str, Any] = {
        "peer": "onnxruntime",
        "outputs": [
            diff_json(explain(compare.errors_between(n, v, theirs.get(n)), v, theirs.get(n)))
            for n, v in outputs.items()
        ],
        "intermediates": found,
    }
    if intermediates:
        for _, values in ort_engine.iter_intermediates(
            doc, feeds, list(intermediates), chunk_bytes=chunk_bytes(args), options=options(args)
        ):
            for n, peer in values.items():
                mine = intermediates[n]
                found.append(diff_json(explain(compare.errors_between(n, mine, peer), mine, peer)))
    return out


def divergence_report(
    args: argparse.Namespace, doc: Any, feeds: dict[str, Any], diff_json: Any
) -> dict[str, Any]:
    from onnxviz.runtime.divergence import first_divergence

    t0 = time.perf_counter()
    found = first_divergence(
        doc, feeds, atol=args.atol, rtol=args.rtol, seed=args.seed, options=options(args)
    )
    return {
        "node": found.address,
        "index": found.node_index,
        "op_type": found.op_type,
        "values": [diff_json(d) for d in found.diffs],
        "probes": found.probes,
        "atol": args.atol,
        "rtol": args.rtol,
        "seconds": time.perf_counter() - t0,
        "text": found.text(),
    }
