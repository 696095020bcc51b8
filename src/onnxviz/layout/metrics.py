"""Quality measures of a finished drawing, computed from geometry alone so that the same
functions can judge our layouts and a peer's (Graphviz dot) alike.

All functions take top-to-bottom geometry: node centres, a level (rank row) per node,
and each edge as a Bézier chain (3k+1 points) from its source end to its target end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .api import LayoutResult
from .crossings import count_crossings

_T = np.linspace(0.0, 1.0, 9)
_BASIS = np.stack([(1 - _T) ** 3, 3 * (1 - _T) ** 2 * _T, 3 * (1 - _T) * _T**2, _T**3], axis=1)


def sample_chain(points: np.ndarray) -> np.ndarray:
    """A polyline following a Bézier chain (9 samples per segment)."""
    k = (len(points) - 1) // 3
    if k <= 0:
        return np.asarray(points, dtype=float).reshape(-1, 2)
    idx = 3 * np.arange(k)[:, None] + np.arange(4)[None, :]
    ctrl = points[idx]  # (k, 4, 2)
    return np.einsum("tj,kjd->ktd", _BASIS, ctrl).reshape(-1, 2)


def x_at_levels(points: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """x of the drawn curve where it passes each height in ``ys``."""
    poly = sample_chain(np.asarray(points, dtype=float))
    order = np.argsort(poly[:, 1], kind="stable")
    return np.interp(ys, poly[order, 1], poly[order, 0])


@dataclasses.dataclass
class Geometry:
    """What the metrics need: per node a centre and a level index (rank), level heights,
    per edge its endpoints (node indexes, -1 for a proxy start), target port and points."""

    center: np.ndarray  # (n, 2)
    size: np.ndarray  # (n, 2)
    level: np.ndarray  # (n,) int
    level_y: np.ndarray  # (levels,)
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_src_level: np.ndarray
    edge_target_port: np.ndarray
    routes: Sequence[np.ndarray]


def levels_from_y(center_y: np.ndarray, tolerance: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Group nodes into rows by centre y: (level per node, y of each level)."""
    ys = np.sort(np.unique(np.round(center_y / tolerance) * tolerance))
    level = np.searchsorted(ys, np.round(center_y / tolerance) * tolerance)
    return level, ys


def geometry_of(result: LayoutResult) -> Geometry:
    """Geometry of a flat top-to-bottom result (proxies count as edge starts)."""
    if result.direction != "TB":
        raise ValueError("metrics expect a top-to-bottom layout")
    ids = result.node_ids
    index = {nid: i for i, nid in enumerate(ids)}
    center = result.node_xy + result.node_size / 2
    proxy_y = {p.id: p.y + p.height / 2 for p in result.proxy_boxes}
    all_y = np.concatenate([center[:, 1], np.asarray(list(proxy_y.values()), dtype=float)])
    _, level_y = levels_from_y(all_y)
    level = np.searchsorted(level_y, np.round(center[:, 1]))
    src, dst, src_level, port, routes = [], [], [], [], []
    offs = result.route_offsets
    for i, meta in enumerate(result.route_meta):
        s, t, _sp, tp, kind, _idx, proxy = meta
        if kind == "self":
            continue
        pts = result.route_points[offs[i] : offs[i + 1]]
        if kind == "reversed":
            pts = pts[::-1]
            s, t = t, s
        si = index.get(s, -1) if proxy is None else -1
        lvl = (
            int(np.searchsorted(level_y, round(proxy_y[proxy])))
            if proxy is not None
            else int(level[index[s]])
        )
        src.append(si)
        dst.append(index[t])
        src_level.append(lvl)
        port.append(tp if kind != "reversed" else 0)
        routes.append(pts)
    return Geometry(
        center,
        result.node_size,
        level,
        level_y,
        np.asarray(src, dtype=np.int64),
        np.asarray(dst, dtype=np.int64),
        np.asarray(src_level, dtype=np.int64),
        np.asarray(port, dtype=np.int64),
        routes,
    )


