"""Graph paths as a reader wants them: ``Scan#0 > Loop#2 > If#4 (else)``.

A scope path (``main/body:#0/body:#2/else_branch:#4``) names each subgraph by its
attribute and its owner's label, which for unnamed nodes is a bare index.  Here each
step names the owner node by its name, or by op type and index when it has none, and
tells the branch of an If (``then``/``else``) or any attribute other than ``body``.
Every text a user reads names graphs this way: breadcrumbs, Properties, Find,
Diagnostics, the Outline and the edit commands' refusals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxviz.model.scopes import GraphScope
from onnxviz.model.text import as_text

if TYPE_CHECKING:  # document.py imports the edit commands, which name graphs with these
    from onnxviz.model.document import Document

_BRANCHES = {"then_branch": "then", "else_branch": "else", "body": ""}


def owner_label(label: str, op_type: str) -> str:
    """A node as a trail names it: its label when that is its name, else its op type
    and index (``Loop#2`` for the label ``#2``)."""
    return f"{op_type}{label}" if label.startswith("#") else label


def step_label(scope: GraphScope) -> str:
    """How one subgraph is named in a trail (its owner node and the attribute)."""
    parent, index, attr = scope.parent, scope.owner_node_index, scope.owner_attribute
    if parent is None or index is None:
        if scope.kind == "function":  # function:<domain>:<name>[:<overload>]
            _, domain, name, *overload = scope.path.split(":", 3)
            label = f"function {domain}.{name}" if domain else f"function {name}"
            return f"{label} ({overload[0]})" if overload else label
        return scope.path
    owner = owner_label(as_text(parent.node_label(index)), as_text(parent.nodes[index].op_type))
    branch = _BRANCHES.get(attr or "", attr or "")
    return f"{owner} ({branch})" if branch else owner


def graph_trail(scope: GraphScope) -> list[str]:
    """Labels from the outermost graph down to ``scope``."""
    chain = [scope, *scope.ancestors()]
    return [step_label(s) for s in reversed(chain)]


def readable_path(scope: GraphScope, separator: str = " > ") -> str:
    return separator.join(graph_trail(scope))


def readable_graph_path(doc: Document, path: str, separator: str = " > ") -> str:
    """`readable_path` of the graph at ``path`` in ``doc``; the path itself when the
    document has no such graph (a diagnostic about a graph an edit just removed)."""
    try:
        scope = doc.scope(path or "main")
    except KeyError:
        return path
    return readable_path(scope, separator)
