"""Graph scopes: every graph of a model (main, subgraph attributes at any depth,
function bodies) with its definitions, uses, producers, consumers and scope chain.

Graph paths name a graph the same way everywhere (diagnostics, UI, runtime):

* ``main`` for the model's graph;
* ``<parent path>/<attribute>:<node label>`` for a subgraph held by a node's attribute
  (``main/body:Loop_3/then_branch:If_7``); a GRAPHS attribute adds ``[i]`` to the
  attribute name (``branches[1]``);
* ``function:<domain>:<name>`` for a model-local function body, with ``:<overload>``
  appended when the function has one.

A node label is the node's name when it is non-empty and unique in its graph, else
``#<index>``.  Everything is built iteratively so 200-deep nesting is fine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from onnx import AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto

from onnxviz.model.gc_pause import collector_paused

DefinitionKind = Literal["input", "initializer", "sparse_initializer", "node_output"]
ScopeKind = Literal["main", "subgraph", "function"]


class Definition(NamedTuple):
    """One place that defines a value name inside a graph.  (A NamedTuple: 100k of them
    are made per index build, and tuples are several times cheaper than dataclasses.)"""

    kind: DefinitionKind
    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose; position in graph.input / initializer / sparse_initializer, or node index
    output_index: int = 0  # for node_output: which output of the node


@dataclass
class GraphScope:
    """The index of one graph (main, a subgraph at any depth, or a function body): its
    path and place in the tree (``parent``, ``owner_node_index``, ``owner_attribute``,
    ``children``), who produces and who consumes each value name, the graph outputs that
    use a name, the names it takes from enclosing graphs (``free_names``) and the node
    labels.  Built by `build_scopes`; derived from the ModelProto and rebuilt or patched
    after each command, never a second truth."""

    path: str
    kind: ScopeKind
    graph: GraphProto | None = None
    function: FunctionProto | None = None
    parent: GraphScope | None = None
    owner_node_index: int | None = None  # index (in parent.nodes) of the node holding us
    owner_attribute: str | None = None  # attribute name, with [i] for GRAPHS attributes
    depth: int = 0
    consumers: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    producer: dict[str, tuple[int, int]] = field(default_factory=dict)
    output_uses: dict[str, list[int]] = field(default_factory=dict)
    children: list[GraphScope] = field(default_factory=list)
    # Names used in this graph or any nested graph but defined in none of them.
    free_names: set[str] = field(default_factory=set)
    # Definitions other than a name's first producing node: graph inputs, initializers,
    # and second (invalid) definitions.  `definitions` is derived from these lazily,
    # because building 100k Definition records up front doubles the index time.
    _other_defs: dict[str, list[Definition]] = field(default_factory=dict, repr=False)
    _definitions: dict[str, list[Definition]] | None = field(default=None, repr=False)
    _labels: list[str] | None = field(default=None, repr=False)
    _label_to_index: dict[str, int] = field(default_factory=dict, repr=False)
    _name_counts: Counter[str] = field(default_factory=Counter, repr=False)

    @property
    def definitions(self) -> dict[str, list[Definition]]:
        """Every definition of every name in this graph, in definition order."""
        if self._definitions is None:
            defs: dict[str, list[Definition]] = {}
            other = self._other_defs
            for name, found in other.items():
                defs[name] = [d for d in found if d.kind != "node_output"]
            for name, (ni, oi) in self.producer.items():
                defs.setdefault(name, []).append(Definition("node_output", ni, oi))
            for name, found in other.items():
                extra = [d for d in found if d.kind == "node_output"]
                if extra:
                    defs[name].extend(extra)
            self._definitions = defs
        return self._definitions

    # -- what the graph holds --------------------------------------------------------
    @property
    def nodes(self) -> Sequence[NodeProto]:
        if self.graph is not None:
            return self.graph.node
        assert self.function is not None
        return self.function.node

    @property
    def name(self) -> str:
        if self.graph is not None:
            return self.graph.name
        assert self.function is not None
        return self.function.name

    def input_names(self) -> list[str]:
        if self.graph is not None:
            return [v.name for v in self.graph.input]
        assert self.function is not None
        return list(self.function.input)

    def output_names(self) -> list[str]:
        if self.graph is not None:
            return [v.name for v in self.graph.output]
        assert self.function is not None
        return list(self.function.output)

    def initializer_names(self) -> list[str]:
        if self.graph is None:
            return []
        names = [t.name for t in self.graph.initializer]
        names += [s.values.name for s in self.graph.sparse_initializer]
        return names

    @property
    def owner_node(self) -> NodeProto | None:
        if self.parent is None or self.owner_node_index is None:
            return None
        return self.parent.nodes[self.owner_node_index]

    def other_definitions(self) -> Mapping[str, list[Definition]]:
        """Definitions other than a name's first producing node, by name: graph inputs,
        initializers and second (invalid) definitions.  Cheap (the index keeps them), so
        rules that look at initializers or repeated definitions read these instead of
        the full `definitions` table.  Read-only: the index owns the lists."""
        return self._other_defs

    def defined_names(self) -> set[str]:
        """Every name this graph defines (without building the full definition table)."""
        names = set(self.producer)
        names.update(self._other_defs)
        return names

    # -- node labels ---------------------------------------------------------------
    @property
    def labels(self) -> Sequence[str]:
        """Every node's label, by node index (see `node_label`)."""
        return self._labels if self._labels is not None else self._build_labels()

    def definitions_of(self, name: str) -> list[Definition]:
        """The definitions of one name (cheap: does not build the whole table)."""
        if self._definitions is not None:
            return self._definitions.get(name, [])
        found = self._other_defs.get(name, [])
        out = [d for d in found if d.kind != "node_output"]
        if name in self.producer:
            ni, oi = self.producer[name]
            out.append(Definition("node_output", ni, oi))
        out.extend(d for d in found if d.kind == "node_output")
        return out

    def _build_labels(self) -> list[str]:
        names = [n.name for n in self.nodes]
        counts = Counter(names)
        self._name_counts = counts
        self._labels = [nm if nm and counts[nm] == 1 else f"#{i}" for i, nm in enumerate(names)]
        self._label_to_index = {nm: i for i, nm in enumerate(names) if nm and counts[nm] == 1}
        return self._labels

    def forget_labels(self) -> None:
        """A node's name changed: labels are rebuilt when next asked for."""
        self._labels = None
        self._label_to_index = {}

    def node_label(self, index: int) -> str:
        """The node's name when non-empty and unique in this graph, else ``#index``."""
        labels = self._labels if self._labels is not None else self._build_labels()
        return labels[index]

    def name_count(self, name: str) -> int:
        """How many nodes of this graph have this name (when the labels were built)."""
        if self._labels is None:
            self._build_labels()
        return self._name_counts[name]

    def node_index(self, label: str) -> int | None:
        """Index of the node with this label (name or ``#i``)."""
        if label.startswith("#") and label[1:].isdigit():
            i = int(label[1:])
            return i if 0 <= i < len(self.nodes) else None
        if self._labels is None:
            self._build_labels()
        return self._label_to_index.get(label)

    # -- scope chain -----------------------------------------------------------------
    def defines(self, name: str) -> bool:
        return name in self.producer or name in self._other_defs

    def lookup(self, name: str) -> GraphScope | None:
        """The innermost scope (this one or an ancestor) that defines ``name``."""
        scope: GraphScope | None = self
        while scope is not None:
            if name in scope.producer or name in scope._other_defs:
                return scope
            scope = scope.parent
        return None

    def ancestors(self) -> Iterator[GraphScope]:
        scope = self.parent
        while scope is not None:
            yield scope
            scope = scope.parent

    def rename_in_index(self, old: str, new: str) -> None:
        """Move every index entry of ``old`` to ``new`` (after a value rename)."""
        tables: tuple[dict, ...] = (
            self._other_defs,
            self.consumers,
            self.producer,
            self.output_uses,
        )
        if self._definitions is not None:
            tables += (self._definitions,)
        for table in tables:
            if old in table:
                table[new] = table.pop(old)
        if old in self.free_names:
            self.free_names.discard(old)
            self.free_names.add(new)

    def descendants(self) -> Iterator[GraphScope]:
        stack = list(reversed(self.children))
        while stack:
            scope = stack.pop()
            yield scope
            stack.extend(reversed(scope.children))

    def visible_names(self) -> dict[str, GraphScope]:
        """Every name visible here (own and outer scopes), mapped to its defining scope."""
        out: dict[str, GraphScope] = {}
        chain = [self, *self.ancestors()]
        for scope in reversed(chain):
            for name in scope.producer:
                out[name] = scope
            for name in scope._other_defs:
                out[name] = scope
        return out


