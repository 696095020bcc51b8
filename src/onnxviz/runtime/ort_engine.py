"""onnxruntime as a second engine: run a Document's model, fetch intermediates in
memory-bounded chunks, and profile per node.

onnxruntime is optional and imported only when one of these functions runs.

**Where the weights come from.**  onnxruntime is handed the serialized model *without*
its large tensor bytes (in-place single-file weights become plain external-data
references into the model file itself, `inplace.plain_external_copy`) together with
the model's own folder as its external-data folder
(``session.model_external_initializers_file_folder_path``).  So external data resolves
from any working directory; handing it bytes alone fails with "External data path ...
escapes working directory" whenever the current directory is not the model's folder.

**The copy that runs.**  Every main-graph node gets a unique name in the copy (nodes
without one, or sharing one, are named ``onnxviz#<index>``), so the profiler's events
and our node addresses map one to one (`RunnableModel.address_of`).  With intermediates
or a profile the graph optimizer is off: fusions would hide the values and nodes the
user asked about.  Without them it is on, as in production.

**Intermediates in bounded memory.**  Polygraphy's layer-by-layer compare marks every
tensor as an output at once and runs out of memory on LLMs.  Here the values are added as
outputs in chunks whose estimated total stays under a budget; each chunk is its own
session run whose results go to the caller and are then dropped.  Sizes come from the
declared shapes (symbolic dims bound from the feeds); when some are not declared, one
profiled run of the model measures them all (`measure_sizes`: the profiler records each
node's output shapes); failing that, shape arithmetic is bounded from its inputs and any
other value is estimated as the largest value seen so far.  A chunk's actual size is
reported next to its plan.  A chunk does not recompute the graph from its inputs: the
values of earlier chunks that its nodes read are held (up to half the budget, so memory
stays under 1.5 budgets) and the chunk's model is cut there (`Frontier`); the time of all
chunks together is then close to one run's.

Where the two engines first part is `divergence.py`'s job.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from onnxviz.errors import ExecutionError
from onnxviz.runtime.profile import NodeProfile, Profiler

# Providers tried in this order when installed; the CPU provider is always last.
# TensorRT is left out by default: it builds an engine per session, minutes on an LLM.
PREFERRED_PROVIDERS = (
    "CUDAExecutionProvider",
    "ROCMExecutionProvider",
    "DmlExecutionProvider",
    "CoreMLExecutionProvider",
    "CPUExecutionProvider",
)
EXTERNAL_FOLDER_KEY = "session.model_external_initializers_file_folder_path"
DEFAULT_CHUNK_BYTES = 256 * 2**20
_ORT_NAME_PREFIX = "onnxviz#"


def _ort() -> Any:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ExecutionError(
            "the onnxruntime engine needs the onnxruntime package (pip install onnxruntime)"
        ) from exc
    return ort


def available() -> bool:
    """True when onnxruntime can be imported."""
    try:
        _ort()
    except ExecutionError:
        return False
    return True


def choose_providers(requested: Iterable[str] | None = None) -> list[str]:
    """The providers a session uses: ``requested`` (in its order) or the preferred ones,
    kept only when installed, and the CPU provider always last as the fallback."""
    installed = set(_ort().get_available_providers())
    wanted = list(requested) if requested else list(PREFERRED_PROVIDERS)
    chosen = [p for p in wanted if p in installed and p != "CPUExecutionProvider"]
    return [*chosen, "CPUExecutionProvider"]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- the copy onnxruntime runs -------------------------------------------------------------
@dataclass
class ModelInFolder:
    """A bare ModelProto with the folder its external data lives in (what a Document
    offers as ``.model`` and ``.base_dir``)."""

    model: onnx.ModelProto
    base_dir: str | None


@dataclass
class RunnableModel:
    """A copy of a Document's model as onnxruntime gets it: tensors in place turned into
    plain external data, every main-graph node uniquely named."""

    model: onnx.ModelProto
    base_dir: str | None
    # ort node name -> our address ("main::<label>") and main-graph node index
    address_of: dict[str, str]
    index_of: dict[str, int]
    labels: list[str]

    @classmethod
    def of(cls, doc: Any) -> RunnableModel:
        from onnxviz.model.inplace import plain_external_copy
        from onnxviz.model.scopes import build_scopes

        source: onnx.ModelProto = getattr(doc, "model", doc)
        base_dir = getattr(doc, "base_dir", None)
        model = plain_external_copy(source)  # a copy: naming below leaves the doc alone
        main = next(s for s in build_scopes(model) if s.path == "main")
        taken = {n.name for n in model.graph.node if n.name}
        address_of: dict[str, str] = {}
        index_of: dict[str, int] = {}
        labels: list[str] = []
        for index, node in enumerate(model.graph.node):
            label = main.node_label(index)
            labels.append(label)
            if label.startswith("#"):  # unnamed or a name shared by several nodes
                name = f"{_ORT_NAME_PREFIX}{index}"
                while name in taken:
                    name += "_"
                taken.add(name)
                node.name = name
            address_of[node.name] = f"main::{label}"
            index_of[node.name] = index
        return cls(model, base_dir, address_of, index_of, labels)

    def with_outputs(self, names: Iterable[str], *, only: bool = False) -> onnx.ModelProto:
        """The model with ``names`` added as graph outputs (a name alone: onnxruntime
        infers the type).  ``only``: the graph outputs are ``names`` and nothing else, so
        onnxruntime leaves out the nodes that none of them needs."""
        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        if only:
            wanted = set(names)
            kept = [o for o in m.graph.output if o.name in wanted]
            del m.graph.output[:]
            m.graph.output.extend(kept)
        have = {o.name for o in m.graph.output}
        for name in names:
            if name not in have:
                m.graph.output.append(onnx.ValueInfoProto(name=name))
                have.add(name)
        return m


@dataclass
class EngineOptions:
    providers: list[str] | None = None  # None: PREFERRED_PROVIDERS as installed
    optimize: bool | None = None  # None: on unless intermediates or a profile are wanted
    threads: int = 0  # intra-op threads (0: onnxruntime decides)


def make_session(
    runnable: RunnableModel,
    model: onnx.ModelProto,
    options: EngineOptions | None = None,
    *,
    profile_prefix: str | None = None,
    optimize: bool = False,
) -> Any:
    """An InferenceSession for ``model`` (a copy from ``runnable``) whose external data
    resolves against the model's own folder."""
    ort = _ort()
    options = options or EngineOptions()
    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # fatal only: errors reach the user as our own sentence
    # The arena keeps every chunk's peak: without it memory goes back between chunks.
    opts.enable_cpu_mem_arena = False
    if options.threads:
        opts.intra_op_num_threads = options.threads
    opts.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if optimize
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    if runnable.base_dir:
        opts.add_session_config_entry(EXTERNAL_FOLDER_KEY, runnable.base_dir)
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    try:
        return ort.InferenceSession(
            model.SerializeToString(), opts, providers=choose_providers(options.providers)
        )
    except Exception as exc:
        raise ExecutionError(f"onnxruntime could not load the model: {_first_line(exc)}") from exc


