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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from onnx import AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto

DefinitionKind = Literal["input", "initializer", "sparse_initializer", "node_output"]
ScopeKind = Literal["main", "subgraph", "function"]


class Definition(NamedTuple):
    """One place that defines a value name inside a graph.  (A NamedTuple: 100k of them
    are made per index build, and tuples are several times cheaper than dataclasses.)"""

    kind: DefinitionKind
    index: int  # position in graph.input / initializer / sparse_initializer, or node index
    output_index: int = 0  # for node_output: which output of the node


@dataclass
class GraphScope:
    path: str
    kind: ScopeKind
    graph: GraphProto | None = None
    function: FunctionProto | None = None
    parent: GraphScope | None = None
    owner_node_index: int | None = None  # index (in parent.nodes) of the node holding us
    owner_attribute: str | None = None  # attribute name, with [i] for GRAPHS attributes
    depth: int = 0
    definitions: dict[str, list[Definition]] = field(default_factory=dict)
    consumers: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    producer: dict[str, tuple[int, int]] = field(default_factory=dict)
    output_uses: dict[str, list[int]] = field(default_factory=dict)
    children: list[GraphScope] = field(default_factory=list)
    # Names used in this graph or any nested graph but defined in none of them.
    free_names: set[str] = field(default_factory=set)
    _labels: list[str] = field(default_factory=list, repr=False)
    _label_to_index: dict[str, int] = field(default_factory=dict, repr=False)

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

    # -- node labels ---------------------------------------------------------------
    def node_label(self, index: int) -> str:
        return self._labels[index]

    def node_index(self, label: str) -> int | None:
        """Index of the node with this label (name or ``#i``)."""
        if label.startswith("#") and label[1:].isdigit():
            i = int(label[1:])
            return i if 0 <= i < len(self.nodes) else None
        return self._label_to_index.get(label)

    # -- scope chain -----------------------------------------------------------------
    def defines(self, name: str) -> bool:
        return name in self.definitions

    def lookup(self, name: str) -> GraphScope | None:
        """The innermost scope (this one or an ancestor) that defines ``name``."""
        scope: GraphScope | None = self
        while scope is not None:
            if name in scope.definitions:
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
        for table in (self.definitions, self.consumers, self.producer, self.output_uses):
            if old in table:
                table[new] = table.pop(old)  # type: ignore[attr-defined]
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
            for name in scope.definitions:
                out[name] = scope
        return out


def _subgraph_attrs(node: NodeProto) -> Iterator[tuple[str, GraphProto]]:
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH or (attr.type == 0 and attr.HasField("g")):
            yield attr.name, attr.g
        elif attr.type == AttributeProto.GRAPHS:
            for i, g in enumerate(attr.graphs):
                yield f"{attr.name}[{i}]", g


def _index_scope(scope: GraphScope) -> None:
    defs: dict[str, list[Definition]] = {}
    if scope.graph is not None:
        g = scope.graph
        for i, v in enumerate(g.input):
            defs.setdefault(v.name, []).append(Definition("input", i))
        for i, t in enumerate(g.initializer):
            defs.setdefault(t.name, []).append(Definition("initializer", i))
        for i, s in enumerate(g.sparse_initializer):
            defs.setdefault(s.values.name, []).append(Definition("sparse_initializer", i))
    else:
        assert scope.function is not None
        for i, name in enumerate(scope.function.input):
            defs.setdefault(name, []).append(Definition("input", i))
    consumers: dict[str, list[tuple[int, int]]] = {}
    producer: dict[str, tuple[int, int]] = {}
    nodes = scope.nodes
    names: list[str] = []
    # Hot loop (100k nodes): locals only, no per-item helper calls.
    add_name = names.append
    node_output = "node_output"
    for ni, node in enumerate(nodes):
        add_name(node.name)
        ii = 0
        for name in node.input:
            if name:
                use = consumers.get(name)
                if use is None:
                    consumers[name] = [(ni, ii)]
                else:
                    use.append((ni, ii))
            ii += 1
        oi = 0
        for name in node.output:
            if name:
                entry = Definition(node_output, ni, oi)
                found = defs.get(name)
                if found is None:
                    defs[name] = [entry]
                    producer[name] = (ni, oi)
                else:
                    found.append(entry)
            oi += 1
    counts = Counter(names)
    labels = [nm if nm and counts[nm] == 1 else f"#{i}" for i, nm in enumerate(names)]
    output_uses: dict[str, list[int]] = {}
    for i, name in enumerate(scope.output_names()):
        output_uses.setdefault(name, []).append(i)
    scope.definitions = defs
    scope.consumers = consumers
    scope.producer = producer
    scope.output_uses = output_uses
    scope._labels = labels
    scope._label_to_index = {nm: i for i, nm in enumerate(names) if counts[nm] == 1 and nm}


def function_path(fn: FunctionProto) -> str:
    path = f"function:{fn.domain}:{fn.name}"
    overload = getattr(fn, "overload", "")
    return f"{path}:{overload}" if overload else path


def build_scopes(model: ModelProto) -> list[GraphScope]:
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
            _index_scope(scope)
            ordered.append(scope)
            kids: list[GraphScope] = []
            for ni, node in enumerate(scope.nodes):
                if not node.attribute:
                    continue
                for attr_name, sub in _subgraph_attrs(node):
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
        free: set[str] = set()
        for name in scope.consumers:
            if name not in scope.definitions:
                free.add(name)
        for name in scope.output_uses:
            if name not in scope.definitions:
                free.add(name)
        for child in scope.children:
            free.update(n for n in child.free_names if n not in scope.definitions)
        scope.free_names = free


def reindex_scope(scope: GraphScope) -> None:
    """Rebuild one graph's index in place (after an edit that did not change which
    subgraphs exist) and refresh free names up the scope chain."""
    _index_scope(scope)
    chain = [scope, *scope.ancestors()]
    for s in chain:
        free: set[str] = {n for n in s.consumers if n not in s.definitions}
        free.update(n for n in s.output_uses if n not in s.definitions)
        for child in s.children:
            free.update(n for n in child.free_names if n not in s.definitions)
        s.free_names = free
