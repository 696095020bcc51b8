"""`Presenter`: the Qt-free state behind a canvas (which graph is the root, what is
expanded, view options) and `display_graph`, the one call that turns it into a placed
`Scene`.  The UI runs `display_graph` in a worker thread."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from onnxviz.model.document import Document
from onnxviz.model.node_id import NodeId, group_item_id, split_group_id
from onnxviz.model.scopes import GraphScope
from onnxviz.present.build import SceneBuilder
from onnxviz.present.groups import GroupTree, attach_constants, build_group_tree
from onnxviz.present.options import TextMeasure, ViewOptions
from onnxviz.present.placement import LayoutCache, place
from onnxviz.present.scene import Scene
from onnxviz.present.typeinfo import TypeTable, declared_types
from onnxviz.present.visible import UseTable

CancelCheck = Callable[[], bool]

# Default expansion: small graphs open fully; bigger ones open groups breadth-first
# while the number of visible boxes stays under this budget.
SMALL_GRAPH_NODES = 1500
VISIBLE_BUDGET = 400


@dataclass
class Presenter:
    """What one canvas shows of a document: the root graph, the expanded groups and
    bodies, view options, the type table, and the caches kept across rebuilds (group
    trees, use tables, block layouts).  `display_graph` turns it into a placed Scene."""

    doc: Document
    options: ViewOptions = field(default_factory=ViewOptions)
    root_path: str = "main"
    expanded: set[str] = field(default_factory=set)
    schema_expanded: set[str] = field(default_factory=set)
    types: TypeTable | None = None
    group_trees: dict[str, GroupTree] = field(default_factory=dict)
    # per graph: its uses as arrays (rebuilt when the graph's index changes)
    use_tables: dict[str, UseTable] = field(default_factory=dict)
    layout_cache: LayoutCache = field(default_factory=LayoutCache)

    def __post_init__(self) -> None:
        if self.types is None:
            self.types = declared_types(self.doc.model, self.doc.scopes())

    # -- groups ----------------------------------------------------------------------
    def group_tree(self, scope: GraphScope) -> GroupTree:
        tree = self.group_trees.get(scope.path)
        if tree is None:
            tree = self.group_trees[scope.path] = build_group_tree(scope.nodes)
            if tree.groups:
                attach_constants(tree, scope.nodes, scope.consumers, set(scope.initializer_names()))
        return tree

    def default_expansion(self, inst: str | None = None) -> set[str]:
        """Groups to open when a graph is first shown (see module constants)."""
        scope = self.doc.scope(inst or self.root_path)
        inst = inst or scope.path
        tree = self.group_tree(scope)
        if len(scope.nodes) <= SMALL_GRAPH_NODES:
            return {f"{inst}|g:{p}" for p in tree.groups}
        opened: set[str] = set()
        visible = len(tree.top) + sum(1 for g in tree.node_group if g is None)
        queue = list(tree.top)
        while queue:
            prefix = queue.pop(0)
            grp = tree.groups[prefix]
            grown = visible - 1 + len(grp.children) + len(grp.nodes)
            if grown > VISIBLE_BUDGET:
                break
            visible = grown
            opened.add(f"{inst}|g:{prefix}")
            queue.extend(grp.children)
        return opened

    def all_group_ids(self) -> set[str]:
        """Every name-scope group of the root graph and of the bodies now expanded."""
        out: set[str] = set()
        root = self.doc.scope(self.root_path)
        for scope in [root, *root.descendants()]:
            inst = scope.path
            out.update(f"{inst}|g:{p}" for p in self.group_tree(scope).groups)
        return out

    def all_body_ids(self) -> set[str]:
        """Every node under the root that can show a body inline (subgraphs, calls of
        model-local functions), at any depth of subgraphs."""
        out: set[str] = set()
        functions = {(f.domain, f.name) for f in self.doc.model.functions}
        root = self.doc.scope(self.root_path)
        for scope in [root, *root.descendants()]:
            for child in scope.children:
                out.add(f"{scope.path}#{child.owner_node_index}")
            if functions:
                for i, node in enumerate(scope.nodes):
                    if (node.domain, node.op_type) in functions:
                        out.add(f"{scope.path}#{i}")
        return out

    def open_all_bodies(self, max_rounds: int = 6, max_items: int = 50_000) -> int:
        """Expand every Loop/If/Scan and every call of a model-local function under the
        root, including calls inside function bodies opened on the way (``max_rounds``
        levels of those: a function may call itself).  Returns how many were opened."""
        before = len(self.expanded)
        self.expanded |= self.all_body_ids()
        assert self.types is not None
        for _ in range(max_rounds):
            scene = SceneBuilder(
                self.doc,
                self.root_path,
                self.expanded,
                self.options,
                self.types,
                group_trees=self.group_trees,
                schema_expanded=self.schema_expanded,
                use_tables=self.use_tables,
            ).build()
            closed = {
                it.id
                for it in scene.items.values()
                if it.kind == "op" and it.expandable and it.id not in self.expanded
            }
            if not closed or len(scene.items) > max_items:
                break
            self.expanded |= closed
        return len(self.expanded) - before

    # -- state changes -------------------------------------------------------------------
    def toggle(self, item_id: str) -> bool:
        """Expand or collapse a group or a body-holding node; returns the new state."""
        if item_id in self.expanded:
            self.expanded.discard(item_id)
            return False
        self.expanded.add(item_id)
        # opening a group inside a closed one opens the way to it
        group = split_group_id(item_id)
        if group is not None:
            inst, prefix = group
            try:
                tree = self.group_tree(self.doc.scope(inst))
            except KeyError:
                return True
            found = tree.groups.get(prefix)
            if found is not None:
                self.expanded.update(group_item_id(inst, p) for p in tree.chain(found.parent))
        return True

    def set_root(self, path: str) -> None:
        self.root_path = path
        self.expanded |= self.default_expansion(path)

    def reveal(self, graph_path: str, node_index: int | None) -> str | None:
        """Expand what hides a node (or, with ``node_index`` None, the graph itself):
        the bodies on the way from the root and the name-scope groups around it.
        Returns the id of the item that shows it, or None when it cannot be shown
        from the current root (the caller changes the root first)."""
        target = self.doc.scope(graph_path)
        chain: list[GraphScope] = [target]
        while chain[-1].path != self.root_path:
            parent = chain[-1].parent
            if parent is None:
                return None
            chain.append(parent)
        chain.reverse()
        for outer, inner in zip(chain, chain[1:]):
            owner = inner.owner_node_index
            assert owner is not None
            self._reveal_node(outer, owner)
            self.expanded.add(NodeId(outer.path, owner).item_id)
        if node_index is None:
            return NodeId(target.path, 0).item_id if target.nodes else None
        return self._reveal_node(target, node_index)

    def _reveal_node(self, scope: GraphScope, index: int) -> str:
        tree = self.group_tree(scope)
        for prefix in tree.chain(tree.node_group[index]):
            self.expanded.add(group_item_id(scope.path, prefix))
        return NodeId(scope.path, index).item_id

    def with_options(self, **changes: object) -> None:
        self.options = replace(self.options, **changes)  # type: ignore[arg-type]


def display_graph(
    presenter: Presenter,
    measure: TextMeasure | None = None,
    cancel: CancelCheck | None = None,
) -> Scene:
    """Build and place the scene for the presenter's current state."""
    t0 = time.perf_counter()
    assert presenter.types is not None
    builder = SceneBuilder(
        presenter.doc,
        presenter.root_path,
        presenter.expanded,
        presenter.options,
        presenter.types,
        measure=measure,
        group_trees=presenter.group_trees,
        cancel=cancel,
        schema_expanded=presenter.schema_expanded,
        use_tables=presenter.use_tables,
    )
    scene = builder.build()
    t1 = time.perf_counter()
    place(scene, cancel=cancel, measure=measure, cache=presenter.layout_cache)
    scene.timings = {"build": t1 - t0, "place": time.perf_counter() - t1}
    return scene
