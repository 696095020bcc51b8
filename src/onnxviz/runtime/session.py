"""`Session`: run a model in the bundled interpreter, all at once or step by step.

Quick use::

    sess = Session(model_or_document, seed=0)
    outputs = sess.run({"x": array})            # dict name -> value

Stepping (a debugger over the graph)::

    sess.start(feeds)                           # paused before anything runs
    sess.add_breakpoint(node="main::Conv_3")    # or op_type="Loop", or nonfinite=True
    pause = sess.resume()                       # runs until a breakpoint or the end
    pause = sess.step()                         # step into: pause before the next node,
                                                #   entering subgraphs and functions
    pause = sess.step_over()                    # next node at this depth or shallower
    pause = sess.step_out()                     # until the current frame is left
    pause = sess.run_to("main/body:Loop_3::Add_1")
    pause = sess.advance("step_over")           # the same, by mode name (MODES)
    sess.value("x"); sess.values(); sess.stack_text
    for event in sess.steps(feeds): ...         # raw events (events.py)

**From another thread.**  `advance` (and the calls above, which use it) may run on a
worker thread while another thread calls `pause()` (stop before the next node, reason
"paused"; `advance` again resumes where it stopped) or `cancel()` (the run ends before
its next node with state "cancelled").  ``on_event`` sees every event on the way.

**Node addresses.**  A node is addressed as ``<graph path>::<node label>``: the graph
path as in DESIGN.md §3 (``main``, ``main/body:Loop_3``, ``main/body:Loop_3/then_branch:If_7``,
``function:<domain>:<name>`` for a model-local function body, ``schema:<domain>:<op>`` for
an operator's schema-defined body) and the node label (the node's name when it is
non-empty and unique in its graph, else ``#<index>``).  ``(graph_path, label)`` tuples
and `NodeRef` objects are accepted too, and a bare label (no ``::``) matches that label
or node name in any graph.  Breakpoints in a body hit on every iteration or call.

A pause happens *before* a node runs (`NodeStarted`), except for a non-finite
breakpoint (after the node, at `NodeFinished`, outputs in the event) and `step_out`
(at `FrameLeft`).  A kernel failure ends the run with an `ExecutionError` naming the
node, its op and input types; the frame stack stays as it was, so `value()`,
`values()` and `stack_text` still show the failed node's surroundings.

Input: a ModelProto or any object with ``.model`` (ModelProto) and ``.base_dir``.
Random ops draw from ``numpy.random.default_rng(seed)``, re-created at each run.
With ``keep_intermediates=True`` every node output is kept (subgraph values: latest
iteration) up to ``memory_cap_bytes``; what had to be dropped is listed in
``session.dropped``.

**Speed.**  `run()` without ``fetch`` runs unwatched: the executor's node loop makes
no event objects; without kept intermediates it also runs elementwise ops in place on dead inputs
(``inplace_ops``) and Conv+BatchNormalization pairs folded into one Conv
(``fuse_ops``, see fusion.py); `node_times` then has one entry per executed node (a
fused pair under the Conv's address).  Stepping and `steps()` always run every node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import ModelProto, TypeProto

from onnxviz.errors import ExecutionError
from onnxviz.model.node_id import ADDRESS_SEP, address_of, split_address
from onnxviz.model.text import as_text
from onnxviz.runtime import fp_quiet
from onnxviz.runtime.events import (
    Event,
    FrameEntered,
    FrameInfo,
    FrameLeft,
    NodeFailed,
    NodeFinished,
    NodeRef,
    NodeStarted,
    Pause,
    RunFinished,
)
from onnxviz.runtime.executor import Executor
from onnxviz.runtime.frame import ExecutionCancelled, Frame, node_ref
from onnxviz.runtime.functions import local_function_index
from onnxviz.runtime.heap import keep_freed_memory
from onnxviz.runtime.memory import DEFAULT_MEMORY_CAP, DroppedValue, IntermediateStore
from onnxviz.runtime.plan import GraphPlan, PlanContext, compile_graph
from onnxviz.runtime.registry import normalize_domain
from onnxviz.runtime.values import elem_type_to_dtype, from_proto, has_nonfinite

if TYPE_CHECKING:
    from onnxviz.model.document import Document

_OBJECT = np.dtype(object)

NodeSpec = str | tuple[str, str] | NodeRef

# Stepping modes of `Session.advance` ("step_into" is accepted for "step").
MODES = ("continue", "step", "step_over", "step_out", "run_to")


@dataclass
class Breakpoint:
    """Pause before a node (``node``), before any node of an op type (``op_type``), or
    after any node whose output holds NaN/Inf (``nonfinite``)."""

    node: str | None = None  # address "graph::label", or a bare label / name
    op_type: str | None = None
    nonfinite: bool = False
    enabled: bool = True
    hits: int = 0


def feed_inputs(model: ModelProto) -> list[tuple[str, TypeProto]]:
    """What `Session(model).inputs` lists, without compiling a plan: the main graph's
    inputs that no initializer gives a default to.  A plan takes seconds at 100k nodes,
    and the Run dock and the Compare window ask for a model's inputs on the UI thread."""
    graph = model.graph
    defaults = {t.name for t in graph.initializer}
    defaults.update(s.values.name for s in graph.sparse_initializer)
    return [(v.name, v.type) for v in graph.input if v.name not in defaults]


