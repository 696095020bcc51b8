"""Request and result types of the layout engine.

Everything here is plain data.  Coordinates follow screen conventions: x grows to the
right, y grows downwards, a box is given by its top-left corner plus width and height.
For ``direction="TB"`` ranks are stacked downwards and edges run from the bottom side of
their source to the top side of their target; for ``direction="LR"`` ranks are stacked to
the right and edges run from the right side of the source to the left side of the target.

Ports are integer indexes.  The source port of an edge is the output index of the
producing node, the target port is the input index of the consuming node (for ONNX: the
position of the value in ``node.input``).  Ports are spread evenly along the side of a
node, port 0 on the left (TB) or top (LR), so the layout keeps input 0 on the left.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Literal

import numpy as np

Direction = Literal["TB", "LR"]
CancelCheck = Callable[[], bool]
"""Called now and then during a layout; returning True aborts it with `LayoutCancelled`.

A ``threading.Event`` works through its ``is_set`` method: ``cancel=event.is_set``.
"""


class LayoutError(ValueError):
    """The request cannot be laid out (unknown node id, negative size, ...)."""


class LayoutCancelled(Exception):
    """The caller's cancel check returned True; no partial result is given."""


@dataclasses.dataclass(frozen=True, slots=True)
class LayoutNode:
    """A box to place.

    ``id`` must be unique.  ``inputs``/``outputs`` are the numbers of ports on the target
    and source sides; when left at 0 they are taken from the highest port index used by an
    edge plus one.
    """

    id: str
    width: float
    height: float
    inputs: int = 0
    outputs: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class LayoutEdge:
    """A connection from output ``source_port`` of ``source`` to input ``target_port`` of
    ``target``.  Several edges may share a source (fan-out)."""

    source: str
    target: str
    source_port: int = 0
    target_port: int = 0


class NodeTable(Sequence[LayoutNode]):
    """Nodes given as columns, for large graphs: no per-node object is made unless asked.
    Behaves as a read-only sequence of `LayoutNode`."""

    def __init__(
        self,
        ids: Sequence[str],
        width: np.ndarray,
        height: np.ndarray,
        inputs: np.ndarray | None = None,
        outputs: np.ndarray | None = None,
    ) -> None:
        n = len(ids)
        self.ids = list(ids)
        self.width = np.asarray(width, dtype=float).reshape(n)
        self.height = np.asarray(height, dtype=float).reshape(n)
        zeros = np.zeros(n, dtype=np.int64)
        self.inputs = zeros if inputs is None else np.asarray(inputs, dtype=np.int64).reshape(n)
        self.outputs = zeros if outputs is None else np.asarray(outputs, dtype=np.int64).reshape(n)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return LayoutNode(
            self.ids[i],
            float(self.width[i]),
            float(self.height[i]),
            int(self.inputs[i]),
            int(self.outputs[i]),
        )


