"""onnxviz.layout: layered (Sugiyama-style) layout of node-and-edge graphs.

Sizes in, coordinates out; knows nothing of ONNX.  Flat use::

    from onnxviz.layout import LayoutEdge, LayoutNode, LayoutRequest, compute

    request = LayoutRequest(
        nodes=[LayoutNode("x", 80, 36), LayoutNode("relu", 80, 36), LayoutNode("add", 80, 36)],
        edges=[LayoutEdge("x", "relu"), LayoutEdge("relu", "add", 0, 0),
               LayoutEdge("x", "add", 0, 1)],           # (source, target, out port, in port)
        direction="TB",
    )
    result = compute(request, cancel=stop_event.is_set)    # LayoutCancelled if it fires
    box = result.nodes["relu"]           # NodeBox(id, x, y, width, height), top-left based
    for route in result.edges:           # EdgeRoute: Bézier chain, source port -> target port
        path = route.points              # (p0, c1, c2, p1, c1, c2, p2, ...)

Nesting (name-scope groups, subgraph bodies) is the caller's: `onnxviz.present` lays
out each open group or body as a flat graph of its own, innermost first, with a
collapsed group or an open frame entering its parent's layout as one box.  Requests
can be given as columns (`NodeTable`, `EdgeTable`) to skip building 100k small objects.
Long or high fan-out edges start at a `ProxyBox` (``route.proxy``) that names the real
source.

Stages (one module each): cycles, ranking, long_edges (dummies and proxies), ordering
(+ crossings), positioning (Brandes–Köpf), routing, metrics.
"""

from .api import (
    CancelCheck,
    Direction,
    EdgeRoute,
    EdgeTable,
    LayoutCancelled,
    LayoutEdge,
    LayoutError,
    LayoutNode,
    LayoutRequest,
    LayoutResult,
    LongEdgePolicy,
    NodeBox,
    NodeTable,
    ProxyBox,
    Spacing,
)
from .compute import compute

__all__ = [
    "CancelCheck",
    "Direction",
    "EdgeRoute",
    "LayoutCancelled",
    "LayoutEdge",
    "LayoutError",
    "LayoutNode",
    "LayoutRequest",
    "LayoutResult",
    "EdgeTable",
    "LongEdgePolicy",
    "NodeBox",
    "NodeTable",
    "ProxyBox",
    "Spacing",
    "compute",
]
