"""Direct calls to the BLAS numpy already loaded, for what np.matmul cannot say.

np.matmul always computes ``C = A @ B`` into a fresh or given array.  BLAS gemm also
computes ``C = A @ B + C``: a convolution that sums one product per kernel offset, or a
product whose bias was written into ``C`` first, then needs no separate pass over the
output (a pass that costs as much as a small GEMM once the output leaves the cache).

The library is the one numpy's own BLAS calls go to (its bundled OpenBLAS in the wheels:
same instance, so thread limits set through threadpoolctl or OPENBLAS_NUM_THREADS apply
to both).  It is found through the process's loaded libraries and checked once, at first
use, on every kind of call the fast paths make (`_self_check`: overwrite and accumulate,
transposed and strided operands, an output inside a wider buffer, products by address
with leading dimensions wider than the rows, thin, tall and edge-tile shapes), in float64
arithmetic.  When anything about it is unclear (no such library, unknown integer width, a
wrong answer, or ONNXVIZ_DIRECT_BLAS=0) every call falls back to numpy: same results, one
extra pass.  The reason is logged once and `status()` reports it (``onnxviz run --json``
prints it as its engine information).

`few_rows_matmul` (and `gemm`) run products of a few rows in blocks of K on OpenBLAS's
AVX-512 kernel sets, whose small-matrix kernel is faster there than their packed GEMM.
"""

from __future__ import annotations

import ctypes
import glob
import logging
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
        # alpha/beta arguments made once (a ctypes scalar costs ~0.1 us a call).
        self.scalars = {0.0: c_scalar(0.0), 1.0: c_scalar(1.0)}


_GEMM: dict[np.dtype[Any], _Gemm] | None = None
_RAW: dict[np.dtype[Any], Any] = {}
# What `_load` found: the library's path and core name, or why direct calls are off.
_STATUS: dict[str, Any] = {}
_log = logging.getLogger(__name__)


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
    _STATUS.clear()
    _STATUS.update(direct_blas=False, library=None, core=None, reason=None)
    # OpenBLAS reads OPENBLAS_CORETYPE once, when it loads, instead of detecting the CPU
    # (a name its build lacks falls back to detection).  Said in the report because an
    # environment that sets it for every process can hide a faster kernel set: on an
    # AVX-512 CPU, Haswell's AVX2 kernels run products 1.4-1.9x slower than SkylakeX's.
    forced = os.environ.get("OPENBLAS_CORETYPE")
    _STATUS["core_chosen_by"] = (
        f"OPENBLAS_CORETYPE={forced}" if forced else "OpenBLAS's CPU detection"
    )
    if os.environ.get("ONNXVIZ_DIRECT_BLAS", "1") == "0":
        _STATUS["reason"] = "turned off by ONNXVIZ_DIRECT_BLAS=0"
        return found
    reason = "no ILP64 OpenBLAS (cblas_?gemm64_) in this process"
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
            core = _core_name(lib, pattern)
            _bind_threads(lib, pattern)
            failures = [f"{dt}: {why}" for dt, g in fns.items() if (why := _self_check(g, dt))]
            if not failures:
                _STATUS.update(direct_blas=True, library=path, core=core)
                return fns
            reason = f"{os.path.basename(path)} ({core or 'unknown core'}) failed its check: " + (
                "; ".join(failures)
            )
    _STATUS["reason"] = reason
    _log.warning("direct BLAS calls are off, numpy's matmul is used instead: %s", reason)
    return found


def _core_name(lib: Any, pattern: str) -> str | None:
    """The kernel set OpenBLAS chose for this CPU (or OPENBLAS_CORETYPE), e.g. Haswell."""
    prefix = "scipy_openblas" if pattern.startswith("scipy_") else "openblas"
    try:
        fn = getattr(lib, f"{prefix}_get_corename64_")
    except AttributeError:
        return None
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    name = fn()
    return name.decode("ascii", "replace") if name else None


