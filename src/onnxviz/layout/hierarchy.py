"""Hierarchical layout: groups that expand and collapse, laid out one level at a time.

Every container (the top level and each expanded group) is laid out on its own by the
flat pipeline, with its direct children as boxes: nodes at their size, collapsed groups
at their collapsed size, expanded groups at the size of their own layout plus padding.
An edge belongs to the lowest common container of its ends and connects the two children
of that container that hold them ("lifted").  Consequences:

* only expanded groups are laid out; the first view of a large model is one small layout,
  and the session prepares only the top level for it (the children of every group and
  the lifting of edges below the top level are built when a group is first opened);
* expanding or collapsing a group invalidates only it and its ancestors;
* layouts are cached by structure (child sizes, port counts and local edges), so the
  forty identical decoder layers of a transformer are laid out once;
* a group with more than ``max_group_children`` children is split into sections
  (synthetic groups ``<group>#<k>``) in the order of the request's nodes.

The whole tree is handled with index arrays; the per-edge lifting to the common
container is vectorised (one pass per nesting level), and so is the joining of routes
through open groups.

Edges that enter or leave an open group are routed inside it: the group's own layout
gets zero-size terminals pinned to its first rank (one per child input fed from outside)
and last rank (one per child output used outside), and the drawn route joins the outer
route at the group border to the inner route from the terminal.  Terminals depend only
on the group's structure, so identical layers still share one layout.
"""

from __future__ import annotations

import dataclasses
import time
from operator import attrgetter
from typing import cast

import numpy as np

from .api import (
    CancelCheck,
    LayoutCancelled,
    LayoutError,
    LayoutGroup,
    LayoutRequest,
    LayoutResult,
    NodeTable,
)
from .compute import RequestArrays
from .flat import FlatLayout, layout_arrays
from .session_view import ROOT, SessionView

BELOW_TOP = -3  # an edge inside one top-level group, not lifted yet (see `_lift_below_top`)

_get_parent = attrgetter("parent")
_get_width = attrgetter("collapsed_width")
_get_height = attrgetter("collapsed_height")


@dataclasses.dataclass
class _Container:
    """A container's children and the lifted edges it lays out (deduplicated)."""

    children: np.ndarray  # entity ids, in drawing-input order
    edge_a: np.ndarray  # local child indexes (terminals follow the children)
    edge_b: np.ndarray
    edge_sp: np.ndarray
    edge_tp: np.ndarray
    n_entries: int = 0  # terminals on the top rank for edges entering the group
    n_exits: int = 0  # terminals on the bottom rank for edges leaving it


