"""Coordinates: x by Brandes–Köpf, y by rank rows.

Brandes–Köpf aligns nodes into vertical blocks that are drawn straight, packs the blocks
as far as possible to one side, and balances candidates packed to the left and to the
right.  Two choices adapt it to dataflow graphs:

* A node is aligned with its *leftmost* neighbour (by port position), and only when that
  neighbour picks it back.  Ordering keeps inputs in port order, so these pairs follow
  input 0: the main path of a ResNet block, the residual stream of a transformer.  Those
  become single straight lines, and a repeated block cannot shift sideways a little in
  every copy (which otherwise adds up to a drawing many times wider than any rank).
  With this rule the upward and downward passes of the original pick the same pairs, so
  two candidates (left- and right-packed) give the same balance as four.
* Segments between two dummies (long edges) win conflicts (type-1 marking), so long
  edges stay straight.

Blocks are packed by a pass in topological order of the block constraint graph instead of
the recursive place_block, and classes are shifted from the far side back so chained
shifts add up (the fix of the 2020 erratum).  For very large layer graphs a vectorised
fallback moves nodes toward the mean of their neighbours and restores the minimum
separation with a running maximum, a few rounds.
"""

from __future__ import annotations

import numpy as np

from .api import CancelCheck, LayoutCancelled
from .long_edges import KIND_DUMMY, LayerGraph


