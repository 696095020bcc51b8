"""The compiled node loop of quiet runs (native/_runloop.c), and its programs.

A *quiet* run is one nobody watches node by node and that keeps no intermediate values
(executor.py): `Session.run`, a Loop body of one.  There the executor hands stretches of
its node list to ``_runloop.run``, which does in C what the Python loop does per node:
gather the inputs from their slots, call, store the outputs, count the time in the
profile, free the dead slots.  The Python loop still runs every node the compiled one
stops at (control flow, function calls, a node to fold on its first run, an in-place
candidate with a big input, a cancelled run) and names the node of any error.

`program_for` makes a node list's program once, from what prepared.py worked out for
each node, and keeps it on the plan; `forget` drops them when a node's mode changes (a
node folded on the first run runs FOLDED from then on).  With the compiled kernels off
(``ONNXVIZ_NATIVE=off``) or not built, there is no program and the Python loop runs
every node, so the test command's native-off pass proves that loop too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.control_flow import run_control_quietly
from onnxviz.runtime.invoke import normalize_outputs

if TYPE_CHECKING:
    from onnxviz.runtime.plan import GraphPlan, PlanNode

# Step modes (native/_runloop.c).
PLAIN, MANY, FUSED, KERNEL, FOLDED, PYTHON = range(6)

_ready = False


def _normalize_one(result: Any) -> Any:
    if isinstance(result, np.generic):  # (numpy's operators on 0-d arrays: the commonest)
        return np.asarray(result)
    if type(result) is list:  # a sequence, as it is (normalize_outputs keeps it so)
        return result
    return normalize_outputs(result, 1)[0]


_DIRECT_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))


def _probe(a: np.ndarray) -> tuple[Any, ...]:
    """What Python sees of ``a``, for the loop to compare with numpy's array fields as it
    reads them in C (native/array_fields.h)."""
    return (
        a,
        a.__array_interface__["data"][0],
        a.shape,
        a.strides,
        a.base,
        a.dtype,
        a.flags.num,
    )


def _probes() -> list[tuple[Any, ...]]:
    """Arrays whose fields differ in every way the loop reads: owners and views, C order
    and not, writable and read-only, each of the direct dtypes, 0-d to 3-d."""
    owner = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    view = owner[:, 1:, ::2]
    view.flags.writeable = False
    return [
        _probe(owner),
        _probe(view),
        _probe(np.zeros((5, 1), np.int64).T),
        _probe(np.array(7, np.int32)),
        _probe(np.ones(3, np.float64)[1:]),
    ]


def loop() -> Any:
    """The compiled loop module, or None (kernels off or not built)."""
    global _ready
    module = native.load("runloop")
    if module is not None and not _ready:
        module.setup(np.ndarray, _normalize_one)
        module.arrays(_probes(), _DIRECT_DTYPES)
        _ready = True
    return module


def seconds_per_tick() -> float:
    """The seconds of one unit of the compiled loop's step times (`times`)."""
    module = loop()
    return 1.0 if module is None else float(module.seconds_per_tick())


def decline(*ins: Any) -> None:
    """The fallback of a fused node's quick call (a held product or chain): None, so the
    compiled loop makes the node's own call instead."""
    return None


def step_mode(pn: PlanNode, call_kernel: Any) -> tuple[int, Any, Any]:
    """(mode, call, extra) of one node (the step's fields, native/_runloop.c)."""
    if pn.plain:
        return PLAIN, pn.call, None
    if pn.foldable:
        if pn.folded is not None:
            return FOLDED, None, list(pn.folded)
        return PYTHON, None, None  # folded by the Python loop on its first run
    if pn.kind == "kernel":
        if pn.call_many is not None:
            return MANY, pn.call_many, None
        if pn.call is None:
            return KERNEL, call_kernel, pn
        return PYTHON, None, None  # a single output nobody reads
    if pn.kind == "fused":
        # A fused object with a `quick` attribute may make a compiled call of itself on
        # its first run; the loop reads and tries it first (native/_runloop.c, FUSED).
        return FUSED, pn.fused, pn.fused if hasattr(pn.fused, "quick") else None
    if pn.kind == "control":  # (its bodies run quietly too: control_flow.py)
        return KERNEL, run_control_quietly, pn
    return PYTHON, None, None  # functions, unsupported


def calls_kernel(pn: PlanNode) -> bool:
    """Whether the node's step calls its kernel itself (PLAIN, MANY), whose errors do
    not name the node; the executor's _call_kernel and fused nodes raise errors that do."""
    return step_mode(pn, None)[0] in (PLAIN, MANY)


def program_for(plan: GraphPlan, nodes: list[PlanNode], call_kernel: Any) -> Any:
    """(The compiled program of ``nodes`` (plan.nodes or its fused list), made once, the
    module's ``run``, whether the program has no PYTHON step: the loop may run the whole
    list), or None (kernels off or not built)."""
    entry = plan.quiet_programs.get(id(nodes))
    if entry is not None and entry[0] is nodes and native.level() is not None:
        return entry[1]
    module = loop()
    if module is None:
        return None
    steps = []
    for pn in nodes:
        mode, call, extra = step_mode(pn, call_kernel)
        steps.append(
            (
                mode,
                pn.inplace_dead is not None,
                call,
                extra,
                tuple(pn.inputs),
                tuple(pn.outputs),
                tuple(pn.free_after),
            )
        )
    whole = all(step[0] != PYTHON for step in steps)
    program = (module.compile(steps, plan.n_slots), module.run, whole)
    plan.quiet_programs[id(nodes)] = (nodes, program)
    return program


def forget(plan: GraphPlan) -> None:
    """Drop the plan's programs: some node's mode changed."""
    plan.quiet_programs.clear()
