"""Which node uses of one graph can show as an edge, decided for all uses at once.

The scene builder walks every use of every value (100k of them in a big transformer) on
each rebuild, yet with the name-scope groups collapsed almost all of them end inside one
group box and draw nothing.  `UseTable` keeps a graph's uses as arrays (built once per
graph index); `visible_codes` says which box shows each node for the current expansion,
and `uses_to_walk` drops, with numpy, the uses the builder would skip anyway:

* a value produced and used by nodes behind the same box (inside one collapsed group);
* a use of an initializer by a node inside a collapsed group, or by any node when
  initializers are not shown;
* a second use of one value by nodes of the same collapsed group (one edge per value).

Only the remaining uses (about as many as there are drawn edges) reach the builder's
per-use Python code, in their original order, so the scene is the same as walking
everything (the differential tests build both ways and compare).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from onnxviz.model.scopes import GraphScope
from onnxviz.present.groups import GroupTree


@dataclass(eq=False)
class UseTable:
    """Every use of a graph's values, in the order of ``scope.consumers``."""

    # What the table was built from: the index dicts (replaced when a graph is
    # re-indexed) and the document revision (a rename edits the index in place).
    consumers: object
    producer: object
    revision: int
    tree: GroupTree
    names: list[str]  # value name of each use
    value: np.ndarray  # value number of each use (uses of one value share it)
    node: np.ndarray  # consumer node index
    port: np.ndarray  # consumer input port
    prod: np.ndarray  # producing node index in this graph, -1: none (input, outer, ...)
    node_group: np.ndarray  # group number of each node (position in tree.groups), -1: none
    group_number: dict[str, int]  # group prefix -> group number
    initializers: frozenset[str]  # names of the graph's initializers
    is_init: np.ndarray  # the use reads an initializer of this graph
    tensors: dict[str, object] | None = None  # initializer name -> TensorProto, on demand

    def fits(self, scope: GraphScope, tree: GroupTree, revision: int) -> bool:
        """Still the graph's table: same document revision (every edit, undo and redo
        counts one), same index dicts and group tree."""
        return (
            self.revision == revision
            and self.consumers is scope.consumers
            and self.producer is scope.producer
            and self.tree is tree
        )


def use_table(scope: GraphScope, tree: GroupTree, revision: int) -> UseTable:
    initializers = set(scope.initializer_names())
    names: list[str] = []
    value: list[int] = []
    node: list[int] = []
    port: list[int] = []
    prod: list[int] = []
    producer = scope.producer
    for number, (name, uses) in enumerate(scope.consumers.items()):
        hit = producer.get(name)
        p = hit[0] if hit is not None else -1
        for i, k in uses:
            names.append(name)
            value.append(number)
            node.append(i)
            port.append(k)
            prod.append(p)
    group_number = {prefix: j for j, prefix in enumerate(tree.groups)}
    node_group = np.fromiter(
        (group_number[g] if g is not None else -1 for g in tree.node_group),
        dtype=np.int64,
        count=len(tree.node_group),
    )
    value_init = np.fromiter(
        (name in initializers for name in scope.consumers),
        dtype=bool,
        count=len(scope.consumers),
    )
    value_arr = np.asarray(value, dtype=np.int64)
    return UseTable(
        consumers=scope.consumers,
        producer=scope.producer,
        revision=revision,
        tree=tree,
        names=names,
        value=value_arr,
        node=np.asarray(node, dtype=np.int64),
        port=np.asarray(port, dtype=np.int64),
        prod=np.asarray(prod, dtype=np.int64),
        node_group=node_group,
        group_number=group_number,
        initializers=frozenset(initializers),
        is_init=value_init[value_arr] if len(value_arr) else np.zeros(0, dtype=bool),
    )


def visible_codes(table: UseTable, stand_in: np.ndarray) -> np.ndarray:
    """The box showing each node: its own number ``i`` when the node is shown, else
    ``n_nodes + g`` for the collapsed group ``g`` hiding it.  ``stand_in[g]`` is the
    collapsed group standing for group ``g`` (-1: ``g`` and its enclosing groups are open)."""
    n = len(table.node_group)
    codes = np.arange(n, dtype=np.int64)
    grouped = np.flatnonzero(table.node_group >= 0)
    if len(grouped) and len(stand_in):
        hidden_by = stand_in[table.node_group[grouped]]
        hidden = hidden_by >= 0
        codes[grouped[hidden]] = n + hidden_by[hidden]
    return codes


def uses_to_walk(table: UseTable, codes: np.ndarray, show_initializers: bool) -> np.ndarray:
    """Positions of the uses that may draw something (see the module docstring)."""
    n = len(codes)
    if len(table.node) == 0:
        return np.zeros(0, dtype=np.int64)
    dst = codes[table.node]
    produced = table.prod >= 0
    src = np.where(produced, codes[np.maximum(table.prod, 0)], -1)
    into_group = dst >= n
    internal = produced & ~table.is_init
    skip = internal & (src == dst)
    skip |= table.is_init & (into_group if show_initializers else True)
    # One edge per value into a collapsed group: keep the first use only.
    candidates = np.flatnonzero(internal & ~skip & into_group)
    if len(candidates):
        key = table.value[candidates] * (2 * n + 1) + dst[candidates]
        _, first = np.unique(key, return_index=True)
        repeat = np.ones(len(candidates), dtype=bool)
        repeat[first] = False
        skip[candidates[repeat]] = True
    return np.flatnonzero(~skip)


class VisibleProducers(Mapping[str, tuple[str, int]]):
    """Value name -> (id of the shown item that produces it, output port), computed on
    lookup from the graph index (a dict of all 100k values per rebuild is not needed).
    Port -1: a collapsed group, whose output ports are numbered when used."""

    def __init__(
        self,
        inputs: dict[str, tuple[str, int]],
        producer: dict[str, tuple[int, int]],
        codes: np.ndarray,
        item_id: Callable[[int], str],
    ) -> None:
        self._inputs = inputs
        self._producer = producer
        self._codes = codes
        self._item_id = item_id
        self._n = len(codes)

    def __getitem__(self, name: str) -> tuple[str, int]:
        hit = self._producer.get(name)
        if hit is None:
            return self._inputs[name]
        code = int(self._codes[hit[0]])
        return (self._item_id(code), -1 if code >= self._n else hit[1])

    def __contains__(self, name: object) -> bool:
        return name in self._producer or name in self._inputs

    def __iter__(self) -> Iterator[str]:
        yield from self._inputs
        yield from (name for name in self._producer if name not in self._inputs)

    def __len__(self) -> int:
        return len(self._inputs) + sum(1 for name in self._producer if name not in self._inputs)
