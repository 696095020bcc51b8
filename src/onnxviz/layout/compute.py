"""`compute(request) -> LayoutResult`: converts a request to index arrays, runs the flat
pipeline and packs the result.
"""

from __future__ import annotations

import time
from operator import attrgetter

import numpy as np

from .api import (
    CancelCheck,
    EdgeKind,
    EdgeTable,
    LayoutError,
    LayoutRequest,
    LayoutResult,
    NodeTable,
    ProxyBox,
)
from .flat import ROUTE_PROXY, ROUTE_REVERSED, ROUTE_SELF, FlatLayout, layout_arrays

_KIND_NAMES: dict[int, EdgeKind] = {
    0: "normal",
    ROUTE_PROXY: "proxy",
    ROUTE_REVERSED: "reversed",
    ROUTE_SELF: "self",
}


class RequestArrays:
    """The request as index arrays (top-to-bottom frame: sizes swapped for LR)."""

    _index: dict[str, int] | None

    @property
    def index(self) -> dict[str, int]:
        """Node id -> position (built on first use)."""
        if self._index is None:
            self._index = dict(zip(self.ids, range(len(self.ids))))
        return self._index

    def __init__(self, request: LayoutRequest) -> None:
        nodes = request.nodes
        n = len(nodes)
        if isinstance(nodes, NodeTable):
            self.ids: list[str] = nodes.ids
            w, h = _read_only(nodes.width), _read_only(nodes.height)
            n_in, n_out = nodes.inputs.copy(), nodes.outputs.copy()
        else:
            self.ids = list(map(attrgetter("id"), nodes))
            w = np.fromiter(map(attrgetter("width"), nodes), dtype=float, count=n)
            h = np.fromiter(map(attrgetter("height"), nodes), dtype=float, count=n)
            n_in = np.fromiter(map(attrgetter("inputs"), nodes), dtype=np.int64, count=n)
            n_out = np.fromiter(map(attrgetter("outputs"), nodes), dtype=np.int64, count=n)
        self._index = None
        self._check_ids(isinstance(request.edges, EdgeTable))
        if n and (
            not np.isfinite(w).all() or not np.isfinite(h).all() or (w < 0).any() or (h < 0).any()
        ):
            raise LayoutError("node sizes must be finite and not negative")
        if request.direction == "LR":
            w, h = h, w
        elif request.direction != "TB":
            raise LayoutError(f"direction must be 'TB' or 'LR', not {request.direction!r}")
        self.width, self.height = w, h
        edges = request.edges
        m = len(edges)
        if isinstance(edges, EdgeTable):
            self.src, self.dst = _read_only(edges.source), _read_only(edges.target)
            self.src_port = _read_only(edges.source_port)
            self.dst_port = _read_only(edges.target_port)
            if m and (
                min(self.src.min(), self.dst.min()) < 0 or max(self.src.max(), self.dst.max()) >= n
            ):
                raise LayoutError("edge table refers to a node index out of range")
        else:
            position = self.index.__getitem__
            try:
                self.src = np.fromiter(map(position, map(attrgetter("source"), edges)), np.int64, m)
                self.dst = np.fromiter(map(position, map(attrgetter("target"), edges)), np.int64, m)
            except KeyError as exc:
                raise LayoutError(f"edge refers to unknown node {exc.args[0]!r}") from None
            self.src_port = np.fromiter(map(attrgetter("source_port"), edges), np.int64, m)
            self.dst_port = np.fromiter(map(attrgetter("target_port"), edges), np.int64, m)
        if m and (self.src_port.min() < 0 or self.dst_port.min() < 0):
            raise LayoutError("port indexes must not be negative")
        if m:
            np.maximum.at(n_in, self.dst, self.dst_port + 1)
            np.maximum.at(n_out, self.src, self.src_port + 1)
        self.n_in, self.n_out = n_in, n_out

    def _check_ids(self, by_position: bool) -> None:
        """Node ids are unique (LayoutError otherwise)."""
        ids = self.ids
        if by_position:
            # Edges by position need no id -> position dict: a repeated id shows as equal
            # neighbours among the sorted hashes (cheaper than a set of 100k strings);
            # the strings are compared only then.
            hashes = np.fromiter(map(hash, ids), np.int64, len(ids))
            hashes.sort()
            suspect = bool((hashes[1:] == hashes[:-1]).any())
        else:
            suspect = len(self.index) != len(ids)
        if not suspect:
            return
        seen: set[str] = set()
        dup = next((i for i in ids if i in seen or seen.add(i)), None)  # type: ignore[func-returns-value]
        if dup is not None:
            raise LayoutError(f"node id {dup!r} is used twice")
        # Otherwise two hashes met.


