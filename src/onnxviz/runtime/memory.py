"""Keeping intermediate values under a memory cap.

When a session keeps intermediates, every node output is offered to the store.  The
store holds them until their total size would pass the cap; then it drops the oldest
ones (first kept, first dropped) and records what it dropped and why, so the user is
told instead of the process running out of memory.  A value larger than the whole cap
is never kept.  Subgraph values are keyed by graph path, so a Loop body keeps the
values of its latest iteration only.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from onnxviz.runtime.values import nbytes

DEFAULT_MEMORY_CAP = 2 * 1024**3  # 2 GiB


@dataclass(frozen=True)
class DroppedValue:
    graph_path: str
    name: str
    nbytes: int
    reason: str


class IntermediateStore:
    def __init__(self, cap_bytes: int = DEFAULT_MEMORY_CAP) -> None:
        self.cap_bytes = int(cap_bytes)
        self.used_bytes = 0
        self._values: OrderedDict[tuple[str, str], tuple[Any, int]] = OrderedDict()
        # The same values by graph, then name (in the order kept): `names` is a copy of
        # one, not a pass over every kept value (100k at a big run's end: 60-120 ms on
        # the UI thread, filling the Values table).
        self._by_graph: dict[str, dict[str, Any]] = {}
        self.dropped: list[DroppedValue] = []

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._values

    def get(self, graph_path: str, name: str) -> Any:
        item = self._values.get((graph_path, name))
        return None if item is None else item[0]

    def items(self) -> list[tuple[tuple[str, str], Any]]:
        return [(k, v) for k, (v, _) in self._values.items()]

    def names(self, graph_path: str = "main") -> dict[str, Any]:
        """The values kept for ``graph_path`` by name, in the order kept (a new dict)."""
        return dict(self._by_graph.get(graph_path, {}))

    def put(self, graph_path: str, name: str, value: Any) -> None:
        key = (graph_path, name)
        size = nbytes(value)
        old = self._values.pop(key, None)
        if old is not None:
            self.used_bytes -= old[1]
            del self._by_graph[graph_path][name]
        if size > self.cap_bytes:
            self.dropped.append(
                DroppedValue(graph_path, name, size, "larger than the memory cap by itself")
            )
            return
        while self.used_bytes + size > self.cap_bytes and self._values:
            (gp, nm), (_, sz) = self._values.popitem(last=False)
            del self._by_graph[gp][nm]
            self.used_bytes -= sz
            self.dropped.append(DroppedValue(gp, nm, sz, "oldest value dropped to stay under cap"))
        self._values[key] = (value, size)
        self._by_graph.setdefault(graph_path, {})[name] = value
        self.used_bytes += size

    def clear(self) -> None:
        self._values.clear()
        self._by_graph.clear()
        self.used_bytes = 0
        self.dropped.clear()