def _run(session: Any, feeds: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
    inputs = {i.name for i in session.get_inputs()}
    outputs = names if names is not None else [o.name for o in session.get_outputs()]
    try:
        values = session.run(outputs, {k: v for k, v in feeds.items() if k in inputs})
    except Exception as exc:
        raise ExecutionError(f"onnxruntime could not run the model: {_first_line(exc)}") from exc
    return dict(zip(outputs, values))


# -- plain runs and profiles ----------------------------------------------------------------
@dataclass
class OrtRun:
    outputs: dict[str, Any]
    seconds: float
    providers: list[str]
    profile: Profiler | None = None


def run(
    doc: Any,
    feeds: Mapping[str, Any],
    *,
    options: EngineOptions | None = None,
    profile: bool = False,
) -> OrtRun:
    """The model's outputs as onnxruntime computes them, and with ``profile`` its
    per-node times mapped onto our node addresses (`profile_from_events`)."""
    options = options or EngineOptions()
    runnable = RunnableModel.of(doc)
    optimize = options.optimize if options.optimize is not None else not profile
    folder = tempfile.mkdtemp(prefix="onnxviz-ort-profile-") if profile else None
    try:
        session = make_session(
            runnable,
            runnable.model,
            options,
            profile_prefix=os.path.join(folder, "profile") if folder else None,
            optimize=optimize,
        )
        t0 = time.perf_counter()
        outputs = _run(session, feeds)
        seconds = time.perf_counter() - t0
        profiler = None
        if folder:
            path = session.end_profiling()
            with open(path, encoding="utf-8") as fh:
                events = json.load(fh)
            profiler = profile_from_events(events, runnable)
        return OrtRun(outputs, seconds, list(session.get_providers()), profiler)
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def profile_from_events(events: Any, runnable: RunnableModel) -> Profiler:
    """Our `Profiler` filled from onnxruntime's profiler JSON (Chrome trace events):
    each ``<node name>_kernel_time`` event is one call of that node.  Nodes onnxruntime
    made itself (fusions, copies between devices) have no address of ours and are left
    out; subgraph nodes are not mapped either."""
    profiler = Profiler()
    items = events.get("traceEvents", []) if isinstance(events, dict) else events
    for ev in items:
        if not isinstance(ev, dict) or ev.get("cat") != "Node":
            continue
        name = str(ev.get("name", ""))
        if not name.endswith("_kernel_time"):
            continue
        node_name = name[: -len("_kernel_time")]
        address = runnable.address_of.get(node_name)
        if address is None:
            continue
        index = runnable.index_of[node_name]
        args = ev.get("args", {}) or {}
        row = profiler.nodes.get(address)
        if row is None:
            op = str(args.get("op_name") or runnable.model.graph.node[index].op_type)
            row = profiler.nodes[address] = NodeProfile(address, op, "main", index)
        seconds = float(ev.get("dur", 0)) * 1e-6
        row.calls += 1
        row.seconds += seconds
        profiler.total_seconds += seconds
        try:
            row.output_bytes = int(args.get("output_size", 0))
        except (TypeError, ValueError):
            row.output_bytes = 0
        row.output_text = _shape_text(args.get("output_type_shape"))
    return profiler


def _shape_text(shapes: Any) -> str:
    if not isinstance(shapes, list):
        return ""
    parts = []
    for entry in shapes:
        if isinstance(entry, dict):
            for dtype, dims in entry.items():
                parts.append(f"{dtype}[{','.join(str(d) for d in dims)}]")
    return ", ".join(parts)


# -- intermediates in chunks ----------------------------------------------------------------
@dataclass
class Chunk:
    names: list[str]
    planned_bytes: int
    actual_bytes: int = 0
    seconds: float = 0.0
    resumed: int = 0  # held values of earlier chunks the run started from


# Ops whose output has at most (product of their inputs' element counts) elements:
# elementwise with broadcasting, gathers, slices, reshapes, reductions, concatenation.
# Applied to the small int64 shape arithmetic of exports whose value_info is empty, this
# bounds values that would otherwise be estimated as the largest value seen.
_PRODUCT_BOUNDED = frozenset(
    [
        "Abs",
        "Add",
        "And",
        "ArgMax",
        "ArgMin",
        "Cast",
        "CastLike",
        "Ceil",
        "Concat",
        "Div",
        "Equal",
        "Erf",
        "Exp",
        "Flatten",
        "Floor",
        "Gather",
        "GatherElements",
        "Greater",
        "GreaterOrEqual",
        "Identity",
        "IsInf",
        "IsNaN",
        "Less",
        "LessOrEqual",
        "Log",
        "Max",
        "Min",
        "Mod",
        "Mul",
        "Neg",
        "Not",
        "Or",
        "Pow",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "Reciprocal",
        "Relu",
        "Reshape",
        "Round",
        "Sigmoid",
        "Sign",
        "Slice",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Tanh",
        "Transpose",
        "Unsqueeze",
        "Where",
        "Xor",
    ]
)


@dataclass
class ChunkPlanner:
    """Size estimates for main-graph values (bytes): from declared (or ``types``, e.g.
    inferred) shapes with symbolic dims bound from the feeds; else an upper bound from the
    inputs' sizes for the ops of `_PRODUCT_BOUNDED`, Shape, Size and Constant (when it is
    below the next); else the largest value seen so far."""

    model: onnx.ModelProto
    feeds: Mapping[str, Any]
    budget: int
    types: Mapping[str, onnx.TypeProto] | None = None
    measured: Mapping[str, int] | None = None  # bytes, from a profiled run (`measure_sizes`)
    seen_max: int = 0
    _types: dict[str, onnx.TypeProto] = field(default_factory=dict)
    _dims: dict[str, int] = field(default_factory=dict)
    _bound: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        g = self.model.graph
        hinted = [onnx.helper.make_value_info(n, t) for n, t in (self.types or {}).items()]
        for vi in [*hinted, *g.input, *g.value_info, *g.output]:
            if vi.type.WhichOneof("value") is None:
                continue
            have = self._types.get(vi.name)
            # a declaration with a shape wins over one without (outputs often have none)
            if have is None or not _has_shape(have) or _has_shape(vi.type):
                self._types[vi.name] = vi.type
        for vi in g.input:
            value = self.feeds.get(vi.name)
            if not isinstance(value, np.ndarray) or vi.type.WhichOneof("value") != "tensor_type":
                continue
            dims = vi.type.tensor_type.shape.dim
            if len(dims) == value.ndim:
                for d, n in zip(dims, value.shape):
                    if d.dim_param:
                        self._dims[d.dim_param] = int(n)
        for value in self.feeds.values():
            self.observe(value)
        self._bound = self._bounds()

    def _bounds(self) -> dict[str, int]:
        """Upper bounds in elements for values without a known size (see class doc)."""
        g = self.model.graph
        elems: dict[str, int] = {}
        for t in g.initializer:
            elems[t.name] = int(np.prod(t.dims)) if t.dims else 1
        for name, value in self.feeds.items():
            if isinstance(value, np.ndarray):
                elems[name] = int(value.size)
        bound: dict[str, int] = {}
        for node in g.node:
            outs = [o for o in node.output if o]
            known = {o: k for o in outs if (k := self.known(o)) is not None}
            for o, size in known.items():
                elems[o] = max(size // 8, 1)  # in 8-byte elements: an over-estimate
            if len(known) == len(outs):
                continue
            ins = [i for i in node.input if i]
            if node.op_type in ("Shape", "Size"):
                count = 8 if node.op_type == "Shape" else 1
            elif node.op_type == "Constant":
                count = _constant_elems(node)
            elif node.op_type in _PRODUCT_BOUNDED and ins and all(i in elems for i in ins):
                count = 1
                for i in ins:
                    count *= max(elems[i], 1)
                    if count > 2**40:
                        break
                if node.op_type == "Concat":
                    count = sum(max(elems[i], 1) for i in ins)
            else:
                continue
            for o in outs:
                if o not in known:
                    elems[o] = count
                    bound[o] = count * 8
        return bound

    def observe(self, value: Any) -> int:
        size = _nbytes(value)
        self.seen_max = max(self.seen_max, size)
        return size

    def known(self, name: str) -> int | None:
        """The value's size from its declared type, or None when not fully known."""
        tp = self._types.get(name)
        if tp is None or tp.WhichOneof("value") != "tensor_type":
            return None
        tt = tp.tensor_type
        if not tt.HasField("shape") or not tt.elem_type:
            return None
        count = 1
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                count *= max(int(d.dim_value), 0)
            elif d.dim_param and d.dim_param in self._dims:
                count *= self._dims[d.dim_param]
            else:
                return None
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).itemsize
        except Exception:
            itemsize = 8
        if tt.elem_type in (onnx.TensorProto.STRING,):
            itemsize = 64  # a guess: strings are objects of unknown length
        return count * itemsize

    def estimate(self, name: str) -> int:
        if self.measured and name in self.measured:
            return self.measured[name]
        exact = self.known(name)
        if exact is not None:
            return exact
        fallback = max(self.seen_max, 1)
        bound = self._bound.get(name)
        # the bound is exact arithmetic but loose for big tensors (a broadcast product)
        return min(bound, fallback) if bound is not None else fallback

    def next_chunk(self, pending: list[str]) -> list[str]:
        """Values from the front of ``pending`` whose estimates fit the budget together
        (at least one, even when that one alone is over it)."""
        chunk: list[str] = []
        total = 0
        for name in pending:
            size = self.estimate(name)
            if chunk and total + size > self.budget:
                break
            chunk.append(name)
            total += size
        return chunk


def _constant_bytes(node: onnx.NodeProto) -> int:
    """A Constant node's value size in bytes (strings: 64 a piece, a guess)."""
    for a in node.attribute:
        if a.name == "value" and a.t.data_type != onnx.TensorProto.STRING:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(a.t.data_type).itemsize
            return _constant_elems(node) * itemsize
        if a.name in ("value_int", "value_float"):
            return 8 if a.name == "value_int" else 4
        if a.name == "value_floats":
            return 4 * _constant_elems(node)
        if a.name == "value_ints":
            return 8 * _constant_elems(node)
    return 64 * _constant_elems(node)


def _constant_elems(node: onnx.NodeProto) -> int:
    """Element count of a Constant node's value (1 for the scalar forms)."""
    for a in node.attribute:
        if a.name in ("value", "sparse_value"):
            t = a.t if a.name == "value" else a.sparse_tensor.values
            return int(np.prod(t.dims)) if t.dims else 1
        if a.name in ("value_ints", "value_floats", "value_strings"):
            return max(len(a.ints) or len(a.floats) or len(a.strings), 1)
    return 1


def _has_shape(tp: onnx.TypeProto) -> bool:
    return tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.HasField("shape")


def _nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, list):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    return 0