def rank_rows(lg: LayerGraph, rank_sep: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y centre of each layer node, top of each rank, height of each rank)."""
    n_ranks = int(lg.rank.max()) + 1 if lg.size else 0
    heights = np.zeros(n_ranks)
    np.maximum.at(heights, lg.rank, lg.height)
    tops = np.zeros(n_ranks)
    if n_ranks > 1:
        tops[1:] = np.cumsum(heights[:-1] + rank_sep)
    return tops[lg.rank] + heights[lg.rank] / 2, tops, heights


def _separations(
    lg: LayerGraph, left: np.ndarray, right: np.ndarray, node_sep: float, edge_sep: float
) -> np.ndarray:
    dummy = lg.kind == KIND_DUMMY
    gap = np.where(dummy[left] | dummy[right], edge_sep, node_sep)
    return (lg.width[left] + lg.width[right]) / 2 + gap


def _layers(lg: LayerGraph, pos: np.ndarray) -> list[list[int]]:
    order = np.lexsort((pos, lg.rank))
    n_ranks = int(lg.rank.max()) + 1
    counts = np.bincount(lg.rank, minlength=n_ranks)
    flat = order.tolist()
    out = []
    start = 0
    for c in counts.tolist():
        out.append(flat[start : start + c])
        start += c
    return out


def _sorted_adjacency(
    size: int, node: np.ndarray, nbr: np.ndarray, nbr_key: np.ndarray
) -> tuple[list[int], list[int]]:
    order = np.lexsort((nbr_key, node))
    starts = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(np.bincount(node, minlength=size), out=starts[1:])
    return starts.tolist(), nbr[order].tolist()


def brandes_koepf(
    lg: LayerGraph,
    pos: np.ndarray,
    node_sep: float,
    edge_sep: float,
    cancel: CancelCheck | None = None,
) -> np.ndarray:
    """x centre of every layer node."""
    size = lg.size
    if size == 0:
        return np.zeros(0)
    layers = _layers(lg, pos)
    a, b = lg.edge_a, lg.edge_b
    up_start, up_nbr = _sorted_adjacency(size, b, a, pos[a] + lg.off_a)
    down_start, down_nbr = _sorted_adjacency(size, a, b, pos[b] + lg.off_b)
    is_dummy = (lg.kind == KIND_DUMMY).tolist()
    posl = pos.tolist()
    marked = _type1_conflicts(layers, up_start, up_nbr, is_dummy, posl)
    # An alignment is only made when both ends pick each other as leftmost neighbour,
    # so a skip connection cannot steal its source from the main path in the passes that
    # scan from the right, and the four passes agree on the main paths.
    pref_down = _leftmost(size, down_start, down_nbr)
    # Separation between each node and its right neighbour in the rank.
    flat_order = np.lexsort((pos, lg.rank))
    same_rank = lg.rank[flat_order[:-1]] == lg.rank[flat_order[1:]]
    lefts = flat_order[:-1][same_rank]
    rights = flat_order[1:][same_rank]
    seps = _separations(lg, lefts, rights, node_sep, edge_sep)
    # With alignment on mutual leftmost neighbours the upward passes pick the same pairs
    # as the downward ones, so of the four Brandes–Köpf candidates two pairs coincide
    # and the balanced result (mean of the two medians) is the mean of a left- and a
    # right-packed candidate: only those two are computed.
    candidates = []
    for leftward in (True, False):
        if cancel is not None and cancel():
            raise LayoutCancelled()
        root, align = _align(layers, up_start, up_nbr, posl, marked, leftward, True, pref_down)
        candidates.append(_compact(size, root, align, lefts, rights, seps, leftward))
    xs = np.stack(candidates)
    widths = xs.max(axis=1) - xs.min(axis=1)
    smallest = int(np.argmin(widths))
    lo, hi = xs[smallest].min(), xs[smallest].max()
    xs[0] += lo - xs[0].min()
    xs[1] += hi - xs[1].max()
    x = (xs[0] + xs[1]) / 2
    return _enforce_separation(x, lg.rank, lefts, rights, seps, flat_order)


def _leftmost(size: int, starts: list[int], nbr: list[int]) -> list[int]:
    """Per node its leftmost neighbour (by port position), -1 when it has none."""
    return [nbr[starts[v]] if starts[v + 1] > starts[v] else -1 for v in range(size)]


def _type1_conflicts(
    layers: list[list[int]],
    up_start: list[int],
    up_nbr: list[int],
    is_dummy: list[bool],
    pos: list[int],
) -> set[tuple[int, int]]:
    """Non-inner segments that cross an inner (dummy-dummy) segment."""
    marked: set[tuple[int, int]] = set()
    for i in range(1, len(layers)):
        lower = layers[i]
        upper_len = len(layers[i - 1])
        if upper_len < 2 or len(lower) < 2:
            continue
        k0 = 0
        scan = 0
        last = len(lower) - 1
        for l1, v in enumerate(lower):
            inner_u = -1
            if is_dummy[v]:
                for k in range(up_start[v], up_start[v + 1]):
                    if is_dummy[up_nbr[k]]:
                        inner_u = up_nbr[k]
            if l1 == last or inner_u >= 0:
                k1 = pos[inner_u] if inner_u >= 0 else upper_len - 1
                while scan <= l1:
                    w = lower[scan]
                    for k in range(up_start[w], up_start[w + 1]):
                        u = up_nbr[k]
                        pu = pos[u]
                        if (pu < k0 or pu > k1) and not (is_dummy[u] and is_dummy[w]):
                            marked.add((u, w))
                    scan += 1
                k0 = k1
    return marked


def _align(
    layers: list[list[int]],
    nb_start: list[int],
    nb: list[int],
    pos: list[int],
    marked: set[tuple[int, int]],
    leftward: bool,
    down: bool,
    agrees: list[int],
) -> tuple[list[int], list[int]]:
    size = len(pos)
    root = list(range(size))
    align = list(range(size))
    for layer in layers:
        seq = layer if leftward else layer[::-1]
        r = -1 if leftward else 1 << 60
        for v in seq:
            lo = nb_start[v]
            d = nb_start[v + 1] - lo
            if d == 0:
                continue
            # The leftmost neighbour is the one on input 0 (ordering keeps inputs in port
            # order): aligning on it draws the chain of input-0 edges (the main path,
            # the residual stream) as one straight line.
            for m in (lo,):
                if align[v] != v:
                    break
                u = nb[m]
                pu = pos[u]
                if agrees[u] != v:
                    continue
                conflict = (u, v) in marked if down else (v, u) in marked
                if not conflict and (r < pu if leftward else r > pu):
                    align[u] = v
                    root[v] = root[u]
                    align[v] = root[v]
                    r = pu
    return root, align


def _compact(
    size: int,
    root: list[int],
    align: list[int],
    lefts: np.ndarray,
    rights: np.ndarray,
    seps: np.ndarray,
    leftward: bool,
) -> np.ndarray:
    """Brandes–Köpf horizontal compaction toward one side, iteratively.

    Blocks are placed in topological order of the "left neighbour" relation (what the
    recursive place_block visits first).  A block joins the class of its first placed
    left neighbour; inside a class blocks are packed against each other.  Each class is
    then shifted toward the side opposite the packing by the slack to its neighbouring
    classes, processing classes from the far side so chained shifts add up (the fix of
    the 2020 erratum to the original algorithm).
    """
    if not leftward:
        lefts, rights = rights, lefts
    prev = [-1] * size
    gap = [0.0] * size
    for a, b, s in zip(lefts.tolist(), rights.tolist(), seps.tolist()):
        prev[b] = a
        gap[b] = s
    root_arr = np.asarray(root, dtype=np.int64)
    # Block graph: edge root(left neighbour) -> root(node); Kahn in that order.
    left_block = root_arr[lefts]
    right_block = root_arr[rights]
    succ_order = np.argsort(left_block, kind="stable")
    starts = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(np.bincount(left_block, minlength=size), out=starts[1:])
    st = starts.tolist()
    succ = right_block[succ_order].tolist()
    remaining = np.bincount(right_block, minlength=size).tolist()
    roots = np.flatnonzero(root_arr == np.arange(size)).tolist()
    stack = [v for v in roots[::-1] if remaining[v] == 0]
    x = [0.0] * size
    sink = list(range(size))
    cross: list[tuple[int, int, float]] = []  # (left node, right node, separation)
    while stack:
        v = stack.pop()
        xv = 0.0
        w = v
        while True:
            p = prev[w]
            if p >= 0:
                u = root[p]
                if sink[v] == v:
                    sink[v] = sink[u]
                if sink[v] != sink[u]:
                    cross.append((p, w, gap[w]))
                else:
                    c = x[u] + gap[w]
                    if c > xv:
                        xv = c
            w = align[w]
            if w == v:
                break
        x[v] = xv
        for k in range(st[v], st[v + 1]):
            t = succ[k]
            remaining[t] -= 1
            if remaining[t] == 0:
                stack.append(t)
    # Class shifts, from the far side back: a class moves toward its right neighbours as
    # far as its tightest constraint allows (shift of the neighbour included).
    shift: dict[int, float] = {}
    if cross:
        out_edges: dict[int, list[tuple[int, float]]] = {}
        indeg_c: dict[int, int] = {}
        for p, w, g in cross:
            cu = sink[root[p]]
            cv = sink[root[w]]
            slack = x[root[w]] - x[root[p]] - g
            out_edges.setdefault(cu, []).append((cv, slack))
            indeg_c[cv] = indeg_c.get(cv, 0)
            indeg_c[cu] = indeg_c.get(cu, 0)
        # Reverse topological order of the class graph (classes with no right
        # neighbours first).
        pending = {c: len(out_edges.get(c, ())) for c in indeg_c}
        incoming: dict[int, list[int]] = {}
        for cu, lst in out_edges.items():
            for cv, _ in lst:
                incoming.setdefault(cv, []).append(cu)
        ready = sorted(c for c, k in pending.items() if k == 0)
        while ready:
            c = ready.pop()
            if c in out_edges:
                shift[c] = min(shift.get(cv, 0.0) + slack for cv, slack in out_edges[c])
            for cu in incoming.get(c, ()):
                pending[cu] -= 1
                if pending[cu] == 0:
                    ready.append(cu)
    xs = np.asarray(x)[root_arr]
    if shift:
        sink_arr = np.asarray(sink, dtype=np.int64)[root_arr]
        table = np.zeros(size)
        keys = np.fromiter(shift.keys(), dtype=np.int64, count=len(shift))
        table[keys] = np.fromiter(shift.values(), dtype=float, count=len(shift))
        xs = xs + table[sink_arr]
    return xs if leftward else -xs


def _enforce_separation(
    x: np.ndarray,
    rank: np.ndarray,
    lefts: np.ndarray,
    rights: np.ndarray,
    seps: np.ndarray,
    flat_order: np.ndarray,
) -> np.ndarray:
    """Push nodes right where the averaged candidates came closer than allowed."""
    xs = x[flat_order]
    r = rank[flat_order]
    gap = np.zeros(len(xs))
    same = r[:-1] == r[1:]
    gap[1:][same] = seps
    start = np.ones(len(xs), dtype=bool)
    start[1:] = ~same
    # Required distance from the first node of the rank, as a running sum reset per rank.
    csum = np.cumsum(gap)
    base = np.maximum.accumulate(np.where(start, csum, 0.0))
    dist = csum - base
    span = float(np.abs(xs).max() + dist.max() + 1.0) * 4
    shifted = xs - dist + r * span
    fixed = np.maximum.accumulate(shifted) - r * span + dist
    out = np.empty_like(x)
    out[flat_order] = fixed
    return out


def relaxed_positions(
    lg: LayerGraph,
    pos: np.ndarray,
    node_sep: float,
    edge_sep: float,
    rounds: int = 8,
) -> np.ndarray:
    """Vectorised fallback for huge graphs: pull toward neighbours, then re-separate."""
    size = lg.size
    if size == 0:
        return np.zeros(0)
    flat_order = np.lexsort((pos, lg.rank))
    same_rank = lg.rank[flat_order[:-1]] == lg.rank[flat_order[1:]]
    lefts = flat_order[:-1][same_rank]
    rights = flat_order[1:][same_rank]
    seps = _separations(lg, lefts, rights, node_sep, edge_sep)
    x = _enforce_separation(np.zeros(size), lg.rank, lefts, rights, seps, flat_order)
    a, b = lg.edge_a, lg.edge_b
    wa = lg.width[a] * lg.off_a
    wb = lg.width[b] * lg.off_b
    degree = np.bincount(a, minlength=size) + np.bincount(b, minlength=size)
    has_nbr = degree > 0
    for _ in range(rounds):
        total = np.bincount(b, weights=x[a] + wa - wb, minlength=size)
        total += np.bincount(a, weights=x[b] + wb - wa, minlength=size)
        target = np.where(has_nbr, total / np.maximum(degree, 1), x)
        x = _enforce_separation(target, lg.rank, lefts, rights, seps, flat_order)
    return x
