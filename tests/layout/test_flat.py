"""Flat layouts: request handling, invariants of the drawing, determinism, cancel."""

from __future__ import annotations

import numpy as np
import pytest

from onnxviz.layout import (
    EdgeTable,
    LayoutCancelled,
    LayoutEdge,
    LayoutError,
    LayoutNode,
    LayoutRequest,
    NodeTable,
    compute,
    metrics,
)

from .conftest import flat_request, graph, on_curve, route_arrays


def chain(n: int) -> LayoutRequest:
    nodes = [LayoutNode(f"n{i}", 60, 30) for i in range(n)]
    edges = [LayoutEdge(f"n{i}", f"n{i + 1}") for i in range(n - 1)]
    return LayoutRequest(nodes, edges)


def test_empty_and_single_node_requests() -> None:
    empty = compute(LayoutRequest([]))
    assert empty.node_ids == [] and empty.edges == []
    one = compute(LayoutRequest([LayoutNode("a", 50, 20)]))
    assert one.nodes["a"].x == 0 and one.nodes["a"].y == 0
    assert (one.width, one.height) == (50, 20)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (LayoutRequest([LayoutNode("a", 1, 1)], [LayoutEdge("a", "zz")]), "unknown node"),
        (LayoutRequest([LayoutNode("a", 1, 1), LayoutNode("a", 2, 2)]), "used twice"),
        (LayoutRequest([LayoutNode("a", -1, 1)]), "not negative"),
        (LayoutRequest([LayoutNode("a", float("nan"), 1)]), "finite"),
        (LayoutRequest([LayoutNode("a", 1, 1)], direction="BT"), "direction"),  # type: ignore[arg-type]
        (LayoutRequest([LayoutNode("a", 1, 1)], [LayoutEdge("a", "a", -1, 0)]), "port"),
    ],
)
def test_bad_requests_raise_layout_error(request_: LayoutRequest, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        compute(request_)


def test_chain_is_a_straight_column_running_down() -> None:
    res = compute(chain(6))
    xs = [res.nodes[f"n{i}"].x for i in range(6)]
    ys = [res.nodes[f"n{i}"].y for i in range(6)]
    assert len(set(xs)) == 1
    assert all(b > a for a, b in zip(ys, ys[1:]))
    for route in res.edges:  # straight vertical connections between port centres
        assert route.points[0][0] == route.points[-1][0]


@pytest.mark.parametrize("kind", ["transformer", "resnet", "transformer_mask"])
def test_invariants_on_synthetic_models(kind: str) -> None:
    g = graph(kind, 600)
    req = flat_request(g)
    res = compute(req)
    # Every node placed once, finite, no two boxes (nodes and proxies) overlap.
    assert res.node_ids == g.names
    assert np.isfinite(res.node_xy).all()
    proxy_xy = np.asarray([(p.x, p.y) for p in res.proxy_boxes]).reshape(-1, 2)
    proxy_size = np.asarray([(p.width, p.height) for p in res.proxy_boxes]).reshape(-1, 2)
    boxes_xy = np.concatenate([res.node_xy, proxy_xy])
    boxes_size = np.concatenate([res.node_size, proxy_size])
    assert metrics.overlaps(boxes_xy, boxes_size) == 0
    # Edges run down-rank and their routes go monotonically down, port to port.
    rank = dict(zip(res.node_ids, res.ranks.tolist()))
    for i, route in enumerate(res.edges):
        assert rank[route.source] < rank[route.target]
        pts = route_arrays(res, i)
        assert (len(pts) - 1) % 3 == 0
        assert (np.diff(on_curve(pts)[:, 1]) >= -1e-9).all()
        tgt = res.nodes[route.target]
        assert pts[-1][1] == pytest.approx(tgt.y)
        assert tgt.x <= pts[-1][0] <= tgt.x + tgt.width
        if route.kind == "proxy":
            proxy = res.proxies[route.proxy]  # type: ignore[index]
            assert proxy.source == route.source
            assert pts[0][1] == pytest.approx(proxy.y + proxy.height)
        else:
            src = res.nodes[route.source]
            assert pts[0][1] == pytest.approx(src.y + src.height)
            assert src.x <= pts[0][0] <= src.x + src.width
    # Everything fits in the reported drawing size.
    assert (res.node_xy + res.node_size).max(axis=0)[0] <= res.width + 1e-6
    assert (res.node_xy + res.node_size).max(axis=0)[1] <= res.height + 1e-6


def test_same_request_gives_the_same_result(transformer_1k) -> None:  # type: ignore[no-untyped-def]
    req = flat_request(transformer_1k)
    a, b = compute(req), compute(req)
    assert np.array_equal(a.node_xy, b.node_xy)
    assert np.array_equal(a.route_points, b.route_points)
    assert a.route_meta == b.route_meta
    assert [p.id for p in a.proxy_boxes] == [p.id for p in b.proxy_boxes]


def test_columnar_request_gives_the_same_layout(transformer_1k) -> None:  # type: ignore[no-untyped-def]
    g = transformer_1k
    sizes = np.asarray([g.node_size(i) for i in range(len(g))])
    e = np.asarray(g.edges)
    table = LayoutRequest(
        NodeTable(g.names, sizes[:, 0], sizes[:, 1]),
        EdgeTable(g.names, e[:, 0], e[:, 1], e[:, 2], e[:, 3]),
    )
    a, b = compute(flat_request(g)), compute(table)
    assert np.array_equal(a.node_xy, b.node_xy)
    assert a.route_meta == b.route_meta
    assert table.nodes[3] == LayoutNode(g.names[3], *g.node_size(3))


def test_left_to_right_swaps_axes() -> None:
    res = compute(LayoutRequest(chain(4).nodes, chain(4).edges, direction="LR"))
    xs = [res.nodes[f"n{i}"].x for i in range(4)]
    assert all(b > a for a, b in zip(xs, xs[1:]))
    assert len({res.nodes[f"n{i}"].y for i in range(4)}) == 1
    assert res.nodes["n0"].width == 60 and res.nodes["n0"].height == 30
    first = res.edges[0]
    assert first.points[0][0] == pytest.approx(res.nodes["n0"].x + 60)  # leaves the right side


def test_cycles_are_broken_and_drawn_reversed() -> None:
    nodes = [LayoutNode(x, 40, 20) for x in "abcd"]
    edges = [
        LayoutEdge("a", "b"),
        LayoutEdge("b", "c"),
        LayoutEdge("c", "a"),
        LayoutEdge("c", "d"),
        LayoutEdge("d", "d"),
    ]
    res = compute(LayoutRequest(nodes, edges))
    kinds = [e.kind for e in res.edges]
    assert kinds.count("reversed") == 1
    assert kinds[4] == "self"
    assert res.stats["reversed_edges"] == 1
    rank = dict(zip(res.node_ids, res.ranks.tolist()))
    for route in res.edges:
        if route.kind == "normal":
            assert rank[route.source] < rank[route.target]
        elif route.kind == "reversed":
            assert rank[route.source] > rank[route.target]
            # Still drawn from the source to the target.
            assert route.points[0][1] == pytest.approx(res.nodes[route.source].y)


def test_cancel_aborts() -> None:
    calls = []

    def cancel() -> bool:
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(LayoutCancelled):
        compute(flat_request(graph("transformer", 400)), cancel=cancel)


def test_constants_and_shape_chains_sit_next_to_their_consumers(transformer_1k) -> None:  # type: ignore[no-untyped-def]
    g = transformer_1k
    res = compute(flat_request(g))
    rank = res.ranks
    consumers: dict[int, list[int]] = {}
    for a, b, _sp, _tp in g.edges:
        consumers.setdefault(a, []).append(b)
    for i, op in enumerate(g.ops):
        if op in ("Constant", "Shape"):
            assert rank[i] == min(rank[j] for j in consumers[i]) - 1, g.names[i]
    # No pile-up on the first rank: only the graph inputs that feed rank 1 are there.
    assert (rank == 0).sum() <= 3


def test_high_fanout_sources_use_proxies_not_dummy_chains() -> None:
    g = graph("transformer_mask", 3000)
    res = compute(flat_request(g))
    mask_routes = [r for r in res.edges if r.source == "attention_mask"]
    assert len(mask_routes) > 20
    assert sum(r.kind == "proxy" for r in mask_routes) >= len(mask_routes) - 2
    # Dummies stay proportional to the graph, not to layers x depth.
    assert res.stats["dummies"] < 1.5 * len(g)
