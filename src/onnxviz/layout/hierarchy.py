"""Hierarchical layout: groups that expand and collapse, laid out one level at a time.

Every container (the top level and each expanded group) is laid out on its own by the
flat pipeline, with its direct children as boxes: nodes at their size, collapsed groups
at their collapsed size, expanded groups at the size of their own layout plus padding.
An edge belongs to the lowest common container of its ends and connects the two children
of that container that hold them ("lifted").  Consequences:

* only expanded groups are laid out; the first view of a large model is one small layout;
* expanding or collapsing a group invalidates only it and its ancestors;
* layouts are cached by structure (child sizes, port counts and local edges), so the
  forty identical decoder layers of a transformer are laid out once;
* a group with more than ``max_group_children`` children is split into sections
  (synthetic groups ``<group>#<k>``) in the order of the request's nodes.

The whole tree is handled with index arrays; the per-edge lifting to the common
container is vectorised (one pass per nesting level).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from .api import (
    CancelCheck,
    EdgeKind,
    GroupBox,
    LayoutError,
    LayoutGroup,
    LayoutRequest,
    LayoutResult,
    ProxyBox,
)
from .compute import RequestArrays
from .flat import ROUTE_PROXY, ROUTE_REVERSED, FlatLayout, layout_arrays
from .long_edges import port_offsets

ROOT = -1


@dataclasses.dataclass
class _Container:
    """A container's children and the lifted edges it lays out (deduplicated)."""

    children: np.ndarray  # entity ids, in drawing-input order
    edge_a: np.ndarray  # local child indexes
    edge_b: np.ndarray
    edge_sp: np.ndarray
    edge_tp: np.ndarray


