"""Cycle handling: choose edges to reverse so the graph becomes acyclic.

Broken models can contain cycles.  Strongly connected components are found with
scipy's compiled routine, so an acyclic graph (the normal case) costs one call; only the
nodes inside a non-trivial component are walked, by an iterative depth-first search that
reverses the edges closing a cycle (back edges).
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components


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
    if len(s) == 0:
        return mask
    graph = csr_matrix((np.ones(len(s), dtype=np.int8), (s, d)), shape=(n, n))
    count, labels = connected_components(graph, directed=True, connection="strong")
    if count == n:
        return mask
    sizes = np.bincount(labels, minlength=count)
    in_cycle_edge = proper & (labels[src] == labels[dst]) & (sizes[labels[src]] > 1)
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
