"""Crossing reduction: the left-to-right order inside each rank.

1. Initial order: a depth-first walk from the sinks that visits the inputs of each node
   in port order, numbering nodes as they finish.  Expression trees come out without
   crossings, and input 0 of a node (the main path of a residual block) lands left of
   input 1 (the skip connection).
2. Sweeps, upward first (the walk above already follows inputs), then alternating: each
   node of a rank moves to the mean position of its neighbours in the rank before,
   measured at the ports (the neighbour's port position minus this node's own port
   offset), positions normalised per rank.  A node with no neighbour on that side (a
   Constant in a downward sweep) follows its neighbours on the other side.  Ties keep
   the current order.
3. After every sweep the exact crossing count decides; a sweep that does not improve is
   undone, and two in a row end the search.

The sweep is a plain loop over flattened adjacency lists (ranks of ONNX graphs are narrow,
so per-rank array calls would cost more than they save); its total work is bounded by
``work_budget`` edge visits so huge graphs get fewer sweeps.
"""

from __future__ import annotations

import numpy as np

from .api import CancelCheck, LayoutCancelled
from .crossings import count_crossings
from .long_edges import LayerGraph


def layer_crossings(lg: LayerGraph, pos: np.ndarray) -> int:
    """Crossings of the layer graph for positions ``pos`` (port offsets included)."""
    a, b = lg.edge_a, lg.edge_b
    return count_crossings(lg.rank[a], pos[a] + lg.off_a, pos[b] + lg.off_b)


def _csr(n: int, key: np.ndarray, order: np.ndarray) -> np.ndarray:
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(key, minlength=n), out=starts[1:])
    return starts


def initial_order(lg: LayerGraph) -> np.ndarray:
    """Post-order numbers of a depth-first walk from the sinks along inputs in port order."""
    size = lg.size
    a, b = lg.edge_a, lg.edge_b
    order = np.lexsort((np.arange(len(a)), lg.off_b, b))
    starts = _csr(size, b, order).tolist()
    nbr = a[order].tolist()
    has_out = np.zeros(size, dtype=bool)
    has_out[a] = True
    # Roots: sinks, real nodes first in input order, then proxies/dummies (none are sinks).
    roots = np.flatnonzero(~has_out).tolist()
    visited = bytearray(size)
    number = [0] * size
    counter = 0
    for root in roots:
        if visited[root]:
            continue
        visited[root] = 1
        stack = [root]
        cursor = [starts[root]]
        while stack:
            v = stack[-1]
            i = cursor[-1]
            if i < starts[v + 1]:
                cursor[-1] = i + 1
                u = nbr[i]
                if not visited[u]:
                    visited[u] = 1
                    stack.append(u)
                    cursor.append(starts[u])
            else:
                stack.pop()
                cursor.pop()
                number[v] = counter
                counter += 1
    key = np.asarray(number, dtype=np.int64)
    return positions_from_key(lg.rank, key)


def positions_from_key(rank: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Position inside the rank when each rank is sorted by ``key``."""
    order = np.lexsort((key, rank))
    pos = np.empty(len(rank), dtype=np.int64)
    sorted_rank = rank[order]
    first = np.searchsorted(sorted_rank, sorted_rank, side="left")
    pos[order] = np.arange(len(rank)) - first
    return pos


def order_layers(
    lg: LayerGraph,
    sweeps: int,
    cancel: CancelCheck | None = None,
    work_budget: int = 200_000,
) -> tuple[np.ndarray, int, int]:
    """Returns (positions, crossings of the initial order, crossings of the result)."""
    pos = initial_order(lg)
    best = pos.copy()
    best_cross = layer_crossings(lg, pos)
    first_cross = best_cross
    size = lg.size
    if size == 0 or best_cross == 0 or sweeps <= 0:
        return best, first_cross, best_cross
    work = size + 2 * len(lg.edge_a)
    sweeps = max(2, min(sweeps, work_budget // max(work, 1)))
    rank = lg.rank
    n_ranks = int(rank.max()) + 1
    by_rank = np.lexsort((pos, rank))
    rank_starts = _csr(n_ranks, rank, by_rank).tolist()
    layers: list[list[int]] = []
    flat = by_rank.tolist()
    for r in range(n_ranks):
        layers.append(flat[rank_starts[r] : rank_starts[r + 1]])
    a, b = lg.edge_a, lg.edge_b
    # Adjacency towards the rank above (for downward sweeps) and below (upward), each
    # entry carrying the port correction: neighbour port offset minus own port offset.
    # Positions are normalised to (0, 1) per rank so that keys taken from ranks of
    # different widths (above for most nodes, below for sources) compare fairly.
    rank_len = np.bincount(rank, minlength=n_ranks)[rank].astype(float)
    port_a = lg.off_a / rank_len[a]
    port_b = lg.off_b / rank_len[b]
    up_order = np.argsort(b, kind="stable")
    up_start = _csr(size, b, up_order).tolist()
    up_nbr = a[up_order].tolist()
    up_off = (port_a - port_b)[up_order].tolist()
    down_order = np.argsort(a, kind="stable")
    down_start = _csr(size, a, down_order).tolist()
    down_nbr = b[down_order].tolist()
    down_off = (port_b - port_a)[down_order].tolist()
    inv_len = (1.0 / rank_len).tolist()
    cur = ((pos + 0.5) / rank_len).tolist()
    stale = 0
    for sweep in range(sweeps):
        if cancel is not None and cancel():
            raise LayoutCancelled()
        # Upward first: the initial order already follows the inputs of each node.
        upward = sweep % 2 == 0
        if upward:
            rng = range(n_ranks - 2, -1, -1)
            starts, nbr, off = down_start, down_nbr, down_off
            other_starts, other_nbr, other_off = up_start, up_nbr, up_off
        else:
            rng = range(1, n_ranks)
            starts, nbr, off = up_start, up_nbr, up_off
            other_starts, other_nbr, other_off = down_start, down_nbr, down_off
        for r in rng:
            layer = layers[r]
            if len(layer) < 2:
                continue
            keyed = []
            for v in layer:
                lo = starts[v]
                hi = starts[v + 1]
                if hi == lo:
                    # No neighbour on the sweep side (a source in a downward sweep):
                    # follow the other side, so a Constant stays beside its consumer.
                    st, nb, of = other_starts, other_nbr, other_off
                    lo = st[v]
                    hi = st[v + 1]
                else:
                    nb, of = nbr, off
                if hi > lo:
                    total = 0.0
                    for k in range(lo, hi):
                        total += cur[nb[k]] + of[k]
                    keyed.append((total / (hi - lo), cur[v], v))
                else:
                    keyed.append((cur[v], cur[v], v))
            keyed.sort()
            step = inv_len[layer[0]]
            for i, item in enumerate(keyed):
                v = item[2]
                layer[i] = v
                cur[v] = (i + 0.5) * step
        pos_now = np.rint(np.asarray(cur) * rank_len - 0.5).astype(np.int64)
        crossings = layer_crossings(lg, pos_now)
        if crossings < best_cross:
            best_cross = crossings
            best = pos_now
            stale = 0
        else:
            # Continue from the best order found so far.
            stale += 1
            cur = ((best + 0.5) / rank_len).tolist()
            for layer in layers:
                layer.sort(key=cur.__getitem__)
            if stale >= 2:
                break
        if best_cross == 0:
            break
    return best, first_cross, best_cross
