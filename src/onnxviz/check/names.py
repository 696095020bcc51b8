"""Name and scope rules (N): shadowing, subgraph input/initializer clashes, duplicate node
names, identifiers, initializers outside the inputs in IR <= 3."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from onnxviz.check.context import CheckContext
from onnxviz.check.registry import diag
from onnxviz.model.diagnostics import Diagnostic
from onnxviz.model.scope_names import readable_path
from onnxviz.model.scopes import GraphScope
from onnxviz.model.text import as_text

NameDiags = dict[str, list[Diagnostic]]
C90_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_identifier(text: str) -> bool:
    # A name that is not UTF-8 comes as bytes: surely no identifier.
    return isinstance(text, str) and C90_IDENTIFIER.fullmatch(text) is not None


def scope_rules(ctx: CheckContext, scope: GraphScope) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    counts = _duplicate_node_names(scope)
    for name, count in counts.items():
        if count > 1:
            out.append(
                diag(
                    "N003",
                    f"{count} nodes share the name '{name}'.",
                    scope.path,
                    node=name,
                    field="name",
                )
            )
    g = scope.graph
    if scope.kind == "main" and g is not None and 0 < ctx.ir_version <= 3:
        inputs = {v.name for v in g.input}
        for t in g.initializer:
            if t.name not in inputs:
                out.append(
                    diag(
                        "N007",
                        f"Initializer '{t.name}' is not a graph input, which IR version {ctx.ir_version} requires.",
                        scope.path,
                        value=t.name,
                        field="initializer",
                    )
                )
    return out


def _duplicate_node_names(scope: GraphScope) -> Counter[str]:
    """Counts of node names used more than once.  Node labels are '#i' exactly for nodes
    whose name is empty or not unique, so only those nodes need to be counted."""
    nodes = scope.nodes
    if not len(nodes):
        return Counter()
    labels = scope.labels
    return Counter(nodes[i].name for i, lab in enumerate(labels) if lab[0] == "#" and nodes[i].name)


def name_rules(ctx: CheckContext, scope: GraphScope, names: Iterable[str]) -> NameDiags:
    """N001 shadowing, N002 subgraph input also an initializer."""
    out: NameDiags = {}
    path = scope.path
    ancestors = list(scope.ancestors())
    for name in names:
        if not name:
            continue
        found: list[Diagnostic] = []
        defs = scope.definitions_of(name) if ancestors else None
        if defs and ancestors:
            outer = next((a for a in ancestors if a.defines(name)), None)
            if outer is not None:
                d = defs[0]
                node = scope.node_label(d.index) if d.kind == "node_output" else None
                kind = d.kind.replace("_", " ")
                found.append(
                    diag(
                        "N001",
                        f"The {kind} '{name}' shadows the value of the same name in outer graph '{readable_path(outer)}'.",
                        path,
                        node=node,
                        value=name,
                    )
                )
            if ctx.ir_version >= 4 and len(defs) > 1:
                kinds = {d.kind for d in defs}
                if "input" in kinds and ("initializer" in kinds or "sparse_initializer" in kinds):
                    found.append(
                        diag(
                            "N002",
                            f"'{name}' is both an input and an initializer of this subgraph.",
                            path,
                            value=name,
                        )
                    )
        if found:
            out[name] = found
    return out


_NOT_IDENTIFIER_LINE = re.compile(r"^(?![A-Za-z_][A-Za-z0-9_]*$).+$", re.MULTILINE)


def non_identifiers(names: Iterable[str]) -> set[str]:
    """The names that are not C90 identifiers, found in one regex pass over all of them."""
    plain: list[str] = []
    out: set[str] = set()
    for n in names:
        if (
            isinstance(n, bytes) or "\n" in n or "\r" in n
        ):  # not UTF-8 (protobuf hands such strings over as bytes)
            out.add(n)
        elif n:
            plain.append(n)
    out.update(_NOT_IDENTIFIER_LINE.findall("\n".join(plain)))
    return out


class BadNames:
    """The non-identifier value names of one graph, with their smallest kept current so a
    rename updates the N004 summary without scanning every name."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self._min: str | None = None

    def __len__(self) -> int:
        return len(self.names)

    def add(self, name: str) -> None:
        self.names.add(name)
        if self._min is not None and name < self._min:
            self._min = name

    def update(self, names: Iterable[str]) -> None:
        for n in names:
            self.add(n)

    def discard(self, name: str) -> None:
        if name in self.names:
            self.names.discard(name)
            if name == self._min:
                self._min = None

    def example(self) -> str:
        if self._min is None:
            self._min = min(self.names, key=as_text)  # bytes: names that are not UTF-8
        return as_text(self._min)


def identifier_summary(path: str, bad: BadNames) -> list[Diagnostic]:
    """N004 once per graph: exporters name nearly every value '/scope/Op_output_0', so a
    diagnostic per value would drown everything else."""
    if not len(bad):
        return []
    example = bad.example()
    if len(bad) == 1:
        text = f"Value name '{example}' is not a C90 identifier."
    else:
        text = f"Value names '{example}' and {len(bad) - 1} more in this graph are not C90 identifiers."
    return [diag("N004", text, path, value=example)]
