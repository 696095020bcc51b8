"""Linear algebra kernels: MatMul, Gemm, Det, Einsum.

Matrix products go through np.matmul (BLAS for float32/float64); 2-D ones through
`blas.few_rows_matmul`, which cuts products of a few rows into blocks on the kernel sets
where that is faster; float32 MatMuls by a constant 2-D weight by the compiled GEMM with
the weight packed once (kernels/packed_gemm.py), where that is; batches of small float32
matrices (an exported attention's Q K^T and P V) by the compiled batched product
(`small_batched`, native/_bmm.c), where numpy makes one BLAS call a matrix.  numpy has no BLAS path
for float16 and no arithmetic at all for bfloat16, so those multiply in float32 (which is
also how runtimes accumulate them) and round once at the end.
"""

from __future__ import annotations

from typing import Any, TypeGuard

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.kernels import half, packed_gemm
from onnxviz.runtime.kernels._weight_cache import frozen
from onnxviz.runtime.kernels.blas import few_rows_matmul
from onnxviz.runtime.kernels.dense import dense
from onnxviz.runtime.kernels.math_common import widen
from onnxviz.runtime.registry import RUNTIME, kernel, specializer

Array = np.ndarray

# Below this many elements in all operands, einsum's path optimiser costs more than it saves.
_EINSUM_OPTIMIZE_MIN = 4096


def _narrow(out: Array, dt: np.dtype) -> Array:
    return out if out.dtype == dt else half.convert(out, dt)


@kernel("MatMul", since=(1, 9, 13))
def matmul(a: Array, b: Array) -> Array:
    if a.ndim == 0 or b.ndim == 0:
        raise ExecutionError("MatMul inputs must have rank >= 1")
    if (
        a.dtype == np.float32
        and b.dtype == np.float32
        and a.ndim >= 2
        and b.ndim == 2
        and a.shape[-1] == b.shape[0]
        and a.size
        and b.size
    ):
        y = by_packed_weight(a, b)
        if y is not None:
            return y
    if a.dtype == _F32 and b.dtype == _F32 and a.ndim >= 3:
        y = small_batched(a, b)
        if y is not None:
            return y
    wa, wb = widen(a), widen(b)
    if wa.ndim > 2 and wb.ndim == 2 and wa.flags.c_contiguous:
        # [..., M, K] @ [K, N] is one [(...*M), K] @ [K, N] product: a single large BLAS
        # call instead of numpy's loop of small ones.
        flat = few_rows_matmul(wa.reshape(-1, wa.shape[-1]), wb)
        return _narrow(flat.reshape(wa.shape[:-1] + (wb.shape[1],)), a.dtype)
    if wa.ndim == 2 and wb.ndim == 2:
        return _narrow(few_rows_matmul(wa, wb), a.dtype)
    return _narrow(np.asarray(np.matmul(wa, wb)), a.dtype)


# The compiled batched product of small matrices (native/_bmm.c), None when off; its
# `product` makes its output by numpy.empty.
_BMM = native.load("bmm")
if _BMM is not None:
    _BMM.setup(np.empty, np.dtype(np.float32))
_F32 = np.dtype(np.float32)


def small_batched(a: Array, b: Array) -> Array | None:
    """``a @ b`` for float32 rank-3 or rank-4 ``a`` and ``b`` of one batch shape whose
    matrices are small, by the compiled batched product (each output one fused
    multiply-add chain in k order: the same bits at every level, not BLAS's); else None.
    Small: at most 32K multiply-adds a matrix (about where numpy's one BLAS call per
    matrix stops costing more than the product: 16 x 16 x 16 over 2 x 4 heads 1.0 us
    against 2.0; 32 x 64 x 32 over 12 heads 16.7 against 15.4), depth and width at most
    256, and a b whose rows are strided (K^T as a view, its block copied per matrix) of
    at most 1024 values.  An exported attention's Q K^T and P V over a few tokens: eight
    7 x 8 by 8 x 7 products 2.2-3.3 us in numpy, about 0.8 here, checks included."""
    if _BMM is None:
        return None
    return _BMM.product(a, b)  # type: ignore[no-any-return]


def by_packed_weight(a: Array, b: Array, p: packed_gemm.Packed | None = None) -> Array | None:
    """``a @ b`` (a: float32 [..., K], b: float32 [K, N]) by the compiled GEMM when ``b``
    is a constant (frozen) weight packed once and the shape is one it runs faster
    (kernels/packed_gemm.py), else None.  ``p``: b's packed form when the caller holds it
    (found once by a specialized call: the weight cache's lookup costs 2-3 us)."""
    rows = a.size // a.shape[-1]
    mod = packed_gemm.module()
    if mod is None or not packed_gemm.use_for(rows, b.shape[0], b.shape[1]):
        return None
    if p is None:
        p = packed_gemm.packed(b, mod)
    if p is None:
        return None
    out = np.empty(a.shape[:-1] + (b.shape[1],), dtype=np.float32)
    # A strided A (Transpose's view) in C order first, as the held products copy it: the
    # same product whichever call runs it (np.ascontiguousarray: no copy when it is).
    a2 = dense(a).reshape(rows, -1)
    packed_gemm.matmul_packed(mod, a2, p, out.reshape(rows, -1))
    return out


