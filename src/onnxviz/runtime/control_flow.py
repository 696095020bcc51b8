"""If, Loop, Scan and SequenceMap, run by the executor in nested frames.

Each runs its body graph through the runner's one node loop (`FrameRunner.run_frame`,
``yield from``), so every body node produces events when the run is watched and the
Session can step into a body iteration by iteration.  Body frames see outer-scope
values through the plan's captures.  Only the `FrameRunner` protocol (frame.py) is
imported: the executor imports this module, not the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnxviz.model.scope_names import owner_label
from onnxviz.runtime.frame import Events, Frame, FrameRunner, LoopScans, QuietProgram
from onnxviz.runtime.plan import GraphPlan, PlanNode
from onnxviz.runtime.values import empty_like_type


def _scalar_bool(value: Any) -> bool:
    if type(value) is np.ndarray and value.ndim == 0:
        return bool(value)  # (most conditions: no asarray, no reshape)
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"condition must hold one element, got shape {arr.shape}")
    return bool(arr.reshape(-1)[0])


def run_control(ex: FrameRunner, frame: Frame, pn: PlanNode, ins: list[Any]) -> Events:
    op = pn.op_type
    try:
        if op == "If":
            return (yield from _run_if(ex, frame, pn, ins))
        if op == "Loop":
            return (yield from _run_loop(ex, frame, pn, ins))
        if op == "Scan":
            if pn.opset < 9:
                return (yield from _run_scan8(ex, frame, pn, ins))
            return (yield from _run_scan(ex, frame, pn, ins))
        if op == "SequenceMap":
            return (yield from _run_sequence_map(ex, frame, pn, ins))
    except (ValueError, TypeError, IndexError) as exc:
        # Problems with the control node's own inputs (nested failures are already
        # ExecutionErrors naming the inner node and pass through untouched).
        raise ex.error(pn, ins, f"{type(exc).__name__}: {exc}") from exc
    raise ex.error(pn, ins, f"unknown control-flow op {op}")


def run_control_quietly(ex: FrameRunner, pn: PlanNode, ins: list[Any]) -> list[Any]:
    """A control-flow node's outputs in an unwatched run, without a generator for the
    node loop to step through: the compiled loop calls this (quiet_loop.step_mode) with
    the frame that runs ``pn`` on top of the runner's stack.  Nobody watches, so its
    bodies yield no event and the generator ends at its first ``next``; the frame that
    holds the node stays in the compiled loop instead of stopping there (a Python
    loop's frame for each If or Loop node: 2-4 us of a small model's run)."""
    frame = ex.current_frame()
    if pn.op_type != "If":
        return _drain(pn, run_control(ex, frame, pn, ins))
    # An If without its two generators (run_control's and _run_if's): its branch's
    # frame, run by the compiled loop alone when it can (a torch.cond export's whole
    # run was 2x onnxruntime's, most of it such fixed costs).
    try:
        sub = _if_frame(ex, frame, pn, ins)
    except (ValueError, TypeError, IndexError) as exc:  # (run_control's errors)
        raise ex.error(pn, ins, f"{type(exc).__name__}: {exc}") from exc
    outs, stopped = ex.run_quietly(sub)
    return outs if outs is not None else _drain(pn, ex.run_frame(sub, stopped))


def _drain(pn: PlanNode, gen: Events) -> list[Any]:
    """The value an unwatched run's generator returns at its first ``next``."""
    try:
        event = next(gen)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    gen.close()
    raise RuntimeError(f"an unwatched run of {pn.label} yielded {type(event).__name__}")


def _if_frame(ex: FrameRunner, frame: Frame, pn: PlanNode, ins: list[Any]) -> Frame:
    """The frame of the branch an If's condition picks."""
    branch = "then_branch" if _scalar_bool(ins[0]) else "else_branch"
    plan = ex.subplan(frame, pn, branch)
    return ex.new_frame(
        plan,
        parent=frame,
        caller=frame,
        title=f"{owner_label(pn.label, pn.op_type)} {branch}",
        kind="subgraph",
        feeds=[],
    )


def _run_if(ex: FrameRunner, frame: Frame, pn: PlanNode, ins: list[Any]) -> Events:
    sub = _if_frame(ex, frame, pn, ins)
    outs = yield from ex.run_frame(sub)
    return outs


