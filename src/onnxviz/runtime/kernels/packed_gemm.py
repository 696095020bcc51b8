"""float32 products by a constant weight through the compiled GEMM (native/_sgemm.c).

OpenBLAS packs both operands of every product, the constant weight included, and a
bias, residual or Relu after it is one more pass over the output each.  `packed` makes
the weight's panel form once per constant (kernels._weight_cache) and `matmul_packed`
runs ``act(a @ w + bias + addend)`` in one call that reads ``a`` where it lies and
applies the epilogue before the accumulators are stored.

`use_for(rows, k, n)` says whether a product of that shape should go there: the kernel
is single-threaded and OpenBLAS's is better on some shapes (benchmarks/
bench_packed_gemm.py; the numbers are beside the thresholds).  ``ONNXVIZ_PACKED_GEMM=off``
turns the routing off (the OpenBLAS paths run as before; benchmarks measure both in one
session that way), as does ``ONNXVIZ_NATIVE=off`` (the module is not loaded).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels import _weight_cache, blas

# Activation codes of the compiled epilogues (native/activations.h): 4 is SiLU, y *
# sigmoid(y) by the Sigmoid kernel's own float32 sigmoid.
ACT_NONE, ACT_RELU, ACT_CLIP, ACT_HARDSWISH, ACT_SILU = 0, 1, 2, 3, 4

_F32 = np.dtype(np.float32)


class Packed(NamedTuple):
    """A weight in one of the kernel's packed forms (``data`` from byte ``offset``): a
    right operand (K x N) in panels of ``nr`` columns (`pack`), or a left operand
    (``k`` = M rows x ``n`` = K columns) in micro-panels of ``nr`` rows (`pack_rows`)."""

    data: Any
    offset: int
    k: int
    n: int
    nr: int


# Whether products may be routed here: ONNXVIZ_PACKED_GEMM=off when the process starts
# turns it off (benchmarks measure the paths it replaces; tests set this flag).  Read
# once: reading the environment on every product was 1% of MobileNetV3-small's run.
ROUTED = os.environ.get("ONNXVIZ_PACKED_GEMM", "on").strip().lower() not in ("off", "0")


def module() -> Any | None:
    """The compiled module at this process's level, or None (off, not built, or the
    routing off: `ROUTED`)."""
    if not ROUTED:
        return None
    return native.load("sgemm")


def pack(w: np.ndarray, mod: Any) -> Packed:
    """``w`` (K x N float32) packed for ``mod``'s level (no cache: `packed` keeps it)."""
    k, n = w.shape
    nr = int(mod.panel_width())
    if w.dtype == _F32 and w.T.flags.c_contiguous and not w.flags.c_contiguous:
        # A transposed view (Gemm's transB weight, a recurrent layer's W[d].T): packed
        # from its rows as stored, not after a transposing copy of the whole weight
        # (VGG-19's 25088 x 4096: 1.8 s of its first run).  The same panels.
        data, offset = mod.pack(w.T, k, n, nr, True)
    else:
        data, offset = mod.pack(np.ascontiguousarray(w, dtype=np.float32), k, n, nr)
    return Packed(data, int(offset), k, n, nr)


