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
        monkeypatch.setattr(cycles, "_scipy_components", lambda: None)
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


@pytest.mark.parametrize("use_scipy", [True, False])
def test_forward_edges_skip_the_component_search_with_the_same_answer(
    use_scipy: bool,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    """Edges that all run forward in node order are acyclic: the shortcut answers
    "reverse nothing", as the component search does for the same DAG numbered backwards."""
    if not use_scipy:
        monkeypatch.setattr(cycles, "_scipy_components", lambda: None)
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(2, 80))
        a, b = rng.integers(0, n, 3 * n), rng.integers(0, n, 3 * n)
        src, dst = np.minimum(a, b), np.maximum(a, b)
        assert not cycles.feedback_edges(n, src, dst).any()
        flipped = cycles.feedback_edges(n, n - 1 - src, n - 1 - dst)  # same DAG, backwards
        assert not flipped.any()


def test_a_back_edge_in_a_forward_graph_is_still_found() -> None:
    src = np.array([0, 1, 2, 3])
    dst = np.array([1, 2, 3, 1])  # 3 -> 1 closes the cycle 1 -> 2 -> 3
    mask = cycles.feedback_edges(4, src, dst)
    assert mask.tolist() == [False, False, False, True]


def _imports_scipy(src: list[int], dst: list[int]) -> tuple[bool, list[bool]]:
    import json
    import subprocess
    import sys

    code = (
        "import json, sys, numpy as np\n"
        "from onnxviz.layout.cycles import feedback_edges\n"
        f"mask = feedback_edges(5, np.array({src}), np.array({dst}))\n"
        "print(json.dumps(['scipy' in sys.modules, mask.tolist()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported, mask = json.loads(out.stdout)
    return imported, mask


def test_an_acyclic_graph_is_laid_out_without_importing_scipy() -> None:
    """A GUI start or a render does not pay scipy's import for an acyclic graph, in
    node order or not; a cyclic one still gets scipy's components (where installed)."""
    assert _imports_scipy([0, 1, 2, 3], [1, 2, 3, 4]) == (False, [False] * 4)
    assert _imports_scipy([4, 3, 2, 1], [3, 2, 1, 0]) == (False, [False] * 4)
    with_scipy = cycles._scipy_components() is not None
    imported, mask = _imports_scipy([0, 1, 2, 3], [1, 2, 3, 1])
    assert imported == with_scipy
    assert mask == [False, False, False, True]
