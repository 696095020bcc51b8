"""ai.onnx.ml SVMClassifier and SVMRegressor (libsvm "SVC" mode and liblinear mode).

The decision rules for two classes and the probability estimates (pairwise Platt
scaling + Wu/Lin/Weng coupling) follow libsvm, as onnxruntime does."""

from __future__ import annotations

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.ml_common import (
    apply_post_transform,
    as_batch,
    class_labels,
    float_input,
    logistic,
    probit,
    transform_name,
    transform_single_target,
)
from onnxviz.runtime.registry import kernel

ML = "ai.onnx.ml"
KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


def kernel_matrix(
    x: np.ndarray, vectors: np.ndarray, kernel_type: str, params: list[float] | None
) -> np.ndarray:
    """K[n, v] between rows of x and the support vectors."""
    gamma, coef0, degree = (list(params or []) + [0.0, 0.0, 0.0])[:3]
    kind = kernel_type.upper()
    if kind not in KERNELS:
        raise ExecutionError(f"unknown SVM kernel_type '{kernel_type}'")
    if kind == "RBF":
        # ||x - v||^2 = |x|^2 - 2 x.v + |v|^2, clipped at 0 against rounding.
        sq = (x * x).sum(axis=1)[:, None] - 2.0 * (x @ vectors.T) + (vectors * vectors).sum(axis=1)
        return np.exp(-gamma * np.maximum(sq, 0.0))
    dot = x @ vectors.T
    if kind == "LINEAR":
        return dot
    if kind == "POLY":
        return np.power(gamma * dot + coef0, degree)
    return np.tanh(gamma * dot + coef0)


def _input(op: str, x: np.ndarray) -> np.ndarray:
    return as_batch(float_input(np.asarray(x)), op).astype(np.float64)


def pairwise_coupling(r: np.ndarray, max_iter: int = 100) -> np.ndarray:
    """Class probabilities [N, k] from pairwise ones r[N, i, j] ~ P(i | i or j).

    Wu, Lin & Weng (2004), method 2, as in libsvm: a fixed-point iteration run on all rows
    at once; a row stops changing as soon as it has converged (as libsvm's loop breaks)."""
    n, k, _ = r.shape
    q = np.zeros((n, k, k))
    rt = np.swapaxes(r, 1, 2)  # rt[:, i, j] = r[:, j, i]
    off = ~np.eye(k, dtype=bool)
    diag = np.where(off, rt * rt, 0.0).sum(axis=2)
    q = -rt * r
    q[:, np.arange(k), np.arange(k)] = diag
    p = np.full((n, k), 1.0 / k)
    eps = 0.005 / k
    active = np.ones(n, dtype=bool)
    for _ in range(max_iter):
        qp = np.einsum("nij,nj->ni", q, p)
        pqp = (p * qp).sum(axis=1)
        active &= np.abs(qp - pqp[:, None]).max(axis=1) >= eps
        if not active.any():
            break
        idx = np.flatnonzero(active)
        qa, pa, qpa, pqpa = q[idx], p[idx], qp[idx], pqp[idx]
        for t in range(k):  # sequential over classes (k is small), vectorised over rows
            diff = (-qpa[:, t] + pqpa) / qa[:, t, t]
            pa[:, t] += diff
            scale = 1.0 + diff
            pqpa = (pqpa + diff * (diff * qa[:, t, t] + 2.0 * qpa[:, t])) / scale / scale
            qpa = (qpa + diff[:, None] * qa[:, t, :]) / scale[:, None]
            pa /= scale[:, None]
        p[idx] = pa
    return p


