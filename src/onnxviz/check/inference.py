"""Type and shape inference (onnx.shape_inference) and the onnx.checker fallback.

Inference runs on a copy of the model whose value_info (and main-graph output types) are
removed, so the inferred types stay apart from the declared ones: the UI can show both and
`types.T005` can compare them.  Strict mode reports every node it cannot infer; each
becomes an I001 diagnostic at that node.  `onnx.checker.check_model` (without the
inference part, which we already ran) gives the checker's verdict; `onnxviz.check`
turns an unexplained complaint into C001 / C002.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx.checker
import onnx.shape_inference
from onnx import AttributeProto, GraphProto, ModelProto, TypeProto

from onnxviz.check.checkable import Checkable
from onnxviz.check.prepare import all_graphs, prepare_graphs
from onnxviz.model.scopes import GraphScope
from onnxviz.model.wire import MAX_PROTO  # protobuf's limit for one message


class TypeMap(Mapping[tuple[str, str], TypeProto]):
    """Inferred types by (graph path, value name).

    Kept per graph as the inferred GraphProto: graph inputs and outputs are indexed at
    once (few), the value_info of inner values only when first asked for, because
    indexing 100k entries costs more than the rules that usually need none of them.
    Entries with an empty TypeProto (inference knew nothing) read as absent."""

    def __init__(self) -> None:
        self._graphs: dict[str, GraphProto] = {}
        self._io: dict[str, dict[str, TypeProto]] = {}
        # Inner values: name -> position in the inferred graph's value_info.  Reading the
        # names alone and looking a type up on demand costs a third of building name ->
        # TypeProto (0.11 s against 0.30 s at 100k values: the first re-check after an edit
        # pays it).
        self._inner: dict[str, dict[str, int] | None] = {}
        self._pending: dict[str, list[tuple[str, str]]] = {}
        # Types a re-inference of part of a graph found since (see `update`).
        self._newer: dict[str, dict[str, TypeProto]] = {}

    def update(self, path: str, found: Mapping[str, TypeProto]) -> None:
        """Types found by inferring part of graph ``path`` again (the downstream cone of an
        edit): they replace the whole-model ones without indexing the whole graph."""
        self._newer.setdefault(path, {}).update(found)

    def add_graph(self, path: str, g: GraphProto) -> None:
        io = {vi.name: vi.type for vi in g.output}
        io.update((vi.name, vi.type) for vi in g.input)
        self._graphs[path] = g
        self._io[path] = io
        self._inner[path] = None

    def _inner_of(self, path: str) -> dict[str, int]:
        got = self._inner.get(path)
        if got is None:
            g = self._graphs.get(path)
            names = [vi.name for vi in g.value_info] if g is not None else []
            got = dict(zip(names, range(len(names)), strict=True))
            for old, new in self._pending.pop(path, ()):
                at = got.pop(old, None)
                if at is not None:
                    got[new] = at
            self._inner[path] = got
        return got

    def get(self, key: tuple[str, str], default: Any = None) -> Any:  # type: ignore[override]
        path, name = key
        io = self._io.get(path)
        if io is None:
            return default
        newer = self._newer.get(path)
        t = newer.get(name) if newer else None
        if t is None:
            t = io.get(name)
        if t is None:
            at = self._inner_of(path).get(name)
            if at is not None:
                t = self._graphs[path].value_info[at].type
        if t is None or t.WhichOneof("value") is None:
            return default
        return t

    def __getitem__(self, key: tuple[str, str]) -> TypeProto:
        t = self.get(key)
        if t is None:
            raise KeyError(key)
        return t  # type: ignore[no-any-return]

    def graph(self, path: str) -> dict[str, TypeProto]:
        """Every inferred type of one graph (builds its index)."""
        out: dict[str, TypeProto] = {}
        if path in self._io:
            value_info = self._graphs[path].value_info
            out = {n: value_info[at].type for n, at in self._inner_of(path).items()}
        out.update(self._io.get(path, {}))
        out.update(self._newer.get(path, {}))
        return {n: t for n, t in out.items() if t.WhichOneof("value") is not None}

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for path in self._io:
            for name in self.graph(path):
                yield (path, name)

    def __len__(self) -> int:
        return sum(len(self.graph(path)) for path in self._io)

    def rename(self, old: str, new: str, paths: Iterable[str]) -> None:
        for path in paths:
            newer = self._newer.get(path)
            if newer is not None and old in newer:
                newer[new] = newer.pop(old)
            io = self._io.get(path)
            if io is None:
                continue
            t = io.pop(old, None)
            if t is not None:
                io[new] = t
            inner = self._inner.get(path)
            if inner is None:
                self._pending.setdefault(path, []).append((old, new))
            else:
                at = inner.pop(old, None)
                if at is not None:
                    inner[new] = at


_LINE = re.compile(r"\(op_type:(?P<op>[^,)]*)(?:, node name: (?P<name>[^)]*))?\): (?P<msg>.*)")
_MAX_PROTO = MAX_PROTO


@dataclass
class InferenceFailure:
    graph_path: str
    node_index: int | None
    op_type: str
    message: str
    known_gap: str | None = None  # why this is the onnx package's gap, not the model's fault


@dataclass
class InferenceResult:
    types: TypeMap = field(default_factory=TypeMap)
    failures: list[InferenceFailure] = field(default_factory=list)
    strict_ok: bool = True
    ran: bool = True
    crash: str | None = None  # onnx crashed in the isolated worker
    seconds: float = 0.0


def _copy_of(model: ModelProto) -> ModelProto:
    """Serialize-and-parse is several times faster than CopyFrom for big models."""
    copy = ModelProto()
    copy.ParseFromString(model.SerializeToString())
    return copy


def prepare_for_inference(
    copy: ModelProto, base_dir: str | None = None, scopes: list[GraphScope] | None = None
) -> None:
    """In place, on a copy: tensor data as loaded, and no value_info or main-graph output
    types, so that inferred types stay apart from declared ones (`prepare.prepare_graphs`,
    which the worker runs itself on a model sent as it is).  One pass finds the graphs
    (through the scopes when given: no walk over every node)."""
    if scopes is None:
        graphs = list(all_graphs(copy))
    else:
        cache: dict[str, GraphProto] = {}
        for scope in scopes:
            if scope.kind == "function":
                continue
            g = _graph_at(copy.graph, scope, cache)
            if g is not None:
                cache[scope.path] = g
        graphs = list(cache.values())
    prepare_graphs(copy, base_dir, graphs)


def _stripped_copy(
    model: ModelProto, scopes: list[GraphScope] | None = None, base_dir: str | None = None
) -> ModelProto:
    """A copy prepared for inference (`prepare_for_inference`)."""
    copy = _copy_of(model)
    prepare_for_inference(copy, base_dir, scopes)
    return copy


def _graph_at(
    root: GraphProto, scope: GraphScope, cache: dict[str, GraphProto]
) -> GraphProto | None:
    if scope.parent is None:
        return root if scope.kind == "main" else None
    parent = cache.get(scope.parent.path)
    if (
        parent is None
        or scope.owner_node_index is None
        or scope.owner_node_index >= len(parent.node)
    ):
        return None
    node = parent.node[scope.owner_node_index]
    attr_name = scope.owner_attribute or ""
    index = None
    # (an attribute name that is not UTF-8 comes as bytes, and is never "name[i]")
    if isinstance(attr_name, str) and attr_name.endswith("]") and "[" in attr_name:
        attr_name, _, rest = attr_name.partition("[")
        index = int(rest[:-1])
    for attr in node.attribute:
        if attr.name != attr_name:
            continue
        if index is None and (attr.type == AttributeProto.GRAPH or attr.HasField("g")):
            return attr.g
        if index is not None and index < len(attr.graphs):
            return attr.graphs[index]
    return None


def collect_types(result: ModelProto, scopes: list[GraphScope]) -> TypeMap:
    types = TypeMap()
    cache: dict[str, GraphProto] = {}
    for scope in scopes:
        if scope.kind == "function":
            continue
        g = _graph_at(result.graph, scope, cache)
        if g is None:
            continue
        cache[scope.path] = g
        types.add_graph(scope.path, g)
    return types


def _infer(copy: ModelProto) -> tuple[ModelProto, str | None]:
    """(inferred model, strict-mode failure text or None)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(
            copy, check_type=True, strict_mode=True, data_prop=True
        )
    except Exception as exc:
        try:
            inferred = onnx.shape_inference.infer_shapes(
                copy, check_type=False, strict_mode=False, data_prop=True
            )
        except Exception:
            inferred = copy
        return inferred, str(exc)
    return inferred, None


