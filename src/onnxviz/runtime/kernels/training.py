"""Optimizer kernels of the ai.onnx.preview.training domain: Adagrad, Adam, Momentum.

Each takes R (learning rate), T (update count) and then groups of tensors (values,
gradients, state...), and returns the updated groups, following the pseudo code of the
operator specs.  ``Gradient`` is not supported: it asks the runtime to differentiate a
graph, which an interpreter of forward kernels cannot do.
"""

from __future__ import annotations

import numpy as np

from onnxviz.runtime.kernels._tensor_common import fail
from onnxviz.runtime.registry import kernel

_DOMAIN = "ai.onnx.preview.training"


def _groups(tensors: tuple[np.ndarray, ...], n_groups: int, op: str) -> list[list[np.ndarray]]:
    if len(tensors) % n_groups:
        fail(f"{op}: {len(tensors)} tensors cannot form {n_groups} equal groups")
    k = len(tensors) // n_groups
    return [list(tensors[i * k : (i + 1) * k]) for i in range(n_groups)]


def _scalar(value: np.ndarray) -> float:
    return float(np.asarray(value).reshape(-1)[0])


@kernel("Adagrad", domain=_DOMAIN, since=1)
def adagrad(
    r: np.ndarray,
    t: np.ndarray,
    *tensors: np.ndarray,
    decay_factor: float = 0.0,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
) -> tuple[np.ndarray, ...]:
    xs, gs, hs = _groups(tensors, 3, "Adagrad")
    rate = _scalar(r) / (1 + _scalar(t) * decay_factor)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        g_reg = norm_coefficient * x + g
        h_new = h + g_reg * g_reg
        new_x.append((x - rate * g_reg / (np.sqrt(h_new) + epsilon)).astype(x.dtype))
        new_h.append(h_new.astype(h.dtype))
    return (*new_x, *new_h)


@kernel("Adam", domain=_DOMAIN, since=1)
def adam(
    r: np.ndarray,
    t: np.ndarray,
    *tensors: np.ndarray,
    alpha: float = 0.9,
    beta: float = 0.999,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
    norm_coefficient_post: float = 0.0,
) -> tuple[np.ndarray, ...]:
    xs, gs, vs, hs = _groups(tensors, 4, "Adam")
    step = _scalar(t)
    rate = _scalar(r)
    if step > 0:
        rate = rate * np.sqrt(1 - beta**step) / (1 - alpha**step)
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        g_reg = norm_coefficient * x + g
        v_new = alpha * v + (1 - alpha) * g_reg
        h_new = beta * h + (1 - beta) * g_reg * g_reg
        x_new = x - rate * v_new / (np.sqrt(h_new) + epsilon)
        new_x.append(((1 - norm_coefficient_post) * x_new).astype(x.dtype))
        new_v.append(v_new.astype(v.dtype))
        new_h.append(h_new.astype(h.dtype))
    return (*new_x, *new_v, *new_h)


@kernel("Momentum", domain=_DOMAIN, since=1)
def momentum(
    r: np.ndarray,
    t: np.ndarray,
    *tensors: np.ndarray,
    alpha: float,
    beta: float,
    mode: str,
    norm_coefficient: float,
) -> tuple[np.ndarray, ...]:
    if mode not in ("standard", "nesterov"):
        fail(f"Momentum: unknown mode {mode!r}")
    xs, gs, vs = _groups(tensors, 3, "Momentum")
    rate = _scalar(r)
    beta_adj = beta if _scalar(t) > 0 else 1.0
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        g_reg = norm_coefficient * x + g
        v_new = alpha * v + beta_adj * g_reg
        direction = v_new if mode == "standard" else g_reg + alpha * v_new
        new_x.append((x - rate * direction).astype(x.dtype))
        new_v.append(v_new.astype(v.dtype))
    return (*new_x, *new_v)
