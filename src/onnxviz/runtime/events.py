"""Events that `Session.steps()` yields while the interpreter runs.

Every event names where it happened: the `NodeRef` of the node (graph path, label,
op type) and the frame stack text (``main › Loop_3 iteration 4/10 › If_7 then_branch``)
so a UI can show a breadcrumb without knowing about frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from onnxviz.model.node_id import NodeId, address_of

STACK_SEPARATOR = " › "


@dataclass(frozen=True)
class NodeRef:
    """A node of one graph: ``graph_path`` as in docs/architecture.md §2 (``main``,
    ``main/body:Loop_3``, ``function:<domain>:<name>``) and the node's label (its name
    when non-empty and unique in the graph, else ``#<index>``).  ``str(ref)`` is the
    address form ``<graph path>::<label>`` that `Session.run_to` and breakpoints accept."""

    graph_path: str
    label: str
    index: int
    op_type: str
    domain: str = ""

    @property
    def address(self) -> str:
        return address_of(self.graph_path, self.label)

    @property
    def node_id(self) -> NodeId:
        """The node's identity, shared with the document, canvas and diagnostics."""
        return NodeId(self.graph_path, self.index, self.label)

    def __str__(self) -> str:
        return self.address


@dataclass(frozen=True)
class FrameInfo:
    """One running graph: the main graph, a subgraph iteration or a function call."""

    graph_path: str
    title: str  # e.g. "Loop_3 iteration 4/10", "If_7 then_branch", "main"
    depth: int  # 0 for the main graph
    kind: str  # "main" | "subgraph" | "function"
    iteration: int | None = None  # 0-based, for Loop / Scan / SequenceMap bodies
    iterations: int | None = None  # total when known


@dataclass
class Event:
    """Base class; ``stack`` is the frame stack text at the time of the event."""

    stack: str
    depth: int


@dataclass
class FrameEntered(Event):
    frame: FrameInfo


@dataclass
class FrameLeft(Event):
    frame: FrameInfo
    seconds: float = 0.0


@dataclass
class NodeStarted(Event):
    node: NodeRef
    # Input names and values (None for an absent optional input).
    inputs: dict[str, Any] = field(default_factory=dict)


@dataclass
class NodeFinished(Event):
    node: NodeRef
    outputs: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    folded: bool = False  # outputs reused from a constant-folded first run


@dataclass
class NodeFailed(Event):
    node: NodeRef | None
    error: Exception


@dataclass
class RunFinished(Event):
    outputs: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class Pause:
    """Why a stepping call (`step`, `run_to`, `resume`, ...) returned.

    ``reason`` is one of "step", "breakpoint", "nonfinite", "run_to", "frame_left",
    "paused" (`Session.pause` from another thread), "finished", "failed", "cancelled"; ``event`` is the event it stopped at.
    """

    reason: str
    event: Event | None
    breakpoint: Any = None

    @property
    def finished(self) -> bool:
        return self.reason in ("finished", "failed", "cancelled")
