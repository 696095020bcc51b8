"""Long edges: the layered graph with dummy points and proxies.

Every edge must run between adjacent ranks for crossing reduction.  An edge spanning a
few ranks gets one dummy point per rank it passes.  An edge spanning many ranks, or one
from a producer that feeds many consumers (attention masks, position ids, rotary caches
feeding every layer), would add hundreds of dummies and lanes crossing the whole drawing;
it instead starts at a small proxy box placed one rank above its target.  Proxies of the
same source output on the same rank are shared.  All of it is built with array
operations.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .api import LongEdgePolicy

KIND_REAL = 0
KIND_PROXY = 1
KIND_DUMMY = 2


@dataclasses.dataclass
class LayerGraph:
    """Nodes 0..n-1 are the real nodes, then proxies, then dummies.

    ``edge_a``/``edge_b`` are layer edges from rank r to r+1 with port offsets in
    (-0.5, 0.5) of the node width (``off_a`` on the lower side of a, ``off_b`` on the upper
    side of b) and ``edge_orig``, the input edge each belongs to.  ``path_nodes`` lists,
    per input edge, the layer nodes from its (laid-out) start to its end, delimited by
    ``path_offsets``.
    """

    n_real: int
    rank: np.ndarray
    width: np.ndarray
    height: np.ndarray
    kind: np.ndarray
    proxy_source: np.ndarray  # per proxy: real source node
    proxy_port: np.ndarray
    edge_a: np.ndarray
    edge_b: np.ndarray
    off_a: np.ndarray
    off_b: np.ndarray
    edge_orig: np.ndarray
    path_offsets: np.ndarray
    path_nodes: np.ndarray

    @property
    def size(self) -> int:
        return len(self.rank)


def port_offsets(port: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Offset of a port from the node centre as a fraction of the width."""
    count = np.maximum(count, port + 1)
    return (port + 0.5) / count - 0.5


def build_layer_graph(
    rank: np.ndarray,
    width: np.ndarray,
    height: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    src_off: np.ndarray,
    dst_off: np.ndarray,
    src_port: np.ndarray,
    policy: LongEdgePolicy,
    dummy_width: float,
    no_proxy: np.ndarray | None = None,
) -> LayerGraph:
    """``src``/``dst`` are the laid-out edges (reversed ones already flipped, no self
    loops), ``src_off``/``dst_off`` their port offsets.  Edges marked in ``no_proxy``
    (reversed ones: their proxy would stand for the wrong end) always get dummies."""
    n = len(rank)
    m = len(src)
    span = rank[dst] - rank[src]
    outdeg = np.bincount(src, minlength=n)
    use_proxy = (span > policy.max_span) | (
        (outdeg[src] >= policy.fanout) & (span > policy.fanout_span)
    )
    if no_proxy is not None:
        use_proxy &= ~no_proxy
    # Proxies: one per (source, port, rank above the target).
    proxy_edges = np.flatnonzero(use_proxy)
    key_rank = rank[dst[proxy_edges]] - 1
    keys = np.stack([src[proxy_edges], src_port[proxy_edges], key_rank], axis=1)
    if len(keys):
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
    else:
        uniq = np.zeros((0, 3), dtype=np.int64)
        inverse = np.zeros(0, dtype=np.int64)
    n_proxy = len(uniq)
    start = src.copy()
    start[proxy_edges] = n + inverse
    start_off = src_off.copy()
    start_off[proxy_edges] = 0.0

    n_dummy_per_edge = np.where(use_proxy, 0, np.maximum(span - 1, 0))
    n_dummy = int(n_dummy_per_edge.sum())
    plen = n_dummy_per_edge + 2
    path_offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(plen, out=path_offsets[1:])
    total = int(path_offsets[-1])
    path_nodes = np.empty(total, dtype=np.int64)
    interior = np.ones(total, dtype=bool)
    interior[path_offsets[:-1]] = False
    interior[path_offsets[1:] - 1] = False
    dummy_base = n + n_proxy
    path_nodes[path_offsets[:-1]] = start
    path_nodes[path_offsets[1:] - 1] = dst
    path_nodes[interior] = dummy_base + np.arange(n_dummy, dtype=np.int64)
    ramp = np.arange(n_dummy, dtype=np.int64) - np.repeat(
        np.cumsum(n_dummy_per_edge) - n_dummy_per_edge, n_dummy_per_edge
    )
    dummy_rank = np.repeat(rank[src], n_dummy_per_edge) + 1 + ramp

    valid = np.ones(max(total - 1, 0), dtype=bool)
    if m > 1:
        valid[path_offsets[1:-1] - 1] = False
    edge_a = path_nodes[:-1][valid]
    edge_b = path_nodes[1:][valid]
    edge_orig = np.repeat(np.arange(m, dtype=np.int64), plen - 1)
    seg_start = path_offsets[:-1] - np.arange(m)  # index of each edge's first segment
    seg_end = path_offsets[1:] - np.arange(1, m + 1) - 1
    off_a = np.zeros(len(edge_a))
    off_b = np.zeros(len(edge_a))
    off_a[seg_start] = start_off
    off_b[seg_end] = dst_off

    lrank = np.concatenate([rank, uniq[:, 2], dummy_rank]).astype(np.int64)
    lwidth = np.concatenate(
        [width, np.full(n_proxy, policy.proxy_width), np.full(n_dummy, dummy_width)]
    )
    lheight = np.concatenate([height, np.full(n_proxy, policy.proxy_height), np.zeros(n_dummy)])
    kind = np.concatenate(
        [
            np.full(n, KIND_REAL, dtype=np.int8),
            np.full(n_proxy, KIND_PROXY, dtype=np.int8),
            np.full(n_dummy, KIND_DUMMY, dtype=np.int8),
        ]
    )
    return LayerGraph(
        n_real=n,
        rank=lrank,
        width=lwidth.astype(float),
        height=lheight.astype(float),
        kind=kind,
        proxy_source=uniq[:, 0].astype(np.int64),
        proxy_port=uniq[:, 1].astype(np.int64),
        edge_a=edge_a,
        edge_b=edge_b,
        off_a=off_a,
        off_b=off_b,
        edge_orig=edge_orig,
        path_offsets=path_offsets,
        path_nodes=path_nodes,
    )
