"""Cycle handling: choose edges to reverse so the graph becomes acyclic.

Broken models can contain cycles.  An acyclic graph (the normal case) is recognised
without scipy (edges all forward, or Kahn's peeling leaves nothing), so a GUI start or
a render does not import it; for a cyclic one, strongly connected components are found
with scipy's compiled routine, and only the nodes inside a non-trivial component are
walked, by an iterative depth-first search that reverses the edges closing a cycle
(back edges).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

# Nodes + edges up to which an acyclic graph is recognised by peeling (Python, ~1 us an
# item) rather than by importing scipy; past it scipy's compiled call is cheaper.
_PEEL_FIRST_UP_TO = 60_000


def _scipy_components() -> tuple[Any, Any] | None:
    """scipy's (csr_matrix, connected_components), imported on first need: scipy costs a
    GUI start (or a render) a quarter of a second that an acyclic graph never needs.
    None without scipy (optional)."""
    try:
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components
    except ImportError:  # tests/layout/test_cycles.py covers this path too
        return None
    return csr_matrix, connected_components


def feedback_edges(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Boolean mask over edges: True for edges to reverse.  Self loops are not included
    (the caller drops them from ranking).  Deterministic: the walk follows node and edge
    order of the input."""
    m = len(src)
    mask = np.zeros(m, dtype=bool)
    if m == 0 or n == 0:
        return mask
    proper = src != dst
    s, d = src[proper], dst[proper]
    if len(s) == 0 or bool(np.all(s < d)):
        return mask  # every edge runs forward in node order: no cycle
    left: np.ndarray | None = None
    if "scipy.sparse.csgraph" not in sys.modules and n + m <= _PEEL_FIRST_UP_TO:
        # Peeling proves a graph acyclic (the normal case) in ~20 ms at 10k nodes, less
        # than importing scipy costs (~170 ms); scipy is imported for a cyclic one.
        left = _left_after_peeling(n, src, dst, proper)
        if not left.any():
            return mask
    scipy = _scipy_components()
    if scipy is not None:
        csr_matrix, connected_components = scipy
        graph = csr_matrix((np.ones(len(s), dtype=np.int8), (s, d)), shape=(n, n))
        count, labels = connected_components(graph, directed=True, connection="strong")
        if count == n:
            return mask
        sizes = np.bincount(labels, minlength=count)
        in_cycle_edge = proper & (labels[src] == labels[dst]) & (sizes[labels[src]] > 1)
    else:
        # Without scipy: Kahn's algorithm peels off everything that is not on or below
        # a cycle; only edges between the remaining nodes can close a cycle.
        if left is None:
            left = _left_after_peeling(n, src, dst, proper)
        in_cycle_edge = proper & left[src] & left[dst]
    edge_ids = np.nonzero(in_cycle_edge)[0]
    # Adjacency restricted to the cyclic components, edges kept in input order.
    adjacency: dict[int, list[tuple[int, int]]] = {}
    for e, a, b in zip(edge_ids.tolist(), src[edge_ids].tolist(), dst[edge_ids].tolist()):
        adjacency.setdefault(a, []).append((b, e))
    state: dict[int, int] = {}  # 1 = on the stack, 2 = done
    for start in sorted(adjacency):
        if start in state:
            continue
        state[start] = 1
        stack: list[tuple[int, int]] = [(start, 0)]
        while stack:
            v, i = stack[-1]
            out = adjacency.get(v, ())
            if i < len(out):
                stack[-1] = (v, i + 1)
                w, e = out[i]
                st = state.get(w, 0)
                if st == 1:
                    mask[e] = True
                elif st == 0:
                    state[w] = 1
                    stack.append((w, 0))
            else:
                state[v] = 2
                stack.pop()
    return mask


def _left_after_peeling(n: int, src: np.ndarray, dst: np.ndarray, proper: np.ndarray) -> np.ndarray:
    """Nodes Kahn's algorithm cannot order (on a cycle or downstream of one)."""
    s, d = src[proper], dst[proper]
    order = np.argsort(s, kind="stable")
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(s, minlength=n), out=starts[1:])
    st = starts.tolist()
    nbr = d[order].tolist()
    indeg = np.bincount(d, minlength=n).tolist()
    stack = [v for v in range(n) if indeg[v] == 0]
    done = bytearray(n)
    while stack:
        v = stack.pop()
        done[v] = 1
        for k in range(st[v], st[v + 1]):
            w = nbr[k]
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    return np.frombuffer(bytes(done), dtype=np.uint8) == 0
