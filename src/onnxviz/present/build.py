"""Build the display graph (`scene.Scene`, not yet placed) of one root graph.

Visible items follow the expansion state: a name-scope group is one box unless its id is
in ``expanded``; an If/Loop/Scan node or a call of a model-local function shows its
bodies inside itself when its id is in ``expanded``.  Edges join *visible* items: an
edge into a collapsed group ends at the group box (one edge per value), a value used
inside a subgraph but produced outside is drawn as a "captured" edge from its outer
producer (or, when the subgraph is the root of the view, from an ``outer`` pill).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from onnx import FunctionProto, ModelProto, NodeProto, TensorProto, TypeProto

from onnxviz.model.document import Document
from onnxviz.model.scopes import GraphScope, build_scopes, function_path
from onnxviz.model.text import as_text
from onnxviz.present.categories import category_of
from onnxviz.present.groups import GroupTree, attach_constants, build_group_tree
from onnxviz.present.options import (
    LINE_H,
    MARKER_W,
    MIN_NODE_W,
    PAD_X,
    PILL_H,
    ROW_H,
    TITLE_H,
    TextMeasure,
    ViewOptions,
    approximate_width,
    elide,
)
from onnxviz.present.scene import Block, DisplayEdge, DisplayItem, InitializerRow, Scene
from onnxviz.present.typeinfo import TypeTable
from onnxviz.present.visible import (
    UseTable,
    VisibleProducers,
    use_table,
    uses_to_walk,
    visible_codes,
)

CancelCheck = Callable[[], bool]


class BuildCancelled(Exception):
    pass


# Graphs with more inputs than this place each input near its uses (see `_build_graph`).
FEW_INPUTS = 8


def _shape_text(dims: Iterable[int]) -> str:
    dims = list(dims)
    return "×".join(str(d) for d in dims) if dims else "scalar"


@dataclass
class _Graph:
    """What the builder needs from a graph: a scope plus its instance id."""

    scope: GraphScope
    inst: str
    outer: Mapping[str, tuple[str, int]] | None  # captured names -> outer producers
    is_root: bool


@dataclass
class SchemaCache:
    opsets: dict[str, int]
    _inputs: dict[tuple[str, str], list[str] | None] = field(default_factory=dict)

    def input_names(self, node: NodeProto) -> list[str] | None:
        key = (node.domain, node.op_type)
        if key not in self._inputs:
            self._inputs[key] = None
            try:
                import onnx.defs

                domain = "" if node.domain == "ai.onnx" else node.domain
                version = self.opsets.get(domain, 10_000)
                schema = onnx.defs.get_schema(node.op_type, version, domain)
                self._inputs[key] = [p.name for p in schema.inputs]
            except Exception:
                pass
        return self._inputs[key]


def schema_function_body(
    model: ModelProto, node: NodeProto, input_types: list[TypeProto | None] | None = None
) -> FunctionProto | None:
    """The schema's function body of a standard op (e.g. LayerNormalization), if any.
    Context-dependent bodies are built for the node's input types (float32 tensors
    where a type is unknown)."""
    try:
        import onnx.defs

        domain = "" if node.domain == "ai.onnx" else node.domain
        opsets = {o.domain if o.domain != "ai.onnx" else "": o.version for o in model.opset_import}
        schema = onnx.defs.get_schema(node.op_type, opsets.get(domain, 10_000), domain)
        fp = FunctionProto()
        if schema.has_function:
            fp.CopyFrom(schema.function_body)
        elif schema.has_context_dependent_function:
            types = []
            for k in range(len(node.input)):
                tp = input_types[k] if input_types and k < len(input_types) else None
                if tp is None:
                    tp = TypeProto()
                    tp.tensor_type.elem_type = TensorProto.FLOAT
                types.append(tp.SerializeToString())
            fp.ParseFromString(
                schema.get_context_dependent_function(node.SerializeToString(), types)
            )
        else:
            return None
    except Exception:
        return None
    if not fp.name:
        fp.name = node.op_type
    fp.domain = fp.domain or "onnx.schema"
    return fp


class SceneBuilder:
    """Builds the `Scene` of one root graph for one expansion state (`build`): the blocks,
    the visible items and the edges between them, not yet placed (placement.py does
    that).  Reuses the caller's group trees and use tables across rebuilds; one builder
    per build."""

    def __init__(
        self,
        doc: Document,
        root_path: str,
        expanded: set[str],
        options: ViewOptions,
        types: TypeTable,
        measure: TextMeasure | None = None,
        group_trees: dict[str, GroupTree] | None = None,
        cancel: CancelCheck | None = None,
        schema_expanded: set[str] | None = None,
        use_tables: dict[str, UseTable] | None = None,
        walk_every_use: bool = False,
    ) -> None:
        self.doc = doc
        self.root_path = root_path
        self.expanded = expanded
        self.schema_expanded = schema_expanded or set()
        self.options = options
        self.types = types
        self.measure = measure or approximate_width
        self.group_trees = group_trees if group_trees is not None else {}
        self.use_tables = use_tables if use_tables is not None else {}
        self.walk_every_use = walk_every_use  # the plain path, for differential tests
        self.cancel = cancel
        self.items: dict[str, DisplayItem] = {}
        self.blocks: dict[str, Block] = {}
        self.edges: list[DisplayEdge] = []
        self.producers: dict[str, Mapping[str, tuple[str, int]]] = {}
        self.schemas = SchemaCache(
            {o.domain if o.domain != "ai.onnx" else "": o.version for o in doc.model.opset_import}
        )
        self._children: dict[str, dict[tuple[int, str], GraphScope]] = {}
        # (domain, name, overload): two overloads of one function are two functions
        self._functions = {
            (f.domain, f.name, getattr(f, "overload", "")): function_path(f)
            for f in doc.model.functions
        }
        self._width_cache: dict[tuple[str, bool], float] = {}
        self._init_index: dict[str, dict[str, TensorProto]] = {}

    # -- helpers ------------------------------------------------------------------
    def _w(self, text: str, bold: bool = False) -> float:
        key = (text, bold)
        w = self._width_cache.get(key)
        if w is None:
            w = self._width_cache[key] = self.measure(text, bold)
        return w

    def group_tree(self, scope: GraphScope) -> GroupTree:
        tree = self.group_trees.get(scope.path)
        if tree is None:
            tree = self.group_trees[scope.path] = build_group_tree(scope.nodes)
            if tree.groups:
                attach_constants(tree, scope.nodes, scope.consumers, set(scope.initializer_names()))
        return tree

    def _use_table(self, scope: GraphScope, tree: GroupTree) -> UseTable:
        table = self.use_tables.get(scope.path)
        revision = self.doc.revision
        if table is None or not table.fits(scope, tree, revision):
            table = use_table(scope, tree, revision)
            self.use_tables[scope.path] = table
        return table

    def _child_scopes(self, scope: GraphScope) -> dict[tuple[int, str], GraphScope]:
        table = self._children.get(scope.path)
        if table is None:
            table = {}
            for child in scope.children:
                assert child.owner_node_index is not None and child.owner_attribute is not None
                table[(child.owner_node_index, child.owner_attribute)] = child
            self._children[scope.path] = table
        return table

    def initializer(self, scope: GraphScope, name: str) -> TensorProto | None:
        """The initializer ``name`` seen from ``scope`` (outer graphs included)."""
        s: GraphScope | None = scope
        while s is not None:
            table = self._init_index.get(s.path)
            if table is None:
                uses = self.use_tables.get(s.path)
                kept = uses is not None and uses.revision == self.doc.revision
                if kept and uses.tensors is not None:  # type: ignore[union-attr]
                    table = uses.tensors  # type: ignore[union-attr]
                else:
                    graph = s.graph
                    table = {t.name: t for t in graph.initializer} if graph is not None else {}
                    if kept:
                        uses.tensors = table  # type: ignore[union-attr]
                self._init_index[s.path] = table  # type: ignore[assignment]
            if name in table:
                return table[name]
            if name in s.definitions:
                return None
            s = s.parent
        return None

    def _is_outer_initializer(self, scope: GraphScope, name: str) -> bool:
        owner = scope.lookup(name)
        if owner is None or owner is scope:
            return False
        kinds = owner.definitions.get(name)
        return kinds is not None and kinds[0].kind in ("initializer", "sparse_initializer")

    def _check_cancel(self) -> None:
        if self.cancel is not None and self.cancel():
            raise BuildCancelled()

    # -- entry ----------------------------------------------------------------------
    def build(self) -> Scene:
        scope = self.doc.scope(self.root_path)
        root = self._build_graph(_Graph(scope, scope.path, None, True), depth=0, parent=None)
        return Scene(
            root=root,
            items=self.items,
            edges=self.edges,
            blocks=self.blocks,
            root_path=self.root_path,
            direction=self.options.direction,
            producers=self.producers,
        )

    # -- one graph instance --------------------------------------------------------------
    def _build_graph(self, g: _Graph, depth: int, parent: str | None, label: str = "") -> Block:
        self._check_cancel()
        scope, inst = g.scope, g.inst
        nodes = scope.nodes
        tree = self.group_tree(scope)
        expanded = self.expanded
        # Visible collapsed ancestor of each group (None: the group is expanded and all
        # groups around it too).
        vis_group: dict[str, str | None] = {}
        stand_prefix: dict[str, str | None] = {}
        for prefix, grp in tree.groups.items():  # parents come before children
            up = stand_prefix.get(grp.parent) if grp.parent is not None else None
            gid = f"{inst}|g:{prefix}"
            stand_prefix[prefix] = up if up is not None else (None if gid in expanded else prefix)
            vis_group[prefix] = (
                None if stand_prefix[prefix] is None else f"{inst}|g:{stand_prefix[prefix]}"
            )
        node_group = tree.node_group
        table = self._use_table(scope, tree)
        initializers = table.initializers
        # The box showing each node as a number (see present.visible), and its item id.
        group_prefixes = list(tree.groups)
        stand_in = np.fromiter(
            (
                table.group_number[q] if (q := stand_prefix[p]) is not None else -1
                for p in group_prefixes
            ),
            dtype=np.int64,
            count=len(group_prefixes),
        )
        codes = visible_codes(table, stand_in)
        n_nodes = len(codes)

        def vis_id(code: int) -> str:
            return (
                f"{inst}#{code}" if code < n_nodes else f"{inst}|g:{group_prefixes[code - n_nodes]}"
            )

        input_names = [n for n in scope.input_names() if n not in initializers]
        # Producers: value -> (visible item, port); a collapsed group's output port is
        # assigned when used from outside.
        inputs = {name: (f"{inst}|in:{name}", 0) for name in input_names}
        producers = VisibleProducers(inputs, scope.producer, codes, vis_id)
        self.producers[inst] = producers
        group_out: dict[str, dict[str, int]] = {}
        group_in: dict[str, dict[str, int]] = {}  # group -> value -> first node using it

        def out_port(src: str, port: int, name: str) -> int:
            if port >= 0:
                return port
            ports = group_out.setdefault(src, {})
            if name not in ports:
                ports[name] = len(ports)
            return ports[name]

        # Edges (draw level) and captured names.
        pending: list[tuple[str, int, str, int, str, str]] = []  # src, sp, dst, dp, value, kind
        seen_group_edges: set[tuple[str, str, str]] = set()
        captured: list[str] = []
        captured_set: set[str] = set()
        show_inits = self.options.show_initializers
        rows_of: dict[int, list[tuple[int, str]]] = {}
        # Hot path (100k uses): numpy drops the uses that draw nothing (present.visible);
        # the plain walk (every use) is kept for the differential tests.
        if self.walk_every_use:
            walk = np.arange(len(table.node), dtype=np.int64)
        else:
            walk = uses_to_walk(table, codes, show_inits)
        use_names = table.names
        use_node = table.node[walk].tolist()
        use_port = table.port[walk].tolist()
        use_init = table.is_init[walk].tolist()
        code_of = codes[table.node[walk]].tolist()
        for count, (u, i, k, is_init, dst_code) in enumerate(
            zip(walk.tolist(), use_node, use_port, use_init, code_of)
        ):
            if (count & 1023) == 1023:
                self._check_cancel()
            name = use_names[u]
            dst = vis_id(dst_code)
            dst_group = dst_code >= n_nodes
            if is_init:
                if show_inits and not dst_group:
                    rows_of.setdefault(i, []).append((k, name))
                continue
            found = producers.get(name)
            if found is not None:
                src, sp = found
                if src == dst:
                    continue
                if dst_group:
                    key = (src, name, dst)
                    if key in seen_group_edges:
                        continue
                    seen_group_edges.add(key)
                    ports = group_in.setdefault(dst, {})
                    ports[name] = min(ports.get(name, i), i)
                    dp = -1
                else:
                    dp = k
                pending.append((src, out_port(src, sp, name), dst, dp, name, "data"))
                continue
            # Not defined in this graph: an outer value (or undefined).
            if g.outer is not None and self._is_outer_initializer(scope, name):
                if show_inits and not dst_group:
                    rows_of.setdefault(i, []).append((k, name))
                continue
            if g.outer is not None and name in g.outer:
                src, sp = g.outer[name]
                key = (src, name, dst)
                if key in seen_group_edges:
                    continue
                seen_group_edges.add(key)
                if dst_group:
                    ports = group_in.setdefault(dst, {})
                    ports[name] = min(ports.get(name, i), i)
                    dp = -1
                else:
                    dp = k
                pending.append((src, sp, dst, dp, name, "captured"))
                continue
            if name not in captured_set:
                captured_set.add(name)
                captured.append(name)
            src = f"{inst}|outer:{name}"
            if dst_group:
                key = (src, name, dst)
                if key in seen_group_edges:
                    continue
                seen_group_edges.add(key)
                ports = group_in.setdefault(dst, {})
                ports[name] = min(ports.get(name, i), i)
                dp = -1
            else:
                dp = k
            pending.append((src, 0, dst, dp, name, "data"))
        # Values a collapsed body (If/Loop/Scan) reads from this graph: a dashed edge to
        # the node that holds the body, so the dependency stays visible.
        extra_port: set[str] = set()
        for child in scope.children:
            owner = child.owner_node_index
            if owner is None or f"{inst}#{owner}" in expanded:
                continue
            dst = vis_id(int(codes[owner]))
            for name in sorted(child.free_names, key=as_text):  # bytes: not UTF-8
                found = producers.get(name)
                if found is None or found[0] == dst:
                    continue
                key = (found[0], name, dst)
                if key in seen_group_edges:
                    continue
                seen_group_edges.add(key)
                src, sp = found
                dp = len(nodes[owner].input) if dst == f"{inst}#{owner}" else 0
                pending.append((src, out_port(src, sp, name), dst, dp, name, "implicit"))
                extra_port.add(dst)
        output_names = scope.output_names()
        for name in output_names:
            found = producers.get(name)
            dst = f"{inst}|out:{name}"
            if found is not None:
                src, sp = found
                pending.append((src, out_port(src, sp, name), dst, 0, name, "data"))
            elif name in initializers:
                continue
            elif g.outer is not None and name in g.outer:
                src, sp = g.outer[name]
                pending.append((src, sp, dst, 0, name, "captured"))
            elif name:
                if name not in captured_set:
                    captured_set.add(name)
                    captured.append(name)
                pending.append((f"{inst}|outer:{name}", 0, dst, 0, name, "data"))

        # Items and blocks.
        root_block = Block(id=inst, graph_path=scope.path, label=label)
        self.blocks[root_block.id] = root_block
        group_blocks: dict[str, Block] = {}
        group_items: dict[str, DisplayItem] = {}

        def block_of(prefix: str | None) -> Block:
            return root_block if prefix is None else group_blocks[prefix]

        for prefix, grp in tree.groups.items():
            gid = f"{inst}|g:{prefix}"
            up = vis_group.get(grp.parent) if grp.parent is not None else None
            if up is not None:
                continue  # inside a collapsed group
            parent_block = block_of(grp.parent)
            ancestors = _ancestors(tree, grp.parent, inst)
            item = DisplayItem(
                id=gid,
                kind="group",
                graph_path=scope.path,
                title=elide(grp.label, 40),
                subtitle=f"{grp.size} ops",
                category="group",
                op_count=grp.size,
                expandable=True,
                expanded=vis_group[prefix] is None,
                ancestors=ancestors,
                parent=_frame_id(ancestors, parent),
                depth=depth + len(ancestors),
            )
            parent_block.items.append(item)
            group_items[prefix] = item
            self.items[gid] = item
            if item.expanded:
                blk = Block(id=gid, graph_path=scope.path)
                group_blocks[prefix] = blk
                self.blocks[gid] = blk
                item.blocks = [blk]
        spread_inputs = len(input_names) > FEW_INPUTS
        for name in input_names:
            # Few inputs stay in the top row, where a reader looks for them.  Many (LLM
            # exports: two KV-cache inputs a layer) each go inside the innermost open
            # group holding every use: next to that layer, not in a row across the top.
            uses = scope.consumers.get(name, ()) if spread_inputs else ()
            home = _home_group(tree, vis_group, uses)
            ancestors = _ancestors(tree, home, inst)
            self._add_pill(
                block_of(home),
                f"{inst}|in:{name}",
                "input",
                scope,
                name,
                _frame_id(ancestors, parent),
                depth + len(ancestors),
                ancestors,
            )
        for name in captured:
            pill = self._add_pill(
                root_block, f"{inst}|outer:{name}", "outer", scope, name, parent, depth
            )
            pill.missing = scope.lookup(name) is None and scope.parent is None
        for i in np.flatnonzero(codes == np.arange(n_nodes)).tolist():
            node = nodes[i]
            node_prefix = node_group[i]
            ancestors = _ancestors(tree, node_prefix, inst)
            item = self._op_item(
                g,
                i,
                node,
                sorted(rows_of.get(i, ())),
                ancestors,
                _frame_id(ancestors, parent),
                depth,
            )
            block_of(node_prefix).items.append(item)
            if item.expanded:
                self._build_bodies(g, i, node, item, producers, depth + len(ancestors) + 1)
        for name in output_names:
            if name and name not in initializers:
                self._add_pill(
                    root_block, f"{inst}|out:{name}", "output", scope, name, parent, depth
                )
        for item_id in extra_port:
            if item_id in self.items and self.items[item_id].kind == "op":
                node_index = self.items[item_id].node_index
                assert node_index is not None
                self.items[item_id].ports_in = len(nodes[node_index].input) + 1
        # Collapsed-group ports.
        # A collapsed group's input ports follow the order in which its nodes use the
        # values: the main stream (used first) is port 0, which the layout keeps
        # straight; side inputs (masks, caches) come after.
        in_port: dict[str, dict[str, int]] = {}
        for gid, first_use in group_in.items():
            order = sorted(first_use, key=lambda n: (first_use[n], n))
            in_port[gid] = {n: k for k, n in enumerate(order)}
            item = self.items[gid]
            item.group_inputs = order
            item.ports_in = max(1, len(order))
        pending = [
            (src, sp, dst, in_port[dst][name] if dp < 0 else dp, name, kind)
            for src, sp, dst, dp, name, kind in pending
        ]
        for gid, ports in group_out.items():
            item = self.items[gid]
            item.group_outputs = list(ports)
            item.ports_out = max(1, len(ports))
        for item in group_items.values():
            if not item.expanded:
                n_in, n_out = len(item.group_inputs), len(item.group_outputs)
                item.subtitle = f"{item.op_count} ops · {n_in} in · {n_out} out"
                self._size_group(item)
        # Edges: draw list + lifted layout edges.
        types = self.types
        show_shapes = self.options.show_shapes
        items = self.items
        for src, sp, dst, dp, name, kind in pending:
            if dst not in items:
                continue  # an end with no box (a graph output with no name): nothing to draw
            vt = types.lookup(scope, name) if show_shapes else None
            edge = DisplayEdge(
                src,
                sp,
                dst,
                dp,
                name,
                scope.path,
                label=vt.text if vt else "",
                inferred=bool(vt and vt.inferred),
                kind=kind,  # type: ignore[arg-type]
            )
            if kind == "implicit":
                edge.kind = "captured"
            if kind != "captured":
                a = items[src].ancestors if src in items else ()
                b = items[dst].ancestors
                common = 0
                while common < len(a) and common < len(b) and a[common] == b[common]:
                    common += 1
                block = group_blocks_by_id(group_blocks, a[common - 1]) if common else root_block
                ls = a[common] if common < len(a) else src
                ld = b[common] if common < len(b) else dst
                lkey = (ls, sp if ls == src else 0, ld, dp if ld == dst else 0)
                if ls != ld:
                    block.layout_edges.append(lkey)
                    edge.layout_key = lkey
                    edge.block = block.id
            self.edges.append(edge)
        for blk in [root_block, *group_blocks.values()]:
            blk.layout_edges = list(dict.fromkeys(blk.layout_edges))
        return root_block

    # -- items ------------------------------------------------------------------------
    def _add_pill(
        self,
        block: Block,
        item_id: str,
        kind: str,
        scope: GraphScope,
        name: str,
        parent: str | None,
        depth: int,
        ancestors: tuple[str, ...] = (),
    ) -> DisplayItem:
        title = elide(name)
        item = DisplayItem(
            id=item_id,
            kind=kind,  # type: ignore[arg-type]
            graph_path=scope.path,
            title=title,
            value=name,
            category=kind,
            ports_in=1,
            ports_out=1,
            width=max(self._w(title) + 2 * PAD_X + 8, 48.0),
            height=PILL_H,
            parent=parent,
            depth=depth,
            ancestors=ancestors,
        )
        block.items.append(item)
        self.items[item_id] = item
        return item

    def _size_group(self, item: DisplayItem) -> None:
        w = max(self._w(item.title, True), self._w(item.subtitle)) + 2 * PAD_X
        item.width = max(w, 90.0)
        item.height = TITLE_H + LINE_H + 6

    def _op_item(
        self,
        g: _Graph,
        i: int,
        node: NodeProto,
        rows: Iterable[tuple[int, str]],
        ancestors: tuple[str, ...],
        parent: str | None,
        depth: int,
    ) -> DisplayItem:
        scope = g.scope
        item_id = f"{g.inst}#{i}"
        # the ML domain is told by the colour; other non-standard domains by a prefix
        plain = node.domain in ("", "ai.onnx", "ai.onnx.ml")
        title = node.op_type if plain else f"{node.domain}.{node.op_type}"
        overload = getattr(node, "overload", "")
        if overload:  # a call of one overload of a function: say which
            title = f"{title} ({as_text(overload)})"
        expandable = bool(
            (
                node.attribute
                and self._child_scopes(scope)
                and any((i, a) in self._child_scopes(scope) for a in _subgraph_attr_names(node))
            )
            or _function_key(node) in self._functions
        )
        item = DisplayItem(
            id=item_id,
            kind="op",
            graph_path=scope.path,
            title=title,
            subtitle=elide(node.name) if self.options.show_names and node.name else "",
            category=category_of(node.op_type, node.domain),
            node_index=i,
            ports_in=max(1, len(node.input)),
            ports_out=max(1, len(node.output)),
            expandable=expandable or item_id in self.schema_expanded,
            expanded=(expandable and item_id in self.expanded) or item_id in self.schema_expanded,
            ancestors=ancestors,
            parent=parent,
            depth=depth + len(ancestors),
        )
        formal = self.schemas.input_names(node) if rows else None
        for k, name in rows:
            if formal:
                label = formal[min(k, len(formal) - 1)]
            else:
                label = elide(as_text(name).rsplit("/", 1)[-1], 24)
            tensor = self.initializer(scope, name)
            shape = _shape_text(tensor.dims) if tensor is not None else "sparse"
            item.rows.append(InitializerRow(k, label, name, shape))
        w = self._w(title, True)
        if item.subtitle:
            w = max(w, self._w(item.subtitle))
        for row in item.rows:
            w = max(w, self._w(f"{row.label} ⟨{row.shape}⟩"))
        if item.expandable:  # the +/- marker sits at the right of the centred title
            w += 2 * MARKER_W
        item.width = max(MIN_NODE_W, w + 2 * PAD_X)
        item.height = TITLE_H + (LINE_H if item.subtitle else 0.0)
        if item.rows:
            item.height += len(item.rows) * ROW_H + 4
        self.items[item_id] = item
        return item

    def _build_bodies(
        self,
        g: _Graph,
        i: int,
        node: NodeProto,
        item: DisplayItem,
        producers: Mapping[str, tuple[str, int]],
        depth: int,
    ) -> None:
        item.kind = "container"
        # this graph's producers first, then what the graph itself sees from outside
        outer: Mapping[str, tuple[str, int]] = ChainMap(producers, g.outer or {})  # type: ignore[arg-type]
        children = self._child_scopes(g.scope)
        for attr in _subgraph_attr_names(node):
            child = children.get((i, attr))
            if child is None:
                continue
            inst = child.path if g.inst == g.scope.path else f"{g.inst}/{attr}"
            blk = self._build_graph(_Graph(child, inst, outer, False), depth, item.id, attr)
            item.blocks.append(blk)
        fn_path = self._functions.get(_function_key(node))
        if fn_path is not None:
            fn_scope = self.doc.scope(fn_path)
            blk = self._build_graph(
                _Graph(fn_scope, f"{item.id}/fn", None, False),
                depth,
                item.id,
                f"function {node.op_type}",
            )
            item.blocks.append(blk)
        elif item.id in self.schema_expanded:
            fn = schema_function_body(self.doc.model, node)
            if fn is not None:
                fn_scope = _function_scope(self.doc.model, fn)
                blk = self._build_graph(
                    _Graph(fn_scope, f"{item.id}/schema", None, False),
                    depth,
                    item.id,
                    f"schema body of {node.op_type}",
                )
                item.blocks.append(blk)
        if not item.blocks:
            item.kind = "op"
            item.expanded = False


def _function_key(node: NodeProto) -> tuple[str, str, str]:
    return (node.domain, node.op_type, getattr(node, "overload", ""))


def group_blocks_by_id(group_blocks: dict[str, Block], gid: str) -> Block:
    prefix = gid.split("|g:", 1)[1]
    return group_blocks[prefix]


def _ancestors(tree: GroupTree, prefix: str | None, inst: str) -> tuple[str, ...]:
    return tuple(f"{inst}|g:{p}" for p in tree.chain(prefix))


def _home_group(
    tree: GroupTree,
    vis_group: dict[str, str | None],
    uses: Iterable[tuple[int, int]],
) -> str | None:
    """The innermost open group (it and every group around it expanded) holding every
    use of a value; None: the graph's top level."""
    targets = {tree.node_group[i] for i, _ in uses}
    if not targets or None in targets:
        return None
    chains = [tree.chain(t) for t in targets]
    home: str | None = None
    for level in zip(*chains):
        if any(p != level[0] for p in level) or vis_group.get(level[0]) is not None:
            break
        home = level[0]
    return home


def _frame_id(ancestors: tuple[str, ...], parent: str | None) -> str | None:
    return ancestors[-1] if ancestors else parent


def _subgraph_attr_names(node: NodeProto) -> list[str]:
    from onnx import AttributeProto

    out: list[str] = []
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH or (attr.type == 0 and attr.HasField("g")):
            out.append(attr.name)
        elif attr.type == AttributeProto.GRAPHS:
            out.extend(f"{attr.name}[{k}]" for k in range(len(attr.graphs)))
    return out


def _function_scope(model: ModelProto, fn: FunctionProto) -> GraphScope:
    holder = ModelProto()
    holder.functions.append(fn)
    scopes = build_scopes(holder)
    return next(s for s in scopes if s.kind == "function")
