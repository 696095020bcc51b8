"""Vectorised evaluation of tree ensembles (shared by the three tree kernels).

Every ONNX tree encoding (TreeEnsembleRegressor/Classifier with ``nodes_treeids`` +
``nodes_nodeids``, TreeEnsemble with separate ``leaf_*`` arrays) is compiled once into
*slot* arrays: the trees are unfolded breadth-first so that the two children of every
interior slot sit next to each other (true child at ``child_base``, false child at
``child_base + 1``).  Evaluating all trees for all rows is then a loop over tree depth on
flat arrays of (row, tree) positions:

    next = child_base[pos] + 1 - compare(x[row, feature[pos]], threshold[pos])

Leaves point to themselves and compare against a constant column that always takes the
true branch, so finished paths stay put without masking; positions that reached a leaf are
compacted away as the active set shrinks.  No Python loop runs per row, node or tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError

# Node mode codes (the TreeEnsemble enum; LEAF only exists in the older encodings).
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER, LEAF = range(8)
MODE_CODES = {
    "BRANCH_LEQ": LEQ,
    "BRANCH_LT": LT,
    "BRANCH_GTE": GTE,
    "BRANCH_GT": GT,
    "BRANCH_EQ": EQ,
    "BRANCH_NEQ": NEQ,
    "BRANCH_MEMBER": MEMBER,
    "LEAF": LEAF,
}
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")

# Work in chunks of at most this many (row, tree) pairs: bounded memory, cache-friendly.
_PAIRS_PER_CHUNK = 1 << 16
# Dense leaf-value tables up to this many cells; sparser/larger ensembles use bincount.
_DENSE_LEAF_CELLS = 1 << 22


@dataclass
class TreeStructure:
    """One ensemble in "original" node numbering, before the breadth-first layout."""

    is_leaf: np.ndarray  # bool [M]
    feature: np.ndarray  # int64 [M]
    threshold: np.ndarray  # float64 [M]
    mode: np.ndarray  # int8 [M]
    missing_true: np.ndarray  # bool [M]
    true_child: np.ndarray  # int64 [M]
    false_child: np.ndarray  # int64 [M]
    roots: np.ndarray  # int64 [T]
    leaf_number: np.ndarray  # int64 [M], -1 for interior nodes
    n_leaves: int
    # Leaf votes: (leaf number, output column, weight) triples.
    vote_leaf: np.ndarray
    vote_target: np.ndarray
    vote_weight: np.ndarray
    n_outputs: int
    members: dict[int, np.ndarray] = field(default_factory=dict)  # node -> set values
    threshold_is_double: bool = False


@dataclass
class CompiledEnsemble:
    n_trees: int
    n_outputs: int
    max_feature: int
    root_slots: np.ndarray
    feature: np.ndarray  # per slot, +1 (column 0 is the constant column)
    threshold: np.ndarray  # float64 per slot
    mode: np.ndarray  # int8 per slot
    modes_present: tuple[int, ...]
    missing_true: np.ndarray | None
    child_base: np.ndarray  # true child's slot; leaves point to themselves
    false_slot: np.ndarray  # child_base + 1: next = false_slot - went_true (no negation pass)
    leaf_of_slot: np.ndarray
    depth: int
    member_row: np.ndarray | None
    member_table: np.ndarray | None
    # Leaf votes: dense [n_leaves, n_outputs] tables or CSR by leaf.
    dense_values: np.ndarray | None  # [n_outputs, n_leaves]: one contiguous table per output
    dense_has: np.ndarray | None  # same layout, bool
    all_have_all: bool
    csr_ptr: np.ndarray | None
    csr_target: np.ndarray | None
    csr_weight: np.ndarray | None
    threshold_is_double: bool
    _thresholds_by_dtype: dict[Any, np.ndarray] = field(default_factory=dict)

    def thresholds(self, dtype: np.dtype) -> np.ndarray:
        t = self._thresholds_by_dtype.get(dtype)
        if t is None:
            t = self.threshold.astype(dtype)
            self._thresholds_by_dtype[dtype] = t
        return t


def compile_ensemble(s: TreeStructure) -> CompiledEnsemble:
    m = s.is_leaf.size
    for name, arr in (("true", s.true_child), ("false", s.false_child)):
        bad = ~s.is_leaf & ((arr < 0) | (arr >= m))
        if bad.any():
            raise ExecutionError(f"tree node {int(np.argmax(bad))} has an invalid {name} child")
    if s.roots.size and ((s.roots < 0) | (s.roots >= m)).any():
        raise ExecutionError("a tree root points outside the node list")
    if (~s.is_leaf & (s.feature < 0)).any():
        raise ExecutionError("a tree node has a negative feature id")

    # Breadth-first unfolding, one vectorised step per tree level.
    t = s.roots.size
    slot_orig = [s.roots.astype(np.int64)]
    frontier = slot_orig[0]
    frontier_slots = np.arange(t, dtype=np.int64)
    parents: list[np.ndarray] = []
    bases: list[np.ndarray] = []
    next_slot = t
    depth = 0
    limit = 8 * m + 2 * t + 16
    while frontier.size:
        interior = ~s.is_leaf[frontier]
        if not interior.any():
            break
        par_orig = frontier[interior]
        k = par_orig.size
        parents.append(frontier_slots[interior])
        bases.append(next_slot + 2 * np.arange(k, dtype=np.int64))
        children = np.empty(2 * k, dtype=np.int64)
        children[0::2] = s.true_child[par_orig]
        children[1::2] = s.false_child[par_orig]
        slot_orig.append(children)
        frontier = children
        frontier_slots = next_slot + np.arange(2 * k, dtype=np.int64)
        next_slot += 2 * k
        depth += 1
        if next_slot > limit:
            raise ExecutionError("tree ensemble is not a set of trees (cycle or shared subtrees)")
    orig = np.concatenate(slot_orig)
    n_slots = orig.size
    child_base = np.arange(n_slots, dtype=np.int64)
    for p, b in zip(parents, bases):
        child_base[p] = b
    leaf_slot = s.is_leaf[orig]

    mode = s.mode[orig].astype(np.int8)
    interior_modes = tuple(sorted({int(v) for v in np.unique(mode[~leaf_slot])}))
    feature = s.feature[orig] + 1
    threshold = s.threshold[orig].astype(np.float64)
    feature[leaf_slot] = 0
    # Leaves compare the constant 0.0 column so that their comparison is always true.
    if len(interior_modes) == 1 and interior_modes[0] != MEMBER:
        leaf_mode = interior_modes[0]
    else:
        leaf_mode = LEQ
    mode[leaf_slot] = leaf_mode
    threshold[leaf_slot] = {LEQ: np.inf, LT: np.inf, GTE: -np.inf, GT: -np.inf, EQ: 0.0}.get(
        leaf_mode, 1.0
    )
    modes_present = tuple(sorted({int(v) for v in np.unique(mode)})) if n_slots else (LEQ,)

    missing = s.missing_true[orig] & ~leaf_slot
    member_row = member_table = None
    if s.members:
        member_nodes = np.array(sorted(s.members), dtype=np.int64)
        width = max(1, max(v.size for v in s.members.values()))
        member_table = np.full((member_nodes.size, width), np.nan)
        for i, node in enumerate(member_nodes.tolist()):  # once per set node, at compile time
            vals = s.members[node]
            member_table[i, : vals.size] = vals
        lookup = np.full(m, -1, dtype=np.int64)
        lookup[member_nodes] = np.arange(member_nodes.size)
        member_row = lookup[orig]

    leaf_of_slot = np.where(leaf_slot, s.leaf_number[orig], -1)
    max_feature = int(s.feature[~s.is_leaf].max()) if (~s.is_leaf).any() else -1

    # Leaf votes.
    n_out = s.n_outputs
    if s.vote_target.size and (s.vote_target.min() < 0 or s.vote_target.max() >= n_out):
        raise ExecutionError(f"a leaf votes for target/class outside [0, {n_out})")
    dense_values = dense_has = csr_ptr = csr_target = csr_weight = None
    all_have_all = False
    if s.n_leaves * n_out <= _DENSE_LEAF_CELLS:
        dense_values = np.zeros((n_out, s.n_leaves), dtype=np.float64)
        dense_has = np.zeros((n_out, s.n_leaves), dtype=bool)
        np.add.at(dense_values, (s.vote_target, s.vote_leaf), s.vote_weight)
        dense_has[s.vote_target, s.vote_leaf] = True
        all_have_all = bool(dense_has.all())
    else:
        order = np.argsort(s.vote_leaf, kind="stable")
        csr_target = s.vote_target[order]
        csr_weight = s.vote_weight[order].astype(np.float64)
        counts = np.bincount(s.vote_leaf, minlength=s.n_leaves)
        csr_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    return CompiledEnsemble(
        n_trees=t,
        n_outputs=n_out,
        max_feature=max_feature,
        root_slots=np.arange(t, dtype=np.int64),
        feature=feature.astype(np.int64),
        threshold=threshold,
        mode=mode,
        modes_present=modes_present,
        missing_true=missing if missing.any() else None,
        child_base=child_base,
        false_slot=child_base + 1,
        leaf_of_slot=leaf_of_slot,
        depth=depth,
        member_row=member_row,
        member_table=member_table,
        dense_values=dense_values,
        dense_has=dense_has,
        all_have_all=all_have_all,
        csr_ptr=csr_ptr,
        csr_target=csr_target,
        csr_weight=csr_weight,
        threshold_is_double=s.threshold_is_double,
    )


def _compare(mode: int, v: np.ndarray, t: np.ndarray) -> np.ndarray:
    if mode == LEQ:
        return v <= t
    if mode == LT:
        return v < t
    if mode == GTE:
        return v >= t
    if mode == GT:
        return v > t
    if mode == EQ:
        return v == t
    return v != t  # NEQ


def _leaf_slots(c: CompiledEnsemble, xa: np.ndarray) -> np.ndarray:
    """Final slot of every (row, tree) pair, row-major [rows * trees]."""
    n, width = xa.shape
    t = c.n_trees
    xflat = xa.ravel()
    thr = c.thresholds(xa.dtype)
    pos = np.tile(c.root_slots, n)
    rowoff = np.repeat(np.arange(n, dtype=np.int64) * width, t)
    final = pos.copy()
    where = None  # indices into `final` of the active pairs (None: all, in order)
    check_nan = c.missing_true is not None and bool(np.isnan(xa).any())
    single = c.modes_present[0] if len(c.modes_present) == 1 else None
    for _ in range(c.depth):
        if pos.size == 0:
            break
        # np.take is a little faster than fancy indexing for these flat gathers.
        v = np.take(xflat, rowoff + np.take(c.feature, pos))
        tv = np.take(thr, pos)
        if single is not None and single != MEMBER:
            go_true = _compare(single, v, tv)
        else:
            go_true = np.zeros(pos.size, dtype=bool)
            m = c.mode[pos]
            for code in c.modes_present:
                sel = np.flatnonzero(m == code)
                if not sel.size:
                    continue
                if code == MEMBER:
                    assert c.member_row is not None and c.member_table is not None
                    rows = c.member_table[c.member_row[pos[sel]]]
                    go_true[sel] = (rows == v[sel, None]).any(axis=1)
                else:
                    go_true[sel] = _compare(code, v[sel], tv[sel])
        if check_nan:
            assert c.missing_true is not None
            go_true |= c.missing_true[pos] & np.isnan(v)
        new = np.take(c.false_slot, pos) - go_true
        done = new == pos
        n_done = int(np.count_nonzero(done))
        if n_done * 4 >= pos.size:
            # Compact: store finished pairs, keep iterating the others only.
            keep = ~done
            if where is None:
                final[:] = new
                where = np.flatnonzero(keep)
            else:
                final[where[done]] = new[done]
                where = where[keep]
            pos = new[keep]
            rowoff = rowoff[keep]
        else:
            pos = new
    if where is None:
        final[:] = pos
    elif pos.size:
        final[where] = pos
    return final


def leaf_indices(c: CompiledEnsemble, x: np.ndarray) -> np.ndarray:
    """Leaf number reached in every tree by every row: int64 [N, T]."""
    n, f = x.shape
    if c.max_feature >= f:
        raise ExecutionError(
            f"the trees read feature {c.max_feature} but the input has {f} features"
        )
    if x.dtype == np.float64 or c.threshold_is_double:
        dtype: Any = np.float64
    else:
        dtype = np.float32
    out = np.empty((n, c.n_trees), dtype=np.int64)
    rows_per_chunk = max(1, _PAIRS_PER_CHUNK // max(1, c.n_trees))
    for start in range(0, n, rows_per_chunk):
        stop = min(n, start + rows_per_chunk)
        xa = np.empty((stop - start, f + 1), dtype=dtype)
        xa[:, 0] = 0
        xa[:, 1:] = x[start:stop]
        slots = _leaf_slots(c, xa)
        out[start:stop] = c.leaf_of_slot[slots].reshape(stop - start, c.n_trees)
    if (out < 0).any():
        raise ExecutionError("a tree path did not end in a leaf")
    return out


def aggregate(c: CompiledEnsemble, leaves: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
    """(scores, has_vote) [N, n_outputs] combining the leaf votes of all trees per row.

    ``how`` is SUM, AVERAGE (the sum, divided by the caller), MIN or MAX; ``has_vote`` tells
    which outputs received at least one vote (MIN/MAX and the classifier rules need it)."""
    n, t = leaves.shape
    k = c.n_outputs
    if c.dense_values is not None and c.dense_has is not None:
        # One contiguous gather + row sum per output column (much faster than gathering
        # [N, T, k] blocks and reducing over the middle axis).
        scores = np.empty((n, k), dtype=np.float64)
        has = np.ones((n, k), dtype=bool)
        for j in range(k):
            if how in ("MIN", "MAX"):
                fill = np.inf if how == "MIN" else -np.inf
                table = np.where(c.dense_has[j], c.dense_values[j], fill)
                gathered = table[leaves]
                scores[:, j] = gathered.min(axis=1) if how == "MIN" else gathered.max(axis=1)
            else:
                scores[:, j] = c.dense_values[j][leaves].sum(axis=1)
            if not c.all_have_all:
                has[:, j] = c.dense_has[j][leaves].any(axis=1)
        if how in ("MIN", "MAX"):
            scores = np.where(has, scores, 0.0)
        return scores, has
    assert c.csr_ptr is not None and c.csr_target is not None and c.csr_weight is not None
    flat = leaves.ravel()
    starts = c.csr_ptr[flat]
    counts = c.csr_ptr[flat + 1] - starts
    pair = np.repeat(np.arange(flat.size, dtype=np.int64), counts)
    offsets = np.arange(pair.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    entry = starts[pair] + offsets
    cell = (pair // t) * k + c.csr_target[entry]
    weights = c.csr_weight[entry]
    has = np.bincount(cell, minlength=n * k).reshape(n, k) > 0
    if how in ("MIN", "MAX"):
        fill = np.inf if how == "MIN" else -np.inf
        acc = np.full(n * k, fill)
        (np.minimum if how == "MIN" else np.maximum).at(acc, cell, weights)
        return np.where(has, acc.reshape(n, k), 0.0), has
    sums = np.bincount(cell, weights=weights, minlength=n * k).astype(np.float64)
    return sums.reshape(n, k), has


# Rows per block when scoring: bounds the [rows, trees] leaf-index and gather arrays.
_PAIRS_PER_BLOCK = 1 << 21


def score_rows(c: CompiledEnsemble, x: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
    """`aggregate` over `leaf_indices`, block by block of rows so that memory stays bounded
    for any batch size."""
    n = x.shape[0]
    rows = max(1, _PAIRS_PER_BLOCK // max(1, c.n_trees))
    if n <= rows:
        return aggregate(c, leaf_indices(c, x), how)
    scores = np.empty((n, c.n_outputs), dtype=np.float64)
    has = np.empty((n, c.n_outputs), dtype=bool)
    for start in range(0, n, rows):
        block = slice(start, min(n, start + rows))
        scores[block], has[block] = aggregate(c, leaf_indices(c, x[block]), how)
    return scores, has


# --------------------------------------------------------------------------- builders


def structure_from_ids(
    *,
    op: str,
    treeids: list[int],
    nodeids: list[int],
    featureids: list[int],
    modes: list[str],
    values: np.ndarray,
    truenodeids: list[int],
    falsenodeids: list[int],
    missing_tracks_true: list[int] | None,
    vote_treeids: list[int],
    vote_nodeids: list[int],
    vote_ids: list[int],
    vote_weights: np.ndarray,
    n_outputs: int,
    threshold_is_double: bool,
) -> TreeStructure:
    """TreeEnsembleRegressor/Classifier encoding: nodes keyed by (tree id, node id)."""
    m = len(nodeids)
    lengths = {len(treeids), len(featureids), len(modes), len(truenodeids), len(falsenodeids)}
    if lengths != {m} or values.size != m:
        raise ExecutionError(f"{op}: the nodes_* attributes must all have the same length")
    if len(vote_treeids) != len(vote_nodeids) or len(vote_ids) != len(vote_nodeids):
        raise ExecutionError(f"{op}: the leaf vote attributes must all have the same length")
    if vote_weights.size != len(vote_ids):
        raise ExecutionError(f"{op}: one weight is needed per leaf vote")
    tree = np.asarray(treeids, dtype=np.int64)
    node = np.asarray(nodeids, dtype=np.int64)
    mode_names = np.asarray(modes, dtype=str)
    mode = np.full(m, -1, dtype=np.int8)
    for name, code in MODE_CODES.items():  # a handful of vectorised comparisons
        mode[mode_names == name] = code
    if (mode < 0).any():
        raise ExecutionError(f"{op}: unknown node mode '{mode_names[np.argmax(mode < 0)]}'")
    is_leaf = mode == LEAF

    # (tree, node) -> position, through one sorted composite key.
    span = int(node.max()) + 1 if m else 1
    tree_min = int(tree.min()) if m else 0
    key = (tree - tree_min) * span + node
    if m and bool((np.diff(key) > 0).all()):
        order = np.arange(m)  # exporters list nodes tree by tree in id order: no sort
    else:
        order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    if m and (np.diff(sorted_key) == 0).any():
        raise ExecutionError(f"{op}: a (tree id, node id) pair appears twice")

    def locate(tids: np.ndarray, nids: np.ndarray, what: str, strict: bool) -> np.ndarray:
        k = (tids - tree_min) * span + nids
        idx = np.searchsorted(sorted_key, k)
        idx_c = np.minimum(idx, max(m - 1, 0))
        found = (nids >= 0) & (nids < span) & (m > 0)
        found &= sorted_key[idx_c] == k if m else False
        if strict and not found.all():
            bad = int(np.argmax(~found))
            raise ExecutionError(
                f"{op}: {what} refers to node {int(nids[bad])} of tree {int(tids[bad])}, "
                "which does not exist"
            )
        return np.where(found, order[idx_c], -1)

    interior = ~is_leaf
    true_child = np.zeros(m, dtype=np.int64)
    false_child = np.zeros(m, dtype=np.int64)
    tn = np.asarray(truenodeids, dtype=np.int64)
    fn = np.asarray(falsenodeids, dtype=np.int64)
    true_child[interior] = locate(tree[interior], tn[interior], "a true branch", True)
    false_child[interior] = locate(tree[interior], fn[interior], "a false branch", True)

    # Roots: the first listed node of each tree, trees in order of first appearance.
    _, first = np.unique(tree, return_index=True)
    roots = np.sort(first).astype(np.int64)

    leaf_number = np.full(m, -1, dtype=np.int64)
    leaf_number[is_leaf] = np.arange(int(is_leaf.sum()))
    vt = np.asarray(vote_treeids, dtype=np.int64)
    vn = np.asarray(vote_nodeids, dtype=np.int64)
    where = locate(vt, vn, "a leaf weight", True) if vt.size else np.zeros(0, dtype=np.int64)
    # Weights attached to interior nodes are ignored (old onnxmltools models have them).
    on_leaf = is_leaf[where] if where.size else np.zeros(0, dtype=bool)
    missing = np.zeros(m, dtype=bool)
    if missing_tracks_true:
        mt = np.asarray(missing_tracks_true, dtype=np.int64)[:m]
        missing[: mt.size] = mt == 1
    return TreeStructure(
        is_leaf=is_leaf,
        feature=np.asarray(featureids, dtype=np.int64),
        threshold=np.asarray(values, dtype=np.float64).ravel(),
        mode=mode,
        missing_true=missing,
        true_child=true_child,
        false_child=false_child,
        roots=roots,
        leaf_number=leaf_number,
        n_leaves=int(is_leaf.sum()),
        vote_leaf=leaf_number[where[on_leaf]],
        vote_target=np.asarray(vote_ids, dtype=np.int64)[on_leaf],
        vote_weight=np.asarray(vote_weights, dtype=np.float64).ravel()[on_leaf],
        n_outputs=n_outputs,
        threshold_is_double=threshold_is_double,
    )


_CACHE: dict[tuple[int, ...], tuple[tuple[Any, ...], CompiledEnsemble]] = {}


def cached_compile(anchors: tuple[Any, ...], build: Any) -> CompiledEnsemble:
    """Compile once per set of attribute objects.

    The interpreter decodes a node's attributes once per plan and passes the same objects
    on every run; keying on their identities (and keeping them alive in the cache, so an
    id cannot be reused) skips recompiling big ensembles on each call."""
    key = tuple(id(a) for a in anchors)
    hit = _CACHE.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], anchors)):
        return hit[1]
    compiled = build()
    if len(_CACHE) >= 16:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = (anchors, compiled)
    return compiled
