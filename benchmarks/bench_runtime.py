"""Interpreter speed: onnxviz Session vs onnxruntime vs onnx.reference, same thread count.

Models (bench_models.py): ResNet-50 and Inception v2 (light), a BERT-base encoder,
a small UNet, a 2-layer LSTM, and a chain of 5,000 tiny Add nodes (engine overhead per
node); and, on request, PyTorch exports (torch_models.py: ``resnet50_torch``,
``bert_torch``, the shapes real exports have).  For each thread count, each model: one warm-up run each (plan compile, constant
folding, onnxruntime's graph optimisation), then ``--repeat`` rounds that time onnxviz and
onnxruntime back to back (so load from other processes hits both alike), then
``--reference-repeat`` runs of onnx.reference.  Prints medians and ratios; "round ratio"
is the median of the per-round ours/onnxruntime ratios and "best-of ratio" the ratio of
the fastest runs (both steadier than medians on a busy machine).

BLAS threads are set with threadpoolctl (numpy, also used by onnx.reference) and
onnxruntime gets ``intra_op_num_threads`` equal.

    python benchmarks/bench_runtime.py [--threads 1,2] [--repeat 7] [--models resnet50,bert]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import MODELS
from torch_models import TORCH_MODELS

MODELS = {**MODELS, **TORCH_MODELS}

DEFAULT_MODELS = "resnet50,inception_v2,bert,unet,lstm,add_chain"


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--repeat", type=int, default=7, help="timed rounds of onnxviz+onnxruntime")
    p.add_argument("--reference-repeat", type=int, default=1, help="runs of onnx.reference")
    p.add_argument("--no-reference", action="store_true", help="skip onnx.reference")
    p.add_argument("--models", default=DEFAULT_MODELS)
    return p.parse_args()


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def bench(key: str, threads: int, args: argparse.Namespace) -> dict[str, float]:
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    from onnxviz.runtime.session import Session

    title, build = MODELS[key]
    model, feeds = build()
    out_name = model.graph.output[0].name
    n_nodes = len(model.graph.node)

    sess = Session(model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    ort_sess = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )

    def ours_run() -> Any:
        return sess.run(feeds)[out_name]

    def ort_run() -> Any:
        return ort_sess.run([out_name], feeds)[0]

    ours = ours_run()
    theirs = ort_run()
    ours_times: list[float] = []
    ort_times: list[float] = []
    for _ in range(args.repeat):
        t, ours = _timed(ours_run)
        ours_times.append(t)
        t, theirs = _timed(ort_run)
        ort_times.append(t)
    ours_t = statistics.median(ours_times)
    ort_t = statistics.median(ort_times)
    round_ratio = statistics.median(o / r for o, r in zip(ours_times, ort_times))
    best_ratio = min(ours_times) / min(ort_times)

    ref_t = float("nan")
    err_ref = float("nan")
    if not args.no_reference:
        ref = ReferenceEvaluator(model)
        ref_times = []
        ref_out = None
        for _ in range(max(1, args.reference_repeat)):
            t, ref_out = _timed(lambda: ref.run([out_name], feeds)[0])
            ref_times.append(t)
        ref_t = statistics.median(ref_times)
        err_ref = float(np.max(np.abs(ours.astype(np.float64) - np.asarray(ref_out))))
    err = float(np.max(np.abs(ours.astype(np.float64) - theirs)))

    print(f"{title}: {n_nodes} nodes, threads {threads}")
    print(f"  onnxviz        {ours_t * 1000:9.1f} ms (median of {args.repeat})")
    print(
        f"  onnxruntime    {ort_t * 1000:9.1f} ms   onnxviz/onnxruntime    = {ours_t / ort_t:6.2f}x"
        f"  (round ratio {round_ratio:.2f}x, best-of ratio {best_ratio:.2f}x)"
    )
    if not args.no_reference:
        print(
            f"  onnx.reference {ref_t * 1000:9.1f} ms   onnx.reference/onnxviz = "
            f"{ref_t / ours_t:6.1f}x faster  (onnx.reference/onnxruntime = {ref_t / ort_t:.1f}x)"
        )
    if key == "add_chain":
        per = 1e6 / n_nodes
        print(
            f"  per node: onnxviz {ours_t * per:.1f} us, onnxruntime {ort_t * per:.1f} us, "
            f"onnx.reference {ref_t * per:.1f} us"
        )
    print(f"  max abs diff vs onnxruntime {err:.3g}, vs onnx.reference {err_ref:.3g}")
    sys.stdout.flush()
    return {
        "ours": ours_t,
        "ort": ort_t,
        "ref": ref_t,
        "round_ratio": round_ratio,
        "best_ratio": best_ratio,
    }


def main(args: argparse.Namespace) -> int:
    from threadpoolctl import threadpool_info, threadpool_limits

    blas = [f"{i['internal_api']} {i['version']} ({i['architecture']})" for i in threadpool_info()]
    print(f"BLAS: {', '.join(blas) or 'none found'}; load average {os.getloadavg()[0]:.1f}")
    summary: list[tuple[str, int, dict[str, float]]] = []
    for threads in [int(t) for t in args.threads.split(",")]:
        with threadpool_limits(limits=threads):
            for key in args.models.split(","):
                summary.append((key, threads, bench(key, threads, args)))
    print("\nsummary (onnxviz / onnxruntime, onnx.reference / onnxviz):")
    for key, threads, r in summary:
        print(
            f"  {key:<13} threads {threads}: {r['ours'] / r['ort']:5.2f}x of onnxruntime "
            f"(round {r['round_ratio']:.2f}x, best {r['best_ratio']:.2f}x), "
            f"{r['ref'] / r['ours']:6.1f}x faster than "
            "onnx.reference"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(_parse()))