def packed(
    w: np.ndarray, mod: Any, source: np.ndarray | None = None, part: int = -1
) -> Packed | None:
    """The packed form of the constant weight ``w`` (K x N float32), made once per
    constant: keyed on ``source`` (the initializer ``w`` was derived from, e.g. a conv's
    4-D weight; ``part`` tells apart weights derived from one source, e.g. a recurrent
    layer's directions) or ``w`` itself, which must be frozen (_weight_cache), else None
    (a weight that may change between calls is not worth packing each time).  The
    source's own object as key, not a fresh view of it made per call, finds the form
    without the cache's full lookup."""
    key = w if source is None else source
    if not _weight_cache.frozen(key) or w.dtype != _F32 or w.ndim != 2:
        return None
    nr = int(mod.panel_width())
    # Only a form the cache keeps (None when it is full): packing on every call would
    # cost a decode step's product twice over (OpenBLAS then multiplies as before).
    k, n = w.shape
    nbytes = k * -(-n // nr) * nr * 4 + 64
    return _weight_cache.kept(  # type: ignore[no-any-return]
        "sgemm_packed", [key], (nr, w.shape, source is None, part), nbytes, lambda: pack(w, mod)
    )


def pack_rows(w: np.ndarray, mod: Any) -> Packed:
    """``w`` (M x K float32), the left operand, as the level's micro-panels of rows (no
    cache: `packed_rows` keeps it).  ``nr`` holds the rows per micro-panel."""
    m, k = w.shape
    mr = int(mod.rows_per_tile())
    data, offset = mod.pack_rows(np.ascontiguousarray(w, dtype=np.float32), m, k, mr)
    return Packed(data, int(offset), m, k, mr)


def packed_rows(w: np.ndarray, mod: Any, source: np.ndarray) -> Packed | None:
    """`pack_rows` of the constant left operand ``w`` (M x K float32, e.g. an NCHW 1x1
    conv's weight (M, C)), made once per frozen ``source`` (the initializer it views),
    else None."""
    if not _weight_cache.frozen(source) or w.dtype != _F32 or w.ndim != 2:
        return None
    mr = int(mod.rows_per_tile())
    return _weight_cache.derived(  # type: ignore[no-any-return]
        "sgemm_packed_rows", [source], (mr, w.shape), lambda: pack_rows(w, mod)
    )


def left_matmul_packed(
    mod: Any,
    p: Packed,
    x: np.ndarray,
    out: np.ndarray,
    *,
    bias: np.ndarray | None = None,
    addend: np.ndarray | None = None,
    act: int = ACT_NONE,
    lo: float = float("nan"),
    hi: float = float("nan"),
    accumulate: bool = False,
) -> None:
    """``out = act([out +] w @ x + bias[:, None] + addend)`` for the left operand ``w``
    packed by `pack_rows` (M x K), C-contiguous float32 ``x`` (K x N), ``out`` and
    ``addend`` (M x N) and ``bias`` (M,): an NCHW 1x1 conv, weight by image."""
    k, n = x.shape
    if p.n != k:
        raise ValueError(f"left_matmul_packed: x has {k} rows, the weight {p.n} columns")
    ldx, ldc = _ld(x), _ld(out)
    if ldx is None or ldc is None:
        raise ValueError("left_matmul_packed: x and out must be C-contiguous float32 arrays")
    ldd = 0
    if addend is not None:
        got = _ld(addend)
        if got is None:
            raise ValueError("left_matmul_packed: addend must be a C-contiguous float32 array")
        ldd = got
    mod.gemm_left(
        p.data, p.offset, p.k, k, p.nr, x, ldx, n, out, ldc,
        bias, addend, ldd, act, lo, hi, accumulate,
    )  # fmt: skip


def _ld(x: np.ndarray) -> int | None:
    """Leading dimension of a 2-D float32 array whose rows are contiguous and which is
    one C-contiguous buffer when viewed from its first element (else None)."""
    if x.dtype != _F32 or x.ndim != 2 or (x.strides[1] != 4 and x.shape[1] > 1):
        return None
    if x.flags.c_contiguous:
        return x.shape[1]
    return None


def matmul_packed(
    mod: Any,
    a: np.ndarray,
    p: Packed,
    out: np.ndarray,
    *,
    bias: np.ndarray | None = None,
    addend: np.ndarray | None = None,
    act: int = ACT_NONE,
    lo: float = float("nan"),
    hi: float = float("nan"),
    accumulate: bool = False,
    a_transposed: bool = False,
) -> None:
    """``out = act([out +] a @ w + bias + addend)`` for C-contiguous float32 ``a`` (M x
    K), ``out`` and ``addend`` (M x N), ``bias`` (N,).  ``out`` must not overlap the
    operands.  ValueError (from the module) on any size that does not match.
    ``a_transposed``: ``a`` is given as its (K x M) transpose (an NCHW image's [C, H*W]:
    the kernel copies it tile by tile, no whole transposing copy first; the same bits)."""
    k, m = a.shape if a_transposed else a.shape[::-1]
    if p.k != k:
        raise ValueError(f"matmul_packed: a has K = {k}, the weight {p.k} rows")
    lda, ldc = _ld(a), _ld(out)
    if lda is None or ldc is None:
        raise ValueError("matmul_packed: a and out must be C-contiguous float32 2-D arrays")
    ldd = 0
    if addend is not None:
        got = _ld(addend)
        if got is None:
            raise ValueError("matmul_packed: addend must be a C-contiguous float32 2-D array")
        ldd = got
    mod.gemm(
        a, lda, m, k, p.data, p.offset, p.n, p.nr, out, ldc,
        bias, addend, ldd, act, lo, hi, accumulate, a_transposed,
    )  # fmt: skip


def product_call(mod: Any, p: Packed, bias: np.ndarray | None) -> Any:
    """``(a, out) -> None``: ``out = a @ w + bias`` by the packed weight ``p``, for a
    C-contiguous float32 ``a`` (M x p.k) and ``out`` (M x p.n) the caller has checked:
    `matmul_packed`'s call without its per-call checks and keywords (a fused MatMul +
    bias on a few rows calls it per run; the module still checks every size against
    its buffers)."""
    gemm, data, offset, k, n, nr = mod.gemm, p.data, p.offset, p.k, p.n, p.nr
    nan = float("nan")

    def run(a: np.ndarray, out: np.ndarray) -> None:
        gemm(a, k, a.shape[0], k, data, offset, n, nr, out, n, bias, None, 0, ACT_NONE, nan, nan, False, False)  # fmt: skip

    return run


# Rows below which a product stays with OpenBLAS at the plain C level (blas.few_rows_matmul's
# blocks): its small-matrix kernel reads the weight once without packing it, where the
# kernel's tiles run on padding.  Measured (benchmarks/bench_packed_gemm.py's way, 1 thread,
# us, OpenBLAS / ours) on GPT-2 and LSTM shapes (K x N 768x2304, 768x3072, 3072x768,
# 768x768, 256x1024) on a Cascade Lake, before the AVX-512 tiles ran only their rows: 1
# row 1.5-2.1x slower, 2 rows 1.1-1.6x, 4 rows 0.94-1.16x; from 8 rows on OpenBLAS packs
# the whole weight on every call and the kernel is faster: 8 rows 0.60-0.72x, 12 rows
# 0.37-0.46x, 16 rows 0.58-0.68x (a torch dynamo GPT-2's 16 new tokens: the weight's
# packing was half of its run), 32 rows 0.61-0.71x.  From AVX2 up the kernel takes every
# row count (`few_rows`).
MIN_ROWS = 8


def use_for(rows: int, k: int, n: int) -> bool:
    """Whether a (rows x k) @ (k x n) float32 product should run `matmul_packed` rather
    than OpenBLAS.

    Measured on one core of a Cascade Lake Xeon (AVX-512; OpenBLAS's SkylakeX kernels;
    benchmarks/bench_packed_gemm.py, medians of 11 alternating rounds on a shared 2-core
    machine; us, OpenBLAS / ours).  The product alone: ResNet-50's 1x1 convs as channels-
    last GEMMs 3136x256x64 1187/926, 784x512x128 950/879, 196x1024x512 1956/1962,
    49x2048x512 1448/1289 (0.78-1.00x over the 15 shapes); BERT-base 128x768x3072
    7289/6235, 256x768x768 2931/2823, but 256x3072x768 11699/12363 (1.06x; 1.04-1.09x
    over three runs: A's rows are 12 KB apart, a multiple of 4 KB, so they were copied).
    With the epilogue of a conv (bias + residual, Relu), which the kernel applies for
    free: 0.48-0.94x on the ResNet shapes, 0.80-0.90x on BERT's but the two K = 3072 ones
    (1.04-1.12x).  On a Sapphire Rapids core (2 MB L2, 48 KB 12-way L1), with the kernel
    tuned there (KC 1024 with a 512 KB weight block, A read in place even 4 KB-aliased,
    edge tiles of only their rows): the product alone 0.67-0.98x on the ResNet shapes
    (3136x64x256 827/812, 784x128x512 729/686, 196x1024x512 1506/1276, 49x2048x512
    1063/719), 0.82-0.91x on BERT's (128x768x768 1155/943, 128x3072x768 4641/3902,
    256x3072x768 8450/7670, so K = 3072 is a win too); with the epilogue 0.58-0.82x and
    0.74-0.89x (before that tuning, same run: 0.78-1.07x alone, 0.87-1.10x on BERT).  So:
    every product of at most `small_macs()` multiply-adds, and every product of at least
    MIN_ROWS rows ...

    ... and only when OpenBLAS would run it on one thread: the kernel is single-threaded,
    and OpenBLAS splits a large product across the cores it is allowed.  (A threaded
    kernel is future work: the app leaves OpenBLAS its default of one thread per core,
    so there the kernel serves single-core machines and runs under a limit of one
    thread, as benchmarks/bench_families.py sets through threadpoolctl.)"""
    if rows * k * n <= small_macs():
        return True
    if rows < MIN_ROWS and not few_rows():
        return False
    if rows >= NARROW_BLAS_ROWS and k >= NARROW_BLAS_K and not _vectorized():
        return False
    return _one_thread()


# At the generic level (no AVX2) the kernel's plain-C tile loses to OpenBLAS's on a
# product of many rows by a deep weight, so those stay with OpenBLAS there.  From AVX2 up
# the kernel takes them: its AVX2 tile first lost them too (Zen 3, OpenBLAS / ours, us:
# 128x768x768 1942/2195, 128x3072x768 8937/9191), but since its K block of 1024 and A
# read in place it wins or ties (same core, 1 thread, medians of 20-30 alternated rounds,
# OpenBLAS's product then the bias / ours with it: 48x768x768 0.80x, 128x768x768
# 0.91-0.94x, 128x768x3072 0.95-0.96x, 128x3072x768 1.01-1.04x, 196x1024x256 0.89-0.93x,
# 49x2048x512 0.78-0.82x, 256x768x768 0.91x, 1024^3 1.00x, 100x4096x4096 1.06x, onnxruntime's
# Gemm 0.90-1.08x of ours), and inside the models more (OpenBLAS's way / the kernel's,
# whole runs alternated in one process): BERT-base 0.959, its PyTorch export 0.913,
# ViT-tiny 0.932, BERT-tiny 0.905; the ResNets, Inception v2 and the UNets unchanged.
NARROW_BLAS_ROWS = 48
NARROW_BLAS_K = 576


def _vectorized() -> bool:
    """Whether the kernel runs at AVX2 or better here (its SIMD tiles)."""
    level = native.level()
    return level is not None and level >= native.AVX2


def _wide() -> bool:
    """Whether the kernel runs at AVX-512 or better here (its wide tiles)."""
    level = native.level()
    return level is not None and level >= native.AVX512


def few_rows() -> bool:
    """Whether a product of 2 to MIN_ROWS - 1 rows by a constant weight runs the kernel
    whatever its size (from AVX2 up): OpenBLAS packs the weight on every call there too,
    and its edge tiles run only their rows at AVX-512.  On a Zen 4 core (1 thread, us, the
    product and the bias, blas.few_rows_matmul's OpenBLAS way / the kernel): 2x128x512
    6.1/4.2, 4x128x512 7.6/5.8, 4x256x1024 38.9/20.7, 4x768x768 67/44, 2x768x2304 158/95,
    4x768x3072 255/173, 4x1024x4096 813/339, 7x512x2048 345/132 (SkylakeX kernels; a
    plain ``a @ w`` 1.5-6.8x the kernel); at AVX2 with Haswell's kernels 19.4/7.3,
    17.0/9.3, 67/39, 106/75, 398/181, 438/309, 981/589, 515/172 (the kernel's 3-5 rows
    then ran as six; with tiles of only their rows 4x256x1024 42.7 -> 29.8 us, 4x768x768
    87 -> 60).  An LSTMCell written out step by step (4 x 128 -> 512 a step) took 14.3 us
    a Gemm node through the kernel's Python call, onnxruntime 5.8; held in C, 7.2."""
    return _vectorized()


def one_row() -> bool:
    """Whether a product of one row by a constant weight runs the kernel whatever its
    size (from AVX2 up): a decode step's GEMV, weights from L3 or memory.  At AVX-512,
    us, OpenBLAS's GEMV with the bias / the kernel's (benchmarks/bench_packed_gemm.py
    --shapes cold, and GPT-2 decode shapes cycled through 6-27 MB): 1x256x768 32.4/29.2,
    1x256x1024 42.4/39.2, 1x1024x256 41.6/37.9, 1x768x768 89.4/83.8, 1x768x2304
    256.7/254.3, 1x768x3072 623/589 (0.83-0.99x).  At AVX2 OpenBLAS's GEMV alone is the
    faster kernel (1.1-1.3x on weights from L3 on a Zen 3 core), but a held product runs
    from the node loop to its result in C where the other way is the fused node's Python
    call, numpy's GEMV and the bias add: whole decode steps on that core, same run, us,
    GEMV way / kernel (onnxruntime): GPT-2 2x256 673/487 (494), GPT-2 4x768 7358/7238
    (7117), the tiny genai Llama 109/88 (105), a one-step LSTM+GRU 92/79 (76).  The plain
    C level stays with OpenBLAS."""
    return _vectorized()


# Products of at most this many multiply-adds run the kernel at any row count and any
# thread count (OpenBLAS runs products under 2**18 on one thread anyway): their time is
# mostly the call's fixed cost, which the held product (`held_product`) cuts to a C
# call.  Measured (benchmarks/bench_packed_gemm.py --shapes small, us, numpy's matmul
# making C / the held product; with a bias: matmul then += / the epilogue's): AVX-512
# (Sapphire Rapids, SkylakeX kernels) 4x64x128 2.89/1.98, 1x128x256 3.90/2.84, 16x64x128
# 3.09/2.68 (0.63-0.87x; with a bias 0.39-0.66x), past 2**17 4x256x256 1.10x; AVX2 (the
# level forced, Haswell kernels) 4x64x128 3.18/2.25 and 0.57-0.93x at 2 rows and more,
# but one row 0.90x at 1x64x128 and 1.20-1.31x at 32K (0.89-0.99x with a bias: OpenBLAS's
# GEMV is the faster kernel there).  So 2**15 below AVX-512.  At AVX-512, up to 2**17:
# 1x128x512 3.98/3.85, 1x256x512 8.72/7.12, 2x128x512 6.39/4.44, 8x128x128 3.77/2.49
# (0.66-1.02x; with a bias, as an RNN's projection, 0.51-0.89x), then 4x256x256 and
# 1x512x512 at 2**18 0.78-1.10x over runs.
SMALL_MACS = 1 << 15


def small_macs() -> int:
    """`SMALL_MACS` at this process's level: four times it at AVX-512 (its wide tiles
    keep one row's product within OpenBLAS's GEMV there)."""
    return SMALL_MACS << 2 if _wide() else SMALL_MACS


# Multiply-adds up to which a recurrent layer's input projection (X.W^T + Wb, a few rows a
# call: one step, a small batch) runs the kernel at any level, where `small_macs` sends a
# larger one to OpenBLAS.  Its other path is the layer's Python call of OpenBLAS and the
# bias add, about 10 us (AVX2 level, Zen 3 core) on top of a GEMV that is 1.2-1.3x faster
# than the kernel's one-row tile: a one-step LSTM of 128 units from 128 inputs took 30 us
# a call that way and takes 14 in C (`nn_rnn._Compiled.hold_projections`, `_project`).
PROJECTION_MACS = 1 << 18


def projection_macs() -> int:
    """The products a recurrent layer's input projection runs in the kernel whatever
    their rows: up to the larger of `PROJECTION_MACS` and `small_macs`."""
    return max(PROJECTION_MACS, small_macs())


def small_rows(k: int, n: int) -> int:
    """The most rows of a (rows x k) @ (k x n) product that `use_for` takes as small."""
    return small_macs() // max(k * n, 1)


def held_product(
    mod: Any,
    p: Packed,
    bias: np.ndarray | None,
    expect: tuple[Any, ...],
    fallback: Any,
    small: int | None = None,
    transposed: bool = False,
    rank: int = 0,
) -> Any:
    """A callable ``f(a, *expect)`` = ``a @ w + bias`` (a new float32 array of
    ``a.shape[:-1] + (N,)``) for the constant weight packed as ``p``, in C from call to
    result (native/_sgemm.c's `product`): for a C-contiguous float32 ndarray ``a`` of
    ``p.k`` columns (and of ``rank`` dimensions when it is not 0: a Gemm's 2, whose
    kernel refuses others; else any from 2, MatMul's), on the rows `use_for` routes here
    (with ``transposed``, a weight given as its
    transpose, also those of `use_for_few_rows`: OpenBLAS would pack it on every call) and
    on any product of at most ``small`` multiply-adds (`small_macs()` by default), called
    with exactly the objects of ``expect`` after it.  Any other call is ``fallback(a,
    *others)``: the kernel's own path, which must give the same numbers on the calls
    this takes."""
    getter = blas.threads_getter_address()
    rows = small_rows(p.k, p.n) if small is None else small // max(p.k * p.n, 1)
    least = 2 if transposed or few_rows() else MIN_ROWS
    return mod.product(
        p.data, p.offset, p.k, p.n, p.nr, bias, rows, least, one_row(),
        getter, tuple(expect), fallback, np.ndarray, np.empty, _F32, rank,
    )  # fmt: skip


def held_pointwise(
    mod: Any,
    p: Packed,
    bias: np.ndarray | None,
    image: tuple[int, int, int],
    act: tuple[int, float, float],
    nargs: int,
    residual: int | None,
    places: tuple[int, ...],
    expect: tuple[Any, ...],
    fallback: Any,
    inplace: bool = False,
) -> Any:
    """A callable ``f(*args)``: the 1x1 conv (stride 1) of ``args[0]``, an (N, C, H, W)
    float32 image (``image`` = (N, H, W), C = ``p.k``) laid out channels-last or one
    C-contiguous image, by the weight packed as ``p`` (C x M), + ``bias`` + the
    channels-last ``args[residual]`` (when not None), then ``act`` (code, lo, hi), as a new
    64-byte aligned channels-last (N, M, H, W) array, in C from call to result
    (native/_sgemm.c's `pointwise`): `matmul_packed`'s operations, so its bits.  Only for
    calls of ``nargs`` arguments with ``args[places[i]] is expect[i]``, while OpenBLAS
    runs on one thread (`use_for`'s condition for these row counts); any other call is
    ``fallback(*args)``.  ``inplace`` (the caller frees the residual's slot after the
    call, and may have it overwritten): the sums go over a residual that only the caller
    and that slot hold (reference counts; a writable array whose memory nothing else
    views) and it is the result, one K block permitting (gemm then reads each addend
    float before it stores over it)."""
    code, lo, hi = act
    return mod.pointwise(
        p.data, p.offset, p.k, p.n, p.nr, bias, image, code, lo, hi, nargs,
        -1 if residual is None else residual, inplace, tuple(places), tuple(expect),
        blas.threads_getter_address(), fallback, *native.held_arrays(),
    )  # fmt: skip


def held_planes(
    mod: Any,
    p: Packed,
    bias: np.ndarray | None,
    image: tuple[int, int],
    nargs: int,
    residual: int | None,
    places: tuple[int, ...],
    expect: tuple[Any, ...],
    fallback: Any,
) -> Any:
    """A callable ``f(*args)``: the 1x1 conv (stride 1) of ``args[0]``, one C-contiguous
    float32 (1, C, H, W) image (``image`` = (H, W), C = ``p.n``), by the weight packed by
    `pack_rows` as ``p`` (M x C) + ``bias`` per channel + ``args[residual]`` (a (1, M, H, W)
    C-contiguous float32 array, when not None), as a new 64-byte aligned C-contiguous
    (1, M, H, W) array, in C from call to result (native/_sgemm.c's `pointwise_planes`):
    `left_matmul_packed`'s operations, so its bits.  Only for calls of ``nargs`` arguments
    with ``args[places[i]] is expect[i]``, while OpenBLAS runs on one thread (`use_left_for`'s
    condition); any other call is ``fallback(*args)``."""
    rows = None if bias is None else np.ascontiguousarray(bias.reshape(-1), dtype=_F32)
    return mod.pointwise_planes(
        p.data, p.offset, p.n, p.k, p.nr, image, rows, nargs,
        -1 if residual is None else residual, tuple(places), tuple(expect),
        blas.threads_getter_address(), fallback, *native.held_arrays(),
    )  # fmt: skip


def use_for_few_rows(rows: int) -> bool:
    """Whether a product of 2 to MIN_ROWS - 1 rows by a constant weight that OpenBLAS
    would have to pack on every call (a transposed one: Gemm's transB, which its
    small-matrix path cannot take) should run `matmul_packed` with the weight packed
    once.  MobileNetV3's classifier at batch 2 (576 -> 1024 -> 1000, transB): 1.13 ms
    with OpenBLAS packing the weights, 0.3 ms streaming them packed (one thread)."""
    return 2 <= rows < MIN_ROWS and _one_thread()


# Pixels up to which an NCHW conv's product (weight by image) runs gemm_left.
MAX_LEFT_PIXELS = 64


def use_left_for(m: int, k: int, pixels: int) -> bool:
    """Whether an NCHW conv's (m x k) weight by (k x pixels) image product should run
    `left_matmul_packed` rather than OpenBLAS: only on small images.  Measured like
    `use_for` (the product alone, OpenBLAS / ours, us): ResNet-50's last stage, 7 x 7
    pixels, 2048x512x49 1385/1249, 512x2048x49 1339/1242, 2048x1024x49 3085/2917
    (0.90-0.95x; with bias and residual 0.87-0.92x); from 14 x 14 on OpenBLAS wins
    (1024x256x196 903/1064, 512x128x784 882/969, 256x64x3136 993/1170: 1.10-1.25x
    alone, 0.96-1.15x with the epilogue): gemm_left copies the image's panels as
    OpenBLAS does, and OpenBLAS's micro-kernel is the faster one there; only on small
    images does its packing of the weight on every call cost more.  (ResNet-50 runs its
    1x1 convs NCHW in this interpreter: no depthwise conv reads them, so fusion_layout
    keeps NCHW.)  Below AVX-512 OpenBLAS wins there too (a Zen 3 core, the whole conv, us,
    gemm_left / OpenBLAS: 3x3 256 -> 256 at 7 x 7 1730-1790 / 1383-1411, 512 -> 512
    6213-6456 / 4154-5100)."""
    return (
        (pixels <= MAX_LEFT_PIXELS or m * k * pixels <= LEFT_SMALL_MACS)
        and m >= MIN_ROWS
        and _wide()
        and _one_thread()
    )


# Multiply-adds up to which an NCHW conv's product runs gemm_left whatever its pixels (at
# AVX-512): there its fixed cost is most of the call, and its held form (`held_planes`)
# runs it from the node loop.  Measured on a Sapphire Rapids core (1 thread, us, the
# product with the bias, gemm_left / OpenBLAS): 64x32x256 12.8/14.0, 64x128x256 36.3/40.7,
# 32x96x1024 63.7/73.3, 64x64x1024 78.8/85.1, 64x256x256 69.7/71.1, and on to 12.85M
# (256x64x784 190.8/206.0).  At AVX2 (Haswell kernels both) OpenBLAS is 8-20% ahead from
# 2M on, so the route stays with it there.
LEFT_SMALL_MACS = 1 << 22


def _one_thread() -> bool:
    t = blas.threads()
    return t is None or t <= 1