def crossings(geo: Geometry) -> int:
    """Crossings between adjacent rank rows: for every edge the x where it passes each row
    it spans; pairs of edges whose order flips between two rows cross once."""
    gaps: list[int] = []
    upper: list[float] = []
    lower: list[float] = []
    for s_lvl, t, pts in zip(geo.edge_src_level.tolist(), geo.edge_dst.tolist(), geo.routes):
        t_lvl = int(geo.level[t])
        if t_lvl - s_lvl < 1:
            continue
        xs = x_at_levels(pts, geo.level_y[s_lvl : t_lvl + 1])
        xs[0] = pts[0][0]
        xs[-1] = pts[-1][0]
        gaps.extend(range(s_lvl, t_lvl))
        upper.extend(xs[:-1].tolist())
        lower.extend(xs[1:].tolist())
    if not gaps:
        return 0
    return count_crossings(
        np.asarray(gaps), np.round(np.asarray(upper), 3), np.round(np.asarray(lower), 3)
    )


def input_order_inversions(geo: Geometry) -> tuple[int, int]:
    """(inverted pairs, pairs): for every node with several inputs, pairs of inputs whose
    edges arrive (measured one rank row above the node) in the wrong left-to-right order
    with respect to their input index."""
    arrivals: dict[int, list[tuple[int, float]]] = {}
    for t, port, pts in zip(geo.edge_dst.tolist(), geo.edge_target_port.tolist(), geo.routes):
        lvl = int(geo.level[t])
        y_above = geo.level_y[lvl - 1] if lvl > 0 else pts[0][1]
        x = float(x_at_levels(pts, np.asarray([y_above]))[0])
        arrivals.setdefault(t, []).append((port, x))
    bad = total = 0
    for items in arrivals.values():
        if len(items) < 2:
            continue
        items.sort()
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                if items[i][0] == items[j][0]:
                    continue
                total += 1
                if items[i][1] > items[j][1] + 1e-6:
                    bad += 1
    return bad, total


def long_edge_bends(geo: Geometry, tolerance: float = 0.5) -> tuple[int, int]:
    """(bends, long edges): a bend is a change of x between consecutive rank rows along
    an edge that spans more than one rank (its lane moves sideways)."""
    bends = edges = 0
    for s_lvl, t, pts in zip(geo.edge_src_level.tolist(), geo.edge_dst.tolist(), geo.routes):
        t_lvl = int(geo.level[t])
        if t_lvl - s_lvl < 2:
            continue
        edges += 1
        xs = x_at_levels(pts, geo.level_y[s_lvl + 1 : t_lvl])
        bends += int(np.count_nonzero(np.abs(np.diff(xs)) > tolerance))
    return bends, edges


def overlaps(xy: np.ndarray, size: np.ndarray, eps: float = 1e-6) -> int:
    """Number of pairs of boxes (top-left ``xy``, ``size``) that overlap with area."""
    n = len(xy)
    if n < 2:
        return 0
    order = np.argsort(xy[:, 0], kind="stable")
    x0 = xy[order, 0]
    x1 = x0 + size[order, 0]
    y0 = xy[order, 1]
    y1 = y0 + size[order, 1]
    # For each box, the boxes starting before it ends (in x order) are the candidates.
    limit = np.searchsorted(x0, x1 - eps, side="left")
    count = 0
    for i in range(n):
        j = np.arange(i + 1, limit[i])
        if len(j) == 0:
            continue
        hit = (y0[j] < y1[i] - eps) & (y1[j] > y0[i] + eps) & (x0[j] < x1[i] - eps)
        hit &= (size[order[j], 0] > eps) & (size[order[j], 1] > eps)
        count += int(np.count_nonzero(hit))
    return count


def drawing_width(result: LayoutResult) -> float:
    return float(result.width)
