"""Normalizations: BatchNormalization (all forms), Instance/Group/Layer/RMS normalization,
LpNormalization, MeanVarianceNormalization, LRN, and Dropout.

Statistics are computed in the stash precision (float32 unless the input is float64)
with whole-tensor reductions; the affine part is folded into one multiply-add.
Layer and RMS normalisation in float32 run the compiled row kernel (row_norm.py) when it
is there, and these numpy paths otherwise.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.model.dtypes import np_dtype
from onnxviz.runtime.kernels import chain_program, row_norm
from onnxviz.runtime.kernels._weight_cache import frozen
from onnxviz.runtime.kernels.nn_geometry import compute_dtype
from onnxviz.runtime.registry import KernelContext, kernel, specializer


def _stash(x: np.ndarray, stash_type: int | None = None) -> np.ndarray:
    """x in the precision statistics are computed in (stash_type 1 = float32)."""
    if stash_type is not None and stash_type != 1:
        target = np_dtype(stash_type)
        if target.kind == "f" and target.itemsize >= 4:
            return x.astype(target, copy=False)
    if x.dtype == np.float64 and stash_type is None:
        return x
    return x.astype(np.float32, copy=False)


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    return (1, -1) + (1,) * (x.ndim - 2)


def _param(v: np.ndarray, x: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
    """A per-channel (C,) or per-activation (C, D1, ...) parameter, broadcastable on x."""
    v = np.asarray(v).astype(dt, copy=False)
    if v.ndim <= 1 and v.size == (x.shape[1] if x.ndim > 1 else 1):
        return v.reshape(_channel_shape(x)) if x.ndim > 1 else v
    return v.reshape((1, *x.shape[1:]))


def _batch_norm_apply(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    epsilon: float,
) -> np.ndarray:
    dt = compute_dtype(x.dtype)
    xc = x.astype(dt, copy=False)
    a, b = _bn_factors(
        _param(scale, x, dt), _param(bias, x, dt), _param(mean, x, dt), _param(var, x, dt),
        dt.type(epsilon),
    )  # fmt: skip
    if a.size == (x.shape[1] if x.ndim > 1 else 0) and x.ndim > 2 and xc.flags.c_contiguous:
        y = _affine_per_channel(xc, a.reshape(-1), b.reshape(-1))
    elif a.size == (x.shape[1] if x.ndim > 1 else 0) and _affine_last_takes(xc, a):
        y = _affine_channels_last(xc, a.reshape(-1), b.reshape(-1))
    else:
        y = xc * a
        y += b
    return y.astype(x.dtype, copy=False)


def _bn_factors(
    scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Inference BatchNormalization's factor and offset, y = x * a + b."""
    a = scale / np.sqrt(var + epsilon)
    return a, bias - mean * a


# x * a[c] + b[c] as the compiled chain's program (native/_chain.c): a Mul and an Add by
# per-channel tables 0 and 1, each step numpy's float32 operation (two roundings, no
# fused multiply-add), so numpy's bits below.
_AFFINE_PROGRAM = chain_program.channel_step("Mul", True, 0) + chain_program.channel_step(
    "Add", True, 1
)


def _affine_run(
    x: np.ndarray, y: np.ndarray, a: np.ndarray, b: np.ndarray, plane: int, last: bool
) -> None:
    """y = x * a[c] + b[c] over two flat float32 buffers by the compiled chain (y may be
    x): element i's channel (i / plane) % C, or i % C when ``last`` (channels-last)."""
    assert chain_program.CHAIN is not None
    tables = (np.ascontiguousarray(a.reshape(-1)), np.ascontiguousarray(b.reshape(-1)))
    chain_program.CHAIN.run(x, y, _AFFINE_PROGRAM, (tables, a.size, plane, last))