@kernel("SVMClassifier", domain=ML, since=1)
def svm_classifier(
    x: np.ndarray,
    *,
    coefficients: list[float] | None = None,
    support_vectors: list[float] | None = None,
    vectors_per_class: list[int] | None = None,
    rho: list[float] | None = None,
    prob_a: list[float] | None = None,
    prob_b: list[float] | None = None,
    kernel_type: str = "LINEAR",
    kernel_params: list[float] | None = None,
    classlabels_ints: list[int] | None = None,
    classlabels_strings: list[str] | None = None,
    post_transform: str = "NONE",
) -> tuple[np.ndarray, np.ndarray]:
    op = "SVMClassifier"
    labels, _ = class_labels(op, classlabels_strings, classlabels_ints)
    k = labels.size
    xs = _input(op, x)
    coef = np.asarray(coefficients or [], dtype=np.float64)
    rho_arr = np.asarray(rho or [0.0], dtype=np.float64)
    post = transform_name(post_transform)
    all_positive = bool((coef >= 0).all())
    per_class = np.asarray(vectors_per_class or [], dtype=np.int64)
    n_vectors = int(per_class.sum())

    if n_vectors == 0:
        # liblinear mode: one weight row per class, rho[0] as the common bias.
        if coef.size % k or coef.size // k != xs.shape[1]:
            raise ExecutionError(f"{op}: coefficients do not match {k} classes x features")
        scores = xs @ coef.reshape(k, -1).T + rho_arr[0]
        best = np.argmax(scores, axis=1)
        if k == 2:
            top = scores[np.arange(scores.shape[0]), best]
            if all_positive:
                best = np.where(top >= 0.5, 1, best)
            else:
                best = np.where(top > 0, 1, best)
        z = apply_post_transform(scores.astype(np.float32), post)
        return labels[best], np.asarray(z, dtype=np.float32)

    sv = np.asarray(support_vectors or [], dtype=np.float64)
    if sv.size % n_vectors or sv.size // n_vectors != xs.shape[1]:
        raise ExecutionError(f"{op}: support vectors do not match the input's feature count")
    if per_class.size != k:
        raise ExecutionError(f"{op}: vectors_per_class needs one entry per class")
    if coef.size != (k - 1) * n_vectors:
        raise ExecutionError(f"{op}: expected {(k - 1) * n_vectors} coefficients")
    kern = kernel_matrix(xs, sv.reshape(n_vectors, -1), kernel_type, kernel_params)
    dual = coef.reshape(k - 1, n_vectors)
    start = np.concatenate([[0], np.cumsum(per_class)])
    n_pairs = k * (k - 1) // 2
    if rho_arr.size < n_pairs:
        raise ExecutionError(f"{op}: rho needs {n_pairs} values")
    # One-vs-one decision values, pairs (i, j) with i < j in libsvm order.
    pair_scores = np.empty((xs.shape[0], n_pairs))
    votes = np.zeros((xs.shape[0], k), dtype=np.int64)
    pair_index = 0
    pairs: list[tuple[int, int]] = []
    for i in range(k - 1):  # over class pairs, not elements
        si = slice(start[i], start[i + 1])
        for j in range(i + 1, k):
            sj = slice(start[j], start[j + 1])
            s = kern[:, si] @ dual[j - 1, si] + kern[:, sj] @ dual[i, sj] + rho_arr[pair_index]
            pair_scores[:, pair_index] = s
            votes[:, i] += s > 0
            votes[:, j] += ~(s > 0)
            pairs.append((i, j))
            pair_index += 1

    have_proba = bool(prob_a) and bool(prob_b)
    if have_proba:
        a = np.asarray(prob_a, dtype=np.float64)
        b = np.asarray(prob_b, dtype=np.float64)
        if a.size < n_pairs or b.size < n_pairs:
            raise ExecutionError(f"{op}: prob_a and prob_b need {n_pairs} values")
        pij = 1.0 - logistic(pair_scores * a[:n_pairs] + b[:n_pairs])
        pij = np.clip(pij, 1e-7, 1 - 1e-7)
        r = np.zeros((xs.shape[0], k, k))
        ii = np.array([p[0] for p in pairs])
        jj = np.array([p[1] for p in pairs])
        r[:, ii, jj] = pij
        r[:, jj, ii] = 1.0 - pij
        probs = pairwise_coupling(r)
        # The label stays the one-vs-one vote (as libsvm's predict and onnxruntime do),
        # which can differ from the most probable class near ties.
        z = apply_post_transform(probs.astype(np.float32), post)
        return labels[np.argmax(votes, axis=1)], np.asarray(z, dtype=np.float32)

    best = np.argmax(votes, axis=1)
    if k == 2:
        s = pair_scores[:, 0].astype(np.float32)
        if post == "NONE":
            z = np.stack([-s, s], axis=1)
        elif post == "PROBIT":
            p = probit(s)
            z = np.stack([-p, p], axis=1)
        else:
            z = np.stack([1.0 - s, s], axis=1)
        return labels[best], np.asarray(z, dtype=np.float32)
    z = apply_post_transform(pair_scores.astype(np.float32), post)
    return labels[best], np.asarray(z, dtype=np.float32)


@kernel("SVMRegressor", domain=ML, since=1)
def svm_regressor(
    x: np.ndarray,
    *,
    coefficients: list[float] | None = None,
    support_vectors: list[float] | None = None,
    n_supports: int = 0,
    rho: list[float] | None = None,
    kernel_type: str = "LINEAR",
    kernel_params: list[float] | None = None,
    one_class: int = 0,
    post_transform: str = "NONE",
) -> np.ndarray:
    op = "SVMRegressor"
    xs = _input(op, x)
    coef = np.asarray(coefficients or [], dtype=np.float64)
    bias = float((rho or [0.0])[0])
    if n_supports > 0:
        sv = np.asarray(support_vectors or [], dtype=np.float64)
        if sv.size != n_supports * xs.shape[1] or coef.size != n_supports:
            raise ExecutionError(f"{op}: support vectors/coefficients do not match the input")
        y = kernel_matrix(xs, sv.reshape(n_supports, -1), kernel_type, kernel_params) @ coef
    else:
        if coef.size != xs.shape[1]:
            raise ExecutionError(f"{op}: {coef.size} coefficients for {xs.shape[1]} features")
        y = xs @ coef
    y = (y + bias).reshape(-1, 1)
    if one_class:
        y = np.where(y > 0, 1.0, -1.0)
    out = y.astype(np.float32)
    return np.asarray(transform_single_target(out, transform_name(post_transform)), np.float32)
