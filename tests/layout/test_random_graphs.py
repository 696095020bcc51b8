"""Invariants on random graphs (hypothesis): acyclic or not, with multi-edges, self
loops, ports and groups."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxviz.layout import (
    LayoutEdge,
    LayoutGroup,
    LayoutNode,
    LayoutRequest,
    LayoutSession,
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
    n_groups = draw(st.integers(0, 4))
    groups = [
        LayoutGroup(f"g{k}", f"g{k - 1}" if k and draw(st.booleans()) else None)
        for k in range(n_groups)
    ]
    parents = [
        f"g{draw(st.integers(0, n_groups - 1))}" if n_groups and draw(st.booleans()) else None
        for _ in range(n)
    ]
    nodes = [LayoutNode(f"n{i}", float(w), float(h), parents[i]) for i, (w, h) in enumerate(sizes)]
    edges = [LayoutEdge(f"n{a}", f"n{b}", sp, tp) for a, b, sp, tp in raw]
    direction = draw(st.sampled_from(["TB", "LR"]))
    return LayoutRequest(nodes, edges, groups, direction=direction)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(graphs())
def test_random_graphs_keep_invariants(req: LayoutRequest) -> None:
    res = compute(req)
    again = compute(req)
    assert np.array_equal(res.node_xy, again.node_xy)
    assert np.array_equal(res.route_points, again.route_points)
    assert sorted(res.node_ids) == sorted(n.id for n in req.nodes)  # all groups open
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


@settings(max_examples=25, deadline=None)
@given(graphs(), st.data())
def test_random_expand_collapse_matches_fresh_session(
    req: LayoutRequest, data: st.DataObject
) -> None:
    groups = [g.id for g in req.groups]
    session = LayoutSession(req, expanded=())
    session.result()
    for _ in range(4):
        if not groups:
            break
        gid = data.draw(st.sampled_from(groups))
        if data.draw(st.booleans()):
            session.expand(gid)
        else:
            session.collapse(gid)
        session.result()
    fresh = LayoutSession(req, expanded=session.expanded).result()
    res = session.result()
    assert res.node_ids == fresh.node_ids
    assert np.array_equal(res.node_xy, fresh.node_xy)
    assert res.route_meta == fresh.route_meta
