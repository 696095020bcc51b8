"""The display graph: what to draw, as plain data (no Qt).

A `Scene` is a tree of `Block`s (one per shown graph level: a graph, an expanded
name-scope group, each subgraph of an expanded control-flow node or function call) that
hold `DisplayItem`s, plus the `DisplayEdge`s drawn between visible items.  After
`placement.place` every item, block and edge carries absolute coordinates.

Item ids are unique in a scene and stable across rebuilds:

* ``<inst>#<node index>`` an operator node of the graph instance ``inst``;
* ``<inst>|g:<prefix>`` a name-scope group; ``<inst>|in:<name>`` / ``|out:`` /
  ``|outer:`` graph input, output and captured-value pills;

where ``inst`` is the graph path for graphs shown in their own right (``main``,
``main/body:Loop_3``) and ``<call node id>/fn`` for a function body expanded inside a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from onnxviz.model.text import as_text

ItemKind = Literal["op", "input", "output", "outer", "group", "container", "proxy"]
EdgeKind = Literal["data", "captured"]
Point = tuple[float, float]


@dataclass
class InitializerRow:
    """An initializer consumed by a node, listed inside the node box."""

    input_index: int
    label: str  # the schema's formal input name (W, B, ...) or a short name
    name: str  # the initializer's full name
    shape: str  # "64×3×7×7", "scalar"


@dataclass(eq=False)
class DisplayItem:
    id: str
    kind: ItemKind
    graph_path: str  # the graph (scope path) the item belongs to
    title: str
    subtitle: str = ""
    category: str = "other"
    node_index: int | None = None
    value: str | None = None  # pills: the value name; proxies: the source item id
    rows: list[InitializerRow] = field(default_factory=list)
    ports_in: int = 1
    ports_out: int = 1
    width: float = 0.0
    height: float = 0.0
    expandable: bool = False
    expanded: bool = False
    op_count: int = 0  # groups: nodes inside
    group_inputs: list[str] = field(default_factory=list)
    group_outputs: list[str] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)  # expanded: the content
    ancestors: tuple[str, ...] = ()  # expanded group ids (same graph) around the item
    parent: str | None = None  # id of the frame (group/container) drawn around it
    depth: int = 0  # nesting depth of frames around the item
    x: float = 0.0
    y: float = 0.0
    missing: bool = False  # an "outer" pill for a name defined nowhere

    def __post_init__(self) -> None:
        # Op types and names that are not UTF-8 come from protobuf as bytes: shown escaped.
        if not isinstance(self.title, str):
            self.title = as_text(self.title)
        if not isinstance(self.subtitle, str):
            self.subtitle = as_text(self.subtitle)

    def rect(self) -> tuple[float, float, float, float]:
        return (self.x, self.y, self.width, self.height)


@dataclass(eq=False)
class Block:
    """One laid-out level: the direct children of a graph, group or subgraph slot."""

    id: str
    graph_path: str
    label: str = ""  # subgraph slots: the attribute name ("then_branch")
    items: list[DisplayItem] = field(default_factory=list)
    # (source id, source port, target id, target port) among `items`
    layout_edges: list[tuple[str, int, str, int]] = field(default_factory=list)
    x: float = 0.0
    y: float = 0.0
    width: float = 0.0
    height: float = 0.0
    routes: dict[tuple[str, int, str, int], list[Point]] = field(default_factory=dict)


@dataclass(eq=False)
class DisplayEdge:
    source: str
    source_port: int
    target: str
    target_port: int
    value: str
    graph_path: str  # graph of the consumer
    label: str = ""  # "float32[1,3,224,224]"
    inferred: bool = False
    kind: EdgeKind = "data"
    layout_key: tuple[str, int, str, int] | None = None  # the route in `block`
    block: str | None = None
    points: list[Point] = field(default_factory=list)  # Bézier chain, absolute
    label_pos: Point = (0.0, 0.0)


@dataclass(eq=False)
class Scene:
    root: Block
    items: dict[str, DisplayItem]
    edges: list[DisplayEdge]
    blocks: dict[str, Block]
    root_path: str
    direction: str = "TB"
    # per graph instance: value name -> (visible item id, port) of its producer
    producers: dict[str, Mapping[str, tuple[str, int]]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def width(self) -> float:
        return self.root.width

    @property
    def height(self) -> float:
        return self.root.height

    def items_of_kind(self, *kinds: str) -> list[DisplayItem]:
        return [it for it in self.items.values() if it.kind in kinds]

    def edges_of(self, item_id: str) -> list[DisplayEdge]:
        return [e for e in self.edges if e.source == item_id or e.target == item_id]
