"""com.microsoft MatMulNBits: matmul with block-wise 2, 4 or 8-bit quantised weights.

What is multiplied.  The weights are the definition's: (code - zero point) * scale of
each block, in float32.  The activations are the input as it is, except where the model
allows int8 activations (accuracy_level 4) and onnxruntime's CPU kernel takes that
licence: packed uint8 zero points or none, no g_idx, any bits, any rows, float32 or
float16 inputs (measured with onnxruntime 1.32 on an AVX2 CPU; float zero points
or a g_idx keep it in float at level 4).  There each row of A is cut into blocks of
block_size along K and each block is rounded to int8 steps of max|a| / 127
(`int8_activations`; runtime/nbits_accuracy.py's emulate_level4 is the float64
reference), so the numbers are onnxruntime's to float rounding, on every CPU, in stepped
and unwatched runs alike.  Set accuracy_level to 0 for the float product.

How it is multiplied:

* level 4 with 4-bit weights, any number of rows (a decode step, a prompt; in calls of up
  to INT8_ROWS_PER_CALL rows): the compiled kernel native/_nbits8.c quantizes the rows
  and sums each block's int8 by 4-bit products exactly in integers (vpmaddubsw), the
  blocks in float32; about 12 instructions per 64 weights, so a decode step is bound by
  memory, and a prompt reads half a byte per weight where the float routes read four;
* a weight of 256K codes or more, up to native_max_rows rows of activations (32 with
  AVX-512, 6 with AVX2, none at plain C: each measured against the next way): the
  compiled kernel native/_nbits.c reads the packed bytes as they are stored and turns
  them into the definition's float32 weights in registers (from 5 rows on, 4 rows of the
  weight at a time into a buffer that stays in L1, reused for every row); only the order
  of the float32 sums differs from the definition's product, within
  (K + 2) * 2^-24 * sum |a||w| (tests/runtime/test_native_nbits.py).  It keeps no
  dequantized weight: at most float32 copies of float16 scales and zero points.  A decode
  step is bound by memory, and this reads half a byte per int4 weight where the float32
  form reads four.  Act-order g_idx and compiled kernels off (ONNXVIZ_NATIVE=off, no C
  compiler) take the next way;
* otherwise BLAS on the dequantized weight: an initializer's weight is dequantized once
  and kept as [K, N] float32 rows (kernels/_weight_cache, bounded by a quarter of the
  machine's memory); a weight past that bound is dequantized chunk by chunk on each call,
  each chunk multiplied as it is made.

At level 4 the last two multiply the int8 steps as float32 values (`int8_steps`: each
int8 times its block's float32 step, rounded once), so every route gives the same
product up to float32 rounding.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.kernels import packed_gemm
from onnxviz.runtime.kernels._weight_cache import derived, frozen, kept
from onnxviz.runtime.kernels.blas import few_rows_matmul
from onnxviz.runtime.registry import RUNTIME, kernel, specializer

MS = "com.microsoft"
_F32 = np.dtype(np.float32)


def unpack_bits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first ``count`` ``bits``-wide unsigned values of each row of bytes, packed from
    the least significant bits of each byte upward."""
    per_byte = 8 // bits
    shifts = (np.arange(per_byte, dtype=np.uint8) * bits).astype(np.uint8)
    mask = np.uint8((1 << bits) - 1)
    values = (packed[..., None] >> shifts) & mask
    return values.reshape(*packed.shape[:-1], -1)[..., :count]


