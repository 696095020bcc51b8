"""Losses: NegativeLogLikelihoodLoss (12, 13, 22) and SoftmaxCrossEntropyLoss (12, 13)."""

from __future__ import annotations

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.nn_geometry import compute_dtype
from onnxviz.runtime.registry import kernel


def _nll(
    log_prob: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None,
    ignore_index: int | None,
    reduction: str,
) -> np.ndarray:
    """Weighted NLL of log-probabilities (N, C, ...) at integer targets (N, ...)."""
    if reduction not in ("none", "sum", "mean"):
        raise ExecutionError(f"loss: unknown reduction '{reduction}'")
    c = log_prob.shape[1]
    t = np.asarray(target).astype(np.int64)
    ignored = t == ignore_index if ignore_index is not None else np.zeros(t.shape, dtype=bool)
    safe = np.where(ignored, 0, t)
    if np.any((safe < 0) | (safe >= c)):
        raise ExecutionError(f"loss: target values must be in [0, {c}) or ignore_index")
    picked = np.take_along_axis(log_prob, safe[:, None], axis=1)[:, 0]
    w = np.ones(c, dtype=log_prob.dtype) if weight is None else weight.astype(log_prob.dtype)
    sample_w = np.where(ignored, 0, w[safe]).astype(log_prob.dtype)
    loss = -picked * sample_w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum(), dtype=log_prob.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(loss.sum() / sample_w.sum(), dtype=log_prob.dtype)


@kernel("NegativeLogLikelihoodLoss", since=(12, 13, 22))
def negative_log_likelihood_loss(
    x: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None = None,
    *,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> np.ndarray:
    dt = compute_dtype(x.dtype)
    loss = _nll(x.astype(dt, copy=False), target, weight, ignore_index, reduction)
    return loss.astype(x.dtype)


@kernel("SoftmaxCrossEntropyLoss", since=(12, 13))
def softmax_cross_entropy_loss(
    scores: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> tuple[np.ndarray, np.ndarray]:
    dt = compute_dtype(scores.dtype)
    s = scores.astype(dt, copy=False)
    shifted = s - np.max(s, axis=1, keepdims=True)
    log_prob = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    loss = _nll(log_prob, labels, weights, ignore_index, reduction)
    return loss.astype(scores.dtype), log_prob.astype(scores.dtype)