def run_inference(
    model: ModelProto,
    scopes: list[GraphScope],
    *,
    isolate: bool = True,
    base_dir: str | None = None,
) -> InferenceResult:
    """Infer types on a copy without value_info, in the worker process (onnx can crash
    on broken models) unless ``isolate`` is False.  ``base_dir``: the model's folder, where
    its external data is (never the current directory)."""
    return begin_inference(model, scopes, isolate=isolate, base_dir=base_dir)()


def begin_inference(
    model: ModelProto,
    scopes: list[GraphScope],
    *,
    isolate: bool = True,
    base_dir: str | None = None,
    blob: bytes | None = None,
) -> Callable[[], InferenceResult]:
    """Start inference and return the function that completes it; with isolation the
    worker infers while the caller runs its own rules.  ``blob``: the model already
    serialized (the worker then prepares its copy itself, off this process's time)."""
    start = time.perf_counter()
    # (the blob's length, when there is one: ByteSize walks every node holding the GIL)
    if (len(blob) if blob is not None else model.ByteSize()) > _MAX_PROTO:
        res = InferenceResult(ran=False)
        return lambda: res
    if isolate:
        from onnxviz.check.worker import WORKER

        if blob is not None:
            pending = WORKER.begin(blob, "prepare+infer", base_dir)
        else:
            pending = WORKER.begin(_stripped_copy(model, scopes, base_dir).SerializeToString())

        return inference_answer(pending, scopes, start)
    got = _infer(_stripped_copy(model, scopes, base_dir))
    return lambda: _result(got, scopes, start)