@kernel("MatMulNBits", domain=MS, since=1)
def matmul_nbits(
    a: np.ndarray,
    b: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None = None,
    g_idx: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    *,
    K: int,
    N: int,
    block_size: int,
    bits: int = 4,
    accuracy_level: int = 0,
    weight_prepacked: int = 0,
) -> np.ndarray:
    """The dequantized weights times the activations, those rounded to int8 steps per
    block where ``accuracy_level`` 4 allows it as onnxruntime reads it (the module's
    docstring)."""
    if bits not in (2, 4, 8):
        raise ExecutionError(f"MatMulNBits: bits={bits} is not supported (2, 4 or 8)")
    if weight_prepacked:
        raise ExecutionError("MatMulNBits: prepacked weights are execution-provider specific")
    if block_size < 16 or block_size & (block_size - 1):
        raise ExecutionError("MatMulNBits: block_size must be a power of two >= 16")
    dtype = np.asarray(a).dtype
    av = np.asarray(a).astype(np.float32, copy=False)
    if av.shape[-1] != K:
        raise ExecutionError(f"MatMulNBits: input has {av.shape[-1]} features, K is {K}")
    rows = av.reshape(-1, K)
    if int8_activations(accuracy_level, zero_points, g_idx):
        if bits == 4 and _NBITS8 is not None:
            form = native_form(b, scales, zero_points, g_idx, K, N, block_size, bits)
            if form is not None:
                buffers = native_buffers(b, scales, zero_points, form, bias, K, N, block_size, bits)
                y = int8_call(_NBITS8, rows, buffers, (rows.shape[0], N))
                return y.reshape(*av.shape[:-1], N).astype(dtype, copy=False)
        rows = int8_steps(rows, K, block_size)
    if _NBITS is not None and rows.shape[0] <= native_max_rows(_NBITS, K, N, block_size, bits):
        form = native_form(b, scales, zero_points, g_idx, K, N, block_size, bits)
        if form is not None:
            y = native_product(
                _NBITS, rows, b, scales, zero_points, form, bias, K, N, block_size, bits
            )
            return y.reshape(*av.shape[:-1], N).astype(dtype, copy=False)
    flat = _by_packed_weight(rows, b, scales, zero_points, g_idx, bias, K, N, block_size, bits)
    if flat is not None:
        return flat.reshape(*av.shape[:-1], N).astype(dtype, copy=False)
    # The dequantized weight of an initializer is made once (_weight_cache): dequantizing
    # on every call cost more than the product itself in a decoder step.  It is kept as
    # [K, N] rows: OpenBLAS multiplies a few rows by that layout up to twice as fast as
    # by the transposed view of [N, K] (its AVX-512 kernels; on par on AVX2).
    # A big weight the cache will not keep (a caller's array, or past its memory bound)
    # is not made whole on each call: each chunk of it, made in the cache, multiplies the
    # activations at once (3 to 10 times faster than writing, then reading, the whole
    # weight; the sums may differ from the whole product's in the last bits).
    w_kn = _kept_kn(b, scales, zero_points, g_idx, K, N, block_size, bits)
    if w_kn is None and K * N * 4 < _STREAM_MIN_BYTES:
        # A small weight is made whole, as the cache makes it: the same product, to the
        # last bit, as when it is kept.
        w_kn = dequantize_nbits(
            b, scales, zero_points, g_idx, K, N, block_size, bits, transposed=True
        )
    if w_kn is not None:
        flat = few_rows_matmul(rows, w_kn)
    else:
        flat = np.empty((rows.shape[0], N), dtype=np.float32)
        for r0, r1, chunk in dequantized_rows(
            b, scales, zero_points, g_idx, K, N, block_size, bits, _STREAM_ELEMENTS
        ):
            flat[:, r0:r1] = rows @ chunk.T
    y = flat.reshape(*av.shape[:-1], N)
    if bias is not None:
        y += np.asarray(bias).astype(np.float32, copy=False)
    return y.astype(dtype, copy=False)


