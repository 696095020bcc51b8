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

Hierarchical use (groups from name scopes, collapsed groups drawn as one box)::

    groups, parents = groups_from_scopes(node_names)      # "/model/layers.7/attn/MatMul"
    nodes = [LayoutNode(name, w, h, parent=parents[i]) for i, name in enumerate(node_names)]
    session = LayoutSession(LayoutRequest(nodes, edges, groups), expanded=())
    view = session.result()              # top-level groups as boxes: view.groups[...]
    session.expand("/model/layers.7")    # re-lays out only that group and its ancestors
    view = session.result()

In a hierarchical result a collapsed group is a `GroupBox` with ``expanded=False`` (and is
not in ``result.nodes``); an open group is a frame around its children.  Edges whose end
is hidden inside a collapsed group are drawn to the group box (``kind="lifted"``; several
request edges merged into one route carry ``count``).  Request edges can also be given as
columns (`NodeTable`, `EdgeTable`) to skip building 100k small objects.  Long or high
fan-out edges start at a `ProxyBox` (``route.proxy``) that names the real source.

Stages (one module each): cycles, ranking, long_edges (dummies and proxies), ordering
(+ crossings), positioning (Brandes–Köpf), routing, hierarchy (+ scopes), metrics.
"""

from .api import (
    CancelCheck,
    Direction,
    EdgeRoute,
    EdgeTable,
    GroupBox,
    LayoutCancelled,
    LayoutEdge,
    LayoutError,
    LayoutGroup,
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
from .hierarchy import LayoutSession
from .scopes import groups_from_scopes

__all__ = [
    "CancelCheck",
    "Direction",
    "EdgeRoute",
    "GroupBox",
    "LayoutCancelled",
    "LayoutEdge",
    "LayoutError",
    "LayoutGroup",
    "LayoutNode",
    "LayoutRequest",
    "LayoutResult",
    "EdgeTable",
    "LongEdgePolicy",
    "NodeBox",
    "NodeTable",
    "ProxyBox",
    "Spacing",
    "LayoutSession",
    "compute",
    "groups_from_scopes",
]
