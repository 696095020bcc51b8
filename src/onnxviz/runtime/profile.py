"""Per-node time and output size, gathered from `Session` events.

`Profiler.feed(event)` takes every event of a run (cheap: one dict update per finished
node); `rows()` is the table the run panel sorts and `heat()` the 0..1 value the canvas
colours by.  Nodes inside subgraphs and function bodies are counted under their own
address (``main/body:Loop_3::Add_1``), one call per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxviz.runtime.events import Event, NodeFinished
from onnxviz.runtime.values import describe, nbytes


@dataclass
class NodeProfile:
    address: str
    op_type: str
    graph_path: str
    index: int
    calls: int = 0
    seconds: float = 0.0
    output_bytes: int = 0  # of the latest call
    output_text: str = ""  # types and shapes of the latest call's outputs

    @property
    def mean_seconds(self) -> float:
        return self.seconds / self.calls if self.calls else 0.0


class Profiler:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeProfile] = {}
        self.total_seconds = 0.0

    def clear(self) -> None:
        self.nodes = {}
        self.total_seconds = 0.0

    def feed(self, event: Event) -> None:
        if type(event) is not NodeFinished:
            return
        ref = event.node
        key = ref.address
        row = self.nodes.get(key)
        if row is None:
            row = self.nodes[key] = NodeProfile(key, ref.op_type, ref.graph_path, ref.index)
        row.calls += 1
        row.seconds += event.seconds
        self.total_seconds += event.seconds
        outs: dict[str, Any] = event.outputs
        row.output_bytes = sum(nbytes(v) for v in outs.values())
        row.output_text = ", ".join(describe(v) for v in outs.values())

    def rows(self, key: str = "seconds", descending: bool = True) -> list[NodeProfile]:
        """The table sorted by a `NodeProfile` field name."""
        return sorted(self.nodes.values(), key=lambda r: getattr(r, key), reverse=descending)

    def heat(self, key: str = "seconds") -> dict[str, float]:
        """Each node's share of the largest value of ``key`` (0..1), on a square-root
        scale so that the few heavy nodes do not leave every other node white."""
        values = {a: float(getattr(r, key)) for a, r in self.nodes.items()}
        top = max(values.values(), default=0.0)
        if top <= 0:
            return {a: 0.0 for a in values}
        return {a: (v / top) ** 0.5 for a, v in values.items()}