def _read_only(a: np.ndarray) -> np.ndarray:
    """The caller's column without a copy; writing through it is an error."""
    view = a.view()
    view.flags.writeable = False
    return view


def compute(request: LayoutRequest, cancel: CancelCheck | None = None) -> LayoutResult:
    """Lay out ``request``; see the package docstring.  Raises `LayoutError` for a bad
    request and `LayoutCancelled` when ``cancel()`` returns True."""
    t0 = time.perf_counter()
    arrays = RequestArrays(request)
    t1 = time.perf_counter()
    flat = layout_arrays(
        arrays.width,
        arrays.height,
        arrays.src,
        arrays.dst,
        arrays.src_port,
        arrays.dst_port,
        arrays.n_in,
        arrays.n_out,
        request.spacing,
        request.long_edges,
        request.crossing_sweeps,
        cancel,
    )
    t2 = time.perf_counter()
    result = flat_result(flat, arrays, request)
    result.timings = {"prepare": t1 - t0, **flat.timings, "pack": time.perf_counter() - t2}
    return result


def flat_result(flat: FlatLayout, arrays: RequestArrays, request: LayoutRequest) -> LayoutResult:
    """Pack a flat layout, applying the direction."""
    ids = arrays.ids
    w, h = arrays.width, arrays.height
    xy = np.stack([flat.x - w / 2, flat.y - h / 2], axis=1) if len(ids) else np.zeros((0, 2))
    size = np.stack([w, h], axis=1) if len(ids) else np.zeros((0, 2))
    proxies_meta = []
    proxy_ids: list[str] = []
    for k, (s, port, r) in enumerate(
        zip(flat.proxy_source.tolist(), flat.proxy_port.tolist(), flat.proxy_rank.tolist())
    ):
        pid = f"proxy:{ids[s]}:{port}@{r}"
        proxy_ids.append(pid)
        proxies_meta.append((pid, ids[s], port, float(flat.proxy_x[k]), float(flat.proxy_y[k])))
    points = flat.route_points
    lr = request.direction == "LR"
    if lr:
        xy = xy[:, ::-1].copy()
        size = size[:, ::-1].copy()
        points = points[:, ::-1].copy()
    pw, ph = flat.proxy_w, flat.proxy_h
    proxy_boxes = []
    for pid, sid, port, px, py in proxies_meta:
        if lr:
            proxy_boxes.append(ProxyBox(pid, sid, port, py - ph / 2, px - pw / 2, ph, pw))
        else:
            proxy_boxes.append(ProxyBox(pid, sid, port, px - pw / 2, py - ph / 2, pw, ph))
    kinds = [_KIND_NAMES[k] for k in flat.route_kind.tolist()]
    proxy_of = [proxy_ids[p] if p >= 0 else None for p in flat.route_proxy.tolist()]
    meta = list(
        zip(
            [ids[i] for i in arrays.src.tolist()],
            [ids[i] for i in arrays.dst.tolist()],
            arrays.src_port.tolist(),
            arrays.dst_port.tolist(),
            kinds,
            range(len(kinds)),
            proxy_of,
        )
    )
    width, height = (flat.height, flat.width) if lr else (flat.width, flat.height)
    return LayoutResult(
        node_ids=ids,
        node_xy=xy,
        node_size=size,
        ranks=flat.rank,
        route_meta=meta,
        route_offsets=flat.route_offsets,
        route_points=points,
        proxy_boxes=proxy_boxes,
        width=width,
        height=height,
        direction=request.direction,
        stats=dict(flat.stats),
    )
