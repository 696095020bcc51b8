"""Instant diagnostics for the names an edit touched (plain Python, no Qt).

The validator's incremental run re-checks everything an edit can affect, which on big
models takes longer than a keystroke should.  This check looks only at the touched
names and reports the commonest breakage, a use of a name nothing defines, in the same
words and location as the validator's G004 rule, so the full result replaces it without
a visible change."""

from __future__ import annotations

from onnxviz.model.changes import ChangeSet
from onnxviz.model.diagnostics import Diagnostic, Location, Severity
from onnxviz.model.document import Document


def quick_check(doc: Document, changes: ChangeSet) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    try:
        scopes = {s.path: s for s in doc.scopes()}
    except Exception:
        return out
    for path, name in sorted(changes.names):
        scope = scopes.get(path)
        if scope is None or not name or scope.lookup(name) is not None:
            continue
        for ni, k in scope.consumers.get(name, ()):
            label = scope.node_label(ni)
            out.append(
                Diagnostic(
                    "G004",
                    Severity.ERROR,
                    f"Input #{k} '{name}' of node '{label}' is not defined in this graph "
                    "or any outer graph.",
                    Location(path, label, name, None, f"input[{k}]"),
                )
            )
    return out
