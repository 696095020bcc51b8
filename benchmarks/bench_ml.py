"""Tree-ensemble benchmark: a 300-tree random forest (scikit-learn, exported by skl2onnx)
scored on 10,000 rows by our kernels, onnxruntime and onnx.reference.

    .venv/bin/python benchmarks/bench_ml.py [--trees 300] [--rows 10000] [--depth 0]
                                            [--reference-rows 200]

Needs scikit-learn and skl2onnx (test extras).  onnx.reference walks every tree in Python
for every row, so it is timed on ``--reference-rows`` rows and scaled linearly to the full
batch (printed as such).  Our time is split into the first call (compiling the ensemble
into slot arrays) and later calls (what a session pays per run: it decodes attributes once
and the compiled ensemble is reused); attribute decoding is excluded, as in a plan.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def best_cpu_of(fn: Callable[[], Any], repeat: int) -> float:
    """Process CPU seconds (all threads): steadier than wall time on a shared machine."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=300)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=0, help="max_depth (0: unlimited)")
    parser.add_argument("--classes", type=int, default=3)
    parser.add_argument("--reference-rows", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestClassifier

    from onnxviz.runtime.attributes import node_attributes
    from onnxviz.runtime.invoke import call_node

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows, 10)).astype(np.float32)
    y = ((x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(int) + (x[:, 3] > 0.5)) % args.classes
    forest = RandomForestClassifier(
        n_estimators=args.trees, max_depth=args.depth or None, n_jobs=-1, random_state=0
    ).fit(x[: max(2000, args.rows // 5)], y[: max(2000, args.rows // 5)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = to_onnx(
            forest, x[:1], options={"zipmap": False}, target_opset={"": 17, "ai.onnx.ml": 3}
        )
    node = next(n for n in model.graph.node if n.op_type == "TreeEnsembleClassifier")
    n_nodes = len(next(a for a in node.attribute if a.name == "nodes_nodeids").ints)
    opsets = {"ai.onnx.ml": 3, "": 17}
    print(
        f"random forest: {args.trees} trees, {n_nodes} nodes, {args.classes} classes, "
        f"{args.rows} rows x 10 features"
    )

    attrs = node_attributes(node, 3)
    inputs = [x]

    def ours() -> Any:
        return call_node(node, inputs, opsets, attributes=attrs)

    t0 = time.perf_counter()
    our_out = ours()
    first = time.perf_counter() - t0
    t_ours = best_of(ours, args.repeat)

    cpu_ours = best_cpu_of(ours, args.repeat)

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x}
    t_ort = best_of(lambda: session.run(None, feed), args.repeat)
    cpu_ort = best_cpu_of(lambda: session.run(None, feed), args.repeat)
    ort_out = session.run(None, feed)
    single = ort.SessionOptions()
    single.intra_op_num_threads = 1
    session1 = ort.InferenceSession(
        model.SerializeToString(), single, providers=["CPUExecutionProvider"]
    )
    t_ort1 = best_of(lambda: session1.run(None, feed), args.repeat)

    ref = ReferenceEvaluator(model)
    sub = {session.get_inputs()[0].name: x[: args.reference_rows]}
    t_ref_sub = best_of(lambda: ref.run(None, sub), 1)
    t_ref = t_ref_sub * args.rows / args.reference_rows

    same_labels = float(np.mean(our_out[0] == ort_out[0]))
    max_diff = float(np.abs(our_out[1] - ort_out[1]).max())
    print(f"  agreement with onnxruntime: labels {same_labels:.4%}, max |prob diff| {max_diff:.2e}")
    print(f"  {'engine':34s} {'seconds':>10s} {'vs ours':>10s}")
    rows = [
        ("onnxviz (first call, compiles)", first),
        ("onnxviz (compiled, per run)", t_ours),
        ("onnxruntime", t_ort),
        ("onnxruntime (1 thread)", t_ort1),
        (
            f"onnx.reference (x{args.rows // args.reference_rows} from {args.reference_rows} rows)",
            t_ref,
        ),
    ]
    for name, seconds in rows:
        print(f"  {name:34s} {seconds:10.3f} {seconds / t_ours:9.2f}x")
    print(
        f"  ratios: ours/onnxruntime = {t_ours / t_ort:.2f} (1 thread: {t_ours / t_ort1:.2f}), "
        f"onnx.reference/ours = {t_ref / t_ours:.1f}"
    )
    print(
        f"  CPU seconds: ours {cpu_ours:.3f}, onnxruntime {cpu_ort:.3f} "
        f"(ratio {cpu_ours / cpu_ort:.2f})"
    )


if __name__ == "__main__":
    main()
