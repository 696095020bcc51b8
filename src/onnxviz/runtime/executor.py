"""The executor: the one node loop that runs every graph, watched or not.

`Executor.run_frame(frame)` runs the nodes of one frame and *returns* the graph's
outputs.  It is a generator, and the same loop serves every kind of run:

* **watched** (``Executor.watched``: stepping, breakpoints, `Session.steps`, fetches):
  it yields `FrameEntered` / `NodeStarted` / `NodeFinished` / `FrameLeft` around every
  frame and node, and the consumer of those events (the Session) is the run's
  observer: it can stop consuming at any event, at any depth, and look at the values
  of every frame on the stack;
* **unwatched** (`Session.run` with nobody looking): it yields nothing, so draining
  the generator is a single ``next()``; it runs the plan's fused node list
  (fusion.py: just another list of `PlanNode`) and may compute elementwise results
  into dead inputs (inplace.py).

Either way each node gets the same treatment: constant folding, the kernel call (or a
fused node, a control-flow node, a function call in a nested frame via ``yield
from``), kept values (``store``), per-node time (``profile``) and the freeing of dead
slots after the node's last use.  Control flow and function calls open nested frames
that run through this same loop.

On a kernel failure the executor raises `ExecutionError` naming the node, the op and
its input types; the frame stack is left as it was, so the failed node stays
inspectable.  `cancelled` (set from any thread) stops the run before its next node.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np
from onnx import NodeProto

from onnxviz.errors import ExecutionError
from onnxviz.model.scope_names import owner_label
from onnxviz.runtime import inplace as inplace_ops
from onnxviz.runtime import quiet_loop
from onnxviz.runtime.control_flow import run_control
from onnxviz.runtime.events import (
    STACK_SEPARATOR,
    FrameEntered,
    FrameInfo,
    FrameLeft,
    NodeFinished,
    NodeStarted,
)
from onnxviz.runtime.frame import (
    Events,
    ExecutionCancelled,
    Frame,
    LoopScans,
    QuietProgram,
    node_ref,
)
from onnxviz.runtime.functions import (
    call_attributes,
    context_function,
    function_opsets,
    input_signature,
    static_schema_function,
)
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.inplace import try_inplace
from onnxviz.runtime.invoke import UnsupportedOperator, call_node, normalize_outputs, spec_outputs
from onnxviz.runtime.memory import IntermediateStore
from onnxviz.runtime.plan import (
    GraphPlan,
    PlanContext,
    PlanNode,
    compile_graph,
    outer_constants,
)
from onnxviz.runtime.values import describe

# Subgraphs nest only as deep as protobuf allows (~30-60); functions calling each other
# could recurse forever.  Each frame costs a few generator levels of Python stack.
MAX_FRAME_DEPTH = 150

_ND = np.ndarray


def drain(events: Events) -> list[Any]:
    """Run an event generator to its end; its return value (an unwatched run yields
    nothing, so this is one ``next()``)."""
    while True:
        try:
            next(events)
        except StopIteration as stop:
            result: list[Any] = stop.value
            return result


def _resolved_node(pn: PlanNode) -> NodeProto:
    """The node with ``ref_attr_name`` attributes replaced by the caller's values."""
    if pn.outer_attrs is None or not any(a.ref_attr_name for a in pn.node.attribute):
        return pn.node
    node = NodeProto()
    node.CopyFrom(pn.node)
    del node.attribute[:]
    for a in pn.node.attribute:
        if not a.ref_attr_name:
            node.attribute.append(a)
        elif a.ref_attr_name in pn.outer_attrs:
            resolved = node.attribute.add()
            resolved.CopyFrom(pn.outer_attrs[a.ref_attr_name])
            resolved.name = a.name
    return node


# The FrameInfo of each (graph path, title, depth, kind) a frame was opened with.
_FRAME_INFOS: dict[tuple[Any, ...], FrameInfo] = {}


