"""com.microsoft GroupQueryAttention (decoder LLMs exported by onnxruntime-genai / Olive).

Supported: separate or packed QKV, past/present KV cache in BNSH (a cache buffer longer
than the sequence is updated in place of a copy, "past_present_share_buffer"), per-batch
lengths from ``seqlens_k``, causal and local-window masks, rotary embedding from cos/sin
caches, softcap, attention bias, smooth softmax / head sinks and Q/K RMS norms.  Not
supported (clear error): quantised KV caches and window-sized caches.

A decoder runs this once per layer per generated token, on small tensors, so its cost is
the number of numpy calls more than arithmetic (issue 21): lengths are Python ints, the
new keys/values/queries are written once into the buffers the products read, queries and
keys are rotated together (_rotary.py), a prompt's mask is built once, and the
mask and zero-row guards are skipped when nothing can be masked (one-token decode).
tests/runtime/gqa_reference.py keeps the plain formula its random test compares with.

Even so the numpy path costs ~40 us a call on the tiny onnxruntime-genai Llama (4 heads of
16, 4-token prompt), onnxruntime's node a few.  The common case -- float32, one past
length for the whole batch, causal or local-window masks only, rotary positions that
follow the past -- runs compiled instead when the kernels are on (native/_gqa.c through
_attend_compiled: ~13 us, most of it this function's checks and bookkeeping), up to a
measured amount of work (_WORK_LIMIT), beyond which BLAS's products win; everything else
runs the numpy path below, unchanged."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.kernels._rotary import pair_tables, rotate
from onnxviz.runtime.kernels._weight_cache import derived, frozen
from onnxviz.runtime.kernels.contrib_attention import WORK_LIMIT as _WORK_LIMIT
from onnxviz.runtime.kernels.contrib_attention import _wide
from onnxviz.runtime.registry import (
    RUNTIME,
    KernelContext,
    kernel,
    specialized_outputs,
    specializer,
)

MS = "com.microsoft"


def _rotate(
    x: np.ndarray,
    tables: tuple[np.ndarray, np.ndarray, bool],
    outs: list[tuple[slice, np.ndarray]],
) -> None:
    """Rotary embedding of x [B, S, N, H] (tables: C, S [B, S, 1, rot] and interleaved):
    heads ``sl`` of the result go to ``out`` ([B, S, n, H], any strides: the callers pass
    transposed views of the buffers the heads are read from next) for each (sl, out)."""
    big_c, big_s, interleaved = tables
    rot = big_c.shape[-1]
    rotated = rotate(x, big_c, big_s, interleaved)
    # Plain copies into the strided destinations: a ufunc writing there costs more.
    for heads, out in outs:
        out[..., :rot] = rotated[:, :, heads]
        if rot < x.shape[-1]:
            out[..., rot:] = x[:, :, heads, rot:]


def _rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


@functools.lru_cache(maxsize=64)
def _blocked(
    past: tuple[int, ...], totals: tuple[int, ...], s: int, t: int, causal: bool, window: int
) -> tuple[np.ndarray, bool]:
    """The key positions each query may not read, [B, 1, S, T] (read-only, shared): past
    the batch entry's valid keys, after the query (causal), or outside its local window;
    and whether some query may read none.  A prompt's or a ragged batch's mask repeats
    from layer to layer and step to step."""
    key_pos = np.arange(t)[None, None, :]  # [1, 1, T]
    query_pos = (np.array(past)[:, None] + np.arange(s)[None, :])[:, :, None]  # [B, S, 1]
    allowed = key_pos < np.array(totals)[:, None, None]
    if causal:
        allowed = allowed & (key_pos <= query_pos)
    if window > 0:
        allowed = allowed & (key_pos > query_pos - window)
    blocked = ~allowed[:, None]
    blocked.flags.writeable = False
    return blocked, bool(blocked.all(axis=-1).any())


def _position_tables(
    cos_cache: np.ndarray,
    sin_cache: np.ndarray,
    interleaved: bool,
    pos: np.ndarray | None,
    start: int,
    s: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The rotary tables (_rotary.pair_tables) [B or 1, S, 1, rot] of positions ``pos``
    [B, S], or of start..start+s-1 for every entry when ``pos`` is None.  For constant
    caches (initializers) the tables of every position are made once (_weight_cache) and
    each call takes its rows: every layer of every step rotates at the same few positions."""
    if frozen(cos_cache) and frozen(sin_cache):
        full_c, full_s = derived(
            "gqa_rotary_tables",
            (cos_cache, sin_cache),
            (interleaved,),
            lambda: pair_tables(_wide(cos_cache), _wide(sin_cache), interleaved),
        )
        if pos is None:
            return full_c[None, start : start + s, None], full_s[None, start : start + s, None]
        return full_c[pos][:, :, None], full_s[pos][:, :, None]
    cos, sin = _wide(cos_cache), _wide(sin_cache)
    if pos is None:
        c, sn = cos[None, start : start + s], sin[None, start : start + s]
    else:
        c, sn = cos[pos], sin[pos]
    return pair_tables(c[:, :, None], sn[:, :, None], interleaved)