def inference_answer(
    pending: Callable[[], Any], scopes: list[GraphScope], start: float
) -> Callable[[], InferenceResult]:
    """The function that turns the inference worker's answer into an InferenceResult."""

    def finish_isolated() -> InferenceResult:
        got = pending()
        if isinstance(got, str):
            return _result(got, scopes, start)
        data, failure = got
        inferred = ModelProto()
        inferred.ParseFromString(data)
        return _result((inferred, failure), scopes, start)

    return finish_isolated


def _infer_bytes(model_bytes: bytes) -> ModelProto | None:
    """A small prepared model inferred (strict mode) in the worker process; None when
    inference fails or crashes there."""
    from onnxviz.check.worker import WORKER

    got = WORKER.infer(model_bytes)
    if isinstance(got, str) or got[1] is not None:
        return None
    inferred = ModelProto()
    inferred.ParseFromString(got[0])
    return inferred


def _result(
    got: tuple[ModelProto, str | None] | str, scopes: list[GraphScope], start: float
) -> InferenceResult:
    res = InferenceResult()
    if isinstance(got, str):
        res.ran = False
        res.strict_ok = False
        res.crash = got
    else:
        inferred, failure = got
        res.types = collect_types(inferred, scopes)
        if failure is not None:
            res.strict_ok = False
            res.failures = _parse_failures(failure, scopes, res.types)
    res.seconds = time.perf_counter() - start
    return res


def _parse_failures(text: str, scopes: list[GraphScope], types: TypeMap) -> list[InferenceFailure]:
    found: list[InferenceFailure] = []
    used: set[tuple[str, int]] = set()
    for line in text.splitlines():
        m = _LINE.search(line)
        if m is None:
            continue
        op, name, msg = m.group("op"), (m.group("name") or "").strip(), m.group("msg").strip()
        where = _locate(op, name, scopes, types, used)
        if where is not None:
            used.add(where)
        found.append(
            InferenceFailure(where[0] if where else "main", where[1] if where else None, op, msg)
        )
    if not found:
        msg = text.strip().replace("\n", " ")
        found.append(InferenceFailure("main", None, "", msg))
    # "Input 0 expected to have type but instead is null" follows from an earlier failure.
    primary = [f for f in found if "instead is null" not in f.message]
    if primary:
        found = primary
    for f in found:
        f.known_gap = _known_gap(f, scopes, types)
    return found