class _Body:
    """The frames of a Loop's, Scan's or SequenceMap's body, one per iteration.

    Watched (or keeping values), each iteration gets its own frame and runs through
    `run_frame`, yielding its nodes' events.  Nobody watching, one frame serves every
    iteration (`run_quietly`): its constants and captures are looked up once, and each
    iteration starts from a copy of those slots with its own inputs set, run by the
    compiled loop with no generator.  The frame and its title were 2-3 us of each
    iteration, the generator another 1 (a 3-node Loop body: 11 us an iteration, where
    onnxruntime takes 1.5).  When an iteration fails, the reused frame takes that
    iteration's title and number before the error leaves, so the stack names it."""

    __slots__ = ("ex", "frame", "pn", "plan", "title", "iterations", "quiet", "sub", "base")

    def __init__(
        self,
        ex: FrameRunner,
        frame: Frame,
        pn: PlanNode,
        plan: GraphPlan,
        title: Callable[[int], str],
        iterations: int | None,
    ) -> None:
        self.ex = ex
        self.frame = frame
        self.pn = pn
        self.plan = plan
        self.title = title  # iteration number -> the frame's title
        self.iterations = iterations
        self.quiet: QuietProgram | None = ex.quiet_program(plan)
        self.sub: Frame | None = None  # the reused frame (made at the first iteration)
        self.base: list[Any] = []  # its slots before any input: constants and captures

    def new_frame(self, feeds: list[Any] | None, i: int) -> Frame:
        """Iteration ``i``'s own frame (watched runs)."""
        return self.ex.new_frame(
            self.plan,
            parent=self.frame,
            caller=self.frame,
            title=self.title(i),
            kind="subgraph",
            feeds=feeds,
            iteration=i,
            iterations=self.iterations,
        )

    def run(self, feeds: list[Any], i: int) -> Events:
        """Iteration ``i``'s outputs in its own frame (`quiet` unset: the callers run the
        other iterations by `run_quietly` or `loop`, without this generator)."""
        return (yield from self.ex.run_frame(self.new_frame(feeds, i)))

    def loop(self, state: list[Any], looped: LoopScans) -> list[Any] | None:
        """A Loop's iterations from state[0] in the reused frame (`FrameRunner.run_loop`;
        only when `quiet` is set): None when the loop is done, else the outputs of the
        iteration state[0], which the compiled loop left to run_frame."""
        sub = self._frame()
        try:
            stopped = self.ex.run_loop(sub, self.quiet, self.base, state, looped)  # type: ignore[arg-type]
            if stopped < 0:
                return None
            return _drain(self.pn, self.ex.run_frame(sub, stopped))
        except BaseException:
            self._retitle(state[0])
            raise

    def _frame(self) -> Frame:
        """The reused frame (made at the first iteration)."""
        sub = self.sub
        if sub is None:
            sub = self.sub = self.new_frame(None, 0)
            self.base = sub.values
        return sub

    def _retitle(self, i: int) -> None:
        """Make the reused frame iteration ``i``'s (what the stack shows after it
        failed)."""
        sub = self._frame()
        named = self.new_frame(None, i)
        sub.info, sub.stack_text = named.info, named.stack_text

    def run_quietly(self, feeds: list[Any], i: int) -> list[Any]:
        """Iteration ``i``'s outputs, in the reused frame (only when `quiet` is set).
        ``feeds`` is emptied: the frame's slots take its values over, so that a small
        result the caller holds nowhere else may be written again by the call that made
        it (native/_runloop.c, `binary`; a Loop's carried state)."""
        sub = self._frame()
        try:
            outs, stopped = self.ex.run_iteration(sub, self.quiet, self.base, feeds)  # type: ignore[arg-type]
            if outs is None:  # stopped at a node the compiled loop leaves to run_frame
                outs = _drain(self.pn, self.ex.run_frame(sub, stopped))
        except BaseException:
            self._retitle(i)
            raise
        return outs


def _counter(i: int) -> Any:
    """A Loop iteration's number, as its body reads it."""
    return np.array(i, dtype=np.int64)


def _iteration_title(pn: PlanNode, total: int | None, batch: str = "") -> Callable[[int], str]:
    """Iteration number -> the title of that iteration's frame ("Loop 'x' iteration
    3/10"; an opset-8 Scan's names its batch item before the iteration)."""
    owner = owner_label(pn.label, pn.op_type)
    of = "" if total is None else f"/{total}"
    return lambda i: f"{owner} {batch}iteration {i + 1}{of}"