# (m, k, n) of the self-check: tiny, an edge tile of every common micro-kernel size, thin
# (one row, one column), tall, and a K long enough for the kernels' unrolled loops.
_CHECK_SHAPES = ((3, 4, 5), (1, 37, 9), (17, 5, 1), (257, 3, 2), (31, 130, 65), (64, 96, 33))


def _self_check(g: _Gemm, dtype: np.dtype[Any]) -> str | None:
    """None when every kind of call the fast paths make gives numpy's float64 answer
    within this dtype's rounding, else what went wrong."""
    rng = np.random.default_rng(7)
    eps = float(np.finfo(dtype).eps)
    try:
        for m, k, n in _CHECK_SHAPES:
            a = rng.standard_normal((m, k)).astype(dtype)
            b = rng.standard_normal((k, n)).astype(dtype)
            c0 = rng.standard_normal((m, n)).astype(dtype)
            tol = 8 * eps * k
            exact = a.astype(np.float64) @ b.astype(np.float64)
            # Overwrite (beta = 0 must ignore what was there, NaN included) and accumulate.
            out = np.full((m, n), np.nan, dtype=dtype)
            if not _call(g, a, b, out, 0.0):
                return f"{m}x{k}x{n}: operands rejected"
            if not np.allclose(out, exact, rtol=tol, atol=tol):
                return f"{m}x{k}x{n}: C = A @ B differs"
            out = c0.copy()
            _call(g, a, b, out, 1.0)
            if not np.allclose(out, exact + c0, rtol=tol, atol=tol):
                return f"{m}x{k}x{n}: C += A @ B differs"
            # Transposed operands (views of the transposes) and an output inside a wider
            # buffer (leading dimension > n), its neighbours untouched.
            at, bt = np.ascontiguousarray(a.T).T, np.ascontiguousarray(b.T).T
            wide = np.full((m, n + 3), 5.0, dtype=dtype)
            _call(g, at, bt, wide[:, 1 : n + 1], 0.0)
            if not np.allclose(wide[:, 1 : n + 1], exact, rtol=tol, atol=tol):
                return f"{m}x{k}x{n}: transposed/strided product differs"
            if (wide[:, 0] != 5).any() or (wide[:, n + 1 :] != 5).any():
                return f"{m}x{k}x{n}: wrote outside the output"
            # By address with leading dimensions wider than the rows (raw_gemm's calls).
            apad = np.zeros((m, k + 2), dtype=dtype)
            bpad = np.zeros((k, n + 5), dtype=dtype)
            apad[:, :k], bpad[:, :n] = a, b
            cpad = np.zeros((m, n + 1), dtype=dtype)
            cpad[:, :n] = c0
            one = g.c_scalar(1.0)
            g.fn(
                _ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, one,
                apad.ctypes.data, k + 2, bpad.ctypes.data, n + 5, one, cpad.ctypes.data, n + 1,
            )  # fmt: skip
            if not np.allclose(cpad[:, :n], exact + c0, rtol=tol, atol=tol):
                return f"{m}x{k}x{n}: product by address differs"
    except Exception as exc:  # a library that rejects a call is not used
        return f"{type(exc).__name__}: {exc}"
    return None


# OpenBLAS's thread-count getter of the library `_load` chose (None: not found).
_GET_THREADS: Any = None


def _bind_threads(lib: Any, pattern: str) -> None:
    global _GET_THREADS
    prefix = "scipy_openblas" if pattern.startswith("scipy_") else "openblas"
    try:
        fn = getattr(lib, f"{prefix}_get_num_threads64_")
    except AttributeError:
        return
    fn.restype = ctypes.c_int
    fn.argtypes = []
    _GET_THREADS = fn


def threads() -> int | None:
    """How many threads OpenBLAS runs a large product on now (threadpoolctl's limits and
    OPENBLAS_NUM_THREADS included: they set what this reads), or None when unknown (no
    direct BLAS, or a library without the getter).  About a microsecond."""
    if _GEMM is None:
        available()
    fn = _GET_THREADS
    return None if fn is None else int(fn())