def main_values(model: onnx.ModelProto) -> list[str]:
    """Every main-graph node output, in graph order (graph inputs and initializers are
    not computed and so not listed)."""
    out: list[str] = []
    seen: set[str] = set()
    for node in model.graph.node:
        for name in node.output:
            if name and name not in seen:
                seen.add(name)
                out.append(name)
    return out


_ITEMSIZE = {
    "float": 4, "double": 8, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "int16": 2,
    "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "bool": 1,
}  # fmt: skip


def measure_sizes(
    runnable: RunnableModel, feeds: Mapping[str, Any], options: EngineOptions | None = None
) -> dict[str, int]:
    """Every main-graph node output's size in bytes, from one profiled onnxruntime run of
    the model as it is (outputs only: the memory of an ordinary run).  The profiler
    records each node's output types and shapes; a value it does not list is absent."""
    folder = tempfile.mkdtemp(prefix="onnxviz-ort-sizes-")
    try:
        session = make_session(
            runnable, runnable.model, options, profile_prefix=os.path.join(folder, "p")
        )
        _run(session, feeds)
        with open(session.end_profiling(), encoding="utf-8") as fh:
            events = json.load(fh)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    nodes = runnable.model.graph.node
    sizes: dict[str, int] = {}
    for node in nodes:  # onnxruntime folds these into initializers: they never run
        if node.op_type == "Constant" and node.output and node.output[0]:
            sizes[node.output[0]] = _constant_bytes(node)
    for ev in events if isinstance(events, list) else []:
        name = str(ev.get("name", "")) if isinstance(ev, dict) else ""
        if ev.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        index = runnable.index_of.get(name[: -len("_kernel_time")])
        shapes = (ev.get("args") or {}).get("output_type_shape")
        if index is None or not isinstance(shapes, list):
            continue
        outs = [o for o in nodes[index].output if o]
        if len(shapes) != len(outs):
            continue
        for out, entry in zip(outs, shapes):
            if isinstance(entry, dict) and len(entry) == 1:
                ((dtype, dims),) = entry.items()
                count = int(np.prod(dims)) if dims else 1
                sizes[out] = max(sizes.get(out, 0), count * _ITEMSIZE.get(str(dtype), 64))
    return sizes


