"""Direct calls to the BLAS numpy already loaded, for what np.matmul cannot say.

np.matmul always computes ``C = A @ B`` into a fresh or given array.  BLAS gemm also
computes ``C = A @ B + C``: a convolution that sums one product per kernel offset, or a
product whose bias was written into ``C`` first, then needs no separate pass over the
output (a pass that costs as much as a small GEMM once the output leaves the cache).

The library is the one numpy's own BLAS calls go to (its bundled OpenBLAS in the wheels:
same instance, so thread limits set through threadpoolctl or OPENBLAS_NUM_THREADS apply
to both).  It is found through the process's loaded libraries, checked once with a
small product against np.matmul, and when anything about it is unclear (no such
library, unknown integer width, a wrong answer, or ONNXVIZ_DIRECT_BLAS=0) every call
falls back to numpy: same results, one extra pass.
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Any

import numpy as np

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112

# (symbol, integer type): numpy's ILP64 OpenBLAS names every symbol with a 64_ suffix
# (and a scipy_ prefix in the scipy-openblas builds).  A plain cblas_sgemm is not used:
# its integer width cannot be told from the outside, and a wrong guess crashes.
_SYMBOLS = (
    ("scipy_cblas_{t}gemm64_", ctypes.c_int64),
    ("cblas_{t}gemm64_", ctypes.c_int64),
)


class _Gemm:
    def __init__(self, fn: Any, c_scalar: Any) -> None:
        self.fn = fn
        self.c_scalar = c_scalar


_GEMM: dict[np.dtype[Any], _Gemm] | None = None
_RAW: dict[np.dtype[Any], Any] = {}


def _candidate_paths() -> list[str]:
    """BLAS libraries mapped into this process, numpy's bundled ones first."""
    numpy_root = os.path.dirname(os.path.dirname(os.path.realpath(np.__file__)))
    paths: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rsplit(" ", 1)[-1].strip()
                name = os.path.basename(path).lower()
                if ("openblas" in name or "blas" in name) and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    for folder in ("numpy.libs", os.path.join("numpy", ".dylibs")):
        for path in sorted(glob.glob(os.path.join(numpy_root, folder, "*openblas*"))):
            if os.path.realpath(path) not in {os.path.realpath(p) for p in paths}:
                paths.append(path)
    # numpy's own first: another package's BLAS would not follow numpy's thread limits.
    return sorted(paths, key=lambda p: not os.path.realpath(p).startswith(numpy_root))


def _bind(lib: Any, symbol: str, int_type: Any, c_scalar: Any) -> Any:
    fn = getattr(lib, symbol)
    ptr = ctypes.c_void_p
    fn.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        int_type,
        int_type,
        int_type,
        c_scalar,
        ptr,
        int_type,
        ptr,
        int_type,
        c_scalar,
        ptr,
        int_type,
    ]
    fn.restype = None
    return fn


def _load() -> dict[np.dtype[Any], _Gemm]:
    found: dict[np.dtype[Any], _Gemm] = {}
    if os.environ.get("ONNXVIZ_DIRECT_BLAS", "1") == "0":
        return found
    for path in _candidate_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for pattern, int_type in _SYMBOLS:
            try:
                fns: dict[np.dtype[Any], _Gemm] = {
                    np.dtype(np.float32): _Gemm(
                        _bind(lib, pattern.format(t="s"), int_type, ctypes.c_float),
                        ctypes.c_float,
                    ),
                    np.dtype(np.float64): _Gemm(
                        _bind(lib, pattern.format(t="d"), int_type, ctypes.c_double),
                        ctypes.c_double,
                    ),
                }
            except AttributeError:
                continue
            if all(_self_test(g, dt) for dt, g in fns.items()):
                return fns
    return found


