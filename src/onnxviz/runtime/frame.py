"""A running graph (`Frame`) and what control flow needs from whoever runs frames.

`Frame` holds one graph's value slots while it runs: its plan, the frame it was opened
from (subgraphs read outer-scope values through captures copied at entry) and the
stack text.  `FrameRunner` is the small protocol control_flow.py runs its bodies
through; the executor implements it.  It lives here, apart from both, so that the
executor can import control flow without control flow importing the executor.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple, Protocol

from onnxviz.errors import ExecutionError
from onnxviz.runtime.events import Event, FrameInfo, NodeRef
from onnxviz.runtime.plan import GraphPlan, PlanNode

# A frame's run: yields events (when watched), returns the graph's outputs.
Events = Generator[Event, None, list[Any]]


class ExecutionCancelled(ExecutionError):
    """The user cancelled the run."""


class Frame:
    __slots__ = ("plan", "values", "parent", "info", "depth", "node_index", "stack_text")

    def __init__(
        self, plan: GraphPlan, parent: Frame | None, info: FrameInfo, stack_text: str
    ) -> None:
        self.plan = plan
        self.values: list[Any] = plan.start_values()
        self.parent = parent  # lexical parent (outer scope), None for main and functions
        self.info = info
        self.depth = info.depth
        self.node_index = -1  # position in plan.nodes of the running node
        self.stack_text = stack_text

    def lookup(self, name: str) -> Any:
        """The value of ``name`` here or in an enclosing scope (KeyError if unknown)."""
        frame: Frame | None = self
        while frame is not None:
            s = frame.plan.slots.get(name)
            if s is not None:
                return frame.values[s]
            frame = frame.parent
        raise KeyError(name)

    def visible(self) -> dict[str, Any]:
        """Every live value (not yet freed) of this frame."""
        return {n: self.values[s] for n, s in self.plan.slots.items() if self.values[s] is not None}

    @property
    def current(self) -> PlanNode | None:
        if 0 <= self.node_index < len(self.plan.nodes):
            return self.plan.nodes[self.node_index]
        return None


class QuietProgram(NamedTuple):
    """A plan's compiled program and what its run needs, for frames nobody watches
    (`FrameRunner.quiet_program`): made once for the many frames of a Loop's, a Scan's
    or a SequenceMap's body, each then run by `FrameRunner.run_program`."""

    program: Any  # the compiled loop's program (quiet_loop.program_for)
    run: Any  # the compiled loop's run function
    nodes: list[PlanNode]  # the node list the program runs
    times: bytearray  # the program's step times
    limit: int  # the in-place size limit (-1: no in-place)
    fold: bool  # fold constant nodes on their first run
    iteration: Any  # the compiled loop's iteration function
    loop: Any  # the compiled loop's loop function (a Loop node's iterations)
    inputs: tuple[int, ...]  # the plan's input slots
    outputs: tuple[int, ...]  # the plan's output slots


class LoopScans(NamedTuple):
    """What a Loop's compiled iterations need beyond its program (`run_loop`)."""

    max_trip: int  # the trip count, -1 for none
    use_cond: bool  # the body's condition decides whether the loop goes on
    scans: list[list[Any]]  # the scan outputs' values so far, one list each
    counter: Any  # i -> the iteration number's array
    flag: Any  # the condition input's array (true: the iteration runs)
    truth: Any  # the body's condition output -> whether the loop goes on


def node_ref(pn: PlanNode) -> NodeRef:
    return NodeRef(pn.graph_path, pn.label, pn.index, pn.op_type, pn.domain)


class FrameRunner(Protocol):
    """What control flow (If, Loop, Scan, SequenceMap) needs to run its bodies."""

    def subplan(self, frame: Frame, pn: PlanNode, attr: str) -> GraphPlan:
        """The compiled graph attribute ``attr`` of control node ``pn``."""
        ...

    def new_frame(
        self,
        plan: GraphPlan,
        *,
        parent: Frame | None,
        caller: Frame | None,
        title: str,
        kind: str,
        feeds: list[Any] | None = None,
        iteration: int | None = None,
        iterations: int | None = None,
    ) -> Frame:
        """A frame for ``plan`` opened from ``caller``, seeing ``parent``'s scope."""
        ...

    def current_frame(self) -> Frame:
        """The frame whose node runs now (the top of the stack)."""
        ...

    def run_quietly(self, frame: Frame) -> tuple[list[Any] | None, int]:
        """Run an unwatched ``frame`` in the compiled loop alone: (its outputs, n), or
        (None, the node to go on from with run_frame)."""
        ...

    def quiet_program(self, plan: GraphPlan) -> QuietProgram | None:
        """What run_program needs for the frames of ``plan``, or None when they cannot
        run in the compiled loop alone (watched, kept values, a node it leaves)."""
        ...

    def run_iteration(
        self, frame: Frame, quiet: QuietProgram, base: list[Any], feeds: list[Any]
    ) -> tuple[list[Any] | None, int]:
        """run_quietly of ``frame`` (reused by a body's iterations) with its plan's
        quiet_program, its values first set to a copy of ``base`` with ``feeds`` as its
        inputs."""
        ...

    def run_loop(
        self, frame: Frame, quiet: QuietProgram, base: list[Any], state: list[Any], scans: LoopScans
    ) -> int:
        """A Loop's iterations from state[0] in ``frame`` (reused), each as run_iteration
        runs one, in one compiled call: -1 when the loop is done (``state`` updated), else
        the node to go on from with run_frame in iteration state[0]."""
        ...

    def run_frame(self, frame: Frame, start: int | None = None) -> Events:
        """Run every node of ``frame`` (the one node loop; unwatched, the compiled loop
        first), or from node ``start``; returns its outputs."""
        ...

    def check_cancel(self, pn: PlanNode) -> None:
        """Raise `ExecutionCancelled` if the run was cancelled (between iterations)."""
        ...

    def error(
        self, pn: PlanNode, inputs: list[Any], reason: str, cls: type = ExecutionError
    ) -> ExecutionError:
        """An error naming node ``pn`` and its inputs."""
        ...