class LayoutSession:
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
        if expanded is None:
            self._expanded = set(range(self._n, self._n_ent))
        else:
            self._expanded = {self._group_entity(g) for g in expanded}

    # ----------------------------------------------------------------- tree building
    def _build_tree(self, request: LayoutRequest) -> None:
        arrays = self._arrays
        n = len(arrays.ids)
        self._n = n
        groups: list[LayoutGroup] = list(request.groups)
        gindex: dict[str, int] = {}
        for i, g in enumerate(groups):
            if g.id in gindex or g.id in arrays.index:
                raise LayoutError(f"group id {g.id!r} is used twice")
            gindex[g.id] = n + i
        # Groups named only as a parent are created with default sizes.
        for nd in request.nodes:
            if nd.parent is not None and nd.parent not in gindex:
                raise LayoutError(f"node {nd.id!r} names unknown group {nd.parent!r}")
        for g in groups:
            if g.parent is not None and g.parent not in gindex:
                raise LayoutError(f"group {g.id!r} names unknown parent {g.parent!r}")
        parent = [gindex[nd.parent] if nd.parent is not None else ROOT for nd in request.nodes]
        parent += [gindex[g.parent] if g.parent is not None else ROOT for g in groups]
        self._ids: list[str] = list(arrays.ids) + [g.id for g in groups]
        self._labels: list[str] = [""] * n + [g.label or g.id for g in groups]
        lr = request.direction == "LR"
        sizes = [(g.collapsed_height, g.collapsed_width) if lr else
                 (g.collapsed_width, g.collapsed_height) for g in groups]
        cw = [s[0] for s in sizes]
        ch = [s[1] for s in sizes]
        par = np.asarray(parent, dtype=np.int64)
        depth = self._depths(par, n)
        # Order key: first node (in request order) inside each entity.
        first = np.full(len(par), np.iinfo(np.int64).max, dtype=np.int64)
        first[:n] = np.arange(n)
        for level in range(int(depth.max(initial=0)), -1, -1):
            sel = np.flatnonzero((depth == level) & (par >= 0))
            np.minimum.at(first, par[sel], first[sel])
        par, first, cw, ch, new_ids = self._split_sections(par, first, cw, ch, request)
        self._ids += new_ids
        self._labels += ["section " + i.rsplit("#", 1)[-1] for i in new_ids]
        self._n_ent = len(par)
        self._parent = par
        self._depth = self._depths(par, n)
        self._first = first
        self._cw = np.concatenate([np.zeros(n), np.asarray(cw, dtype=float)])
        self._ch = np.concatenate([np.zeros(n), np.asarray(ch, dtype=float)])
        self._gindex = {self._ids[e]: e for e in range(n, self._n_ent)}
        # Children of every container, ordered by first node.
        order = np.lexsort((first, par))
        sorted_par = par[order]
        keys = np.concatenate(([ROOT], np.arange(n, self._n_ent)))
        lo = np.searchsorted(sorted_par, keys, side="left")
        hi = np.searchsorted(sorted_par, keys, side="right")
        self._children = {int(k): order[a:b] for k, a, b in zip(keys.tolist(), lo, hi)}

    @staticmethod
    def _depths(par: np.ndarray, n: int) -> np.ndarray:
        """Depth of every entity (top level 0); LayoutError on a parent cycle."""
        depth = np.zeros(len(par), dtype=np.int64)
        cur = par.copy()
        for _ in range(len(par) - n + 1):
            live = cur >= 0
            if not live.any():
                return depth
            depth[live] += 1
            cur[live] = par[cur[live]]
        raise LayoutError("group parents form a cycle")

    def _split_sections(
        self,
        par: np.ndarray,
        first: np.ndarray,
        cw: list[float],
        ch: list[float],
        request: LayoutRequest,
    ) -> tuple[np.ndarray, np.ndarray, list[float], list[float], list[str]]:
        limit = max(2, request.max_group_children)
        par_list = par.tolist()
        first_list = first.tolist()
        new_ids: list[str] = []
        counts = np.bincount(par + 1, minlength=len(par) + 1)
        over = [c - 1 for c in np.flatnonzero(counts > limit).tolist()]
        todo = list(over)
        children_of: dict[int, list[int]] = {}
        if todo:
            members = np.flatnonzero(np.isin(par, todo))
            for e in members.tolist():
                children_of.setdefault(par_list[e], []).append(e)
        cw, ch = list(cw), list(ch)
        sec_w, sec_h = (cw[0], ch[0]) if cw else (160.0, 40.0)
        while todo:
            container = todo.pop()
            kids = sorted(children_of[container], key=lambda e: first_list[e])
            base = "" if container == ROOT else self._ids[container]
            sections = []
            for k in range(0, len(kids), limit):
                sid = len(par_list)
                name = f"{base}#{k // limit}"
                while name in self._ids or name in new_ids:
                    name += "#"
                new_ids.append(name)
                chunk = kids[k : k + limit]
                for e in chunk:
                    par_list[e] = sid
                par_list.append(container)
                first_list.append(first_list[chunk[0]])
                cw.append(sec_w)
                ch.append(sec_h)
                sections.append(sid)
            if len(sections) > limit:
                children_of[container] = sections
                todo.append(container)
        return (
            np.asarray(par_list, dtype=np.int64),
            np.asarray(first_list, dtype=np.int64),
            cw,
            ch,
            new_ids,
        )

    def _lift_edges(self) -> None:
        """Container and child representatives of every edge, one pass per level."""
        arrays = self._arrays
        par, depth = self._parent, self._depth
        ra = arrays.src.copy()
        rb = arrays.dst.copy()
        for _ in range(int(depth.max(initial=0)) + 1):
            deeper_a = depth[ra] > depth[rb]
            ra[deeper_a] = par[ra[deeper_a]]
            deeper_b = depth[rb] > depth[ra]
            rb[deeper_b] = par[rb[deeper_b]]
        for _ in range(int(depth.max(initial=0)) + 1):
            differ = (par[ra] != par[rb]) & (ra != rb)
            if not differ.any():
                break
            ra[differ] = par[ra[differ]]
            rb[differ] = par[rb[differ]]
        self._edge_container = np.where(ra == rb, -2, par[ra])  # -2: internal self loop
        self._edge_ra = ra
        self._edge_rb = rb
        is_node_a = ra < self._n
        is_node_b = rb < self._n
        self._edge_sp = np.where(is_node_a, arrays.src_port, 0)
        self._edge_tp = np.where(is_node_b, arrays.dst_port, 0)
        # Deduplicated local edges: one layout edge per (container, a, b, ports).
        keys = np.stack([self._edge_container, ra, rb, self._edge_sp, self._edge_tp], axis=1)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        self._local_edges = uniq
        self._edge_local = inverse.reshape(-1)
        conts = uniq[:, 0]
        self._local_lo = {int(c): int(i) for c, i in zip(*np.unique(conts, return_index=True))}
        self._local_count = {int(c): int(k) for c, k in zip(*np.unique(conts, return_counts=True))}

    # ------------------------------------------------------------------- queries
    def _group_entity(self, gid: str) -> int:
        try:
            return self._gindex[gid]
        except KeyError:
            raise LayoutError(f"unknown group {gid!r}") from None

    def group_ids(self) -> list[str]:
        """All group ids, sections included."""
        return self._ids[self._n :]

    def depth(self, gid: str) -> int:
        return int(self._depth[self._group_entity(gid)])

    def ancestors(self, gid: str) -> list[str]:
        """Enclosing groups, nearest first."""
        out = []
        p = int(self._parent[self._group_entity(gid)])
        while p != ROOT:
            out.append(self._ids[p])
            p = int(self._parent[p])
        return out

    def children(self, gid: str | None) -> list[str]:
        """Ids of the direct children (nodes and groups) of a group (None: top level)."""
        key = ROOT if gid is None else self._group_entity(gid)
        return [self._ids[e] for e in self._children.get(key, np.zeros(0, int)).tolist()]

    def parent_of(self, item_id: str) -> str | None:
        e = self._arrays.index.get(item_id)
        if e is None:
            e = self._group_entity(item_id)
        p = int(self._parent[e])
        return None if p == ROOT else self._ids[p]

    @property
    def expanded(self) -> frozenset[str]:
        return frozenset(self._ids[e] for e in self._expanded)

    # ------------------------------------------------------------------ changes
    def _invalidate_ancestors(self, e: int) -> None:
        p = int(self._parent[e])
        while True:
            self._layouts.pop(p, None)
            if p == ROOT:
                break
            p = int(self._parent[p])

    def expand(self, gid: str) -> None:
        e = self._group_entity(gid)
        if e not in self._expanded:
            self._expanded.add(e)
            self._invalidate_ancestors(e)

    def collapse(self, gid: str) -> None:
        e = self._group_entity(gid)
        if e in self._expanded:
            self._expanded.discard(e)
            self._invalidate_ancestors(e)

    def set_expanded(self, gids: set[str] | frozenset[str] | list[str]) -> None:
        wanted = {self._group_entity(g) for g in gids}
        for e in wanted ^ self._expanded:
            self._invalidate_ancestors(e)
        self._expanded = wanted

    def expand_all(self) -> None:
        self.set_expanded(set(self.group_ids()))

    def collapse_all(self) -> None:
        self.set_expanded(set())

    # ------------------------------------------------------------------ layout
    def _visible_containers(self) -> list[int]:
        """Expanded containers whose ancestors are all expanded, parents first."""
        out = [ROOT]
        i = 0
        while i < len(out):
            c = out[i]
            i += 1
            kids = self._children.get(c)
            if kids is None:
                continue
            groups = kids[kids >= self._n].tolist()
            out.extend(g for g in groups if g in self._expanded)
        return out

    def _container(self, c: int) -> _Container:
        cont = self._containers.get(c)
        if cont is None:
            kids = self._children.get(c, np.zeros(0, dtype=np.int64))
            lo = self._local_lo.get(c, 0)
            rows = self._local_edges[lo : lo + self._local_count.get(c, 0)]
            local = {int(e): i for i, e in enumerate(kids.tolist())}
            a = np.fromiter((local[v] for v in rows[:, 1].tolist()), np.int64, len(rows))
            b = np.fromiter((local[v] for v in rows[:, 2].tolist()), np.int64, len(rows))
            cont = _Container(kids, a, b, rows[:, 3].copy(), rows[:, 4].copy())
            self._containers[c] = cont
        return cont

    def _box_size(self, e: int) -> tuple[float, float]:
        if e < self._n:
            return float(self._arrays.width[e]), float(self._arrays.height[e])
        if e in self._expanded:
            lay = self._layouts[e]
            sp = self.request.spacing
            return (lay.width + 2 * sp.group_padding,
                    lay.height + 2 * sp.group_padding + sp.group_header)
        return float(self._cw[e]), float(self._ch[e])

    def _layout_container(self, c: int) -> FlatLayout:
        cont = self._container(c)
        kids = cont.children
        k = len(kids)
        sizes = np.asarray([self._box_size(e) for e in kids.tolist()], dtype=float).reshape(k, 2)
        is_node = kids < self._n
        n_in = np.ones(k, dtype=np.int64)
        n_out = np.ones(k, dtype=np.int64)
        node_kids = kids[is_node]
        n_in[is_node] = np.maximum(self._arrays.n_in[node_kids], 1)
        n_out[is_node] = np.maximum(self._arrays.n_out[node_kids], 1)
        signature = b"".join(
            (
                np.round(sizes, 3).tobytes(), n_in.tobytes(), n_out.tobytes(),
                cont.edge_a.tobytes(), b"|", cont.edge_b.tobytes(), b"|",
                cont.edge_sp.tobytes(), cont.edge_tp.tobytes(),
            )
        )
        cached = self._layout_cache.get(signature)
        if cached is not None:
            self.cache_hits += 1
            return cached
        req = self.request
        lay = layout_arrays(
            sizes[:, 0], sizes[:, 1], cont.edge_a, cont.edge_b, cont.edge_sp, cont.edge_tp,
            n_in, n_out, req.spacing, req.long_edges, req.crossing_sweeps, self.cancel,
        )
        self.layouts_computed += 1
        self._layout_cache[signature] = lay
        return lay

    def _ensure_layouts(self) -> list[int]:
        visible = self._visible_containers()
        for c in reversed(visible):  # children before parents: sizes flow upwards
            if c not in self._layouts:
                self._layouts[c] = self._layout_container(c)
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

    def _assemble(self, visible: list[int]) -> LayoutResult:
        sp = self.request.spacing
        n_ent = self._n_ent
        center = np.zeros((n_ent, 2))
        size = np.zeros((n_ent, 2))
        shown = np.zeros(n_ent, dtype=bool)
        origin: dict[int, tuple[float, float]] = {ROOT: (0.0, 0.0)}
        group_boxes: list[GroupBox] = []
        proxy_boxes: list[tuple[str, str, int, float, float, float, float]] = []
        route_parts: dict[int, tuple[FlatLayout, float, float]] = {}
        for c in visible:
            lay = self._layouts[c]
            ox, oy = origin[c]
            kids = self._children.get(c, np.zeros(0, dtype=np.int64))
            if len(kids) == 0:
                continue
            center[kids, 0] = lay.x + ox
            center[kids, 1] = lay.y + oy
            size[kids] = np.asarray([self._box_size(e) for e in kids.tolist()]).reshape(-1, 2)
            shown[kids] = True
            route_parts[c] = (lay, ox, oy)
            for e in kids[kids >= self._n].tolist():
                w, h = size[e]
                x0, y0 = center[e, 0] - w / 2, center[e, 1] - h / 2
                is_open = e in self._expanded
                if is_open:
                    origin[e] = (x0 + sp.group_padding, y0 + sp.group_padding + sp.group_header)
                par = int(self._parent[e])
                group_boxes.append(GroupBox(self._ids[e], x0, y0, w, h, is_open,
                                            self._labels[e], None if par == ROOT else
                                            self._ids[par]))
            for k in range(len(lay.proxy_source)):
                src_e = int(kids[lay.proxy_source[k]])
                port = int(lay.proxy_port[k])
                pid = self._proxy_id(c, src_e, port, int(lay.proxy_rank[k]))
                proxy_boxes.append((pid, self._ids[src_e], port, lay.proxy_x[k] + ox,
                                    lay.proxy_y[k] + oy, lay.proxy_w, lay.proxy_h))
        # Lowest shown entity holding each entity: itself if shown and not an open
        # group's inside, else its nearest shown ancestor.
        terminal = shown.copy()
        open_groups = np.fromiter(self._expanded, dtype=np.int64, count=len(self._expanded))
        terminal[open_groups[shown[open_groups]]] = False
        vis = np.where(terminal, np.arange(n_ent), -1)
        order = np.argsort(self._depth, kind="stable")
        for e_level in np.split(order, np.flatnonzero(np.diff(self._depth[order])) + 1):
            need = e_level[vis[e_level] < 0]
            par = self._parent[need]
            ok = par >= 0
            vis[need[ok]] = vis[par[ok]]
        routes_meta, offsets, points = self._routes(vis, center, size, route_parts, proxy_boxes)
        node_sel = np.flatnonzero(terminal[: self._n])
        xy = center[node_sel] - size[node_sel] / 2
        nsize = size[node_sel]
        root = self._layouts[ROOT]
        width, height = root.width, root.height
        if self.request.direction == "LR":
            xy = xy[:, ::-1].copy()
            nsize = nsize[:, ::-1].copy()
            points = points[:, ::-1].copy()
            group_boxes = [dataclasses.replace(g, x=g.y, y=g.x, width=g.height, height=g.width)
                           for g in group_boxes]
            width, height = height, width
        proxies = []
        for pid, sid, port, px, py, pw, ph in proxy_boxes:
            if self.request.direction == "LR":
                proxies.append(ProxyBox(pid, sid, port, py - ph / 2, px - pw / 2, ph, pw))
            else:
                proxies.append(ProxyBox(pid, sid, port, px - pw / 2, py - ph / 2, pw, ph))
        return LayoutResult(
            node_ids=[self._ids[i] for i in node_sel.tolist()],
            node_xy=xy,
            node_size=nsize,
            ranks=np.full(len(node_sel), -1, dtype=np.int64),
            route_meta=routes_meta,
            route_offsets=offsets,
            route_points=points,
            group_boxes=group_boxes,
            proxy_boxes=proxies,
            width=width,
            height=height,
            direction=self.request.direction,
            stats={"layouts_computed": self.layouts_computed, "cache_hits": self.cache_hits,
                   "visible_groups": len(group_boxes)},
        )

    def _routes(
        self,
        vis: np.ndarray,
        center: np.ndarray,
        size: np.ndarray,
        route_parts: dict[int, tuple[FlatLayout, float, float]],
        proxy_boxes: list[tuple[str, str, int, float, float, float, float]],
    ) -> tuple[list[tuple[str, str, int, int, EdgeKind, int, int, str | None]],
               np.ndarray, np.ndarray]:
        """One route per distinct visible connection; edges inside a collapsed group
        vanish, edges into an open group are extended from its border to the node."""
        arrays = self._arrays
        cont = self._edge_container
        vs = vis[arrays.src]
        vd = vis[arrays.dst]
        live = (vs != vd) & (vs >= 0) & (vd >= 0) & (cont != -2)
        live &= np.isin(cont, np.fromiter(route_parts, dtype=np.int64, count=len(route_parts)))
        idx = np.flatnonzero(live)
        sp_eff = np.where(vs[idx] < self._n, arrays.src_port[idx], 0)
        tp_eff = np.where(vd[idx] < self._n, arrays.dst_port[idx], 0)
        keys = np.stack([vs[idx], vd[idx], sp_eff, tp_eff], axis=1)
        if len(keys):
            _, first_idx, counts = np.unique(keys, axis=0, return_index=True, return_counts=True)
            order = np.argsort(first_idx, kind="stable")
            first_idx, counts = first_idx[order], counts[order]
        else:
            first_idx = counts = np.zeros(0, dtype=np.int64)
        chosen = idx[first_idx]
        # Local route of each chosen edge inside its container layout.
        local_base = np.asarray([self._local_lo.get(int(c), 0) for c in cont[chosen].tolist()],
                                dtype=np.int64).reshape(-1)
        local_route = self._edge_local[chosen] - local_base
        pieces: list[np.ndarray] = []
        meta: list[tuple[str, str, int, int, EdgeKind, int, int, str | None]] = []
        n = self._n
        ids = self._ids
        for e, c, lr, cnt in zip(chosen.tolist(), cont[chosen].tolist(), local_route.tolist(),
                                 counts.tolist()):
            lay, ox, oy = route_parts[c]
            lo, hi = int(lay.route_offsets[lr]), int(lay.route_offsets[lr + 1])
            pts = lay.route_points[lo:hi] + (ox, oy)
            kind_code = int(lay.route_kind[lr])
            a, b = int(vs[e]), int(vd[e])
            ra, rb = int(self._edge_ra[e]), int(self._edge_rb[e])
            sp = int(arrays.src_port[e]) if a < n else 0
            tp = int(arrays.dst_port[e]) if b < n else 0
            proxy = None
            kind: EdgeKind = "normal" if a < n and b < n else "lifted"
            if kind_code == ROUTE_PROXY:
                kind = "proxy"
                pidx = int(lay.route_proxy[lr])
                proxy = self._proxy_id(c, ra, int(lay.proxy_port[pidx]),
                                       int(lay.proxy_rank[pidx]))
            elif kind_code == ROUTE_REVERSED:
                kind = "reversed"
            if a != ra and kind_code != ROUTE_PROXY:
                pts = np.concatenate([self._bridge(a, sp, center, size, pts[0], True), pts[1:]])
            if b != rb:
                pts = np.concatenate([pts[:-1], self._bridge(b, tp, center, size, pts[-1], False)])
            pieces.append(pts)
            meta.append((ids[a], ids[b], sp, tp, kind, e, cnt, proxy))
        offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
        if pieces:
            np.cumsum([len(p) for p in pieces], out=offsets[1:])
            points = np.concatenate(pieces)
        else:
            points = np.zeros((0, 2))
        return meta, offsets, points

    def _proxy_id(self, container: int, source: int, port: int, rank: int) -> str:
        where = self._ids[container] if container != ROOT else ""
        return f"proxy:{self._ids[source]}:{port}@{where}:{rank}"

    def _bridge(self, e: int, port: int, center: np.ndarray, size: np.ndarray,
                border: np.ndarray, from_source: bool) -> np.ndarray:
        """A cubic from a shown entity's port to a point on an open group's border
        (source side) or back (target side)."""
        w, h = size[e]
        if e < self._n:
            count = self._arrays.n_out[e] if from_source else self._arrays.n_in[e]
            off = float(port_offsets(np.asarray(port), np.asarray(max(int(count), 1))))
        else:
            off = 0.0
        px = center[e, 0] + off * w
        if from_source:
            py = center[e, 1] + h / 2
            mid = (py + border[1]) / 2
            return np.asarray([(px, py), (px, mid), (border[0], mid), (border[0], border[1])])
        py = center[e, 1] - h / 2
        mid = (py + border[1]) / 2
        return np.asarray([(border[0], border[1]), (border[0], mid), (px, mid), (px, py)])