@specializer(matmul_nbits)
def _prepared_nbits(attrs: dict[str, Any], known: tuple[Any, ...], n_outputs: int) -> Any:
    """MatMulNBits by an initializer's weight in unwatched runs (prepared.py): what the
    kernel looks up on every call (the route for the weight, the compiled kernel's
    buffers, the dequantized weight in the cache) is found once.  On the tiny genai
    Llama the lookups were about half of a 7 us call.  The same routes and products as
    the kernel; a prompt's rows (the packed GEMM), another input dtype or another
    weight (an initializer overridden by a feed) take the kernel."""
    K, N, block, bits = attrs["K"], attrs["N"], attrs["block_size"], attrs.get("bits", 4)
    consts = (*known[1:], None, None, None, None, None)[:5]
    b0, s0, z0, g0, bias0 = consts
    if (
        bits not in (2, 4, 8)
        or attrs.get("weight_prepacked", 0)
        or block < 16
        or block & (block - 1)
        or any(c is RUNTIME for c in consts)
        or g0 is not None
        or not all(x is None or frozen(x) for x in (b0, s0, z0, bias0))
        or b0 is None
        or s0 is None
    ):
        return None
    kernel = functools.partial(matmul_nbits, **attrs)
    if int8_activations(attrs.get("accuracy_level", 0), z0, g0):
        return _prepared_int8(kernel, known, K, N, block, bits)
    native_rows = 0 if _NBITS is None else native_max_rows(_NBITS, K, N, block, bits)
    form = native_form(b0, s0, z0, None, K, N, block, bits) if native_rows else None
    buffers = None
    if form is not None:
        buffers = native_buffers(b0, s0, z0, form, bias0, K, N, block, bits)
    else:
        native_rows = 0
    # Past this many rows the kernel routes to the packed GEMM; a weight the cache may
    # not keep is multiplied in chunks: both keep the kernel's call.
    blas_rows = packed_gemm.MIN_ROWS if K * N * 4 < _STREAM_MIN_BYTES else 0
    bias32 = None if bias0 is None else np.asarray(bias0).astype(np.float32, copy=False)
    weight: list[np.ndarray] = []  # the [K, N] float32 weight, found on the first call

    def call(
        a: Any, b: Any, scales: Any, zero_points: Any = None, g_idx: Any = None, bias: Any = None
    ) -> Any:
        if not _the_prepared_case(consts, K, a, b, scales, zero_points, g_idx, bias):
            return kernel(a, b, scales, zero_points, g_idx, bias)
        rows = a.reshape(-1, K)
        m = rows.shape[0]
        if m <= native_rows:
            return native_call(_NBITS, rows, buffers, (*a.shape[:-1], N))  # type: ignore[arg-type]
        if m >= blas_rows or m * K * N <= packed_gemm.small_macs():
            return kernel(a, b, scales, zero_points, g_idx, bias)
        if not weight:
            w_kn = _kept_kn(b0, s0, z0, None, K, N, block, bits)
            if w_kn is None:  # the cache is full: the kernel makes it on each call
                return kernel(a, b, scales, zero_points, g_idx, bias)
            weight.append(w_kn)
        flat = few_rows_matmul(rows, weight[0])
        if bias32 is not None:
            flat += bias32
        return flat.reshape(*a.shape[:-1], N)

    mod = packed_gemm.module()
    if mod is not None and packed_gemm.small_rows(K, N) and not native_rows:
        # A small weight: the rows of a token or a short prompt make a product of fixed
        # costs, run in C from the node loop (packed_gemm.held_product) by the packed
        # form the kernel's `_by_packed_weight` reads too: the same numbers.
        p = _packed_form(mod, b0, s0, z0, None, K, N, block, bits)
        if p is not None:
            expect = tuple(known[1:])
            return packed_gemm.held_product(mod, p, bias32, expect, call)
    return call


def _the_prepared_case(consts: tuple[Any, ...], K: int, a: Any, *inputs: Any) -> bool:
    """Whether a prepared call's inputs are the node's own constants ``consts`` (weight,
    scales, zero points, g_idx, bias: by identity) and float32 activations of K features:
    the case its found-once buffers are for (anything else takes the kernel)."""
    b0, s0, z0, g0, bias0 = consts
    b, scales, zero_points, g_idx, bias = inputs
    return (
        b is b0
        and scales is s0
        and zero_points is z0
        and g_idx is None
        and g0 is None
        and bias is bias0
        and type(a) is np.ndarray
        and a.dtype == _F32
        and a.shape[-1:] == (K,)
    )


