"""Graph-structure rules (G): single assignment, topological order, cycles, undefined
names, graph outputs, empty names, main-graph interface types, graph names."""

from __future__ import annotations

from collections.abc import Iterable

from onnx import TypeProto

from onnxviz.check.context import CheckContext
from onnxviz.check.registry import diag
from onnxviz.model.diagnostics import Diagnostic
from onnxviz.model.scopes import GraphScope

NameDiags = dict[str, list[Diagnostic]]


def scope_names(ctx: CheckContext, scope: GraphScope) -> set[str]:
    names = scope.defined_names()
    names.update(scope.consumers)
    names.update(scope.output_uses)
    names.update(ctx.implicit_consumers(scope))
    return names


# -- per graph -----------------------------------------------------------------------------
def scope_rules(ctx: CheckContext, scope: GraphScope) -> list[Diagnostic]:
    """Interface rules: graph name, outputs defined (G005), main-graph I/O types."""
    out: list[Diagnostic] = []
    path = scope.path
    if not scope.name:
        what = "function" if scope.kind == "function" else "graph"
        out.append(diag("G010", f"The {what} at '{path}' has no name.", path, field="name"))
    for name in scope.output_uses:
        if name and not scope.defines(name):
            outer = scope.lookup(name) if scope.parent is not None else None
            msg = f"Graph output '{name}' is not produced by any node, input or initializer of this graph."
            hint = (
                f"'{name}' comes from an outer graph: add an Identity node inside this graph"
                if outer is not None
                else None
            )
            out.append(diag("G005", msg, path, value=name, field="output", hint=hint))
    g = scope.graph
    if g is not None and scope.kind == "main":
        out.extend(_main_interface(path, g.input, "input"))
        out.extend(_main_interface(path, g.output, "output"))
    return out


def empty_name_rules(ctx: CheckContext, scope: GraphScope) -> list[Diagnostic]:
    """G007: empty names among inputs, outputs, initializers and value_info."""
    out: list[Diagnostic] = []
    path = scope.path
    g = scope.graph
    if g is not None:
        for field_name, items in (
            ("input", [v.name for v in g.input]),
            ("output", [v.name for v in g.output]),
            ("initializer", [t.name for t in g.initializer]),
            ("sparse_initializer", [s.values.name for s in g.sparse_initializer]),
        ):
            for i, nm in enumerate(items):
                if not nm:
                    out.append(
                        diag(
                            "G007",
                            f"Graph {field_name} #{i} has an empty name.",
                            path,
                            field=f"{field_name}[{i}]",
                        )
                    )
        if any(not v.name for v in g.value_info):
            i = next(i for i, v in enumerate(g.value_info) if not v.name)
            out.append(
                diag("G007", f"value_info #{i} has an empty name.", path, field=f"value_info[{i}]")
            )
    return out


def _main_interface(path: str, values: Iterable, field_name: str) -> list[Diagnostic]:  # type: ignore[type-arg]
    out: list[Diagnostic] = []
    for v in values:
        kind = v.type.WhichOneof("value") if v.HasField("type") else None
        if kind is None:
            out.append(
                diag(
                    "G008",
                    f"Main-graph {field_name} '{v.name}' has no type.",
                    path,
                    value=v.name,
                    field=field_name,
                )
            )
            continue
        if not _has_rank(v.type):
            out.append(
                diag(
                    "G009",
                    f"Main-graph {field_name} '{v.name}' has no shape, so its rank is unknown.",
                    path,
                    value=v.name,
                    field=field_name,
                )
            )
    return out


def _has_rank(tp: TypeProto) -> bool:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return tp.tensor_type.HasField("shape")
    if kind == "sparse_tensor_type":
        return tp.sparse_tensor_type.HasField("shape")
    # Sequences, maps and optionals carry their element's shape, which may be unknown.
    return True


def undefined_input(graph_path: str, node_label: str, name: str, slot: int) -> Diagnostic:
    """G004 for input #slot of a node using a name nothing defines; the quick check
    (`check.quick`) reports the same words so the full run replaces it unseen."""
    return diag(
        "G004",
        f"Input #{slot} '{name}' of node '{node_label}' is not defined in this graph or any outer graph.",
        graph_path,
        node=node_label,
        value=name,
        field=f"input[{slot}]",
    )


