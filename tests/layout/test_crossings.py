"""Exact crossing counting against a brute-force count."""

from __future__ import annotations

import numpy as np

from onnxviz.layout.crossings import count_crossings


def brute(rank: np.ndarray, upper: np.ndarray, lower: np.ndarray) -> int:
    total = 0
    for i in range(len(rank)):
        for j in range(len(rank)):
            if rank[i] == rank[j] and upper[i] < upper[j] and lower[i] > lower[j]:
                total += 1
    return total


def test_counts_match_brute_force_on_random_rank_gaps() -> None:
    rng = np.random.default_rng(7)
    for _ in range(60):
        m = int(rng.integers(0, 90))
        rank = rng.integers(0, 3, m)
        upper = rng.integers(0, 12, m).astype(float)
        lower = rng.integers(0, 12, m).astype(float)
        assert count_crossings(rank, upper, lower) == brute(rank, upper, lower)


def test_wide_rank_gap_uses_merge_count_and_agrees() -> None:
    rng = np.random.default_rng(3)
    m = 400  # above the pairwise limit: exercises the merge-based count
    rank = np.zeros(m, dtype=np.int64)
    upper = rng.random(m)
    lower = rng.random(m)
    assert count_crossings(rank, upper, lower) == brute(rank, upper, lower)


def test_edges_sharing_an_end_do_not_cross() -> None:
    rank = np.zeros(3, dtype=np.int64)
    # Fan-out from one upper node, and two edges into the same lower port.
    assert count_crossings(rank, np.array([0.0, 0.0, 0.0]), np.array([2.0, 0.0, 1.0])) == 0
    two = rank[:2]
    assert count_crossings(two, np.array([0.0, 1.0]), np.array([1.0, 1.0])) == 0
    assert count_crossings(two, np.array([0.0, 1.0]), np.array([1.0, 0.0])) == 1