def _prepared_int8(
    kernel: Any, known: tuple[Any, ...], K: int, N: int, block: int, bits: int
) -> Any:
    """The prepared call at accuracy_level 4: float32 rows go straight to the compiled
    int8 kernel with the buffers found once (up to INT8_ROWS_PER_CALL of them held in C);
    inputs other than the node's constants take the kernel.  None (the kernel on
    every call) without that kernel or for 2- and 8-bit weights."""
    if bits != 4 or _NBITS8 is None:
        return None
    consts = (*known[1:], None, None, None, None, None)[:5]
    b0, s0, z0, _g0, bias0 = consts
    form = native_form(b0, s0, z0, None, K, N, block, bits)
    if form is None:
        return None
    buffers = native_buffers(b0, s0, z0, form, bias0, K, N, block, bits)
    module = _NBITS8

    def call(
        a: Any, b: Any, scales: Any, zero_points: Any = None, g_idx: Any = None, bias: Any = None
    ) -> Any:
        if not _the_prepared_case(consts, K, a, b, scales, zero_points, g_idx, bias):
            return kernel(a, b, scales, zero_points, g_idx, bias)
        return int8_call(module, a.reshape(-1, K), buffers, (*a.shape[:-1], N))

    # The common call made in C from the node loop (_nbits8's held): the node's own
    # inputs, a C-contiguous float32 ``a``; every other call is `call`'s.
    weight, sc, zp, bias32 = buffers[0]
    _K, _N, _block, _bits, _kind, zp_row, _has_bias = buffers[1]
    return module.held(
        weight, sc, zp if len(zp) else None, bias32 if len(bias32) else None,
        K, N, block, zp_row, INT8_ROWS_PER_CALL, tuple(known[1:]), call, *native.held_arrays(),
    )  # fmt: skip


def int8_activations(
    accuracy_level: int, zero_points: np.ndarray | None, g_idx: np.ndarray | None
) -> bool:
    """Whether the activations are rounded to int8 steps per block: the model allows it
    (accuracy_level 4) and onnxruntime's CPU kernel does it for these inputs (packed
    uint8 zero points or none, no g_idx; float zero points or a g_idx stay float)."""
    if accuracy_level != 4 or g_idx is not None:
        return False
    return zero_points is None or np.asarray(zero_points).dtype == np.uint8


def int8_steps(rows: np.ndarray, K: int, block_size: int) -> np.ndarray:
    """rows [M, K] float32 rounded to int8 steps per block of ``block_size`` along K, as
    float32 values: rint(x * (127 / max|block|)) * (max|block| / 127), each a float32
    operation (127 / max, not 1 / step: onnxruntime's, and they differ in the last bit).
    A row holding a NaN or an infinity has no int8 form: NaN throughout."""
    m = rows.shape[0]
    k_blocks = (K + block_size - 1) // block_size
    padded = np.zeros((m, k_blocks * block_size), dtype=np.float32)
    padded[:, :K] = rows
    blocks = padded.reshape(m, k_blocks, block_size)
    amax = np.abs(blocks).max(axis=-1)
    with np.errstate(invalid="ignore", over="ignore"):
        inverse = np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax != 0)
        steps = np.rint(blocks * inverse[..., None])
        steps *= (amax / np.float32(127))[..., None]
    out = np.ascontiguousarray(steps.reshape(m, -1)[:, :K])
    bad = ~np.isfinite(rows).all(axis=1)
    out[bad] = np.nan
    return out


def int8_call(
    module: Any,
    rows: np.ndarray,
    buffers: tuple[tuple[Any, ...], tuple[int, ...]],
    shape: tuple[int, ...],
) -> np.ndarray:
    """The compiled level-4 product (native/_nbits8.c) of ``rows`` [M, K] by the 4-bit
    weight of ``buffers`` (native_buffers), in a fresh float32 array of ``shape``: one
    call per INT8_ROWS_PER_CALL rows (each row's sums are the same whichever call makes
    them)."""
    weight, sc, zp, bias = buffers[0]
    K, N, block, _bits, zp_kind, zp_row, has_bias = buffers[1]
    out = np.empty(shape, dtype=np.float32)
    flat = out.reshape(-1, N)
    src = rows if rows.flags.c_contiguous else np.ascontiguousarray(rows)
    m, step = src.shape[0], INT8_ROWS_PER_CALL
    for r0 in range(0, max(m, 1), step):  # (no rows: one call, as before)
        r1 = min(m, r0 + step)
        module.matmul(
            src[r0:r1], weight, sc, zp, bias, flat[r0:r1], r1 - r0, K, N, block, zp_kind,
            zp_row, has_bias,
        )  # fmt: skip
    return out


