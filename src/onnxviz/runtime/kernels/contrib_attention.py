"""com.microsoft Attention: fused QKV projection + multi-head attention (BERT/GPT-2 style).

Masks follow onnxruntime's contrib semantics: a 1-D mask_index of length batch gives each
sequence's valid length (right padding), length 2*batch gives end then start positions
(left padding), 2-D/3-D/4-D masks are raw 0/1 masks; masked scores get ``mask_filter_value``
(default -10000) added, like onnxruntime, rather than -inf."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
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


# The compiled attention (native/_gqa.c's `attend`: GroupQueryAttention's core, which
# takes an additive bias for the masks here), or None when compiled kernels are off.
_COMPILED = native.load("gqa")

# The most multiply-adds (query rows x the keys each reads x head size, summed over query
# heads) GroupQueryAttention gives the compiled attention, by its level (0 generic C, then AVX2, AVX-512):
# beyond, numpy's BLAS products win.  Measured with benchmarks/bench_gqa.py, one thread,
# 2-core AVX-512 VM, compiled / numpy time: prompts from scratch 0.45-0.7 at 4.8-8.5M
# (16 heads of 64, S 96 and 128) but chunks after a long past 1.1-1.4 from 4.2M (S 2-32
# after 128-1024; the keys stream from L2 once per query row); the generic level
# 0.73-0.98 at 2.1M, 1.15-2 from 4.2M.  A one-token step of grouped heads (2 or more
# query heads per KV head, read four at a time) runs compiled at any size from AVX2 up:
# 0.68-0.79 at 4-8M (32 / 8 heads of 128 after 1024 and 2048, 16 / 4 of 64 after 4096),
# where one query head per KV head came out 0.87-1.07.  Below the limits every shape
# measured ran faster compiled: the tiny Llama's 4-token prompt 43 -> 13 us, llama1k
# (16 / 4 heads of 64) 64-token prompt 640 -> 280 us, its decode step after 64 57 -> 28.
WORK_LIMIT = (1 << 20, 3 << 20, 3 << 20, 3 << 20)

# The most multiply-adds (as above) Attention and MultiHeadAttention give the compiled
# attention, whose heads each have their own keys: there numpy's steps (the batched
# products of math_linalg.small_batched and the Softmax kernel) catch up sooner.
# Measured (attention alone after the projection, one thread, Zen 4 at AVX-512, compiled
# / numpy time): 4 heads of 8 on 4 tokens 1.4 / 11 us (a transformers-optimizer tiny
# BERT's), 8 tokens 12 x 64 0.80, 32 tokens 4 x 32 0.90, 16 tokens 12 x 64 0.93, 32
# tokens 4 x 64 (2^18) 1.03; above, 0.94-1.37 at 2^19 (32 tokens of 8 x 64 1.17, two of
# 32 x 4 x 64 1.37), 0.75-1.27 at 2^20 to 3 * 2^20.
HEADS_WORK_LIMIT = 1 << 18


def _bias_rows(
    bias: np.ndarray | None, b: int, n: int, s: int, total: int
) -> tuple[np.ndarray | None, int, int, int] | None:
    """The additive bias (None, or 4-D [B or 1, N or 1, S or 1, total], float32) as
    `attend` reads it: a C-contiguous array and its strides in floats over (batch, head,
    query row), 0 where it broadcasts; None when it is not of that form."""
    if bias is None:
        return None, 0, 0, 0
    shape = bias.shape
    if (
        bias.dtype != np.float32
        or len(shape) != 4
        or shape[3] != total
        or shape[0] not in (1, b)
        or shape[1] not in (1, n)
        or shape[2] not in (1, s)
    ):
        return None
    rows = 0 if shape[2] == 1 else total
    heads = 0 if shape[1] == 1 else shape[2] * total
    batch = 0 if shape[0] == 1 else shape[1] * shape[2] * total
    return np.ascontiguousarray(bias), batch, heads, rows


class _KeptMaskRows:
    """A self-attention node's `_bias_rows` of a kept mask (`_kept_mask`'s: read-only,
    one object per mask and shape), worked out once for the same mask object: the two
    quick calls' per-call strides (0.5 us a call)."""

    def __init__(self) -> None:
        self.mask: Any = None
        self.rows: tuple[np.ndarray | None, int, int, int] | None = None

    def __call__(
        self, kept: np.ndarray | None, b: int, n: int, s: int
    ) -> tuple[np.ndarray | None, int, int, int] | None:
        if kept is not None and kept is self.mask:
            return self.rows
        rows = _bias_rows(kept, b, n, s, s)
        if rows is not None:
            self.mask, self.rows = kept, rows
        return rows


