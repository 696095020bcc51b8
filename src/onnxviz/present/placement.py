"""Place a built scene: lay out every block with `onnxviz.layout.compute`, innermost
first (an expanded group or container enters its parent's layout as one big box), then
give items, blocks and edges absolute coordinates.

Edges whose two ends are direct children of one block follow that block's route; edges
that leave a frame (into an expanded group, out of a subgraph) are drawn as one Bézier
between the real ports.
"""

from __future__ import annotations

from collections.abc import Callable

from onnxviz.layout import LayoutEdge, LayoutNode, LayoutRequest, Spacing, compute
from onnxviz.present.options import (
    GROUP_HEADER,
    GROUP_PAD,
    LINE_H,
    MARKER_W,
    PROXY_H,
    PROXY_W,
    SLOT_GAP,
    SLOT_LABEL_H,
    TITLE_H,
    TextMeasure,
    approximate_width,
)
from onnxviz.present.scene import Block, DisplayEdge, DisplayItem, Point, Scene

_Placed = tuple[
    list[tuple[float, float]],  # item positions (relative to the block)
    dict[int, tuple[Point, ...]],  # layout edge index -> route
    list[tuple[int, int, float, float]],  # proxies: source item index, port, x, y
    float,  # width
    float,  # height
]
SPACING = Spacing(node=22.0, rank=44.0, edge=10.0)
CancelCheck = Callable[[], bool]


class LayoutCache:
    """Layouts of blocks by structure (direction, box sizes, edges by index): the 24
    identical layers of a transformer are laid out once.  One per `Presenter`, so it
    lives and dies with the document shown (and no two windows share one)."""

    LIMIT = 2048

    def __init__(self) -> None:
        self._placed: dict[tuple[object, ...], _Placed] = {}

    def get(self, key: tuple[object, ...]) -> _Placed | None:
        return self._placed.get(key)

    def put(self, key: tuple[object, ...], placed: _Placed) -> None:
        if len(self._placed) >= self.LIMIT:
            self._placed.clear()
        self._placed[key] = placed

    def __len__(self) -> int:
        return len(self._placed)


def place(
    scene: Scene,
    cancel: CancelCheck | None = None,
    measure: TextMeasure | None = None,
    cache: LayoutCache | None = None,
) -> Scene:
    measure = measure or approximate_width
    _layout_block(scene, scene.root, cancel, measure, cache if cache is not None else LayoutCache())
    _assign(scene, scene.root, 0.0, 0.0)
    for edge in scene.edges:
        _route_edge(scene, edge)
    return scene


def _content_size(item: DisplayItem, measure: TextMeasure) -> None:
    """Size of an expanded group frame or container from its (placed) blocks."""
    if item.kind == "group":
        (blk,) = item.blocks
        title_w = measure(item.title, True) + 2 * GROUP_PAD + MARKER_W
        item.width = max(blk.width + 2 * GROUP_PAD, title_w)
        item.height = blk.height + GROUP_HEADER + GROUP_PAD
        return
    header = TITLE_H + (LINE_H if item.subtitle else 0.0)
    widths = [b.width for b in item.blocks]
    inner_w = sum(widths) + SLOT_GAP * (len(widths) - 1)
    label_w = max((measure(b.label, False) for b in item.blocks), default=0.0)
    # the title is centred and the collapse marker sits at the right: room on both sides
    title_w = measure(item.title, True) + 2 * MARKER_W
    item.width = max(inner_w, title_w, label_w) + 2 * GROUP_PAD
    item.height = (
        header + SLOT_LABEL_H + max((b.height for b in item.blocks), default=0) + GROUP_PAD
    )


def _layout_block(
    scene: Scene,
    block: Block,
    cancel: CancelCheck | None,
    measure: TextMeasure,
    cache: LayoutCache,
) -> None:
    for item in block.items:
        if item.expanded and item.blocks:
            for inner in item.blocks:
                _layout_block(scene, inner, cancel, measure, cache)
            _content_size(item, measure)
    if not block.items:
        block.width, block.height = 40.0, 20.0
        return
    items = block.items
    placed = _layout_indexed(scene.direction, items, block.layout_edges, cancel, cache)
    positions, routes_by_edge, proxies, width, height = placed
    for it, (x, y) in zip(items, positions):
        it.x, it.y = x, y  # relative for now
    for k, (source, port, x, y) in enumerate(proxies):
        source_id = items[source].id
        proxy = DisplayItem(
            id=f"{block.id}|proxy:{source_id}:{port}#{k}",
            kind="proxy",
            graph_path=block.graph_path,
            title=items[source].title,  # too small to draw: the tooltip tells it
            value=source_id,
            width=PROXY_W if scene.direction == "TB" else PROXY_H,
            height=PROXY_H if scene.direction == "TB" else PROXY_W,
            x=x,
            y=y,
        )
        block.items.append(proxy)
        scene.items[proxy.id] = proxy
    block.routes = {block.layout_edges[e]: list(points) for e, points in routes_by_edge.items()}
    block.width, block.height = width, height


def _layout_indexed(
    direction: str,
    items: list[DisplayItem],
    layout_edges: list[tuple[str, int, str, int]],
    cancel: CancelCheck | None,
    cache: LayoutCache,
) -> _Placed:
    index = {it.id: i for i, it in enumerate(items)}
    edges = [(index[s], sp, index[t], tp) for (s, sp, t, tp) in layout_edges]
    key = (
        direction,
        tuple((round(it.width, 2), round(it.height, 2)) for it in items),
        tuple(edges),
    )
    found = cache.get(key)
    if found is not None:
        return found
    if len(items) == 1 and not edges:
        placed: _Placed = ([(0.0, 0.0)], {}, [], items[0].width, items[0].height)
    else:
        placed = _run_layout(direction, items, edges, cancel)
    cache.put(key, placed)
    return placed