class EdgeTable(Sequence[LayoutEdge]):
    """Edges given as columns of node positions (indexes into the request's nodes)."""

    def __init__(
        self,
        node_ids: Sequence[str],
        source: np.ndarray,
        target: np.ndarray,
        source_port: np.ndarray | None = None,
        target_port: np.ndarray | None = None,
    ) -> None:
        self.node_ids = node_ids
        self.source = np.asarray(source, dtype=np.int64).reshape(-1)
        m = len(self.source)
        self.target = np.asarray(target, dtype=np.int64).reshape(m)
        zeros = np.zeros(m, dtype=np.int64)
        self.source_port = (
            zeros if source_port is None else np.asarray(source_port, dtype=np.int64).reshape(m)
        )
        self.target_port = (
            zeros if target_port is None else np.asarray(target_port, dtype=np.int64).reshape(m)
        )

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return LayoutEdge(
            self.node_ids[int(self.source[i])],
            self.node_ids[int(self.target[i])],
            int(self.source_port[i]),
            int(self.target_port[i]),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Spacing:
    """Distances, in the same unit as node sizes.

    ``node`` separates neighbouring boxes in a rank, ``rank`` separates ranks, ``edge``
    separates edge lanes (long-edge dummy points) from each other and from boxes.
    """

    node: float = 24.0
    rank: float = 40.0
    edge: float = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class LongEdgePolicy:
    """When an edge is drawn as a proxy instead of a chain of dummy points.

    An edge spanning more than ``max_span`` ranks, or one spanning more than
    ``fanout_span`` ranks whose source feeds at least ``fanout`` consumers (attention
    masks, position ids, rotary caches), ends in a small proxy box placed just above the
    target; the proxy names its source so the UI can offer a jump to it.
    """

    max_span: int = 48
    fanout: int = 6
    fanout_span: int = 3
    proxy_width: float = 16.0
    proxy_height: float = 12.0


@dataclasses.dataclass(frozen=True, slots=True)
class LayoutRequest:
    """What to lay out: one flat graph of boxes.  ``crossing_sweeps`` bounds the
    crossing-reduction effort.  (Nesting is the caller's: `onnxviz.present` lays out each
    open group or subgraph as a graph of its own, innermost first.)"""

    nodes: Sequence[LayoutNode]
    edges: Sequence[LayoutEdge] = ()
    direction: Direction = "TB"
    spacing: Spacing = Spacing()
    long_edges: LongEdgePolicy = LongEdgePolicy()
    crossing_sweeps: int = 12


@dataclasses.dataclass(frozen=True, slots=True)
class NodeBox:
    """A placed node: top-left corner and size."""

    id: str
    x: float
    y: float
    width: float
    height: float


@dataclasses.dataclass(frozen=True, slots=True)
class ProxyBox:
    """A stand-in for the far-away ``source`` of a long or high fan-out edge, placed just
    above its consumers; the UI draws it small and offers a jump to ``source``."""

    id: str
    source: str
    source_port: int
    x: float
    y: float
    width: float
    height: float


EdgeKind = Literal["normal", "proxy", "reversed", "self"]


@dataclasses.dataclass(frozen=True, slots=True)
class EdgeRoute:
    """The drawn path of one edge as a cubic Bézier chain.

    ``points`` holds ``3k+1`` points: start, then (control 1, control 2, end) for each
    of the ``k`` segments.  The path starts at the source port and ends at the target
    port (or at the proxy box that stands for the source).  ``kind`` is ``"proxy"`` when
    the path starts at a `ProxyBox` (``proxy`` names it), ``"reversed"`` when the edge
    closes a cycle and was laid out upside down, and ``"self"`` for a loop.
    ``edge_index`` is the position of the request edge drawn by this route.
    """

    source: str
    target: str
    source_port: int
    target_port: int
    points: tuple[tuple[float, float], ...]
    kind: EdgeKind = "normal"
    edge_index: int = -1
    proxy: str | None = None


@dataclasses.dataclass(eq=False)
class LayoutResult:
    """A finished layout.

    The per-item views (`nodes`, `edges`, `proxies`) are built on first access
    from the compact arrays, so a caller that draws from the arrays pays nothing for them.

    Arrays (TB or LR already applied):
      * ``node_ids``, ``node_xy`` (n, 2) top-left corners, ``node_size`` (n, 2);
      * ``route_offsets`` (m + 1,) and ``route_points`` (total, 2): the points of route
        ``i`` are ``route_points[route_offsets[i]:route_offsets[i + 1]]``;
      * ``ranks``: rank of each placed node (flat layouts; -1 where not meaningful).
    ``timings`` maps stage name to seconds; ``stats`` carries counts such as
    ``dummies``, ``proxies``, ``crossings``, ``reversed_edges``.
    """

    node_ids: list[str]
    node_xy: np.ndarray
    node_size: np.ndarray
    ranks: np.ndarray
    route_meta: list[tuple[str, str, int, int, EdgeKind, int, str | None]]
    route_offsets: np.ndarray
    route_points: np.ndarray
    proxy_boxes: list[ProxyBox]
    width: float
    height: float
    direction: Direction = "TB"
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    stats: dict[str, int] = dataclasses.field(default_factory=dict)

    @cached_property
    def nodes(self) -> dict[str, NodeBox]:
        """Placed nodes by id."""
        xy = self.node_xy.tolist()
        size = self.node_size.tolist()
        return {
            nid: NodeBox(nid, p[0], p[1], s[0], s[1]) for nid, p, s in zip(self.node_ids, xy, size)
        }

    @cached_property
    def proxies(self) -> dict[str, ProxyBox]:
        return {p.id: p for p in self.proxy_boxes}

    @cached_property
    def edges(self) -> list[EdgeRoute]:
        """One route per drawn edge, in a deterministic order."""
        pts = self.route_points.tolist()
        offs = self.route_offsets.tolist()
        out = []
        for i, (src, dst, sp, tp, kind, index, proxy) in enumerate(self.route_meta):
            seg = tuple((p[0], p[1]) for p in pts[offs[i] : offs[i + 1]])
            out.append(EdgeRoute(src, dst, sp, tp, seg, kind, index, proxy))
        return out

    def box(self, item_id: str) -> tuple[float, float, float, float]:
        """(x, y, width, height) of a node or proxy by id."""
        if item_id in self.nodes:
            b = self.nodes[item_id]
            return (b.x, b.y, b.width, b.height)
        p = self.proxies[item_id]
        return (p.x, p.y, p.width, p.height)
