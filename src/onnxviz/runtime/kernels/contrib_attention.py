"""com.microsoft Attention: fused QKV projection + multi-head attention (BERT/GPT-2 style).

Masks follow onnxruntime's contrib semantics: a 1-D mask_index of length batch gives each
sequence's valid length (right padding), length 2*batch gives end then start positions
(left padding), 2-D/3-D/4-D masks are raw 0/1 masks; masked scores get ``mask_filter_value``
(default -10000) added, like onnxruntime, rather than -inf."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels import packed_gemm
from onnxviz.runtime.kernels._rotary import pair_tables, rotate
from onnxviz.runtime.kernels._weight_cache import frozen
from onnxviz.runtime.kernels.math_linalg import by_packed_weight, small_batched
from onnxviz.runtime.kernels.math_softmax import softmax_last_axis
from onnxviz.runtime.registry import (
    RUNTIME,
    KernelContext,
    kernel,
    specialized_outputs,
    specializer,
)

MS = "com.microsoft"


def _wide(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)


def _heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """[B, S, H*d] -> [B, H, S, d]."""
    b, s, hidden = x.shape
    if hidden % n_heads:
        raise ExecutionError(f"Attention: hidden size {hidden} is not divisible by {n_heads}")
    return x.reshape(b, s, n_heads, hidden // n_heads).transpose(0, 2, 1, 3)


def attention_mask_bias(
    mask_index: np.ndarray | None,
    batch: int,
    seq: int,
    past: int,
    total: int,
    unidirectional: bool,
    filter_value: float,
) -> np.ndarray | None:
    """Additive bias [B, 1, S, T] (or None) from the mask input and causality."""
    keep: np.ndarray | None = None
    if mask_index is not None:
        m = np.asarray(mask_index)
        positions = np.arange(total)
        if m.ndim == 1 and m.size == batch:
            keep = positions[None, :] < m[:, None]
            keep = keep[:, None, None, :]
        elif m.ndim == 1 and m.size == 2 * batch:
            end, start = m[:batch], m[batch:]
            keep = (positions[None, :] < end[:, None]) & (positions[None, :] >= start[:, None])
            keep = keep[:, None, None, :]
        elif m.ndim == 2:
            keep = (m != 0)[:, None, None, :total]
        elif m.ndim == 3:
            keep = (m != 0)[:, None, :, :total]
        elif m.ndim == 4:
            keep = (m != 0)[:, :, past : past + seq, :total]
        else:
            raise ExecutionError(f"Attention: unsupported mask_index shape {m.shape}")
    if unidirectional:
        rows = np.arange(seq)[:, None] + past
        causal = np.arange(total)[None, :] <= rows
        keep = causal[None, None] if keep is None else (keep & causal[None, None])
    if keep is None:
        return None
    return np.where(keep, 0.0, filter_value).astype(np.float32)


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b of the heads: the MatMul kernel's batched product of small matrices where it
    takes them (an exported attention's Q K^T and P V run the same route), else numpy's."""
    got = small_batched(a, b)  # (None for what it does not take: float64 heads, ...)
    return got if got is not None else a @ b


