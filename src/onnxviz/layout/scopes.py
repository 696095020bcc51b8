"""Groups from name scopes: ``/model/layers.7/self_attn/q_proj/MatMul`` belongs to the
group ``/model/layers.7/self_attn/q_proj`` inside ``/model/layers.7/self_attn`` and so on.

Plain strings in, `LayoutGroup`s out; the caller decides what a name is (an ONNX node
name, a namespace from metadata_props, a subgraph path).
"""

from __future__ import annotations

from collections.abc import Sequence

from .api import LayoutGroup


def groups_from_scopes(
    names: Sequence[str],
    separator: str = "/",
    collapse_single_child: bool = True,
    collapsed_size: tuple[float, float] = (160.0, 40.0),
) -> tuple[list[LayoutGroup], list[str | None]]:
    """Returns (groups, parent group id of each name).

    A name's scope is everything before its last separator.  A group that would hold a
    single child (a scope around one node, such as ``q_proj/MatMul``) is dropped and its
    child moves up, so collapsing never hides just one box behind another.
    Group ids are the scope paths; labels their last component.
    """
    parent_of_scope: dict[str, str | None] = {}
    node_parent: list[str | None] = []
    append = node_parent.append
    for name in names:
        scope = name.rpartition(separator)[0]
        if not scope:
            append(None)
            continue
        append(scope)
        # Register the chain of enclosing scopes once (most names share a known scope).
        while scope not in parent_of_scope:
            outer = scope.rpartition(separator)[0] or None
            parent_of_scope[scope] = outer
            if outer is None:
                break
            scope = outer
    if collapse_single_child:
        child_count: dict[str, int] = dict.fromkeys(parent_of_scope, 0)
        for p in node_parent:
            if p is not None:
                child_count[p] += 1
        for outer in parent_of_scope.values():
            if outer is not None:
                child_count[outer] += 1
        replacement = {
            scope: outer for scope, outer in parent_of_scope.items() if child_count[scope] == 1
        }
        resolved: dict[str | None, str | None] = {None: None}

        def resolve(s: str | None) -> str | None:
            hit = resolved.get(s, s)
            if hit is not s:
                return hit
            t = s
            while t is not None and t in replacement:  # chains of single-child scopes
                t = replacement[t]
            resolved[s] = t
            return t

        node_parent = [resolve(p) for p in node_parent]
        parent_of_scope = {
            s: resolve(p) for s, p in parent_of_scope.items() if s not in replacement
        }
    w, h = collapsed_size
    groups = [
        LayoutGroup(scope, outer, scope[scope.rfind(separator) + 1 :], w, h)
        for scope, outer in parent_of_scope.items()
    ]
    return groups, node_parent
