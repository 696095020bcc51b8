"""Cycle breaking, with scipy's components and with the pure fallback."""

from __future__ import annotations

import numpy as np
import pytest

from onnxviz.layout import cycles
from onnxviz.layout.ranking import rank_nodes


def random_graph(seed: int) -> tuple[int, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    m = int(rng.integers(0, 3 * n))
    return n, rng.integers(0, n, m), rng.integers(0, n, m)


@pytest.mark.parametrize("use_scipy", [True, False])
def test_reversing_feedback_edges_leaves_a_dag(use_scipy: bool, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    if not use_scipy:
        monkeypatch.setattr(cycles, "connected_components", None)
    for seed in range(40):
        n, src, dst = random_graph(seed)
        mask = cycles.feedback_edges(n, src, dst)
        assert not mask[src == dst].any()
        a = np.where(mask, dst, src)
        b = np.where(mask, src, dst)
        keep = a != b
        rank_nodes(n, a[keep], b[keep])  # raises ValueError on a cycle


def test_acyclic_graph_reverses_nothing() -> None:
    src = np.array([0, 1, 1, 2])
    dst = np.array([1, 2, 3, 3])
    assert not cycles.feedback_edges(4, src, dst).any()
