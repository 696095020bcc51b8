"""The plain GroupQueryAttention formula the kernel (runtime/kernels/contrib_gqa.py) was
before its per-call costs were cut, kept as the reference its random differential test
(test_kernel_fastpaths.py) compares against: every step written out on its own, a
zero-filled cache, explicit masks, out-of-place softmax."""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError


def _wide(x: Any) -> np.ndarray:
    x = np.asarray(x)
    return x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)


def _rotate(
    x: np.ndarray, pos: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool
) -> np.ndarray:
    """Rotary embedding of x [B, N, S, H] at positions pos [B, S]."""
    half = cos.shape[-1]
    rot = 2 * half
    c = cos[pos][:, None]  # [B, 1, S, half]
    s = sin[pos][:, None]
    part = x[..., :rot]
    # Written into one fresh array: the two concatenations this replaces copied it twice.
    out = np.empty(x.shape, dtype=x.dtype)
    if interleaved:
        x1, x2 = part[..., 0::2], part[..., 1::2]
        np.subtract(x1 * c, x2 * s, out=out[..., 0:rot:2])
        np.add(x2 * c, x1 * s, out=out[..., 1:rot:2])
    else:
        x1, x2 = part[..., :half], part[..., half:]
        np.subtract(x1 * c, x2 * s, out=out[..., :half])
        np.add(x2 * c, x1 * s, out=out[..., half:rot])
    if rot < x.shape[-1]:
        out[..., rot:] = x[..., rot:]
    return out


def _rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


