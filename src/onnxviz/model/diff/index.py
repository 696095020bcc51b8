"""A light per-graph index for diffing: producers, consumers, graph inputs, initializers
and declared types, plus the quantization view (a value that only passes through a
QuantizeLinear -> DequantizeLinear pair counts as the value it came from).

Built for speed on 100k-node graphs: plain dicts and lists, no Definition records.
Graph paths and node labels follow `onnxviz.model.scopes` (name when non-empty and
unique, else ``#index``), so a diff's locations open in the rest of the app.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

import numpy as np
from onnx import AttributeProto, GraphProto, NodeProto, TensorProto, ValueInfoProto

from onnxviz.model.text import as_text

QUANTIZE_OPS = frozenset({"QuantizeLinear"})
DEQUANTIZE_OPS = frozenset({"DequantizeLinear"})


def subgraph_attrs(node: NodeProto | LiteNode) -> Iterator[tuple[str, GraphProto]]:
    """(attribute label, graph) for every subgraph a node holds (GRAPHS adds ``[i]``)."""
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH or (attr.type == 0 and attr.HasField("g")):
            yield as_text(attr.name), attr.g
        elif attr.type == AttributeProto.GRAPHS:
            for i, g in enumerate(attr.graphs):
                yield f"{as_text(attr.name)}[{i}]", g


class LiteNode(NamedTuple):
    """A node's fields as plain Python objects, read from protobuf once: every access to
    a NodeProto's repeated field builds new Python strings, and a diff reads each
    node's inputs a dozen times.  ``attribute`` stays the protobuf field."""

    name: str
    op_type: str
    domain: str
    input: list[str]
    output: list[str]
    attribute: Any


def _names(values: Any) -> list[str]:
    """Names as text: protobuf hands out bytes for a name that is not UTF-8."""
    return [x if type(x) is str else as_text(x) for x in values]


_STRINGS = attrgetter("name", "op_type", "domain")
_INPUTS = attrgetter("input")
_ROW = tuple.__new__  # a LiteNode from its fields in C (the class's own __new__ is Python)


class _Canon(dict[str, str]):
    """name -> the one string object that stands for it; a name not held maps to itself."""

    def __missing__(self, key: str) -> str:
        return key


def lite_nodes(nodes: Sequence[NodeProto], defined: Iterable[str] = ()) -> list[LiteNode]:
    """The nodes as `LiteNode`s.  One string object per value name (the outputs' and
    those of ``defined``: graph inputs, initializers): protobuf hands out a new one at
    every access, so each value's name would be held once per reader.  Sharing them
    halves the memory of the names, and dict lookups then compare by identity."""
    outputs = [n.output[:] for n in nodes]
    known = ["", *defined]  # "": an optional input left out
    canon = _Canon(zip(known, known))
    canon.update(zip(chain.from_iterable(outputs), chain.from_iterable(outputs)))
    name_of = canon.__getitem__
    # A node without attributes keeps no attribute container: 100k protobuf
    # containers held for nothing cost tens of MB.  Op types and domains are shared.
    ops: dict[str, str] = {}
    rows = (  # a generator: each row lives only until its LiteNode is made
        (
            n.name,
            ops.setdefault(op := n.op_type, op),  # (one protobuf access, not two)
            ops.setdefault(domain := n.domain, domain),
            list(map(name_of, n.input)),
            outs,
            at if len(at := n.attribute) else (),
        )
        for n, outs in zip(nodes, outputs)
    )
    out: list[LiteNode] = list(map(_ROW, repeat(LiteNode), rows))
    # Passes in C over every name, to find any protobuf handed out as bytes.
    seen = set(map(type, chain.from_iterable(map(_INPUTS, out))))
    seen.update(map(type, chain.from_iterable(outputs)))
    seen.update(map(type, chain.from_iterable(map(_STRINGS, out))))
    if seen - {str}:
        out = [
            LiteNode(
                as_text(n.name),
                as_text(n.op_type),
                as_text(n.domain),
                _names(n.input),
                _names(n.output),
                n.attribute,
            )
            for n in nodes
        ]
    return out


