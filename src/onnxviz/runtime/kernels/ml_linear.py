"""ai.onnx.ml LinearClassifier and LinearRegressor."""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.ml_common import (
    apply_post_transform,
    as_batch,
    class_labels,
    float_input,
    transform_name,
    transform_single_target,
)
from onnxviz.runtime.registry import kernel

ML = "ai.onnx.ml"


def _weights(op: str, coefficients: list[float] | None, n_features: int) -> np.ndarray:
    coef = np.asarray(coefficients or [], dtype=np.float64)
    if coef.size == 0 or n_features == 0 or coef.size % n_features:
        raise ExecutionError(
            f"{op}: {coef.size} coefficients do not fit inputs with {n_features} features"
        )
    return coef.reshape(-1, n_features)


def _scores(op: str, x: np.ndarray, coefficients: Any, intercepts: Any) -> np.ndarray:
    x = as_batch(float_input(np.asarray(x)), op).astype(np.float64)
    w = _weights(op, coefficients, x.shape[1])
    scores = x @ w.T
    if intercepts:
        b = np.asarray(intercepts, dtype=np.float64)
        if b.size not in (1, w.shape[0]):
            raise ExecutionError(f"{op}: {b.size} intercepts for {w.shape[0]} score columns")
        scores = scores + b
    return scores


@kernel("LinearClassifier", domain=ML, since=1)
def linear_classifier(
    x: np.ndarray,
    *,
    coefficients: list[float] | None = None,
    intercepts: list[float] | None = None,
    classlabels_ints: list[int] | None = None,
    classlabels_strings: list[str] | None = None,
    post_transform: str = "NONE",
    multi_class: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    op = "LinearClassifier"
    labels, is_string = class_labels(op, classlabels_strings, classlabels_ints)
    scores = _scores(op, x, coefficients, intercepts)
    post = transform_name(post_transform)
    if scores.shape[1] == 1:
        # One score column: a binary classifier whose score is the positive class margin.
        s = scores[:, 0]
        positive = s > 0
        if labels.size == 2:
            label = np.where(positive, labels[1], labels[0])
            both = np.stack([-s, s], axis=1)
            z = apply_post_transform(both.astype(np.float32), post)
        else:
            pos, neg = ("1", "0") if is_string else (1, 0)
            label = np.where(positive, pos, neg)
            z = transform_single_target(scores.astype(np.float32), post)
        out = label.astype(object if is_string else np.int64)
        return out, np.asarray(z, dtype=np.float32)
    if scores.shape[1] != labels.size:
        raise ExecutionError(f"{op}: {scores.shape[1]} score columns for {labels.size} labels")
    best = np.argmax(scores, axis=1)
    z = apply_post_transform(scores.astype(np.float32), post)
    return labels[best], np.asarray(z, dtype=np.float32)


@kernel("LinearRegressor", domain=ML, since=1)
def linear_regressor(
    x: np.ndarray,
    *,
    coefficients: list[float] | None = None,
    intercepts: list[float] | None = None,
    targets: int = 1,
    post_transform: str = "NONE",
) -> np.ndarray:
    op = "LinearRegressor"
    scores = _scores(op, x, coefficients, intercepts)
    if scores.shape[1] != targets:
        raise ExecutionError(f"{op}: coefficients give {scores.shape[1]} targets, not {targets}")
    post = transform_name(post_transform)
    out = scores.astype(np.float32)
    if targets == 1:
        return np.asarray(transform_single_target(out, post), dtype=np.float32)
    return np.asarray(apply_post_transform(out, post), dtype=np.float32)
