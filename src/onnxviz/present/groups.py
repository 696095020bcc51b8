"""Name-scope groups of one graph: `/encoder/layer.0/attn/MatMul` lives in the groups
`/encoder`, `/encoder/layer.0` and `/encoder/layer.0/attn`.

Groups that hold every node of the graph (a lone `/model` wrapper) are dropped, and so
are groups with fewer than two nodes: neither helps reading the graph.  A chain of
groups that each hold a single child group and no node of their own is kept as the
innermost one (its label shows the joined path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from onnx import NodeProto

from onnxviz.model.text import as_text


@dataclass
class ScopeGroup:
    prefix: str  # "/encoder/layer.0" (no trailing slash)
    parent: str | None  # prefix of the enclosing group, None at top level
    label: str  # what the box shows: the part of prefix below the parent
    children: list[str] = field(default_factory=list)  # child group prefixes
    nodes: list[int] = field(default_factory=list)  # node indexes directly inside
    size: int = 0  # nodes in the whole subtree


@dataclass
class GroupTree:
    groups: dict[str, ScopeGroup]
    node_group: list[str | None]  # innermost group of each node
    top: list[str]  # top-level group prefixes

    def chain(self, prefix: str | None) -> list[str]:
        """Outermost-first list of groups from the top level down to ``prefix``."""
        out: list[str] = []
        while prefix is not None:
            out.append(prefix)
            prefix = self.groups[prefix].parent
        out.reverse()
        return out


def _prefixes(scope: str) -> list[str]:
    """Every enclosing prefix of a scope string ("/a/b" -> ["/a", "/a/b"])."""
    out: list[str] = []
    pos = scope.find("/", 1)
    while pos != -1:
        if pos > 0 and scope[pos - 1] != "/":
            out.append(scope[:pos])
        pos = scope.find("/", pos + 1)
    if scope and scope[-1] != "/":
        out.append(scope)
    return [p for p in out if p.strip("/")]


def build_group_tree(nodes: Sequence[NodeProto]) -> GroupTree:
    names = [as_text(n.name) for n in nodes]  # a name that is not UTF-8 comes as bytes
    total = len(names)
    innermost: list[str | None] = [None] * total
    counts: dict[str, int] = {}
    parent_of: dict[str, str | None] = {}
    # Pass 1: count subtree sizes for every prefix.
    # Many nodes share a scope string: work per distinct scope, count per node.
    chains: list[list[str]] = []
    chain_of: dict[str, list[str]] = {}
    scope_count: dict[str, int] = {}
    for name in names:
        cut = name.rfind("/")
        scope = name[:cut] if cut > 0 else ""
        chain = chain_of.get(scope)
        if chain is None:
            chain = chain_of[scope] = _prefixes(scope) if scope else []
        chains.append(chain)
        scope_count[scope] = scope_count.get(scope, 0) + 1
    for scope, chain in chain_of.items():
        n = scope_count[scope]
        prev: str | None = None
        for p in chain:
            counts[p] = counts.get(p, 0) + n
            if p not in parent_of:
                parent_of[p] = prev
            prev = p
    kept = {p for p, c in counts.items() if 2 <= c < total}
    # Collapse single-child chains: a group whose only content is one child group
    # (same node count) is dropped in favour of the child.
    kids: dict[str, list[str]] = {}
    for p in kept:
        q = _kept_parent(p, parent_of, kept)
        if q is not None:
            kids.setdefault(q, []).append(p)
    for p, under in kids.items():
        if len(under) == 1 and counts[under[0]] == counts[p]:
            kept.discard(p)
    groups: dict[str, ScopeGroup] = {}
    for p in sorted(kept, key=lambda s: (s.count("/"), s)):
        parent = _kept_parent(p, parent_of, kept)
        label = p[len(parent) :].lstrip("/") if parent else p.lstrip("/")
        groups[p] = ScopeGroup(p, parent, label or p, size=counts[p])
    top: list[str] = []
    for p in groups:
        g = groups[p]
        if g.parent is None:
            top.append(p)
        else:
            groups[g.parent].children.append(p)
    # Labels below a dropped all-nodes wrapper ("/model") leave the wrapper out.
    wrappers = [p for p, c in counts.items() if c == total]
    root = max(wrappers, key=len) if wrappers else ""
    for g in groups.values():
        if g.parent is None and root and g.prefix.startswith(root + "/"):
            g.label = g.prefix[len(root) + 1 :]
    inner_of: dict[int, str | None] = {}
    for i, chain in enumerate(chains):
        key = id(chain)
        found = inner_of.get(key, "")
        if found == "":
            found = next((p for p in reversed(chain) if p in kept), None)
            inner_of[key] = found
        if found is not None:
            innermost[i] = found
            groups[found].nodes.append(i)
    return GroupTree(groups, innermost, top)


def _kept_parent(p: str, parent_of: dict[str, str | None], kept: set[str]) -> str | None:
    q = parent_of[p]
    while q is not None and q not in kept:
        q = parent_of[q]
    return q


def attach_constants(
    tree: GroupTree,
    nodes: Sequence[NodeProto],
    consumers: dict[str, list[tuple[int, int]]],
    initializers: set[str],
) -> int:
    """Move ungrouped constant-like nodes (no inputs but initializers: Constant, weight
    Identity/Cast chains of exporters) into the innermost group holding all their
    consumers, so a collapsed layer owns its weights.  Returns how many moved."""
    moved = 0
    groups = tree.groups
    for i, group in enumerate(tree.node_group):
        if group is not None:
            continue
        node = nodes[i]
        if any(x and x not in initializers for x in node.input):
            continue
        targets = {tree.node_group[c] for out in node.output for c, _ in consumers.get(out, ())}
        if not targets or None in targets:
            continue
        chains = [tree.chain(t) for t in targets]
        common: str | None = None
        for level in zip(*chains):
            if all(p == level[0] for p in level):
                common = level[0]
            else:
                break
        if common is None:
            continue
        tree.node_group[i] = common
        groups[common].nodes.append(i)
        for p in tree.chain(common):
            groups[p].size += 1
        moved += 1
    return moved
