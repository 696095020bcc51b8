"""`NodeId`: the one identity of a node (graph path + node index), and the one place its
written forms are made and read.

Forms in use:

* the address ``<graph path>::<label>`` (breakpoints, ``run --to``, diagnostics), where
  the label is the node's name when non-empty and unique in its graph, else ``#<index>``;
* the canvas item id ``<graph path>#<index>`` (scene items, navigation targets), and the
  group item id ``<graph path>|g:<name-scope prefix>`` next to it.

Graph paths contain ``:`` (``function:<domain>:<name>``, ``main/body:Loop_3``) and node
names may contain ``::``, so an address is split where its graph part names a graph the
model has, when the graphs are known.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass, field

ADDRESS_SEP = "::"
ITEM_SEP = "#"
GROUP_SEP = "|g:"


@dataclass(frozen=True, order=True)
class NodeId:
    """A node by graph path and index; ``str()`` is its address ``path::label``.  The
    label is carried for printing only (equality and hashing use path and index)."""

    graph_path: str
    index: int
    label: str = field(default="", compare=False)

    @property
    def address(self) -> str:
        return address_of(self.graph_path, self.label or f"#{self.index}")

    @property
    def item_id(self) -> str:
        """The id of the canvas item that draws this node."""
        return f"{self.graph_path}{ITEM_SEP}{self.index}"

    def __str__(self) -> str:
        return self.address


def address_of(graph_path: str, label: str) -> str:
    return f"{graph_path}{ADDRESS_SEP}{label}"


def split_address(address: str, graphs: Container[str] | None = None) -> tuple[str, str] | None:
    """(graph path, label) of an address, or None when it has no ``::``.  With
    ``graphs`` (the paths the model has) the split is the one whose graph part is
    among them; otherwise at the first ``::``."""
    if ADDRESS_SEP not in address:
        return None
    if graphs is not None:
        start = 0
        while (at := address.find(ADDRESS_SEP, start)) >= 0:
            if address[:at] in graphs:
                return address[:at], address[at + len(ADDRESS_SEP) :]
            start = at + 1
    path, _, label = address.partition(ADDRESS_SEP)
    return path, label


def resolve_address(
    address: str,
    graphs: Container[str],
    index_of: Callable[[str, str], int | None],
) -> NodeId | None:
    """The node an address names: ``index_of(graph path, label)`` looks the label up
    (`GraphScope.node_index`); None when the graph or node does not exist."""
    split = split_address(address, graphs)
    if split is None or split[0] not in graphs:
        return None
    path, label = split
    index = index_of(path, label)
    return None if index is None else NodeId(path, index, label)


def parse_item_id(item_id: str) -> NodeId | None:
    """The node a canvas item id ``path#index`` names; None for other items (groups,
    graph inputs and outputs, proxies)."""
    path, sep, index = item_id.rpartition(ITEM_SEP)
    if not sep or not index.isdigit() or GROUP_SEP in path:
        return None
    return NodeId(path, int(index))


def group_item_id(graph_path: str, prefix: str) -> str:
    """The id of the canvas item for a name-scope group of a graph."""
    return f"{graph_path}{GROUP_SEP}{prefix}"


def split_group_id(item_id: str) -> tuple[str, str] | None:
    """(graph path, name-scope prefix) of a group item id, else None."""
    path, sep, prefix = item_id.partition(GROUP_SEP)
    return (path, prefix) if sep else None
