"""Where the interpreter's time goes: per-op-type share of one run, for each benchmark model.

Runs each model (bench_models.py) once to warm up (plan compile, constant folding),
then ``--repeat`` times, and prints for the fastest of those runs, per op type: node count, total milliseconds per run,
share of the run, and the slowest single node with its output shape.  The engine's own
overhead (run time minus the kernels' time) is printed as a separate row.

    python benchmarks/profile_runtime.py [--threads 1] [--repeat 3] [--models resnet50,bert]
"""

from __future__ import annotations

import argparse
import os
import sys


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--models", default="resnet50,inception_v2,bert,unet,lstm,add_chain")
    p.add_argument("--top", type=int, default=12, help="op types shown per model")
    return p.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import MODELS  # noqa: E402
from torch_models import TORCH_MODELS  # noqa: E402

MODELS = {**MODELS, **TORCH_MODELS}


def op_profile(model: Any, feeds: dict[str, np.ndarray], repeat: int) -> tuple[float, list[Any]]:
    """(seconds of the fastest run, rows) with rows (op_type, nodes, seconds per run, slowest node,
    its seconds per run, its output description), slowest op type first."""
    from onnxviz.runtime.events import NodeFinished
    from onnxviz.runtime.session import Session
    from onnxviz.runtime.values import describe

    sess = Session(model)
    sess.run(feeds)
    # The fastest of ``repeat`` runs, with its node times (node_times covers one run):
    # shares then add up within one run, and the fastest run is the least disturbed by
    # other processes.
    wall = float("inf")
    times: dict[str, tuple[int, float]] = {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(feeds)
        t = time.perf_counter() - t0
        if t < wall:
            wall, times = t, sess.node_times
    # Output shapes from one extra watched run.
    shapes: dict[str, str] = {}
    for ev in sess.steps(feeds):
        if type(ev) is NodeFinished and ev.depth == 0:
            shapes[ev.node.address] = ", ".join(describe(v) for v in ev.outputs.values())
    op_of = {pn.address: pn.op_type for pn in sess.plan.nodes}
    per_op: dict[str, list[Any]] = defaultdict(lambda: [0, 0.0, "", 0.0])
    for address, (_calls, seconds) in times.items():
        op = op_of.get(address, "(nested)")
        row = per_op[op]
        row[0] += 1
        row[1] += seconds
        if seconds > row[3]:
            row[2], row[3] = address, seconds
    rows = [
        (op, n, s, worst, ws, shapes.get(worst, ""))
        for op, (n, s, worst, ws) in sorted(per_op.items(), key=lambda kv: -kv[1][1])
    ]
    return wall, rows


def print_profile(title: str, wall: float, rows: list[Any], top: int) -> None:
    kernels = sum(r[2] for r in rows)
    print(f"{title}: fastest run {wall * 1000:.1f} ms (its kernels {kernels * 1000:.1f} ms)")
    print(f"  {'op':<22}{'nodes':>6}{'ms':>10}{'share':>8}   slowest node (ms, output)")
    for op, n, s, worst, ws, shape in rows[:top]:
        print(
            f"  {op:<22}{n:>6}{s * 1000:>10.1f}{s / wall:>8.1%}   "
            f"{worst.split('::')[-1]} ({ws * 1000:.1f}, {shape})"
        )
    rest = rows[top:]
    if rest:
        rs = sum(r[2] for r in rest)
        print(
            f"  {'(other ops)':<22}{sum(r[1] for r in rest):>6}{rs * 1000:>10.1f}{rs / wall:>8.1%}"
        )
    engine = max(0.0, wall - kernels)
    print(f"  {'(engine overhead)':<22}{'':>6}{engine * 1000:>10.1f}{engine / wall:>8.1%}")
    sys.stdout.flush()


def main(args: argparse.Namespace) -> int:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=args.threads):
        for key in args.models.split(","):
            title, build = MODELS[key]
            wall, rows = op_profile(*build(), args.repeat)
            print_profile(f"{title}, threads {args.threads}", wall, rows, args.top)
    return 0


if __name__ == "__main__":
    assert ARGS is not None
    sys.exit(main(ARGS))
