"""The whole interpreter-speed table in one command: every model family against
onnxruntime, CPU time, one thread, alternating rounds (issue 21's measurement).

    python benchmarks/bench_families.py [--rounds 5] [--models a,b,...] [--reference]

(``--models variants``: other sizes of the families, family_models.VARIANT_MODELS;
``--models corpus``: the exporter corpus of tests/data/exporters, exporter_models.py.)

For each model: one warm-up run of each engine (plan compile, constant folding,
onnxruntime's graph optimisation), then ``--rounds`` rounds that run onnxviz and
onnxruntime back to back and take each one's process CPU time (steadier than wall time on
a shared machine); a round runs a model of less than 20 ms that many times over (the
warm-up run's time says how many), so a 30 us model is timed over 20 ms too.  The table gives both medians and the median of per-round ratios;
``--reference`` adds onnx.reference (one run; slow).  The outputs are compared too: a
speed-up that changes the numbers is not one.

Models: the light models of the onnx wheel (bench_models.py), ResNet-50 and BERT-base
(hand-built and PyTorch exports), the families of family_models.py, the 5,000-node
Add chain whose per-node time is the engine's fixed cost, and the 1,000-iteration Loop
whose per-iteration time is its cost for each step of a loop.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# One thread for the OpenMP runtimes the model builders load (torch's libgomp): loaded
# after main's threadpool_limits, they kept 2 threads that spun after each export and
# counted in both engines' CPU time (BERT-tiny's dynamic-quantized row: 4.6 ms against
# 2.4 with them quiet).
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import LIGHT_MODELS
from bench_models import MODELS as BASE_MODELS
from exporter_models import CORPUS_MODELS
from family_models import FAMILY_MODELS, VARIANT_MODELS
from torch_models import TORCH_MODELS

MODELS = {**BASE_MODELS, **TORCH_MODELS, **FAMILY_MODELS, **VARIANT_MODELS, **CORPUS_MODELS}
# A round's time per engine at least: shorter runs repeat within it.
ROUND_SECONDS = 0.02
DEFAULT = (
    "resnet50,bert,resnet50_torch,bert_torch,inception_v2,"
    + ",".join(LIGHT_MODELS)
    + ",unet,lstm,"
    + ",".join(FAMILY_MODELS)
    + ",add_chain,loop_steps"
)


def _cpu(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def _max_error(ours: dict[str, Any], theirs: dict[str, Any]) -> float:
    worst = 0.0
    for name, value in theirs.items():
        a, b = np.asarray(ours[name]), np.asarray(value)
        if a.dtype.kind in "fc" and a.size:
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b))))
    return worst


def bench(key: str, rounds: int, reference: bool) -> dict[str, Any]:
    import onnxruntime as ort
    from threadpoolctl import threadpool_limits

    from onnxviz.runtime.session import Session

    title, build = MODELS[key]
    model, feeds = build()
    # again after the build: a library it loaded (torch's OpenMP) starts with its own count
    threadpool_limits(limits=1)
    outputs = [o.name for o in model.graph.output]
    ours = Session(model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    theirs = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )

    def run_ours() -> dict[str, Any]:
        return ours.run(feeds)

    def run_theirs() -> dict[str, Any]:
        return dict(zip(outputs, theirs.run(outputs, feeds)))

    a, b = run_ours(), run_theirs()
    once = max(_cpu(run_ours)[0], _cpu(run_theirs)[0], 1e-6)
    repeat = max(1, int(ROUND_SECONDS / once))

    def timed(run: Callable[[], dict[str, Any]]) -> tuple[float, dict[str, Any]]:
        t0 = time.process_time()
        for _ in range(repeat - 1):
            run()
        out = run()
        return (time.process_time() - t0) / repeat, out

    ours_t: list[float] = []
    ort_t: list[float] = []
    for _ in range(rounds):
        t, a = timed(run_ours)
        ours_t.append(t)
        t, b = timed(run_theirs)
        ort_t.append(t)
    row: dict[str, Any] = {
        "key": key,
        "title": title,
        "nodes": len(model.graph.node),
        "ours": statistics.median(ours_t),
        "ort": statistics.median(ort_t),
        "round_ratio": statistics.median(o / r for o, r in zip(ours_t, ort_t)),
        "max_abs": _max_error(a, b),
        "ref": float("nan"),
    }
    if reference:
        from onnx.reference import ReferenceEvaluator

        try:
            ref = ReferenceEvaluator(model)
            row["ref"], _ = _cpu(lambda: ref.run(None, feeds))
        except Exception as exc:  # onnx.reference lacks some contrib ops: say so, go on
            print(f"  onnx.reference cannot run {key}: {type(exc).__name__}", file=sys.stderr)
    return row


def main(argv: list[str]) -> int:
    from threadpoolctl import threadpool_limits

    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--models", default=DEFAULT)
    p.add_argument("--reference", action="store_true", help="also time onnx.reference")
    args = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}; 1 thread; CPU time, median of {args.rounds}")
    header = f"{'model':48s} {'nodes':>6s} {'onnxviz':>10s} {'onnxruntime':>12s} {'ratio':>7s} {'round':>7s}"
    header += f" {'onnx.ref':>10s} {'max abs diff':>13s}"
    print(header)
    rows = []
    groups = {"variants": list(VARIANT_MODELS), "corpus": list(CORPUS_MODELS)}
    keys = [k for part in args.models.split(",") for k in groups.get(part, [part])]
    with threadpool_limits(limits=1):
        for key in keys:
            try:
                row = bench(key, args.rounds, args.reference)
            except ImportError as exc:
                print(f"{key}: needs {exc.name} (a benchmark-time tool)")
                continue
            rows.append(row)
            ref = f"{row['ref'] * 1000:8.1f}ms" if row["ref"] == row["ref"] else f"{'-':>10s}"
            print(
                f"{row['title'][:48]:48s} {row['nodes']:6d} {row['ours'] * 1000:8.2f}ms "
                f"{row['ort'] * 1000:10.2f}ms {row['ours'] / row['ort']:6.2f}x "
                f"{row['round_ratio']:6.2f}x {ref} {row['max_abs']:13.3g}",
                flush=True,
            )
            if key in ("add_chain", "loop_steps"):
                per, unit = (
                    (1e6 / row["nodes"], "node") if key == "add_chain" else (1e3, "iteration")
                )
                print(
                    f"{'':48s} per {unit}: onnxviz {row['ours'] * per:.2f} us, "
                    f"onnxruntime {row['ort'] * per:.2f} us"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