# Attribute kinds that may hold a subgraph (UNDEFINED: old files that leave type unset).
_GRAPH_KINDS = frozenset({AttributeProto.GRAPH, AttributeProto.GRAPHS, AttributeProto.UNDEFINED})


def subgraph_attrs(node: NodeProto) -> Iterator[tuple[str, GraphProto]]:
    """(attribute name, graph) of every subgraph a node owns (``name[i]`` in a list)."""
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH or (attr.type == 0 and attr.HasField("g")):
            yield attr.name, attr.g
        elif attr.type == AttributeProto.GRAPHS:
            for i, g in enumerate(attr.graphs):
                yield f"{attr.name}[{i}]", g


def _index_scope(scope: GraphScope, subgraph_nodes: list[int] | None = None) -> None:
    """Fill the scope's tables.  ``subgraph_nodes``, when given, collects the indexes of
    nodes that carry attributes (the only ones that can hold subgraphs), so the caller
    does not walk 100k nodes a second time."""
    other: dict[str, list[Definition]] = {}
    if scope.graph is not None:
        g = scope.graph
        for i, v in enumerate(g.input):
            other.setdefault(v.name, []).append(Definition("input", i))
        for i, t in enumerate(g.initializer):
            other.setdefault(t.name, []).append(Definition("initializer", i))
        for i, s in enumerate(g.sparse_initializer):
            other.setdefault(s.values.name, []).append(Definition("sparse_initializer", i))
    else:
        assert scope.function is not None
        for i, name in enumerate(scope.function.input):
            other.setdefault(name, []).append(Definition("input", i))
    consumers: dict[str, list[tuple[int, int]]] = {}
    producer: dict[str, tuple[int, int]] = {}
    with_attrs = subgraph_nodes.append if subgraph_nodes is not None else None
    # Hot loop (100k nodes): locals only, tuples only, no helper calls per item.
    for ni, node in enumerate(scope.nodes):
        # Slicing copies the repeated field into a list in C: ~30% cheaper than iterating.
        for ii, name in enumerate(node.input[:]):
            if name:
                use = consumers.get(name)
                if use is None:
                    consumers[name] = [(ni, ii)]
                else:
                    use.append((ni, ii))
        for oi, name in enumerate(node.output[:]):
            if name:
                if name in producer or name in other:
                    other.setdefault(name, []).append(Definition("node_output", ni, oi))
                else:
                    producer[name] = (ni, oi)
        if with_attrs is not None and node.attribute:
            with_attrs(ni)
    output_uses: dict[str, list[int]] = {}
    for i, name in enumerate(scope.output_names()):
        output_uses.setdefault(name, []).append(i)
    scope._other_defs = other
    scope._definitions = None
    scope.consumers = consumers
    scope.producer = producer
    scope.output_uses = output_uses
    scope.forget_labels()


