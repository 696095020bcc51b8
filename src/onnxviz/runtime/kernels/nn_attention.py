"""Attention family: Attention (opsets 23-25), RotaryEmbedding, LinearAttention,
ai.onnx.preview FlexAttention.

Scaled dot-product attention is two batched matmuls around a stable softmax; grouped
query heads are broadcast through a (B, Hkv, group, S, D) view instead of repeating K/V.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.model.dtypes import np_dtype
from onnxviz.runtime.kernels._rotary import pair_tables, rotate
from onnxviz.runtime.kernels.nn_geometry import compute_dtype
from onnxviz.runtime.registry import KernelContext, kernel


def _to_heads(x: np.ndarray, num_heads: int | None, what: str) -> np.ndarray:
    """(B, S, H*D) -> (B, H, S, D); 4-D input passes through."""
    if x.ndim == 4:
        return x
    if x.ndim != 3 or not num_heads:
        raise ExecutionError(f"Attention: {what} must be 4-D, or 3-D with its num_heads attribute")
    b, s, hidden = x.shape
    return x.reshape(b, s, num_heads, hidden // num_heads).transpose(0, 2, 1, 3)


def softmax_last(scores: np.ndarray, *, inplace: bool = False) -> np.ndarray:
    """Stable softmax over the last axis; a row of only -inf gives zeros, not NaN.
    With ``inplace`` the caller's own scratch array is overwritten (no temporaries)."""
    top = np.max(scores, axis=-1, keepdims=True)
    dead = ~np.isfinite(top)
    if dead.any():
        top = np.where(dead, 0, top)
    e = np.subtract(scores, top, out=scores if inplace else None)
    np.exp(e, out=e)
    total = np.sum(e, axis=-1, keepdims=True)
    empty = total <= 0
    if empty.any():
        total = np.where(empty, 1, total)  # fully masked rows: exp(-inf) = 0 everywhere
    e /= total
    return e


def _group_matmul(q: np.ndarray, k_t: np.ndarray) -> np.ndarray:
    """q (B, Hq, S, D) @ k_t (B, Hkv, D, T) with Hq a multiple of Hkv -> (B, Hq, S, T)."""
    b, hq, s, _ = q.shape
    hkv = k_t.shape[1]
    if hq == hkv:
        return np.matmul(q, k_t)
    if hkv == 0 or hq % hkv:
        raise ExecutionError(f"Attention: {hq} query heads not a multiple of {hkv} kv heads")
    g = hq // hkv
    out = np.matmul(q.reshape(b, hkv, g, s, q.shape[3]), k_t[:, :, None])
    return out.reshape(b, hq, s, out.shape[-1])


def _causal_allowed(
    s_q: int, s_k: int, offset: np.ndarray, left: int, right: int, causal: bool
) -> np.ndarray | None:
    """Boolean (B or 1, 1, Sq, Sk) set of visible keys from causality and windows."""
    if not causal and left < 0 and right < 0:
        return None
    pos = offset.reshape(-1, 1, 1, 1) + np.arange(s_q).reshape(1, 1, -1, 1)
    j = np.arange(s_k).reshape(1, 1, 1, -1)
    allowed = np.ones((offset.size, 1, s_q, s_k), dtype=bool)
    if causal:
        allowed &= j <= pos
    if left >= 0:
        allowed &= j >= pos - left
    if right >= 0:
        allowed &= j <= pos + right
    return allowed