def _run_layout(
    direction: str,
    items: list[DisplayItem],
    edges: list[tuple[int, int, int, int]],
    cancel: CancelCheck | None,
) -> _Placed:
    ids = [str(i) for i in range(len(items))]
    nodes = [LayoutNode(ids[i], it.width, it.height) for i, it in enumerate(items)]
    request_edges = [LayoutEdge(ids[s], ids[t], sp, tp) for (s, sp, t, tp) in edges]
    result = compute(
        LayoutRequest(nodes=nodes, edges=request_edges, direction=direction, spacing=SPACING),  # type: ignore[arg-type]
        cancel=cancel,
    )
    xy = result.node_xy
    min_x = float(xy[:, 0].min()) if len(xy) else 0.0
    min_y = float(xy[:, 1].min()) if len(xy) else 0.0
    for p in result.proxy_boxes:
        min_x, min_y = min(min_x, p.x), min(min_y, p.y)
    positions: list[tuple[float, float]] = [(0.0, 0.0)] * len(items)
    max_x = max_y = 0.0
    for nid, (x, y) in zip(result.node_ids, xy.tolist()):
        i = int(nid)
        positions[i] = (x - min_x, y - min_y)
        it = items[i]
        max_x, max_y = max(max_x, x - min_x + it.width), max(max_y, y - min_y + it.height)
    proxies = [(int(p.source), p.source_port, p.x - min_x, p.y - min_y) for p in result.proxy_boxes]
    routes: dict[int, tuple[Point, ...]] = {}
    offs = result.route_offsets.tolist()
    pts = result.route_points.tolist()
    for k, (_src, _dst, _sp, _tp, _kind, edge_index, _proxy) in enumerate(result.route_meta):
        seg = tuple((p[0] - min_x, p[1] - min_y) for p in pts[offs[k] : offs[k + 1]])
        routes[edge_index] = seg
        for x, y in seg:
            max_x, max_y = max(max_x, x), max(max_y, y)
    return positions, routes, proxies, max_x, max_y


def _assign(scene: Scene, block: Block, ox: float, oy: float) -> None:
    block.x, block.y = ox, oy
    block.routes = {k: [(x + ox, y + oy) for x, y in v] for k, v in block.routes.items()}
    for item in block.items:
        item.x += ox
        item.y += oy
        if not (item.expanded and item.blocks):
            continue
        if item.kind == "group":
            _assign(scene, item.blocks[0], item.x + GROUP_PAD, item.y + GROUP_HEADER)
            continue
        header = TITLE_H + (LINE_H if item.subtitle else 0.0)
        inner_w = sum(b.width for b in item.blocks) + SLOT_GAP * (len(item.blocks) - 1)
        x = item.x + (item.width - inner_w) / 2
        for inner in item.blocks:
            _assign(scene, inner, x, item.y + header + SLOT_LABEL_H)
            x += inner.width + SLOT_GAP


def port_point(item: DisplayItem, port: int, out: bool, direction: str) -> Point:
    n = max(1, item.ports_out if out else item.ports_in)
    port = min(max(port, 0), n - 1)
    frac = (port + 1) / (n + 1)
    if direction == "LR":
        return (item.x + item.width if out else item.x, item.y + item.height * frac)
    return (item.x + item.width * frac, item.y + item.height if out else item.y)


def _curve(p0: Point, p1: Point, direction: str) -> list[Point]:
    if direction == "LR":
        d = max(24.0, abs(p1[0] - p0[0]) / 2)
        return [p0, (p0[0] + d, p0[1]), (p1[0] - d, p1[1]), p1]
    d = max(24.0, abs(p1[1] - p0[1]) / 2)
    return [p0, (p0[0], p0[1] + d), (p1[0], p1[1] - d), p1]


def _bezier_mid(points: list[Point]) -> Point:
    segments = (len(points) - 1) // 3
    if segments <= 0:
        return points[0] if points else (0.0, 0.0)
    k = (segments - 1) // 2 if segments > 1 else 0
    p0, c1, c2, p1 = points[3 * k : 3 * k + 4]
    t = 0.5 if segments % 2 == 1 else 1.0
    mt = 1 - t
    return (
        mt**3 * p0[0] + 3 * mt * mt * t * c1[0] + 3 * mt * t * t * c2[0] + t**3 * p1[0],
        mt**3 * p0[1] + 3 * mt * mt * t * c1[1] + 3 * mt * t * t * c2[1] + t**3 * p1[1],
    )


def _route_edge(scene: Scene, edge: DisplayEdge) -> None:
    src = scene.items.get(edge.source)
    dst = scene.items.get(edge.target)
    if src is None or dst is None:
        return
    direction = scene.direction
    start = port_point(src, edge.source_port, True, direction)
    end = port_point(dst, edge.target_port, False, direction)
    points: list[Point] | None = None
    if edge.layout_key is not None and edge.block is not None:
        key = edge.layout_key
        route = scene.blocks[edge.block].routes.get(key)
        if route:
            points = list(route)
            # An end inside an expanded frame: the route reaches the frame's border;
            # join the real port to it, so the edge follows the laid-out lane outside.
            if key[0] != edge.source and _far(points[0], start):
                points = _curve(start, points[0], direction)[:3] + points
            if key[2] != edge.target and _far(points[-1], end):
                points = points + _curve(points[-1], end, direction)[1:]
    if not points:
        points = _curve(start, end, direction)
    edge.points = points
    edge.label_pos = _bezier_mid(points)


def _far(a: Point, b: Point) -> bool:
    return abs(a[0] - b[0]) + abs(a[1] - b[1]) > 0.5