def iter_graphs(model: ModelProto) -> Iterator[GraphScope]:
    """Every graph of the model in `build_scopes` order, *without* building indexes:
    for walks that only need each graph's nodes and path (tensor scans, summaries),
    which must not pay for a 100k-node index.  Labels are computed only for nodes
    holding a subgraph."""
    roots: list[GraphScope] = [GraphScope("main", "main", graph=model.graph)]
    roots += [GraphScope(function_path(f), "function", function=f) for f in model.functions]
    stack = list(reversed(roots))
    while stack:
        scope = stack.pop()
        yield scope
        nested: list[GraphScope] = []
        for i, node in enumerate(scope.nodes):
            if not node.attribute or not any(a.type in _GRAPH_KINDS for a in node.attribute):
                continue
            for attr_name, sub in subgraph_attrs(node):
                nested.append(
                    GraphScope(
                        f"{scope.path}/{attr_name}:{scope.node_label(i)}",
                        "subgraph",
                        graph=sub,
                        parent=scope,
                        owner_node_index=i,
                        owner_attribute=attr_name,
                        depth=scope.depth + 1,
                    )
                )
        stack.extend(reversed(nested))


def function_path(fn: FunctionProto) -> str:
    path = f"function:{fn.domain}:{fn.name}"
    overload = getattr(fn, "overload", "")
    return f"{path}:{overload}" if overload else path