@kernel("Attention", since=(23, 24, 25), ctx=True)
def attention(
    ctx: KernelContext,
    q_in: np.ndarray,
    k_in: np.ndarray,
    v_in: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    nonpad_kv_seqlen: np.ndarray | None = None,
    *,
    is_causal: int = 0,
    kv_num_heads: int | None = None,
    q_num_heads: int | None = None,
    qk_matmul_output_mode: int = 0,
    scale: float | None = None,
    softcap: float = 0.0,
    softmax_precision: int | None = None,
    left_window_size: int = -1,
    right_window_size: int = -1,
) -> tuple[Any, ...]:
    out_dtype = q_in.dtype
    q = _to_heads(q_in, q_num_heads, "Q")
    k = _to_heads(k_in, kv_num_heads, "K")
    v = _to_heads(v_in, kv_num_heads, "V")
    if past_key is not None:
        k = np.concatenate([past_key, k], axis=2)
    if past_value is not None:
        v = np.concatenate([past_value, v], axis=2)
    present_k, present_v = k, v
    b, _, s_q, head = q.shape
    s_k = k.shape[2]
    dt = compute_dtype(out_dtype)
    sm_dtype = np_dtype(softmax_precision) if softmax_precision else dt
    if sm_dtype.kind != "f" or sm_dtype.itemsize < 4:
        sm_dtype = np.dtype(np.float32)
    root = np.sqrt(1.0 / np.sqrt(head) if scale is None else scale)
    qs = q.astype(dt, copy=False) * dt.type(root)
    ks = k.astype(dt, copy=False) * dt.type(root)
    scores = _group_matmul(qs, ks.transpose(0, 1, 3, 2))
    raw = scores
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    capped = scores
    # Additive bias: float mask added; bool mask, causal frontier, windows and padding -inf.
    bias: np.ndarray | None = None
    if attn_mask is not None:
        mask = attn_mask
        if mask.shape[-1] < s_k:
            fill = False if mask.dtype == np.bool_ else -np.inf
            widths = [(0, 0)] * (mask.ndim - 1) + [(0, s_k - mask.shape[-1])]
            mask = np.pad(mask, widths, constant_values=fill)
        if mask.dtype == np.bool_:
            bias = np.where(mask, 0, -np.inf).astype(dt)
        else:
            bias = mask.astype(dt, copy=False)
        bias = bias.reshape((1,) * (4 - bias.ndim) + bias.shape)
    if past_key is not None:
        offset = np.array([past_key.shape[2]])
    elif nonpad_kv_seqlen is not None:
        offset = np.asarray(nonpad_kv_seqlen, dtype=np.int64).reshape(-1) - s_q
    else:
        offset = np.array([0])
    allowed = _causal_allowed(
        s_q, s_k, offset, left_window_size, right_window_size, bool(is_causal)
    )
    if nonpad_kv_seqlen is not None:
        valid = np.arange(s_k)[None, :] < np.asarray(nonpad_kv_seqlen).reshape(-1, 1)
        valid = valid.reshape(-1, 1, 1, s_k)
        allowed = valid if allowed is None else allowed & valid
    if allowed is not None and allowed.all():  # e.g. a causal decode step: sees every key
        allowed = None
    if allowed is not None:
        frontier = np.where(allowed, 0, -np.inf).astype(dt, copy=False)
        bias = frontier if bias is None else bias + frontier
    if bias is not None:
        scores = scores + bias
    # Softmax may work in place unless `scores` is still needed as qk_matmul_output.
    sm_in = scores.astype(sm_dtype, copy=False)
    inplace = not ctx.wants_output(3) or sm_in is not scores
    probs = softmax_last(sm_in, inplace=inplace).astype(dt, copy=False)
    y = _group_matmul(probs, v.astype(dt, copy=False))
    if q_in.ndim == 3:
        y = y.transpose(0, 2, 1, 3).reshape(b, s_q, -1)
    qk_out = (raw, capped, scores, probs)[qk_matmul_output_mode] if ctx.wants_output(3) else None
    return (
        y.astype(out_dtype, copy=False),
        present_k if ctx.wants_output(1) else None,
        present_v if ctx.wants_output(2) else None,
        None if qk_out is None else qk_out.astype(out_dtype, copy=False),
    )


@kernel("RotaryEmbedding", since=23)
def rotary_embedding(
    x: np.ndarray,
    cos_cache: np.ndarray,
    sin_cache: np.ndarray,
    position_ids: np.ndarray | None = None,
    *,
    interleaved: int = 0,
    num_heads: int = 0,
    rotary_embedding_dim: int = 0,
) -> np.ndarray:
    # Work in (B, S, H, D).
    if x.ndim == 4:
        xs = x.transpose(0, 2, 1, 3)
    elif x.ndim == 3 and num_heads:
        xs = x.reshape(x.shape[0], x.shape[1], num_heads, -1)
    else:
        raise ExecutionError("RotaryEmbedding: X must be 4-D, or 3-D with num_heads")
    head = xs.shape[3]
    dim = rotary_embedding_dim or head
    half = dim // 2
    dt = compute_dtype(x.dtype)
    # Rows first, then the compute dtype: converting the whole cache cost a pass over it
    # on every call.
    cos, sin = cos_cache, sin_cache
    if position_ids is not None:
        cos, sin = cos[position_ids], sin[position_ids]
    elif cos.ndim != 3 or sin.ndim != 3:
        raise ExecutionError("RotaryEmbedding: without position_ids the caches must be 3-D")
    if cos.shape[-1] != half or sin.shape[-1] != half:
        raise ExecutionError(f"RotaryEmbedding: caches must have last dimension {half}")
    cos, sin = cos.astype(dt, copy=False), sin.astype(dt, copy=False)
    big_c, big_s = pair_tables(cos[:, :, None, :], sin[:, :, None, :], bool(interleaved))
    xd = xs.astype(dt, copy=False)
    rotated = rotate(xd, big_c, big_s, bool(interleaved))  # a fresh array (_rotary.py)
    if dim < head:
        out = np.empty(xs.shape, dtype=rotated.dtype)
        out[..., :dim] = rotated
        out[..., dim:] = xd[..., dim:]
    else:
        out = rotated
    out = out.astype(x.dtype, copy=False)
    return out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(x.shape)


