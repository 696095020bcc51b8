"""Guards against gross slowdowns (CPU seconds, several times the acceptance targets so a
busy test machine does not make them flaky; the real numbers come from
benchmarks/bench_layout.py)."""

from __future__ import annotations

import time

from onnxviz.layout import compute

from .conftest import flat_request, graph


def cpu(fn):  # type: ignore[no-untyped-def]
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def test_flat_10k_transformer_within_budget() -> None:
    req = flat_request(graph("transformer", 10_000))
    seconds, res = cpu(lambda: compute(req))
    assert len(res.node_ids) >= 10_000
    assert seconds < 2.5  # target 0.5 s