def _constant_matrix(b: Any) -> TypeGuard[np.ndarray]:
    """Whether ``b`` is a float32 matrix initializer (frozen): a weight worth packing once."""
    return (
        type(b) is np.ndarray
        and b.dtype == np.float32
        and b.ndim == 2
        and bool(b.size)
        and frozen(b)
    )


def _prepared_batched() -> Any:
    """Unwatched runs of a MatMul of two computed values: float32 operands of rank 3 or
    more each by the compiled batched product (`small_batched`, the kernel's route for
    them: an exported attention's Q K^T and P V) when it takes them, straight from the
    node loop; any other call runs the kernel (1.35 -> 0.8 us a decoder step's product)."""
    bmm = _BMM
    if bmm is None:
        return None
    product = bmm.product

    def call(a: Any, b: Any) -> Any:
        if type(a) is np.ndarray and type(b) is np.ndarray and a.ndim >= 3 and b.ndim >= 3:
            y = product(a, b)  # (None for what it does not take: another dtype, big ones)
            if y is not None:
                return y
        return matmul(a, b)

    return call


@specializer(matmul)
def _prepared_matmul(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs, a float32 matrix initializer as B: `by_packed_weight`'s product
    with the packed weight found once (its cache lookup was most of a small product's
    fixed cost); another B, dtype, layout or a shape the packed GEMM does not take runs
    the kernel.  The same route, so the same numbers.  A small weight (one a few rows
    make a product of packed_gemm.small_macs()) is packed now and its call is a held
    product (packed_gemm.held_product): C from the node loop to the result."""
    b0 = known[1] if len(known) == 2 else None
    if b0 is RUNTIME and known[0] is RUNTIME:
        return _prepared_batched()
    if not _constant_matrix(b0):
        return None
    mod = packed_gemm.module()
    if mod is None:
        return None
    k, n_cols = b0.shape
    held: list[Any] = []  # the packed weight, made on the first call that routes here
    if packed_gemm.small_rows(k, n_cols):
        # A small weight (a few rows make a product of fixed costs) is packed now, and
        # the calls that route to it run in C from the node loop (held_product).
        p = packed_gemm.packed(b0, mod)
        if p is not None:
            held.append(p)

    def call(a: Any, b: Any) -> Any:
        if (
            b is not b0
            or type(a) is not np.ndarray
            or a.dtype != np.float32
            or a.ndim < 2
            or a.shape[-1] != k
            or not a.flags.c_contiguous
            or not a.size
        ):
            return matmul(a, b)
        rows = a.size // k
        if not packed_gemm.use_for(rows, k, n_cols):
            return matmul(a, b)
        if not held:
            p = packed_gemm.packed(b0, mod)
            if p is None:
                return matmul(a, b)
            held.append(p)
        out = np.empty(a.shape[:-1] + (n_cols,), dtype=np.float32)
        packed_gemm.matmul_packed(mod, a.reshape(rows, k), held[0], out.reshape(rows, n_cols))
        return out

    if held:
        return packed_gemm.held_product(mod, held[0], None, (b0,), call)
    return call


@kernel("Gemm", since=(1, 6, 7, 9, 11, 13))
def gemm(
    a: Array,
    b: Array,
    c: Array | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    broadcast: int = 0,
) -> Array:
    """alpha * A' @ B' + beta * C.  Before opset 7 a ``broadcast`` attribute allowed C
    to be broadcast; numpy's rule covers both cases, so it is accepted and not needed."""
    dt = a.dtype
    wa, wb = widen(a), widen(b)
    if wa.ndim != 2 or wb.ndim != 2:
        raise ExecutionError(f"Gemm needs 2-D A and B, got {a.shape} and {b.shape}")
    y = None
    if not transA and wa.dtype == np.float32 and wb.dtype == np.float32:
        # A constant weight packed once, on the rows packed_gemm.use_for takes (one row
        # from AVX2 up, a decode step's or a classifier's), as MatMul's; transposed
        # (a Linear layer's [N, K]) also for 2-7 rows (OpenBLAS packs it on every call).
        if transB:
            y = few_rows_by_packed_weight(wa, wb, more_rows=True)
        elif wa.size and wb.size:
            y = by_packed_weight(wa, wb)
    if y is None:
        y = few_rows_matmul(wa.T if transA else wa, wb.T if transB else wb)
    if y.dtype.kind == "f":
        if alpha != 1.0:
            y *= y.dtype.type(alpha)
        if c is not None and beta != 0.0:
            wc = widen(c)
            y += wc if beta == 1.0 else wc * y.dtype.type(beta)
        return _narrow(y, dt)
    # Integer Gemm: scale factors are floats; the result truncates back to T.
    if alpha != 1.0:
        y = (y * alpha).astype(y.dtype)
    if c is not None and beta != 0.0:
        y = y + (c if beta == 1.0 else (c * beta).astype(y.dtype))
    return _narrow(y, dt)


@specializer(gemm)
def _prepared_gemm(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs of a Linear layer's Gemm (transA 0, alpha and beta 1, B a float32
    matrix initializer, C absent or a float32 initializer of N values): a held product
    (packed_gemm.held_product: C from the node loop to the result, C's values as the
    kernel's bias, added to each sum as the kernel's ``y += c`` adds them) on the rows it
    takes; any other call runs the kernel.  A classifier's one-row Gemm went to OpenBLAS
    through the kernel's Python call (MobileNetV3-small's 576 -> 1024 head 200 us,
    onnxruntime 124)."""
    if (
        attrs.get("transA", 0)
        or float(attrs.get("alpha", 1.0)) != 1.0
        or float(attrs.get("beta", 1.0)) != 1.0
    ):
        return None
    b0 = known[1] if len(known) > 1 else None
    c0 = known[2] if len(known) > 2 else None
    if not _constant_matrix(b0):
        return None
    trans = bool(attrs.get("transB", 0))
    k, n_cols = (b0.shape[1], b0.shape[0]) if trans else b0.shape
    bias: np.ndarray | None = None
    if c0 is not None:
        if (
            type(c0) is not np.ndarray
            or c0.dtype != np.float32
            or not frozen(c0)
            or c0.ndim > 2
            or c0.size != n_cols
            or c0.shape[-1] != n_cols
        ):
            return None
        bias = np.ascontiguousarray(c0.reshape(n_cols))
    elif len(known) > 2:
        return None  # a C computed at run time
    mod = packed_gemm.module()
    if mod is None:
        return None
    # the packed form the kernel's own route makes (few_rows_by_packed_weight,
    # by_packed_weight): one copy in the weight cache
    p = packed_gemm.packed(b0.T, mod, source=b0, part=-1) if trans else packed_gemm.packed(b0, mod)
    if p is None:
        return None

    def call(*args: Any) -> Any:
        return gemm(*args, **attrs)

    expect = (b0,) if c0 is None else (b0, c0)
    # A transposed weight (a Linear layer's [N, K]) on 2-7 rows: the kernel's own route
    # (few_rows_by_packed_weight), held in C too.  An LSTMCell's 4 x 128 -> 512 product
    # and bias in a loop went through the kernel's Python call: 14.3 us a node against
    # onnxruntime's 5.8.
    # (Gemm's A is a matrix: any other rank goes to the kernel, which names the error.)
    return packed_gemm.held_product(mod, p, bias, expect, call, transposed=trans, rank=2)


def few_rows_by_packed_weight(
    a: Array,
    w: Array,
    *,
    more_rows: bool = False,
    source: Array | None = None,
    part: int = -1,
    small: int = 0,
) -> Array | None:
    """``a @ w.T`` (a: float32 (M, K), copied in C order when strided, as the held
    products copy it; w: a constant float32 (N, K)) for 2-7 rows by the compiled GEMM
    with ``w`` packed once (packed_gemm.use_for_few_rows: OpenBLAS packs a transposed
    weight on every call), and with ``more_rows`` for the larger products
    packed_gemm.use_for takes too, and for any product of at most ``small``
    multiply-adds; else None.  ``source`` and ``part``: the constant ``w`` is part
    ``part`` of (packed_gemm.packed)."""
    if a.ndim != 2 or a.shape[1] != w.shape[1] or not w.size:
        return None
    mod = packed_gemm.module()
    rows = a.shape[0]
    if mod is None or not (
        packed_gemm.use_for_few_rows(rows)
        or (more_rows and packed_gemm.use_for(rows, a.shape[1], w.shape[0]))
        or rows * a.shape[1] * w.shape[0] <= small
    ):
        return None
    p = packed_gemm.packed(w.T, mod, source=w if source is None else source, part=part)
    if p is None:
        return None
    out = np.empty((a.shape[0], w.shape[0]), dtype=np.float32)
    packed_gemm.matmul_packed(mod, np.ascontiguousarray(a), p, out)
    return out


@kernel("Det", since=(11, 22))
def det(x: Array) -> Array:
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ExecutionError(f"Det needs [..., M, M] input, got {x.shape}")
    return _narrow(np.linalg.det(widen(x)), x.dtype)


@kernel("Einsum", since=(12, 28))
def einsum(*inputs: Array, equation: str = "") -> Array:
    if not inputs:
        raise ExecutionError("Einsum needs at least one input")
    eq = equation.replace(" ", "")
    dt = inputs[0].dtype
    ops: list[Any] = [widen(x) for x in inputs]
    optimize = len(ops) > 1 and sum(x.size for x in ops) >= _EINSUM_OPTIMIZE_MIN
    try:
        out = np.einsum(eq, *ops, optimize=optimize)
    except ValueError as exc:
        raise ExecutionError(f"Einsum equation {equation!r}: {exc}") from exc
    return _narrow(np.asarray(out), dt)