def _kept_kn(
    b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None,
    g_idx: np.ndarray | None, K: int, N: int, block_size: int, bits: int,
) -> np.ndarray | None:  # fmt: skip
    """The dequantized weight as [K, N] float32 rows from the weight cache (made and
    stored on the first call), or None when the cache does not keep it."""
    return kept(  # type: ignore[no-any-return]
        "MatMulNBits_kn",
        (b, scales, zero_points, g_idx),
        (K, N, block_size, bits),
        K * N * 4,
        lambda: dequantize_nbits(
            b, scales, zero_points, g_idx, K, N, block_size, bits, transposed=True
        ),
    )


def _by_packed_weight(
    rows: np.ndarray,
    b: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    g_idx: np.ndarray | None,
    bias: np.ndarray | None,
    K: int,
    N: int,
    block_size: int,
    bits: int,
) -> np.ndarray | None:
    """A prompt's rows times the dequantized weight (+ bias) by the compiled GEMM
    (kernels/packed_gemm.py), the weight kept in its packed form instead of as [K, N]
    (the same bytes: never both, but for a model run both with and without one BLAS
    thread), or None where that GEMM does not route or the cache will not keep the form.
    On a Llama h2048's weights read from memory, 32 rows took 0.62x OpenBLAS's time on
    the [K, N] weight (benchmarks/bench_packed_gemm.py --shapes cold)."""
    m = rows.shape[0]
    if m < packed_gemm.MIN_ROWS and m * K * N > packed_gemm.small_macs():
        return None  # a decode step: no lookups on its path
    mod = packed_gemm.module()
    if mod is None or not packed_gemm.use_for(m, K, N):
        return None
    p = _packed_form(mod, b, scales, zero_points, g_idx, K, N, block_size, bits)
    if p is None:
        if m * K * N > packed_gemm.small_macs():
            return None
        # A small weight the cache does not keep (a fed one) is packed for this call:
        # the same product, to the last bit, as by the kept form.
        w_kn = dequantize_nbits(
            b, scales, zero_points, g_idx, K, N, block_size, bits, transposed=True
        )
        p = packed_gemm.pack(w_kn, mod)
    out = np.empty((rows.shape[0], N), dtype=np.float32)
    bias_row = None if bias is None else _f32(bias)
    packed_gemm.matmul_packed(mod, np.ascontiguousarray(rows), p, out, bias=bias_row)
    return out