def _fill_cache(
    present: np.ndarray, past: np.ndarray | None, starts: list[int], s: int, op: str
) -> None:
    """Copy each batch entry's past rows into ``present`` [B, KV, P, H] and zero the rows
    after its new ones (the new rows [start, start + s) are the caller's)."""
    past_dim = 0 if past is None else past.shape[2]
    for start in starts:
        if start and (past is None or start > past_dim):
            raise ExecutionError(f"{op}: seqlens_k needs {start} past positions")
    if len(set(starts)) == 1:  # one past length: whole-batch copies
        start = starts[0]
        if start:
            assert past is not None
            present[:, :, :start] = past[:, :, :start]
        if start + s < present.shape[2]:  # a shared buffer longer than the sequence
            present[:, :, start + s :] = 0
        return
    for i, start in enumerate(starts):
        if start:
            assert past is not None
            present[i, :, :start] = past[i, :, :start]
        present[i, :, start + s :] = 0


def _lengths(
    seqlens_k: Any, total_sequence_length: Any, b: int, s: int
) -> tuple[int, list[int], list[int]]:
    """(the total length, valid keys per batch entry, past length per entry) as Python
    ints: a handful of numbers, for which numpy's per-call cost was most of the
    bookkeeping.  A prompt (s is the total length) has no past; a negative past length
    means seqlens_k is shorter than the new sequence (the caller says what to do)."""
    tsl = np.asarray(total_sequence_length)
    total_max = int(tsl.item() if tsl.size == 1 else tsl.reshape(-1)[0])
    totals = [int(n) + 1 for n in np.ravel(seqlens_k).tolist()]
    past_len = [0] * b if s == total_max else [n - s for n in totals]
    return total_max, totals, past_len


def _window(local_window_size: int, total_max: int) -> int:
    """The local window that limits some query (-1: none does)."""
    return local_window_size if 0 < local_window_size <= total_max - 1 else -1


# The compiled common case (native/_gqa.c), or None when compiled kernels are off.
_COMPILED = native.load("gqa")