def _locate(
    op: str, name: str, scopes: list[GraphScope], types: TypeMap, used: set[tuple[str, int]]
) -> tuple[str, int] | None:
    fallback: tuple[str, int] | None = None
    for scope in scopes:
        if name:
            idx = scope.node_index(name)
            if idx is not None and scope.nodes[idx].op_type == op:
                return (scope.path, idx)
            continue
        for i, node in enumerate(scope.nodes):
            if node.op_type != op or node.name or (scope.path, i) in used:
                continue
            if fallback is None:
                fallback = (scope.path, i)
            if any(o and (scope.path, o) not in types for o in node.output):
                return (scope.path, i)
    return fallback


def _known_gap(f: InferenceFailure, scopes: list[GraphScope], types: TypeMap) -> str | None:
    if f.node_index is None:
        return None
    scope = next((s for s in scopes if s.path == f.graph_path), None)
    if scope is None:
        return None
    node = scope.nodes[f.node_index]
    for name in node.input:
        owner = scope.lookup(name) if name else None
        if owner is None:
            continue
        if any(d.kind == "sparse_initializer" for d in owner.definitions_of(name)):
            return "onnx.shape_inference ignores the types of sparse_initializer tensors"
    return None


# -- onnx.checker ----------------------------------------------------------------------------
@dataclass
class CheckerResult:
    message: str | None  # None: the checker accepts the model
    node_name: str | None = None
    ran: bool = True
    seconds: float = 0.0


_NODE_CONTEXT = re.compile(r"Bad node spec for node\. Name: (?P<name>.*?) OpType: (?P<op>\S+)")


def run_checker(model: ModelProto, base_dir: str | None = None) -> CheckerResult:
    """onnx.checker's verdict, given in its worker process (`worker.CHECKER`: the checker
    is onnx C++ code too), which runs in the model's folder so that the external data
    files it checks are the loader's, whatever the current directory is."""
    return begin_checker(model, base_dir)()


def begin_checker(
    model: ModelProto, base_dir: str | None = None, *, blob: bytes | None = None
) -> Callable[[], CheckerResult]:
    """Send the model (or ``blob``, the model already serialized) to the checker's
    worker; the returned function waits for the verdict."""
    from onnxviz.check.worker import CHECKER

    start = time.perf_counter()
    if (len(blob) if blob is not None else model.ByteSize()) > _MAX_PROTO:
        res = CheckerResult(None, ran=False)
        return lambda: res
    pending = CHECKER.begin(blob or model.SerializeToString(), "check", base_dir)
    return checker_answer(pending, start)


def checker_answer(pending: Callable[[], Any], start: float) -> Callable[[], CheckerResult]:
    """The function that turns the checker worker's answer into a CheckerResult."""

    def finish() -> CheckerResult:
        answer = pending()
        seconds = time.perf_counter() - start
        if isinstance(answer, str):
            # The checker crashed: that says nothing about the model, so no verdict.
            return CheckerResult(None, ran=False, seconds=seconds)
        message = answer[1]
        if message is None:
            return CheckerResult(None, seconds=seconds)
        m = _NODE_CONTEXT.search(message)
        first = message.split("\n\n==>")[0].strip()
        return CheckerResult(
            first, node_name=m.group("name").strip() if m else None, seconds=seconds
        )

    return finish


# -- the ONNX text format ---------------------------------------------------------------------
class TextParseError(ValueError):
    """onnx.parser refused the text (its message), or its worker process died."""


def parse_text_model(text: bytes) -> ModelProto:
    """Parse ONNX text format (UTF-8 bytes) in the checker's worker process: onnx.parser
    is C++ code and must not run on a user's file in the app's process.  Raises
    TextParseError with the parser's complaint or the crash."""
    from onnxviz.check.worker import CHECKER

    answer = CHECKER.begin(text, "parse")()
    if isinstance(answer, str):  # the worker died
        raise TextParseError(answer.replace(CHECKER.what, "onnx.parser"))
    verdict, payload = answer
    if verdict != "parsed":
        raise TextParseError(str(payload))
    model = ModelProto()
    model.ParseFromString(payload)
    return model