def attend_compiled(
    query: np.ndarray,
    key: np.ndarray | None,
    value: np.ndarray | None,
    past: tuple[np.ndarray, np.ndarray] | None,
    bias: np.ndarray | None,
    present: tuple[np.ndarray, np.ndarray],
    heads: int,
    head: int,
    factor: float,
) -> np.ndarray | None:
    """softmax(Q K^T * factor + bias) V by native/_gqa.c, its output [B, S, heads*head];
    or None when the call is not its case (the numpy steps then run): float32 throughout,
    within HEADS_WORK_LIMIT.  query [B, S, heads*head] with key and value of its shape, or
    key and value None and query the packed [B, S, 3*heads*head] (Q, K, V columns);
    past: the caches [B, heads, P, head]; present: the caches [B, heads, P + S, head]
    the call fills (the past rows, then the new keys and values), C-contiguous float32;
    bias: an additive [B or 1, heads or 1, S or 1, P + S] (the masks).  The sums run in
    the kernel's order: within float32 rounding of numpy's steps, not their bits."""
    if _COMPILED is None or query.dtype != np.float32 or query.ndim != 3:
        return None
    b, s = query.shape[0], query.shape[1]
    start = 0 if past is None else past[0].shape[2]
    if b * heads * s * (start + s) * head > HEADS_WORK_LIMIT:
        return None
    width = heads * head
    if key is not None and value is not None:
        shape = (b, s, width)
        if query.shape != shape or key.shape != shape or value.shape != shape:
            return None
        if key.dtype != np.float32 or value.dtype != np.float32:
            return None
        key, value = np.ascontiguousarray(key), np.ascontiguousarray(value)
    elif query.shape[2] != 3 * width:
        return None
    past_k = past_v = None
    if past is not None:
        past_k, past_v = past
        cache = (b, heads, start, head)
        if past_k.shape != cache or past_v.shape != cache:
            return None
        if past_k.dtype != np.float32 or past_v.dtype != np.float32:
            return None
        past_k, past_v = np.ascontiguousarray(past_k), np.ascontiguousarray(past_v)
    rows = _bias_rows(bias, b, heads, s, start + s)
    if rows is None:
        return None
    out = np.empty((b, s, width), dtype=np.float32)
    _COMPILED.attend(
        np.ascontiguousarray(query), key, value, past_k, past_v, None, None, present[0],
        present[1], out, b, s, heads, heads, head, start, 0, False, False, 0, factor, *rows,
    )  # fmt: skip
    return out


@kernel("Attention", domain=MS, since=1, ctx=True)
def ms_attention(
    ctx: KernelContext, x: np.ndarray, weights: np.ndarray, *rest: Any, **attrs: Any
) -> tuple[Any, Any]:
    bias = rest[0] if rest else None
    return _attention(ctx, lambda a: _projection(a, weights, bias), x, weights, *rest, **attrs)


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
    # The projection with its bias in C from call to result (a held product: the sum,
    # then the bias, as _projection's product and add), on the products `_projection`
    # sends to the packed GEMM; any other goes to `_projection` itself.
    b32 = None if b0 is None else _wide(b0)
    project = fallback_projection = functools.partial(_projection, weights=w0, bias=b0, held=p)
    if b32 is None or (b32.ndim == 1 and b32.shape[0] == w0.shape[1]):
        project = packed_gemm.held_product(mod, p, b32, (), fallback_projection)

    quick = _quick_attention(ctx, attrs, w0, project, n_outputs)

    def call(*ins: Any) -> Any:
        if len(ins) < 2 or ins[1] is not w0 or (ins[2] if len(ins) > 2 else None) is not b0:
            return specialized_outputs(fallback(*ins), n_outputs)
        if quick is not None and len(ins) <= 4:
            got = quick(ins[0], ins[3] if len(ins) > 3 else None)
            if got is not None:
                return got
        return specialized_outputs(_attention(ctx, project, *ins, **attrs), n_outputs)

    return call