def threads_getter_address() -> int:
    """The address of the C function `threads` calls (``int f(void)``), for compiled code
    that asks it per call (native/_sgemm.c's held product), or 0 when there is none."""
    if _GEMM is None:
        available()
    fn = _GET_THREADS
    return 0 if fn is None else int(ctypes.cast(fn, ctypes.c_void_p).value or 0)


def status() -> dict[str, Any]:
    """Whether products go to BLAS directly, which library and kernel set (OpenBLAS's core
    name) they go to, and otherwise why not; and what chose that kernel set
    (``core_chosen_by``: OPENBLAS_CORETYPE's value, or OpenBLAS's CPU detection)."""
    available()
    return dict(_STATUS)


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
        g.scalars[1.0],
        a.ctypes.data,
        la[1],
        b.ctypes.data,
        lb[1],
        g.scalars[beta],
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


# OpenBLAS's AVX-512 kernel sets have a small-matrix GEMM that runs a float32 product
# without packing its operands when M*N*K <= 1e6 (its sgemm_small_kernel_permit); above
# that they pack B on every call, which for a few rows costs more than the arithmetic:
# [4, 256] @ [256, 1024] (an LSTM step) takes 80-150 us there, 54 us on the AVX2 Haswell
# kernels.  Cut along K into blocks under the limit, accumulated in C, it takes 25-30 us;
# GPT-2's 8-row projections run 1.3-1.9x faster, with their weights in cache or not
# (measured on an AVX-512 EPYC; from 12 rows on, blocks lose).  Blocks along K read whole
# rows of B, contiguous: column blocks read strided strips and lose on cold weights.
_SMALL_KERNEL_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})
_SMALL_MNK = 1_000_000
_SPLIT_MAX_ROWS = 8
_SPLIT_MIN_K = 16  # fewer rows of B per block: the calls' overhead outweighs the gain
_SPLIT: bool | None = None


def _rows_contiguous(x: np.ndarray) -> bool:
    """Rows of contiguous elements at a positive, whole-element distance (a leading
    dimension BLAS takes) of at least a row's length."""
    item = x.itemsize
    s0, s1 = x.strides
    return s1 == item and s0 % item == 0 and s0 // item >= x.shape[1]


def splits_few_rows() -> bool:
    """True when `few_rows_matmul` cuts products into blocks of K: OpenBLAS runs one of
    its kernel sets with a small-matrix path (and ONNXVIZ_SPLIT_FEW_ROWS is not 0)."""
    global _SPLIT
    if _SPLIT is None:
        core = (status().get("core") or "").lower()
        off = os.environ.get("ONNXVIZ_SPLIT_FEW_ROWS", "1") == "0"
        _SPLIT = core in _SMALL_KERNEL_CORES and not off
    return _SPLIT


def set_split_few_rows(on: bool | None) -> None:
    """Turn the blocks of `few_rows_matmul` on or off whatever the kernel set
    (differential tests, benchmarks), or back to the automatic choice with None."""
    global _SPLIT
    _SPLIT = on


def few_rows_matmul(
    a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None, *, split: bool | None = None
) -> np.ndarray:
    """``a @ b`` for 2-D operands, into ``out`` when given (must not overlap them).

    A float32 product of 2-8 rows and more than 1e6 multiply-adds, with the rows of
    ``b`` and ``out`` contiguous, runs as blocks of K of at most 1e6 multiply-adds each
    (C = A1 @ B1, then C += Ai @ Bi) when `splits_few_rows` (or ``split=True``, which the
    tests use on any kernel set): each block goes to OpenBLAS's small-matrix kernel
    instead of a packed GEMM.  The same sums over K, up to float32 rounding."""
    depth = _block_depth(a, b, out, split)
    if depth is None:
        return np.matmul(a, b, out=out)
    if out is None:
        out = np.empty((a.shape[0], b.shape[1]), dtype=np.float32)
    _blocks(a, b, out, depth, accumulate=False)
    return out