# -- per value name ------------------------------------------------------------------------
def name_rules(ctx: CheckContext, scope: GraphScope, names: Iterable[str]) -> NameDiags:
    """G001 single assignment, G002 order, G004 undefined uses."""
    out: NameDiags = {}
    path = scope.path
    consumers_all = scope.consumers
    implicit = ctx.implicit_consumers(scope)
    label = scope.node_label
    for name in names:
        if not name:
            continue
        defs = scope.definitions_of(name)
        found: list[Diagnostic] = []
        if not defs:
            if scope.parent is None or scope.parent.lookup(name) is None:
                for ni, ii in consumers_all.get(name, ()):
                    found.append(undefined_input(path, label(ni), name, ii))
                for ni in implicit.get(name, ()):
                    found.append(
                        diag(
                            "G004",
                            f"A graph nested in node '{label(ni)}' uses '{name}', which is defined nowhere in scope.",
                            path,
                            node=label(ni),
                            value=name,
                        )
                    )
            if found:
                out[name] = found
            continue
        if len(defs) > 1:
            kinds = sorted(d.kind for d in defs)
            # An input may share its name with an initializer: the initializer is its default.
            if not (
                len(defs) == 2
                and kinds in (["initializer", "input"], ["input", "sparse_initializer"])
            ):
                where = ", ".join(_def_text(scope, d) for d in defs)
                first_node = next((d.index for d in defs if d.kind == "node_output"), None)
                found.append(
                    diag(
                        "G001",
                        f"'{name}' is defined {len(defs)} times in this graph ({where}).",
                        path,
                        node=label(first_node) if first_node is not None else None,
                        value=name,
                    )
                )
        prod = scope.producer.get(name)
        if prod is not None and all(d.kind == "node_output" for d in defs):
            pi = prod[0]
            late = sorted(
                {ni for ni, _ in consumers_all.get(name, ()) if ni <= pi}
                | {ni for ni in implicit.get(name, ()) if ni <= pi}
            )
            for ni in late:
                what = "uses its own output" if ni == pi else "uses"
                msg = (
                    f"Node '{label(ni)}' {what} '{name}'"
                    + ("" if ni == pi else f" before node '{label(pi)}' produces it")
                    + "."
                )
                found.append(diag("G002", msg, path, node=label(ni), value=name))
        if found:
            out[name] = found
    return out


def _def_text(scope: GraphScope, d: object) -> str:
    kind = getattr(d, "kind", "")
    index = getattr(d, "index", 0)
    if kind == "node_output":
        return f"output of node '{scope.node_label(index)}'"
    return f"{kind.replace('_', ' ')} #{index}"


# -- after the name rules: cycles ----------------------------------------------------------
def cycle_rules(ctx: CheckContext, scope: GraphScope) -> list[Diagnostic]:
    """G003: strongly connected components of more than one node (or a self loop).  Only
    called when G002 found a use before definition, since a cycle implies one."""
    nodes = scope.nodes
    n = len(nodes)
    implicit = ctx.implicit_consumers(scope)
    succ: list[list[int]] = [[] for _ in range(n)]
    for name, (pi, _) in scope.producer.items():
        for ci, _ in scope.consumers.get(name, ()):
            succ[pi].append(ci)
        for ci in implicit.get(name, ()):
            succ[pi].append(ci)
    comps = _tarjan(succ)
    out: list[Diagnostic] = []
    for comp in comps:
        if len(comp) == 1 and comp[0] not in succ[comp[0]]:
            continue
        comp.sort()
        labels = [scope.node_label(i) for i in comp]
        shown = ", ".join(f"'{x}'" for x in labels[:6]) + (", ..." if len(labels) > 6 else "")
        out.append(
            diag(
                "G003",
                f"Nodes {shown} depend on each other in a cycle.",
                scope.path,
                node=labels[0],
            )
        )
    return out


def _tarjan(succ: list[list[int]]) -> list[list[int]]:
    n = len(succ)
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    comps: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] != -1:
            continue
        work = [(root, 0)]
        while work:
            v, pos = work.pop()
            if pos == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack[v] = True
            recurse = False
            edges = succ[v]
            while pos < len(edges):
                w = edges[pos]
                pos += 1
                if index[w] == -1:
                    work.append((v, pos))
                    work.append((w, 0))
                    recurse = True
                    break
                if on_stack[w]:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp.append(w)
                    if w == v:
                        break
                comps.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return comps