def _attend_compiled(
    query: np.ndarray,
    key: np.ndarray | None,
    value: np.ndarray | None,
    past_key: np.ndarray | None,
    past_value: np.ndarray | None,
    heads: tuple[int, int, int],
    past_len: list[int],
    totals: list[int],
    present_len: int,
    rotary: tuple[np.ndarray | None, np.ndarray | None, bool] | None,
    positions_follow: bool,
    causal: bool,
    window: int,
    factor: float,
    tables: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray | None, ...] | None:
    """The outputs from native/_gqa.c, or None when the call is not its case (the numpy
    path then runs, and raises whatever error the inputs deserve): float32 throughout,
    one past length for every batch entry with all its keys valid (no padded prompt),
    past caches of the expected shape holding those rows, rotary positions that follow
    the past (no position_ids in a decode step) inside float32 cos/sin caches.  The
    caller has ruled out a query that is not float32, softcap, bias, sinks, smooth
    softmax and Q/K norms.  ``tables``: the rotary tables of every position of the
    constant caches, when the caller holds them (else _position_tables finds them)."""
    nq, nk, head = heads
    b, s = query.shape[0], query.shape[1]
    start = past_len[0]
    if start + s > present_len or any(n != start + s for n in totals):
        return None
    assert _COMPILED is not None
    keys_read = start + (s + 1) / 2 if causal else start + s  # per query row, on average
    level = _COMPILED.level()
    grouped_step = s == 1 and nq > nk and level >= native.AVX2  # any size (see above)
    if b * nq * s * keys_read * head > _WORK_LIMIT[level] and not grouped_step:
        return None
    if key is not None and value is not None:
        shape = (b, s, nk * head)
        if key.shape != shape or value.shape != shape:
            return None
        if key.dtype != np.float32 or value.dtype != np.float32:
            return None
        key, value = np.ascontiguousarray(key), np.ascontiguousarray(value)
    if past_key is not None and past_value is not None:
        cache_shape = (b, nk, past_key.shape[2], head)
        if past_key.shape != cache_shape or past_value.shape != cache_shape:
            return None
        if cache_shape[2] < start:
            return None
        if past_key.dtype != np.float32 or past_value.dtype != np.float32:
            return None
        past_key, past_value = np.ascontiguousarray(past_key), np.ascontiguousarray(past_value)
    elif start or past_key is not None or past_value is not None:
        return None
    big_c = big_s = None
    rot, interleaved = 0, False
    if rotary is not None:
        cos_cache, sin_cache, interleaved = rotary
        if cos_cache is None or sin_cache is None or not positions_follow:
            return None
        if start + s > cos_cache.shape[0]:
            return None
        if tables is not None:
            big_c, big_s = tables[0][None, start : start + s, None], tables[1][None, start : start + s, None]  # fmt: skip
        else:
            big_c, big_s = _position_tables(cos_cache, sin_cache, interleaved, None, start, s)
        rot = big_c.shape[-1]
        if big_c.dtype != np.float32 or big_s.dtype != np.float32 or rot > head:
            return None
        big_c, big_s = np.ascontiguousarray(big_c), np.ascontiguousarray(big_s)
    present_k = np.empty((b, nk, present_len, head), dtype=np.float32)
    present_v = np.empty_like(present_k)
    out = np.empty((b, s, nq * head), dtype=np.float32)
    # factor goes as a double: the module's "f" rounds it to float32 as np.float32 does.
    _COMPILED.attend(
        np.ascontiguousarray(query), key, value, past_key, past_value, big_c, big_s,
        present_k, present_v, out, b, s, nq, nk, head, start, rot, interleaved, causal,
        window, factor,
    )  # fmt: skip
    return out, present_k, present_v, None


