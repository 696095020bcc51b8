"""com.microsoft contrib ops that exporters and onnxruntime's transformer optimizer emit:
Gelu, FastGelu, BiasGelu, QuickGelu, BiasAdd, FusedMatMul and the fused normalisations
(SkipLayerNormalization, SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization,
LayerNormalization).

These ops have no ONNX schema, so the attribute defaults are written here (as onnxruntime
documents them).  Half-precision inputs are computed in float32 and rounded once.  The
float32 normalisations run the compiled row kernel (row_norm.py) when it is there."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels import chain_program, row_norm
from onnxviz.runtime.kernels._weight_cache import frozen
from onnxviz.runtime.kernels.contrib_common import standard_kernel
from onnxviz.runtime.kernels.math_activation import GELU_ERF, gelu_erf_in_place
from onnxviz.runtime.registry import kernel, specialized_outputs, specializer

MS = "com.microsoft"


def _wide(x: np.ndarray) -> np.ndarray:
    """float32 for half/bfloat16 inputs, the array itself otherwise."""
    x = np.asarray(x)
    return x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    """x * (1 + erf(x / sqrt 2)) / 2 by the Gelu kernel (opset 20's: one compiled pass
    for float32, where these steps were five numpy passes; a tiny BERT's BiasGelu on
    4 x 64 values took 6.6 us).  Its steps multiply by 0.5 last, which is exact, so
    the result is that of 0.5 * x first."""
    return standard_kernel("Gelu", 20)(x)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    t = x.dtype.type
    inner = t(math.sqrt(2.0 / math.pi)) * (x + t(0.044715) * x * x * x)
    return t(0.5) * x * (t(1.0) + np.tanh(inner))


@kernel("Gelu", domain=MS, since=1)
def ms_gelu(x: np.ndarray) -> np.ndarray:
    # (the Gelu kernel's result is fresh: no second copy for the dtype it already has)
    return _gelu_erf(_wide(x)).astype(np.asarray(x).dtype, copy=False)


@specializer(ms_gelu)
def _held_ms_gelu(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs: the Gelu kernel's compiled pass held in C from the node loop, as
    opset 20's Gelu node holds it (a float32 input: the kernel's program, so its bits);
    any other call the kernel."""
    chain = chain_program.CHAIN
    if chain is None:
        return None
    return chain.held(GELU_ERF, (), 1, ms_gelu, np.ndarray, np.empty_like)