def _run_loop(ex: FrameRunner, frame: Frame, pn: PlanNode, ins: list[Any]) -> Events:
    trip = ins[0] if len(ins) > 0 else None
    cond = ins[1] if len(ins) > 1 else None
    carried = list(ins[2:])
    max_trip = None if trip is None else int(np.asarray(trip).reshape(-1)[0])
    keep_going = True if cond is None else _scalar_bool(cond)
    plan = ex.subplan(frame, pn, "body")
    n_carried = len(carried)
    n_scan = len(plan.output_names) - 1 - n_carried
    if n_scan < 0:
        raise ValueError(
            f"the body has {len(plan.output_names)} outputs, fewer than 1 + {n_carried} carried"
        )
    scans: list[list[Any]] = [[] for _ in range(n_scan)]
    body = _Body(ex, frame, pn, plan, _iteration_title(pn, max_trip), max_trip)
    use_cond = cond is not None  # (the spec's for-loop and infinite forms ignore the body's)
    # The condition input of every iteration the compiled loop runs (true: it runs), one
    # array for them all: no kernel writes its inputs (in-place reuse takes large ones).
    flag = np.array(True)
    i = 0
    while keep_going and (max_trip is None or i < max_trip):
        ex.check_cancel(pn)
        if body.quiet is not None:
            # The compiled loop runs the iterations, back here only at a node it leaves
            # (or an error): that iteration goes on in run_frame, then the loop again.
            state: list[Any] = [i, keep_going, carried]
            trips = -1 if max_trip is None else max_trip  # (not negative here: it runs)
            looped = LoopScans(trips, use_cond, scans, _counter, flag, _scalar_bool)
            outs = body.loop(state, looped)  # (carried's items move into the body's slots)
            i, keep_going, carried = state
            if outs is None:
                break
        else:
            feeds = [np.array(i, dtype=np.int64), np.array(keep_going), *carried]
            outs = yield from body.run(feeds, i)
        if use_cond and outs[0] is not None:
            keep_going = _scalar_bool(outs[0])
        carried = outs[1 : 1 + n_carried]
        for k in range(n_scan):
            scans[k].append(outs[1 + n_carried + k])
        i += 1
    results: list[Any] = list(carried)
    for k in range(n_scan):
        if scans[k]:
            results.append(np.stack([np.asarray(v) for v in scans[k]], axis=0))
        else:
            results.append(empty_like_type(plan.output_types[1 + n_carried + k] or _no_type()))
    return results


def _no_type() -> Any:
    from onnx import TypeProto

    return TypeProto()


def _run_scan(ex: FrameRunner, frame: Frame, pn: PlanNode, ins: list[Any]) -> Events:
    n_scan_in = int(pn.attrs["num_scan_inputs"])
    n_state = len(ins) - n_scan_in
    states = list(ins[:n_state])
    scan_ins = [np.asarray(x) for x in ins[n_state:]]
    in_axes = list(pn.attrs.get("scan_input_axes") or [0] * n_scan_in)
    in_dirs = list(pn.attrs.get("scan_input_directions") or [0] * n_scan_in)
    in_axes = [a + x.ndim if a < 0 else a for a, x in zip(in_axes, scan_ins)]
    if not scan_ins:
        raise ValueError("Scan needs at least one scan input")
    length = scan_ins[0].shape[in_axes[0]]
    for x, a in zip(scan_ins, in_axes):
        if x.shape[a] != length:
            raise ValueError(
                f"scan inputs disagree on the sequence length ({x.shape[a]} != {length})"
            )
    plan = ex.subplan(frame, pn, "body")
    n_scan_out = len(plan.output_names) - n_state
    scans: list[list[Any]] = [[] for _ in range(n_scan_out)]
    body = _Body(ex, frame, pn, plan, _iteration_title(pn, length), length)
    for t in range(length):
        ex.check_cancel(pn)
        slices = [
            np.take(x, (length - 1 - t) if d else t, axis=a)
            for x, a, d in zip(scan_ins, in_axes, in_dirs)
        ]
        feeds = [*states, *slices]
        n_state, states = len(states), []  # (run_quietly: the body's slots alone hold them)
        outs = body.run_quietly(feeds, t) if body.quiet else (yield from body.run(feeds, t))
        states, step_outs = _scan_step(outs, n_state)
        for k in range(n_scan_out):
            scans[k].append(step_outs[k])
    out_axes = list(pn.attrs.get("scan_output_axes") or [0] * n_scan_out)
    out_dirs = list(pn.attrs.get("scan_output_directions") or [0] * n_scan_out)
    results: list[Any] = list(states)
    for k in range(n_scan_out):
        items = scans[k]
        if not items:
            results.append(empty_like_type(plan.output_types[n_state + k] or _no_type()))
            continue
        if out_dirs[k]:
            items = items[::-1]
        axis = out_axes[k]
        rank = items[0].ndim + 1
        axis = axis + rank if axis < 0 else axis
        results.append(np.stack(items, axis=axis))
    return results