def _quick_attention(
    ctx: KernelContext, attrs: dict[str, Any], w0: np.ndarray, project: Any, n_outputs: int
) -> Any:
    """``f(x, mask_index)``: the node's outputs for a float32 x [B, S, D] without past or
    attention_bias, by `_attention_compiled`'s call with what it works out per call
    found once (heads, scale, the mask's form); None for another call (and when the
    node's attributes are not the compiled attention's case: no quick call).  The same
    C call as `_attention`'s, so the same numbers; a tiny BERT's Attention took 11 us a
    call through `_attention`, most of it its steps in Python."""
    n = int(attrs["num_heads"])
    sizes = attrs.get("qkv_hidden_sizes")
    width = w0.shape[1] // 3
    if (
        _COMPILED is None
        or attrs.get("do_rotary")
        or attrs.get("past_present_share_buffer")
        or n < 1
        or w0.shape[1] % 3
        or width % n
        or (sizes and [int(v) for v in sizes] != [width] * 3)
    ):
        return None
    head = width // n
    unidirectional = bool(attrs.get("unidirectional", 0))
    filter_value = attrs.get("mask_filter_value", -10000.0)
    scale = attrs.get("scale")
    factor = float(scale if scale else 1.0 / np.sqrt(head))
    limit = HEADS_WORK_LIMIT
    attend, d_in = _COMPILED.attend, w0.shape[0]
    want_present = ctx.wants_output(1)
    f32 = np.dtype(np.float32)
    mask_rows = _KeptMaskRows()

    def quick(x: Any, mask_index: Any) -> Any:
        if type(x) is not np.ndarray or x.dtype != f32 or x.ndim != 3 or x.shape[2] != d_in:
            return None
        b, s = x.shape[0], x.shape[1]
        if b * n * s * s * head > limit:
            return None
        rows = mask_rows(_kept_mask(mask_index, b, s, 0, s, unidirectional, filter_value), b, n, s)
        if rows is None:
            return None
        qkv = project(x)
        present = np.empty((2, b, n, s, head), dtype=f32)
        out = np.empty((b, s, width), dtype=f32)
        attend(qkv, None, None, None, None, None, None, present[0], present[1], out,
               b, s, n, n, head, 0, 0, False, False, 0, factor, *rows)  # fmt: skip
        if n_outputs == 1:
            return out
        return [out, present if want_present else None] + [None] * (n_outputs - 2)

    return quick