def document_feed_inputs(doc: Document) -> list[tuple[str, TypeProto]]:
    """`feed_inputs` of a document's model, from its index of the main graph's
    definitions instead of a set of every initializer's name (10-14 ms at 50k nodes,
    on the UI thread at the start of every run)."""
    defined = doc.main_scope.other_definitions()
    defaults = ("initializer", "sparse_initializer")
    return [
        (v.name, v.type)
        for v in doc.model.graph.input
        if not any(d.kind in defaults for d in defined.get(v.name, ()))
    ]


def _address(spec: NodeSpec) -> str:
    if isinstance(spec, NodeRef):
        return spec.address
    if isinstance(spec, tuple):
        return address_of(spec[0], spec[1])
    return spec


def node_matches(spec: str, ref: NodeRef, node_name: str | None = None) -> bool:
    if ADDRESS_SEP in spec:
        return spec == ref.address
    return spec == ref.label or (node_name is not None and spec == node_name)


class Session:
    """The bundled interpreter over one model (or Document): ``run`` for outputs, or
    ``start`` then ``resume``/``step``/``step_over``/``step_out``/``run_to`` to debug it
    node by node with breakpoints, the value of every name kept (up to a memory cap)
    and the frame stack of subgraphs and function calls (see the module's docstring).
    """

    def __init__(
        self,
        model_or_document: Any,
        *,
        seed: int = 0,
        keep_intermediates: bool = False,
        memory_cap_bytes: int = DEFAULT_MEMORY_CAP,
        fold_constants: bool = True,
        inplace_ops: bool = True,
        fuse_ops: bool = True,
    ) -> None:
        model = getattr(model_or_document, "model", model_or_document)
        if not isinstance(model, ModelProto):
            raise TypeError(
                f"Session needs a ModelProto or a Document, got {type(model_or_document).__name__}"
            )
        self.model = model
        keep_freed_memory()  # runs reuse their freed arrays' pages (runtime/heap.py)
        self.base_dir: str | None = getattr(model_or_document, "base_dir", None)
        self.file: str | None = getattr(model_or_document, "path", None)
        self.seed = seed
        self.keep_intermediates = keep_intermediates
        self.inplace_ops = inplace_ops
        self.fuse_ops = fuse_ops
        self.memory_cap_bytes = memory_cap_bytes
        opsets: dict[str, int] = {}
        for imp in model.opset_import:
            opsets[normalize_domain(imp.domain)] = int(imp.version)
        self.opsets = opsets
        self.ctx = PlanContext(
            opsets=opsets,
            functions=local_function_index(model.functions),
            base_dir=self.base_dir,
            fold_constants=fold_constants,
        )
        self.plan: GraphPlan = compile_graph(model.graph, "main", self.ctx)
        if self.plan.captures:
            names = ", ".join(f"'{as_text(n)}'" for _, n in self.plan.captures[:5])
            raise ExecutionError(
                f"the main graph uses {names} but nothing defines it "
                "(not an input, initializer or node output)",
                file=self.file,
                graph_path="main",
            )
        self.breakpoints: list[Breakpoint] = []
        self.state = "idle"  # idle | paused | running (in run()) | finished | failed | cancelled
        self.error: ExecutionError | None = None
        self.outputs: dict[str, Any] = {}
        self.last_event: Event | None = None
        self.seconds = 0.0
        self.store: IntermediateStore | None = None
        self._executor: Executor | None = None
        self._gen: Generator[Event, None, list[Any]] | None = None
        self._depth = 0
        self._t0 = 0.0
        self._labels_by_path: dict[str, set[str]] | None = None
        self._main_frame: Frame | None = None
        self._constant_ids: tuple[int, set[int]] | None = None
        self._expected_inputs: dict[str, tuple[np.dtype[Any] | None, bool]] | None = None
        # Set by `pause` (any thread), honoured by stepping calls before the next node.
        self.pause_requested = threading.Event()
        # Called with every event a stepping call or `steps` goes through (the run
        # panel's display state); runs on the thread that advances the session.
        self.on_event: Callable[[Event], None] | None = None

    # -- the model's interface -----------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        """Inputs a caller must (or may, for IR<4 initializer defaults) feed."""
        return [n for n in self.plan.input_names if n not in self.plan.overridable]

    @property
    def inputs(self) -> list[tuple[str, TypeProto | None]]:
        return [
            (n, t)
            for n, t in zip(self.plan.input_names, self.plan.input_types)
            if n not in self.plan.overridable
        ]

    @property
    def output_names(self) -> list[str]:
        return list(self.plan.output_names)

    # -- running ------------------------------------------------------------------------
    def run(
        self, feeds: Mapping[str, Any] | None = None, *, fetch: Iterable[str] = ()
    ) -> dict[str, Any]:
        """Run to the end, ignoring breakpoints; the outputs by name, plus the main-graph
        values named in ``fetch`` (intermediates, like extra outputs)."""
        wanted = set(fetch) if fetch else None  # (a plain run skips the fetch work)
        if wanted:
            unknown = {name for name in wanted if name not in self.plan.slots}
            if unknown:
                raise ExecutionError(
                    f"cannot fetch {', '.join(sorted(unknown))}: no such value in the main graph",
                    file=self.file,
                    graph_path="main",
                )
        ex = self._begin(feeds or {})
        frame = self._main_frame
        assert frame is not None
        gen: Any = None
        ex.input_values_in_events = False  # nobody sees these events
        self.state = "running"
        fetched: dict[str, Any] = {}
        watch: set[str] = set()
        if wanted:
            main_values = frame.values
            for name in wanted:
                value = main_values[self.plan.slots[name]]
                if value is not None:  # a feed or an initializer
                    fetched[name] = value
            watch = wanted - set(fetched)
        if not watch:
            # Nobody looks at a node: no events (the generator runs to its end in one
            # step), fused node lists, in-place ops unless values are kept.
            ex.unwatched(fuse=self.fuse_ops, inplace=self.inplace_ops)
        token = fp_quiet.quiet()  # (np.errstate(all="ignore"), kept: fp_quiet.py)
        try:
            if watch:
                gen = self._gen = ex.run_frame(frame)
            else:
                # The compiled loop alone when it takes every node (no generator: its
                # making and driving were a third of a one-node model's fixed cost),
                # else the node loop goes on from where it stopped.
                outs, stopped = ex.run_quietly(frame)
                if outs is not None:
                    self._finish(outs)
                else:
                    gen = self._gen = ex.run_frame(frame, stopped)
            while gen is not None:
                ev = next(gen)
                if watch and type(ev) is NodeFinished and ev.depth == 0:
                    for name in watch.intersection(ev.outputs):
                        fetched[name] = ev.outputs[name]
        except StopIteration as stop:
            self._finish(stop.value or [])
        except ExecutionError as exc:
            self._fail(exc)
        except Exception as exc:
            self._fail(self._internal_error(exc))
        finally:
            fp_quiet.reset(token)
        if self.error is not None:
            raise self.error
        result = dict(self.outputs)
        for name, value in fetched.items():
            result.setdefault(name, value)
        return result

    def start(self, feeds: Mapping[str, Any]) -> None:
        """Prepare a run paused before its first event (old run abandoned)."""
        ex = self._begin(feeds)
        assert self._main_frame is not None
        self._gen = ex.run_frame(self._main_frame)

    def _begin(self, feeds: Mapping[str, Any]) -> Executor:
        """`start` without the node loop's generator (`run` makes one only when it needs
        one): the new run's executor, its main frame fed."""
        self._close()
        values = self._check_feeds(feeds)
        store = IntermediateStore(self.memory_cap_bytes) if self.keep_intermediates else None
        self.store = store
        ex = Executor(
            self.ctx,
            seed=self.seed,
            store=store,
            file=self.file,
        )
        self._executor = ex
        overridable = self.plan.overridable
        ex.fold = not (overridable and any(name in overridable for name in values))
        frame = ex.new_frame(
            self.plan, parent=None, caller=None, title="main", kind="main", feeds=None
        )
        for name, value in values.items():
            slot = self.plan.slots.get(name)
            if slot is not None:  # an input with no name: nothing can read it
                frame.values[slot] = value
        self._main_frame = frame
        if store is not None:
            for name, value in values.items():
                store.put("main", name, value)
        self.error = None
        self.outputs = {}
        self.last_event = None
        self.state = "paused"
        self._depth = 0
        self._t0 = time.perf_counter()
        return ex

    def cancel(self) -> None:
        """Ask the running (or paused) run to stop before its next node; callable from
        any thread.  The run then ends with state "cancelled"."""
        if self._executor is not None:
            self._executor.cancelled = True

    def pause(self) -> None:
        """Ask a stepping call running on another thread (`advance`, `resume`, ...) to
        stop before its next node, with reason "paused".  The request stays set until a
        stepping call honours it (a request made just before the call counts), or
        `clear_pause` drops it."""
        self.pause_requested.set()

    def clear_pause(self) -> None:
        self.pause_requested.clear()

    def steps(self, feeds: Mapping[str, Any] | None = None) -> Iterator[Event]:
        """Every event of the run (a new one when ``feeds`` is given), ignoring
        breakpoints; ends with `RunFinished` or `NodeFailed`."""
        if feeds is not None:
            self.start(feeds)
        while self._gen is not None:
            ev = self._advance()
            if ev is None:
                return
            yield ev

    # -- stepping -----------------------------------------------------------------------
    def advance(self, mode: str = "continue", target: NodeSpec | None = None) -> Pause:
        """Run until the goal of ``mode``, a breakpoint, a non-finite output (with such a
        breakpoint), a `pause` request, the end, a failure or a `cancel`.

        Modes (`MODES`): "step" (= "step_into": before the next node, at any depth),
        "step_over" (the next node at this depth or shallower), "step_out" (until the
        current frame is left; in the main frame: to the end), "run_to" (before node
        ``target``) and "continue" (breakpoints only).  Meant to run on a worker
        thread while another thread may call `pause` or `cancel`; ``on_event`` sees
        every event on the way."""
        if mode == "step_into":
            mode = "step"
        depth = self._depth
        if mode == "step":
            return self._until(lambda ev: type(ev) is NodeStarted, "step")
        if mode == "step_over":
            return self._until(lambda ev: type(ev) is NodeStarted and ev.depth <= depth, "step")
        if mode == "step_out":
            return self._until(
                lambda ev: type(ev) is FrameLeft and ev.depth == depth and depth > 0,
                "frame_left",
            )
        if mode == "run_to":
            if target is None:
                raise ValueError("run_to needs a target node")
            spec = _address(target)
            self._validate_node_spec(spec)
            return self._until(
                lambda ev: (
                    type(ev) is NodeStarted and node_matches(spec, ev.node, self._name_of(ev.node))
                ),
                "run_to",
            )
        if mode == "continue":
            return self._until(lambda ev: False, "breakpoint")
        raise ValueError(f"unknown stepping mode {mode!r} (one of {', '.join(MODES)})")

    def step(self) -> Pause:
        """Step into: pause before the next node, at any depth."""
        return self.advance("step")

    step_into = step

    def step_over(self) -> Pause:
        """Pause before the next node at this depth or shallower (nested frames run through)."""
        return self.advance("step_over")

    def step_out(self) -> Pause:
        """Run until the current frame is left (the main frame: to the end)."""
        return self.advance("step_out")

    def run_to(self, node: NodeSpec) -> Pause:
        """Run until just before ``node`` (breakpoints still pause on the way)."""
        return self.advance("run_to", node)

    def resume(self) -> Pause:
        """Run until a breakpoint or the end."""
        return self.advance("continue")

    # -- breakpoints ----------------------------------------------------------------------
    def add_breakpoint(
        self,
        node: NodeSpec | None = None,
        *,
        op_type: str | None = None,
        nonfinite: bool = False,
    ) -> Breakpoint:
        if node is None and op_type is None and not nonfinite:
            raise ValueError("a breakpoint needs a node, an op_type or nonfinite=True")
        spec = None if node is None else _address(node)
        if spec is not None:
            self._validate_node_spec(spec)
        bp = Breakpoint(node=spec, op_type=op_type, nonfinite=nonfinite)
        self.breakpoints.append(bp)
        return bp

    def remove_breakpoint(self, bp: Breakpoint) -> None:
        self.breakpoints = [b for b in self.breakpoints if b is not bp]

    def clear_breakpoints(self) -> None:
        self.breakpoints = []

    # -- inspection -----------------------------------------------------------------------
    @property
    def frames(self) -> list[Frame]:
        return list(self._executor.stack) if self._executor is not None else []

    @property
    def stack(self) -> list[FrameInfo]:
        return [f.info for f in self.frames]

    @property
    def stack_text(self) -> str:
        return self._executor.stack_text() if self._executor is not None else ""

    @property
    def current_node(self) -> NodeRef | None:
        """The node the run is paused at (or failed at)."""
        frames = self.frames
        if not frames:
            return None
        pn = frames[-1].current
        return node_ref(pn) if pn is not None else None

    def value(self, name: str, frame: int = -1) -> Any:
        """A live value by name, seen from a frame of the stack (default: innermost),
        its outer scopes included; falls back to kept intermediates. KeyError if unknown."""
        frames = self.frames
        if frames:
            f = frames[frame]
            try:
                v = f.lookup(name)
            except KeyError:
                v = None
            if v is not None:
                return v
        if self.store is not None:
            for path in ([frames[frame].plan.path] if frames else []) + ["main"]:
                if (path, name) in self.store:
                    return self.store.get(path, name)
        if name in self.outputs:
            return self.outputs[name]
        raise KeyError(name)

    def values(self, frame: int = -1) -> dict[str, Any]:
        """Live values of one frame of the stack (default: innermost)."""
        frames = self.frames
        return frames[frame].visible() if frames else dict(self.outputs)

    @property
    def intermediates(self) -> dict[tuple[str, str], Any]:
        return dict(self.store.items()) if self.store is not None else {}

    @property
    def dropped(self) -> list[DroppedValue]:
        return list(self.store.dropped) if self.store is not None else []

    @property
    def node_times(self) -> dict[str, tuple[int, float]]:
        """Node address -> (calls, total seconds) for the last run."""
        if self._executor is None:
            return {}
        return {k: (int(v[0]), float(v[1])) for k, v in self._executor.profile.items()}

    # -- internals ------------------------------------------------------------------------
    def _close(self) -> None:
        if self._gen is not None:
            self._gen.close()
        self._gen = None

    def _check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        expected = self._expected_inputs
        if expected is None:
            expected = self._expected_inputs = self._input_expectations()
        # The common case in one pass: arrays of the inputs' dtypes, every input fed.
        out: dict[str, Any] = {}
        for name, value in feeds.items():
            want = expected.get(name)
            if want is None or type(value) is not np.ndarray:
                break
            if want[0] is not None and value.dtype is not want[0]:
                break
            out[name] = value
        else:
            if len(out) == len(expected) or all(
                ov or name in out for name, (_, ov) in expected.items()
            ):
                return out
        return self._checked_feeds(feeds, expected)

    def _checked_feeds(
        self, feeds: Mapping[str, Any], expected: dict[str, tuple[np.dtype[Any] | None, bool]]
    ) -> dict[str, Any]:
        """`_check_feeds` for any feeds: converted, each input's dtype checked, and the
        errors of an unknown, missing or mistyped input."""
        out: dict[str, Any] = {}
        for name, value in feeds.items():
            if name not in expected:
                raise ExecutionError(
                    f"'{name}' is not an input of the model (inputs: {', '.join(self.input_names)})",
                    file=self.file,
                    graph_path="main",
                )
            # An array is its own runtime value (from_proto's last case).
            out[name] = value if type(value) is np.ndarray else from_proto(value, self.base_dir)
        for name, (want, overridable) in expected.items():
            if name not in out:
                if overridable:
                    continue
                raise ExecutionError(
                    f"input '{name}' is missing", file=self.file, graph_path="main"
                )
            if want is None:
                continue
            value = out[name]
            # (`is` first: a native dtype is one object, and == costs a rich compare)
            if type(value) is np.ndarray and (value.dtype is want or value.dtype == want):
                continue
            if not isinstance(value, np.ndarray):
                value = out[name] = np.asarray(value)
            if value.dtype != want and not (want == _OBJECT and value.dtype.kind in "OUS"):
                raise ExecutionError(
                    f"input '{name}' must be {want}, got {value.dtype}",
                    file=self.file,
                    graph_path="main",
                )
            if want == _OBJECT and value.dtype != _OBJECT:
                out[name] = value.astype(object)
        return out

    def _input_expectations(self) -> dict[str, tuple[np.dtype[Any] | None, bool]]:
        """Each main-graph input's dtype (None: not a typed tensor) and whether an
        initializer stands in for it when it is not fed, read once from the protos (the
        per-run reads were a third of a small model's fixed cost)."""
        out: dict[str, tuple[np.dtype[Any] | None, bool]] = {}
        for name, tp in zip(self.plan.input_names, self.plan.input_types):
            want = None
            if tp is not None and tp.HasField("tensor_type") and tp.tensor_type.elem_type:
                want = elem_type_to_dtype(tp.tensor_type.elem_type)
            out[name] = (want, name in self.plan.overridable)
        return out

    def _name_of(self, ref: NodeRef) -> str | None:
        frames = self.frames
        if frames and frames[-1].plan.path == ref.graph_path:
            pn = frames[-1].current
            if pn is not None and pn.label == ref.label:
                return pn.node.name
        return None

    def _validate_node_spec(self, spec: str) -> None:
        """Refuse an address naming a graph or node the model does not have (schema
        function bodies are built on demand, so ``schema:`` addresses are accepted)."""
        if ADDRESS_SEP not in spec or spec.startswith("schema:"):
            return
        if self._labels_by_path is None:
            from onnxviz.model.scopes import build_scopes

            self._labels_by_path = {
                scope.path: {scope.node_label(i) for i in range(len(scope.nodes))}
                for scope in build_scopes(self.model)
            }
        split = split_address(spec, self._labels_by_path)
        assert split is not None
        path, label = split
        labels = self._labels_by_path.get(path)
        if labels is None:
            raise ExecutionError(f"the model has no graph '{path}'", graph_path=path)
        if label not in labels and not (label.startswith("#") and label[1:].isdigit()):
            raise ExecutionError(f"no node '{label}' in graph '{path}'", graph_path=path)

    def _advance(self) -> Event | None:
        gen = self._gen
        if gen is None:
            return None
        ex = self._executor
        assert ex is not None
        try:
            with np.errstate(all="ignore"):
                ev = next(gen)
        except StopIteration as stop:
            ev = self._finish(stop.value or [])
        except ExecutionError as exc:
            ev = self._fail(exc)
        except Exception as exc:
            ev = self._fail(self._internal_error(exc))
        if isinstance(ev, (NodeStarted, NodeFinished, FrameEntered)):
            self._depth = ev.depth
        elif isinstance(ev, FrameLeft):
            self._depth = ev.depth - 1
        self.last_event = ev
        if self.on_event is not None:
            self.on_event(ev)
        return ev

    def _finish(self, outs: list[Any]) -> RunFinished:
        self.outputs = self._finish_outputs(outs)
        self.seconds = time.perf_counter() - self._t0
        self.state = "finished"
        self._gen = None
        ev = RunFinished("", 0, dict(self.outputs), self.seconds)
        self.last_event = ev
        return ev

    def _internal_error(self, exc: Exception) -> ExecutionError:
        """An unexpected exception outside any kernel, as an ExecutionError naming
        where the run was (the run cannot continue after it)."""
        ref = self.current_node
        err = ExecutionError(
            f"the interpreter failed: {type(exc).__name__}: {exc}",
            file=self.file,
            graph_path=ref.graph_path if ref else None,
            node=ref.label if ref else None,
            op_type=ref.op_type if ref else None,
        )
        err.__cause__ = exc
        return err

    def _fail(self, exc: ExecutionError) -> NodeFailed:
        ex = self._executor
        assert ex is not None
        self.error = exc
        self.state = "cancelled" if isinstance(exc, ExecutionCancelled) else "failed"
        self._gen = None
        pn = ex.failed_node
        ref = node_ref(pn) if pn is not None else self.current_node
        ev = NodeFailed(ex.stack_text(), len(ex.stack) - 1, ref, exc)
        self.last_event = ev
        return ev

    def _finish_outputs(self, outs: list[Any]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        constant_ids = self._plan_constant_ids()
        for name, value in zip(self.plan.output_names, outs):
            # Outputs that are constants (initializers, folded nodes) are shared with the
            # plan, and so may be other read-only values (shape_memo.py's kept results):
            # hand out copies so a caller cannot change the next run.
            if isinstance(value, np.ndarray) and (
                id(value) in constant_ids or not value.flags.writeable
            ):
                value = value.copy()
            result[name] = value
        return result

    def _plan_constant_ids(self) -> set[int]:
        """The ids of the plan's constants and folded values."""
        folded = self.plan.folded_values
        if self._constant_ids is None or self._constant_ids[0] != len(folded):
            # Made again only when a run folded more nodes (the first run, mostly).
            ids = {id(v) for _, v in self.plan.constants}
            ids.update(id(v) for v in folded)
            self._constant_ids = (len(folded), ids)
        return self._constant_ids[1]

    def _until(self, stop: Callable[[Event], bool], reason: str) -> Pause:
        if self._gen is None:
            if self.state == "idle":
                raise ExecutionError("no run is in progress: call start(feeds) first")
            return Pause(self.state, self.last_event)
        pause_requested = self.pause_requested
        bps: list[Breakpoint] | None = None
        node_bps: list[Breakpoint] = []
        nonfinite_bp: Breakpoint | None = None
        while True:
            if self.breakpoints is not bps:
                # Read again when replaced (another thread may set a new list mid-run).
                bps = self.breakpoints
                node_bps = [b for b in bps if b.enabled and (b.node or b.op_type)]
                nonfinite_bp = next((b for b in bps if b.enabled and b.nonfinite), None)
            ev = self._advance()
            if ev is None:
                return Pause(self.state, self.last_event)
            if isinstance(ev, RunFinished):
                return Pause("finished", ev)
            if isinstance(ev, NodeFailed):
                return Pause(self.state, ev)
            if isinstance(ev, NodeStarted):
                if pause_requested.is_set():
                    pause_requested.clear()
                    return Pause("paused", ev)
                for bp in node_bps:
                    hit = (bp.op_type is not None and bp.op_type == ev.node.op_type) or (
                        bp.node is not None
                        and node_matches(bp.node, ev.node, self._name_of(ev.node))
                    )
                    if hit:
                        bp.hits += 1
                        return Pause("breakpoint", ev, bp)
            elif (
                isinstance(ev, NodeFinished)
                and nonfinite_bp is not None
                and any(has_nonfinite(v) for v in ev.outputs.values())
            ):
                nonfinite_bp.hits += 1
                return Pause("nonfinite", ev, nonfinite_bp)
            if stop(ev):
                return Pause(reason, ev)