def iter_intermediates(
    doc: Any,
    feeds: Mapping[str, Any],
    names: Iterable[str] | None = None,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    options: EngineOptions | None = None,
    on_chunk: Callable[[Chunk], None] | None = None,
    resume: bool = True,
    types: Mapping[str, onnx.TypeProto] | None = None,
    measure: bool = True,
) -> Iterator[tuple[Chunk, dict[str, Any]]]:
    """Yield ``(chunk, values)`` for the main-graph values ``names`` (None: all of
    them, in graph order), one onnxruntime run per chunk.  Only the chunk being
    yielded is held here: the caller keeps what it needs (references to the arrays) and
    the dict is emptied when the next chunk is asked for.  ``types``: value types known
    besides the declared ones (shape inference's), for the size estimates; ``measure``:
    when some size is not declared, measure them all first (`measure_sizes`)."""
    runnable = RunnableModel.of(doc)
    model = runnable.model
    computed = set(main_values(model))
    wanted = main_values(model) if names is None else [n for n in names if n in computed]
    unknown = [n for n in (names or []) if n not in computed]
    if unknown:
        raise ExecutionError(
            f"onnxruntime can only fetch values computed by main-graph nodes: "
            f"{', '.join(unknown[:5])} {'is' if len(unknown) == 1 else 'are'} not"
        )
    planner = ChunkPlanner(model, feeds, max(int(chunk_bytes), 1), types)
    if measure and any(planner.known(n) is None for n in wanted):
        # sizes the declarations leave open, measured in one profiled run
        planner.measured = measure_sizes(runnable, feeds, options)
    # Values of earlier chunks that later nodes read, held so that a chunk starts from
    # them instead of recomputing the graph from its inputs (`Frontier`); off with
    # resume=False, the plain path the tests compare it with.
    frontier = Frontier(model, planner.budget // 2) if resume else None
    pending = list(wanted)
    while pending:
        names_now = planner.next_chunk(pending)
        pending = pending[len(names_now) :]
        chunk = Chunk(names_now, sum(planner.estimate(n) for n in names_now))
        if frontier is not None:
            sub, extra = frontier.model_for(runnable.with_outputs(names_now, only=True))
            chunk.resumed = len(extra)
        else:
            sub, extra = runnable.with_outputs(names_now, only=True), {}
        session = make_session(runnable, sub, options)
        t0 = time.perf_counter()
        values = _run(session, {**feeds, **extra}, names_now)
        chunk.seconds = time.perf_counter() - t0
        del session, extra
        chunk.actual_bytes = sum(planner.observe(v) for v in values.values())
        if frontier is not None:
            frontier.update(values, pending)
        if on_chunk is not None:
            on_chunk(chunk)
        yield chunk, values
        # The caller had its turn: what it did not keep goes now, and the freed heap goes
        # back to the system before the next run (see `_release_heap`).
        values.clear()
        del values
        _release_heap()


def _outer_names(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph reads from enclosing scopes (used, not defined inside)."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    used: set[str] = set()
    for node in graph.node:
        used |= set(node_reads(node))
        defined |= {o for o in node.output if o}
    used |= {o.name for o in graph.output}
    return used - defined


def node_reads(node: onnx.NodeProto) -> list[str]:
    """A node's inputs and the outer-scope names its subgraphs read."""
    names = [i for i in node.input if i]
    for attr in node.attribute:
        graphs = [attr.g] if attr.HasField("g") else list(attr.graphs)
        for g in graphs:
            names.extend(sorted(_outer_names(g)))
    return names


class Frontier:
    """Main-graph values held between chunks so that a chunk's run starts from them.

    After a chunk, the values it fetched that a node of a later chunk reads are kept
    (tensors only, up to ``budget`` bytes; past that nothing is kept and the next chunk
    recomputes from the graph's inputs).  `model_for` cuts a chunk's model at the held
    values: they become graph inputs, and only the nodes that lead from them (and the
    graph's inputs) to the chunk's values are left in it."""

    def __init__(self, model: onnx.ModelProto, budget: int) -> None:
        self.budget = budget
        self.held: dict[str, np.ndarray] = {}
        self.nodes = list(model.graph.node)
        self.producer = {o: i for i, n in enumerate(self.nodes) for o in n.output if o}
        self.readers: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for name in node_reads(n):
                self.readers.setdefault(name, []).append(i)

    def update(self, values: Mapping[str, Any], pending: list[str]) -> None:
        """Keep what nodes after this chunk read; drop what none of them reads."""
        if not pending:
            self.held = {}
            return
        done = max((self.producer[n] for n in values if n in self.producer), default=-1)
        held = {**self.held, **{k: v for k, v in values.items() if isinstance(v, np.ndarray)}}
        keep = {k: v for k, v in held.items() if any(r > done for r in self.readers.get(k, []))}
        self.held = keep if sum(v.nbytes for v in keep.values()) <= self.budget else {}

    def model_for(self, model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, Any]]:
        """``model`` (whose outputs are a chunk's values) cut at the held values, and the
        held values it reads (feeds for its new inputs)."""
        if not self.held:
            return model, {}
        needed: set[int] = set()
        reads: set[str] = set()
        stack = [o.name for o in model.graph.output]
        seen: set[str] = set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            index = self.producer.get(name)
            if name in self.held or index is None:
                reads.add(name)
                continue
            if index not in needed:
                needed.add(index)
                stack.extend(node_reads(self.nodes[index]))
        # a node that runs anyway (for another of its outputs) makes its held outputs
        # again: feeding them as inputs too would define them twice
        remade = {o for i in needed for o in self.nodes[i].output if o}
        extra = {n: self.held[n] for n in reads if n in self.held and n not in remade}
        if not extra:
            return model, {}
        cut = onnx.ModelProto()
        cut.CopyFrom(model)
        del cut.graph.node[:]
        cut.graph.node.extend(self.nodes[i] for i in sorted(needed))
        inputs = [vi for vi in model.graph.input if vi.name in reads]
        del cut.graph.input[:]
        cut.graph.input.extend(inputs)
        for name, value in extra.items():
            elem = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
            cut.graph.input.append(onnx.helper.make_tensor_value_info(name, elem, value.shape))
        return cut, extra


_TRIM: Any = None


def _release_heap() -> None:
    """Give freed heap memory back to the system (glibc's malloc_trim).  onnxruntime
    allocates each chunk's tensors with malloc; glibc raises its mmap threshold after the
    first large free, so later chunks come from the heap, and without a trim the process
    keeps every chunk's peak (measured: 265 MB vs 226 MB with it on 8 MB values)."""
    global _TRIM
    if _TRIM is None:
        _TRIM = False
        try:
            import ctypes

            _TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            pass
    if _TRIM:
        _TRIM(0)


def fetch_values(
    doc: Any, feeds: Mapping[str, Any], names: list[str], options: EngineOptions | None = None
) -> dict[str, Any]:
    """A few main-graph values (and outputs) from one onnxruntime run."""
    runnable = RunnableModel.of(doc)
    computed = set(main_values(runnable.model)) | {o.name for o in runnable.model.graph.output}
    names = [n for n in names if n in computed]
    session = make_session(runnable, runnable.with_outputs(names), options)
    return _run(session, feeds, list(dict.fromkeys(names)))