def _affine_per_channel(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x * a[c] + b[c] for a C-contiguous (N, C, ...) x: float32 in one compiled pass
    (a standalone BatchNormalization of 64 x 56 x 56 values 105 -> 40 us a run,
    onnxruntime 28), else over (N*C, spatial) rows in cache-sized row blocks, so the add
    reads what the multiply just wrote from cache (about one memory pass, not two)."""
    n, c = x.shape[:2]
    if (
        chain_program.CHAIN is not None
        and x.dtype == np.float32
        and a.dtype == np.float32
        and x.size
    ):
        y = np.empty_like(x)
        _affine_run(x.reshape(-1), y.reshape(-1), a, b, x.size // (n * c), False)
        return y
    rows = x.reshape(n * c, -1)
    y = np.empty_like(x)
    out = y.reshape(n * c, -1)
    a_rows = np.tile(a, n)[:, None]
    b_rows = np.tile(b, n)[:, None]
    block = max(1, (512 * 1024) // max(rows.shape[1] * x.itemsize, 1))
    for r0 in range(0, n * c, block):
        r1 = min(r0 + block, n * c)
        np.multiply(rows[r0:r1], a_rows[r0:r1], out=out[r0:r1])
        out[r0:r1] += b_rows[r0:r1]
    return y


def _affine_last_takes(x: np.ndarray, a: np.ndarray) -> bool:
    """Whether x * a[c] + b[c] runs compiled over x's buffer laid out channels-last: a
    float32 (N, C, H, W) x (a channel Concat's or a conv chain's value, fusion_layout.py)
    that is one dense (N, H, W, C) buffer, the compiled chain built."""
    return (
        chain_program.CHAIN is not None
        and x.dtype == np.float32
        and a.dtype == np.float32
        and x.ndim == 4
        and x.size > 0
        and x.transpose(0, 2, 3, 1).flags.c_contiguous
    )


def _affine_channels_last(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`_affine_per_channel` over a channels-last x's buffer (element i's channel i % C),
    into an output laid out as x (empty_like): the same two operations per element, so
    the same values.  A DenseNet's BatchNormalization after each channels-last Concat
    took numpy's two strided passes, 157 us a node at 56 x 56."""
    y = np.empty_like(x)
    rows_x = x.transpose(0, 2, 3, 1).reshape(-1)
    rows_y = y.transpose(0, 2, 3, 1).reshape(-1)  # (views: empty_like kept x's layout)
    _affine_run(rows_x, rows_y, a, b, 1, True)
    return y


def _batch_stats(
    x: np.ndarray, per_activation: bool
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    xc = x.astype(compute_dtype(x.dtype), copy=False)
    axes = (0,) if per_activation else (0, *range(2, x.ndim))
    mean = xc.mean(axis=axes)
    var = xc.var(axis=axes)
    return mean, var, axes


@kernel("BatchNormalization", since=(1, 6, 7, 9), ctx=True)
def batch_norm_legacy(
    ctx: KernelContext,
    x: np.ndarray,
    scale: np.ndarray,
    b: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
    is_test: int | None = None,
    spatial: int = 1,
    consumed_inputs: list[int] | None = None,
) -> tuple[Any, ...]:
    # Opsets 1-6 say training vs test with is_test; 7 and 9 by how many outputs are asked for.
    training = (not is_test) if ctx.opset < 7 else ctx.n_outputs > 1
    if not training:
        return (_batch_norm_apply(x, scale, b, mean, var, epsilon),)
    per_activation = not spatial
    cur_mean, cur_var, _ = _batch_stats(x, per_activation)
    y = _batch_norm_apply(x, scale, b, cur_mean, cur_var, epsilon)
    shape = np.shape(mean)
    run_mean = np.asarray(mean) * momentum + cur_mean.reshape(shape) * (1 - momentum)
    run_var = np.asarray(var) * momentum + cur_var.reshape(shape) * (1 - momentum)
    dt = x.dtype
    return (
        y,
        run_mean.astype(dt),
        run_var.astype(dt),
        cur_mean.reshape(shape).astype(dt),
        cur_var.reshape(shape).astype(dt),
    )


@kernel("BatchNormalization", since=(14, 15))
def batch_norm(
    x: np.ndarray,
    scale: np.ndarray,
    b: np.ndarray,
    input_mean: np.ndarray,
    input_var: np.ndarray,
    *,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
    training_mode: int = 0,
) -> tuple[Any, ...]:
    if not training_mode:
        return (_batch_norm_apply(x, scale, b, input_mean, input_var, epsilon),)
    cur_mean, cur_var, _ = _batch_stats(x, False)
    y = _batch_norm_apply(x, scale, b, cur_mean, cur_var, epsilon)
    run_mean = input_mean * momentum + cur_mean.astype(input_mean.dtype) * (1 - momentum)
    run_var = input_var * momentum + cur_var.astype(input_var.dtype) * (1 - momentum)
    return y, run_mean.astype(input_mean.dtype), run_var.astype(input_var.dtype)


@specializer(batch_norm)
def _prepared_batch_norm(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs of an inference BatchNormalization whose scale, bias, mean and
    variance are float32 initializers of one value per channel: the per-channel factor
    and offset `_batch_norm_apply` computes from them, computed once, then its affine
    pass on a float32 C-contiguous (N, C, ...) input; anything else runs the kernel.  The
    same factor, offset and pass, so the same bits."""
    params = known[1:5]
    if attrs.get("training_mode") or n != 1 or len(params) != 4:
        return None
    if any(type(p) is not np.ndarray or p.dtype != np.float32 or p.ndim != 1 for p in params):
        return None
    c = params[0].size
    if any(p.size != c for p in params) or not all(frozen(p) for p in params):
        return None
    scale, bias, mean, var = params
    eps = np.float32(attrs.get("epsilon", 1e-5))
    a, b = _bn_factors(scale, bias, mean, var, eps)  # (_batch_norm_apply's, on the rows)
    kernel_call = functools.partial(batch_norm, **attrs)

    def call(x: Any, *rest: Any) -> Any:
        if (
            len(rest) != 4
            or rest[0] is not scale
            or rest[1] is not bias
            or rest[2] is not mean
            or rest[3] is not var
            or type(x) is not np.ndarray
            or x.dtype != np.float32
            or x.ndim < 3
            or x.shape[1] != c
            or not x.flags.c_contiguous
        ):
            return kernel_call(x, *rest)[0]
        return _affine_per_channel(x, a, b)

    return call


def _normalize(
    x: np.ndarray, axes: tuple[int, ...], epsilon: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x - mean) * inv_std over the trailing ``axes`` (x already in stash precision);
    also mean and inv_std with those axes kept as size 1.  Works on a (rows, cols) view:
    one pass each for the sum, the centring, the variance (einsum, no temporary) and the
    scaling."""
    first = axes[0]
    if axes != tuple(range(first, x.ndim)):
        raise ExecutionError(f"normalization axes {axes} must be trailing")
    kept = x.shape[:first] + (1,) * (x.ndim - first)
    cols = math.prod(x.shape[first:])  # Python ints: np.prod cost microseconds a call
    rows = math.prod(x.shape[:first])
    x2 = x.reshape(rows, cols)
    mean = np.add.reduce(x2, axis=1) / x.dtype.type(cols)
    centered = x2 - mean[:, None]
    var = np.einsum("ij,ij->i", centered, centered) / x.dtype.type(cols)
    inv_std = 1.0 / np.sqrt(var + x.dtype.type(epsilon))
    centered *= inv_std[:, None]
    return centered.reshape(x.shape), mean.reshape(kept), inv_std.reshape(kept)


@kernel("InstanceNormalization", since=(1, 6, 22))
def instance_norm(
    x: np.ndarray,
    scale: np.ndarray,
    b: np.ndarray,
    *,
    epsilon: float = 1e-5,
    consumed_inputs: list[int] | None = None,
) -> np.ndarray:
    xs = _stash(x)
    shape = _channel_shape(x)
    done = row_norm.normalize(xs, 2, epsilon) if x.ndim > 2 else None
    if done is not None:
        # Each channel's plane is one row of the compiled kernel (a torch GroupNorm's
        # export runs here on (N, groups, C/groups * H * W): 96 channels at 32 x 32 took
        # 178 us through numpy's passes, onnxruntime 63); the affine part after it, left
        # out where it is the identity, as that export's is.
        normed = done[0]
        if not _identity_affine(scale, b):
            _scale_shift_in_place(normed, scale.astype(xs.dtype), b.astype(xs.dtype), shape)
        return normed.astype(x.dtype, copy=False)
    normed, _, _ = _normalize(xs, tuple(range(2, x.ndim)), epsilon)
    _scale_shift_in_place(normed, scale.astype(xs.dtype), b.astype(xs.dtype), shape)
    return normed.astype(x.dtype, copy=False)


def _scale_shift_in_place(
    y: np.ndarray, scale: np.ndarray, b: np.ndarray, shape: tuple[int, ...]
) -> None:
    """y *= scale[c]; y += b[c] (per channel, ``shape`` the broadcast shape): one compiled
    pass for a float32 C-contiguous (N, C, ...) y of one value per channel (the chain's
    Mul and Add steps: numpy's two roundings, so its bits; an InstanceNormalization of
    64 x 56 x 56 values with a real affine part spent two numpy passes there), else
    numpy's two in-place passes."""
    c = y.shape[1] if y.ndim > 2 else 0
    if (
        chain_program.CHAIN is not None
        and y.dtype == np.float32
        and y.flags.c_contiguous
        and y.size
        and c
        and scale.size == c
        and b.size == c
    ):
        flat = y.reshape(-1)
        _affine_run(flat, flat, scale, b, y.size // (y.shape[0] * c), False)
        return
    y *= scale.reshape(shape)
    y += b.reshape(shape)


def _identity_affine(scale: np.ndarray, b: np.ndarray) -> bool:
    """Whether a per-channel scale and bias are all ones and all zeros: then x * 1 + 0
    is x but for the sign of a zero (-0 + 0 is +0), which the pass would only spend
    two numpy passes on.  Read-only operands (a model's constants) are answered from
    `_AFFINE` after the first call: the two checks cost 12 us, twice the norm of a
    64-channel 8 x 8 image."""
    frozen = not scale.flags.writeable and not b.flags.writeable
    if frozen:
        kept = _AFFINE.get((id(scale), id(b)))
        if kept is not None and kept[0] is scale and kept[1] is b:
            return kept[2]
    answer = scale.size <= 4096 and bool(np.all(scale == 1)) and bool(np.all(b == 0))
    if frozen:
        if len(_AFFINE) >= 256:
            _AFFINE.clear()
        _AFFINE[(id(scale), id(b))] = (scale, b, answer)  # (the objects: ids stay theirs)
    return answer


# _identity_affine's answers for read-only (scale, bias) pairs, by their ids.
_AFFINE: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, bool]] = {}


@kernel("GroupNormalization", since=(18, 21), ctx=True)
def group_norm(
    ctx: KernelContext,
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    *,
    epsilon: float = 1e-5,
    num_groups: int = 1,
    stash_type: int = 1,
) -> np.ndarray:
    n, c = x.shape[:2]
    if num_groups <= 0 or c % num_groups:
        raise ExecutionError(f"GroupNormalization: {c} channels not divisible by {num_groups}")
    xs = _stash(x, stash_type).reshape(n, num_groups, -1)
    done = row_norm.normalize(xs, 2, epsilon)  # each group one row (as InstanceNorm's)
    normed = done[0] if done is not None else _normalize(xs, (2,), epsilon)[0]
    normed = normed.astype(x.dtype, copy=False).reshape(x.shape)
    dt = compute_dtype(x.dtype)
    normed = normed.astype(dt, copy=False)
    if ctx.opset < 21 and scale.size == num_groups:
        # Opset 18: scale and bias are per group.
        s = np.repeat(scale.astype(dt), c // num_groups)
        b = np.repeat(bias.astype(dt), c // num_groups)
    else:
        s, b = scale.astype(dt), bias.astype(dt)
    y = normed * s.reshape(_channel_shape(x)) + b.reshape(_channel_shape(x))
    return y.astype(x.dtype, copy=False)


def _trailing_axes(x: np.ndarray, axis: int) -> tuple[int, ...]:
    r = x.ndim
    if not -r <= axis < r:
        raise ExecutionError(f"normalization axis {axis} out of range for rank {r}")
    return tuple(range(axis % r, r))


@kernel("LayerNormalization", since=17)
def layer_norm(
    x: np.ndarray,
    scale: np.ndarray,
    b: np.ndarray | None = None,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    axes = _trailing_axes(x, axis)
    xs = _stash(x, stash_type)
    done = row_norm.normalize(xs, axes[0], epsilon, gamma=scale, beta=b)
    if done is not None:
        return done[0].astype(x.dtype, copy=False), done[1], done[2]
    normed, mean, inv_std = _normalize(xs, axes, epsilon)
    normed *= scale.astype(xs.dtype, copy=False)
    if b is not None:
        normed += b.astype(xs.dtype, copy=False)
    return normed.astype(x.dtype, copy=False), mean, inv_std


@specializer(layer_norm)
def _prepared_layer_norm(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs with a constant scale and bias: the compiled row kernel's call, set
    up once (row_norm.specialize)."""
    if attrs.get("stash_type", 1) != 1:
        return None
    return row_norm.specialize(
        layer_norm, attrs, known, n, (0, 1, 2), epsilon=attrs.get("epsilon", 1e-5),
        rms=False, params=(1, 2, -1),
    )  # fmt: skip


@kernel("RMSNormalization", since=23)
def rms_norm(
    x: np.ndarray,
    scale: np.ndarray,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> np.ndarray:
    axes = _trailing_axes(x, axis)
    xs = _stash(x, stash_type)
    if x.dtype == np.float32:  # (narrower x: the numpy path rounds before the scale)
        done = row_norm.normalize(xs, axes[0], epsilon, rms=True, gamma=scale)
        if done is not None:
            return done[0].astype(x.dtype, copy=False)
    ms = np.mean(np.square(xs), axis=axes, keepdims=True)
    y = xs / np.sqrt(ms + xs.dtype.type(epsilon))
    y = y.astype(x.dtype, copy=False)
    dt = compute_dtype(x.dtype)
    return (y.astype(dt, copy=False) * scale.astype(dt)).astype(x.dtype, copy=False)


@kernel("LpNormalization", since=(1, 22))
def lp_normalization(x: np.ndarray, *, axis: int = -1, p: int = 2) -> np.ndarray:
    xc = x.astype(compute_dtype(x.dtype), copy=False)
    if p == 1:
        norm = np.sum(np.abs(xc), axis=axis, keepdims=True)
    elif p == 2:
        norm = np.sqrt(np.sum(np.square(xc), axis=axis, keepdims=True))
    else:
        raise ExecutionError(f"LpNormalization supports p = 1 or 2, got {p}")
    safe = np.where(norm == 0, 1, norm)
    y = np.where(norm == 0, 0, xc / safe)
    return y.astype(x.dtype, copy=False)


@kernel("MeanVarianceNormalization", since=(9, 13))
def mean_variance_normalization(x: np.ndarray, *, axes: list[int] | None = None) -> np.ndarray:
    ax = tuple(axes) if axes is not None else (0, 2, 3)
    xc = x.astype(compute_dtype(x.dtype), copy=False)
    mean = xc.mean(axis=ax, keepdims=True)
    variance = np.mean(np.square(xc), axis=ax, keepdims=True) - np.square(mean)
    y = (xc - mean) / (np.sqrt(variance) + xc.dtype.type(1e-9))
    return y.astype(x.dtype, copy=False)


@kernel("LRN", since=(1, 13))
def lrn(
    x: np.ndarray,
    *,
    alpha: float = 1e-4,
    beta: float = 0.75,
    bias: float = 1.0,
    size: int = 1,
) -> np.ndarray:
    xc = x.astype(compute_dtype(x.dtype), copy=False)
    c = x.shape[1]
    before = (size - 1) // 2
    after = size - 1 - before
    sq = np.square(xc)
    # Channel-window sums through a cumulative sum over zero-padded channels.
    widths = [(0, 0)] * x.ndim
    widths[1] = (before + 1, after)
    cum = np.cumsum(np.pad(sq, widths), axis=1)
    window = cum[:, size : size + c] - cum[:, 0:c]
    y = xc / (bias + (alpha / size) * window) ** beta
    return y.astype(x.dtype, copy=False)


def _dropout(
    x: np.ndarray,
    ratio: float,
    training: bool,
    draw: Any,
    mask_dtype: np.dtype[Any] | type,
) -> tuple[np.ndarray, np.ndarray]:
    if not training or ratio == 0:
        # Inference: x itself and an all-ones mask, as a read-only broadcast of one
        # value (the same values; nothing allocated): models write the mask output and
        # read it nowhere, and a fresh one of SqueezeNet's 512 x 13 x 13 cost its
        # Dropout 190 us a run, mostly the new pages' first touch.
        return x, np.broadcast_to(np.ones((), dtype=mask_dtype), x.shape)
    if not 0 <= ratio < 1:
        raise ExecutionError(f"Dropout ratio must be in [0, 1), got {ratio}")
    keep = draw(x.shape) >= ratio
    dt = compute_dtype(x.dtype)
    y = np.where(keep, x.astype(dt) / dt.type(1 - ratio), 0).astype(x.dtype)
    return y, keep.astype(mask_dtype)


@kernel("Dropout", since=(1, 6, 7, 10), ctx=True)
def dropout_legacy(
    ctx: KernelContext,
    x: np.ndarray,
    *,
    ratio: float = 0.5,
    is_test: int = 0,
    consumed_inputs: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    # Opsets 1 and 6 train unless is_test; 7 and 10 are the inference-time identity.
    training = ctx.opset < 7 and not is_test
    mask_dtype = np.bool_ if ctx.opset >= 10 else x.dtype
    # (ctx.rng only when it draws: making the generator costs ~100 us a run.)
    return _dropout(x, ratio, training, lambda shape: ctx.rng.random(shape), mask_dtype)


@kernel("Dropout", since=(12, 13, 22), ctx=True)
def dropout(
    ctx: KernelContext,
    x: np.ndarray,
    ratio: np.ndarray | None = None,
    training_mode: np.ndarray | None = None,
    *,
    seed: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
    training = training_mode is not None and bool(np.asarray(training_mode).reshape(-1)[0])
    if seed is not None:
        # A seeded node draws uniforms from MT19937 RandomState(seed), the stream the ONNX
        # backend test data were generated with, so seeded runs are reproducible anywhere.
        legacy = np.random.RandomState(seed)
        return _dropout(x, r, training, lambda shape: legacy.uniform(0, 1, shape), np.bool_)
    return _dropout(x, r, training, lambda shape: ctx.rng.random(shape), np.bool_)