@kernel("LinearAttention", since=27)
def linear_attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    past_state: np.ndarray | None = None,
    decay: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    *,
    chunk_size: int = 64,
    kv_num_heads: int = 0,
    q_num_heads: int = 0,
    scale: float = 0.0,
    update_rule: str = "gated_delta",
) -> tuple[np.ndarray, np.ndarray]:
    if update_rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ExecutionError(f"LinearAttention: unknown update_rule '{update_rule}'")
    if not q_num_heads or not kv_num_heads or q_num_heads % kv_num_heads:
        raise ExecutionError("LinearAttention: q_num_heads must be a multiple of kv_num_heads")
    b, t, _ = query.shape
    hq, hkv = q_num_heads, kv_num_heads
    dk = query.shape[2] // hq
    dv = value.shape[2] // hkv
    dt = compute_dtype(query.dtype)
    q = query.astype(dt).reshape(b, t, hkv, hq // hkv, dk)
    k = key.astype(dt).reshape(b, t, hkv, dk)
    v = value.astype(dt).reshape(b, t, hkv, dv)
    s = np.zeros((b, hkv, dk, dv), dtype=dt) if past_state is None else past_state.astype(dt).copy()
    gated = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    if gated and decay is None:
        raise ExecutionError(f"LinearAttention: update_rule '{update_rule}' needs decay")
    if delta and beta is None:
        raise ExecutionError(f"LinearAttention: update_rule '{update_rule}' needs beta")
    g = None
    if decay is not None and gated:
        g = np.exp(decay.astype(dt)).reshape(b, t, hkv, -1)  # (.., dk) or (.., 1)
    bt = None
    if beta is not None and delta:
        bt = np.broadcast_to(beta.astype(dt).reshape(b, t, -1), (b, t, hkv))
    factor = dt.type(scale if scale else 1.0 / np.sqrt(dk))
    out = np.empty((b, t, hkv, hq // hkv, dv), dtype=dt)
    # The recurrence is sequential in time; each step is vectorised over batch and heads.
    for step in range(t):
        kt, vt = k[:, step], v[:, step]
        if g is not None:
            s *= g[:, step][..., None]
        if bt is not None:
            recalled = np.einsum("bhkv,bhk->bhv", s, kt)
            vt = bt[:, step][..., None] * (vt - recalled)
        s += kt[..., :, None] * vt[..., None, :]
        out[:, step] = np.einsum("bhgk,bhkv->bhgv", q[:, step], s) * factor
    y = out.reshape(b, t, hq * dv).astype(query.dtype, copy=False)
    state_dtype = past_state.dtype if past_state is not None else query.dtype
    return y, s.astype(state_dtype, copy=False)


def _run_modifier(graph: Any, value: np.ndarray) -> np.ndarray:
    """Evaluate a one-input, one-output modifier subgraph node by node."""
    import onnx.defs

    from onnxviz.model.tensors import to_array
    from onnxviz.runtime.invoke import call_node

    env: dict[str, Any] = {"": None}
    for init in graph.initializer:
        env[init.name] = to_array(init)
    inputs = [i.name for i in graph.input if i.name not in env]
    if len(inputs) != 1 or len(graph.output) != 1:
        raise ExecutionError("FlexAttention: a modifier graph needs one input and one output")
    env[inputs[0]] = value
    # The modifier's default-domain ops resolve at the newest opset this build knows.
    opsets = {"": onnx.defs.onnx_opset_version()}
    for node in graph.node:
        outs = call_node(node, [env[n] if n else None for n in node.input], opsets)
        env.update({name: val for name, val in zip(node.output, outs) if name})
    return np.asarray(env[graph.output[0].name])


@kernel("FlexAttention", domain="ai.onnx.preview", since=1)
def flex_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    prob_mod: Any = None,
    score_mod: Any = None,
    scale: float | None = None,
    softmax_precision: int | None = None,
) -> np.ndarray:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ExecutionError("FlexAttention: Q, K and V must be rank 4")
    if softmax_precision:
        sm = np_dtype(softmax_precision)
    else:
        sm = np.dtype(np.float64) if q.dtype == np.float64 else np.dtype(np.float32)
    factor = 1.0 / np.sqrt(q.shape[3]) if scale is None else scale
    scores = _group_matmul(q.astype(sm), k.astype(sm).transpose(0, 1, 3, 2)) * sm.type(factor)
    if score_mod is not None:
        scores = _run_modifier(score_mod, scores).astype(sm, copy=False)
    probs = softmax_last(scores)
    if prob_mod is not None:
        probs = _run_modifier(prob_mod, probs).astype(sm, copy=False)
    return _group_matmul(probs, v.astype(sm)).astype(q.dtype)
