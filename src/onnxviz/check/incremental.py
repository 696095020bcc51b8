"""The validation engine: a full run, and re-checks of only what a command touched.

A `Validator` (check.validator) keeps a `ValidationState` per document, with results at
three grains so an edit re-runs little:

* per graph (interface rules, empty names, duplicate node names, cycles),
* per value name in a graph (SSA, order, undefined uses, shadowing, declared types,
  initializer tensors),
* per node (operator schema, attributes, type constraints, attribute tensors, node
  metadata and device configuration),

plus the model-wide rules, the inference result and the checker verdict.  A value rename
(the commonest edit) is recognised from the ChangeSet: one name leaves, one arrives, no
structural or model-field change.  Types are invariant under renaming, so the inferred
types and the checker verdict are re-keyed instead of recomputed, and only the nodes and
names around the renamed value are checked again.  Any other change re-runs inference and
the checker and re-checks everything whose types changed; a structural change (graphs
added or removed, node indexes shifted) or a model-field change re-runs everything.
Either way the result equals a full run: tests compare the two.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from onnx import ModelProto

from onnxviz.check import (
    encoding,
    fastpath,
    functions,
    model_rules,
    names,
    operators,
    prefetch,
    structure,
    tensors,
    types,
)
from onnxviz.check.checkable import Checkable
from onnxviz.check.context import CheckContext
from onnxviz.check.inference import (
    MAX_PROTO,
    CheckerResult,
    InferenceResult,
    begin_checker,
    begin_inference,
    checker_answer,
    inference_answer,
)
from onnxviz.check.local_recheck import (
    cone_types,
    downstream_cone,
    node_keeps_its_types,
    one_node_types,
)
from onnxviz.check.registry import diag
from onnxviz.model.changes import ChangeSet
from onnxviz.model.diagnostics import Diagnostic, Severity
from onnxviz.model.scopes import GraphScope
from onnxviz.model.text import as_text

NodeRule = Callable[[CheckContext, GraphScope, int], list[Diagnostic]]
NameRule = Callable[[CheckContext, GraphScope, Iterable[str]], dict[str, list[Diagnostic]]]
ScopeRule = Callable[[CheckContext, GraphScope], list[Diagnostic]]

NAME_RULES: tuple[NameRule, ...] = (
    structure.name_rules,
    names.name_rules,
    types.name_rules,
    tensors.name_rules,
)
# Type constraints (T004) are checked by strict inference when it succeeds; see _node_rules.
BASE_NODE_RULES: tuple[NodeRule, ...] = (
    operators.node_rules,
    tensors.node_rules,
    functions.node_rules,
    model_rules.node_rules,
)
# Rules over a graph's interface: cheap, re-run whenever the graph changed.
INTERFACE_RULES: tuple[ScopeRule, ...] = (structure.scope_rules,)
# Rules over every entry of a graph: re-run on any change but a rename.
BODY_RULES: tuple[ScopeRule, ...] = (
    encoding.scope_rules,
    structure.empty_name_rules,
    names.scope_rules,
    tensors.scope_rules,
    model_rules.scope_rules,
)


@dataclass
class ValidationState:
    ctx: CheckContext
    revision: int | None = None  # the document revision this state describes
    paths: list[str] = field(default_factory=list)
    interface: dict[str, list[Diagnostic]] = field(default_factory=dict)
    body: dict[str, list[Diagnostic]] = field(default_factory=dict)
    cycles: dict[str, list[Diagnostic]] = field(default_factory=dict)
    by_name: dict[str, dict[str, list[Diagnostic]]] = field(default_factory=dict)
    by_node: dict[str, dict[int, list[Diagnostic]]] = field(default_factory=dict)
    names_seen: dict[str, set[str]] = field(default_factory=dict)
    bad_identifiers: dict[str, names.BadNames] = field(default_factory=dict)
    model: list[Diagnostic] = field(default_factory=list)
    inference: InferenceResult | None = None
    checker: CheckerResult | None = None
    timings: dict[str, float] = field(default_factory=dict)


# -- rule runners ------------------------------------------------------------------------------
def _node_rules(state: ValidationState) -> tuple[NodeRule, ...]:
    """Every node rule that applies; type constraints (T004) are checked by strict
    inference when it succeeds, so they run only when it did not."""
    inf = state.inference
    if inf is None or not inf.ran or not inf.strict_ok:
        return (*BASE_NODE_RULES, types.node_rules)
    return BASE_NODE_RULES


def _check_nodes(
    state: ValidationState,
    scope: GraphScope,
    indexes: Iterable[int],
    rules: tuple[NodeRule, ...] | None = None,
    reset: bool = True,
) -> None:
    ctx = state.ctx
    rules = _node_rules(state) if rules is None else rules
    store = state.by_node.setdefault(scope.path, {})
    n = len(scope.nodes)
    for i in indexes:
        if reset:
            store.pop(i, None)
        if i >= n:
            continue
        found: list[Diagnostic] = []
        for r in rules:
            got = r(ctx, scope, i)
            if got:
                found.extend(got)
        if found:
            store.setdefault(i, []).extend(found)


def _check_names(
    state: ValidationState,
    scope: GraphScope,
    wanted: Iterable[str],
    rules: tuple[NameRule, ...] = NAME_RULES,
    reset: bool = True,
) -> None:
    ctx = state.ctx
    wanted = list(wanted)
    store = state.by_name.setdefault(scope.path, {})
    if reset:
        for nm in wanted:
            store.pop(nm, None)
    for r in rules:
        for nm, found in r(ctx, scope, wanted).items():
            store.setdefault(nm, []).extend(found)


def _check_cycles(state: ValidationState, scope: GraphScope) -> None:
    names_store = state.by_name.get(scope.path, {})
    has_order = any(d.code == "G002" for ds in names_store.values() for d in ds)
    state.cycles[scope.path] = structure.cycle_rules(state.ctx, scope) if has_order else []


def _model_rules(state: ValidationState) -> list[Diagnostic]:
    ctx = state.ctx
    out: list[Diagnostic] = []
    for r in (
        encoding.model_rules,
        model_rules.model_rules,
        operators.model_rules,
        functions.model_rules,
        types.model_rules,
    ):
        out.extend(r(ctx))
    return out


# -- full run --------------------------------------------------------------------------------
# Rules that read types (declared against inferred, type constraints, sharded ranks) run
# after inference; everything else runs first, so that a model our rules find broken has
# onnx's inference isolated in a worker process (onnx can crash on broken models).
STRUCTURE_NAME_RULES: tuple[NameRule, ...] = (structure.name_rules, names.name_rules)
TYPED_NAME_RULES: tuple[NameRule, ...] = (types.name_rules,)
UNTYPED_NODE_RULES: tuple[NodeRule, ...] = (
    operators.node_rules,
    tensors.node_rules,
    functions.node_rules,
)
TYPED_NODE_RULES: tuple[NodeRule, ...] = (model_rules.node_rules,)


def _model_bytes(doc: Checkable, model: ModelProto) -> bytes | None:
    """What the worker processes get: the document's bytes (`Document.model_bytes`: the
    file as read while unedited, else a serialization in small steps shared with the
    other readers of the same edit), else a serialization of ``model``; None when too
    big for protobuf."""
    if model is doc.model:
        try:
            data = doc.model_bytes()
        except ValueError:
            return None
        if data is not None:
            return data
    return model.SerializeToString() if model.ByteSize() <= MAX_PROTO else None


def full_run(
    doc: Checkable, model: ModelProto, scopes: list[GraphScope], load_diags: list[Diagnostic]
) -> ValidationState:
    t0 = time.perf_counter()
    # Two worker processes infer types and run the checker while this one runs the
    # rules that need neither: a crash in onnx cannot take us down, and the cores work
    # in parallel.  The model is serialized once for both.
    base_dir = doc.base_dir
    early = prefetch.take(doc)
    if early is not None:  # the workers have had the file since before it was loaded
        pending = inference_answer(early[0], scopes, t0)
        pending_checker = checker_answer(early[1], t0)
    else:
        blob = _model_bytes(doc, model)
        pending = begin_inference(model, scopes, isolate=True, base_dir=base_dir, blob=blob)
        pending_checker = begin_checker(model, base_dir, blob=blob)
    checker: CheckerResult | None = None
    try:
        t1 = time.perf_counter()
        ctx = CheckContext(model, scopes, load_diags, None)
        state = ValidationState(ctx=ctx, revision=doc.revision)
        state.paths = [s.path for s in scopes]
        suspects: dict[str, tuple[set[str], list[int]]] = {}
        untyped: dict[str, set[str]] = {}
        for scope in scopes:
            path = scope.path
            state.interface[path] = [d for r in INTERFACE_RULES for d in r(ctx, scope)]
            state.body[path] = [d for r in BODY_RULES for d in r(ctx, scope)]
            all_names = structure.scope_names(ctx, scope)
            all_names.discard("")
            state.names_seen[path] = all_names
            # Only names this graph defines: uses of outer names are judged where defined.
            state.bad_identifiers[path] = names.BadNames(
                names.non_identifiers(scope.defined_names())
            )
            sus_names, typed_names = fastpath.suspect_names(ctx, scope)
            untyped[path] = sus_names
            suspects[path] = (typed_names, [])
            _check_names(state, scope, sus_names, STRUCTURE_NAME_RULES)
            _check_names(state, scope, typed_names, (tensors.name_rules,), reset=False)
        # Which nodes need a closer look depends on the checker's verdict.
        t2 = time.perf_counter()
        checker = pending_checker()
        t_checker = time.perf_counter()
        state.checker = checker
        checker_ok = checker.ran and checker.message is None
        for scope in scopes:
            sus_nodes = fastpath.suspect_nodes(ctx, scope, False, checker_ok)
            suspects[scope.path] = (suspects[scope.path][0], sus_nodes)
            _check_nodes(state, scope, sus_nodes, UNTYPED_NODE_RULES)
    except BaseException:
        pending()  # always collect the answers: they release the workers
        if checker is None:
            pending_checker()
        raise
    t3 = time.perf_counter()
    inference = pending()
    t4 = time.perf_counter()
    state.inference = inference
    ctx.inference = inference
    typed_nodes = TYPED_NODE_RULES
    if types.node_rules in _node_rules(state):
        typed_nodes = (*TYPED_NODE_RULES, types.node_rules)
    for scope in scopes:
        typed_names, sus_nodes = suspects[scope.path]
        _check_names(state, scope, typed_names, TYPED_NAME_RULES, reset=False)
        nodes = range(len(scope.nodes)) if types.node_rules in typed_nodes else sus_nodes
        _check_nodes(state, scope, nodes, typed_nodes, reset=False)
        _check_cycles(state, scope)
    state.model = _model_rules(state)
    t5 = time.perf_counter()
    state.timings = {
        "checker": checker.seconds,
        "checker_wait": t_checker - t2,
        "inference": inference.seconds,
        "inference_wait": t4 - t3,
        "rules": (t2 - t1) + (t3 - t_checker) + (t5 - t4),
        "start": t1 - t0,
    }
    return state


def _has_error(state: ValidationState) -> bool:
    for store in (state.interface, state.body):
        if any(d.severity is Severity.ERROR for ds in store.values() for d in ds):
            return True
    for nested in (state.by_name, state.by_node):
        for per in nested.values():
            if any(d.severity is Severity.ERROR for ds in per.values() for d in ds):  # type: ignore[attr-defined]
                return True
    return False


# -- incremental run ---------------------------------------------------------------------------
def _rename_pair(
    state: ValidationState, scopes: dict[str, GraphScope], changed: ChangeSet
) -> tuple[str, str] | None:
    """(old, new) when the change is a value rename, else None."""
    left: set[str] = set()
    arrived: set[str] = set()
    ctx = state.ctx
    for path, name in changed.names:
        scope = scopes.get(path)
        if scope is None:
            return None
        before = name in state.names_seen.get(path, ())
        now = bool(
            scope.defines(name)
            or name in scope.consumers
            or name in scope.output_uses
            or any(name in c.free_names for c in scope.children)
        )
        if before and not now:
            left.add(name)
        elif now and not before:
            arrived.add(name)
    del ctx
    if len(left) == 1 and len(arrived) == 1:
        return next(iter(left)), next(iter(arrived))
    return None


def incremental_run(
    doc: Checkable,
    state: ValidationState,
    scopes: list[GraphScope],
    changed: ChangeSet,
    load_diags: list[Diagnostic],
) -> ValidationState | None:
    """Update state in place for a change; None when only a full run can answer."""
    if changed.structural or changed.model_fields:
        return None
    if [s.path for s in scopes] != state.paths:
        return None
    by_path = {s.path: s for s in scopes}
    pair = _rename_pair(state, by_path, changed)
    if pair is None:
        return _retype_run(doc, state, scopes, by_path, changed, load_diags)
    old, new = pair
    ctx = state.ctx
    ctx.scopes = scopes
    ctx.by_path = by_path
    ctx.load_diagnostics = load_diags
    ctx.forget_implicit()
    if state.inference is not None:
        state.inference.types.rename(old, new, {p for p, _ in changed.names})
    touched_nodes: dict[str, set[int]] = {}
    for path, idx in changed.nodes:
        touched_nodes.setdefault(path, set()).add(idx)
    for scope in scopes:
        path = scope.path
        seen = state.names_seen[path]
        had = old in seen or new in seen
        now_names = [n for n in (old, new) if _present(ctx, scope, n)]
        if not had and not now_names and path not in changed.graphs:
            continue
        ctx.rename_declared(path, old, new)
        seen.discard(old)
        seen.discard(new)
        seen.update(now_names)
        bad = state.bad_identifiers.setdefault(path, names.BadNames(set()))
        bad.discard(old)
        bad.discard(new)
        bad.update(names.non_identifiers([n for n in now_names if scope.defines(n)]))
        _check_names(state, scope, [old, new])
        nodes = set(touched_nodes.get(path, ()))
        for nm in now_names:
            p = scope.producer.get(nm)
            if p is not None:
                nodes.add(p[0])
            nodes.update(ci for ci, _ in scope.consumers.get(nm, ()))
            nodes.update(ctx.implicit_consumers(scope).get(nm, ()))
        _check_nodes(state, scope, sorted(nodes))
        state.interface[path] = [d for r in INTERFACE_RULES for d in r(ctx, scope)]
        _check_cycles(state, scope)
    # Training bindings and node sharding specs name values; the rest is rename-invariant.
    state.model = [d for d in state.model if d.code not in ("M003", "M004", "M005")]
    state.model.extend(
        d for d in model_rules.model_rules(ctx) if d.code in ("M003", "M004", "M005")
    )
    state.revision = doc.revision
    return state


def _local_attribute_run(
    doc: Checkable,
    state: ValidationState,
    by_path: dict[str, GraphScope],
    changed: ChangeSet,
    load_diags: list[Diagnostic],
) -> ValidationState | None:
    """The re-check of an attribute edit on one node: from that node alone when its output
    types stay the same, else from its downstream cone inferred again; None when the
    whole model must be inferred again."""
    if changed.names or len(changed.nodes) != 1 or len(changed.graphs) > 1:
        return None
    ((path, index),) = changed.nodes
    scope = by_path.get(path)
    inference, checker = state.inference, state.checker
    if (
        scope is None
        or scope.graph is None
        or inference is None
        or not inference.ran
        or not inference.strict_ok
        or checker is None
        or not checker.ran
        or checker.message is not None
    ):
        return None  # a model with problems already: the full answer is the safe one
    ctx, base_dir = state.ctx, doc.base_dir
    recheck_nodes: set[int] = {index}
    retyped: list[str] = []
    if not node_keeps_its_types(doc.model, ctx, scope, index, inference.types, base_dir):
        # The types change: infer the downstream cone again, seeded at its boundary.
        cone = downstream_cone(ctx, scope, index)
        if cone is None:
            return None
        if one_node_types(doc.model, ctx, scope, index, inference.types, base_dir) is None:
            return None  # inference or the checker rejects the edited node itself
        found = cone_types(doc.model, ctx, scope, cone, inference.types)
        if found is None:
            return None
        retyped = [n for n, t in found.items() if inference.types.get((path, n)) != t]
        inference.types.update(path, found)
        recheck_nodes.update(cone)
        for name in retyped:
            recheck_nodes.update(ci for ci, _ in scope.consumers.get(name, ()))
    ctx.load_diagnostics = load_diags
    if retyped:
        _check_names(state, scope, retyped)
        state.interface[path] = [d for r in INTERFACE_RULES for d in r(ctx, scope)]
    _check_nodes(state, scope, sorted(recheck_nodes))
    state.body[path] = _local_body(ctx, scope, state.body.get(path, []), recheck_nodes)
    state.model = _model_rules(state)
    state.revision = doc.revision
    return state


def _local_body(
    ctx: CheckContext, scope: GraphScope, before: list[Diagnostic], recheck_nodes: set[int]
) -> list[Diagnostic]:
    """BODY_RULES after an edit that changed only ``recheck_nodes``' attributes and types:
    the node part of the encoding rule (N008) walks every node, so its earlier findings
    are kept for the nodes the edit did not touch (their fields and labels are the same)
    and only the re-checked nodes are read again."""
    labels = {as_text(scope.node_label(i)) for i in recheck_nodes if i < len(scope.nodes)}
    kept = [
        d
        for d in before
        if d.code == "N008" and d.location.node is not None and d.location.node not in labels
    ]
    fresh = [
        d
        for i in sorted(recheck_nodes)
        if i < len(scope.nodes)
        for d in encoding.node_rules(ctx, scope, i)
    ]
    out = encoding.entry_rules(ctx, scope)
    if kept and fresh:  # rare (names that are not UTF-8): restore the full run's node order
        at = {as_text(label): i for i, label in enumerate(scope.labels)}
        out += sorted(kept + fresh, key=lambda d: at.get(d.location.node or "", -1))
    else:
        out += kept + fresh
    out += [d for r in BODY_RULES if r is not encoding.scope_rules for d in r(ctx, scope)]
    return out


def _present(ctx: CheckContext, scope: GraphScope, name: str) -> bool:
    return bool(
        scope.defines(name)
        or name in scope.consumers
        or name in scope.output_uses
        or name in ctx.implicit_consumers(scope)
    )


def _retype_run(
    doc: Checkable,
    state: ValidationState,
    scopes: list[GraphScope],
    by_path: dict[str, GraphScope],
    changed: ChangeSet,
    load_diags: list[Diagnostic],
) -> ValidationState | None:
    """A non-structural edit that may change types: re-run inference and the checker, then
    re-check the touched graphs' names and the nodes whose inputs, outputs or types changed.
    An edit of one node's attributes that leaves its output types as they were is answered
    from that node alone (`local_recheck.node_keeps_its_types`): nothing downstream can
    change."""
    local = _local_attribute_run(doc, state, by_path, changed, load_diags)
    if local is not None:
        return local
    old_inf = state.inference
    base_dir = doc.base_dir
    model = doc.model
    blob = _model_bytes(doc, model)
    pending = begin_inference(model, scopes, base_dir=base_dir, blob=blob)
    checker = begin_checker(model, base_dir, blob=blob)()
    inference = pending()
    if old_inf is None or old_inf.strict_ok != inference.strict_ok:
        return None  # the set of node rules changes: recheck everything
    ctx = CheckContext(doc.model, scopes, load_diags, inference)
    state.ctx = ctx
    state.inference = inference
    state.checker = checker
    retyped: set[tuple[str, str]] = {
        k for k, t in inference.types.items() if old_inf.types.get(k) != t
    }
    retyped.update(k for k in old_inf.types if k not in inference.types)
    graphs = (
        set(changed.graphs)
        | {p for p, _ in changed.nodes}
        | {p for p, _ in changed.names}
        | {p for p, _ in retyped}
    )
    changed_names = {n for _, n in changed.names if n}
    for scope in scopes:
        path = scope.path
        seen = state.names_seen.setdefault(path, set())
        here = {n for n in changed_names if n in seen or _present(ctx, scope, n)}
        if path not in graphs and not here:
            continue
        for n in here:
            if _present(ctx, scope, n):
                seen.add(n)
                bad_here = state.bad_identifiers.setdefault(path, names.BadNames(set()))
                bad_here.discard(n)
                bad_here.update(names.non_identifiers([n] if scope.defines(n) else []))
            else:
                seen.discard(n)
                state.bad_identifiers.setdefault(path, names.BadNames(set())).discard(n)
                state.by_name.get(path, {}).pop(n, None)
        state.interface[path] = [d for r in INTERFACE_RULES for d in r(ctx, scope)]
        if path in changed.graphs:
            state.body[path] = [d for r in BODY_RULES for d in r(ctx, scope)]
        wanted = {n for n in here if n in seen} | {n for p, n in retyped if p == path}
        _check_names(state, scope, wanted)
        nodes = {i for p, i in changed.nodes if p == path}
        implicit = ctx.implicit_consumers(scope)
        for nm in wanted:
            pr = scope.producer.get(nm)
            if pr is not None:
                nodes.add(pr[0])
            nodes.update(ci for ci, _ in scope.consumers.get(nm, ()))
            nodes.update(implicit.get(nm, ()))
        _check_nodes(state, scope, sorted(nodes))
        _check_cycles(state, scope)
    state.model = _model_rules(state)
    state.revision = doc.revision
    return state


# -- assembling the answer -----------------------------------------------------------------------
def assemble(state: ValidationState, load_diags: list[Diagnostic]) -> list[Diagnostic]:
    out: list[Diagnostic] = list(load_diags)
    out.extend(state.model)
    for path in state.paths:
        out.extend(state.interface.get(path, ()))
        out.extend(state.body.get(path, ()))
        bad = state.bad_identifiers.get(path)
        if bad is not None:
            out.extend(names.identifier_summary(path, bad))
        nodes = state.by_node.get(path, {})
        for i in sorted(nodes):
            out.extend(nodes[i])
        names_store = state.by_name.get(path, {})
        for nm in sorted(names_store, key=as_text):  # names that are not UTF-8 are bytes
            out.extend(names_store[nm])
        out.extend(state.cycles.get(path, ()))
    out = _dedupe_custom_ops(out)
    own_errors = [d for d in out if d.severity is Severity.ERROR]
    out.extend(_inference_diags(state, own_errors))
    out.extend(_checker_diags(state, out))
    return out


def _dedupe_custom_ops(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[str] = set()
    out = []
    for d in diags:
        if d.code == "O004":
            if d.message in seen:
                continue
            seen.add(d.message)
        out.append(d)
    return out


def _inference_diags(state: ValidationState, own_errors: list[Diagnostic]) -> list[Diagnostic]:
    inf = state.inference
    if inf is not None and inf.crash:
        return [
            diag(
                "I003",
                f"{inf.crash} on this model, so no types were inferred; onnxviz's own rules still ran.",
            )
        ]
    if inf is None or inf.strict_ok:
        return []
    out = []
    ctx = state.ctx
    own = {d.code for d in own_errors}
    for f in inf.failures:
        if "No opset import" in f.message and own & {"O001", "O002"}:
            continue  # the consequence of a missing import we already report
        if f.node_index is None:
            out.append(diag("I002", f"Shape inference failed: {f.message}", f.graph_path))
            continue
        scope = ctx.by_path.get(f.graph_path)
        label = (
            scope.node_label(f.node_index)
            if scope is not None and f.node_index < len(scope.nodes)
            else f"#{f.node_index}"
        )
        if f.known_gap:
            out.append(
                diag(
                    "I003",
                    f"onnx.shape_inference rejects node '{label}' ({f.op_type}): {f.message}; "
                    f"this is a known gap: {f.known_gap}.",
                    f.graph_path,
                    node=label,
                )
            )
        else:
            out.append(
                diag(
                    "I001",
                    f"Type and shape inference fails at node '{label}' ({f.op_type}): {f.message}",
                    f.graph_path,
                    node=label,
                )
            )
    return out


# Warnings that are our account of a checker rejection: the model breaks the spec in a
# way onnxruntime accepts (O020), so the checker's complaint is no news.
_EXPLAINS_CHECKER = frozenset({"O020"})


def _checker_diags(state: ValidationState, found: list[Diagnostic]) -> list[Diagnostic]:
    chk = state.checker
    if chk is None or chk.message is None:
        return []
    errors = [d for d in found if d.severity is Severity.ERROR or d.code in _EXPLAINS_CHECKER]
    if not errors:
        return [
            diag(
                "C002",
                f"onnx.checker rejects the model ({chk.message}), but the IR spec and onnxviz's rules "
                "find it valid.",
                field=None,
            )
        ]
    if _explained(chk, errors):
        return []
    return [
        diag("C001", f"onnx.checker rejects the model: {chk.message}", node=chk.node_name or None)
    ]


# Words in onnx.checker's messages and the codes of ours that explain such a complaint.
_CHECKER_TOPICS: tuple[tuple[str, frozenset[str]], ...] = (
    ("opset", frozenset({"O001", "O002", "O003", "O015", "O017", "F006"})),
    (
        "ir_version",
        frozenset(
            {
                "M001",
                "T001",
                "T002",
                "F002",
                "F003",
                "F004",
                "F005",
                "F009",
                "M006",
                "M007",
                "M013",
                "N007",
            }
        ),
    ),
    ("single static assignment", frozenset({"G001", "N001", "N002"})),
    ("ssa", frozenset({"G001", "N001", "N002"})),
    ("topolog", frozenset({"G002", "G003", "G004"})),
    ("not output of any previous nodes", frozenset({"G002", "G003", "G004"})),
    ("output of any node", frozenset({"G005"})),
    ("attribute", frozenset({"O008", "O009", "O010", "O011", "O012", "O013", "O014", "O016"})),
    ("no op registered", frozenset({"O003", "O002", "O020"})),
    ("number of input", frozenset({"O006", "G006"})),
    ("number of output", frozenset({"O007", "G006"})),
    ("input", frozenset({"O006", "G006", "G004", "G007", "G008", "G009"})),
    ("output", frozenset({"O007", "G006", "G005", "G007", "G008", "G009"})),
    ("shape", frozenset({"G009", "T005", "T009", "D201", "D213"})),
    ("elem_type", frozenset({"T003", "T008", "G008"})),
    ("type", frozenset({"T001", "T002", "T003", "T004", "T005", "T007", "T008", "G008", "D210"})),
    (
        "tensor",
        frozenset(
            {
                "D201",
                "D202",
                "D203",
                "D204",
                "D205",
                "D206",
                "D207",
                "D208",
                "D209",
                "D210",
                "D211",
                "D213",
            }
        ),
    ),
    ("sparse", frozenset({"D208", "D209", "M013"})),
    ("data_location", frozenset({"D203", "D206", "D207"})),
    ("file", frozenset({"D101", "D102", "D103", "D104", "D205"})),
    (
        "external",
        frozenset({"D101", "D102", "D103", "D104", "D203", "D204", "D205", "D206", "D207", "D212"}),
    ),
    (
        "function",
        frozenset({"F001", "F002", "F003", "F004", "F005", "F006", "F007", "F008", "F009", "O018"}),
    ),
    ("name", frozenset({"G007", "G010", "O016"})),
    ("initializer", frozenset({"N007", "N002", "G001", "T007", "M013"})),
    ("metadata", frozenset({"M002", "F005"})),
    ("training", frozenset({"M003", "M004", "M005", "M006"})),
)


def _explained(chk: CheckerResult, errors: list[Diagnostic]) -> bool:
    """Whether one of our errors is about the thing the checker complains about: the same
    node or value, or a code whose topic the checker's message names."""
    msg = chk.message or ""
    if chk.node_name and any(d.location.node == chk.node_name for d in errors):
        return True
    quoted = set(_quoted(msg)) | set(re.findall(r"[\w./:-]+", msg))
    for d in errors:
        loc = d.location
        if any(x and x in quoted for x in (loc.value, loc.attribute, loc.node)):
            return True
    low = msg.lower()
    ours = {d.code for d in errors}
    return any(word in low and codes & ours for word, codes in _CHECKER_TOPICS)


def _quoted(text: str) -> list[str]:
    out = []
    parts = text.split("'")
    for i in range(1, len(parts), 2):
        out.append(parts[i])
    return out
