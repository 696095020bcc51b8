"""Helpers shared by the ai.onnx.ml kernels: score post-transforms, class labels, input checks.

The ONNX-ML specs leave several details open (how a binary classifier with one score column
fills its two probability columns, which transforms apply to a single target, ...).  Where
they do, these helpers follow what onnxruntime does, because every exporter (skl2onnx,
onnxmltools) is validated against it; each such choice is commented where it is made.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError

POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def transform_name(value: Any) -> str:
    """post_transform as a name: the string attributes of the old ops or the int enum of
    TreeEnsemble (0 NONE, 1 SOFTMAX, 2 LOGISTIC, 3 SOFTMAX_ZERO, 4 PROBIT)."""
    if isinstance(value, (int, np.integer)):
        if not 0 <= int(value) < len(POST_TRANSFORMS):
            raise ExecutionError(f"unknown post_transform {value}")
        return POST_TRANSFORMS[int(value)]
    name = str(value).upper()
    if name not in POST_TRANSFORMS:
        raise ExecutionError(f"unknown post_transform '{value}'")
    return name


def logistic(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def softmax_rows(x: np.ndarray) -> np.ndarray:
    shifted = x - np.max(x, axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=-1, keepdims=True)


def softmax_zero_rows(x: np.ndarray) -> np.ndarray:
    """Softmax that leaves (near-)zero scores at zero: a zero means "no vote", not exp(0)."""
    vmax = np.max(x, axis=-1, keepdims=True)
    nonzero = np.abs(x) > 1e-7
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.where(nonzero, np.exp(x - vmax), x * np.exp(-vmax))
        total = np.sum(np.where(nonzero, e, 0), axis=-1, keepdims=True)
        return e / total


def probit(x: np.ndarray) -> np.ndarray:
    """sqrt(2) * erfinv(2x - 1) with Winitzki's closed-form erfinv (a = 0.147).

    onnxruntime evaluates PROBIT with this approximation in float32 (relative error ~2e-3,
    more near x = 0.5 where 1 - y*y cancels); using the same formula and precision keeps
    our scores equal to the ones models were validated with."""
    f32 = np.float32
    y = f32(2.0) * np.asarray(x, dtype=f32) - f32(1.0)
    sign = np.where(y < 0, f32(-1.0), f32(1.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        ln = np.log((f32(1.0) - y) * (f32(1.0) + y))
        a = f32(0.147)
        v = f32(2.0) / (f32(3.14159) * a) + f32(0.5) * ln
        inner = -v + np.sqrt(v * v - ln / a)
        return (f32(1.41421356) * sign * np.sqrt(inner)).astype(f32)


def apply_post_transform(scores: np.ndarray, name: str) -> np.ndarray:
    """Apply a post_transform along the last axis (scores of one row)."""
    if name == "NONE":
        return scores
    if name == "LOGISTIC":
        return logistic(scores)
    if name == "SOFTMAX":
        return softmax_rows(scores)
    if name == "SOFTMAX_ZERO":
        return softmax_zero_rows(scores)
    return probit(scores)


def transform_single_target(scores: np.ndarray, name: str) -> np.ndarray:
    """Post-transform of a one-column score (regressors with one target).

    onnxruntime applies only PROBIT here (softmax over one value is meaningless and its
    regressors skip LOGISTIC as well); exporters rely on that, so we do the same."""
    return probit(scores) if name == "PROBIT" else scores


def as_batch(x: np.ndarray, op: str) -> np.ndarray:
    """The input as [N, C]: 1-D is one row (the ML ops' convention), 0-D is rejected."""
    x = np.asarray(x)
    if x.ndim == 0:
        raise ExecutionError(f"{op}: input must have at least one dimension")
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim > 2:
        return x.reshape(x.shape[0], -1)
    return x


def class_labels(
    op: str, strings: list[str] | None, ints: list[int] | None
) -> tuple[np.ndarray, bool]:
    """(labels array, is_string) from classlabels_strings / classlabels_int64s|ints."""
    if strings:
        return np.array(strings, dtype=object), True
    if ints:
        return np.asarray(ints, dtype=np.int64), False
    raise ExecutionError(f"{op}: one of the classlabels_* attributes must be given")


def float_input(x: np.ndarray) -> np.ndarray:
    """Numeric input as float32 (what the ML ops compute in); float64 stays float64."""
    if x.dtype in (np.float32, np.float64):
        return x
    if x.dtype.kind in "iubf":
        return x.astype(np.float32)
    raise ExecutionError(f"unsupported input element type {x.dtype}")