def _attention(
    ctx: KernelContext,
    project: Any,
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
    qkv = project(xa)  # xa @ weights + bias (the specialized call's: held in C)
    total_hidden = qkv.shape[-1]
    if qkv_hidden_sizes:
        sizes = [int(v) for v in qkv_hidden_sizes]
    else:
        if total_hidden % 3:
            raise ExecutionError("Attention: weights do not split into equal Q, K, V parts")
        sizes = [total_hidden // 3] * 3
    if sum(sizes) != total_hidden:
        raise ExecutionError("Attention: qkv_hidden_sizes do not add up to the weights' width")
    if sizes[0] == sizes[1] == sizes[2] and not sizes[0] % num_heads:
        done = _attention_compiled(
            ctx, qkv, past, mask_index, attention_bias, num_heads, sizes[0], scale,
            bool(unidirectional), mask_filter_value,
        )  # fmt: skip
        if done is not None:
            out, present = done
            return out.astype(dtype, copy=False), (
                None if present is None else present.astype(dtype, copy=False)
            )
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


def _attention_compiled(
    ctx: KernelContext,
    qkv: np.ndarray,
    past: np.ndarray | None,
    mask_index: np.ndarray | None,
    attention_bias: np.ndarray | None,
    n_heads: int,
    width: int,
    scale: float | None,
    unidirectional: bool,
    filter_value: float,
) -> tuple[np.ndarray, np.ndarray | None] | None:
    """Attention's heads from the projection's qkv [B, S, 3 * width] by `attend_compiled`
    (output, present), or None for the numpy steps: the same mask, past and present as
    they make.  A tiny BERT's 4 heads of 8 over 4 tokens took 20 us of numpy calls a
    layer; this call about 3."""
    if _COMPILED is None or qkv.dtype != np.float32:
        return None
    b, s = qkv.shape[0], qkv.shape[1]
    head = width // n_heads
    pair = None
    start = 0
    if past is not None:
        p = _wide(past)
        if p.ndim != 5 or p.shape[0] != 2:
            return None
        pair, start = (p[0], p[1]), p.shape[3]
    total = start + s
    bias = _additive_bias(
        mask_index, attention_bias, b, s, start, total, unidirectional, filter_value
    )
    if bias is None:
        return None
    present = np.empty((2, b, n_heads, total, head), dtype=np.float32)
    factor = scale if scale else 1.0 / np.sqrt(head)
    out = attend_compiled(
        qkv, None, None, pair, bias[0], (present[0], present[1]), n_heads, head, float(factor)
    )
    if out is None:
        return None
    return out, (present if ctx.wants_output(1) else None)


def _additive_bias(
    mask: np.ndarray | None,
    attention_bias: np.ndarray | None,
    b: int,
    s: int,
    start: int,
    total: int,
    unidirectional: bool,
    filter_value: float,
) -> tuple[np.ndarray | None] | None:
    """(the scores' additive bias, or None for none): the kept mask of ``mask`` and
    causality, plus attention_bias; None when the two do not broadcast together (the
    numpy steps then raise their error)."""
    bias = _kept_mask(mask, b, s, start, total, unidirectional, filter_value)
    if attention_bias is None:
        return (bias,)
    extra = _wide(attention_bias)
    if bias is None:
        return (extra,)
    try:
        return (extra + bias,)
    except ValueError:
        return None


def _mha_compiled(
    ctx: KernelContext,
    query: np.ndarray,
    key: np.ndarray | None,
    value: np.ndarray | None,
    bias: np.ndarray | None,
    key_padding_mask: np.ndarray | None,
    attention_bias: np.ndarray | None,
    past_key: np.ndarray | None,
    past_value: np.ndarray | None,
    n_heads: int,
    unidirectional: bool,
    scale: float | None,
    filter_value: float,
) -> tuple[np.ndarray | None, ...] | None:
    """MultiHeadAttention's self-attention of 3-D float32 query, key and value of one
    shape [B, S, D] (the bias added to them as `_mha_inputs` adds it), with both past
    caches [B, N, P, H] or neither, by `attend_compiled`: (output, present_key,
    present_value, None); None for the numpy steps (other layouts, cross attention, the
    output_qk output wanted)."""
    if _COMPILED is None or ctx.wants_output(3) or key is None or value is None:
        return None
    q, k, v = _wide(query), _wide(key), _wide(value)
    if q.dtype != np.float32 or q.ndim != 3 or k.shape != q.shape or v.shape != q.shape:
        return None
    b, s, d = q.shape
    if d % n_heads:
        return None
    if bias is not None:
        bb = _wide(bias)
        if bb.shape != (3 * d,):
            return None
        q, k, v = q + bb[:d], k + bb[d : 2 * d], v + bb[2 * d :]
    head = d // n_heads
    pair, start = None, 0
    if past_key is not None or past_value is not None:
        if past_key is None or past_value is None:
            return None
        pair = (_wide(past_key), _wide(past_value))
        if pair[0].ndim != 4:
            return None
        start = pair[0].shape[2]
    total = start + s
    masks = _additive_bias(
        key_padding_mask, attention_bias, b, s, start, total, unidirectional, filter_value
    )
    if masks is None:
        return None
    present_k = np.empty((b, n_heads, total, head), dtype=np.float32)
    present_v = np.empty_like(present_k)
    factor = float(scale if scale else 1.0 / np.sqrt(head))
    out = attend_compiled(q, k, v, pair, masks[0], (present_k, present_v), n_heads, head, factor)
    if out is None:
        return None
    wants_k, wants_v = ctx.wants_output(1), ctx.wants_output(2)
    return out, (present_k if wants_k else None), (present_v if wants_v else None), None


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
    done = _mha_compiled(
        ctx, query, key, value, bias, key_padding_mask, attention_bias, past_key, past_value,
        num_heads, bool(unidirectional), scale, mask_filter_value,
    )  # fmt: skip
    if done is not None:
        return tuple(t if t is None else t.astype(dtype, copy=False) for t in done)
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


_F32 = np.dtype(np.float32)


class _QuickSelfAttention:
    """`_mha_compiled`'s commonest call with its per-call Python cut down: self-attention
    of three float32 [B, S, D] arrays of one shape (a transformers-optimizer BERT's),
    with the node's constant bias split once, no attention_bias and no past.  The same
    steps in the same order (the bias added to Q, K and V by numpy, `_kept_mask`, one
    `attend`), so the same numbers; what it saves is the checks and lookups a general
    call needs (14 -> about 6 us a layer of 4 heads on 4 tokens, where the attention
    itself is 2.5).  Present caches nobody reads go to buffers kept between calls.  A
    call of any other form returns None (the node's full call then runs)."""

    def __init__(
        self,
        heads: int,
        unidirectional: bool,
        scale: float | None,
        filter_value: float,
        bias: Any,
        wants_key: bool,
        wants_value: bool,
    ) -> None:
        self.heads = heads
        self.unidirectional = unidirectional
        self.scale = scale
        self.filter_value = filter_value
        self.bias = bias if type(bias) is np.ndarray and frozen(bias) else None
        self.wide_bias = None
        if self.bias is not None and self.bias.ndim == 1 and self.bias.dtype == np.float32:
            self.wide_bias = self.bias
        self.wants = (wants_key, wants_value)
        self.scratch: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        self.mask_rows = _KeptMaskRows()

    def __call__(self, *ins: Any) -> tuple[Any, Any, Any, None] | None:
        if len(ins) < 3 or any(x is not None for x in ins[5:]):
            return None
        q, k, v = ins[0], ins[1], ins[2]
        bias = ins[3] if len(ins) > 3 else None
        mask = ins[4] if len(ins) > 4 else None
        if (
            type(q) is not np.ndarray
            or type(k) is not np.ndarray
            or type(v) is not np.ndarray
            or q.dtype is not _F32
            or k.dtype is not _F32
            or v.dtype is not _F32
            or q.ndim != 3
            or k.shape != q.shape
            or v.shape != q.shape
        ):
            return None
        b, s, d = q.shape
        n = self.heads
        if d % n or b * n * s * s * (d // n) > HEADS_WORK_LIMIT:
            return None
        if bias is not None:
            if bias is not self.bias or self.wide_bias is None or self.wide_bias.size != 3 * d:
                return None
            # Q, K and V side by side ([B, S, 3D], attend's packed layout) with the bias
            # added in one pass: each value is q + bq as the three adds gave it, and two
            # numpy calls cost less than three broadcast adds (1.3 us each here).
            packed = np.concatenate((q, k, v), axis=2)
            packed += self.wide_bias
            q, k, v = packed, None, None
        else:
            q, k, v = np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v)
        kept = _kept_mask(mask, b, s, 0, s, self.unidirectional, self.filter_value)
        rows = self.mask_rows(kept, b, n, s)
        if rows is None:
            return None
        head = d // n
        cache = (b, n, s, head)
        present = self.scratch.get(cache)
        if present is None or self.wants[0] or self.wants[1]:
            present = (np.empty(cache, np.float32), np.empty(cache, np.float32))
            if not (self.wants[0] or self.wants[1]):
                self.scratch = {cache: present}
        factor = float(self.scale if self.scale else 1.0 / math.sqrt(head))
        out = np.empty((b, s, d), dtype=np.float32)
        assert _COMPILED is not None  # (the specializer makes none without it)
        _COMPILED.attend(
            q, k, v, None, None, None, None, present[0], present[1], out,
            b, s, n, n, head, 0, 0, False, False, 0, factor, *rows,
        )  # fmt: skip
        key_out = present[0] if self.wants[0] else None
        value_out = present[1] if self.wants[1] else None
        return out, key_out, value_out, None


@specializer(multi_head_attention)
def _specialize_mha(
    attrs: dict[str, Any], known: tuple[Any, ...], n_outputs: int, ctx: KernelContext
) -> Any:
    """Unwatched runs of a MultiHeadAttention: `_mha_compiled`'s call straight from the
    node loop for the calls it takes (the generic kernel call of a context kernel cost
    more than the attention of a tiny BERT), else the kernel.  The same calls, so the
    same numbers."""
    if _COMPILED is None or attrs.get("unidirectional") not in (None, 0, 1):
        return None
    n = int(attrs["num_heads"])
    unidirectional = bool(attrs.get("unidirectional", 0))
    scale = attrs.get("scale")
    filter_value = attrs.get("mask_filter_value", -10000.0)
    kernel_call = functools.partial(multi_head_attention, ctx, **attrs)
    quick = None
    if not ctx.wants_output(3):  # (output_qk: the general call's numpy steps)
        quick = _QuickSelfAttention(
            n, unidirectional, scale, filter_value, known[3] if len(known) > 3 else None,
            ctx.wants_output(1), ctx.wants_output(2),
        )  # fmt: skip

    def call(*ins: Any) -> Any:
        if quick is not None:
            out = quick(*ins)
            if out is not None:
                return out[0] if n_outputs == 1 else specialized_outputs(out, n_outputs)
        done = None
        if len(ins) < 10 or ins[9] is None:  # (cache_indirection: the kernel's error)
            padded = ins[:8] + (None,) * (8 - len(ins))
            done = _mha_compiled(
                ctx, padded[0], padded[1], padded[2], padded[3], padded[4], padded[5],
                padded[6], padded[7], n, unidirectional, scale, filter_value,
            )  # fmt: skip
        if done is None:
            return specialized_outputs(kernel_call(*ins), n_outputs)
        dtype = ins[0].dtype
        outs = [t if t is None else t.astype(dtype, copy=False) for t in done]
        return outs[0] if n_outputs == 1 else specialized_outputs(outs, n_outputs)

    return call


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
