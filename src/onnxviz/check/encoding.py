"""String fields that are not UTF-8 (N008).

The IR spec says every string is UTF-8.  proto2 ``string`` fields can hold any bytes, and
protobuf then hands Python ``bytes`` instead of ``str``; the model still opens (its bytes
are kept and saved as they are), and each such field is reported here, located, with its
bytes shown escaped (`model.text.as_text`).  The checks are ``isinstance`` tests on the
fields a model carries many of (node and value names, op types, domains, doc strings),
cheap enough for every full run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from onnxviz.check.context import CheckContext
from onnxviz.check.registry import diag
from onnxviz.model.diagnostics import Diagnostic
from onnxviz.model.scopes import GraphScope
from onnxviz.model.text import as_text


def _bad(fields: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, bytes]]:
    for field, value in fields:
        if isinstance(value, bytes):
            yield field, value


def _message(where: str, field: str, raw: bytes) -> str:
    return f"{where}: {field} is not UTF-8: '{as_text(raw)}' (invalid bytes shown as \\xNN)."


def model_rules(ctx: CheckContext) -> list[Diagnostic]:
    m = ctx.model
    fields: list[tuple[str, Any]] = [
        ("producer_name", m.producer_name),
        ("producer_version", m.producer_version),
        ("domain", m.domain),
        ("doc_string", m.doc_string),
        ("graph.name", m.graph.name),
    ]
    for i, p in enumerate(m.metadata_props):
        fields += [(f"metadata_props[{i}].key", p.key), (f"metadata_props[{i}].value", p.value)]
    for i, imp in enumerate(m.opset_import):
        fields.append((f"opset_import[{i}].domain", imp.domain))
    for i, fn in enumerate(m.functions):
        fields += [(f"functions[{i}].name", fn.name), (f"functions[{i}].domain", fn.domain)]
    return [diag("N008", _message("The model", f, raw), field=f) for f, raw in _bad(fields)]


def scope_rules(ctx: CheckContext, scope: GraphScope) -> list[Diagnostic]:
    """Every N008 of one graph: its interface and initializer names, then each node."""
    out = entry_rules(ctx, scope)
    for i, node in enumerate(scope.nodes):
        if not _all_text(node):
            out.extend(node_rules(ctx, scope, i))
    return out


def _all_text(node: Any) -> bool:
    """Whether every string field of ``node`` came as ``str`` (the screen of a full run:
    ``str.join`` fails on a ``bytes`` element at C speed, where `node_rules`' Python walk
    over each field took 1.4 s of a 100k-node validation)."""
    try:
        "".join(node.input)
        "".join(node.output)
        "".join((node.name, node.op_type, node.domain, node.doc_string))
        for a in node.attribute:
            "".join((a.name,))
    except TypeError:
        return False
    return True


def entry_rules(ctx: CheckContext, scope: GraphScope) -> list[Diagnostic]:
    """N008 on a graph's inputs, outputs, value_info and initializer names."""
    out: list[Diagnostic] = []
    path = scope.path
    if scope.graph is None:
        return out
    g = scope.graph
    for kind, entries in (
        ("input", g.input),
        ("output", g.output),
        ("value_info", g.value_info),
    ):
        for vi in entries:
            if isinstance(vi.name, bytes):
                out.append(
                    diag(
                        "N008",
                        _message(f"A graph {kind}", "its name", vi.name),
                        path,
                        field=kind,
                    )
                )
    for t in g.initializer:
        if isinstance(t.name, bytes):
            out.append(
                diag(
                    "N008",
                    _message("An initializer", "its name", t.name),
                    path,
                    field="initializer",
                )
            )
    return out


def node_rules(ctx: CheckContext, scope: GraphScope, i: int) -> list[Diagnostic]:
    """N008 on one node's string fields (a re-check after a one-node edit runs only this
    for that node: the whole-graph walk costs ~0.6 s at 100k nodes)."""
    node = scope.nodes[i]
    fields = [("name", node.name), ("op_type", node.op_type), ("domain", node.domain)]
    fields += [(f"input[{k}]", n) for k, n in enumerate(node.input)]
    fields += [(f"output[{k}]", n) for k, n in enumerate(node.output)]
    fields += [(f"attribute[{k}].name", a.name) for k, a in enumerate(node.attribute)]
    fields.append(("doc_string", node.doc_string))
    out: list[Diagnostic] = []
    for field, raw in _bad(fields):
        label = as_text(scope.node_label(i))
        out.append(
            diag(
                "N008",
                _message(f"Node '{label}'", field, raw),
                scope.path,
                node=label,
                field=field,
            )
        )
    return out