class LayoutSession(SessionView):
    """Keeps per-group layouts so expanding or collapsing re-lays out only what changed.

    ``expanded``: ids of the groups shown open (None: all).  Group ids are the caller's;
    sections created for over-full groups get ids ``"<group id>#<k>"`` (top level:
    ``"#<k>"``).  Not thread-safe: use one session per worker.
    """

    def __init__(
        self,
        request: LayoutRequest,
        expanded: frozenset[str] | set[str] | tuple[str, ...] | None = None,
        cancel: CancelCheck | None = None,
    ) -> None:
        self.request = request
        self.cancel = cancel
        self.cache_hits = 0
        self.layouts_computed = 0
        self._arrays = RequestArrays(request)
        self._build_tree(request)
        self._lift_edges()
        self._layout_cache: dict[bytes, FlatLayout] = {}
        self._layouts: dict[int, FlatLayout] = {}
        self._containers: dict[int, _Container] = {}
        n, n_ent = self._n, self._n_ent
        self._base_size = np.zeros((n_ent, 2))
        self._base_size[:n, 0] = self._arrays.width
        self._base_size[:n, 1] = self._arrays.height
        self._base_size[n:, 0] = self._collapsed_w
        self._base_size[n:, 1] = self._collapsed_h
        self._open_size = self._base_size[n:].copy()  # groups: size when shown open
        ones = np.ones(n_ent - n, dtype=np.int64)
        self._n_in_ent = np.concatenate([self._arrays.n_in, ones])  # groups: one port
        self._n_out_ent = np.concatenate([self._arrays.n_out, ones])
        self._open = np.zeros(n_ent, dtype=bool)
        if expanded is None:
            self._open[n:] = True
        else:
            for g in expanded:
                self._open[self._group_entity(g)] = True

    # ----------------------------------------------------------------- tree building
    # Only what the first view needs is built here: parents, depths, first-node order
    # keys, sections and the top-level lift of every edge.  The child index of every
    # container and the lift below the top level are built when a group is first opened.
    def _build_tree(self, request: LayoutRequest) -> None:
        arrays = self._arrays
        n = len(arrays.ids)
        self._n = n
        groups: list[LayoutGroup] = list(request.groups)
        self._groups = groups
        group_ids = arrays.group_ids
        # Group id -> entity, and None -> ROOT while the parents are resolved.
        lookup: dict[str | None, int] = {None: ROOT}
        lookup.update(zip(group_ids, range(n, n + len(groups))))
        if len(lookup) != len(groups) + 1:
            seen: set[str] = set()
            dup = next(i for i in group_ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
            raise LayoutError(f"group id {dup!r} is used twice")
        try:
            group_parent = np.fromiter(
                map(lookup.__getitem__, map(_get_parent, groups)),
                dtype=np.int64,
                count=len(groups),
            )
        except KeyError as exc:
            bad = next(g for g in groups if g.parent == exc.args[0])
            raise LayoutError(f"group {bad.id!r} names unknown parent {exc.args[0]!r}") from None
        nodes = request.nodes
        if isinstance(nodes, NodeTable):
            pi = nodes.parent_index
            if len(pi) and (pi.max() >= len(groups) or pi.min() < -1):
                raise LayoutError("node parent index out of range")
            node_parent = np.where(pi >= 0, pi + n, ROOT)
        else:
            try:
                node_parent = np.fromiter(
                    map(lookup.__getitem__, map(_get_parent, nodes)), dtype=np.int64, count=n
                )
            except KeyError as exc:
                raise LayoutError(f"a node names unknown group {exc.args[0]!r}") from None
        del lookup[None]
        gindex = cast(dict[str, int], lookup)
        par = np.concatenate([node_parent, group_parent])
        self._node_ids: list[str] = arrays.ids
        self._group_names: list[str] = group_ids  # sections are added below
        lr = request.direction == "LR"
        cw = np.fromiter(map(_get_height if lr else _get_width, groups), float, len(groups))
        ch = np.fromiter(map(_get_width if lr else _get_height, groups), float, len(groups))
        group_depth = self._group_depths(par, n)
        first = self._first_nodes(par, group_depth, n)
        par, first, cw, ch, new_ids = self._split_sections(par, first, cw, ch, request, gindex)
        self._group_names = group_ids + new_ids
        gindex.update(zip(new_ids, range(n + len(groups), len(par))))
        self._gindex = gindex
        self._n_ent = len(par)
        self._parent = par
        self._group_depth = self._group_depths(par, n) if new_ids else group_depth
        self._first = first
        self._collapsed_w, self._collapsed_h = cw, ch  # per group, sections included
        # Children of every container (top level = ROOT), ordered by first node: built
        # on first use beyond the top level (see `_kids`).
        self._root_kids: np.ndarray | None = None
        self._child_order: np.ndarray | None = None
        self._kid_start: list[int] = []
        self._group_levels: list[np.ndarray] | None = None

    def _kids(self, c: int) -> np.ndarray:
        if self._child_order is None:
            if c == ROOT:  # the first view: no need to sort every container's children
                if self._root_kids is None:
                    top = np.flatnonzero(self._parent == ROOT)
                    self._root_kids = top[np.argsort(self._first[top], kind="stable")]
                return self._root_kids
            self._index_children()
        assert self._child_order is not None
        return self._child_order[self._kid_start[c + 1] : self._kid_start[c + 2]]

    def _index_children(self) -> None:
        """Children of every container in one sorted array (by container, first node)."""
        if self._child_order is not None:
            return
        par = self._parent
        self._child_order = np.lexsort((self._first, par))
        counts = np.bincount(par + 1, minlength=self._n_ent + 1)
        start = np.zeros(self._n_ent + 2, dtype=np.int64)
        np.cumsum(counts, out=start[1:])
        self._kid_start = start.tolist()

    def _name(self, e: int) -> str:
        """The id of a node or group entity."""
        return self._node_ids[e] if e < self._n else self._group_names[e - self._n]

    def _names(self, entities: np.ndarray) -> list[str]:
        nodes, groups, n = self._node_ids, self._group_names, self._n
        return [nodes[e] if e < n else groups[e - n] for e in entities.tolist()]

    def _label(self, g: int) -> str:
        if g < self._n + len(self._groups):
            grp = self._groups[g - self._n]
            return grp.label or grp.id
        return "section " + self._name(g).rsplit("#", 1)[-1]

    @staticmethod
    def _group_depths(par: np.ndarray, n: int) -> np.ndarray:
        """Depth of every group (top level 0; a node is one deeper than its group);
        LayoutError on a parent cycle."""
        group_par = par[n:]
        depth = np.zeros(len(group_par), dtype=np.int64)
        cur = group_par.copy()
        for _ in range(len(group_par) + 1):
            live = np.flatnonzero(cur >= 0)
            if not len(live):
                return depth
            depth[live] += 1
            cur[live] = par[cur[live]]
        raise LayoutError("group parents form a cycle")

    @staticmethod
    def _first_nodes(par: np.ndarray, group_depth: np.ndarray, n: int) -> np.ndarray:
        """Order key of every entity: its first node in request order (groups without
        nodes: the largest int64)."""
        first = np.full(len(par), np.iinfo(np.int64).max, dtype=np.int64)
        first[:n] = np.arange(n)
        inside = np.flatnonzero(par[:n] >= 0)
        np.minimum.at(first, par[inside], inside)
        for level in range(int(group_depth.max(initial=0)), 0, -1):
            sel = np.flatnonzero(group_depth == level) + n
            np.minimum.at(first, par[sel], first[sel])
        return first

    def _split_sections(
        self,
        par: np.ndarray,
        first: np.ndarray,
        cw: np.ndarray,
        ch: np.ndarray,
        request: LayoutRequest,
        group_ids: dict[str, int],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """Give over-full containers sections of at most ``max_group_children`` children
        each, in first-node order, nesting sections until every container fits."""
        limit = max(2, request.max_group_children)
        new_ids: list[str] = []
        counts = np.bincount(par + 1, minlength=len(par) + 1)
        todo = (np.flatnonzero(counts > limit) - 1).tolist()
        if not todo:
            return par, first, cw, ch, new_ids
        par = par.copy()
        taken: set[str] = set()  # section names so far (group ids are in ``group_ids``)
        sec_w, sec_h = (float(cw[0]), float(ch[0])) if len(cw) else (160.0, 40.0)
        new_par: list[int] = []
        new_first: list[int] = []
        # Children of the over-full containers only, by (container, first node).
        over_full = counts > limit
        order = np.flatnonzero(over_full[par + 1])
        order = order[np.lexsort((first[order], par[order]))]
        sorted_par = par[order]
        base_count = len(par)
        override: dict[int, np.ndarray] = {}
        levels: dict[int, int] = {}
        while todo:
            container = todo.pop()
            level = levels.get(container, 0)
            if container in override:  # a further level: the sections made last round
                kids = override.pop(container)
            else:
                lo = np.searchsorted(sorted_par, container, side="left")
                hi = np.searchsorted(sorted_par, container, side="right")
                kids = order[lo:hi]
            base = "" if container == ROOT else self._name(container)
            made = []
            for k in range(0, len(kids), limit):
                sid = base_count + len(new_par)
                name = f"{base}#{k // limit}" if level == 0 else f"{base}#{level}.{k // limit}"
                while name in taken or name in group_ids:
                    name += "#"
                taken.add(name)
                new_ids.append(name)
                chunk = kids[k : k + limit]
                for e in chunk[chunk >= base_count].tolist():
                    new_par[e - base_count] = sid
                old = chunk[chunk < base_count]
                par[old] = sid
                first_of = (
                    int(first[chunk[0]])
                    if chunk[0] < base_count
                    else new_first[int(chunk[0]) - base_count]
                )
                new_par.append(container)
                new_first.append(first_of)
                made.append(sid)
            if len(made) > limit:
                # Too many sections: group the sections themselves into sections.
                override[container] = np.asarray(made, dtype=np.int64)
                levels[container] = level + 1
                todo.append(container)
        par = np.concatenate([par, np.asarray(new_par, dtype=np.int64)])
        first = np.concatenate([first, np.asarray(new_first, dtype=np.int64)])
        cw = np.concatenate([cw, np.full(len(new_ids), sec_w)])
        ch = np.concatenate([ch, np.full(len(new_ids), sec_h)])
        return par, first, cw, ch, new_ids

    def _levels(self) -> list[np.ndarray]:
        """Group entities by depth, shallowest first."""
        if self._group_levels is None:
            n = self._n
            depth = self._group_depth
            order = np.argsort(depth, kind="stable")
            bounds = np.flatnonzero(np.diff(depth[order])) + 1
            self._group_levels = np.split(order + n, bounds) if len(order) else []
        return self._group_levels

    def _lift_edges(self) -> None:
        """Lift every edge to the top level: an edge between two top-level entities
        belongs to the top-level layout; the rest (inside one top-level group) are
        lifted further by `_lift_below_top` when a group is first opened."""
        arrays = self._arrays
        par = self._parent
        n = self._n
        top = np.arange(self._n_ent)  # top-level ancestor (or self) of every entity
        for level in self._levels()[1:]:
            top[level] = top[par[level]]
        node_par = par[:n]
        top[:n] = np.where(node_par >= 0, top[node_par], top[:n])
        ra, rb = top[arrays.src], top[arrays.dst]
        self._edge_container = np.where(ra == rb, BELOW_TOP, ROOT)
        self._edge_ra = ra
        self._edge_rb = rb
        self._lifted_all = False
        # Edges grouped by container (built with the full lift).
        self._edge_order = np.zeros(0, dtype=np.int64)
        self._edge_sorted_container = np.zeros(0, dtype=np.int64)
        self._edge_local = np.full(len(ra), -1, dtype=np.int64)
        self._scratch = np.full(self._n_ent, -1, dtype=np.int64)
        self._uniq_edges: np.ndarray | None = None
        self._pairs: dict[str, tuple[np.ndarray, ...]] | None = None
        self._uniq_cont_sorted = np.zeros(0, dtype=np.int64)

    def _lift_below_top(self) -> None:
        """Container and child representatives of the edges inside top-level groups,
        one pass per level; edges between siblings need none."""
        if self._lifted_all:
            return
        self._lifted_all = True
        arrays = self._arrays
        par, n = self._parent, self._n
        node_par = par[:n]
        node_depth = np.where(node_par >= 0, self._group_depth[np.maximum(node_par - n, 0)] + 1, 0)
        depth = np.concatenate([node_depth, self._group_depth])
        below = np.flatnonzero(self._edge_container == BELOW_TOP)
        ra, rb = arrays.src[below], arrays.dst[below]
        climb = np.flatnonzero(par[ra] != par[rb])
        a, b = ra[climb], rb[climb]
        for _ in range(int(depth.max(initial=0)) + 1):
            deeper_a = depth[a] > depth[b]
            a[deeper_a] = par[a[deeper_a]]
            deeper_b = depth[b] > depth[a]
            b[deeper_b] = par[b[deeper_b]]
        for _ in range(int(depth.max(initial=0)) + 1):
            differ = (par[a] != par[b]) & (a != b)
            if not differ.any():
                break
            a[differ] = par[a[differ]]
            b[differ] = par[b[differ]]
        ra[climb], rb[climb] = a, b
        # -2: a self loop, never drawn lifted
        self._edge_container[below] = np.where(ra == rb, -2, par[ra])
        self._edge_ra[below] = ra
        self._edge_rb[below] = rb
        container = self._edge_container
        self._edge_order = np.argsort(container, kind="stable")
        self._edge_sorted_container = container[self._edge_order]

    def _edge_rows(self, c: int) -> np.ndarray:
        """The request edges laid out in container ``c``, in request order."""
        if not self._lifted_all:
            if c == ROOT:  # already final: lifted to the top level at the start
                return np.flatnonzero(self._edge_container == ROOT)
            self._lift_below_top()
        lo = int(np.searchsorted(self._edge_sorted_container, c, side="left"))
        hi = int(np.searchsorted(self._edge_sorted_container, c, side="right"))
        return self._edge_order[lo:hi]

    # ------------------------------------------------------------------- queries
    def _group_entity(self, gid: str) -> int:
        try:
            return self._gindex[gid]
        except KeyError:
            raise LayoutError(f"unknown group {gid!r}") from None

    def group_ids(self) -> list[str]:
        """All group ids, sections included."""
        return list(self._group_names)

    def depth(self, gid: str) -> int:
        return int(self._group_depth[self._group_entity(gid) - self._n])

    def ancestors(self, gid: str) -> list[str]:
        """Enclosing groups, nearest first."""
        out = []
        p = int(self._parent[self._group_entity(gid)])
        while p != ROOT:
            out.append(self._name(p))
            p = int(self._parent[p])
        return out

    def children(self, gid: str | None) -> list[str]:
        """Ids of the direct children (nodes and groups) of a group (None: top level)."""
        key = ROOT if gid is None else self._group_entity(gid)
        return self._names(self._kids(key))

    def ancestors_of(self, item_id: str) -> list[str]:
        """Enclosing groups of a node or group, nearest first."""
        out = []
        p = self.parent_of(item_id)
        while p is not None:
            out.append(p)
            p = self.parent_of(p)
        return out

    def parent_of(self, item_id: str) -> str | None:
        e = self._arrays.index.get(item_id) if item_id not in self._gindex else None
        if e is None:
            e = self._group_entity(item_id)
        p = int(self._parent[e])
        return None if p == ROOT else self._name(p)

    @property
    def expanded(self) -> frozenset[str]:
        """Ids of the groups currently shown open."""
        return frozenset(self._names(np.flatnonzero(self._open)))

    # ------------------------------------------------------------------ changes
    def _invalidate_ancestors(self, e: int) -> None:
        p = int(self._parent[e])
        while True:
            self._layouts.pop(p, None)
            if p == ROOT:
                break
            p = int(self._parent[p])

    def expand(self, gid: str) -> None:
        """Show a group open; its layout and its ancestors' are redone on `result`."""
        e = self._group_entity(gid)
        if not self._open[e]:
            self._open[e] = True
            self._invalidate_ancestors(e)

    def collapse(self, gid: str) -> None:
        """Show a group as one box."""
        e = self._group_entity(gid)
        if self._open[e]:
            self._open[e] = False
            self._invalidate_ancestors(e)

    def set_expanded(self, gids: set[str] | frozenset[str] | list[str] | tuple[str, ...]) -> None:
        wanted = np.zeros(self._n_ent, dtype=bool)
        for g in gids:
            wanted[self._group_entity(g)] = True
        changed = np.flatnonzero(wanted != self._open)
        self._open = wanted
        if len(changed) > 64:
            self._layouts.clear()
        else:
            for e in changed.tolist():
                self._invalidate_ancestors(e)

    def expand_all(self) -> None:
        self.set_expanded(self.group_ids())

    def collapse_all(self) -> None:
        self.set_expanded(())

    # ------------------------------------------------------------------ layout
    def _visible_containers(self) -> list[int]:
        """Expanded containers whose ancestors are all expanded, parents first."""
        out = [ROOT]
        i = 0
        n = self._n
        while i < len(out):
            kids = self._kids(out[i])
            i += 1
            groups = kids[kids >= n]
            out.extend(groups[self._open[groups]].tolist())
        return out

    def _dedupe_edges(self) -> None:
        """Local layout edges of every container at once: (container, local a, local b,
        ports) deduplicated, each request edge mapped to its local edge."""
        self._lift_below_top()
        self._index_children()
        order = self._child_order
        assert order is not None
        par = self._parent[order]
        # Position of every entity among its siblings.
        starts = np.searchsorted(par, par, side="left")
        local_pos = np.empty(self._n_ent, dtype=np.int64)
        local_pos[order] = np.arange(len(order)) - starts
        ra, rb = self._edge_ra, self._edge_rb
        cont = self._edge_container
        a, b = local_pos[ra], local_pos[rb]
        sp = np.where(ra < self._n, self._arrays.src_port, 0)
        tp = np.where(rb < self._n, self._arrays.dst_port, 0)
        srt = np.lexsort((tp, sp, b, a, cont))
        cols = np.stack([cont, a, b, sp, tp], axis=1)[srt]
        new = np.ones(len(srt), dtype=bool)
        if len(srt):
            new[1:] = (cols[1:] != cols[:-1]).any(axis=1)
        uniq_id = np.cumsum(new) - 1
        uniq = cols[new]
        # Local edge index = rank of the unique row within its container.
        first_of_cont = np.searchsorted(uniq[:, 0], uniq[:, 0], side="left")
        local = np.arange(len(uniq)) - first_of_cont
        self._edge_local = np.empty(len(srt), dtype=np.int64)
        self._edge_local[srt] = local[uniq_id]
        self._uniq_edges = uniq
        self._uniq_cont_sorted = uniq[:, 0]
        if self.request.route_through_groups:
            self._global_terminals(local_pos)

    def _global_terminals(self, local_pos: np.ndarray) -> None:
        """Terminals of every group at once (the vectorised twin of `_add_terminals`):
        per side the unique (group, child, port) rows and each pair's route index."""
        if self._pairs is None:
            self._terminal_pairs()
        assert self._pairs is not None and self._uniq_edges is not None
        regular = np.bincount(self._uniq_edges[:, 0] + 2, minlength=self._n_ent + 2)
        self._terms: dict[str, np.ndarray] = {}
        n_in_per_group = np.zeros(self._n_ent + 2, dtype=np.int64)
        for side in ("in", "out"):
            g_all, e_all, c_all, _l, _bg, _gs, _be, _es, route = self._pairs[side]
            ports = self._arrays.dst_port if side == "in" else self._arrays.src_port
            port = np.where(c_all < self._n, ports[e_all], 0)
            local = local_pos[c_all]
            srt = np.lexsort((port, local, g_all))
            cols = np.stack([g_all, local, port], axis=1)[srt]
            new = np.ones(len(srt), dtype=bool)
            if len(srt):
                new[1:] = (cols[1:] != cols[:-1]).any(axis=1)
            uid = np.cumsum(new) - 1
            uniq = cols[new]
            first = np.searchsorted(uniq[:, 0], uniq[:, 0], side="left")
            t_local = np.arange(len(uniq)) - first
            g_of = uniq[:, 0]
            offset = regular[g_of + 2] + (n_in_per_group[g_of + 2] if side == "out" else 0)
            route[srt] = (offset + t_local)[uid]
            if side == "in":
                n_in_per_group = np.bincount(g_of + 2, minlength=self._n_ent + 2)
            self._terms[side] = uniq
        keys = np.arange(-2, self._n_ent)
        bounds = [
            np.searchsorted(self._terms[side][:, 0], keys, side=where)
            for side in ("in", "out")
            for where in ("left", "right")
        ]
        self._term_bounds = np.stack(bounds, axis=1).tolist()

    def _container(self, c: int) -> _Container:
        cont = self._containers.get(c)
        if cont is None:
            kids = self._kids(c)
            if self._uniq_edges is not None:
                lo = int(np.searchsorted(self._uniq_cont_sorted, c, side="left"))
                hi = int(np.searchsorted(self._uniq_cont_sorted, c, side="right"))
                rows = self._uniq_edges[lo:hi]
                cont = _Container(kids, rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4])
            else:
                cont = self._container_edges(c, kids)
            if c != ROOT and self.request.route_through_groups:
                if self._uniq_edges is not None:
                    cont = self._slice_terminals(c, cont)
                else:
                    cont = self._add_terminals(c, cont)
            self._containers[c] = cont
        return cont

    def _terminal_pairs(self) -> None:
        """For every edge and every group it enters (or leaves) below its common
        container: the group, the edge, the group's child holding the end, and the
        nesting level (0 = the group directly around the end)."""
        self._lift_below_top()
        par = self._parent
        cont = self._edge_container
        live = np.flatnonzero(cont != -2)
        self._pairs = {}
        for side, ends in (("in", self._arrays.dst), ("out", self._arrays.src)):
            cur, edge, top = ends[live], live, cont[live]
            gs, es, cs, lv = [], [], [], []
            level = 0
            while len(cur):
                g = par[cur]
                keep = (g != top) & (g >= 0)
                cur, edge, top, g = cur[keep], edge[keep], top[keep], g[keep]
                gs.append(g)
                es.append(edge)
                cs.append(cur)
                lv.append(np.full(len(g), level, dtype=np.int64))
                cur = g
                level += 1
            g_all = np.concatenate(gs) if gs else np.zeros(0, dtype=np.int64)
            e_all = np.concatenate(es) if es else np.zeros(0, dtype=np.int64)
            c_all = np.concatenate(cs) if cs else np.zeros(0, dtype=np.int64)
            l_all = np.concatenate(lv) if lv else np.zeros(0, dtype=np.int64)
            by_group = np.lexsort((e_all, g_all))
            by_edge = np.lexsort((-l_all, e_all))  # per edge, outermost group first
            self._pairs[side] = (
                g_all,
                e_all,
                c_all,
                l_all,
                by_group,
                g_all[by_group],
                by_edge,
                e_all[by_edge],
                np.full(len(g_all), -1, np.int64),
            )

    def _slice_terminals(self, c: int, cont: _Container) -> _Container:
        """`_add_terminals` from the precomputed global terminal table."""
        k = len(cont.children)
        lo_in, hi_in, lo_out, hi_out = self._term_bounds[c + 2]
        t_in, t_out = hi_in - lo_in, hi_out - lo_out
        if t_in == 0 and t_out == 0:
            return cont
        rows_in = self._terms["in"][lo_in:hi_in]
        rows_out = self._terms["out"][lo_out:hi_out]
        zeros_in = np.zeros(t_in, dtype=np.int64)
        zeros_out = np.zeros(t_out, dtype=np.int64)
        return _Container(
            cont.children,
            np.concatenate([cont.edge_a, k + np.arange(t_in), rows_out[:, 1]]),
            np.concatenate([cont.edge_b, rows_in[:, 1], k + t_in + np.arange(t_out)]),
            np.concatenate([cont.edge_sp, zeros_in, rows_out[:, 2]]),
            np.concatenate([cont.edge_tp, rows_in[:, 2], zeros_out]),
            t_in,
            t_out,
        )

    def _add_terminals(self, c: int, cont: _Container) -> _Container:
        """Entry terminals (top rank) and exit terminals (bottom rank) for the edges
        that cross the group's border, so they are routed inside the group's layout."""
        if self._pairs is None:
            self._terminal_pairs()
        assert self._pairs is not None
        kids = cont.children
        k = len(kids)
        scratch = self._scratch
        scratch[kids] = np.arange(k)
        n_regular = len(cont.edge_a)
        new_a, new_b, new_sp, new_tp = [cont.edge_a], [cont.edge_b], [cont.edge_sp], [cont.edge_tp]
        counts = {}
        base = n_regular
        for side in ("in", "out"):
            g_all, e_all, c_all, _l, by_group, g_sorted, _be, _es, route = self._pairs[side]
            lo = int(np.searchsorted(g_sorted, c, side="left"))
            hi = int(np.searchsorted(g_sorted, c, side="right"))
            rows = by_group[lo:hi]
            if len(rows) == 0:
                counts[side] = 0
                continue
            child = c_all[rows]
            local = scratch[child]
            ports = self._arrays.dst_port if side == "in" else self._arrays.src_port
            port = np.where(child < self._n, ports[e_all[rows]], 0)
            width = int(port.max()) + 1
            ukey, inverse = np.unique(local * width + port, return_inverse=True)
            inverse = inverse.reshape(-1)
            uniq = np.stack([ukey // width, ukey % width], axis=1)
            t = len(uniq)
            counts[side] = t
            route[rows] = base + inverse
            base += t
            first_terminal = k + (0 if side == "in" else counts["in"])
            terminal = first_terminal + np.arange(t)
            zeros = np.zeros(t, dtype=np.int64)
            if side == "in":
                new_a.append(terminal)
                new_b.append(uniq[:, 0])
                new_sp.append(zeros)
                new_tp.append(uniq[:, 1])
            else:
                new_a.append(uniq[:, 0])
                new_b.append(terminal)
                new_sp.append(uniq[:, 1])
                new_tp.append(zeros)
        return _Container(
            kids,
            np.concatenate(new_a),
            np.concatenate(new_b),
            np.concatenate(new_sp),
            np.concatenate(new_tp),
            counts.get("in", 0),
            counts.get("out", 0),
        )

    def _container_edges(self, c: int, kids: np.ndarray) -> _Container:
        """The same local edges as `_dedupe_edges`, for one container (used while few
        containers are open, so the first view never pays for all of them)."""
        rows = self._edge_rows(c)
        scratch = self._scratch
        scratch[kids] = np.arange(len(kids))
        ra, rb = self._edge_ra[rows], self._edge_rb[rows]
        a, b = scratch[ra], scratch[rb]
        sp = np.where(ra < self._n, self._arrays.src_port[rows], 0)
        tp = np.where(rb < self._n, self._arrays.dst_port[rows], 0)
        if len(rows) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return _Container(kids, empty, empty, empty, empty)
        keys = np.stack([a, b, sp, tp], axis=1)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        self._edge_local[rows] = inverse.reshape(-1)
        return _Container(kids, uniq[:, 0], uniq[:, 1], uniq[:, 2], uniq[:, 3])

    def _box_sizes(self, kids: np.ndarray) -> np.ndarray:
        """Current (width, height) of children: nodes, open or collapsed groups."""
        sizes = self._base_size[kids]
        is_open = self._open[kids]
        if is_open.any():
            sizes[is_open] = self._open_size[kids[is_open] - self._n]
        return sizes

    def _layout_container(self, c: int) -> FlatLayout:
        cont = self._container(c)
        kids = cont.children
        n_term = cont.n_entries + cont.n_exits
        sizes = np.concatenate([self._box_sizes(kids), np.zeros((n_term, 2))])
        is_node = kids < self._n
        ones = np.ones(n_term, dtype=np.int64)
        n_in = np.concatenate([np.where(is_node, np.maximum(self._n_in_ent[kids], 1), 1), ones])
        n_out = np.concatenate([np.where(is_node, np.maximum(self._n_out_ent[kids], 1), 1), ones])
        pin_top = np.zeros(len(sizes), dtype=bool)
        pin_bottom = np.zeros(len(sizes), dtype=bool)
        pin_top[len(kids) : len(kids) + cont.n_entries] = True
        pin_bottom[len(kids) + cont.n_entries :] = True
        signature = b"|".join(
            (
                np.round(sizes, 3).tobytes(),
                n_in.tobytes(),
                n_out.tobytes(),
                cont.edge_a.tobytes(),
                cont.edge_b.tobytes(),
                cont.edge_sp.tobytes(),
                cont.edge_tp.tobytes(),
                bytes((cont.n_entries % 251, cont.n_exits % 251)),
                str((cont.n_entries, cont.n_exits)).encode(),
            )
        )
        cached = self._layout_cache.get(signature)
        if cached is not None:
            self.cache_hits += 1
            return cached
        req = self.request
        lay = layout_arrays(
            sizes[:, 0],
            sizes[:, 1],
            cont.edge_a,
            cont.edge_b,
            cont.edge_sp,
            cont.edge_tp,
            n_in,
            n_out,
            req.spacing,
            req.long_edges,
            req.crossing_sweeps,
            self.cancel,
            pin_top=pin_top,
            pin_bottom=pin_bottom,
        )
        self.layouts_computed += 1
        self._layout_cache[signature] = lay
        return lay

    def _ensure_layouts(self) -> list[int]:
        visible = self._visible_containers()
        if len(visible) > 1:
            self._lift_below_top()
        sp = self.request.spacing
        missing = sum(1 for c in visible if c not in self._layouts)
        if missing > 64 and self._uniq_edges is None:
            self._dedupe_edges()  # many containers at once: one vectorised pass
        for c in reversed(visible):  # children before parents: sizes flow upwards
            lay = self._layouts.get(c)
            if lay is None:
                if self.cancel is not None and self.cancel():
                    raise LayoutCancelled()
                lay = self._layout_container(c)
                self._layouts[c] = lay
            if c != ROOT:
                self._open_size[c - self._n] = (
                    lay.width + 2 * sp.group_padding,
                    lay.height + 2 * sp.group_padding + sp.group_header,
                )
        return visible

    # ------------------------------------------------------------------ result
    def result(self) -> LayoutResult:
        """The current view: visible nodes, group frames/boxes, lifted edge routes."""
        t0 = time.perf_counter()
        visible = self._ensure_layouts()
        t1 = time.perf_counter()
        res = self._assemble(visible)
        res.timings = {"layout": t1 - t0, "assemble": time.perf_counter() - t1}
        return res
