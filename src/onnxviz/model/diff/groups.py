"""Fused and decomposed ops: groups of nodes on one side that do the work of a group on
the other (a Conv against Conv+BatchNormalization after folding, LayerNormalization
against ReduceMean/Sub/Pow/.../Add).

Where a matched consumer (or a graph output) reads, at the same slot, values that do
not correspond, walk back from both producers over nodes without a counterpart.  A
matched pair met on the way joins the group when the pair itself differs (the Conv
whose weights absorbed the BatchNormalization): an unchanged matched node next to an
inserted one stays matched, and the inserted node is simply added.  The two sets make
a group when the values that enter them (weights aside) correspond.
"""

from __future__ import annotations

from collections.abc import Callable, Container

from onnxviz.model.diff.index import GraphIndex


def _back_closure(g: GraphIndex, start: int, taken: tuple[Container[int], ...]) -> set[int]:
    """``start`` and the producers behind it, over nodes in none of ``taken``."""
    seen = {start}
    stack = [start]
    while stack:
        i = stack.pop()
        for name in g.nodes[i].input:
            p = g.producer.get(g.real(name))
            if p is not None and p[0] not in seen and not any(p[0] in t for t in taken):
                seen.add(p[0])
                stack.append(p[0])
    return seen


def _entering(g: GraphIndex, group: set[int]) -> set[str]:
    """Values read by the group that it does not make itself, weights left out."""
    made = {o for i in group for o in g.nodes[i].output}
    out: set[str] = set()
    for i in group:
        for name in g.nodes[i].input:
            real = g.real(name)
            if real and real not in made and g.is_weight(name) is None:
                p = g.producer.get(real)
                if p is not None and g.nodes[p[0]].op_type == "Constant":
                    continue
                out.add(real)
    return out


def find_groups(
    a: GraphIndex,
    b: GraphIndex,
    matches: dict[int, int],
    value_map: dict[str, str],
    pair_differs: Callable[[int, int], bool],
    wired: Container[int] = (),
) -> list[tuple[set[int], set[int]]]:
    """Groups (nodes of a, nodes of b).  Pairs absorbed into a group leave ``matches``;
    the group's output values are added to ``value_map``.  ``wired``: nodes of A
    whose every input maps to their counterpart's (no read of theirs can start a
    group)."""
    b_to_a = {ib: ia for ia, ib in matches.items()}
    used_a: set[int] = set()
    used_b: set[int] = set()
    groups: list[tuple[set[int], set[int]]] = []
    # Places where both sides read a value: matched consumers' slots and graph outputs.
    reads: list[tuple[str, str]] = []
    # In A's node order: the groups found can depend on the order of the reads, and
    # the order pairs were matched in depends on hash values (PYTHONHASHSEED).
    # (The pairs whose every value read corresponds start nothing: left out before
    # sorting, which then sorts a few ints instead of 100k pairs.)
    for ia in sorted([ia for ia in matches if ia not in wired]):
        ins_a, ins_b = a.nodes[ia].input, b.nodes[matches[ia]].input
        for xa, xb in zip(ins_a, ins_b):
            if xa and xb:
                reads.append((a.real(xa), b.real(xb)))
    reads += [(a.real(x), b.real(y)) for x, y in zip(a.output_names, b.output_names)]
    for ra, rb in reads:
        if value_map.get(ra) == rb:
            continue
        pa, pb = a.producer.get(ra), b.producer.get(rb)
        if pa is None or pb is None:
            continue
        sa, sb = pa[0], pb[0]
        if sa in used_a or sb in used_b:
            continue
        start_a = sa not in matches
        start_b = sb not in b_to_a
        if not start_a and not start_b:
            continue
        ga: set[int] = _back_closure(a, sa, (matches, used_a, a.qdq_nodes)) if start_a else set()
        gb: set[int] = _back_closure(b, sb, (b_to_a, used_b, b.qdq_nodes)) if start_b else set()
        # Matched pairs at the edge that absorbed the change (fused into the group).
        changed = True
        while changed:
            changed = False
            for side_g, side, _other, own_map in ((a, ga, gb, matches), (b, gb, ga, b_to_a)):
                for i in list(side) or ([sa] if side is ga else [sb]):
                    for name in side_g.nodes[i].input:
                        p = side_g.producer.get(side_g.real(name))
                        if p is None or p[0] not in own_map:
                            continue
                        j, k = p[0], own_map[p[0]]
                        ja, jb = (j, k) if side is ga else (k, j)
                        if ja in used_a or jb in used_b:
                            continue
                        if (ja in ga and jb in gb) or not pair_differs(ja, jb):
                            continue
                        ga.add(ja)
                        gb.add(jb)
                        changed = True
            if not start_a and sa in ga:
                start_a = True
            if not start_b and sb in gb:
                start_b = True
        if not ga or not gb or (len(ga) == 1 and len(gb) == 1):
            continue  # one node for one other: told as removed and added
        enter_a = {value_map.get(x, "\0" + x) for x in _entering(a, ga)}
        enter_b = _entering(b, gb)
        if enter_a != enter_b:
            continue
        for ia in ga:
            for name in a.nodes[ia].output:
                value_map.pop(name, None)  # inside the group: no counterpart
            if ia in matches:
                b_to_a.pop(matches.pop(ia), None)
        used_a |= ga
        used_b |= gb
        groups.append((ga, gb))
        value_map[ra] = rb
    return groups
