"""Routes: smooth cubic Bézier chains through the dummy points of each edge.

An edge leaves its source port vertically, passes every rank it crosses as a vertical
segment at its dummy's x (so it never cuts through a box in that rank), and enters its
target port vertically.  Between two consecutive points the curve is a cubic whose
control points sit half-way down the gap, directly below and above the ends, which gives
vertical tangents at every point and an S-shape where the lane changes column.
"""

from __future__ import annotations

import numpy as np

from .long_edges import KIND_DUMMY, LayerGraph


def route_paths(
    lg: LayerGraph,
    x: np.ndarray,
    y: np.ndarray,
    rank_top: np.ndarray,
    rank_height: np.ndarray,
    start_off: np.ndarray,
    end_off: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, points) of every path, each a Bézier chain of 3k+1 points, in laid-out
    direction (top to bottom)."""
    m = len(lg.path_offsets) - 1
    nodes = lg.path_nodes
    if m == 0:
        return np.zeros(1, dtype=np.int64), np.zeros((0, 2))
    is_dummy = lg.kind[nodes] == KIND_DUMMY
    copies = np.where(is_dummy, 2, 1)
    pts_per_path = np.add.reduceat(copies, lg.path_offsets[:-1])
    node_of_pt = np.repeat(nodes, copies)
    dummy_pt = np.repeat(is_dummy, copies)
    # Second copy of a dummy is the bottom of its rank row.
    second = np.zeros(len(node_of_pt), dtype=bool)
    idx_first = np.cumsum(copies) - copies
    second[idx_first[is_dummy] + 1] = True
    px = x[node_of_pt].copy()
    r = lg.rank[node_of_pt]
    py = np.where(second, rank_top[r] + rank_height[r], rank_top[r])
    pt_offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(pts_per_path, out=pt_offsets[1:])
    first_pt = pt_offsets[:-1]
    last_pt = pt_offsets[1:] - 1
    first_node = nodes[lg.path_offsets[:-1]]
    last_node = nodes[lg.path_offsets[1:] - 1]
    px[first_pt] = x[first_node] + start_off * lg.width[first_node]
    py[first_pt] = y[first_node] + lg.height[first_node] / 2
    px[last_pt] = x[last_node] + end_off * lg.width[last_node]
    py[last_pt] = y[last_node] - lg.height[last_node] / 2
    del dummy_pt
    # Segments between consecutive points of the same path.
    seg_valid = np.ones(len(px) - 1, dtype=bool)
    seg_valid[last_pt[:-1]] = False
    p0 = np.flatnonzero(seg_valid)
    half = (py[p0 + 1] - py[p0]) / 2
    segs_per_path = pts_per_path - 1
    out_offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(3 * segs_per_path + 1, out=out_offsets[1:])
    out = np.empty((int(out_offsets[-1]), 2))
    # Output index of each point: path offset + 3 * (index within path).
    path_of_pt = np.repeat(np.arange(m), pts_per_path)
    within = np.arange(len(px)) - pt_offsets[path_of_pt]
    out_idx = out_offsets[path_of_pt] + 3 * within
    out[out_idx, 0] = px
    out[out_idx, 1] = py
    c1 = out_idx[p0] + 1
    out[c1, 0] = px[p0]
    out[c1, 1] = py[p0] + half
    out[c1 + 1, 0] = px[p0 + 1]
    out[c1 + 1, 1] = py[p0 + 1] - half
    return out_offsets, out


def reverse_routes(offsets: np.ndarray, points: np.ndarray, which: np.ndarray) -> None:
    """Reverse, in place, the point order of the routes selected by ``which``."""
    for i in np.flatnonzero(which).tolist():
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        points[lo:hi] = points[lo:hi][::-1].copy()


def self_loop(x: float, y: float, w: float, h: float) -> list[tuple[float, float]]:
    """A loop on the right side of a box, from its bottom to its top."""
    reach = max(24.0, w * 0.25)
    right = x + w / 2
    return [
        (right - w * 0.15, y + h / 2),
        (right + reach, y + h / 2 + reach),
        (right + reach, y - h / 2 - reach),
        (right - w * 0.15, y - h / 2),
    ]
