"""Function rules (F): unique identities, IR gating of the newer FunctionProto fields,
opset compatibility with the model, recursion.  Body order and SSA are the structure
rules, run on each function body as its own scope."""

from __future__ import annotations

from collections.abc import Iterator

from onnx import AttributeProto, FunctionProto, NodeProto

from onnxviz.check.context import CheckContext, FunctionKey, get_schema, norm_domain, opsets_of
from onnxviz.check.registry import diag
from onnxviz.model.diagnostics import Diagnostic
from onnxviz.model.scopes import GraphScope, function_path


def _all_nodes(nodes: object) -> Iterator[NodeProto]:
    stack = list(nodes)  # type: ignore[call-overload]
    while stack:
        node = stack.pop()
        yield node
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH or attr.HasField("g"):
                stack.extend(attr.g.node)
            for g in attr.graphs:
                stack.extend(g.node)


def _key(fn: FunctionProto) -> FunctionKey:
    return (norm_domain(fn.domain), fn.name, fn.overload)


def model_rules(ctx: CheckContext) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    ir = ctx.ir_version
    fns = list(ctx.model.functions)
    if fns and 0 < ir < 8:
        out.append(
            diag(
                "F009",
                f"The model has {len(fns)} local functions, which need IR version 8 (the model has {ir}).",
                field="functions",
            )
        )
    seen: set[FunctionKey] = set()
    for fn in fns:
        path = function_path(fn)
        key = _key(fn)
        if key in seen:
            shown = f"{fn.domain}:{fn.name}" + (f" overload '{fn.overload}'" if fn.overload else "")
            out.append(diag("F001", f"Function {shown} is defined more than once.", path))
        seen.add(key)
        if fn.overload and 0 < ir < 10:
            out.append(
                diag(
                    "F002",
                    f"Function '{fn.name}' has overload '{fn.overload}', which needs IR version 10 (the model has {ir}).",
                    path,
                    field="overload",
                )
            )
        if len(fn.attribute_proto) and 0 < ir < 9:
            out.append(
                diag(
                    "F003",
                    f"Function '{fn.name}' uses attribute_proto, which needs IR version 9 (the model has {ir}).",
                    path,
                    field="attribute_proto",
                )
            )
        if len(fn.value_info) and 0 < ir < 10:
            out.append(
                diag(
                    "F004",
                    f"Function '{fn.name}' uses value_info, which needs IR version 10 (the model has {ir}).",
                    path,
                    field="value_info",
                )
            )
        if len(fn.metadata_props) and 0 < ir < 10:
            out.append(
                diag(
                    "F005",
                    f"Function '{fn.name}' has metadata_props, which need IR version 10 (the model has {ir}).",
                    path,
                    field="metadata_props",
                )
            )
        both = set(fn.attribute) & {a.name for a in fn.attribute_proto}
        for name in sorted(both):
            out.append(
                diag(
                    "F008",
                    f"Function '{fn.name}' declares attribute '{name}' in both attribute and attribute_proto.",
                    path,
                    attribute=name,
                )
            )
        out.extend(_opset_compat(ctx, fn, path))
    out.extend(_recursion(ctx))
    return out


def _opset_compat(ctx: CheckContext, fn: FunctionProto, path: str) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    own = opsets_of(fn.opset_import)
    clashes = {d: v for d, v in own.items() if d in ctx.model_opsets and ctx.model_opsets[d] != v}
    if not clashes:
        return out
    reported: set[tuple[str, str]] = set()
    for node in _all_nodes(fn.node):
        d = norm_domain(node.domain)
        if d not in clashes or (d, node.op_type) in reported:
            continue
        a = get_schema(d, node.op_type, clashes[d])
        b = get_schema(d, node.op_type, ctx.model_opsets[d])
        if a is not None and b is not None and a.since_version != b.since_version:
            reported.add((d, node.op_type))
            shown = d or "ai.onnx"
            out.append(
                diag(
                    "F006",
                    f"Function '{fn.name}' imports '{shown}' version {clashes[d]} and the model version "
                    f"{ctx.model_opsets[d]}: '{node.op_type}' means different operator versions "
                    f"({a.since_version} and {b.since_version}).",
                    path,
                    field="opset_import",
                )
            )
    return out


def _recursion(ctx: CheckContext) -> list[Diagnostic]:
    calls: dict[FunctionKey, set[FunctionKey]] = {}
    for fn in ctx.model.functions:
        targets: set[FunctionKey] = set()
        for node in _all_nodes(fn.node):
            k = (norm_domain(node.domain), node.op_type, node.overload)
            if k in ctx.functions:
                targets.add(k)
        calls.setdefault(_key(fn), set()).update(targets)
    # A function is recursive when it can reach itself.
    out: list[Diagnostic] = []
    for start in calls:
        stack, seen = list(calls[start]), set()
        while stack:
            k = stack.pop()
            if k == start:
                fn = ctx.functions[start]
                out.append(
                    diag(
                        "F007",
                        f"Function '{fn.name}' calls itself, directly or through other functions.",
                        function_path(fn),
                    )
                )
                break
            if k in seen:
                continue
            seen.add(k)
            stack.extend(calls.get(k, ()))
    return out


def node_rules(ctx: CheckContext, scope: GraphScope, index: int) -> list[Diagnostic]:
    """IR gating of the per-node overload field."""
    node = scope.nodes[index]
    if node.overload and 0 < ctx.ir_version < 10:
        label = scope.node_label(index)
        return [
            diag(
                "F002",
                f"Node '{label}' sets overload '{node.overload}', which needs IR version 10 (the model has {ctx.ir_version}).",
                scope.path,
                node=label,
                field="overload",
            )
        ]
    return []
