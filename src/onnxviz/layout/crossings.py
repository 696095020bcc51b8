"""Exact crossing counts between adjacent ranks, vectorised.

Two edges between the same pair of adjacent ranks cross when their upper ends and their
lower ends are in opposite left-to-right order.  Keys may include port offsets, so two
edges leaving different ports of one node are ordered too.  Edges are sorted by
(rank, upper key, lower key) and the inversions of the lower keys are counted per rank:
all pairs at once for small ranks, a bottom-up merge count for wide ones.
"""

from __future__ import annotations

import numpy as np

_PAIRWISE_LIMIT = 48


def count_crossings(upper_rank: np.ndarray, upper_key: np.ndarray, lower_key: np.ndarray) -> int:
    """Total crossings; ``upper_rank`` says which rank gap each edge lies in."""
    if len(upper_rank) < 2:
        return 0
    order = np.lexsort((lower_key, upper_key, upper_rank))
    seg = upper_rank[order]
    vals = lower_key[order]
    n = len(seg)
    boundaries = np.flatnonzero(np.diff(seg)) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [n]))
    sizes = ends - starts
    total = 0
    small = sizes <= _PAIRWISE_LIMIT
    if small.any():
        total += _pairwise(starts[small], sizes[small], vals)
    if (~small).any():
        for s, e in zip(starts[~small].tolist(), ends[~small].tolist()):
            total += _merge_inversions(vals[s:e])
    return total


def _pairwise(starts: np.ndarray, sizes: np.ndarray, vals: np.ndarray) -> int:
    keep = sizes > 1
    starts, sizes = starts[keep], sizes[keep]
    if len(starts) == 0:
        return 0
    # Element indexes of all segments, with the number of later elements in the segment.
    elem = np.repeat(starts, sizes) + _ramp(sizes)
    later = np.repeat(starts + sizes, sizes) - elem - 1
    first = np.repeat(elem, later)
    second = first + 1 + _ramp(later)
    return int(np.count_nonzero(vals[first] > vals[second]))


def _ramp(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for each count c, concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(offsets, counts)


def _merge_inversions(vals: np.ndarray) -> int:
    """Inversions (i < j, vals[i] > vals[j]) by merging blocks of doubling width."""
    n = len(vals)
    pos = np.arange(n, dtype=np.int64)
    total = 0
    width = 1
    while width < n:
        block = pos // (2 * width)
        half = (pos // width) & 1
        order = np.lexsort((half, vals, block))
        g = block[order]
        is_left = (half[order] == 0).astype(np.int64)
        cum = np.cumsum(is_left)
        gstart = np.searchsorted(g, g, side="left")
        left_before = cum - is_left - (cum[gstart] - is_left[gstart])
        left_total = np.bincount(block, weights=(half == 0), minlength=int(block[-1]) + 1)
        right = is_left == 0
        total += int((left_total[g[right]] - left_before[right]).sum())
        width *= 2
    return total