def _packed_form(
    mod: Any, b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None,
    g_idx: np.ndarray | None, K: int, N: int, block_size: int, bits: int,
) -> packed_gemm.Packed | None:  # fmt: skip
    """The dequantized weight in the compiled GEMM's packed form, kept in the weight
    cache (made on the first call), or None when the cache does not keep it."""
    nr = int(mod.panel_width())

    def build() -> packed_gemm.Packed:
        w_kn = dequantize_nbits(
            b, scales, zero_points, g_idx, K, N, block_size, bits, transposed=True
        )
        return packed_gemm.pack(w_kn, mod)

    return kept(  # type: ignore[no-any-return]
        "MatMulNBits_packed",
        (b, scales, zero_points, g_idx),
        (K, N, block_size, bits, nr),
        K * -(-N // nr) * nr * 4,
        build,
    )


# The compiled kernel (native/_nbits.c), None when compiled kernels are off or not built.
_NBITS = native.load("nbits")
# Rows of activations up to which the compiled kernel runs, by its level (more: the
# dequantized weight in BLAS).  Measured (1 thread, against BLAS on the kept [K, N]
# weight, Llama shapes 2048x5632, 5632x2048, 1024x2816) on a Sapphire Rapids core: AVX-512
# 0.32-0.35 of BLAS's time at 1 row, 0.40-0.61 at 8, 0.64-0.83 at 16, then 0.98-1.20 at
# 32 and 1.08-1.66 at 48 (BLAS' blocking wins back the 4 bytes a weight); AVX2 0.68-0.75
# at 1 row, 0.70 at 4, 0.93 at 6, 1.28 at 8.  The plain C level is the portable
# reference, 16-35 times slower than BLAS: never used for speed.
MAX_ROWS_AT_LEVEL = {native.GENERIC: 0, native.AVX2: 6, native.AVX512: 24, native.AVX512_VNNI: 24}


# The level-4 int8 kernel (native/_nbits8.c), None when compiled kernels are off or not
# built.  It runs every row count: one node of a Llama's shapes (1024x2816, 2816x1024,
# 2048x2048, 2048x5632, 5632x2048; 1 thread, AVX2 Zen 3, best of 7, ms) against the float
# routes on the int8 steps, which read the kept float32 weight (four bytes a weight where
# this reads half of one), and onnxruntime's level-4 node: at 16 rows on par with both; at
# 24-64 rows 0.65-0.8 of the float routes' time, 0.9-1.07x onnxruntime's where the float
# routes took 1.2-1.5x (2048x5632 at 32 rows 12.1 -> 8.1 ms, onnxruntime 8.2-8.6); at
# 128-512 on par with both.  (It was held to 16 rows before: "0.8-0.9 of the float
# routes' time at 16, even at 24" was read as a crossover.)  It keeps no float32 weight.
_NBITS8 = native.load("nbits8")
# Rows per call of the int8 kernel: it quantizes its rows into scratch (about 2K bytes a
# row), so a long prompt runs in calls of this many rows (the held C call takes up to
# this many, the Python call the rest).
INT8_ROWS_PER_CALL = 128  # (64, 128 or 256: the same time at 128 and 256 rows)


# Weights smaller than this stay on the numpy path: their float32 form sits in the CPU's
# caches, where BLAS beats the kernel's fixed costs (measured, 1 thread, AVX-512, M 1 and
# 4: 8K-128K weights 1.1-1.9x slower through the kernel, 256K 0.70-0.78, 1M 0.67-0.84).
NATIVE_MIN_WEIGHTS = 1 << 18


def native_max_rows(module: Any, K: int, N: int, block_size: int, bits: int) -> int:
    """Rows of activations up to which ``module`` (_nbits at its level) runs this weight
    layout: the level the kernel really runs, lowered while a block is shorter than the
    level's chunk of bytes (16 AVX-512, 8 AVX2) or K than a block, as _nbits.c's
    call_level lowers it; none for a weight under NATIVE_MIN_WEIGHTS."""
    if K * N < NATIVE_MIN_WEIGHTS:
        return 0
    level = min(int(module.level()), native.AVX512)
    blob = block_size * bits // 8
    if level == native.AVX512 and blob % 16:
        level = native.AVX2
    if level == native.AVX2 and blob % 8:
        level = native.GENERIC
    if block_size > K:  # no whole block: the plain C loop
        level = native.GENERIC
    return MAX_ROWS_AT_LEVEL[level]


def native_form(
    b: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    g_idx: np.ndarray | None,
    K: int,
    N: int,
    block_size: int,
    bits: int,
) -> tuple[np.ndarray | None, np.ndarray | None, int, int] | None:
    """What the compiled kernel needs besides the packed weight, made once per initializer
    (_weight_cache; a small form: scales and zero points, never the dequantized weight):
    (float32 scales or None when ``scales`` already are, float32 zero points or None when
    they are packed or absent, their kind (0 none, 1 packed uint8, 2 float32), bytes per
    row of packed zero points), or None when the kernel does not take this weight
    (act-order ``g_idx``, a tensor whose size is not the op's: the numpy path says why)."""
    return derived(  # type: ignore[no-any-return]
        "MatMulNBits_native",
        (b, scales, zero_points, g_idx),
        (K, N, block_size, bits),
        lambda: _make_native_form(b, scales, zero_points, g_idx, K, N, block_size, bits),
    )


def _make_native_form(
    b: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    g_idx: np.ndarray | None,
    K: int,
    N: int,
    block_size: int,
    bits: int,
) -> tuple[np.ndarray | None, np.ndarray | None, int, int] | None:
    k_blocks = (K + block_size - 1) // block_size
    if np.asarray(b).dtype != np.uint8 or np.size(b) != N * k_blocks * block_size * bits // 8:
        return None
    if np.size(scales) != N * k_blocks:
        return None
    if g_idx is not None:
        order = np.asarray(g_idx, dtype=np.int64).reshape(-1)[:K]
        if not np.array_equal(order, np.arange(K) // block_size):
            return None  # act-order: the numpy path
    sc = None if np.asarray(scales).dtype == np.float32 else _f32(scales)
    if zero_points is None:
        return sc, None, 0, 0
    zp = np.asarray(zero_points)
    if zp.dtype == np.uint8:
        row = zp.size // N
        if zp.size != N * row or row * 8 < k_blocks * bits:
            return None
        return sc, None, 1, row  # the packed bytes as they are
    if zp.size != N * k_blocks:
        return None
    return sc, _f32(zp), 2, 0


def _packed(zero_points: np.ndarray | None) -> np.ndarray:
    return np.ascontiguousarray(zero_points, dtype=np.uint8).reshape(-1)


def _f32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x).astype(np.float32).reshape(-1))


