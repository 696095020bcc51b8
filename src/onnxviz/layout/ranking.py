"""Ranking: which layer each node goes to.

Longest path from the sources gives every node the smallest rank its inputs allow.  Left
like that, every source (Constant, graph input, the start of a Shape chain) lands on rank 0
and its edge crosses the whole drawing.  A second pass, in reverse topological order,
pulls a node down toward its consumers whenever that shortens at least as many edges as it
lengthens (always for sources), which is the greedy step of network simplex restricted to
moves that cannot break any other edge.
"""

from __future__ import annotations

import numpy as np

from .api import CancelCheck, LayoutCancelled

_CHECK_EVERY = 8192


def _csr(n: int, a: np.ndarray, b: np.ndarray) -> tuple[list[int], list[int]]:
    order = np.argsort(a, kind="stable")
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=n), out=starts[1:])
    return starts.tolist(), b[order].tolist()


def rank_nodes(
    n: int, src: np.ndarray, dst: np.ndarray, cancel: CancelCheck | None = None
) -> np.ndarray:
    """Ranks (0-based) for an acyclic graph given as edge arrays without self loops."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    out_start, out_nbr = _csr(n, src, dst)
    indeg = np.bincount(dst, minlength=n).tolist()
    outdeg = np.bincount(src, minlength=n).tolist()
    rank = [0] * n
    # Kahn's algorithm; sources taken in reverse so that pop() yields them in input order.
    stack = [v for v in range(n - 1, -1, -1) if indeg[v] == 0]
    topo: list[int] = []
    remaining = indeg[:]
    steps = 0
    while stack:
        v = stack.pop()
        topo.append(v)
        nxt = rank[v] + 1
        for k in range(out_start[v], out_start[v + 1]):
            w = out_nbr[k]
            if rank[w] < nxt:
                rank[w] = nxt
            remaining[w] -= 1
            if remaining[w] == 0:
                stack.append(w)
        steps += 1
        if cancel is not None and steps % _CHECK_EVERY == 0 and cancel():
            raise LayoutCancelled()
    if len(topo) != n:
        raise ValueError("rank_nodes needs an acyclic graph")
    # Pull nodes toward their consumers (reverse topological order so a whole chain
    # of sources, e.g. Shape -> Gather -> Unsqueeze, moves down together).
    for v in reversed(topo):
        lo = out_start[v]
        hi = out_start[v + 1]
        if lo == hi:
            continue
        if indeg[v] > outdeg[v]:
            continue
        target = min(rank[out_nbr[k]] for k in range(lo, hi)) - 1
        if target > rank[v]:
            rank[v] = target
    # Sinks with several producers stay right below their lowest producer (already so);
    # a sink fed by one pulled-down chain is already tight.  Normalise to start at 0.
    arr = np.asarray(rank, dtype=np.int64)
    return arr - arr.min()
