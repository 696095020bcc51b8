"""Hierarchical layout: collapsed groups as boxes, lifted edges, sections, the cache,
and incremental expand/collapse."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from onnxviz.layout import (
    EdgeTable,
    LayoutEdge,
    LayoutError,
    LayoutGroup,
    LayoutNode,
    LayoutRequest,
    LayoutResult,
    LayoutSession,
    NodeTable,
    compute,
    metrics,
)

from .conftest import graph, scoped_request


def terminal_boxes(res: LayoutResult) -> tuple[np.ndarray, np.ndarray]:
    """Nodes, collapsed groups and proxies: the boxes that must not overlap."""
    xy = [res.node_xy.reshape(-1, 2)]
    size = [res.node_size.reshape(-1, 2)]
    closed = [g for g in res.group_boxes if not g.expanded]
    xy.append(np.asarray([(g.x, g.y) for g in closed]).reshape(-1, 2))
    size.append(np.asarray([(g.width, g.height) for g in closed]).reshape(-1, 2))
    xy.append(np.asarray([(p.x, p.y) for p in res.proxy_boxes]).reshape(-1, 2))
    size.append(np.asarray([(p.width, p.height) for p in res.proxy_boxes]).reshape(-1, 2))
    return np.concatenate(xy), np.concatenate(size)


def assert_nested(res: LayoutResult, session: LayoutSession) -> None:
    """Every shown node and group lies inside the frame of its (open) parent group."""
    groups = res.groups
    for nid, box in res.nodes.items():
        parent = session.parent_of(nid)
        if parent is not None:
            frame = groups[parent]
            assert frame.expanded
            assert frame.x <= box.x and box.x + box.width <= frame.x + frame.width + 1e-6
            assert frame.y <= box.y and box.y + box.height <= frame.y + frame.height + 1e-6
    for g in res.group_boxes:
        if g.parent is not None:
            frame = groups[g.parent]
            assert frame.x <= g.x and g.x + g.width <= frame.x + frame.width + 1e-6
            assert frame.y <= g.y and g.y + g.height <= frame.y + frame.height + 1e-6


@pytest.fixture(scope="module")
def transformer_request() -> LayoutRequest:
    return scoped_request(graph("transformer", 1200))


def test_first_view_shows_top_level_groups_as_boxes(transformer_request) -> None:  # type: ignore[no-untyped-def]
    session = LayoutSession(transformer_request, expanded=())
    res = session.result()
    top = set(session.children(None))
    assert {g.id for g in res.group_boxes} | set(res.node_ids) == top
    for g in res.group_boxes:
        assert not g.expanded and (g.width, g.height) == (160.0, 40.0)
    # An edge into the collapsed /model stands for many request edges.
    into_model = [r for r in res.edges if r.target == "/model"]
    assert into_model and all(r.kind == "lifted" for r in into_model)
    assert sum(r.count for r in res.edges) < len(transformer_request.edges)
    box = res.groups["/model"]
    for r in into_model:
        assert r.points[-1][1] == pytest.approx(box.y)  # ends on the top of the box


def test_expanded_groups_contain_their_children_and_nothing_overlaps(transformer_request) -> None:  # type: ignore[no-untyped-def]
    session = LayoutSession(transformer_request, expanded=())
    for gid in ("/model", "/model/layers.1", "/model/layers.1/self_attn", "/model/layers.2"):
        session.expand(gid)
    res = session.result()
    assert_nested(res, session)
    assert metrics.overlaps(*terminal_boxes(res)) == 0
    assert "/model/layers.1/self_attn/MatMul" in res.nodes
    assert "/model/layers.0/self_attn/MatMul" not in res.nodes  # layers.0 stays collapsed


def test_everything_expanded_matches_compute_and_keeps_invariants(transformer_request) -> None:  # type: ignore[no-untyped-def]
    session = LayoutSession(transformer_request)
    res = session.result()
    assert sorted(res.node_ids) == sorted(n.id for n in transformer_request.nodes)
    assert_nested(res, session)
    assert metrics.overlaps(*terminal_boxes(res)) == 0
    again = compute(transformer_request)
    assert np.array_equal(again.node_xy, res.node_xy)
    assert again.route_meta == res.route_meta
    # Routes start at their source (port or proxy) and end at their target's top.
    for route in res.edges:
        end = res.nodes[route.target]
        assert route.points[-1][1] == pytest.approx(end.y)
        assert end.x <= route.points[-1][0] <= end.x + end.width
        if route.kind != "proxy":
            start = res.nodes[route.source]
            assert route.points[0][1] == pytest.approx(start.y + start.height)


def test_identical_layers_are_laid_out_once(transformer_request) -> None:  # type: ignore[no-untyped-def]
    session = LayoutSession(transformer_request)
    session.result()
    n_groups = len(session.group_ids())
    assert session.cache_hits > n_groups // 2
    assert session.layouts_computed < n_groups // 2


def test_expand_relays_out_only_the_group_and_its_ancestors(transformer_request) -> None:  # type: ignore[no-untyped-def]
    session = LayoutSession(transformer_request, expanded=("/model", "/model/layers.3"))
    session.result()
    before = session.layouts_computed + session.cache_hits
    session.expand("/model/layers.3/self_attn")
    session.result()
    # The group itself, /model/layers.3, /model and the top level: four layouts.
    assert session.layouts_computed + session.cache_hits - before == 4
    before = session.layouts_computed + session.cache_hits
    session.collapse("/model/layers.3/self_attn")
    session.result()
    assert session.layouts_computed + session.cache_hits - before == 3


def test_collapse_restores_the_previous_view(transformer_request) -> None:  # type: ignore[no-untyped-def]
    session = LayoutSession(transformer_request, expanded=("/model",))
    first = session.result()
    session.expand("/model/layers.2")
    assert session.result().node_ids != first.node_ids
    session.collapse("/model/layers.2")
    back = session.result()
    assert back.node_ids == first.node_ids
    assert np.array_equal(back.node_xy, first.node_xy)
    assert back.route_meta == first.route_meta
    assert session.expanded == frozenset({"/model"})


def test_overfull_groups_are_split_into_sections() -> None:
    n = 500
    nodes = [LayoutNode(f"n{i}", 40, 20, parent="big") for i in range(n)]
    edges = [LayoutEdge(f"n{i}", f"n{i + 1}") for i in range(n - 1)]
    req = LayoutRequest(nodes, edges, [LayoutGroup("big")], max_group_children=20)
    session = LayoutSession(req, expanded=())
    kids = session.children("big")
    assert 1 < len(kids) <= 20
    assert all(k.startswith("big#") for k in kids)
    for k in kids:
        assert len(session.children(k)) <= 20
    session.expand_all()
    res = session.result()
    assert sorted(res.node_ids) == sorted(f"n{i}" for i in range(n))
    assert_nested(res, session)
    # Sections follow request order: the chain runs through them in sequence.
    first_section = session.parent_of("n0")
    assert first_section is not None and session.children(first_section)[0] == "n0"


def test_left_to_right_hierarchy() -> None:
    req = scoped_request(graph("resnet", 300), direction="LR")
    session = LayoutSession(req)
    res = session.result()
    assert_nested(res, session)
    for route in res.edges[:50]:
        assert route.points[-1][0] >= route.points[0][0] - 1e-6


def test_bad_hierarchies_raise() -> None:
    nodes = [LayoutNode("a", 10, 10, parent="g1")]
    with pytest.raises(LayoutError, match="cycle"):
        LayoutSession(LayoutRequest(nodes, [], [LayoutGroup("g1", "g2"), LayoutGroup("g2", "g1")]))
    with pytest.raises(LayoutError, match="unknown parent"):
        LayoutSession(LayoutRequest(nodes, [], [LayoutGroup("g1", "zz")]))
    with pytest.raises(LayoutError, match="both a node and a group"):
        LayoutSession(LayoutRequest(nodes, [], [LayoutGroup("g1"), LayoutGroup("a")]))
    session = LayoutSession(LayoutRequest(nodes, [], [LayoutGroup("g1")]))
    with pytest.raises(LayoutError, match="unknown group"):
        session.expand("nope")


def test_proxies_in_groups_name_their_real_source() -> None:
    req = scoped_request(graph("transformer_mask", 3000))
    session = LayoutSession(req, expanded=())
    session.expand_all()
    res = session.result()
    proxied = [r for r in res.edges if r.kind == "proxy"]
    assert proxied
    for route in proxied:
        box = res.proxies[route.proxy]  # type: ignore[index]
        # The proxy stands for the source or, when the edge is lifted, the group that
        # holds the source at the level where the edge is laid out.
        holders = [route.source, *session.ancestors_of(route.source)]
        assert box.source in holders
        assert route.points[0][1] == pytest.approx(box.y + box.height)


@pytest.mark.parametrize("through", [True, False])
def test_edges_into_open_groups_end_at_their_nodes(through: bool) -> None:
    req = scoped_request(graph("transformer", 600), route_through_groups=through)
    session = LayoutSession(req, expanded=("/model", "/model/layers.1"))
    res = session.result()
    inner = "/model/layers.1/input_layernorm/Pow"
    assert inner not in res.nodes  # input_layernorm is still collapsed
    session.expand("/model/layers.1/input_layernorm")
    res = session.result()
    box = res.nodes[inner]
    group = "/model/layers.1/input_layernorm"
    into = [r for r in res.edges if r.target == inner and not r.source.startswith(group)]
    assert into
    for route in into:
        end = route.points[-1]
        assert end[1] == pytest.approx(box.y)
        assert box.x <= end[0] <= box.x + box.width
        # Entering through the group's top: the route passes the frame's top edge.
        frame = res.groups["/model/layers.1/input_layernorm"]
        ys = [p[1] for p in route.points[::3]]
        assert min(ys) < frame.y < max(ys)
    if through:  # routed inside the group: more than one curve after the border
        frame = res.groups["/model/layers.1/input_layernorm"]
        inside = [p for p in into[0].points[::3] if p[1] > frame.y]
        assert len(inside) >= 2


def table_request(ids: list[str], parent_index: list[int], group_ids: list[str]) -> LayoutRequest:
    """A columnar request: a chain through ``ids``, groups without parents."""
    n = len(ids)
    nodes = NodeTable(ids, np.full(n, 40.0), np.full(n, 20.0), np.asarray(parent_index), group_ids)
    chain = np.arange(n - 1)
    return LayoutRequest(
        nodes, EdgeTable(ids, chain, chain + 1), [LayoutGroup(g) for g in group_ids]
    )


def test_bad_columnar_requests_raise() -> None:
    with pytest.raises(LayoutError, match="'b' is used twice"):
        LayoutSession(table_request(["a", "b", "c", "b"], [0, 0, -1, -1], ["g"]))
    with pytest.raises(LayoutError, match="'c' names both a node and a group"):
        LayoutSession(table_request(["a", "b", "c"], [0, 0, -1], ["g", "c"]))
    ok = LayoutSession(table_request(["a", "b", "c"], [0, 0, -1], ["g"]), expanded=())
    assert ok.children(None) == ["g", "c"] and ok.children("g") == ["a", "b"]


def test_session_leaves_the_callers_columns_alone() -> None:
    g = graph("transformer", 600)
    req = scoped_request(g)
    pos = {grp.id: i for i, grp in enumerate(req.groups)}
    e = np.asarray(g.edges)
    nodes = NodeTable(
        [nd.id for nd in req.nodes],
        np.asarray([nd.width for nd in req.nodes]),
        np.asarray([nd.height for nd in req.nodes]),
        np.asarray([pos[nd.parent] if nd.parent else -1 for nd in req.nodes]),
        list(pos),
    )
    edges = EdgeTable(nodes.ids, e[:, 0], e[:, 1], e[:, 2], e[:, 3])
    before = [a.copy() for a in (nodes.width, nodes.height, edges.source, edges.target)]
    table_req = LayoutRequest(nodes, edges, req.groups, direction="LR")
    session = LayoutSession(table_req, expanded=())
    first = session.result()
    session.expand_all()
    every = session.result()
    for a, b in zip(before, (nodes.width, nodes.height, edges.source, edges.target)):
        assert np.array_equal(a, b)
    # The same views as from the object request.
    objects = LayoutSession(dataclasses.replace(req, direction="LR"), expanded=())
    assert objects.result().route_meta == first.route_meta
    objects.expand_all()
    assert np.array_equal(objects.result().node_xy, every.node_xy)


def test_section_names_avoid_existing_group_ids() -> None:
    nodes = [LayoutNode(f"n{i}", 40, 20, parent="big") for i in range(9)]
    nodes.append(LayoutNode("x", 40, 20, parent="big#0"))
    edges = [LayoutEdge(f"n{i}", f"n{i + 1}") for i in range(8)]
    groups = [LayoutGroup("big"), LayoutGroup("big#0")]
    session = LayoutSession(LayoutRequest(nodes, edges, groups, max_group_children=4), expanded=())
    sections = session.children("big")
    assert sections == ["big#0#", "big#1", "big#2"]
    assert session.children("big#0#") == ["n0", "n1", "n2", "n3"]
    assert session.children("big#0") == ["x"]


@pytest.mark.parametrize("through", [True, False])
def test_expanding_step_by_step_matches_a_fresh_session(through: bool) -> None:
    """The first view prepares only the top level; what is built later on demand (the
    children of every group, edges lifted below the top level) gives the same views as
    a session that starts with the groups open."""
    req = scoped_request(
        graph("transformer_mask", 1500), route_through_groups=through, max_group_children=8
    )
    session = LayoutSession(req, expanded=())
    session.result()
    target = "/model/layers.1/self_attn"
    steps = [*session.ancestors(target)[::-1], target]
    assert any("#" in gid for gid in steps)  # through sections
    views = [(gid, steps[: k + 1]) for k, gid in enumerate(steps)] + [(None, None)]
    for gid, shown in views:
        if gid is None:
            session.expand_all()
        else:
            session.expand(gid)
        res = session.result()
        fresh = LayoutSession(req, expanded=shown).result()
        assert res.node_ids == fresh.node_ids
        assert np.array_equal(res.node_xy, fresh.node_xy)
        assert res.route_meta == fresh.route_meta
        assert np.array_equal(res.route_points, fresh.route_points)
        assert res.group_boxes == fresh.group_boxes
    assert "/model/layers.1/self_attn/Softmax" in res.nodes


def test_self_loops_and_inner_edges_stay_hidden_in_the_first_view() -> None:
    nodes = [
        LayoutNode("in", 40, 20),
        LayoutNode("a", 40, 20, parent="g"),
        LayoutNode("b", 40, 20, parent="g"),
        LayoutNode("out", 40, 20),
    ]
    edges = [
        LayoutEdge("in", "a"),
        LayoutEdge("a", "b"),
        LayoutEdge("b", "b"),
        LayoutEdge("b", "out"),
        LayoutEdge("out", "out"),
    ]
    session = LayoutSession(LayoutRequest(nodes, edges, [LayoutGroup("g")]), expanded=())
    first = session.result()
    assert [(r.source, r.target, r.kind) for r in first.edges] == [
        ("in", "g", "lifted"),
        ("g", "out", "lifted"),
    ]
    session.expand("g")
    opened = session.result()
    assert sorted((r.source, r.target) for r in opened.edges) == [
        ("a", "b"),
        ("b", "out"),
        ("in", "a"),
    ]
