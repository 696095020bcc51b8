"""ai.onnx.ml tree ensembles: TreeEnsembleRegressor, TreeEnsembleClassifier (opsets 1, 3, 5)
and TreeEnsemble (opset 5).  The traversal itself lives in `ml_tree_engine`."""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.ml_common import (
    apply_post_transform,
    as_batch,
    class_labels,
    logistic,
    probit,
    transform_name,
    transform_single_target,
)
from onnxviz.runtime.kernels.ml_tree_engine import (
    AGGREGATES,
    MEMBER,
    CompiledEnsemble,
    TreeStructure,
    cached_compile,
    compile_ensemble,
    score_rows,
    structure_from_ids,
)
from onnxviz.runtime.registry import kernel

ML = "ai.onnx.ml"


def _floats_or_tensor(kw: dict[str, Any], name: str, op: str) -> tuple[np.ndarray | None, bool]:
    """(values, is_double) from ``name`` or ``name_as_tensor`` (one of them, not both)."""
    plain = kw.get(name)
    tensor = kw.get(name + "_as_tensor")
    if plain and tensor is not None and np.asarray(tensor).size:
        raise ExecutionError(f"{op}: give either {name} or {name}_as_tensor, not both")
    if tensor is not None and np.asarray(tensor).size:
        arr = np.asarray(tensor)
        return arr.astype(np.float64).ravel(), arr.dtype == np.float64
    if plain:
        return np.asarray(plain, dtype=np.float64), False
    return None, False


def _x_for_trees(x: np.ndarray, op: str) -> np.ndarray:
    x = as_batch(np.asarray(x), op)
    if x.dtype.kind not in "fiu":
        x = x.astype(np.float32)
    return x


def _aggregate_name(value: Any) -> str:
    if isinstance(value, (int, np.integer)):
        if not 0 <= int(value) < len(AGGREGATES):
            raise ExecutionError(f"unknown aggregate_function {value}")
        return AGGREGATES[int(value)]
    name = str(value).upper()
    if name not in AGGREGATES:
        raise ExecutionError(f"unknown aggregate_function '{value}'")
    return name


def _finish_regression(
    c: CompiledEnsemble,
    x: np.ndarray,
    how: str,
    base: np.ndarray | None,
    post: str,
    dtype: Any = np.float32,
) -> np.ndarray:
    scores, has = score_rows(c, x, how)
    if how == "AVERAGE":
        scores = scores / max(c.n_trees, 1)
    k = c.n_outputs
    base = np.zeros(0) if base is None else base
    if k == 1:
        # One target: a single base value is the origin; only PROBIT applies (see ml_common).
        origin = float(base[0]) if base.size == 1 else 0.0
        return np.asarray(transform_single_target((scores + origin).astype(dtype), post), dtype)
    if base.size == k:
        scores = scores + base
    return np.asarray(apply_post_transform(scores.astype(dtype), post), dtype=dtype)


# --------------------------------------------------------------------------- regressor


def _compile_legacy(kw: dict[str, Any], op: str, votes: str, n_outputs: int) -> CompiledEnsemble:
    values, values_double = _floats_or_tensor(kw, "nodes_values", op)
    weights, _ = _floats_or_tensor(kw, f"{votes}_weights", op)
    nodeids = kw.get("nodes_nodeids") or []
    anchors = tuple(
        kw.get(n)
        for n in (
            "nodes_nodeids",
            "nodes_treeids",
            "nodes_truenodeids",
            "nodes_falsenodeids",
            "nodes_featureids",
            "nodes_modes",
            "nodes_values",
            "nodes_values_as_tensor",
            f"{votes}_ids",
            f"{votes}_nodeids",
            f"{votes}_weights",
            f"{votes}_weights_as_tensor",
        )
    ) + (n_outputs,)

    def build() -> CompiledEnsemble:
        return compile_ensemble(
            structure_from_ids(
                op=op,
                treeids=kw.get("nodes_treeids") or [],
                nodeids=nodeids,
                featureids=kw.get("nodes_featureids") or [],
                modes=kw.get("nodes_modes") or [],
                values=values if values is not None else np.zeros(len(nodeids)),
                truenodeids=kw.get("nodes_truenodeids") or [],
                falsenodeids=kw.get("nodes_falsenodeids") or [],
                missing_tracks_true=kw.get("nodes_missing_value_tracks_true"),
                vote_treeids=kw.get(f"{votes}_treeids") or [],
                vote_nodeids=kw.get(f"{votes}_nodeids") or [],
                vote_ids=kw.get(f"{votes}_ids") or [],
                vote_weights=weights if weights is not None else np.zeros(0),
                n_outputs=n_outputs,
                threshold_is_double=values_double,
            )
        )

    return cached_compile(anchors, build)


