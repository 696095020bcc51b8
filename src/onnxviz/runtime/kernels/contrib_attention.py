"""com.microsoft Attention: fused QKV projection + multi-head attention (BERT/GPT-2 style).

Masks follow onnxruntime's contrib semantics: a 1-D mask_index of length batch gives each
sequence's valid length (right padding), length 2*batch gives end then start positions
(left padding), 2-D/3-D/4-D masks are raw 0/1 masks; masked scores get ``mask_filter_value``
(default -10000) added, like onnxruntime, rather than -inf."""

from __future__ import annotations

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.registry import KernelContext, kernel

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


def softmax_last(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@kernel("Attention", domain=MS, since=1, ctx=True)
def ms_attention(
    ctx: KernelContext,
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
    qkv = xa @ _wide(weights)
    if bias is not None:
        qkv = qkv + _wide(bias)
    total_hidden = qkv.shape[-1]
    if qkv_hidden_sizes:
        sizes = [int(v) for v in qkv_hidden_sizes]
    else:
        if total_hidden % 3:
            raise ExecutionError("Attention: weights do not split into equal Q, K, V parts")
        sizes = [total_hidden // 3] * 3
    if sum(sizes) != total_hidden:
        raise ExecutionError("Attention: qkv_hidden_sizes do not add up to the weights' width")
    q_part, k_part, v_part = np.split(qkv, [sizes[0], sizes[0] + sizes[1]], axis=-1)
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
    scores = (q @ np.swapaxes(k, -1, -2)) * q.dtype.type(factor)
    if attention_bias is not None:
        scores = scores + _wide(attention_bias)
    mask = attention_mask_bias(
        mask_index, b, s, past_len, total, bool(unidirectional), mask_filter_value
    )
    if mask is not None:
        scores = scores + mask
    probs = softmax_last(scores)
    out = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, -1)
    present = None
    if ctx.wants_output(1):
        present = np.stack([k, v]).astype(dtype)
    return out.astype(dtype), present
