"""Layout benchmark: our layered layout against Graphviz dot on synthetic ONNX-shaped
graphs (benchmarks/layout_graphs.py).

    python benchmarks/bench_layout.py                 # 1k, 10k, 50k, 100k; dot where it fits
    python benchmarks/bench_layout.py --sizes 1000 --dot-timeout 120

Prints, per graph: time per stage, total time, and the quality metrics of
onnxviz.layout.metrics for us and for dot (same geometry-based code for both), with ratios.
dot (Debian package ``graphviz``) runs with the same node sizes; it gets no port
information (plain dot has none for boxes), so its input-order figures are informative only.
The grouped path the app runs (present: each open block laid out flat) is measured by
benchmarks/bench_open_app.py.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from layout_graphs import GENERATORS, SyntheticGraph
from onnxviz.layout import (
    LayoutEdge,
    LayoutNode,
    LayoutRequest,
    compute,
    metrics,
)


def flat_request(g: SyntheticGraph) -> LayoutRequest:
    nodes = [LayoutNode(name, *g.node_size(i)) for i, name in enumerate(g.names)]
    edges = [LayoutEdge(g.names[a], g.names[b], sp, tp) for a, b, sp, tp in g.edges]
    return LayoutRequest(nodes, edges)


def quality(geo: metrics.Geometry) -> dict[str, float]:
    bad, pairs = metrics.input_order_inversions(geo)
    bends, long_edges = metrics.long_edge_bends(geo)
    return {
        "crossings": metrics.crossings(geo),
        "inversions%": 100.0 * bad / max(pairs, 1),
        "bends": bends,
        "long_edges": long_edges,
        "width": float(
            (geo.center[:, 0] + geo.size[:, 0] / 2).max()
            - (geo.center[:, 0] - geo.size[:, 0] / 2).min()
        ),
    }


def dot_layout(g: SyntheticGraph, timeout: float) -> tuple[float, metrics.Geometry] | None:
    """Run dot -Tplain; None when it does not finish within ``timeout`` seconds."""
    lines = ["digraph G {", "node [shape=box, fixedsize=true];", "edge [arrowhead=none];"]
    for i in range(len(g)):
        w, h = g.node_size(i)
        lines.append(f'n{i} [width={w / 72:.4f}, height={h / 72:.4f}, label=""];')
    lines.extend(f"n{a} -> n{b};" for a, b, _sp, _tp in g.edges)
    lines.append("}")
    start = time.perf_counter()
    try:
        out = subprocess.run(
            ["dot", "-Tplain"],
            input="\n".join(lines),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout
    except subprocess.TimeoutExpired:
        return None
    elapsed = time.perf_counter() - start
    center = np.zeros((len(g), 2))
    size = np.zeros((len(g), 2))
    height = 0.0
    pending: dict[tuple[int, int], list[np.ndarray]] = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[0] == "graph":
            height = float(parts[3]) * 72
        elif parts[0] == "node":
            i = int(parts[1][1:])
            center[i] = (float(parts[2]) * 72, height - float(parts[3]) * 72)
            size[i] = (float(parts[4]) * 72, float(parts[5]) * 72)
        elif parts[0] == "edge":
            a, b, k = int(parts[1][1:]), int(parts[2][1:]), int(parts[3])
            pts = np.asarray(parts[4 : 4 + 2 * k], dtype=float).reshape(-1, 2) * 72
            pts[:, 1] = height - pts[:, 1]
            pending.setdefault((a, b), []).append(pts)
    level, level_y = metrics.levels_from_y(center[:, 1])
    routes = []
    for a, b, _sp, _tp in g.edges:
        pts = pending[(a, b)].pop(0)
        if pts[0][1] > pts[-1][1]:
            pts = pts[::-1]
        routes.append(pts)
    src = np.asarray([e[0] for e in g.edges], dtype=np.int64)
    geo = metrics.Geometry(
        center,
        size,
        level,
        level_y,
        src,
        np.asarray([e[1] for e in g.edges], dtype=np.int64),
        level[src],
        np.asarray([e[3] for e in g.edges], dtype=np.int64),
        routes,
    )
    return elapsed, geo


def fmt_row(name: str, values: dict[str, float]) -> str:
    return f"  {name:<6}" + "".join(f" {k}={v:.4g}" for k, v in values.items())


def bench_flat(kind: str, size: int, dot_timeout: float, quality_limit: int) -> None:
    g = GENERATORS[kind](size)
    req = flat_request(g)
    compute(req)  # warm-up (imports, caches)
    start, cpu = time.perf_counter(), time.process_time()
    res = compute(req)
    ours, ours_cpu = time.perf_counter() - start, time.process_time() - cpu
    stages = " ".join(f"{k}={v * 1000:.0f}ms" for k, v in res.timings.items())
    print(
        f"{kind} n={len(g)} e={len(g.edges)}: ours {ours:.3f}s wall, {ours_cpu:.3f}s cpu [{stages}]"
    )
    print(
        f"  stats: dummies={res.stats['dummies']} proxies={res.stats['proxies']} "
        f"ranks={res.stats['ranks']} layer-crossings={res.stats['crossings']}"
    )
    if len(g) > quality_limit:
        return
    q_ours = quality(metrics.geometry_of(res))
    print(fmt_row("ours", q_ours))
    if dot_timeout <= 0 or shutil.which("dot") is None:
        print("  dot: skipped")
        return
    peer = dot_layout(g, dot_timeout)
    if peer is None:
        print(f"  dot: did not finish in {dot_timeout:.0f}s (ours {ours:.3f}s)")
        return
    dot_time, geo = peer
    q_dot = quality(geo)
    print(fmt_row("dot", q_dot) + f" time={dot_time:.2f}s")
    ratios = {k: q_ours[k] / q_dot[k] for k in q_ours if q_dot[k]}
    print(
        f"  ratio ours/dot: time={ours / dot_time:.4f} "
        + " ".join(f"{k}={v:.3f}" for k, v in ratios.items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=int, nargs="*", default=[300, 1000, 10_000, 50_000, 100_000]
    )
    parser.add_argument("--kinds", nargs="*", default=list(GENERATORS))
    parser.add_argument("--dot-timeout", type=float, default=60.0)
    parser.add_argument(
        "--quality-limit",
        type=int,
        default=20_000,
        help="compute quality metrics only up to this many nodes",
    )
    args = parser.parse_args()
    for size in args.sizes:
        for kind in args.kinds:
            bench_flat(kind, size, args.dot_timeout if size <= 10_000 else 0, args.quality_limit)


if __name__ == "__main__":
    main()