class Executor:
    """Runs plans (implements frame.FrameRunner).  One per Session run; holds the frame
    stack, the random generator, the intermediate store, per-node timing and the
    cancel flag."""

    def __init__(
        self,
        ctx: PlanContext,
        *,
        seed: int,
        store: IntermediateStore | None = None,
        file: str | None = None,
        input_values_in_events: bool = True,
    ) -> None:
        self.ctx = ctx
        self.seed = seed
        self._rng: np.random.Generator | None = None
        self.store = store
        self.file = file
        self.stack: list[Frame] = []
        # Set from any thread (Session.cancel); read by the loop before every node.
        self.cancelled = False
        self.input_values_in_events = input_values_in_events
        # Watched: events around every node and frame, the plan's own node list.
        # Unwatched: no events, the fused node list when `fuse`, in-place ops when
        # `inplace` (nobody sees an overwritten input).
        self.watched = True
        self.fuse = False
        self.inplace = False
        # node address -> [calls, total seconds] of the nodes the Python loop ran; the
        # compiled loop's are in `_step_times` until `profile` is read.
        self._profile: dict[str, list[float]] = {}
        # id(program) -> (its nodes, two doubles per node: calls and seconds, program)
        self._step_times: dict[int, tuple[list[PlanNode], bytearray, Any]] = {}
        self.failed_node: PlanNode | None = None
        self.failed_inputs: list[Any] = []
        # False when a run feeds an initializer that is also an input (IR < 4): the
        # plan's folded values were computed from the default and do not apply.
        self.fold = True

    @property
    def rng(self) -> np.random.Generator:
        """The run's random generator, made on first use: making one costs tens of
        microseconds, more than a small model's run pays for everything else."""
        return self._make_rng()

    def _make_rng(self) -> np.random.Generator:
        if self._rng is None:
            self._rng = np.random.default_rng(self.seed)
        return self._rng

    @property
    def profile(self) -> dict[str, list[float]]:
        """Node address -> [calls, total seconds] in this executor's runs."""
        profile = self._profile
        for nodes, times, _ in self._step_times.values():
            counts = np.frombuffer(times, dtype=np.float64).reshape(-1, 2)
            steps = np.flatnonzero(counts[:, 0]).tolist()
            # the compiled loop keeps ticks (native/_runloop.c: the time-stamp counter)
            per_tick = quiet_loop.seconds_per_tick() if steps else 1.0
            for i in steps:
                calls, ticks = counts[i]
                seconds = ticks * per_tick
                key = nodes[i].key
                entry = profile.get(key)
                if entry is None:
                    profile[key] = [int(calls), float(seconds)]
                else:
                    entry[0] += int(calls)
                    entry[1] += float(seconds)
            counts[:] = 0.0
        return profile

    def _times_of(self, program: Any, nodes: list[PlanNode]) -> bytearray:
        entry = self._step_times.get(id(program))
        if entry is None:
            entry = self._step_times[id(program)] = (nodes, bytearray(16 * len(nodes)), program)
        return entry[1]

    def unwatched(self, *, fuse: bool, inplace: bool) -> None:
        """Run without events from now on (nobody looks at a node).  Kept values
        (``store``) still need every node of the plan: no fusion, no in-place."""
        self.watched = False
        self.fuse = fuse and self.store is None
        self.inplace = inplace and self.store is None

    # -- frames --------------------------------------------------------------------
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
        depth = 0 if caller is None else caller.depth + 1
        if depth > MAX_FRAME_DEPTH:
            raise ExecutionError(
                f"frames nest deeper than {MAX_FRAME_DEPTH} (a function that calls itself?)",
                file=self.file,
                graph_path=plan.path,
            )
        key = (plan.path, title, depth, kind, iteration, iterations)
        info = _FRAME_INFOS.get(key)
        if info is None:
            # Made once per frame kind: a frozen dataclass's __init__ was a tenth of a
            # small model's fixed cost per run.  Iterations are many: not kept.
            info = FrameInfo(*key)
            if iteration is None:
                if len(_FRAME_INFOS) >= 1024:
                    _FRAME_INFOS.clear()
                _FRAME_INFOS[key] = info
        stack_text = title if caller is None else caller.stack_text + STACK_SEPARATOR + title
        frame = Frame(plan, parent, info, stack_text)
        values = frame.values  # the constants are in place (GraphPlan.start_values)
        if parent is not None:
            for s, name in plan.captures:
                try:
                    values[s] = parent.lookup(name)
                except KeyError:
                    raise ExecutionError(
                        f"value '{name}' is used but defined in no enclosing graph",
                        file=self.file,
                        graph_path=plan.path,
                    ) from None
        if feeds is not None:
            for s, v in zip(plan.input_slots, feeds):
                if s >= 0:
                    values[s] = v
            if self.store is not None:  # a body's inputs (iteration number, carried values)
                for name, v in zip(plan.input_names, feeds):
                    if name:
                        self.store.put(plan.path, name, v)
        return frame

    def stack_text(self) -> str:
        return self.stack[-1].stack_text if self.stack else ""

    def subplan(self, frame: Frame, pn: PlanNode, attr: str) -> GraphPlan:
        plan = pn.subplans.get(attr)
        if plan is None:
            graph = pn.attrs.get(attr)
            if graph is None:
                raise self.error(pn, [], f"the node has no '{attr}' graph attribute")
            plan = compile_graph(
                graph,
                f"{frame.plan.path}/{attr}:{pn.label}",
                self.ctx,
                kind="subgraph",
                opsets=frame.plan.opsets,
                outer_attrs=pn.outer_attrs,
            )
            plan.outer_constants = outer_constants(frame.plan, plan.captures)
            pn.subplans[attr] = plan
        return plan

    def check_cancel(self, pn: PlanNode) -> None:
        if self.cancelled:
            raise ExecutionCancelled(
                "the run was cancelled", file=self.file, graph_path=pn.graph_path, node=pn.label
            )

    # -- errors ----------------------------------------------------------------------
    def error(
        self, pn: PlanNode, inputs: Sequence[Any], reason: str, cls: type = ExecutionError
    ) -> ExecutionError:
        summaries = [
            f"{name or '(absent)'}: {describe(v) if name else '-'}"
            for name, v in zip(pn.input_names, inputs)
        ]
        text = f"{pn.op_type} node '{pn.label}' failed: {reason}"
        if summaries:
            text += "; inputs: " + ", ".join(summaries)
        self.failed_node = pn
        self.failed_inputs = list(inputs)
        err: ExecutionError = cls(
            text,
            file=self.file,
            graph_path=pn.graph_path,
            node=pn.label,
            op_type=pn.op_type,
            input_summaries=summaries,
        )
        return err

    # -- the node loop -------------------------------------------------------------------
    def current_frame(self) -> Frame:
        """The frame whose node runs now (the top of the stack)."""
        return self.stack[-1]

    def run_quietly(self, frame: Frame) -> tuple[list[Any] | None, int]:
        """Run ``frame`` in the compiled loop alone when nobody watches it: (its outputs,
        the node count) when the loop ran every node, else (None, the index of the first
        node it left, with the nodes before it run): the caller then goes on with
        ``run_frame(frame, start=that index)``.  (None, 0) when the frame is watched,
        keeps values, has no compiled program or a node only run_frame runs (control
        flow, a function call).

        Why: a frame's run through the generator (its making, its locals, ``yield
        from``) cost 2-3 us beyond its nodes: a tiny model's run, each If branch, each
        iteration of a Loop body (issue 21)."""
        program = self.quiet_program(frame.plan)
        if program is None:
            return None, 0
        return self.run_program(frame, program)

    def quiet_program(self, plan: GraphPlan) -> QuietProgram | None:
        """What `run_program` needs to run a frame of ``plan`` in the compiled loop alone,
        worked out once for the frames of one plan in a row (a Loop's or a Scan's
        iterations), or None where `run_quietly` gives (None, 0)."""
        if self.watched or self.store is not None:
            return None
        nodes = run_nodes(plan) if self.fuse else plan.nodes
        compiled = quiet_loop.program_for(plan, nodes, Executor._call_kernel)
        if compiled is None or not compiled[2]:  # (a node the loop leaves: run_frame's)
            return None
        program, run_compiled, _ = compiled
        limit = inplace_ops.MIN_ELEMENTS if self.inplace else -1
        times = self._times_of(program, nodes)
        module = quiet_loop.loop()
        return QuietProgram(
            program, run_compiled, nodes, times, limit, self.fold, module.iteration, module.loop,
            tuple(plan.input_slots), tuple(plan.output_slots),
        )  # fmt: skip

    def run_program(self, frame: Frame, quiet: QuietProgram) -> tuple[list[Any] | None, int]:
        """`run_quietly` of ``frame`` with its plan's `quiet_program`."""
        where = [0]
        self.stack.append(frame)
        try:
            i = quiet.run(
                quiet.program, 0, frame.values, self, quiet.times, where, quiet.limit, quiet.fold
            )
        except Exception as exc:  # (the frame stays on the stack, as run_frame leaves it)
            self._raise_compiled(frame, quiet.nodes[where[0]], exc)
        self.stack.pop()
        if i < len(quiet.nodes):
            return None, i
        plan = frame.plan
        frame.node_index = len(plan.nodes)
        values = frame.values
        return [values[s] if s >= 0 else None for s in plan.output_slots], i

    def run_iteration(
        self, frame: Frame, quiet: QuietProgram, base: list[Any], feeds: list[Any]
    ) -> tuple[list[Any] | None, int]:
        """`run_program` of ``frame`` (one frame reused by a body's iterations) with its
        values first set to a copy of ``base`` (constants and captures) with ``feeds`` at
        its inputs, all in the compiled call (native/_runloop.c, `iteration`)."""
        where = [0]
        self.stack.append(frame)
        try:
            result = quiet.iteration(
                quiet.program, frame, base, quiet.inputs, feeds, quiet.outputs, self, quiet.times,
                where, quiet.limit, quiet.fold,
            )  # fmt: skip
        except Exception as exc:
            self._raise_compiled(frame, quiet.nodes[where[0]], exc)
        self.stack.pop()
        if type(result) is int:
            return None, result
        return result, len(quiet.nodes)

    def run_loop(
        self, frame: Frame, quiet: QuietProgram, base: list[Any], state: list[Any], scans: LoopScans
    ) -> int:
        """A Loop's iterations from state[0] ([i, keep_going, carried]) in ``frame``,
        reused, each run as `run_iteration` runs one, all in one compiled call
        (native/_runloop.c, `loop`): -1 when the loop is done, with ``state`` its last,
        else the node the compiled loop left in iteration state[0], whose frame holds
        that iteration's values (go on with run_frame).  On a failure, ``frame`` is
        left on the stack and where[1] of the error is the iteration."""
        where = [-1, 0]  # (a step's failure sets where[0]; else the condition's: the Loop's)
        self.stack.append(frame)
        try:
            stopped = quiet.loop(
                quiet.program, frame, base, quiet.inputs, quiet.outputs, self, quiet.times,
                where, quiet.limit, quiet.fold, state, scans.max_trip, scans.use_cond,
                scans.scans, scans.counter, scans.flag, scans.truth,
            )  # fmt: skip
        except Exception as exc:
            state[0] = where[1]  # (the failed iteration, for the caller's frame title)
            if where[0] < 0:
                self.stack.pop()
                raise
            self._raise_compiled(frame, quiet.nodes[where[0]], exc)
        self.stack.pop()
        return stopped  # type: ignore[no-any-return]

    def run_frame(self, frame: Frame, start: int | None = None) -> Events:
        """Run every node of ``frame``; yields events when watched, returns the graph
        outputs.  Watched runs execute ``plan.nodes`` one by one; unwatched runs the fused
        list (fusion.run_nodes) when `fuse` is set.  Without ``start``, an unwatched frame
        is first `run_quietly`'s and the node loop below goes on from where that stopped
        (every body of control flow and every function call comes through here); with
        it, the loop starts at that node (a caller that ran `run_quietly` itself)."""
        if start is None:
            quiet_outs, start = self.run_quietly(frame)
            if quiet_outs is not None:
                return quiet_outs
        self.stack.append(frame)
        plan = frame.plan
        values = frame.values
        watched = self.watched
        store = self.store
        profile = self._profile
        perf = time.perf_counter
        fold = self.fold
        inplace = self.inplace
        inplace_min = inplace_ops.MIN_ELEMENTS
        call_kernel = self._call_kernel
        depth = frame.depth
        stack = frame.stack_text
        t_frame = perf()
        if watched:
            yield FrameEntered(stack, depth, frame.info)
            nodes = plan.nodes
        else:
            nodes = run_nodes(plan) if self.fuse else plan.nodes
        # Nobody sees this frame's nodes one by one: a plain call's node (prepared.py's
        # `plain`) takes the short way below, the node loop's fixed cost being most of a
        # small model's run (issue 21).
        quiet = not watched and store is None
        # ... and most of them run in the compiled loop (quiet_loop.py), which stops at
        # the nodes it leaves to this one.
        compiled = quiet_loop.program_for(plan, nodes, Executor._call_kernel) if quiet else None
        program, run_compiled, _ = compiled if compiled is not None else (None, None, False)
        times = self._times_of(program, nodes) if program is not None else None
        where = [0]
        inplace_limit = inplace_min if inplace else -1
        n_nodes = len(nodes)
        i = start
        while i < n_nodes:
            if run_compiled is not None:
                try:
                    i = run_compiled(program, i, values, self, times, where, inplace_limit, fold)
                except Exception as exc:
                    self._raise_compiled(frame, nodes[where[0]], exc)
                if i >= n_nodes:
                    break
            pn = nodes[i]
            i += 1
            if self.cancelled:
                raise ExecutionCancelled(
                    "the run was cancelled", file=self.file, graph_path=plan.path, node=pn.label
                )
            frame.node_index = pn.position
            ins = pn.gather(values)  # prepared.py: a list or tuple, None where absent
            if (
                quiet
                and pn.plain
                and not (
                    inplace
                    and pn.inplace_dead is not None
                    and (
                        (type(ins[0]) is _ND and ins[0].size >= inplace_min)
                        or (len(ins) > 1 and type(ins[1]) is _ND and ins[1].size >= inplace_min)
                    )
                )
            ):
                t0 = perf()
                try:
                    result = pn.call(*ins)
                except Exception as exc:
                    err = self._kernel_error(pn, ins, exc)
                    if err is exc:
                        raise
                    raise err from exc
                if type(result) is not np.ndarray:
                    result = normalize_outputs(result, 1)[0]
                dt = perf() - t0
                values[pn.out0] = result
                entry = profile.get(pn.key)
                if entry is None:
                    profile[pn.key] = [1, dt]
                else:
                    entry[0] += 1
                    entry[1] += dt
                result = ins = None
                for s in pn.free_after:
                    values[s] = None
                continue
            if watched:
                ref = pn.ref
                if ref is None:
                    ref = pn.ref = node_ref(pn)
                yield NodeStarted(
                    stack,
                    depth,
                    ref,
                    dict(zip(pn.input_names, ins)) if self.input_values_in_events else {},
                )
            t0 = perf()
            outs: list[Any]
            folded = fold and pn.folded is not None
            call = pn.call
            if folded:
                outs = pn.folded  # type: ignore[assignment]  # not None: checked above
            elif call is not None:
                # A plain kernel with one output (prepared.py), maybe in place (inplace.py).
                result = None
                if (
                    inplace
                    and pn.inplace_dead is not None
                    # try_inplace's own first test, without its call for the small
                    # values most nodes of small models see (no local name may refer
                    # to an input: try_inplace counts references).
                    and (
                        (type(ins[0]) is _ND and ins[0].size >= inplace_min)
                        or (len(ins) > 1 and type(ins[1]) is _ND and ins[1].size >= inplace_min)
                    )
                ):
                    result = try_inplace(pn.op_type, ins, pn.inplace_dead)
                if result is None:
                    try:
                        result = call(*ins)
                    except Exception as exc:
                        err = self._kernel_error(pn, ins, exc)
                        if err is exc:
                            raise
                        raise err from exc
                    if type(result) is not np.ndarray:
                        result = normalize_outputs(result, 1)[0]
                outs = [result]
                result = None
                if pn.foldable and fold:
                    _keep_folded(plan, pn, outs)
            elif pn.kind == "kernel":
                if pn.call_many is None:
                    outs = call_kernel(pn, ins)
                else:  # a specialized call of several outputs (prepared.py)
                    outs = self._call_many(pn, ins)
                if pn.foldable and fold:
                    _keep_folded(plan, pn, outs)
            elif pn.kind == "fused":
                outs = pn.fused(self, list(ins))
            elif pn.kind == "control":
                outs = yield from run_control(self, frame, pn, list(ins))
            elif pn.kind in ("function", "schema_function"):
                outs = yield from self._run_function(frame, pn, list(ins))
            else:
                raise self.error(pn, ins, pn.problem or "unsupported", UnsupportedOperator)
            dt = perf() - t0
            if watched or store is not None:
                out_map: dict[str, Any] = {}
                for s, name, v in zip(pn.outputs, pn.output_names, outs):
                    if s >= 0:
                        values[s] = v
                        out_map[name] = v
                        if store is not None:
                            store.put(plan.path, name, v)
            elif pn.out0 >= 0:
                values[pn.out0] = outs[0]
            else:
                for s, v in zip(pn.outputs, outs):
                    if s >= 0:
                        values[s] = v
            entry = profile.get(pn.key)
            if entry is None:
                profile[pn.key] = [1, dt]
            else:
                entry[0] += 1
                entry[1] += dt
            if watched:
                yield NodeFinished(stack, depth, ref, out_map, dt, folded)
            # Drop this generator's own references so dead values are freed now (and so
            # inplace.py's reference count sees only the slot).
            outs = out_map = v = ins = None  # type: ignore[assignment]
            for s in pn.free_after:
                values[s] = None
        frame.node_index = len(plan.nodes)
        outputs = [values[s] if s >= 0 else None for s in plan.output_slots]
        self.stack.pop()  # popped first: at FrameLeft the stack shows where we return to
        if watched:
            yield FrameLeft(stack, depth, frame.info, perf() - t_frame)
        return outputs

    # -- kernels -------------------------------------------------------------------------
    def _kernel_error(self, pn: PlanNode, ins: Sequence[Any], exc: Exception) -> Exception:
        """The error to raise for a kernel's exception: an ExecutionError naming the node
        (one that already names a node is passed on as is)."""
        if isinstance(exc, ExecutionError):
            if exc.node:
                return exc
            return self.error(pn, ins, exc.message, type(exc))
        if isinstance(exc, MemoryError):
            return self.error(pn, ins, "out of memory while computing the outputs")
        return self.error(pn, ins, f"{type(exc).__name__}: {exc}")

    def _raise_compiled(self, frame: Frame, pn: PlanNode, exc: Exception) -> NoReturn:
        """Raise for an exception of the compiled loop at ``pn`` (from an ``except`` of
        it): for its own calls of a kernel, the error naming the node, as this loop's
        calls raise; else ``exc`` itself."""
        frame.node_index = pn.position
        if not quiet_loop.calls_kernel(pn):  # _call_kernel and fused nodes name it already
            raise exc
        err = self._kernel_error(pn, pn.gather(frame.values), exc)
        if err is exc:
            raise exc
        raise err from exc

    def _call_many(self, pn: PlanNode, ins: Sequence[Any]) -> list[Any]:
        """The outputs of a node's specialized call of several outputs (errors name the
        node, as the loop's own call does)."""
        try:
            return pn.call_many(*ins)  # type: ignore[no-any-return]
        except Exception as exc:
            err = self._kernel_error(pn, ins, exc)
            if err is exc:
                raise
            raise err from exc

    def call_kernel(self, pn: PlanNode, ins: Sequence[Any]) -> list[Any]:
        """One kernel node's outputs (errors name the node)."""
        return self._call_kernel(pn, ins)

    def _call_kernel(self, pn: PlanNode, ins: Sequence[Any]) -> list[Any]:
        # Floating-point warnings (overflow to inf, 0/0) are results, not errors: the
        # Session runs everything under np.errstate(all="ignore").
        spec = pn.spec
        try:
            if spec is not None:
                # The plan resolved the kernel, its opset and attributes once.
                outs = spec_outputs(pn, ins, self._make_rng)
                if len(outs) == len(pn.outputs):
                    return outs
            else:
                outs = call_node(
                    pn.node,
                    list(ins),
                    {pn.domain: pn.opset},
                    rng=self._make_rng,  # made only if the kernel draws
                    spec=spec,
                    attributes=pn.attrs,
                )
        except Exception as exc:
            err = self._kernel_error(pn, ins, exc)
            if err is exc:
                raise
            raise err from exc
        if len(outs) < len(pn.outputs):
            outs = list(outs) + [None] * (len(pn.outputs) - len(outs))
        return outs

    def _run_function(self, frame: Frame, pn: PlanNode, ins: list[Any]) -> Events:
        if pn.kind == "function":
            fn = pn.function
            assert fn is not None
            key: Any = ""
            overload = getattr(fn, "overload", "")
            path = f"function:{fn.domain}:{fn.name}" + (f":{overload}" if overload else "")
        else:
            fn = static_schema_function(pn.domain, pn.op_type, pn.opset)
            key = ""
            if fn is None:
                key = input_signature(ins)
                if key not in pn.body_plans:
                    fn = context_function(_resolved_node(pn), pn.domain, pn.opset, ins)
                    if fn is None:
                        raise self.error(
                            pn,
                            ins,
                            "the schema could not build a function body",
                            UnsupportedOperator,
                        )
            path = f"schema:{pn.domain or 'ai.onnx'}:{pn.op_type}"
        plan = pn.body_plans.get(key)
        if plan is None:
            assert fn is not None
            attrs = call_attributes(pn.node, fn, pn.opset, pn.outer_attrs)
            plan = compile_graph(
                fn,
                path,
                self.ctx,
                kind="function",
                opsets=function_opsets(fn, frame.plan.opsets),
                outer_attrs=attrs,
            )
            pn.body_plans[key] = plan
        sub = self.new_frame(
            plan,
            parent=None,
            caller=frame,
            title=f"{owner_label(pn.label, pn.op_type)} ({pn.op_type} function)",
            kind="function",
            feeds=list(ins),
        )
        outs = yield from self.run_frame(sub)
        return outs[: len(pn.outputs)] + [None] * max(0, len(pn.outputs) - len(outs))


def _keep_folded(plan: GraphPlan, pn: PlanNode, outs: list[Any]) -> None:
    """Keep a foldable node's outputs for every later run, read-only: they are constants
    from now on, so kernels may key the forms they make of them (an LSTM's packed
    recurrent weight, a conv's packed filter) on them, as on initializers.  A dynamo
    export slices and concatenates an LSTM's weights in such nodes: without this its
    packed weight was rebuilt on every run (seq 1: 0.74 ms of a 2.3 ms run)."""
    for v in outs:
        if type(v) is np.ndarray:
            v.flags.writeable = False
    pn.folded = outs
    plan.folded_values.extend(outs)
    quiet_loop.forget(plan)  # the node's step reads its outputs from now on