def softmax_last(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis: the Softmax kernel's (its compiled rows for float32,
    numpy's steps otherwise), so the scores' probabilities are those a Softmax node
    gives; a tiny BERT's 2 x 32 x 32 scores took 16 us in numpy's four passes."""
    return softmax_last_axis(x)


# The additive masks of the last calls, by their mask's bytes and the sizes: a BERT's
# mask_index (ReduceSum of attention_mask, made each run) is the same every run, and
# building its mask was 5-7 us a layer on a short sequence.
_MASKS: dict[tuple[object, ...], np.ndarray | None] = {}
_MASKS_MAX = 32


def _kept_mask(
    mask_index: np.ndarray | None,
    batch: int,
    seq: int,
    past: int,
    total: int,
    unidirectional: bool,
    filter_value: float,
) -> np.ndarray | None:
    """`attention_mask_bias`, kept (read-only) for a small mask of the same values."""
    m = None if mask_index is None else np.asarray(mask_index)
    if m is not None and m.size > 64:
        return attention_mask_bias(m, batch, seq, past, total, unidirectional, filter_value)
    key = (
        None if m is None else (m.dtype.str, m.shape, m.tobytes()),
        batch, seq, past, total, unidirectional, filter_value,
    )  # fmt: skip
    try:
        return _MASKS[key]
    except KeyError:
        pass
    bias = attention_mask_bias(m, batch, seq, past, total, unidirectional, filter_value)
    if bias is not None:
        bias.flags.writeable = False
    if len(_MASKS) >= _MASKS_MAX:
        _MASKS.clear()
    _MASKS[key] = bias
    return bias


def _projection(
    x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None, held: Any = None
) -> np.ndarray:
    """x @ W (+ bias) for x [B, S, D]: MatMul's route for a constant weight (the packed
    GEMM, math_linalg.by_packed_weight) when W is a float32 initializer and the product
    one it takes, else numpy's product; then the bias.  ``held``: W's packed form, found
    once by the specialized call (the weight cache's lookup was 2.8 us a call)."""
    w = _wide(weights)
    y = None
    if (
        x.dtype == np.float32
        and w.dtype == np.float32
        and w.ndim == 2
        and w.shape[0] == x.shape[-1]
        and x.size
        and w.size
    ):
        y = by_packed_weight(x, w, held)
    if y is None:
        y = x @ w
    return y if bias is None else y + _wide(bias)


@kernel("Attention", domain=MS, since=1, ctx=True)
def ms_attention(ctx: KernelContext, *inputs: Any, **attrs: Any) -> tuple[Any, Any]:
    return _attention(ctx, None, *inputs, **attrs)


@specializer(ms_attention)
def _specialize_attention(
    attrs: dict[str, Any], known: tuple[Any, ...], n_outputs: int, ctx: KernelContext
) -> Any:
    """Unwatched runs of an Attention node whose weights are a float32 initializer (and
    its bias one, or absent): the weights packed once for the projection (`_projection`'s
    route, so the same numbers), the kernel's own steps after it; any other call (a fed
    weight) runs the kernel."""
    w0 = known[1] if len(known) > 1 else None
    b0 = known[2] if len(known) > 2 else None
    if (
        type(w0) is not np.ndarray
        or w0.dtype != np.float32
        or w0.ndim != 2
        or not w0.size
        or not frozen(w0)
        or (b0 is not None and (b0 is RUNTIME or not frozen(b0)))
    ):
        return None
    mod = packed_gemm.module()
    p = None if mod is None else packed_gemm.packed(w0, mod)
    if p is None:
        return None
    fallback = functools.partial(ms_attention, ctx, **attrs)

    def call(*ins: Any) -> Any:
        if len(ins) < 2 or ins[1] is not w0 or (ins[2] if len(ins) > 2 else None) is not b0:
            return specialized_outputs(fallback(*ins), n_outputs)
        return specialized_outputs(_attention(ctx, p, *ins, **attrs), n_outputs)

    return call


def _attention(
    ctx: KernelContext,
    held: Any,
    x: np.ndarray,
    weights: np.ndarray,
    bias: np.ndarray | None = None,
    mask_index: np.ndarray | None = None,
    past: np.ndarray | None = None,
    attention_bias: np.ndarray | None = None,
    past_sequence_length: np.ndarray | None = None,
    *,
    num_heads: int,
    unidirectional: int = 0,
    qkv_hidden_sizes: list[int] | None = None,
    scale: float | None = None,
    mask_filter_value: float = -10000.0,
    do_rotary: int = 0,
    past_present_share_buffer: int = 0,
    rotary_embedding_dim: int = 0,
) -> tuple[np.ndarray, np.ndarray | None]:
    if do_rotary:
        raise ExecutionError("Attention: do_rotary=1 is not supported")
    if past_present_share_buffer:
        raise ExecutionError("Attention: past_present_share_buffer=1 is not supported")
    dtype = np.asarray(x).dtype
    xa = _wide(x)
    if xa.ndim != 3:
        raise ExecutionError("Attention: input must be [batch, sequence, hidden]")
    qkv = _projection(xa, weights, bias, held)
    total_hidden = qkv.shape[-1]
    if qkv_hidden_sizes:
        sizes = [int(v) for v in qkv_hidden_sizes]
    else:
        if total_hidden % 3:
            raise ExecutionError("Attention: weights do not split into equal Q, K, V parts")
        sizes = [total_hidden // 3] * 3
    if sum(sizes) != total_hidden:
        raise ExecutionError("Attention: qkv_hidden_sizes do not add up to the weights' width")
    q_part = qkv[..., : sizes[0]]
    k_part = qkv[..., sizes[0] : sizes[0] + sizes[1]]
    v_part = qkv[..., sizes[0] + sizes[1] :]
    q = _heads(q_part, num_heads)
    k = _heads(k_part, num_heads)
    v = _heads(v_part, num_heads)
    b, _, s, head = q.shape
    past_len = 0
    if past is not None:
        p = _wide(past)
        past_len = p.shape[3]
        k = np.concatenate([p[0], k], axis=2)
        v = np.concatenate([p[1], v], axis=2)
    total = k.shape[2]
    factor = scale if scale else 1.0 / np.sqrt(head)
    scores = _product(q, np.swapaxes(k, -1, -2)) * q.dtype.type(factor)
    if attention_bias is not None:
        scores = scores + _wide(attention_bias)
    mask = _kept_mask(mask_index, b, s, past_len, total, bool(unidirectional), mask_filter_value)
    if mask is not None:
        scores += mask  # (scores: the product's fresh array, of the broadcast shape)
    probs = softmax_last(scores)
    out = _product(probs, v).transpose(0, 2, 1, 3).reshape(b, s, -1)
    present = None
    if ctx.wants_output(1):
        present = np.stack([k, v]).astype(dtype, copy=False)  # fresh from the stack
    return out.astype(dtype, copy=False), present


def _mha_inputs(
    query: np.ndarray,
    key: np.ndarray | None,
    value: np.ndarray | None,
    bias: np.ndarray | None,
    n: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q, K, V as [B, N, S, H] from the layouts MultiHeadAttention accepts: 3-D [B, S, D]
    (bias added), K/V already split [B, N, L, H], packed KV [B, L, N, 2, H] and packed QKV
    [B, S, N, 3, H]."""
    q = _wide(query)
    b = None if bias is None else _wide(bias)
    if key is None and value is None:
        if q.ndim != 5 or q.shape[3] != 3:
            raise ExecutionError("MultiHeadAttention: without key/value, query must be packed QKV")
        qkv = q.transpose(3, 0, 2, 1, 4)  # [3, B, N, S, H]
        return qkv[0], qkv[1], qkv[2]
    d_q = q.shape[-1]
    if b is not None:
        q = q + b[:d_q]
    qh = _heads(q, n)
    k = _wide(key) if key is not None else None
    if k is not None and k.ndim == 5:
        kv = k.transpose(3, 0, 2, 1, 4)  # [2, B, N, L, H]
        return qh, kv[0], kv[1]
    if k is None or value is None:
        raise ExecutionError("MultiHeadAttention: key and value must be given together")
    v = _wide(value)
    if k.ndim == 4:  # already [B, N, L, H] (cross attention cache): no bias
        return qh, k, v
    if b is not None:
        d_k = k.shape[-1]
        k = k + b[d_q : d_q + d_k]
        v = v + b[d_q + d_k :]
    return qh, _heads(k, n), _heads(v, n)


@kernel("MultiHeadAttention", domain=MS, since=1, ctx=True)
def multi_head_attention(
    ctx: KernelContext,
    query: np.ndarray,
    key: np.ndarray | None = None,
    value: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    key_padding_mask: np.ndarray | None = None,
    attention_bias: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    past_sequence_length: np.ndarray | None = None,
    cache_indirection: np.ndarray | None = None,
    *,
    num_heads: int,
    unidirectional: int = 0,
    scale: float | None = None,
    mask_filter_value: float = -10000.0,
) -> tuple[np.ndarray | None, ...]:
    if cache_indirection is not None:
        raise ExecutionError("MultiHeadAttention: cache_indirection (beam search) is not supported")
    dtype = np.asarray(query).dtype
    q, k, v = _mha_inputs(query, key, value, bias, num_heads)
    past_len = 0
    if past_key is not None and past_value is not None:
        past_len = np.asarray(past_key).shape[2]
        k = np.concatenate([_wide(past_key), k], axis=2)
        v = np.concatenate([_wide(past_value), v], axis=2)
    b, _, s, head = q.shape
    total = k.shape[2]
    factor = scale if scale else 1.0 / np.sqrt(head)
    scores = _product(q, np.swapaxes(k, -1, -2)) * q.dtype.type(factor)
    qk = scores
    if attention_bias is not None:
        scores = scores + _wide(attention_bias)
    mask = attention_mask_bias(
        key_padding_mask, b, s, past_len, total, bool(unidirectional), mask_filter_value
    )
    if mask is not None:
        scores = scores + mask
    out = _product(softmax_last(scores), v).transpose(0, 2, 1, 3).reshape(b, s, -1)
    # K and V are fresh after a concatenation with the past; without one they may be
    # views of the inputs, which the outputs must not be.
    copy_kv = past_key is None or past_value is None
    present_k = k.astype(dtype, copy=copy_kv) if ctx.wants_output(1) else None
    present_v = v.astype(dtype, copy=copy_kv) if ctx.wants_output(2) else None
    qk_out = qk.astype(dtype, copy=False) if ctx.wants_output(3) else None  # not changed
    return out.astype(dtype, copy=False), present_k, present_v, qk_out


@kernel("RotaryEmbedding", domain=MS, since=1)
def ms_rotary_embedding(
    x: np.ndarray,
    position_ids: np.ndarray,
    cos_cache: np.ndarray,
    sin_cache: np.ndarray,
    *,
    interleaved: int = 0,
    num_heads: int = 0,
    rotary_embedding_dim: int = 0,
    is_packed_batching: int = 0,
    scale: float = 1.0,
) -> np.ndarray:
    if is_packed_batching:
        raise ExecutionError("RotaryEmbedding: packed batching is not supported")
    xa = np.asarray(x)
    v = _wide(xa)
    half = cos_cache.shape[-1]
    rot = rotary_embedding_dim or 2 * half
    # Rotated in the input's own layout (_rotary.py), no transposed copies:
    # heads [B, N, S, H] for 4-D input, [B, S, N, H] (a view) for 3-D.
    if v.ndim == 4:
        heads, seq_axis = v, 2
    elif v.ndim == 3:
        head = (v.shape[-1] // num_heads) if num_heads else rot
        heads, seq_axis = v.reshape(v.shape[0], v.shape[1], -1, head), 1
    else:
        raise ExecutionError("RotaryEmbedding: input must be 3-D or 4-D")
    bsz, seq = heads.shape[0], heads.shape[seq_axis]
    pos = np.asarray(position_ids, dtype=np.int64)
    cos, sin = _wide(cos_cache), _wide(sin_cache)
    if pos.size == 1:  # a start offset: rows of the caches
        start = int(pos.ravel()[0])
        if start < 0 or start + seq > cos.shape[0]:
            raise ExecutionError("RotaryEmbedding: position id outside the cos/sin cache")
        c, s = cos[None, start : start + seq], sin[None, start : start + seq]
    else:
        pos = np.broadcast_to(pos, (bsz, seq))
        if pos.min() < 0 or pos.max() >= cos.shape[0]:
            raise ExecutionError("RotaryEmbedding: position id outside the cos/sin cache")
        c, s = cos[pos], sin[pos]
    c, s = c[..., : rot // 2], s[..., : rot // 2]  # [B or 1, S, rot/2]
    where = (slice(None), None) if seq_axis == 2 else (slice(None), slice(None), None)
    big_c, big_s = pair_tables(c[where], s[where], bool(interleaved))
    rotated = rotate(heads, big_c, big_s, bool(interleaved))
    if rot < heads.shape[-1]:
        out = np.empty(heads.shape, dtype=rotated.dtype)
        out[..., :rot] = rotated
        out[..., rot:] = heads[..., rot:]
    else:
        out = rotated
    return out.reshape(xa.shape).astype(xa.dtype, copy=False)
