"""Quality bounds: crossings against Graphviz dot, input order, straight main paths.

Reference crossing counts for dot were measured with Graphviz dot 2.43.0 (Debian package
``graphviz``) on 2026-11-22 by ``benchmarks/bench_layout.py`` (function ``dot_layout``:
same node sizes, ``dot -Tplain``) and counted with the same geometric
``onnxviz.layout.metrics.crossings`` used for our drawings below.  Graphs come from
``benchmarks/layout_graphs.py`` with the target sizes given (actual node counts in
comments).  dot needs 0.6-12 s for these; 705 nodes took 203 s, 1000 did not finish in
300 s, which is why the references stop at this size.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxviz.layout import compute, metrics

from .conftest import flat_request, graph

DOT_CROSSINGS = {
    ("transformer", 200): 57,  # 280 nodes
    ("transformer", 400): 139,  # 450 nodes
    ("transformer_mask", 200): 55,  # 274 nodes
    ("transformer_mask", 400): 153,  # 444 nodes
    ("resnet", 200): 0,  # 203 nodes
    ("resnet", 400): 0,  # 406 nodes
}


@pytest.mark.parametrize(("kind", "size"), sorted(DOT_CROSSINGS))
def test_crossings_no_more_than_dot(kind: str, size: int) -> None:
    res = compute(flat_request(graph(kind, size)))
    assert metrics.crossings(metrics.geometry_of(res)) <= DOT_CROSSINGS[(kind, size)]


@pytest.mark.parametrize("kind", ["transformer", "transformer_mask"])
def test_input_order_mostly_kept_on_transformers(kind: str) -> None:
    geo = metrics.geometry_of(compute(flat_request(graph(kind, 1500))))
    bad, pairs = metrics.input_order_inversions(geo)
    assert pairs > 500
    assert bad / pairs < 0.10


def test_resnet_keeps_input_order_main_path_straight_and_left(resnet_1k) -> None:  # type: ignore[no-untyped-def]
    g = resnet_1k
    res = compute(flat_request(g))
    geo = metrics.geometry_of(res)
    assert metrics.input_order_inversions(geo)[0] == 0
    assert metrics.crossings(geo) == 0
    centre = res.node_xy[:, 0] + res.node_size[:, 0] / 2
    main = [i for i, name in enumerate(g.names) if "downsample" not in name]
    assert np.ptp(centre[main]) == 0  # the whole main path is one vertical line
    skips = [r for r in res.edges if r.target.endswith("/Add") and r.target_port == 1]
    assert len(skips) > 50
    for route in skips:  # skip connections run right of the main path
        inner = np.asarray(route.points[3:-3:3]).reshape(-1, 2)
        assert (inner[:, 0] > centre[main[0]]).all()


def test_long_edges_stay_straight(transformer_1k) -> None:  # type: ignore[no-untyped-def]
    geo = metrics.geometry_of(compute(flat_request(transformer_1k)))
    bends, long_edges = metrics.long_edge_bends(geo)
    assert long_edges > 50
    assert bends <= 0.1 * long_edges


def test_width_does_not_grow_with_depth() -> None:
    # Repeated layers must not each shift sideways: a 4x deeper model is as wide.
    small = compute(flat_request(graph("transformer", 1000)))
    large = compute(flat_request(graph("transformer", 4000)))
    assert large.height > 3 * small.height
    assert large.width <= 1.1 * small.width
