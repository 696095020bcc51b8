"""The flat pipeline on index arrays: cycles, ranks, long edges, order, x/y, routes.

Works in top-to-bottom orientation; the caller swaps axes for left-to-right.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from .api import CancelCheck, LayoutCancelled, LongEdgePolicy, Spacing
from .cycles import feedback_edges
from .long_edges import build_layer_graph, port_offsets
from .ordering import order_layers
from .positioning import brandes_koepf, rank_rows, relaxed_positions
from .ranking import rank_nodes
from .routing import reverse_routes, route_paths, self_loop

# Above this many layer nodes the vectorised coordinate fallback replaces Brandes–Köpf.
BK_LIMIT = 120_000

ROUTE_NORMAL = 0
ROUTE_PROXY = 1
ROUTE_REVERSED = 2
ROUTE_SELF = 3


@dataclasses.dataclass
class FlatLayout:
    """Centres ``x``/``y`` and ``rank`` of the n input nodes; proxies; one route per
    input edge (``route_kind`` one of ROUTE_*, ``route_proxy`` index or -1).  The drawing
    starts at (0, 0) and measures ``width`` x ``height``."""

    x: np.ndarray
    y: np.ndarray
    rank: np.ndarray
    proxy_source: np.ndarray
    proxy_port: np.ndarray
    proxy_rank: np.ndarray
    proxy_x: np.ndarray
    proxy_y: np.ndarray
    proxy_w: float
    proxy_h: float
    route_offsets: np.ndarray
    route_points: np.ndarray
    route_kind: np.ndarray
    route_proxy: np.ndarray
    width: float
    height: float
    stats: dict[str, int]
    timings: dict[str, float]


def _check(cancel: CancelCheck | None) -> None:
    if cancel is not None and cancel():
        raise LayoutCancelled()


def layout_arrays(
    width: np.ndarray,
    height: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    src_port: np.ndarray,
    dst_port: np.ndarray,
    n_in: np.ndarray,
    n_out: np.ndarray,
    spacing: Spacing,
    policy: LongEdgePolicy,
    sweeps: int,
    cancel: CancelCheck | None = None,
) -> FlatLayout:
    """Lay out index arrays (one flat graph)."""
    timings: dict[str, float] = {}
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        timings[name] = timings.get(name, 0.0) + now - t
        t = now
        _check(cancel)

    n = len(width)
    m = len(src)
    width = np.asarray(width, dtype=float)
    height = np.asarray(height, dtype=float)
    is_self = src == dst
    reversed_ = feedback_edges(n, src, dst)
    lay_src = np.where(reversed_, dst, src)
    lay_dst = np.where(reversed_, src, dst)
    proper = np.flatnonzero(~is_self)
    lap("cycles")
    rank = rank_nodes(n, lay_src[proper], lay_dst[proper], cancel)
    no_proxy = reversed_.copy()
    lap("ranking")
    out_count = np.maximum(n_out, 1)
    in_count = np.maximum(n_in, 1)
    s_off = np.where(reversed_, 0.0, port_offsets(src_port, out_count[src]))
    d_off = np.where(reversed_, 0.0, port_offsets(dst_port, in_count[dst]))
    e_src, e_dst = lay_src[proper], lay_dst[proper]
    lg = build_layer_graph(
        rank,
        width,
        height,
        e_src,
        e_dst,
        s_off[proper],
        d_off[proper],
        np.where(reversed_, 0, src_port)[proper],
        policy,
        0.0,
        no_proxy[proper],
    )
    lap("long_edges")
    pos, cross_before, cross_after = order_layers(lg, sweeps, cancel)
    lap("ordering")
    if lg.size <= BK_LIMIT:
        x = brandes_koepf(lg, pos, spacing.node, spacing.edge, cancel)
    else:
        x = relaxed_positions(lg, pos, spacing.node, spacing.edge)
    y, rank_top, rank_height = rank_rows(lg, spacing.rank)
    if lg.size:
        x = x - float((x - lg.width / 2).min())
    lap("positioning")
    start_off = np.where(lg.kind[lg.path_nodes[lg.path_offsets[:-1]]] == 0, s_off[proper], 0.0)
    offs, pts = route_paths(lg, x, y, rank_top, rank_height, start_off, d_off[proper])
    route_offsets, route_points = _merge_self_loops(
        m, proper, is_self, offs, pts, x, y, width, height, src
    )
    kind = np.full(m, ROUTE_NORMAL, dtype=np.int8)
    kind[reversed_] = ROUTE_REVERSED
    kind[is_self] = ROUTE_SELF
    route_proxy = np.full(m, -1, dtype=np.int64)
    first_nodes = lg.path_nodes[lg.path_offsets[:-1]]
    via_proxy = first_nodes >= n
    route_proxy[proper[via_proxy]] = first_nodes[via_proxy] - n
    kind[proper[via_proxy]] = ROUTE_PROXY
    reverse_routes(route_offsets, route_points, reversed_ & ~is_self)
    lap("routing")
    n_proxy = len(lg.proxy_source)
    right = float((x + lg.width / 2).max()) if lg.size else 0.0
    if len(route_points):
        right = max(right, float(route_points[:, 0].max()))
    bottom = float(rank_top[-1] + rank_height[-1]) if lg.size else 0.0
    stats = {
        "nodes": n,
        "edges": m,
        "ranks": int(rank.max()) + 1 if n else 0,
        "dummies": int((lg.kind == 2).sum()),
        "proxies": n_proxy,
        "reversed_edges": int(reversed_.sum()),
        "self_loops": int(is_self.sum()),
        "crossings_initial": cross_before,
        "crossings": cross_after,
    }
    return FlatLayout(
        x=x[:n],
        y=y[:n],
        rank=rank,
        proxy_source=lg.proxy_source,
        proxy_port=lg.proxy_port,
        proxy_rank=lg.rank[n : n + n_proxy],
        proxy_x=x[n : n + n_proxy],
        proxy_y=y[n : n + n_proxy],
        proxy_w=policy.proxy_width,
        proxy_h=policy.proxy_height,
        route_offsets=route_offsets,
        route_points=route_points,
        route_kind=kind,
        route_proxy=route_proxy,
        width=right,
        height=bottom,
        stats=stats,
        timings=timings,
    )


def _merge_self_loops(
    m: int,
    proper: np.ndarray,
    is_self: np.ndarray,
    offs: np.ndarray,
    pts: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    width: np.ndarray,
    height: np.ndarray,
    src: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    if not is_self.any():
        return offs, pts
    counts = np.zeros(m, dtype=np.int64)
    counts[proper] = np.diff(offs)
    counts[is_self] = 4
    offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    out = np.empty((int(offsets[-1]), 2))
    edge_of_pt = np.repeat(np.arange(m), counts)
    from_self = is_self[edge_of_pt]
    out[~from_self] = pts
    loops = [
        p
        for v in src[is_self].tolist()
        for p in self_loop(float(x[v]), float(y[v]), float(width[v]), float(height[v]))
    ]
    out[from_self] = np.asarray(loops, dtype=float)
    return offsets, out