def _block_depth(
    a: np.ndarray, b: np.ndarray, out: np.ndarray | None, split: bool | None
) -> int | None:
    """Rows of B per block when ``a @ b`` runs in blocks of K (few_rows_matmul), else None."""
    m, k = a.shape
    n = b.shape[1]
    depth = _SMALL_MNK // max(m * n, 1)
    if (
        not 2 <= m <= _SPLIT_MAX_ROWS
        or m * k * n <= _SMALL_MNK
        or depth < _SPLIT_MIN_K
        or a.dtype != np.float32
        or b.dtype != np.float32
        or not _rows_contiguous(b)
        or (out is not None and (out.dtype != np.float32 or not _rows_contiguous(out)))
        or not (splits_few_rows() if split is None else split)
        or raw_gemm(np.dtype(np.float32)) is None
    ):
        return None
    return depth


def _blocks(a: np.ndarray, b: np.ndarray, out: np.ndarray, depth: int, accumulate: bool) -> None:
    """out (+)= a @ b as blocks of ``depth`` rows of B, each onto what the last left."""
    gemm_at = raw_gemm(np.dtype(np.float32))
    if not _rows_contiguous(a):
        a = np.ascontiguousarray(a)  # at most 8 rows: a small copy
    m, k = a.shape
    n = b.shape[1]
    item = a.itemsize
    lda, ldb, ldc = a.strides[0] // item, b.strides[0] // item, out.strides[0] // item
    pa, pb, pc = a.ctypes.data, b.ctypes.data, out.ctypes.data
    for start in range(0, k, depth):
        rows = min(depth, k - start)
        gemm_at(
            m, n, rows, pa + item * start, lda, pb + item * start * ldb, ldb, pc, ldc,
            accumulate or start > 0,
        )  # fmt: skip


# Outputs (elements) below which C += A @ B is a product then an add (see gemm).
SMALL_OUTPUT = 32768


def gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray, *, accumulate: bool = False) -> None:
    """``out = a @ b`` or, with ``accumulate``, ``out += a @ b``, for 2-D operands of one
    float dtype; ``out`` must not overlap ``a`` or ``b``.  Any strides work (views BLAS
    cannot read go through numpy)."""
    global _GEMM
    if a.shape[1] != b.shape[0] or out.shape != (a.shape[0], b.shape[1]):
        raise ValueError(f"gemm shapes do not fit: {a.shape} @ {b.shape} -> {out.shape}")
    depth = _block_depth(a, b, out, None)
    if depth is not None:
        # A few rows on a kernel set with a small-matrix path (few_rows_matmul); the
        # blocks accumulate onto what out holds, so C += A @ B costs no separate pass.
        _blocks(a, b, out, depth, accumulate)
        return
    if not accumulate:
        # C = A @ B is what numpy's matmul does: the same BLAS gemm (or gemv for a single
        # row or column, where gemm would pack its operands first: 4-5x slower on a
        # classifier head), with BLAS-readable strides passed as leading dimensions, for
        # about 1 us of overhead against 4-5 us for a ctypes call with three
        # ``ndarray.ctypes`` lookups.
        np.matmul(a, b, out=out)
        return
    if out.size < SMALL_OUTPUT:
        # A small output stays in cache: the product and a separate add cost less than
        # the direct call's overhead (measured 1.2 us against 5.3 us at 4x16x16, 20.8
        # against 24.3 at 64x128x128, even at 128x128x512).
        np.add(out, np.matmul(a, b), out=out)
        return
    if _GEMM is None:
        _GEMM = _load()
    g = _GEMM.get(out.dtype)
    if (
        g is not None
        and a.shape[0] > 1
        and b.shape[1] > 1
        and a.dtype == out.dtype
        and b.dtype == out.dtype
        and min(a.shape) > 0
        and _call(g, a, b, out, 1.0)
    ):
        return
    out += a @ b
