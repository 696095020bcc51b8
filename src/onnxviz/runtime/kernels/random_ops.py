"""Random generators: RandomNormal(Like), RandomUniform(Like), Bernoulli, Multinomial.

Values cannot match other runtimes (each has its own generator); shapes, dtypes and
distributions do.  Without a ``seed`` attribute the session's generator (``ctx.rng``) is
used, so a session seeded once is reproducible; with a ``seed`` the node gets its own
generator built from that seed, so the node gives the same values on every run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxviz.runtime.kernels._tensor_common import fail, np_dtype
from onnxviz.runtime.registry import KernelContext, kernel

_VERSIONS = (1, 22)


def _generator(ctx: KernelContext, seed: float | None) -> np.random.Generator:
    if seed is None:
        return ctx.rng
    # The seed is a float attribute; its exact bit pattern keys the generator.
    return np.random.default_rng(int(np.float64(seed).view(np.uint64)))


def _float_out(values: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    if dtype.kind not in "fV" and dtype.name not in ("bfloat16",):
        fail(f"random output type must be floating point, got {dtype}")
    return values.astype(dtype)


def _below(high: float, dtype: np.dtype[Any]) -> np.ndarray:
    """The largest value of ``dtype`` strictly below ``high``."""
    top = np.array(high, dtype=dtype)
    if float(top) < high:
        return top
    if dtype.kind == "f":
        return np.nextafter(top, np.array(-np.inf, dtype=dtype))
    # ml_dtypes floats (bfloat16, ...): step the bit pattern one unit towards -inf.
    unsigned = np.uint8 if dtype.itemsize == 1 else np.uint16
    bits = top.view(unsigned).astype(np.int64)
    if high == 0:  # just below zero: sign bit plus the smallest magnitude
        bits = np.array(1 << (8 * dtype.itemsize - 1) | 1, dtype=np.int64)
    else:
        bits = bits + (-1 if high > 0 else 1)
    return bits.astype(unsigned).view(dtype)


def _uniform_out(values: np.ndarray, dtype: np.dtype[Any], high: float) -> np.ndarray:
    """Uniform draws in [low, high): rounding to a narrow type must not reach ``high``."""
    out = _float_out(values, dtype)
    if out.size and float(out.max()) >= high:
        out = np.minimum(out, _below(high, dtype))
    return out


@kernel("RandomNormal", since=_VERSIONS, ctx=True)
def random_normal(
    ctx: KernelContext,
    shape: list[int],
    dtype: int = 1,
    mean: float = 0.0,
    scale: float = 1.0,
    seed: float | None = None,
) -> np.ndarray:
    values = _generator(ctx, seed).normal(mean, scale, size=tuple(shape))
    return _float_out(values, np_dtype(dtype))


@kernel("RandomNormalLike", since=_VERSIONS, ctx=True)
def random_normal_like(
    ctx: KernelContext,
    data: np.ndarray,
    dtype: int | None = None,
    mean: float = 0.0,
    scale: float = 1.0,
    seed: float | None = None,
) -> np.ndarray:
    out_dtype = data.dtype if dtype is None else np_dtype(dtype)
    values = _generator(ctx, seed).normal(mean, scale, size=data.shape)
    return _float_out(values, out_dtype)


@kernel("RandomUniform", since=_VERSIONS, ctx=True)
def random_uniform(
    ctx: KernelContext,
    shape: list[int],
    dtype: int = 1,
    low: float = 0.0,
    high: float = 1.0,
    seed: float | None = None,
) -> np.ndarray:
    values = _generator(ctx, seed).uniform(low, high, size=tuple(shape))
    return _uniform_out(values, np_dtype(dtype), high)


@kernel("RandomUniformLike", since=_VERSIONS, ctx=True)
def random_uniform_like(
    ctx: KernelContext,
    data: np.ndarray,
    dtype: int | None = None,
    low: float = 0.0,
    high: float = 1.0,
    seed: float | None = None,
) -> np.ndarray:
    out_dtype = data.dtype if dtype is None else np_dtype(dtype)
    values = _generator(ctx, seed).uniform(low, high, size=data.shape)
    return _uniform_out(values, out_dtype, high)


@kernel("Bernoulli", since=(15, 22), ctx=True)
def bernoulli(
    ctx: KernelContext, probs: np.ndarray, dtype: int | None = None, seed: float | None = None
) -> np.ndarray:
    out_dtype = probs.dtype if dtype is None else np_dtype(dtype)
    draws = _generator(ctx, seed).random(size=probs.shape) < probs.astype(np.float64)
    return draws.astype(out_dtype)


@kernel("Multinomial", since=(7, 22), ctx=True)
def multinomial(
    ctx: KernelContext,
    logits: np.ndarray,
    dtype: int = 6,
    sample_size: int = 1,
    seed: float | None = None,
) -> np.ndarray:
    if logits.ndim != 2:
        fail(f"Multinomial: input must be [batch, classes], got shape {list(logits.shape)}")
    out_dtype = np_dtype(dtype)
    if out_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        fail(f"Multinomial: output type must be int32 or int64, got {out_dtype}")
    batch, classes = logits.shape
    z = logits.astype(np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    cdf = np.cumsum(z, axis=1)
    cdf /= cdf[:, -1:]
    u = _generator(ctx, seed).random(size=(batch, sample_size))
    # One searchsorted over all rows at once: row r's CDF is shifted into [r, r + 1].
    offsets = np.arange(batch, dtype=np.float64)[:, None]
    flat = (cdf + offsets).reshape(-1)
    pos = np.searchsorted(flat, (u + offsets).reshape(-1), side="right").reshape(batch, -1)
    samples = np.clip(pos - np.arange(batch)[:, None] * classes, 0, classes - 1)
    return samples.astype(out_dtype)
