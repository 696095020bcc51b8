"""`onnxviz run MODEL`: run a model in the bundled interpreter (docs/architecture.md §9).

Inputs come from ``--input NAME=FILE`` (.npy, .npz with names inside, or an ONNX
TensorProto/SequenceProto/... ``.pb``; a ``.npz`` may be given without ``NAME=``), or
``--random-inputs`` (asks nothing: symbolic dims take ``--dim NAME=N`` or 1).
Outputs are written to ``--output-dir`` as ``<name>.npy`` (non-tensors as
``<name>.json``); ``--intermediates`` keeps and writes every node output of the main
graph too (under ``intermediates/``); ``--compare onnxruntime`` runs onnxruntime on the
same inputs and reports max abs / rel error per output and per intermediate both
produce; ``--json`` prints one JSON document with per-node times.
``--engine onnxruntime``, ``--profile``, ``--chunk-mb`` and ``--first-divergence`` are
`run_engine`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any

import numpy as np
from onnx import TypeProto

from onnxviz.cli import run_engine
from onnxviz.errors import ExecutionError, LoadError
from onnxviz.model.text import jsonable
from onnxviz.runtime.values import describe, elem_type_to_dtype, load_proto_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to a .onnx model")
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="an input value from .npy, .npz or .pb (repeatable; a .npz alone feeds by its names)",
    )
    parser.add_argument(
        "--random-inputs", action="store_true", help="make random values for inputs not given"
    )
    parser.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=N",
        help="size of a symbolic dimension for --random-inputs (default 1)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for random inputs and ops")
    parser.add_argument("--output-dir", metavar="DIR", help="write outputs as <name>.npy here")
    parser.add_argument(
        "--intermediates", action="store_true", help="keep (and write) every node output"
    )
    parser.add_argument(
        "--compare",
        choices=["onnxruntime"],
        help="also run onnxruntime and report max abs / rel error",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    run_engine.add_arguments(parser)


# -- inputs ------------------------------------------------------------------------------
def _load_file(path: str) -> Any:
    if not os.path.exists(path):
        raise LoadError(f"input file '{path}' does not exist", file=path)
    try:
        if path.endswith(".npy"):
            return np.load(path, allow_pickle=False)
        if path.endswith(".pb"):
            return load_proto_file(path)
    except Exception as exc:
        raise LoadError(f"cannot read input file '{path}': {exc}", file=path) from exc
    raise LoadError(f"input file '{path}' is not .npy, .npz or .pb", file=path)


def _load_npz(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        raise LoadError(f"input file '{path}' does not exist", file=path)
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as exc:
        raise LoadError(f"cannot read input file '{path}': {exc}", file=path) from exc


def parse_dims(specs: list[str]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not value.strip().isdigit():
            raise ExecutionError(f"--dim expects NAME=N, got '{spec}'")
        dims[name.strip()] = int(value)
    return dims


def random_value(tp: TypeProto | None, dims: dict[str, int], rng: np.random.Generator) -> Any:
    """A random value of a declared type (symbolic or missing dims: ``dims`` or 1)."""
    if tp is None or tp.WhichOneof("value") is None:
        return rng.standard_normal(1).astype(np.float32)
    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        return [random_value(tp.sequence_type.elem_type, dims, rng) for _ in range(2)]
    if kind == "optional_type":
        return random_value(tp.optional_type.elem_type, dims, rng)
    if kind == "map_type":
        return {i: random_value(tp.map_type.value_type, dims, rng) for i in range(2)}
    tt = tp.tensor_type if kind == "tensor_type" else tp.sparse_tensor_type
    shape = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            shape.append(int(d.dim_value))
        else:
            shape.append(dims.get(d.dim_param, 1) if d.dim_param else 1)
    dtype = elem_type_to_dtype(tt.elem_type) if tt.elem_type else np.dtype(np.float32)
    if dtype == np.dtype(object):
        return np.array(rng.choice(["a", "b", "c"], size=shape), dtype=object)
    if dtype == np.dtype(bool):
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 4, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def gather_inputs(args: argparse.Namespace, session: Any) -> dict[str, Any]:
    feeds: dict[str, Any] = {}
    names = session.input_names
    for spec in args.input:
        name, sep, path = spec.partition("=")
        if not sep:
            path = spec
            if path.endswith(".npz"):
                feeds.update(_load_npz(path))
                continue
            if len(names) != 1:
                raise ExecutionError(
                    f"--input '{spec}' needs NAME=FILE (the model has {len(names)} inputs)"
                )
            name = names[0]
        if path.endswith(".npz"):
            data = _load_npz(path)
            if name in data:
                feeds[name] = data[name]
            elif len(data) == 1:
                feeds[name] = next(iter(data.values()))
            else:
                raise ExecutionError(f"'{path}' holds no array named '{name}'")
        else:
            feeds[name] = _load_file(path)
    missing = [n for n in names if n not in feeds]
    if missing and args.random_inputs:
        rng = np.random.default_rng(args.seed)
        dims = parse_dims(args.dim)
        types = dict(session.inputs)
        for name in missing:
            feeds[name] = random_value(types.get(name), dims, rng)
    elif missing:
        raise ExecutionError(
            f"no value for input(s) {', '.join(missing)}: use --input NAME=FILE or --random-inputs"
        )
    return feeds


# -- outputs -----------------------------------------------------------------------------
def safe_name(name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "value"
    return safe[:180]


def _jsonable(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        data = (
            value.tolist() if value.dtype.kind in "biufcOUS" else value.astype(np.float32).tolist()
        )
        if value.dtype.kind == "c":
            data = {"real": value.real.tolist(), "imag": value.imag.tolist()}
        return {"dtype": str(value.dtype), "shape": list(value.shape), "data": data}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def write_value(directory: str, name: str, value: Any, used: set[str]) -> str:
    base = safe_name(name)
    candidate = base
    k = 1
    while candidate in used:
        k += 1
        candidate = f"{base}_{k}"
    used.add(candidate)
    os.makedirs(directory, exist_ok=True)
    if isinstance(value, np.ndarray) and value.dtype != object and value.dtype.kind in "biufc":
        path = os.path.join(directory, candidate + ".npy")
        np.save(path, value)
    elif isinstance(value, np.ndarray) and value.dtype == object:
        path = os.path.join(directory, candidate + ".npy")
        np.save(path, value.astype(str))
    elif isinstance(value, np.ndarray):
        path = os.path.join(directory, candidate + ".npy")  # ml_dtypes: saved as float32
        np.save(path, value.astype(np.float32))
    else:
        path = os.path.join(directory, candidate + ".json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(_jsonable(value), fh)
    return path


def value_stats(value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": describe(value)}
    if isinstance(value, np.ndarray) and value.size and value.dtype.kind in "biuf":
        v = value.astype(np.float64)
        finite = v[np.isfinite(v)]
        out.update(
            min=float(finite.min()) if finite.size else None,
            max=float(finite.max()) if finite.size else None,
            mean=float(finite.mean()) if finite.size else None,
            nonfinite=int(v.size - finite.size),
        )
    return out


def diff_json(diff: Any) -> dict[str, Any]:
    """One `runtime.compare.ValueDiff` as the JSON report writes it."""
    if diff.shape_mismatch is not None:
        return {"name": diff.name, "shape_mismatch": [list(s) for s in diff.shape_mismatch]}
    if diff.equal is not None:
        return {"name": diff.name, "equal": diff.equal}
    if diff.max_abs is None:
        return {"name": diff.name, "comparable": False, "note": diff.note}
    entry = {"name": diff.name, "max_abs": diff.max_abs, "max_rel": diff.max_rel}
    if diff.note:  # e.g. the peer's integer kernel is the inexact one (exact_integer.py)
        entry["note"] = diff.note
    return entry


def peer_explainer(model: Any, ours: dict[str, Any], feeds: dict[str, Any]) -> Any:
    """``explain(diff, ours, theirs) -> diff`` with its note set when the value comes from
    an integer node whose exact result is ours and not the peer's (exact_integer.py)."""
    from onnxviz.runtime.exact_integer import initializer_lookup, peer_inexact

    producer = {o: n for n in model.graph.node for o in n.output if o}
    value_of = initializer_lookup(model, ours, feeds)

    def explain(diff: Any, mine: Any, theirs: Any) -> Any:
        node = producer.get(diff.name)
        if node is not None and diff.max_abs:
            diff.note = peer_inexact(node, value_of, mine, theirs)
        return diff

    return explain