@kernel("GroupQueryAttention", domain=MS, since=1, ctx=True)
def group_query_attention(
    ctx: KernelContext,
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
    k_scale: np.ndarray | None = None,
    v_scale: np.ndarray | None = None,
    q_norm_weight: np.ndarray | None = None,
    k_norm_weight: np.ndarray | None = None,
    *,
    num_heads: int,
    kv_num_heads: int,
    scale: float | None = None,
    softcap: float = 0.0,
    causal: int = 1,
    local_window_size: int = -1,
    do_rotary: int = 0,
    rotary_interleaved: int = 0,
    smooth_softmax: int = -1,
    qk_output: int = 0,
    qk_norm_epsilon: float = 1e-6,
    sliding_window_cache: int = 0,
    k_quant_type: str = "NONE",
    v_quant_type: str = "NONE",
    kv_cache_bit_width: int = 0,
) -> tuple[np.ndarray | None, ...]:
    op = "GroupQueryAttention"
    if k_scale is not None or v_scale is not None or k_quant_type != "NONE":
        raise ExecutionError(f"{op}: quantised KV caches are not supported")
    if sliding_window_cache:
        raise ExecutionError(f"{op}: window-sized KV caches are not supported")
    if qk_output and ctx.wants_output(3):
        raise ExecutionError(f"{op}: the output_qk output is not supported")
    if seqlens_k is None or total_sequence_length is None:
        raise ExecutionError(f"{op}: seqlens_k and total_sequence_length are required")
    if num_heads % kv_num_heads:
        raise ExecutionError(f"{op}: num_heads must be a multiple of kv_num_heads")
    dtype = np.asarray(query).dtype
    q_in = _wide(query)
    b, s, width = q_in.shape
    nq, nk = num_heads, kv_num_heads
    if key is None:  # packed QKV: [B, S, N + 2 KV, H] views of the one input
        head = width // (nq + 2 * nk)
        if width != (nq + 2 * nk) * head:
            raise ExecutionError(f"{op}: packed QKV width {width} does not split into heads")
    else:
        if value is None:
            raise ExecutionError(f"{op}: key and value must be given together")
        head = width // nq

    total_max, totals, past_len = _lengths(seqlens_k, total_sequence_length, b, s)
    prompt = s == total_max
    if any(n < 0 for n in past_len):
        raise ExecutionError(f"{op}: seqlens_k is shorter than the new sequence")

    # The common case runs compiled (_attend_compiled): one call where the numpy path
    # below makes ~40.
    if (
        _COMPILED is not None
        and dtype == np.float32
        and (q_norm_weight is None or k_norm_weight is None)
        and not softcap > 0
        and attention_bias is None
        and head_sink is None
        and smooth_softmax != 1
        and b * s * head > 0
    ):
        result = _attend_compiled(
            q_in,
            key,
            value,
            past_key,
            past_value,
            (nq, nk, head),
            past_len,
            totals,
            max(total_max, 0 if past_key is None else past_key.shape[2]),
            (cos_cache, sin_cache, bool(rotary_interleaved)) if do_rotary else None,
            position_ids is None or prompt,
            bool(causal),
            _window(local_window_size, total_max),
            scale if scale else 1.0 / math.sqrt(head),
        )
        if result is not None:
            return result

    if key is None:
        packed = q_in.reshape(b, s, nq + 2 * nk, head)
        q_bs, k_bs, v_bs = packed[:, :, :nq], packed[:, :, nq : nq + nk], packed[:, :, nq + nk :]
    else:
        assert value is not None  # (checked with the head size above)
        q_bs = q_in.reshape(b, s, nq, head)
        k_bs = _wide(key).reshape(b, s, nk, head)
        v_bs = _wide(value).reshape(b, s, nk, head)
        packed = None
    if q_norm_weight is not None and k_norm_weight is not None:
        q_bs = _rms(q_bs, _wide(q_norm_weight), qk_norm_epsilon)
        k_bs = _rms(k_bs, _wide(k_norm_weight), qk_norm_epsilon)
        packed = None

    pk = None if past_key is None else _wide(past_key)
    pv = None if past_value is None else _wide(past_value)
    past_dim = 0 if pk is None else pk.shape[2]
    present_len = max(total_max, past_dim)
    # The new keys and values go straight to their rows of the present cache, and the
    # queries to a [B, N, S, H] buffer (the layout the products read): each is written
    # once, through a transposed view, with no intermediate copy.
    present_k = np.empty((b, nk, present_len, head), dtype=q_in.dtype)
    present_v = np.empty_like(present_k)
    _fill_cache(present_k, pk, past_len, s, op)
    _fill_cache(present_v, pv, past_len, s, op)
    uniform = len(set(past_len)) <= 1
    start = past_len[0] if b else 0
    v_rows: np.ndarray | None = None
    if uniform:
        k_rows = present_k[:, :, start : start + s].transpose(0, 2, 1, 3)  # [B, S, KV, H]
        v_rows = present_v[:, :, start : start + s].transpose(0, 2, 1, 3)
    else:  # ragged: the rows are placed per batch entry below
        k_rows = np.empty((b, s, nk, head), dtype=q_in.dtype)
    q = np.empty((b, nq, s, head), dtype=q_in.dtype)
    q_rows = q.transpose(0, 2, 1, 3)  # [B, S, N, H] view

    if do_rotary:
        if cos_cache is None or sin_cache is None:
            raise ExecutionError(f"{op}: do_rotary needs cos_cache and sin_cache")
        inter = bool(rotary_interleaved)
        if position_ids is not None and not prompt:
            pos: np.ndarray | None = np.broadcast_to(
                np.asarray(position_ids, dtype=np.int64), (b, s)
            )
        elif uniform:  # the same positions for every entry: rows of the caches
            pos = None
        else:
            pos = np.array(past_len)[:, None] + np.arange(s)[None, :]
        last = start + s - 1 if pos is None else (int(pos.max()) if pos.size else -1)
        if last >= cos_cache.shape[0]:
            raise ExecutionError(f"{op}: position beyond the cos/sin cache")
        big_c, big_s = _position_tables(cos_cache, sin_cache, inter, pos, start, s)
        tables = (big_c, big_s, inter)
        if packed is not None:  # queries and keys side by side: rotated in one go
            qk = packed[:, :, : nq + nk]
            _rotate(qk, tables, [(slice(0, nq), q_rows), (slice(nq, nq + nk), k_rows)])
        else:
            _rotate(q_bs, tables, [(slice(None), q_rows)])
            _rotate(k_bs, tables, [(slice(None), k_rows)])
    else:
        q_rows[...] = q_bs
        k_rows[...] = k_bs
    if v_rows is not None:
        v_rows[...] = v_bs
    else:
        for i, start in enumerate(past_len):
            present_k[i, :, start : start + s] = k_rows[i].transpose(1, 0, 2)
            present_v[i, :, start : start + s] = v_bs[i].transpose(1, 0, 2)

    # Query head n reads KV head n // group: the group's query rows stacked on one KV head
    # ([B, KV, group*S, H]) multiply the cache in place, no repeated copy of K and V.
    group = nq // nk
    keys = present_k[:, :, :total_max]  # [B, KV, T, H]
    vals = present_v[:, :, :total_max]
    factor = scale if scale else 1.0 / np.sqrt(head)
    scores = (q.reshape(b, nk, group * s, head) @ np.swapaxes(keys, -1, -2)).reshape(
        b, nq, s, total_max
    )
    scores *= q.dtype.type(factor)
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    if attention_bias is not None:
        scores = scores + _wide(attention_bias)[..., :total_max]
    # Nothing is masked when every entry has all T keys and no query can see past them
    # (a decode step of one token per entry): the mask pass is skipped.
    full = uniform and all(n == total_max for n in totals)
    empty_rows = False
    window = _window(local_window_size, total_max)
    masked = not full or (bool(causal) and s > 1) or window > 0
    if masked:
        blocked, empty_rows = _blocked(
            tuple(past_len), tuple(totals), s, total_max, bool(causal), window
        )
        np.copyto(scores, -np.inf, where=blocked)
    peak = scores.max(axis=-1, keepdims=True)
    sink = None
    if head_sink is not None:
        sink = _wide(head_sink).reshape(1, -1, 1, 1)
    elif smooth_softmax == 1:
        sink = np.zeros((1, 1, 1, 1), dtype=scores.dtype)
    if sink is not None:
        peak = np.maximum(peak, sink)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    # exp(scores - peak) / sum, in place in the scores' buffer.
    np.subtract(scores, peak, out=scores)
    np.exp(scores, out=scores)
    denom = scores.sum(axis=-1, keepdims=True)
    if sink is not None:
        denom = denom + np.exp(sink - peak)
    # A row sums to 0 only when all its scores are -inf: fully masked, or a -inf bias.
    # Otherwise its peak's own term is exp(0) = 1 (and with a sink, the sink's or the
    # peak's is), so the guard's two passes are skipped; a NaN row stays NaN either way.
    if (masked and empty_rows) or attention_bias is not None:
        scores /= np.where(denom == 0, 1.0, denom)  # a row with nothing to attend to
    else:
        scores /= denom
    probs = scores.reshape(b, nk, group * s, total_max)
    heads_out = (probs @ vals).reshape(b, nq, s, head)
    out = heads_out.transpose(0, 2, 1, 3).reshape(b, s, nq * head)
    return (
        out.astype(dtype, copy=False),
        present_k.astype(dtype, copy=False),
        present_v.astype(dtype, copy=False),
        None,
    )