# -- inferred types for the UI and surgery ---------------------------------------------------
def infer_value_types(
    model: ModelProto, base_dir: str | None = None
) -> dict[str, dict[str, TypeProto]]:
    """Types shape inference finds, per graph path, apart from the declared ones; always
    in the worker process (onnx's C++ inference can crash on a broken model, and must not
    take the app with it).  Empty when inference fails or crashes."""
    from onnxviz.model.scopes import build_scopes

    scopes = build_scopes(model)
    result = run_inference(model, scopes, isolate=True, base_dir=base_dir)
    if not result.ran:
        return {}
    return {s.path: result.types.graph(s.path) for s in scopes if s.graph is not None}


# -- inferred types for the UI -----------------------------------------------------------------
def type_texts_here(source: bytes | str, base_dir: str | None) -> dict[str, dict[str, str]]:
    """Inferred types as text per graph path, for the canvas; runs in the worker process
    (``source``: model bytes or a model file's path).  Everything the app would do with
    the answer besides storing it (parsing the inferred model, indexing it, turning 10^5
    TypeProtos into text) happens here, so the app's threads hold the GIL only for
    unpickling plain strings, not for a second or more next to the UI thread."""
    from onnxviz.model.scopes import build_scopes
    from onnxviz.model.types import type_to_text

    model = ModelProto()
    if isinstance(source, str):
        with open(source, "rb") as fh:
            model.ParseFromString(fh.read())
    else:
        model.ParseFromString(source)
    scopes = build_scopes(model)
    result = run_inference(model, scopes, isolate=False, base_dir=base_dir)
    if not result.ran:
        return {}
    return {
        s.path: {name: type_to_text(tp) for name, tp in result.types.graph(s.path).items()}
        for s in scopes
        if s.graph is not None
    }


def infer_type_texts(
    model: ModelProto | bytes, base_dir: str | None = None, path: str | None = None
) -> dict[str, dict[str, str]]:
    """`type_texts_here` in the worker process: from the file at ``path`` when given (an
    unedited model: nothing is serialized here), else from the model or its bytes.
    Empty when inference fails or crashes."""
    from onnxviz.check.worker import WORKER

    source: bytes | str
    if path is not None:
        source = path
    elif isinstance(model, bytes):
        source = model
    elif model.ByteSize() > _MAX_PROTO:
        return {}
    else:
        source = model.SerializeToString()
    got = WORKER.begin(source, "type-texts", base_dir)()  # type: ignore[arg-type]
    if isinstance(got, str):  # a crash report
        return {}
    return texts_from_chunks(got[1])


# Type texts travel in pickles of this many entries: unpickling the 10^5 texts of a big
# model at once held the GIL for 30-90 ms, a stop of the UI thread.
TEXT_CHUNK = 10_000


def texts_in_chunks(texts: dict[str, dict[str, str]]) -> list[tuple[str, bytes]]:
    """(graph path, pickled list of (name, text) pairs) per chunk of `TEXT_CHUNK`."""
    import pickle

    chunks: list[tuple[str, bytes]] = []
    for path, per_name in texts.items():
        pairs = list(per_name.items())
        for start in range(0, max(len(pairs), 1), TEXT_CHUNK):
            chunk = pairs[start : start + TEXT_CHUNK]
            chunks.append((path, pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL)))
    return chunks


def texts_from_chunks(chunks: list[tuple[str, bytes]]) -> dict[str, dict[str, str]]:
    """`texts_in_chunks` undone, one chunk at a time, letting other threads (the UI
    thread) take the GIL between two."""
    import pickle

    texts: dict[str, dict[str, str]] = {}
    for path, blob in chunks:
        texts.setdefault(path, {}).update(pickle.loads(blob))
        time.sleep(0)
    return texts


def infer_types(doc: Checkable) -> TypeMap:
    """Inferred types by (graph path, value name), kept apart from the declared ones,
    from a full validation (which decides whether onnx must be isolated in the worker
    process, since onnx can crash on broken models).  An open document asks its
    `Validator.inferred_types()` instead, which reuses the last run while it is current."""
    from onnxviz.check.validator import Validator

    return Validator(doc).inferred_types()


__all__ = [
    "CheckerResult",
    "InferenceFailure",
    "InferenceResult",
    "TypeMap",
    "collect_types",
    "infer_types",
    "infer_type_texts",
    "infer_value_types",
    "parse_text_model",
    "begin_checker",
    "run_checker",
    "run_inference",
    "onnx",
]
