"""Invariants on random graphs (hypothesis): acyclic or not, with multi-edges, self
loops and ports."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxviz.layout import (
    LayoutEdge,
    LayoutNode,
    LayoutRequest,
    compute,
    metrics,
)


@st.composite
def graphs(draw: st.DrawFn) -> LayoutRequest:
    n = draw(st.integers(1, 40))
    sizes = draw(
        st.lists(st.tuples(st.integers(0, 120), st.integers(0, 60)), min_size=n, max_size=n)
    )
    m = draw(st.integers(0, 3 * n))
    raw = draw(
        st.lists(
            st.tuples(
                st.integers(0, n - 1), st.integers(0, n - 1), st.integers(0, 3), st.integers(0, 3)
            ),
            min_size=m,
            max_size=m,
        )
    )
    nodes = [LayoutNode(f"n{i}", float(w), float(h)) for i, (w, h) in enumerate(sizes)]
    edges = [LayoutEdge(f"n{a}", f"n{b}", sp, tp) for a, b, sp, tp in raw]
    direction = draw(st.sampled_from(["TB", "LR"]))
    return LayoutRequest(nodes, edges, direction=direction)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(graphs())
def test_random_graphs_keep_invariants(req: LayoutRequest) -> None:
    res = compute(req)
    again = compute(req)
    assert np.array_equal(res.node_xy, again.node_xy)
    assert np.array_equal(res.route_points, again.route_points)
    assert sorted(res.node_ids) == sorted(n.id for n in req.nodes)
    assert np.isfinite(res.node_xy).all() and np.isfinite(res.route_points).all()
    xy = np.concatenate(
        [
            res.node_xy.reshape(-1, 2),
            np.asarray([(p.x, p.y) for p in res.proxy_boxes]).reshape(-1, 2),
        ]
    )
    size = np.concatenate(
        [
            res.node_size.reshape(-1, 2),
            np.asarray([(p.width, p.height) for p in res.proxy_boxes]).reshape(-1, 2),
        ]
    )
    assert metrics.overlaps(xy, size) == 0
    lr = req.direction == "LR"
    for route in res.edges:
        pts = np.asarray(route.points)
        assert (len(pts) - 1) % 3 == 0
        if route.kind in ("normal", "proxy"):
            along = pts[::3, 0 if lr else 1]
            assert (np.diff(along) >= -1e-6).all()  # runs down (TB) or right (LR)