def build_scopes(model: ModelProto) -> list[GraphScope]:
    # the collector paused: an index build allocates ~10^6 small containers, and the
    # collections they trigger cost a third of the build time
    with collector_paused():
        return _build_scopes(model)


def _build_scopes(model: ModelProto) -> list[GraphScope]:
    """Every graph of the model, main first, then its nested graphs in pre-order, then
    each function body followed by its nested graphs."""
    roots: list[GraphScope] = [GraphScope("main", "main", graph=model.graph)]
    for fn in model.functions:
        roots.append(GraphScope(function_path(fn), "function", function=fn))
    ordered: list[GraphScope] = []
    for root in roots:
        stack = [root]
        while stack:
            scope = stack.pop()
            with_attrs: list[int] = []
            _index_scope(scope, with_attrs)
            ordered.append(scope)
            kids: list[GraphScope] = []
            nodes = scope.nodes
            for ni in with_attrs:
                node = nodes[ni]
                # Cheap screen first: ~a quarter of a transformer's nodes carry
                # attributes, almost none of them graphs.
                if not any(a.type in _GRAPH_KINDS for a in node.attribute):
                    continue
                for attr_name, sub in subgraph_attrs(node):
                    child = GraphScope(
                        f"{scope.path}/{attr_name}:{scope.node_label(ni)}",
                        "subgraph",
                        graph=sub,
                        parent=scope,
                        owner_node_index=ni,
                        owner_attribute=attr_name,
                        depth=scope.depth + 1,
                    )
                    kids.append(child)
            scope.children = kids
            stack.extend(reversed(kids))
    _compute_free_names(ordered)
    return ordered


def _compute_free_names(ordered: list[GraphScope]) -> None:
    # Post-order (reverse pre-order): a scope's free names are its own unresolved uses
    # plus its children's free names that it does not define itself.
    for scope in reversed(ordered):
        scope.free_names = _free_names(scope)


def _free_names(scope: GraphScope) -> set[str]:
    """Names used here or below but defined neither here nor below (set algebra in C:
    a per-name Python check costs ~0.15 s on a 100k-node graph)."""
    used = scope.consumers.keys() | scope.output_uses.keys()
    for child in scope.children:
        used |= child.free_names
    return used - scope.producer.keys() - scope._other_defs.keys()


def reindex_scope(scope: GraphScope) -> None:
    """Rebuild one graph's index in place (after an edit that did not change which
    subgraphs exist) and refresh free names up the scope chain."""
    with collector_paused():  # (as build_scopes)
        _index_scope(scope)
    chain = [scope, *scope.ancestors()]
    for s in chain:
        s.free_names = _free_names(s)