def native_product(
    module: Any,
    rows: np.ndarray,
    b: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    form: tuple[np.ndarray | None, np.ndarray | None, int, int],
    bias: np.ndarray | None,
    K: int,
    N: int,
    block_size: int,
    bits: int,
) -> np.ndarray:
    """rows [M, K] float32 times the dequantized weight (+ bias), [M, N] float32, by the
    compiled kernel straight from the packed bytes."""
    buffers = native_buffers(b, scales, zero_points, form, bias, K, N, block_size, bits)
    return native_call(module, rows, buffers, (rows.shape[0], N))


def native_buffers(
    b: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    form: tuple[np.ndarray | None, np.ndarray | None, int, int],
    bias: np.ndarray | None,
    K: int,
    N: int,
    block_size: int,
    bits: int,
) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """The compiled kernel's arguments besides the rows, the output and their count:
    (packed weight, scales, zero points, bias) and (K, N, block size, bits, zero-point
    kind, bytes per zero-point row, has bias)."""
    sc, zp, zp_kind, zp_row = form
    arrays = (
        np.ascontiguousarray(b).reshape(-1),
        sc if sc is not None else np.ascontiguousarray(scales).reshape(-1),
        zp if zp is not None else _packed(zero_points) if zp_kind == 1 else b"",
        b"" if bias is None else _f32(bias),
    )
    return arrays, (K, N, block_size, bits, zp_kind, zp_row, int(bias is not None))


def native_call(
    module: Any,
    rows: np.ndarray,
    buffers: tuple[tuple[Any, ...], tuple[int, ...]],
    shape: tuple[int, ...],
) -> np.ndarray:
    """The compiled product of ``rows`` [M, K] by the weight of ``buffers``
    (native_buffers), in a fresh float32 array of ``shape`` (M x N elements)."""
    weight, sc, zp, bias = buffers[0]
    out = np.empty(shape, dtype=np.float32)
    src = rows if rows.flags.c_contiguous else np.ascontiguousarray(rows)
    module.matmul(src, weight, sc, zp, bias, out, rows.shape[0], *buffers[1])
    return out


# Elements of the weight dequantized per pass: the unpacking, the zero-point subtraction
# and the scaling of one chunk run while it is in the cache (three passes over a weight
# of hundreds of MB, one after the other, each went to memory).
_CHUNK_ELEMENTS = 1 << 16
# Elements per chunk of a weight multiplied as it is made (not kept): larger products.
_STREAM_ELEMENTS = 1 << 18
# Weights below this size are made whole when the cache does not keep them.
_STREAM_MIN_BYTES = 8 << 20