@dataclass
class GraphIndex:
    """One graph (or function body) seen as a DAG of nodes and named values."""

    path: str
    nodes: Sequence[LiteNode]
    input_names: list[str]
    output_names: list[str]
    initializers: dict[str, TensorProto]
    types: dict[str, ValueInfoProto]
    producer: dict[str, tuple[int, int]] = field(default_factory=dict)
    consumers: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)
    # value -> the value it stands for when the quantization is looked through
    alias: dict[str, str] = field(default_factory=dict)
    qdq_nodes: set[int] = field(default_factory=set)
    attribute_names: list[str] = field(default_factory=list)  # function attributes
    # value -> the initializer behind it (itself, or the one a DequantizeLinear reads)
    weights: dict[str, TensorProto] = field(default_factory=dict)
    # Every node input laid end to end (in node order), with its node and slot as
    # int64 arrays: per-input work then runs as C-level maps and numpy.
    flat_inputs: list[str] = field(default_factory=list)
    input_node: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    input_slot: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def is_function(self) -> bool:
        return bool(self.attribute_names) or self.path.startswith("function:")

    def defined_here(self, name: str) -> bool:
        return name in self.producer or name in self.initializers or name in self._inputs

    @property
    def _inputs(self) -> set[str]:
        cached = self.__dict__.get("_input_set")
        if cached is None:
            cached = set(self.input_names)
            self.__dict__["_input_set"] = cached
        return cached

    def real(self, name: str) -> str:
        """The value ``name`` stands for once Q/DQ pairs are looked through."""
        alias = self.alias
        if not alias:
            return name
        for _ in range(64):  # a broken model may loop its aliases
            if name not in alias:
                return name
            name = alias[name]
        return name

    def effective_consumers(self, name: str) -> list[tuple[int, int]]:
        """Consumers of ``name`` and of every Q/DQ alias of it (the Q/DQ nodes left out)."""
        if not self.alias:
            return self.consumers.get(name, [])
        eff = self.__dict__.get("_eff")
        if eff is None:
            eff = {}
            for value, found in self.consumers.items():
                real = self.real(value)
                keep = [c for c in found if c[0] not in self.qdq_nodes]
                if keep:
                    eff.setdefault(real, []).extend(keep)
            self.__dict__["_eff"] = eff
        return eff.get(name, [])

    def weight_names(self) -> set[str]:
        """Names that `is_weight` answers for: initializers and dequantized weights."""
        return set(self.weights)

    def is_weight(self, name: str) -> TensorProto | None:
        """The initializer behind ``name``: itself, or the input of the
        DequantizeLinear that makes it (a quantized weight)."""
        return self.weights.get(name)

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(producer node, consumer node, consumer's input slot) of every value that a
        node of this graph makes and another reads, as int64 arrays."""
        cached = self.__dict__.get("_edges")
        if cached is None:
            # Over the flat inputs, by C-level maps and numpy: the producing node of
            # each input (-1: a graph input, a weight, a name from outside, or none).
            node_of = dict(zip(self.producer, map(itemgetter(0), self.producer.values())))
            flat = self.flat_inputs
            src = np.fromiter(map(node_of.get, flat, repeat(-1)), np.int64, len(flat))
            keep = src >= 0
            cached = (src[keep], self.input_node[keep], self.input_slot[keep])
            self.__dict__["_edges"] = cached
        return cached

    def topological_order(self) -> Sequence[int]:
        """Node indexes with every producer before its consumers (nodes in a cycle, which
        a broken model may hold, come last in file order)."""
        n = len(self.nodes)
        src, dst, _ = self.edges()
        if not len(src) or bool((src < dst).all()):
            return range(n)  # sorted already, as the ONNX spec asks of a graph
        # Kahn's algorithm over the distinct (producer, consumer) pairs, laid out by
        # numpy as successor lists (a self-loop left out: it holds nothing back).
        keep = src != dst
        pairs = np.unique(src[keep] * n + dst[keep])
        first, then = pairs // n, pairs % n
        pending = np.bincount(then, minlength=n).tolist()
        starts = np.searchsorted(first, np.arange(n + 1)).tolist()
        succ = then.tolist()
        ready = [i for i in range(n) if pending[i] == 0]
        ready.reverse()
        order: list[int] = []
        while ready:
            i = ready.pop()
            order.append(i)
            for c in succ[starts[i] : starts[i + 1]]:
                pending[c] -= 1
                if pending[c] == 0:
                    ready.append(c)
        if len(order) < n:  # a cycle: its nodes last, in file order
            placed = set(order)
            order.extend(i for i in range(n) if i not in placed)
        return order


def _labels(nodes: Sequence[LiteNode]) -> list[str]:
    names = [n.name for n in nodes]
    if "" not in (seen := set(names)) and len(seen) == len(names):
        return names  # every name set and unique (the common case): no counting
    counts = Counter(names)
    return [nm if nm and counts[nm] == 1 else f"#{i}" for i, nm in enumerate(names)]


def index_graph(path: str, graph: GraphProto) -> GraphIndex:
    types = {as_text(vi.name): vi for vi in graph.value_info}
    types.update((as_text(vi.name), vi) for vi in graph.input)
    types.update((as_text(vi.name), vi) for vi in graph.output)
    inits = {as_text(t.name): t for t in graph.initializer}
    for sp in graph.sparse_initializer:
        inits.setdefault(as_text(sp.values.name), sp.values)
    input_names = _names(v.name for v in graph.input)
    gi = GraphIndex(
        path,
        lite_nodes(graph.node, chain(inits, input_names)),
        input_names,
        _names(v.name for v in graph.output),
        inits,
        types,
    )
    _fill(gi)
    return gi


def index_function(path: str, fn: object) -> GraphIndex:
    input_names = _names(fn.input)  # type: ignore[attr-defined]
    gi = GraphIndex(
        path,
        lite_nodes(fn.node, input_names),  # type: ignore[attr-defined]
        input_names,
        _names(fn.output),  # type: ignore[attr-defined]
        {},
        {as_text(vi.name): vi for vi in getattr(fn, "value_info", ())},
        attribute_names=_names(fn.attribute) or ["<function>"],  # type: ignore[attr-defined]
    )
    _fill(gi)
    return gi


def _fill(gi: GraphIndex) -> None:
    made = [
        (name, (i, k))
        for i, node in enumerate(gi.nodes)
        for k, name in enumerate(node.output)
        if name
    ]
    made.reverse()  # so that the first producer of a name is the one kept
    producer = gi.producer
    producer.update(made)
    consumers = gi.consumers
    # (node input names share their string objects: `lite_nodes`)
    # (node, slot) of every input, laid flat by numpy, then grouped by name.
    lists = [node.input for node in gi.nodes]
    lens = np.fromiter(map(len, lists), np.int64, len(lists))
    flat = list(chain.from_iterable(lists))
    at = np.repeat(np.arange(len(lists)), lens)
    slot = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
    gi.flat_inputs, gi.input_node, gi.input_slot = flat, at, slot
    uses = zip(at.tolist(), slot.tolist())
    grouped: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)
    for name, use in zip(flat, uses):
        grouped[name].append(use)
    grouped.pop("", None)  # inputs left out
    consumers.update(grouped)
    gi.labels = _labels(gi.nodes)
    _quantization_view(gi)
    weights: dict[str, TensorProto] = {}
    for name, (i, _) in producer.items() if gi.qdq_nodes else ():
        if i in gi.qdq_nodes:
            node = gi.nodes[i]
            found = gi.initializers.get(node.input[0]) if node.input else None
            if node.op_type in DEQUANTIZE_OPS and found is not None:
                weights[name] = found
    weights.update(gi.initializers)
    gi.weights = weights


def _quantization_view(gi: GraphIndex) -> None:
    """Look through QuantizeLinear -> DequantizeLinear pairs: the DQ output aliases the
    Q input.  A DequantizeLinear of an initializer (a quantized weight) stays a node of
    its own; matching treats it as the weight's stand-in."""
    nodes = gi.nodes
    for i, node in enumerate(nodes):
        if node.op_type not in DEQUANTIZE_OPS or node.domain not in ("", "ai.onnx"):
            continue
        if not node.input or not node.output:
            continue
        p = gi.producer.get(node.input[0])
        if p is None:
            if node.input[0] in gi.initializers:
                gi.qdq_nodes.add(i)
            continue
        q = nodes[p[0]]
        if q.op_type in QUANTIZE_OPS and q.domain in ("", "ai.onnx") and q.input:
            gi.alias[node.output[0]] = q.input[0]
            gi.qdq_nodes.add(i)
            gi.qdq_nodes.add(p[0])
