"""Shared builders for layout tests: synthetic ONNX-shaped graphs from
benchmarks/layout_graphs.py turned into layout requests."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from layout_graphs import GENERATORS, SyntheticGraph
from onnxviz.layout import (
    LayoutEdge,
    LayoutNode,
    LayoutRequest,
    LayoutResult,
)


def flat_request(g: SyntheticGraph, **kw: object) -> LayoutRequest:
    nodes = [LayoutNode(name, *g.node_size(i)) for i, name in enumerate(g.names)]
    edges = [LayoutEdge(g.names[a], g.names[b], sp, tp) for a, b, sp, tp in g.edges]
    return LayoutRequest(nodes, edges, **kw)  # type: ignore[arg-type]


def graph(kind: str, size: int) -> SyntheticGraph:
    return GENERATORS[kind](size)


def on_curve(points: np.ndarray) -> np.ndarray:
    """The points a Bézier chain passes through (every third point)."""
    return points[::3]


def route_arrays(result: LayoutResult, i: int) -> np.ndarray:
    return result.route_points[result.route_offsets[i] : result.route_offsets[i + 1]]


@pytest.fixture(scope="session")
def transformer_1k() -> SyntheticGraph:
    return graph("transformer", 1000)


@pytest.fixture(scope="session")
def resnet_1k() -> SyntheticGraph:
    return graph("resnet", 1000)