def _unpack_into(out: np.ndarray, packed: np.ndarray, bits: int) -> None:
    """The codes of ``packed`` [..., blob] written as floats into ``out`` [..., blob,
    8 // bits]: one shift-and-mask per code position, cast on the way out (no uint8
    intermediate of the whole weight, no separate cast pass)."""
    per_byte = 8 // bits
    mask = (1 << bits) - 1
    for j in range(per_byte):
        dst = out[..., j]
        if j == 0:
            np.bitwise_and(packed, mask, out=dst, casting="unsafe")
        elif j == per_byte - 1:
            np.right_shift(packed, j * bits, out=dst, casting="unsafe")
        else:
            np.copyto(dst, (packed >> j * bits) & mask, casting="unsafe")


def dequantize_nbits(
    b: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    g_idx: np.ndarray | None,
    K: int,
    N: int,
    block_size: int,
    bits: int,
    *,
    transposed: bool = False,
) -> np.ndarray:
    """The float32 weight [N, K] that MatMulNBits' packed blocks stand for (C-contiguous
    [K, N] when ``transposed``): ``(code - zero_point) * scale`` of each element's block,
    in float32 (the code and the zero point are small integers, so the difference is exact
    and the product rounds once, as the definition's float arithmetic does).

    The [K, N] form is written chunk by chunk too (a transposing copy of the whole [N, K]
    weight, element by element across memory, cost 4 times the dequantization)."""
    weight = np.empty((K, N) if transposed else (N, K), dtype=np.float32)
    # At least 16 rows a chunk: the [K, N] form takes each chunk as K runs of that many
    # floats, a whole 64-byte line or more each.
    for r0, r1, chunk in dequantized_rows(
        b, scales, zero_points, g_idx, K, N, block_size, bits, _CHUNK_ELEMENTS, 16
    ):
        if transposed:
            weight[:, r0:r1] = chunk.T
        else:
            weight[r0:r1] = chunk
    return weight


def dequantized_rows(
    b: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    g_idx: np.ndarray | None,
    K: int,
    N: int,
    block_size: int,
    bits: int,
    elements: int,
    least_rows: int = 1,
) -> Iterator[tuple[int, int, np.ndarray]]:
    """(r0, r1, rows r0..r1 of the float32 weight [N, K]) in chunks of about ``elements``
    (at least ``least_rows`` rows), each made while it is in the cache.  The chunk is a
    buffer reused for the next one: use it before asking for the next."""
    k_blocks = (K + block_size - 1) // block_size
    blob = block_size * bits // 8
    padded = k_blocks * block_size
    packed = np.asarray(b, dtype=np.uint8).reshape(N, k_blocks, blob)
    sc = np.asarray(scales).astype(np.float32).reshape(N, k_blocks)
    if zero_points is None:
        zp = np.full((N, k_blocks), 2 ** (bits - 1), dtype=np.float32)
    elif np.asarray(zero_points).dtype == np.uint8:
        zp_bytes = np.asarray(zero_points, dtype=np.uint8).reshape(N, -1)
        zp = unpack_bits(zp_bytes, bits, k_blocks).astype(np.float32)
    else:
        zp = np.asarray(zero_points).astype(np.float32).reshape(N, k_blocks)
    block_of_k = None
    if g_idx is not None:
        block_of_k = np.asarray(g_idx, dtype=np.int64).reshape(-1)[:K]
        if np.array_equal(block_of_k, np.arange(K) // block_size):
            block_of_k = None  # the default order, written out (what GPTQ exports)
    rows = max(least_rows, elements // padded, 1)
    scratch = np.empty((min(rows, N), k_blocks, block_size), dtype=np.float32)
    for r0 in range(0, N, rows):
        r1 = min(N, r0 + rows)
        codes = scratch[: r1 - r0]
        _unpack_into(codes.reshape(r1 - r0, k_blocks, blob, 8 // bits), packed[r0:r1], bits)
        chunk = codes.reshape(r1 - r0, padded)[:, :K]
        if block_of_k is None:
            codes -= zp[r0:r1, :, None]
            codes *= sc[r0:r1, :, None]
        else:  # act-order: each feature names its block
            chunk -= zp[r0:r1, block_of_k]
            chunk *= sc[r0:r1, block_of_k]
        yield r0, r1, chunk