def _scan_step(outs: list[Any], n_state: int) -> tuple[list[Any], list[Any]]:
    """One Scan iteration's outputs (both opset forms): the new states and this step's
    scan outputs."""
    return list(outs[:n_state]), [np.asarray(o) for o in outs[n_state:]]


def _run_scan8(ex: FrameRunner, frame: Frame, pn: PlanNode, ins: list[Any]) -> Events:
    """Opset 8 Scan: a leading batch axis, the scan axis is 1, optional sequence_lens."""
    n_scan_in = int(pn.attrs["num_scan_inputs"])
    seq_lens = ins[0]
    rest = ins[1:]
    n_state = len(rest) - n_scan_in
    states_b = [np.asarray(x) for x in rest[:n_state]]
    scan_ins = [np.asarray(x) for x in rest[n_state:]]
    dirs = list(pn.attrs.get("directions") or [0] * n_scan_in)
    batch = scan_ins[0].shape[0]
    max_len = scan_ins[0].shape[1]
    lens = (
        [max_len] * batch
        if seq_lens is None
        else [int(v) for v in np.asarray(seq_lens).reshape(-1)]
    )
    plan = ex.subplan(frame, pn, "body")
    n_scan_out = len(plan.output_names) - n_state
    final_states: list[list[Any]] = [[] for _ in range(n_state)]
    scan_outs: list[list[Any]] = [[] for _ in range(n_scan_out)]
    for b in range(batch):
        states = [s[b] for s in states_b]
        per_step: list[list[Any]] = [[] for _ in range(n_scan_out)]
        length = lens[b]
        title = _iteration_title(pn, length, f"batch {b + 1}/{batch} ")
        body = _Body(ex, frame, pn, plan, title, length)
        for t in range(length):
            ex.check_cancel(pn)
            slices = [x[b, (length - 1 - t) if d else t] for x, d in zip(scan_ins, dirs)]
            feeds = [*states, *slices]
            states = []  # (run_quietly: the body's slots alone hold them)
            outs = body.run_quietly(feeds, t) if body.quiet else (yield from body.run(feeds, t))
            states, step_outs = _scan_step(outs, len(states_b))
            for k in range(n_scan_out):
                per_step[k].append(step_outs[k])
        for k in range(n_state):
            final_states[k].append(np.asarray(states[k]))
        for k in range(n_scan_out):
            stacked = np.stack(per_step[k], axis=0) if per_step[k] else None
            if stacked is not None and length < max_len:
                pad = np.zeros((max_len - length, *stacked.shape[1:]), dtype=stacked.dtype)
                stacked = np.concatenate([stacked, pad], axis=0)
            scan_outs[k].append(stacked)
    results: list[Any] = [np.stack(v, axis=0) for v in final_states]
    for k in range(n_scan_out):
        results.append(np.stack(scan_outs[k], axis=0))
    return results


def _run_sequence_map(ex: FrameRunner, frame: Frame, pn: PlanNode, ins: list[Any]) -> Events:
    seq = ins[0]
    if not isinstance(seq, list):
        raise TypeError("SequenceMap's first input must be a sequence")
    extra = ins[1:]
    for e in extra:
        if isinstance(e, list) and len(e) != len(seq):
            raise ValueError(f"sequence inputs differ in length ({len(e)} != {len(seq)})")
    plan = ex.subplan(frame, pn, "body")
    n_out = len(plan.output_names)
    results: list[list[Any]] = [[] for _ in range(n_out)]
    body = _Body(ex, frame, pn, plan, _iteration_title(pn, len(seq)), len(seq))
    for i, item in enumerate(seq):
        ex.check_cancel(pn)
        feeds = [item, *[e[i] if isinstance(e, list) else e for e in extra]]
        outs = body.run_quietly(feeds, i) if body.quiet else (yield from body.run(feeds, i))
        for k in range(n_out):
            results[k].append(outs[k])
    return list(results)