@kernel("BiasGelu", domain=MS, since=1)
def bias_gelu(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # The sum is a fresh array: the Gelu pass runs over it in place, where the kernel's
    # own output and a copy for the dtype cost a BERT-tiny's 32 x 512 values a third of
    # their 30 us.  The same steps, so the same bits.
    total = np.add(_wide(a), _wide(b))
    if not gelu_erf_in_place(total):
        total = _gelu_erf(total)
    return total.astype(np.asarray(a).dtype, copy=False)


@specializer(bias_gelu)
def _specialize_bias_gelu(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs of a BiasGelu whose bias is a float32 initializer, on a float32
    input: the kernel's steps (the sum, then the compiled Gelu pass over it in place)
    without its Python layers; any other call runs the kernel.  The same steps, so the
    same bits; a tiny BERT's 4 x 128 values took 2.8 us through the kernel."""
    b0 = known[1] if len(known) == 2 else None
    chain = chain_program.CHAIN
    if chain is None or type(b0) is not np.ndarray or b0.dtype != np.float32 or not frozen(b0):
        return None
    run, add, f32 = chain.run, np.add, np.dtype(np.float32)

    def call(a: Any, b: Any) -> Any:
        if b is not b0 or type(a) is not np.ndarray or a.dtype != f32:
            return bias_gelu(a, b)
        total = add(a, b0)
        if not total.flags.c_contiguous:  # (numpy's sum of a strided a keeps its order)
            return bias_gelu(a, b)
        run(total, total, GELU_ERF)
        return total

    return call


@kernel("FastGelu", domain=MS, since=1)
def fast_gelu(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    v = _wide(x)
    if bias is not None:
        v = v + _wide(bias)
    return _gelu_tanh(v).astype(np.asarray(x).dtype)


@kernel("QuickGelu", domain=MS, since=1)
def quick_gelu(x: np.ndarray, *, alpha: float = 1.702) -> np.ndarray:
    v = _wide(x)
    t = v.dtype.type
    with np.errstate(over="ignore"):
        out = v / (t(1.0) + np.exp(-t(alpha) * v))
    return out.astype(np.asarray(x).dtype)


@kernel("BiasAdd", domain=MS, since=1)
def bias_add(x: np.ndarray, bias: np.ndarray, skip: np.ndarray) -> np.ndarray:
    return (_wide(x) + _wide(bias) + _wide(skip)).astype(np.asarray(x).dtype)


def _batch_transpose(a: np.ndarray, trans_batch: int, trans: int) -> np.ndarray:
    """FusedMatMul operand layout: transBatch moves dimension 0 behind the batch dimensions
    ([d0, b1..bk, m, n] -> [b1..bk, d0, n] read as the matrix [.., m', n]); trans swaps the
    two matrix dimensions."""
    if a.ndim < 2:
        return a
    r = a.ndim
    if trans_batch and r > 2:
        if trans:
            perm = [*range(1, r - 1), r - 1, 0]
        else:
            perm = [*range(1, r - 1), 0, r - 1]
        return np.transpose(a, perm)
    if trans:
        return np.swapaxes(a, -1, -2)
    return a


@kernel("FusedMatMul", domain=MS, since=1)
def fused_matmul(
    a: np.ndarray,
    b: np.ndarray,
    *,
    alpha: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    transBatchA: int = 0,
    transBatchB: int = 0,
) -> np.ndarray:
    dtype = np.asarray(a).dtype
    aa = _batch_transpose(_wide(a), transBatchA, transA)
    bb = _batch_transpose(_wide(b), transBatchB, transB)
    try:
        out = np.matmul(aa, bb)
    except ValueError as exc:
        raise ExecutionError(f"FusedMatMul: {exc}") from None
    if alpha != 1.0:
        out = out * out.dtype.type(alpha)
    return out.astype(dtype)


def _mean(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``x.mean(axis=axes, keepdims=True)``, bit for bit, without numpy's Python-level
    mean (a few microseconds per call, most of a small normalisation): the same pairwise
    sum, divided by the count in x's own precision, which rounds like numpy's float64
    division of a float32 sum while the count is exact in float32 (below 2**24)."""
    n = 1
    for ax in axes:
        n *= x.shape[ax]
    if not 0 < n < 1 << 24:
        return np.asarray(x.mean(axis=axes, keepdims=True))
    total = np.add.reduce(x, axis=axes, keepdims=True)
    total /= x.dtype.type(n)
    return np.asarray(total)


def _normalize(
    x: np.ndarray, axis: int, epsilon: float, simplified: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(normalised x, mean, 1/std) over the dimensions from ``axis`` on, keepdims; every
    result a fresh array the caller may overwrite."""
    axes = tuple(range(axis, x.ndim))
    if simplified:
        mean = np.zeros(x.shape[:axis] + (1,) * (x.ndim - axis), dtype=x.dtype)
        centered = x
    else:
        mean = _mean(x, axes)
        centered = x - mean
    inv_std = _mean(centered * centered, axes)  # the variance, then 1/std in place
    inv_std += x.dtype.type(epsilon)
    np.sqrt(inv_std, out=inv_std)
    np.divide(1.0, inv_std, out=inv_std)
    return centered * inv_std, mean, inv_std


def _norm_axis(axis: int, rank: int, op: str) -> int:
    if not -rank <= axis < rank:
        raise ExecutionError(f"{op}: axis {axis} out of range for rank {rank}")
    return axis % rank


@kernel("LayerNormalization", domain=MS, since=1)
def ms_layer_norm(
    x: np.ndarray,
    scale: np.ndarray,
    b: np.ndarray | None = None,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xa = np.asarray(x)
    v = _wide(xa)
    ax = _norm_axis(axis, v.ndim, "LayerNormalization")
    done = row_norm.normalize(v, ax, epsilon, gamma=_wide(scale), beta=b)
    if done is not None:
        return done[0].astype(xa.dtype, copy=False), done[1], done[2]
    y, mean, inv_std = _normalize(v, ax, epsilon, simplified=False)
    y *= _wide(scale)
    if b is not None:
        y += _wide(b)
    return (
        y.astype(xa.dtype, copy=False),
        mean.astype(np.float32, copy=False),
        inv_std.astype(np.float32, copy=False),
    )


def _simplified_layer_norm(
    x: np.ndarray, scale: np.ndarray, *, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    xa = np.asarray(x)
    v = _wide(xa)
    ax = _norm_axis(axis, v.ndim, "SimplifiedLayerNormalization")
    done = row_norm.normalize(v, ax, epsilon, rms=True, gamma=_wide(scale))
    if done is not None:
        return done[0].astype(np.asarray(scale).dtype, copy=False), done[2]
    y, _, inv_std = _normalize(v, ax, epsilon, simplified=True)
    y *= _wide(scale)
    return y.astype(np.asarray(scale).dtype, copy=False), inv_std.astype(np.float32, copy=False)


# onnxruntime registers SimplifiedLayerNormalization in the default domain (no ONNX op of
# that name exists) and its optimizer emits it there; com.microsoft is accepted as well.
kernel("SimplifiedLayerNormalization", domain=MS, since=1)(_simplified_layer_norm)
kernel("SimplifiedLayerNormalization", domain="", since=1)(_simplified_layer_norm)


def _skip_norm(
    x: np.ndarray,
    skip: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray | None,
    bias: np.ndarray | None,
    epsilon: float,
    simplified: bool,
) -> tuple[np.ndarray, ...]:
    xa = np.asarray(x)
    if xa.dtype == np.float32 and xa.ndim:
        done = row_norm.normalize(
            xa,
            xa.ndim - 1,
            epsilon,
            rms=simplified,
            gamma=_wide(gamma),
            beta=beta,
            skip=_wide(skip),
            bias=bias,
        )
        if done is not None and done[3] is not None:  # (mean: 0 for the simplified op)
            return done[0], done[1], done[2], done[3]
    total = _wide(xa) + _wide(skip)
    if bias is not None:
        total += _wide(bias)
    y, mean, inv_std = _normalize(total, total.ndim - 1, epsilon, simplified)
    y *= _wide(gamma)
    if beta is not None:
        y += _wide(beta)
    # Each output is its own fresh array (no copy when the dtype already fits).
    return (
        y.astype(xa.dtype, copy=False),
        mean.astype(np.float32, copy=False),
        inv_std.astype(np.float32, copy=False),
        total.astype(xa.dtype, copy=False),
    )


@kernel("SkipLayerNormalization", domain=MS, since=1)
def skip_layer_norm(
    x: np.ndarray,
    skip: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    *,
    epsilon: float = 1e-12,
) -> tuple[np.ndarray, ...]:
    return _skip_norm(x, skip, gamma, beta, bias, epsilon, simplified=False)


@kernel("SkipSimplifiedLayerNormalization", domain=MS, since=1)
def skip_simplified_layer_norm(
    x: np.ndarray,
    skip: np.ndarray,
    gamma: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    epsilon: float = 1e-12,
) -> tuple[np.ndarray, ...]:
    return _skip_norm(x, skip, gamma, None, bias, epsilon, simplified=True)


# Unwatched runs with constant gamma/beta/bias: the compiled row kernel's call, set up
# once (row_norm.specialize); outputs (y, mean, inv_std, total) as each op orders them.
@specializer(ms_layer_norm)
def _prepared_layer_norm(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    return row_norm.specialize(
        ms_layer_norm, attrs, known, n, (0, 1, 2), epsilon=attrs.get("epsilon", 1e-5),
        rms=False, params=(1, 2, -1),
    )  # fmt: skip


@specializer(_simplified_layer_norm)
def _prepared_simplified(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    return row_norm.specialize(
        _simplified_layer_norm, attrs, known, n, (0, 2), epsilon=attrs.get("epsilon", 1e-5),
        rms=True, params=(1, -1, -1),
    )  # fmt: skip


@specializer(skip_layer_norm)
def _prepared_skip(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    return row_norm.specialize(
        skip_layer_norm, attrs, known, n, (0, 1, 2, 3), epsilon=attrs.get("epsilon", 1e-12),
        rms=False, skip=True, params=(2, 3, 4),
    )  # fmt: skip


@specializer(skip_simplified_layer_norm)
def _prepared_skip_simplified(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    return row_norm.specialize(
        skip_simplified_layer_norm, attrs, known, n, (0, 1, 2, 3),
        epsilon=attrs.get("epsilon", 1e-12), rms=True, skip=True, params=(2, -1, 3),
    )  # fmt: skip


def embed_sum(
    input_ids: np.ndarray,
    segment_ids: np.ndarray | None,
    word: np.ndarray,
    position: np.ndarray,
    segment: np.ndarray | None,
    position_ids: np.ndarray | None,
) -> np.ndarray:
    ids = np.asarray(input_ids, dtype=np.int64)
    if ids.ndim != 2:
        raise ExecutionError("EmbedLayerNormalization: input_ids must be [batch, sequence]")
    b, s = ids.shape
    for name, table, index in (
        ("word", word, ids),
        ("position", position, position_ids),
        ("segment", segment, segment_ids if segment is not None else None),
    ):
        if (
            index is not None
            and table is not None
            and np.asarray(index).size
            and (np.asarray(index).min() < 0 or np.asarray(index).max() >= table.shape[0])
        ):
            raise ExecutionError(f"EmbedLayerNormalization: {name} id out of range")
    out = _wide(word)[ids]
    if position_ids is not None:
        pos = np.broadcast_to(np.asarray(position_ids, dtype=np.int64), (b, s))
        out = out + _wide(position)[pos]
    else:
        if s > position.shape[0]:
            raise ExecutionError("EmbedLayerNormalization: sequence longer than position table")
        out = out + _wide(position)[:s][None]
    if segment is not None and segment_ids is not None:
        out = out + _wide(segment)[np.asarray(segment_ids, dtype=np.int64)]
    return out


@kernel("EmbedLayerNormalization", domain=MS, since=1)
def embed_layer_norm(
    input_ids: np.ndarray,
    segment_ids: np.ndarray | None,
    word_embedding: np.ndarray,
    position_embedding: np.ndarray,
    segment_embedding: np.ndarray | None = None,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    *,
    epsilon: float = 1e-12,
    mask_index_type: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if gamma is None or beta is None:
        raise ExecutionError("EmbedLayerNormalization: gamma and beta are required")
    dtype = np.asarray(word_embedding).dtype
    done = _embed_compiled(
        input_ids, segment_ids, word_embedding, position_embedding, segment_embedding,
        gamma, beta, position_ids, epsilon,
    )  # fmt: skip
    if done is not None:
        y, total = done
    else:
        total = embed_sum(
            input_ids, segment_ids, word_embedding, position_embedding, segment_embedding,
            position_ids,
        )  # fmt: skip
        normed, _, _ = _normalize(total, total.ndim - 1, epsilon, simplified=False)
        y = normed * _wide(gamma) + _wide(beta)
    ids = np.asarray(input_ids)
    if mask is not None:
        mask_index = (np.asarray(mask) != 0).sum(axis=1, dtype=np.int32)
    else:
        mask_index = np.zeros(ids.shape[0], dtype=np.int32)
    # (y and total are fresh: no copy where the dtype already fits)
    return y.astype(dtype, copy=False), mask_index, total.astype(dtype, copy=False)


_ID_KINDS = (np.dtype(np.int32), np.dtype(np.int64))
_EMBED_RANGE = {
    1: "word id out of range",
    2: "sequence longer than position table",
    3: "segment id out of range",
}


def _embed_compiled(
    input_ids: Any, segment_ids: Any, word: Any, position: Any, segment: Any,
    gamma: Any, beta: Any, position_ids: Any, epsilon: float,
) -> tuple[np.ndarray, np.ndarray] | None:  # fmt: skip
    """(y, the embeddings' sum) by the compiled row kernel (native/_norm.c's `embed`):
    the same sums as `embed_sum`, the layer norm the other norm ops' kernel, in one
    call; None where it does not run (compiled kernels off, position_ids given, not
    float32 tables of gamma's width, not int32/int64 ids)."""
    module = row_norm.module()
    if module is None or position_ids is not None:
        return None
    tables = (word, position, gamma, beta) + (() if segment is None else (segment,))
    if any(type(t) is not np.ndarray or t.dtype != np.float32 for t in tables):
        return None
    cols = gamma.size
    if gamma.ndim != 1 or beta.shape != gamma.shape or not cols:
        return None
    if any(t.ndim != 2 or t.shape[1] != cols for t in (word, position) + tables[4:]):
        return None
    ids = np.asarray(input_ids)
    if ids.dtype not in _ID_KINDS or ids.ndim != 2:
        return None
    seg_ids = None
    if segment is not None and segment_ids is not None:
        seg_ids = np.ascontiguousarray(segment_ids)
        if seg_ids.dtype not in _ID_KINDS or seg_ids.shape != ids.shape:
            return None
    table = segment if seg_ids is not None else None
    y = np.empty(ids.shape + (cols,), np.float32)
    total = np.empty(ids.shape + (cols,), np.float32)
    bad = module.embed(
        np.ascontiguousarray(ids), seg_ids, np.ascontiguousarray(word),
        np.ascontiguousarray(position), None if table is None else np.ascontiguousarray(table),
        np.ascontiguousarray(gamma), np.ascontiguousarray(beta),
        row_norm.float32_epsilon(epsilon), total, y,
    )  # fmt: skip
    if bad:
        raise ExecutionError(f"EmbedLayerNormalization: {_EMBED_RANGE[bad]}")
    return y, total


@specializer(embed_layer_norm)
def _specialize_embed(attrs: dict[str, Any], known: tuple[Any, ...], n_outputs: int) -> Any:
    """Unwatched runs of an EmbedLayerNormalization whose tables, gamma and beta are
    float32 initializers (and no position_ids input): `_embed_compiled`'s call with its
    checks of those made once, and the mask's count of nonzero values per row in the same
    C call; int32/int64 ids (and mask) of the kernel's shapes.  Any other call runs the
    kernel.  The same C sums and norm as the kernel's, and exact counts, so the same
    outputs; a tiny BERT's call took 11-14 us through the kernel, 7 of them its Python."""
    module = row_norm.module()
    tables = known[2:7]
    if module is None or len(tables) != 5 or (len(known) > 8 and known[8] is not None):
        return None
    word, position, segment, gamma, beta = tables
    given = [t for t in tables if t is not None]
    if any(type(t) is not np.ndarray or t.dtype != np.float32 or not frozen(t) for t in given) or (
        gamma is None or beta is None
    ):
        return None
    cols = gamma.size
    if gamma.ndim != 1 or beta.shape != gamma.shape or not cols:
        return None
    if any(
        t.ndim != 2 or t.shape[1] != cols for t in (word, position) + tables[2:3] if t is not None
    ):
        return None
    word, position, gamma, beta = (np.ascontiguousarray(t) for t in (word, position, gamma, beta))
    segment = None if segment is None else np.ascontiguousarray(segment)
    epsilon = row_norm.float32_epsilon(attrs.get("epsilon", 1e-12))
    embed = module.embed
    w0, p0, s0, g0, b0 = known[2:7]

    def call(*ins: Any) -> Any:
        ids = ins[0]
        seg_ids = ins[1] if segment is not None else None
        mask = ins[7] if len(ins) > 7 else None
        if (
            ins[2] is not w0
            or ins[3] is not p0
            or ins[4] is not s0
            or ins[5] is not g0
            or ins[6] is not b0
            or (len(ins) > 8 and ins[8] is not None)
            or type(ids) is not np.ndarray
            or ids.dtype not in _ID_KINDS
            or ids.ndim != 2
            or (
                seg_ids is not None
                and (
                    type(seg_ids) is not np.ndarray
                    or seg_ids.dtype not in _ID_KINDS
                    or seg_ids.shape != ids.shape
                )
            )
            or (
                mask is not None
                and (
                    type(mask) is not np.ndarray
                    or mask.dtype not in _ID_KINDS
                    or mask.ndim != 2
                    or mask.shape[0] != ids.shape[0]
                )
            )
        ):
            return specialized_outputs(embed_layer_norm(*ins, **attrs), n_outputs)
        y = np.empty(ids.shape + (cols,), np.float32)
        total = np.empty(ids.shape + (cols,), np.float32)
        mask_index = np.empty(ids.shape[0], np.int32)
        bad = embed(
            np.ascontiguousarray(ids), None if seg_ids is None else np.ascontiguousarray(seg_ids),
            word, position, None if seg_ids is None else segment, gamma, beta, epsilon, total, y,
            None if mask is None else np.ascontiguousarray(mask), mask_index,
        )  # fmt: skip
        if bad:
            raise ExecutionError(f"EmbedLayerNormalization: {_EMBED_RANGE[bad]}")
        return specialized_outputs((y, mask_index, total), n_outputs)

    return call