@kernel("TreeEnsembleRegressor", domain=ML, since=(1, 3, 5))
def tree_ensemble_regressor(x: np.ndarray, **kw: Any) -> np.ndarray:
    op = "TreeEnsembleRegressor"
    target_ids = kw.get("target_ids") or []
    n_targets = int(kw.get("n_targets") or 0) or (max(target_ids) + 1 if target_ids else 1)
    c = _compile_legacy(kw, op, "target", n_targets)
    base, _ = _floats_or_tensor(kw, "base_values", op)
    return _finish_regression(
        c,
        _x_for_trees(x, op),
        _aggregate_name(kw.get("aggregate_function", "SUM")),
        base,
        transform_name(kw.get("post_transform", "NONE")),
    )


# --------------------------------------------------------------------------- classifier


def _binary_single_column(
    s: np.ndarray, post: str, all_positive: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Two-class ensembles whose leaves vote for one class only: the score is the positive
    class's.  Returns (is_positive [N], probabilities [N, 2]) the way onnxruntime fills them:
    weights that are all >= 0 are probabilities (threshold 0.5, columns 1-p and p); mixed-sign
    weights are margins (threshold 0, LOGISTIC gives sigmoid(-s), sigmoid(s))."""
    if all_positive:
        positive = s > 0.5
    else:
        positive = s > 0
    if post == "PROBIT":
        p = probit(s.astype(np.float32))
        z = np.stack([-p, p], axis=1)
    elif all_positive:
        z = np.stack([1.0 - s, s], axis=1)
    elif post == "LOGISTIC":
        z = np.stack([logistic(-s), logistic(s)], axis=1)
    else:
        z = np.stack([-s, s], axis=1)
    return positive, z.astype(np.float32)


def classify(
    c: CompiledEnsemble,
    x: np.ndarray,
    base: np.ndarray | None,
    post: str,
    voted_classes: np.ndarray,
    all_positive: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(index of the predicted class [N], scores [N, n_classes] float32)."""
    scores, has = score_rows(c, x, "SUM")
    n_classes = c.n_outputs
    base = np.zeros(0) if base is None else base
    if n_classes == 2 and voted_classes.size == 1:
        k = int(voted_classes[0])
        s = scores[:, k]
        if k == 0 and base.size != 2:
            s = s + (base[0] if base.size == 1 else 0.0)
            positive, z = _binary_single_column(s, post, all_positive)
            return positive.astype(np.int64), z
        # Votes for one class but two base values (or votes for class 1): both columns are
        # scores ("binary as multiclass"); the decision uses the voted column's score.
        full = scores.copy()
        full[:, : min(base.size, 2)] += base[:2]
        positive = (full[:, k] > 0.5) if all_positive else (full[:, k] > 0)
        z = apply_post_transform(full.astype(np.float32), post)
        return positive.astype(np.int64), np.asarray(z, dtype=np.float32)
    if base.size:
        m = min(base.size, n_classes)
        scores = scores.copy()
        scores[:, :m] += base[:m]
        has = has.copy()
        has[:, :m] = True
    # Top class among the classes that received a vote; first one wins ties.
    masked = np.where(has, scores, -np.inf)
    best = np.argmax(masked, axis=1).astype(np.int64)
    z = apply_post_transform(scores.astype(np.float32), post)
    return best, np.asarray(z, dtype=np.float32)


@kernel("TreeEnsembleClassifier", domain=ML, since=(1, 3, 5))
def tree_ensemble_classifier(x: np.ndarray, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
    op = "TreeEnsembleClassifier"
    labels, _ = class_labels(op, kw.get("classlabels_strings"), kw.get("classlabels_int64s"))
    c = _compile_legacy(kw, op, "class", labels.size)
    base, _ = _floats_or_tensor(kw, "base_values", op)
    weights, _ = _floats_or_tensor(kw, "class_weights", op)
    voted = np.unique(np.asarray(kw.get("class_ids") or [], dtype=np.int64))
    all_positive = bool(weights is None or (weights >= 0).all())
    best, z = classify(
        c,
        _x_for_trees(x, op),
        base,
        transform_name(kw.get("post_transform", "NONE")),
        voted,
        all_positive,
    )
    return labels[best], z


# --------------------------------------------------------------------------- TreeEnsemble


def _compile_v5(kw: dict[str, Any]) -> CompiledEnsemble:
    op = "TreeEnsemble"
    names = (
        "nodes_featureids",
        "nodes_splits",
        "nodes_modes",
        "nodes_truenodeids",
        "nodes_falsenodeids",
        "nodes_trueleafs",
        "nodes_falseleafs",
        "leaf_targetids",
        "leaf_weights",
        "tree_roots",
        "membership_values",
        "nodes_missing_value_tracks_true",
    )
    for required in names[:10]:
        if kw.get(required) is None:
            raise ExecutionError(f"{op}: attribute {required} is required")
    n_targets = int(kw.get("n_targets") or 0) or (
        int(max(kw["leaf_targetids"])) + 1 if len(kw["leaf_targetids"]) else 1
    )

    def build() -> CompiledEnsemble:
        feat = np.asarray(kw["nodes_featureids"], dtype=np.int64)
        n = feat.size
        splits_arr = np.asarray(kw["nodes_splits"])
        splits = splits_arr.astype(np.float64).ravel()
        modes = np.asarray(kw["nodes_modes"]).astype(np.int64).ravel()
        tn = np.asarray(kw["nodes_truenodeids"], dtype=np.int64)
        fn = np.asarray(kw["nodes_falsenodeids"], dtype=np.int64)
        tl = np.asarray(kw["nodes_trueleafs"], dtype=np.int64) != 0
        fl = np.asarray(kw["nodes_falseleafs"], dtype=np.int64) != 0
        if {splits.size, modes.size, tn.size, fn.size, tl.size, fl.size} != {n}:
            raise ExecutionError(f"{op}: the nodes_* attributes must all have the same length")
        if ((modes < 0) | (modes > MEMBER)).any():
            raise ExecutionError(f"{op}: unknown node mode in nodes_modes")
        targets = np.asarray(kw["leaf_targetids"], dtype=np.int64)
        weights = np.asarray(kw["leaf_weights"]).astype(np.float64).ravel()
        n_leaves = targets.size
        if weights.size != n_leaves:
            raise ExecutionError(f"{op}: leaf_targetids and leaf_weights differ in length")
        for kind, ids, leaf in (("true", tn, tl), ("false", fn, fl)):
            bound = np.where(leaf, n_leaves, n)
            if ((ids < 0) | (ids >= bound)).any():
                raise ExecutionError(f"{op}: a {kind} branch points outside the node/leaf list")
        # Interior nodes first, then the leaves, in one numbering.
        m = n + n_leaves
        is_leaf = np.zeros(m, dtype=bool)
        is_leaf[n:] = True
        pad_i = np.zeros(n_leaves, dtype=np.int64)
        missing = np.zeros(m, dtype=bool)
        mt = kw.get("nodes_missing_value_tracks_true")
        if mt is not None and len(mt):
            mt_arr = np.asarray(mt, dtype=np.int64)[:n]
            missing[: mt_arr.size] = mt_arr == 1
        members: dict[int, np.ndarray] = {}
        member_nodes = np.flatnonzero(modes == MEMBER)
        if member_nodes.size:
            mv = kw.get("membership_values")
            if mv is None:
                raise ExecutionError(f"{op}: BRANCH_MEMBER nodes need membership_values")
            mv = np.asarray(mv, dtype=np.float64).ravel()
            # Sets are listed in node order, each one ended by a NaN.
            ends = np.flatnonzero(np.isnan(mv))
            if ends.size < member_nodes.size:
                raise ExecutionError(f"{op}: membership_values has fewer sets than member nodes")
            starts = np.concatenate([[0], ends[:-1] + 1])
            for node, a, b in zip(member_nodes.tolist(), starts.tolist(), ends.tolist()):
                members[node] = mv[a:b]
        structure = TreeStructure(
            is_leaf=is_leaf,
            feature=np.concatenate([feat, pad_i]),
            threshold=np.concatenate([splits, np.zeros(n_leaves)]),
            mode=np.concatenate([modes, pad_i]).astype(np.int8),
            missing_true=missing,
            true_child=np.concatenate([np.where(tl, tn + n, tn), pad_i]),
            false_child=np.concatenate([np.where(fl, fn + n, fn), pad_i]),
            roots=np.asarray(kw["tree_roots"], dtype=np.int64),
            leaf_number=np.concatenate([np.full(n, -1, dtype=np.int64), np.arange(n_leaves)]),
            n_leaves=n_leaves,
            vote_leaf=np.arange(n_leaves, dtype=np.int64),
            vote_target=targets,
            vote_weight=weights,
            n_outputs=n_targets,
            members=members,
            threshold_is_double=splits_arr.dtype == np.float64,
        )
        return compile_ensemble(structure)

    return cached_compile(tuple(kw.get(n) for n in names) + (n_targets,), build)


@kernel("TreeEnsemble", domain=ML, since=5)
def tree_ensemble(x: np.ndarray, **kw: Any) -> np.ndarray:
    op = "TreeEnsemble"
    x = np.asarray(x)
    c = _compile_v5(kw)
    out = _finish_regression(
        c,
        _x_for_trees(x, op),
        _aggregate_name(int(kw.get("aggregate_function", 1))),
        None,
        transform_name(int(kw.get("post_transform", 0))),
        np.float64 if x.dtype == np.float64 else np.float32,
    )
    # The output has the input's element type (float, double or float16).
    return out.astype(x.dtype if x.dtype.kind == "f" else np.float32)