def _self_test(g: _Gemm, dtype: np.dtype[Any]) -> bool:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 4)).astype(dtype)
    b = rng.standard_normal((4, 5)).astype(dtype)
    c = np.ones((3, 5), dtype=dtype)
    try:
        _call(g, a, b, c, 1.0)
    except Exception:  # a library that rejects the call is not used
        return False
    return bool(np.allclose(c, a @ b + 1.0, rtol=1e-4, atol=1e-4))


def _layout(m: np.ndarray) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) for a 2-D operand BLAS can read in place."""
    item = m.itemsize
    rows, cols = m.shape
    s0, s1 = m.strides
    if (s1 == item or cols == 1) and s0 % item == 0 and s0 // item >= max(cols, 1):
        return _NO_TRANS, s0 // item
    if (s0 == item or rows == 1) and s1 % item == 0 and s1 // item >= max(rows, 1):
        return _TRANS, s1 // item
    return None


def _call(g: _Gemm, a: np.ndarray, b: np.ndarray, out: np.ndarray, beta: float) -> bool:
    la, lb = _layout(a), _layout(b)
    s0, s1 = out.strides
    item = out.itemsize
    if (
        la is None
        or lb is None
        or not (s1 == item and s0 % item == 0 and s0 // item >= out.shape[1])
    ):
        return False
    m, k = a.shape
    n = b.shape[1]
    g.fn(
        _ROW_MAJOR,
        la[0],
        lb[0],
        m,
        n,
        k,
        g.c_scalar(1.0),
        a.ctypes.data,
        la[1],
        b.ctypes.data,
        lb[1],
        g.c_scalar(beta),
        out.ctypes.data,
        s0 // item,
    )
    return True


def available() -> bool:
    """True when products go to BLAS directly (else through numpy)."""
    global _GEMM
    if _GEMM is None:
        _GEMM = _load()
    return bool(_GEMM)


def raw_gemm(dtype: np.dtype[Any]) -> Any:
    """The bare BLAS gemm for ``dtype`` as ``fn(m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc,
    accumulate)`` on row-major, untransposed operands given by address (C = A @ B, or
    C += A @ B), or None without direct BLAS.  For loops of many products over one
    buffer, whose addresses the caller computes once: ``gemm``'s checks and
    ``ndarray.ctypes`` lookups cost about 10 us per call.  The caller guarantees the
    addresses, leading dimensions and sizes describe memory it owns."""
    global _GEMM
    dt = np.dtype(dtype)
    if dt in _RAW:
        return _RAW[dt]
    if _GEMM is None:
        _GEMM = _load()
    g = _GEMM.get(dt)
    if g is None:
        _RAW[dt] = None
        return None
    fn, scalar = g.fn, g.c_scalar
    one, zero = scalar(1.0), scalar(0.0)

    def call(
        m: int, n: int, k: int, a: int, lda: int, b: int, ldb: int, c: int, ldc: int, acc: bool
    ) -> None:
        fn(
            _ROW_MAJOR,
            _NO_TRANS,
            _NO_TRANS,
            m,
            n,
            k,
            one,
            a,
            lda,
            b,
            ldb,
            one if acc else zero,
            c,
            ldc,
        )

    return call


def gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray, *, accumulate: bool = False) -> None:
    """``out = a @ b`` or, with ``accumulate``, ``out += a @ b``, for 2-D operands of one
    float dtype; ``out`` must not overlap ``a`` or ``b``.  Any strides work (views BLAS
    cannot read go through numpy)."""
    global _GEMM
    if _GEMM is None:
        _GEMM = _load()
    if a.shape[1] != b.shape[0] or out.shape != (a.shape[0], b.shape[1]):
        raise ValueError(f"gemm shapes do not fit: {a.shape} @ {b.shape} -> {out.shape}")
    g = _GEMM.get(out.dtype)
    if (
        g is not None
        and a.dtype == out.dtype
        and b.dtype == out.dtype
        and min(a.shape) > 0
        and b.shape[1] > 0
        and _call(g, a, b, out, 1.0 if accumulate else 0.0)
    ):
        return
    if accumulate:
        out += a @ b
    else:
        np.matmul(a, b, out=out)