def reference_gqa(
    ctx: Any,
    query: np.ndarray,
    key: np.ndarray | None = None,
    value: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    seqlens_k: np.ndarray | None = None,
    total_sequence_length: np.ndarray | None = None,
    cos_cache: np.ndarray | None = None,
    sin_cache: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    attention_bias: np.ndarray | None = None,
    head_sink: np.ndarray | None = None,
    _k_scale: None = None,
    _v_scale: None = None,
    q_norm_weight: np.ndarray | None = None,
    k_norm_weight: np.ndarray | None = None,
    **attrs: Any,
) -> tuple[np.ndarray | None, ...]:
    """Only for inputs the kernel accepts (its refusals are tested on their own: no
    quantised cache, no window-sized cache, no output_qk)."""
    num_heads: int = attrs["num_heads"]
    kv_num_heads: int = attrs["kv_num_heads"]
    scale: float | None = attrs.get("scale")
    softcap: float = attrs.get("softcap", 0.0)
    causal: int = attrs.get("causal", 1)
    local_window_size: int = attrs.get("local_window_size", -1)
    do_rotary: int = attrs.get("do_rotary", 0)
    rotary_interleaved: int = attrs.get("rotary_interleaved", 0)
    smooth_softmax: int = attrs.get("smooth_softmax", -1)
    qk_norm_epsilon: float = attrs.get("qk_norm_epsilon", 1e-6)
    assert seqlens_k is not None and total_sequence_length is not None
    op = "GroupQueryAttention"
    dtype = np.asarray(query).dtype
    q_in = _wide(query)
    b, s, width = q_in.shape
    if key is None:  # packed QKV
        head = width // (num_heads + 2 * kv_num_heads)
        q_flat, k_flat, v_flat = np.split(
            q_in, [num_heads * head, (num_heads + kv_num_heads) * head], axis=-1
        )
    else:
        if value is None:
            raise ExecutionError(f"{op}: key and value must be given together")
        head = width // num_heads
        q_flat, k_flat, v_flat = q_in, _wide(key), _wide(value)
    q = q_flat.reshape(b, s, num_heads, head).transpose(0, 2, 1, 3)
    k_new = k_flat.reshape(b, s, kv_num_heads, head).transpose(0, 2, 1, 3)
    v_new = v_flat.reshape(b, s, kv_num_heads, head).transpose(0, 2, 1, 3)
    if q_norm_weight is not None and k_norm_weight is not None:
        q = _rms(q, _wide(q_norm_weight), qk_norm_epsilon)
        k_new = _rms(k_new, _wide(k_norm_weight), qk_norm_epsilon)

    total_max = int(np.asarray(total_sequence_length).ravel()[0])
    totals = np.asarray(seqlens_k, dtype=np.int64).ravel() + 1  # valid keys per batch entry
    prompt = s == total_max
    past_len = np.zeros(b, dtype=np.int64) if prompt else totals - s
    if (past_len < 0).any():
        raise ExecutionError(f"{op}: seqlens_k is shorter than the new sequence")

    if do_rotary:
        if cos_cache is None or sin_cache is None:
            raise ExecutionError(f"{op}: do_rotary needs cos_cache and sin_cache")
        if position_ids is not None and not prompt:
            pos = np.broadcast_to(np.asarray(position_ids, dtype=np.int64), (b, s))
        else:
            pos = past_len[:, None] + np.arange(s)[None, :]
        if pos.max() >= cos_cache.shape[0]:
            raise ExecutionError(f"{op}: position beyond the cos/sin cache")
        cos, sin = _wide(cos_cache), _wide(sin_cache)
        q = _rotate(q, pos, cos, sin, bool(rotary_interleaved))
        k_new = _rotate(k_new, pos, cos, sin, bool(rotary_interleaved))

    past_dim = 0 if past_key is None else np.asarray(past_key).shape[2]
    present_len = max(total_max, past_dim)
    present_k = np.zeros((b, kv_num_heads, present_len, head), dtype=q.dtype)
    present_v = np.zeros_like(present_k)
    pk = None if past_key is None else _wide(past_key)
    pv = None if past_value is None else _wide(past_value)
    for i in range(b):  # per batch entry (its own past length); rows past the end stay 0
        start = int(past_len[i])
        if start and (pk is None or pv is None or start > past_dim):
            raise ExecutionError(f"{op}: seqlens_k needs {start} past positions")
        if start and pk is not None and pv is not None:
            present_k[i, :, :start] = pk[i, :, :start]
            present_v[i, :, :start] = pv[i, :, :start]
        present_k[i, :, start : start + s] = k_new[i]
        present_v[i, :, start : start + s] = v_new[i]

    # Query head n reads KV head n // group: the group's query rows stacked on one KV head
    # ([B, KV, group*S, H]) multiply the cache in place, no repeated copy of K and V.
    group = num_heads // kv_num_heads
    keys = present_k[:, :, :total_max]  # [B, KV, T, H]
    vals = present_v[:, :, :total_max]
    factor = scale if scale else 1.0 / np.sqrt(head)
    q_rows = q.reshape(b, kv_num_heads, group * s, head)
    scores = (q_rows @ np.swapaxes(keys, -1, -2)).reshape(b, num_heads, s, total_max)
    scores *= q.dtype.type(factor)
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    if attention_bias is not None:
        scores = scores + _wide(attention_bias)[..., :total_max]
    key_pos = np.arange(total_max)[None, None, :]  # [1, 1, T]
    query_pos = (past_len[:, None] + np.arange(s)[None, :])[:, :, None]  # [B, S, 1]
    allowed = key_pos < totals[:, None, None]
    if causal:
        allowed = allowed & (key_pos <= query_pos)
    if local_window_size > 0:
        allowed = allowed & (key_pos > query_pos - local_window_size)
    scores = np.where(allowed[:, None], scores, -np.inf)
    peak = scores.max(axis=-1, keepdims=True)
    sink = None
    if head_sink is not None:
        sink = _wide(head_sink).reshape(1, -1, 1, 1)
    elif smooth_softmax == 1:
        sink = np.zeros((1, 1, 1, 1), dtype=scores.dtype)
    if sink is not None:
        peak = np.maximum(peak, sink)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    e = np.exp(scores - peak)
    denom = e.sum(axis=-1, keepdims=True)
    if sink is not None:
        denom = denom + np.exp(sink - peak)
    probs = e / np.where(denom == 0, 1.0, denom)
    probs = probs.reshape(b, kv_num_heads, group * s, total_max)
    out = (probs @ vals).reshape(b, num_heads, s, head)
    out = out.transpose(0, 2, 1, 3).reshape(b, s, num_heads * head)
    return out.astype(dtype), present_k.astype(dtype), present_v.astype(dtype), None
