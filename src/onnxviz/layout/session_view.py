"""The drawn view of a LayoutSession: where every shown node, group box and proxy sits,
and one route per visible connection (mixed into `hierarchy.LayoutSession`).

Routes come from the placed containers' own layouts.  An edge whose end lies inside an
open group follows the route between the two children of the common container and
continues through the open groups' layouts (their entry and exit terminals); those
chains are joined from route pieces for all edges at once (`_ChainJoin`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .api import EdgeKind, GroupBox, LayoutRequest, LayoutResult, ProxyBox
from .compute import RequestArrays
from .flat import ROUTE_PROXY, ROUTE_REVERSED, FlatLayout
from .long_edges import port_offsets

ROOT = -1  # the top-level container


class SessionView:
    """Assembly of a session's result from its container layouts.  The state it reads
    is LayoutSession's (declared here for the type checker)."""

    request: LayoutRequest
    layouts_computed: int
    cache_hits: int
    _arrays: RequestArrays
    _n: int
    _n_ent: int
    _parent: np.ndarray
    _open: np.ndarray
    _layouts: dict[int, FlatLayout]
    _edge_container: np.ndarray
    _edge_local: np.ndarray
    _edge_ra: np.ndarray
    _edge_rb: np.ndarray
    _pairs: dict[str, tuple[np.ndarray, ...]] | None
    _n_in_ent: np.ndarray
    _n_out_ent: np.ndarray

    def _kids(self, c: int) -> np.ndarray:
        raise NotImplementedError

    def _box_sizes(self, kids: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _name(self, e: int) -> str:
        raise NotImplementedError

    def _names(self, entities: np.ndarray) -> list[str]:
        raise NotImplementedError

    def _label(self, g: int) -> str:
        raise NotImplementedError

    def _levels(self) -> list[np.ndarray]:
        raise NotImplementedError

    def _edge_rows(self, c: int) -> np.ndarray:
        raise NotImplementedError

    def _assemble(self, visible: list[int]) -> LayoutResult:
        sp = self.request.spacing
        n, n_ent = self._n, self._n_ent
        center = np.zeros((n_ent, 2))
        size = np.zeros((n_ent, 2))
        shown = np.zeros(n_ent, dtype=bool)
        origin: dict[int, tuple[float, float]] = {ROOT: (0.0, 0.0)}
        group_boxes: list[GroupBox] = []
        proxies: list[tuple[str, str, int, float, float, float, float]] = []
        placed: list[tuple[int, FlatLayout, float, float]] = []
        inset = np.asarray([sp.group_padding, sp.group_padding + sp.group_header])
        for c in visible:
            lay = self._layouts[c]
            ox, oy = origin[c]
            kids = self._kids(c)
            if len(kids) == 0:
                continue
            center[kids, 0] = lay.x[: len(kids)] + ox
            center[kids, 1] = lay.y[: len(kids)] + oy
            size[kids] = self._box_sizes(kids)
            shown[kids] = True
            placed.append((c, lay, ox, oy))
            groups = kids[kids >= n]
            if len(groups):
                corner = center[groups] - size[groups] / 2
                is_open = self._open[groups]
                parent_id = None if c == ROOT else self._name(c)
                for g, (x0, y0), (w, h), op in zip(
                    groups.tolist(), corner.tolist(), size[groups].tolist(), is_open.tolist()
                ):
                    if op:
                        origin[g] = (x0 + float(inset[0]), y0 + float(inset[1]))
                    group_boxes.append(
                        GroupBox(self._name(g), x0, y0, w, h, op, self._label(g), parent_id)
                    )
            for k in range(len(lay.proxy_source)):
                src_e = int(kids[lay.proxy_source[k]])
                port = int(lay.proxy_port[k])
                proxies.append(
                    (
                        self._proxy_id(c, src_e, port, int(lay.proxy_rank[k])),
                        self._name(src_e),
                        port,
                        float(lay.proxy_x[k] + ox),
                        float(lay.proxy_y[k] + oy),
                        lay.proxy_w,
                        lay.proxy_h,
                    )
                )
        # Lowest shown entity standing for each entity: itself when shown and not an open
        # group, else the one standing for its parent (a collapsed ancestor).
        # (Groups here; nodes at the ends of drawn edges in `_stand_in`.)
        terminal = shown & ~self._open
        vis = np.full(n_ent, -1, dtype=np.int64)
        vis[n:] = np.where(terminal[n:], np.arange(n, n_ent), -1)
        for level in self._levels():  # parents first
            need = level[vis[level] < 0]
            par = self._parent[need]
            ok = par >= 0
            vis[need[ok]] = vis[par[ok]]
        meta, offsets, points = self._routes(terminal, vis, center, size, placed)
        node_sel = np.flatnonzero(terminal[:n])
        xy = center[node_sel] - size[node_sel] / 2
        nsize = size[node_sel]
        root = self._layouts[ROOT]
        width, height = root.width, root.height
        lr = self.request.direction == "LR"
        if lr:
            xy = xy[:, ::-1].copy()
            nsize = nsize[:, ::-1].copy()
            points = points[:, ::-1].copy()
            group_boxes = [
                dataclasses.replace(g, x=g.y, y=g.x, width=g.height, height=g.width)
                for g in group_boxes
            ]
            width, height = height, width
        proxy_boxes = [
            ProxyBox(pid, sid, port, py - ph / 2, px - pw / 2, ph, pw)
            if lr
            else ProxyBox(pid, sid, port, px - pw / 2, py - ph / 2, pw, ph)
            for pid, sid, port, px, py, pw, ph in proxies
        ]
        return LayoutResult(
            node_ids=self._names(node_sel),
            node_xy=xy,
            node_size=nsize,
            ranks=np.full(len(node_sel), -1, dtype=np.int64),
            route_meta=meta,
            route_offsets=offsets,
            route_points=points,
            group_boxes=group_boxes,
            proxy_boxes=proxy_boxes,
            width=width,
            height=height,
            direction=self.request.direction,
            stats={
                "layouts_computed": self.layouts_computed,
                "cache_hits": self.cache_hits,
                "visible_groups": len(group_boxes),
            },
        )

    def _stand_in(self, nodes: np.ndarray, terminal: np.ndarray, vis: np.ndarray) -> np.ndarray:
        """The shown entity standing for each node: itself, or the collapsed group that
        hides it (-1: none, inside an open group that is not shown)."""
        par = self._parent[nodes]
        return np.where(terminal[nodes], nodes, np.where(par >= 0, vis[par], -1))

    def _routes(
        self,
        terminal: np.ndarray,
        vis: np.ndarray,
        center: np.ndarray,
        size: np.ndarray,
        placed: list[tuple[int, FlatLayout, float, float]],
    ) -> tuple[
        list[tuple[str, str, int, int, EdgeKind, int, int, str | None]], np.ndarray, np.ndarray
    ]:
        """One route per distinct visible connection.  Edges inside a collapsed group
        vanish; an edge whose end lies inside an open group follows the route between the
        two children of the common container and is bridged from the group's border to
        the node by one more cubic."""
        arrays = self._arrays
        n = self._n
        cont = self._edge_container
        # Global table of the routes of every placed container.
        route_base = np.full(self._n_ent + 1, -1, dtype=np.int64)  # index c + 1
        offs_list, pts_list, kind_list = [], [], []
        total_routes = 0
        total_pts = 0
        for c, lay, ox, oy in placed:
            route_base[c + 1] = total_routes
            k = len(lay.route_kind)
            offs_list.append(lay.route_offsets[:-1] + total_pts)
            pts_list.append(lay.route_points + (ox, oy))
            kind_list.append(lay.route_kind)
            total_routes += k
            total_pts += len(lay.route_points)
        if total_routes == 0:
            return [], np.zeros(1, dtype=np.int64), np.zeros((0, 2))
        # Edges laid out in placed containers, in request order (-2: self loops and
        # BELOW_TOP: not lifted yet, inside a closed top-level group, are never drawn).
        if len(placed) == 1:
            rows = self._edge_rows(placed[0][0])
        else:
            laid = cont >= ROOT
            rows = np.flatnonzero(laid & (route_base[np.where(laid, cont, ROOT) + 1] >= 0))
        vs = self._stand_in(arrays.src[rows], terminal, vis)
        vd = self._stand_in(arrays.dst[rows], terminal, vis)
        live = (vs != vd) & (vs >= 0) & (vd >= 0)
        idx, vs, vd = rows[live], vs[live], vd[live]
        if len(idx) == 0:
            return [], np.zeros(1, dtype=np.int64), np.zeros((0, 2))
        all_offs = np.concatenate(offs_list + [np.asarray([total_pts])])
        all_pts = np.concatenate(pts_list)
        all_kind = np.concatenate(kind_list)
        sp_eff = np.where(vs < n, arrays.src_port[idx], 0)
        tp_eff = np.where(vd < n, arrays.dst_port[idx], 0)
        keys = np.stack([vs, vd, sp_eff, tp_eff], axis=1)
        _, first_idx, counts = np.unique(keys, axis=0, return_index=True, return_counts=True)
        order = np.argsort(first_idx, kind="stable")
        pick = first_idx[order]  # into idx, vs, vd
        chosen = idx[pick]
        counts = counts[order]
        g_route = route_base[cont[chosen] + 1] + self._edge_local[chosen]
        lo = all_offs[g_route]
        length = all_offs[g_route + 1] - lo
        a, b = vs[pick], vd[pick]
        ra, rb = self._edge_ra[chosen], self._edge_rb[chosen]
        kind_code = all_kind[g_route]
        pre = (a != ra) & (kind_code != ROUTE_PROXY)
        suf = b != rb
        bridged = pre | suf
        sp = np.where(a < n, arrays.src_port[chosen], 0)
        tp = np.where(b < n, arrays.dst_port[chosen], 0)
        # Edges crossing open group borders continue through the groups' own layouts
        # (entry/exit terminals): their chains are joined from pieces, all at once.
        out_len = length.copy()
        which = np.flatnonzero(bridged)
        if len(which):
            # The visible ends' ports: where a chain must start and end (when groups are
            # not routed through, the join draws one curve from the border to them).
            aw, bw = a[which], b[which]
            src_pt = np.stack(
                [
                    center[aw, 0] + self._port_frac(aw, sp[which], True) * size[aw, 0],
                    center[aw, 1] + size[aw, 1] / 2,
                ],
                axis=1,
            )
            dst_pt = np.stack(
                [
                    center[bw, 0] + self._port_frac(bw, tp[which], False) * size[bw, 0],
                    center[bw, 1] - size[bw, 1] / 2,
                ],
                axis=1,
            )
            pool = np.concatenate([all_pts, src_pt, dst_pt])
            pieces = self._chain_pieces(
                chosen[which],
                lo[which],
                length[which],
                pre[which],
                suf[which],
                route_base,
                all_offs,
                len(all_pts),
            )
            chains = _ChainJoin(pool, *pieces, len(which))
            out_len[which] = chains.lengths
        out_offsets = np.zeros(len(chosen) + 1, dtype=np.int64)
        np.cumsum(out_len, out=out_offsets[1:])
        out = np.empty((int(out_offsets[-1]), 2))
        plain = ~bridged
        _copy_runs(out, out_offsets[:-1][plain], all_pts, lo[plain], length[plain])
        if len(which):
            chains.write(out, out_offsets[which])
        kinds: list[EdgeKind] = [
            "proxy"
            if k == ROUTE_PROXY
            else "reversed"
            if k == ROUTE_REVERSED
            else "normal"
            if lifted == 0
            else "lifted"
            for k, lifted in zip(kind_code.tolist(), ((a >= n) | (b >= n)).tolist())
        ]
        proxy_names: list[str | None] = [None] * len(chosen)
        for i in np.flatnonzero(kind_code == ROUTE_PROXY).tolist():
            c = int(cont[chosen[i]])
            lay = next(p[1] for p in placed if p[0] == c)
            local = int(self._edge_local[chosen[i]])
            pidx = int(lay.route_proxy[local])
            proxy_names[i] = self._proxy_id(
                c, int(ra[i]), int(lay.proxy_port[pidx]), int(lay.proxy_rank[pidx])
            )
        meta = list(
            zip(
                self._names(a),
                self._names(b),
                sp.tolist(),
                tp.tolist(),
                kinds,
                chosen.tolist(),
                counts.tolist(),
                proxy_names,
            )
        )
        return meta, out_offsets, out

    def _chain_pieces(
        self,
        edges: np.ndarray,
        main_lo: np.ndarray,
        main_len: np.ndarray,
        pre: np.ndarray,
        suf: np.ndarray,
        route_base: np.ndarray,
        all_offs: np.ndarray,
        n_pts: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pieces of the chains of ``edges`` (which cross open group borders), in
        drawing order: (chain, first point, point count) into the pool of placed routes
        (``n_pts`` points), then one source point and one target point per chain.

        A chain is: the source port and the routes inside the groups it leaves (innermost
        first) when ``pre``; the route in the common container; the routes inside the
        groups it enters (outermost first) and the target port when ``suf``."""
        k = len(edges)
        chain = np.arange(k)
        out_j, out_q, out_lo, out_len = self._group_segments("out", edges, route_base, all_offs)
        keep = pre[out_j]
        out_j, out_q, out_lo, out_len = out_j[keep], out_q[keep], out_lo[keep], out_len[keep]
        in_j, in_q, in_lo, in_len = self._group_segments("in", edges, route_base, all_offs)
        keep = suf[in_j]
        in_j, in_q, in_lo, in_len = in_j[keep], in_q[keep], in_lo[keep], in_len[keep]
        k_out = np.bincount(out_j, minlength=k)
        k_in = np.bincount(in_j, minlength=k)
        ones = np.ones(k, dtype=np.int64)
        parts = [  # (chain, position in the chain, first point, count)
            (chain[pre], np.zeros(int(pre.sum()), dtype=np.int64), n_pts + chain[pre], ones[pre]),
            (out_j, k_out[out_j] - out_q, out_lo, out_len),
            (chain, 1 + k_out, main_lo, main_len),
            (in_j, 2 + k_out[in_j] + in_q, in_lo, in_len),
            (chain[suf], 2 + k_out[suf] + k_in[suf], n_pts + k + chain[suf], ones[suf]),
        ]
        c, pos, first, count = (np.concatenate(col) for col in zip(*parts))
        order = np.lexsort((pos, c))
        return c[order], first[order], count[order]

    def _group_segments(
        self, side: str, edges: np.ndarray, route_base: np.ndarray, all_offs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For ``edges``: their routes inside the open groups they enter (side "in",
        entry terminal to the child holding the end) or leave (side "out"), outermost
        group first, up to the first group not shown open.  Per route: the edge's
        position in ``edges``, the route's position in that list, its first point in
        the placed routes and its point count."""
        empty = np.zeros(0, dtype=np.int64)
        if self._pairs is None:  # routing through groups is off
            return empty, empty, empty, empty
        g_all, _e, _c, _l, _bg, _gs, by_edge, e_sorted, route = self._pairs[side]
        lo = np.searchsorted(e_sorted, edges, side="left")
        counts = np.searchsorted(e_sorted, edges, side="right") - lo
        q = _ramp(counts)
        rows = by_edge[np.repeat(lo, counts) + q]
        j = np.repeat(np.arange(len(edges)), counts)
        g = g_all[rows]
        base = route_base[g + 1]  # -1: the group is not placed
        ok = (base >= 0) & self._open[g] & (route[rows] >= 0)
        # Keep each edge's routes up to its first unusable group.
        failed = np.cumsum(~ok)
        run_start = np.repeat(np.cumsum(counts) - counts, counts)
        keep = failed - (failed[run_start] - ~ok[run_start]) == 0
        g_route = (base + route[rows])[keep]
        return j[keep], q[keep], all_offs[g_route], all_offs[g_route + 1] - all_offs[g_route]

    def _port_frac(self, ent: np.ndarray, port: np.ndarray, source: bool) -> np.ndarray:
        counts = (self._n_out_ent if source else self._n_in_ent)[ent]
        frac = port_offsets(port, np.maximum(counts, 1))
        return np.where(ent < self._n, frac, 0.0)

    def _proxy_id(self, container: int, source: int, port: int, rank: int) -> str:
        where = self._name(container) if container != ROOT else ""
        return f"proxy:{self._name(source)}:{port}@{where}:{rank}"


class _ChainJoin:
    """Bézier chains from pieces of ``pool`` (sorted by chain, in order): each piece after
    the first drops its first point, and where it starts away from where the previous
    one ended (a group border and the terminal inside it) a connecting cubic is put in
    between.  ``lengths``: points per chain; `write` puts the chains in place."""

    def __init__(
        self, pool: np.ndarray, chain: np.ndarray, first: np.ndarray, count: np.ndarray, n: int
    ) -> None:
        opens = np.ones(len(chain), dtype=bool)
        opens[1:] = chain[1:] != chain[:-1]
        self.end = pool[np.roll(first + count - 1, 1)]  # the previous piece's last point
        self.start = pool[first]
        end, start = self.end, self.start
        self.gap = ~opens & (
            (np.abs(end[:, 0] - start[:, 0]) > 1e-6) | (np.abs(end[:, 1] - start[:, 1]) > 1e-6)
        )
        self.skip = (~opens).astype(np.int64)
        self.n_join = 3 * self.gap.astype(np.int64)
        emit = self.n_join + count - self.skip
        self.lengths = np.bincount(chain, weights=emit, minlength=n).astype(np.int64)
        before = np.cumsum(emit) - emit  # points emitted by earlier pieces
        self.within = before - before[np.flatnonzero(opens)][np.cumsum(opens) - 1]
        self.pool, self.chain, self.first, self.count = pool, chain, first, count

    def write(self, out: np.ndarray, at: np.ndarray) -> None:
        """Chain ``k`` into ``out[at[k] : at[k] + lengths[k]]``."""
        dest = at[self.chain] + self.within
        g = np.flatnonzero(self.gap)
        end, start, to = self.end[g], self.start[g], dest[g]
        mid = (end[:, 1] + start[:, 1]) / 2
        out[to] = np.stack([end[:, 0], mid], axis=1)
        out[to + 1] = np.stack([start[:, 0], mid], axis=1)
        out[to + 2] = start
        _copy_runs(
            out, dest + self.n_join, self.pool, self.first + self.skip, self.count - self.skip
        )


def _copy_runs(
    out: np.ndarray, out_at: np.ndarray, src: np.ndarray, src_at: np.ndarray, counts: np.ndarray
) -> None:
    """out[out_at[i] : out_at[i] + counts[i]] = src[src_at[i] : src_at[i] + counts[i]] for
    (n, 2) float arrays, copied as one complex number per point (far faster than rows)."""
    ramp = _ramp(counts)
    pairs_out = out.view(np.complex128).reshape(-1)
    pairs_src = np.ascontiguousarray(src).view(np.complex128).reshape(-1)
    pairs_out[np.repeat(out_at, counts) + ramp] = pairs_src[np.repeat(src_at, counts) + ramp]


def _ramp(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for each count c, concatenated."""
    total = int(counts.sum())
    offsets = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(offsets, counts)