def run(args: argparse.Namespace) -> int:
    from onnxviz.model.document import Document

    doc = Document.open(args.model)
    if args.engine == "onnxruntime":
        feeds = gather_inputs(args, run_engine.GraphInputs(doc.model))
        report, outputs = run_engine.onnxruntime_report(args, doc, feeds, write_value, value_stats)
        report = {"model": os.path.abspath(args.model), **report}
        report["inputs"] = [{"name": n, **value_stats(v)} for n, v in feeds.items()]
    else:
        report, outputs, intermediates, feeds = _run_ours(args, doc)
        if args.compare == "onnxruntime":
            report["compare"] = run_engine.compare_report(
                doc, feeds, outputs, intermediates, args, diff_json, peer_explainer
            )
    if args.output_dir:
        used: set[str] = set()
        for entry in report["outputs"]:
            entry["file"] = write_value(
                args.output_dir, entry["name"], outputs[entry["name"]], used
            )
    if args.first_divergence:
        report["first_divergence"] = run_engine.divergence_report(args, doc, feeds, diff_json)
    if args.json:
        json.dump(jsonable(report), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print_human(report)
    return 0


def _run_ours(
    args: argparse.Namespace, doc: Any
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Run in the bundled interpreter: (report, outputs, kept intermediates, feeds)."""
    from onnxviz.runtime.kernels import blas
    from onnxviz.runtime.session import Session

    session = Session(doc, seed=args.seed, keep_intermediates=bool(args.intermediates))
    feeds = gather_inputs(args, session)
    t0 = time.perf_counter()
    outputs = session.run(feeds)
    seconds = time.perf_counter() - t0
    intermediates: dict[str, Any] = {}
    if args.intermediates and session.store is not None:
        outs = set(outputs)
        intermediates = {
            n: v for n, v in session.store.names("main").items() if n not in outs and n not in feeds
        }
    blas_status = blas.status()
    report: dict[str, Any] = {
        "model": os.path.abspath(args.model),
        "engine": {
            "name": "onnxviz",
            "direct_blas": blas_status["direct_blas"],
            "blas_library": blas_status["library"],
            "blas_core": blas_status["core"],
            "blas_core_chosen_by": blas_status["core_chosen_by"],
            "blas_fallback_reason": blas_status["reason"],
        },
        "seconds": seconds,
        "inputs": [{"name": n, **value_stats(v)} for n, v in feeds.items()],
        "outputs": [{"name": n, **value_stats(v)} for n, v in outputs.items()],
    }
    if intermediates:
        sub = os.path.join(args.output_dir, "intermediates") if args.output_dir else None
        used_i: set[str] = set()
        report["intermediates"] = [
            {"name": n, "type": describe(v)}
            | ({"file": write_value(sub, n, v, used_i)} if sub else {})
            for n, v in intermediates.items()
        ]
    if session.dropped:
        report["dropped"] = [
            {"graph": d.graph_path, "name": d.name, "bytes": d.nbytes, "reason": d.reason}
            for d in session.dropped
        ]
    times = sorted(session.node_times.items(), key=lambda kv: -kv[1][1])
    op_of = {pn.address: pn.op_type for pn in session.plan.nodes}
    report["node_times"] = [
        {"node": k, "op_type": op_of.get(k, ""), "calls": c, "seconds": s} for k, (c, s) in times
    ]
    return report, outputs, intermediates, feeds


def print_human(report: dict[str, Any]) -> None:
    engine = report["engine"]
    where = f" with onnxruntime ({', '.join(engine['providers'])})" if "providers" in engine else ""
    print(f"ran {report['model']}{where} in {report['seconds'] * 1000:.1f} ms")
    reason = engine.get("blas_fallback_reason")
    if reason and "ONNXVIZ_DIRECT_BLAS=0" not in reason:
        print(f"  note: direct BLAS calls are off ({reason}); numpy's matmul was used")
    for o in report["outputs"]:
        extra = f" -> {o['file']}" if "file" in o else ""
        stats = ""
        if o.get("min") is not None:
            stats = f"  min {o['min']:.6g} max {o['max']:.6g} mean {o['mean']:.6g}"
        print(f"  {o['name']}: {o['type']}{stats}{extra}")
    if report.get("intermediates"):
        print(f"  {len(report['intermediates'])} intermediate values kept")
    if report.get("chunks"):
        peak = max(c["actual_bytes"] for c in report["chunks"])
        print(f"    fetched in {len(report['chunks'])} runs, largest {peak / 2**20:.1f} MB")
    for d in report.get("dropped", []):
        print(f"  dropped {d['name']} ({d['bytes']} bytes): {d['reason']}")
    slow = report["node_times"][:5]
    if slow:
        print("  slowest nodes:")
        for t in slow:
            print(f"    {t['seconds'] * 1000:8.2f} ms  {t['op_type']:16s} {t['node']}")
    if "compare" in report:
        print("  compared with onnxruntime:")
        for kind in ("outputs", "intermediates"):
            entries = report["compare"][kind]
            if kind == "intermediates":
                # the 10 worst only; --json has them all
                entries = sorted(entries, key=lambda e: -float(e.get("max_rel", 0.0)))[:10]
                if entries:
                    print(f"    {len(report['compare'][kind])} intermediates compared, worst:")
            for e in entries:
                if "max_abs" in e:
                    print(
                        f"    {kind[:-1]} {e['name']}: max abs {e['max_abs']:.3g}, max rel {e['max_rel']:.3g}"
                    )
                    if e.get("note"):
                        print(f"      {e['note']}")
                else:
                    print(f"    {kind[:-1]} {e['name']}: {e}")
    if "first_divergence" in report:
        print(f"  {report['first_divergence']['text']}")