_GQA_INPUTS = 16  # query ... k_norm_weight


@specializer(group_query_attention)
def _specialize_gqa(
    attrs: dict[str, Any], known: tuple[Any, ...], n_outputs: int, ctx: KernelContext
) -> Any:
    """The specialized call (registry.specializer) of a GroupQueryAttention node the
    compiled kernel can run: attributes read and checked once, the rotary tables of its
    constant cos/sin caches held, and per call only what depends on the inputs (their
    shapes, the sequence lengths) before `_attend_compiled`.  The kernel runs anything
    else (a fed cache, position_ids, a bias, another dtype), so the same numbers and
    errors.  A tiny Llama's attention: 18.7 -> 10.9 us a call (the context, 17 keyword
    arguments and the checks were most of it)."""
    if _COMPILED is None:
        return None
    padded = (*known, *([None] * (_GQA_INPUTS - len(known))))
    # position_ids, bias, sinks, scales, norms: the node has none (so no call has them)
    if any(v is not None for v in padded[9:]):
        return None
    num_heads, kv_num_heads = int(attrs["num_heads"]), int(attrs["kv_num_heads"])
    if (
        not kv_num_heads
        or num_heads % kv_num_heads
        or attrs.get("softcap", 0.0) > 0
        or attrs.get("smooth_softmax", -1) == 1
        or attrs.get("sliding_window_cache", 0)
        or attrs.get("k_quant_type", "NONE") != "NONE"
        or attrs.get("v_quant_type", "NONE") != "NONE"
        or (attrs.get("qk_output", 0) and ctx.wants_output(3))
    ):
        return None
    cos_k, sin_k = padded[7], padded[8]
    interleaved = bool(attrs.get("rotary_interleaved", 0))
    tables = None
    if attrs.get("do_rotary", 0):
        if cos_k is RUNTIME or sin_k is RUNTIME or cos_k is None or sin_k is None:
            return None
        if not (frozen(cos_k) and frozen(sin_k)):
            return None
        tables = derived(
            "gqa_rotary_tables",
            (cos_k, sin_k),
            (interleaved,),
            lambda: pair_tables(_wide(cos_k), _wide(sin_k), interleaved),
        )
        if tables[0].dtype != np.float32 or tables[1].dtype != np.float32:
            return None
    nq, nk = num_heads, kv_num_heads
    causal = bool(attrs.get("causal", 1))
    window_size = int(attrs.get("local_window_size", -1))
    scale = attrs.get("scale")
    rotary = (cos_k, sin_k, interleaved) if tables is not None else None
    fallback = functools.partial(group_query_attention, ctx, **attrs)

    def call(*ins: Any) -> Any:
        query = ins[0]
        n_in = len(ins)
        if (
            n_in < 7
            or type(query) is not np.ndarray
            or query.dtype != np.float32
            or query.ndim != 3
            or (tables is not None and (n_in < 9 or ins[7] is not cos_k or ins[8] is not sin_k))
        ):
            return specialized_outputs(fallback(*ins), n_outputs)
        key, value, past_key, past_value, seqlens_k, tsl = ins[1:7]
        if seqlens_k is None or tsl is None or type(tsl) is not np.ndarray:
            return specialized_outputs(fallback(*ins), n_outputs)
        b, s, width = query.shape
        if key is None:
            head = width // (nq + 2 * nk)
            if width != (nq + 2 * nk) * head:
                return specialized_outputs(fallback(*ins), n_outputs)
        elif value is None:
            return specialized_outputs(fallback(*ins), n_outputs)
        else:
            head = width // nq
        total_max, totals, past_len = _lengths(seqlens_k, tsl, b, s)
        if b * s * head <= 0 or any(n < 0 for n in past_len):
            return specialized_outputs(fallback(*ins), n_outputs)
        result = _attend_compiled(
            query, key, value, past_key, past_value, (nq, nk, head), past_len, totals,
            max(total_max, 0 if past_key is None else past_key.shape[2]), rotary, True,
            causal, _window(window_size, total_max),
            scale if scale else 1.0 / math.sqrt(head), tables,
        )  # fmt: skip
        if result is None:
            return specialized_outputs(fallback(*ins), n_outputs)
        return specialized_outputs(result, n_outputs)

    # The same call in C from the node loop (native/_gqa.c's `held`): the calls `call`
    # hands to `_attend_compiled` and that it runs, the same job, so the same numbers;
    # every other call goes to `call`.
    table_c = table_s = None
    if tables is not None:
        table_c, table_s = (np.ascontiguousarray(t, dtype=np.float32) for t in tables)
    return _COMPILED.held(
        nq, nk, causal, interleaved, window_size, float(scale) if scale else 0.0,
        _WORK_LIMIT, cos_k, sin_k, table_c, table_s,
        0 if cos_k is None or cos_k is RUNTIME else int(cos_k.shape[0]), n_outputs, call,
        np.ndarray, np.empty, np.dtype(np.float32),
    )  # fmt: skip
