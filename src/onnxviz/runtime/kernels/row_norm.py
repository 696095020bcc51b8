"""float32 layer and RMS normalisation over trailing axes through the compiled kernel
(native/_norm.c): one read and one write of each row where the numpy paths make 5-8
passes.  LayerNormalization, RMSNormalization, the com.microsoft (Skip)(Simplified)
LayerNormalization ops and the written-out layer norm (fusion_layernorm.py) call
`normalize` first and run their numpy path when it returns None: compiled kernels off
(ONNXVIZ_NATIVE=off) or not built, not float32, or a gamma/beta/bias that is not one
value per normalised element.

The kernel is within float32 rounding of the exact result, relative to the output's own
size whatever the row's offset (_norm.c's header has the bound); the numpy paths round
differently, so a stepped run and an unwatched one agree bit for bit where both call the
same op kernel, and within rounding where the stepped run is a written-out chain.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels.dense import dense
from onnxviz.runtime.registry import RUNTIME

# The compiled module, None when compiled kernels are off or not built.
_NORM = native.load("norm")

_F32 = np.dtype(np.float32)
# epsilon -> epsilon rounded to float32 (a model has a few; np.float32 costs ~0.3 us).
_EPS: dict[float, float] = {}


def module() -> Any:
    """The compiled row norm module, or None (kernels off or not built)."""
    return _NORM


def enabled() -> bool:
    return _NORM is not None


def _per_element(p: Any, x: np.ndarray, axis: int, cols: int) -> np.ndarray | None:
    """``p`` as ``cols`` contiguous float32 values, one per normalised element, or None
    when it is not that (it would broadcast along a normalised axis or over the rows, or
    grow the result's rank)."""
    if type(p) is not np.ndarray or p.size != cols or p.dtype.kind != "f" or p.ndim > x.ndim:
        return None
    trailing = x.shape[axis:]
    if p.dtype == _F32 and p.flags.c_contiguous and p.shape[-1:] == trailing[-1:] == (cols,):
        return p  # the common case as it is: the kernel reads any contiguous shape
    if p.shape != trailing:
        lead = max(p.ndim - len(trailing), 0)
        if any(d != 1 for d in p.shape[:lead]):
            return None
        try:  # of equal size, a shape that broadcasts to trailing is trailing up to 1s
            if np.broadcast_shapes(p.shape[lead:], trailing) != trailing:
                return None
        except ValueError:
            return None
    return np.ascontiguousarray(p.reshape(-1), dtype=_F32)


def normalize(
    x: np.ndarray,
    axis: int,
    epsilon: float,
    *,
    rms: bool = False,
    gamma: Any = None,
    beta: Any = None,
    skip: Any = None,
    bias: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None:
    """(y, mean, inv_std, total) for float32 ``x`` normalised over its axes from
    ``axis`` (non-negative) on; mean and inv_std keep those axes as size 1 (mean is 0
    for rms), total is (x + skip) + bias when a skip or bias is given (else None).
    epsilon is rounded to float32 first, as the numpy paths do.  None when the kernel
    cannot take the call (the caller runs its numpy path)."""
    module = _NORM
    if module is None or type(x) is not np.ndarray or x.dtype != _F32 or not x.size:
        return None
    cols = math.prod(x.shape[axis:])
    if cols < 1:
        return None
    g = b = bi = s = None
    if gamma is not None and (g := _per_element(gamma, x, axis, cols)) is None:
        return None
    if beta is not None and (b := _per_element(beta, x, axis, cols)) is None:
        return None
    if bias is not None and (bi := _per_element(bias, x, axis, cols)) is None:
        return None
    if skip is not None:
        if type(skip) is not np.ndarray or skip.dtype != _F32:
            return None
        if skip.shape != x.shape:
            try:
                skip = np.broadcast_to(skip, x.shape)
            except ValueError:
                return None  # the numpy path says what does not broadcast
        s = dense(skip)
    src = dense(x)  # (a permuted view, NHWC before a ConvNeXt LayerNorm: by tiles)
    eps = float32_epsilon(epsilon)
    total_too = s is not None or bi is not None
    return _rows(module, src, axis, cols, eps, rms, g, b, s, bi, total_too)


def float32_epsilon(epsilon: float) -> float:
    """``epsilon`` rounded to float32, as the numpy paths round it (kept per value)."""
    eps = _EPS.get(epsilon)
    if eps is None:
        eps = float(np.float32(epsilon))
        if len(_EPS) < 64:  # (a NaN epsilon never matches itself: keep the cache small)
            _EPS[epsilon] = eps
    return eps


def _rows(
    module: Any, src: np.ndarray, axis: int, cols: int, eps: float, rms: bool,
    g: Any, b: Any, s: Any, bi: Any, total_too: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:  # fmt: skip
    """The kernel's call on the C-contiguous float32 ``src`` with its checked rows:
    (y, mean, inv_std, total) in fresh arrays (total only when ``total_too``)."""
    shape = src.shape
    kept = shape[:axis] + (1,) * (len(shape) - axis)
    y = np.empty(shape, _F32)
    mean = np.empty(kept, _F32)
    inv_std = np.empty(kept, _F32)
    total = np.empty(shape, _F32) if total_too else None
    module.norm(src, y, cols, eps, rms, g, b, s, bi, total, mean, inv_std)
    return y, mean, inv_std, total


def with_constants(
    epsilon: float,
    *,
    rms: bool,
    gamma: Any,
    beta: Any = None,
    bias: Any = None,
    skip: bool = False,
) -> Any:
    """For a node whose gamma, beta and bias are constants (1-D float32 rows, or None):
    a call ``(x, skip) -> (y, mean, inv_std, total)`` (or ``x -> ...`` without a skip)
    normalising float32 ``x`` over its last axis with those rows, which returns None
    where `normalize` would not run or a row's length differs.  The checks and the
    conversions `normalize` makes on every call are made here once (a decoder's norms
    are on a few rows, where they were half of a 5 us call).  The same kernel call, so
    the same numbers.  None when the compiled kernel is off or the rows are not plain."""
    module = _NORM
    if module is None:
        return None
    params = [p for p in (gamma, beta, bias) if p is not None]
    if any(
        type(p) is not np.ndarray or p.dtype != _F32 or p.ndim != 1 or not p.flags.c_contiguous
        for p in params
    ):
        return None
    cols = gamma.shape[0]
    if cols < 1 or any(p.shape[0] != cols for p in params):
        return None
    eps = float(np.float32(epsilon))
    total_too = skip or bias is not None

    def run(x: Any, s: Any = None) -> tuple[Any, ...] | None:
        if (
            type(x) is not np.ndarray
            or x.dtype != _F32
            or not x.ndim
            or not x.size
            or x.shape[-1] != cols
            or not x.flags.c_contiguous
        ):
            return None
        if skip and (
            type(s) is not np.ndarray
            or s.dtype != _F32
            or s.shape != x.shape
            or not s.flags.c_contiguous
        ):
            return None
        return _rows(module, x, x.ndim - 1, cols, eps, rms, gamma, beta, s, bias, total_too)

    return run


def specialize(
    kernel: Any,
    attrs: dict[str, Any],
    known: tuple[Any, ...],
    n_outputs: int,
    picks: tuple[int, ...],
    *,
    epsilon: float,
    rms: bool,
    skip: bool = False,
    params: tuple[int, int, int] = (1, -1, -1),
) -> Any:
    """The specialized call (registry.specializer) of a norm op over the last axis whose
    gamma, beta and bias (the inputs at positions ``params``, -1 where the op has none)
    are constants: `with_constants`' call, the op's outputs being ``picks`` of (y, mean,
    inv_std, total).  x's the first input, the skip the second when ``skip``.  The
    kernel runs whatever the call does not take (another gamma: an initializer a feed
    overrides; another dtype, a broadcast skip, compiled kernels off)."""
    if attrs.get("axis", -1) != -1 or n_outputs > len(picks):
        return None
    held = [(i, known[i]) for i in params if 0 <= i < len(known)]
    if any(v is RUNTIME for _, v in held):
        return None
    by_role = [known[i] if 0 <= i < len(known) else None for i in params]
    rows = with_constants(
        epsilon, rms=rms, gamma=by_role[0], beta=by_role[1], bias=by_role[2], skip=skip
    )
    if by_role[0] is None or rows is None:
        return None
    fallback = functools.partial(kernel, **attrs)
    picks = picks[:n_outputs]
    single = n_outputs == 1

    def call(*ins: Any) -> Any:
        for i, v in held:
            if ins[i] is not v:
                return fallback(*ins)
        done = rows(ins[0], ins[1]) if skip else rows(ins[0])
        if done is None:
            return fallback(*ins)
        if single:
            return done[0]
        return [done[k] for k in picks]

    # The same call in C from the node loop (native/_norm.c's `held`): the checks above,
    # the outputs the node has (not the statistics nobody asked for) and the rows, the
    # same kernel, so the same numbers; what it does not take goes to `call`.
    gamma, beta, bias = by_role
    assert gamma is not None  # checked above
    return _NORM.held(  # type: ignore[union-attr]  # not None: `rows` is a call
        gamma.shape[0], float(np.float32(epsilon)), rms, gamma, beta, bias, skip,
        tuple(held), tuple(picks), single, call, np.ndarray, np.empty, _F32,
    )  # fmt: skip
