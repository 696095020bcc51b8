"""The compiled GEMM by a prepacked weight (runtime/native/_sgemm.c, kernels/packed_gemm.py).

* Both products at every level this CPU has (``native.levels()``, each set directly):
  ``gemm`` (A read in place by the packed right operand) and ``gemm_left`` (the packed
  left operand by an image), on shapes with 1, primes, sizes that are no multiple of a
  panel or a tile, K longer than one cache block and N wider than one, leading
  dimensions wider than the rows, with and without bias, addend, each activation (Relu,
  Clip, HardSwish) and accumulate: within the float32 error bound of the exact (float64)
  result, and nothing written outside C.  NaN and Inf propagate as in the sum.
* Every size and buffer is checked: a wrong call raises ValueError, never reads or
  writes outside its buffers.
* Wired in: a model with a channels-last 1x1 conv chain (bias, residual, Relu), an NCHW
  1x1 conv on a 7x7 image with a residual, a MatMul + bias and a plain MatMul by
  constant weights runs the kernel (counted) in its unwatched run, and gives
  onnxruntime's outputs and the kernels-off outputs within float32 rounding, at every
  level; stepped, fused and plain runs agree (differential.assert_modes_agree).
* A channels-last 1x1 conv followed by HardSwish applies it in the GEMM's epilogue (act
  3, counted) and gives the kernels-off and onnxruntime outputs, at every level; the
  stepped run agrees; with the routing off the same numbers come from numpy.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

from onnxviz.runtime import native
from onnxviz.runtime.kernels import _weight_cache, packed_gemm
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled, compiled_silu

from .differential import assert_modes_agree

pytestmark = pytest.mark.numeric

NAN = math.nan
LEVELS = native.levels()
U = 2.0**-24


def _module() -> Any:
    return compiled("sgemm", "the OpenBLAS paths run")


def _level(level: int | None) -> AbstractContextManager[None]:
    return at_level("sgemm", level)


def _gamma(n: int) -> float:
    return n * U / (1 - n * U)


def _act64(y: np.ndarray, act: int, lo: float, hi: float) -> np.ndarray:
    if act == packed_gemm.ACT_RELU:
        return np.where(y < 0, 0.0, y)  # NaN kept
    if act == packed_gemm.ACT_CLIP:
        if not math.isnan(lo):
            y = np.where(y < lo, lo, y)
        if not math.isnan(hi):
            y = np.where(y > hi, hi, y)
    if act == packed_gemm.ACT_HARDSWISH:
        y = y * np.clip(y / 6.0 + 0.5, 0.0, 1.0)
    if act == packed_gemm.ACT_SILU:
        with np.errstate(over="ignore"):
            y = y / (1.0 + np.exp(-y))
    return y


def _check_close(
    got: np.ndarray,
    exact: np.ndarray,
    scale: np.ndarray,
    k: int,
    act: int = packed_gemm.ACT_NONE,
    pre: np.ndarray | None = None,
) -> None:
    """|got - exact| <= gamma(K + 3) * scale: K products summed (in any blocking), then
    C, bias and addend added; Relu and Clip are 1-Lipschitz.  HardSwish (x * clip(x / 6
    + 0.5, 0, 1), slope within [-0.5, 1.5]) scales that by 1.5 and adds its own three
    roundings in float32, at most 4u of the (pre-activation) sum ``pre``: 8u taken.
    SiLU (slope within [-0.1, 1.1]; its sigmoid within 3 ulps, then the product) as
    much.  (Plus a tiny absolute slack for sums that cancel to subnormals.)"""
    err = np.abs(got.astype(np.float64) - exact)
    e = _gamma(k + 3) * scale
    if act in (packed_gemm.ACT_HARDSWISH, packed_gemm.ACT_SILU):
        assert pre is not None
        bound = 1.5 * e + 8 * U * (np.abs(pre) + e) + 1e-30
    else:
        bound = e + 1e-30
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert (err <= bound).all(), f"error {err[worst]} > bound {bound[worst]} at {worst}"


# (M, K, N): 1, primes, tile and panel edges (12 rows, 32/16 columns), K over the cache
# block (gemm: 1024 at AVX-512, 512 below; gemm_left: 128), N over gemm's column block
# (at AVX-512 512 KB of the weight: 224 columns at K = 1100, two K blocks of 550; 256
# below).
SHAPES = [
    (1, 1, 1),
    (1, 7, 33),
    (13, 1, 5),
    (12, 32, 32),
    (25, 97, 47),
    (37, 600, 17),
    (50, 130, 300),
    (6, 1031, 16),
    (97, 64, 64),
    (7, 5, 290),
    (14, 1100, 300),
    # One to three rows over whole groups of panels (the wide few-row tiles), K over
    # a cache block, a remainder of panels and a half panel after them.
    (1, 1100, 272),
    (2, 70, 200),
    (3, 33, 64),
]


def _operands(rng: np.random.Generator, m: int, k: int, n: int) -> dict[str, np.ndarray]:
    return {
        "a": rng.standard_normal((m, k)).astype(np.float32),
        "w": rng.standard_normal((k, n)).astype(np.float32),
        "bias": rng.standard_normal(n).astype(np.float32),
        "row_bias": rng.standard_normal(m).astype(np.float32),
        "addend": rng.standard_normal((m, n)).astype(np.float32),
        "c0": rng.standard_normal((m, n)).astype(np.float32),
    }


def _cases() -> list[tuple[int, bool, bool, int, bool]]:
    """(act, bias, addend, pad, accumulate) combinations, every option at least twice."""
    acts = [
        packed_gemm.ACT_NONE,
        packed_gemm.ACT_RELU,
        packed_gemm.ACT_CLIP,
        packed_gemm.ACT_HARDSWISH,
        packed_gemm.ACT_SILU,
    ]
    out = []
    for i in range(10):
        out.append((acts[i % 5], bool(i & 1), bool(i & 2), (i * 3) % 5, bool(i & 4)))
    return out


@pytest.mark.parametrize("level", LEVELS)
def test_gemm_within_the_float32_bound_at_every_level(level):
    mod = _module()
    mod.set_level(level)
    try:
        rng = np.random.default_rng(level)
        for m, k, n in SHAPES:
            ops = _operands(rng, m, k, n)
            p = packed_gemm.pack(ops["w"], mod)
            for act, with_bias, with_add, pad, acc in _cases():
                lo, hi = (-0.5, 0.75) if pad % 2 else (NAN, 0.5)
                # A, C and the addend inside wider buffers (leading dimensions > rows).
                abuf = rng.standard_normal((m, k + pad)).astype(np.float32)
                abuf[:, :k] = ops["a"]
                cbuf = np.full((m, n + pad + 1), 7.0, np.float32)
                cbuf[:, :n] = ops["c0"]
                dbuf = np.zeros((m, n + pad), np.float32)
                dbuf[:, :n] = ops["addend"]
                mod.gemm(
                    abuf, k + pad, m, k, p.data, p.offset, n, p.nr, cbuf, n + pad + 1,
                    ops["bias"] if with_bias else None, dbuf if with_add else None, n + pad,
                    act, lo, hi, acc,
                )  # fmt: skip
                a64, w64 = ops["a"].astype(np.float64), ops["w"].astype(np.float64)
                exact = a64 @ w64
                scale = np.abs(a64) @ np.abs(w64)
                if acc:
                    exact = exact + ops["c0"]
                    scale = scale + np.abs(ops["c0"])
                if with_bias:
                    exact = exact + ops["bias"]
                    scale = scale + np.abs(ops["bias"])
                if with_add:
                    exact = exact + ops["addend"]
                    scale = scale + np.abs(ops["addend"])
                pre = exact
                if act == packed_gemm.ACT_CLIP:
                    lo32, hi32 = (float(np.float32(v)) for v in (lo, hi))
                    exact = _act64(exact, act, lo32, hi32)
                else:
                    exact = _act64(exact, act, lo, hi)
                _check_close(cbuf[:, :n], exact, scale, k, act, pre)
                assert (cbuf[:, n:] == 7.0).all(), "wrote outside C"
    finally:
        mod.set_level(native.cpu_level())


@pytest.mark.parametrize("level", LEVELS)
def test_every_edge_row_count_and_aliased_rows(level):
    """Every row count of a last tile (1..11 after full tiles of 12; the AVX-512 level
    runs each in place with only its rows), K over one cache block and not a multiple of
    it, columns ending on a half panel and a full one, A's rows 4 KB apart (read in
    place, or at AVX-512 first copied to rows a padded stride apart) or not: within the
    float32 bound, the epilogue applied, nothing written past
    the rows and columns of C; and the same bits as A copied (a_trans)."""
    mod = _module()
    with _level(level):
        rng = np.random.default_rng(70 + level)
        for m, k, n, lda in [
            *((m, 1100, 40, 1100) for m in range(1, 25)),
            (20, 2048, 48, 2048),
            (35, 700, 33, 1024),
            (23, 64, 72, 2048),
            # 4 KB-aliased rows the AVX-512 level first copies to a padded stride (at
            # least 9 rows and 64 columns): K of one block and of three, K shorter than
            # the stride, 9 rows, and 8 (read in place)
            (20, 2048, 64, 2048),
            (13, 3072, 96, 3072),
            (35, 700, 72, 1024),
            (9, 1024, 64, 1024),
            (8, 1024, 64, 1024),
        ]:
            ops = _operands(rng, m, k, n)
            p = packed_gemm.pack(ops["w"], mod)
            abuf = np.full((m, lda), np.nan, np.float32)
            abuf[:, :k] = ops["a"]
            cbuf = np.full((m + 1, n + 3), 7.0, np.float32)
            mod.gemm(
                abuf, lda, m, k, p.data, p.offset, n, p.nr, cbuf, n + 3,
                ops["bias"], ops["addend"], n, packed_gemm.ACT_RELU, NAN, NAN, False,
            )  # fmt: skip
            a64, w64 = ops["a"].astype(np.float64), ops["w"].astype(np.float64)
            pre = a64 @ w64 + ops["bias"] + ops["addend"]
            scale = np.abs(a64) @ np.abs(w64) + np.abs(ops["bias"]) + np.abs(ops["addend"])
            _check_close(cbuf[:m, :n], np.maximum(pre, 0.0), scale, k, packed_gemm.ACT_RELU)
            assert (cbuf[:, n:] == 7.0).all() and (cbuf[m] == 7.0).all(), "wrote outside C"
            at = np.ascontiguousarray(ops["a"].T)
            got = np.empty((m, n), np.float32)
            mod.gemm(
                at, m, m, k, p.data, p.offset, n, p.nr, got, n,
                ops["bias"], ops["addend"], n, packed_gemm.ACT_RELU, NAN, NAN, False, True,
            )  # fmt: skip
            np.testing.assert_array_equal(got, cbuf[:m, :n])


def _rows_product(
    mod: Any,
    ops: dict[str, np.ndarray],
    p: Any,
    rows: slice,
    case: tuple[int, bool, bool, int, bool],
) -> np.ndarray:
    """gemm on the rows ``rows`` of ``ops``' A (and of C and the addend) with the
    options of ``case`` (_cases)."""
    act, with_bias, with_add, _pad, acc = case
    k, n = ops["w"].shape
    a = np.ascontiguousarray(ops["a"][rows])
    c = np.ascontiguousarray(ops["c0"][rows])
    d = np.ascontiguousarray(ops["addend"][rows])
    mod.gemm(
        a, k, a.shape[0], k, p.data, p.offset, n, p.nr, c, n,
        ops["bias"] if with_bias else None, d if with_add else None, n, act, -0.5, 0.75, acc,
    )  # fmt: skip
    return c


@pytest.mark.parametrize("level", LEVELS)
def test_a_row_gives_the_same_bits_whatever_rows_come_with_it(level):
    """One to three rows run the wide tiles (several panels at once), at AVX2 three to
    five rows a tile of only those rows, more rows the one-panel tiles: each column's
    sum is made in the same order either way, so a row's result, epilogue included, has
    the same bits alone as among 12 or 5 rows (a decode step and a prompt agree on a
    token's product)."""
    mod = _module()
    with _level(level):
        rng = np.random.default_rng(90 + level)
        for k, n in [(64, 128), (1100, 272), (7, 200), (300, 64 + 16)]:
            ops = _operands(rng, 12, k, n)
            p = packed_gemm.pack(ops["w"], mod)
            for case in _cases():
                whole = _rows_product(mod, ops, p, slice(0, 12), case)
                five = _rows_product(mod, ops, p, slice(0, 5), case)
                for start, rows in [(0, 1), (3, 2), (9, 3), (4, 1), (1, 4), (7, 5), (0, 4)]:
                    got = _rows_product(mod, ops, p, slice(start, start + rows), case)
                    np.testing.assert_array_equal(got, whole[start : start + rows])
                    if start + rows <= 5:
                        np.testing.assert_array_equal(got, five[start : start + rows])


@pytest.mark.parametrize("level", LEVELS)
def test_whole_tiles_give_the_general_tiles_bits(level):
    """At AVX-512 a whole 12 x 32 tile of A read in place over one K block runs a kernel
    of its own (tile_avx512_full: bias, addend and activation known when compiled, the
    accumulators kept in registers); A given transposed runs the general tiles: for
    every option, the same bits.  (At AVX2 whole 6-row tiles of the packed copy run
    tile_avx2_full either way: test_a_row_gives_the_same_bits_whatever_rows_come_with_it
    compares them with the general edge tiles, row by row.)"""
    mod = _module()
    with _level(level):
        rng = np.random.default_rng(60 + level)
        for m, k, n in [(24, 64, 64), (36, 200, 96), (12, 1024, 32), (48, 7, 80), (25, 33, 40)]:
            ops = _operands(rng, m, k, n)
            p = packed_gemm.pack(ops["w"], mod)
            at = np.ascontiguousarray(ops["a"].T)
            for act, with_bias, with_add, _pad, acc in _cases():
                got = {}
                for trans in (False, True):
                    c = ops["c0"].copy()
                    mod.gemm(
                        at if trans else ops["a"], m if trans else k, m, k, p.data, p.offset,
                        n, p.nr, c, n, ops["bias"] if with_bias else None,
                        ops["addend"] if with_add else None, n, act, -0.5, 0.75, acc, trans,
                    )  # fmt: skip
                    got[trans] = c
                np.testing.assert_array_equal(got[False], got[True])


@pytest.mark.parametrize("level", LEVELS)
def test_a_transposed_a_gives_the_same_bits(level):
    """A given as its K x M transpose (an NCHW image, rows lda apart) is copied into rows
    first (at the vector levels, up to the module's size limit: 8 x 8 blocks and the
    edges of a shape that is no multiple of 8), or tile by tile into the kernel's buffer
    (the generic level, and above the limit: 300 x 512): the products of A as it is, bit
    for bit."""
    mod = _module()
    with _level(level):
        rng = np.random.default_rng(40 + level)
        for m, k, n in [*SHAPES, (196, 576, 128), (3136, 16, 72), (203, 77, 40), (300, 512, 40)]:
            ops = _operands(rng, m, k, n)
            p = packed_gemm.pack(ops["w"], mod)
            want = np.empty((m, n), np.float32)
            packed_gemm.matmul_packed(mod, ops["a"], p, want, bias=ops["bias"], act=1)
            at = np.full((k, m + 3), np.nan, np.float32)  # rows m + 3 apart
            at[:, :m] = ops["a"].T
            got = np.empty((m, n), np.float32)
            mod.gemm(
                at, m + 3, m, k, p.data, p.offset, n, p.nr, got, n,
                ops["bias"], None, 0, 1, NAN, NAN, False, True,
            )  # fmt: skip
            np.testing.assert_array_equal(got, want)
            again = np.empty((m, n), np.float32)
            packed_gemm.matmul_packed(
                mod, np.ascontiguousarray(ops["a"].T), p, again, bias=ops["bias"], act=1,
                a_transposed=True,
            )  # fmt: skip
            np.testing.assert_array_equal(again, want)


@pytest.mark.parametrize("level", LEVELS)
def test_gemm_left_within_the_float32_bound_at_every_level(level):
    mod = _module()
    mod.set_level(level)
    try:
        rng = np.random.default_rng(100 + level)
        for m, k, n in SHAPES:
            ops = _operands(rng, m, k, n)
            wl = rng.standard_normal((m, k)).astype(np.float32)
            x = rng.standard_normal((k, n)).astype(np.float32)
            p = packed_gemm.pack_rows(wl, mod)
            for act, with_bias, with_add, pad, acc in _cases():
                lo, hi = (-0.5, 0.75) if pad % 2 else (0.0, NAN)
                xbuf = rng.standard_normal((k, n + pad)).astype(np.float32)
                xbuf[:, :n] = x
                cbuf = np.full((m, n + pad + 2), -3.0, np.float32)
                cbuf[:, :n] = ops["c0"]
                dbuf = np.zeros((m, n + pad), np.float32)
                dbuf[:, :n] = ops["addend"]
                mod.gemm_left(
                    p.data, p.offset, m, k, p.nr, xbuf, n + pad, n, cbuf, n + pad + 2,
                    ops["row_bias"] if with_bias else None, dbuf if with_add else None,
                    n + pad, act, lo, hi, acc,
                )  # fmt: skip
                w64, x64 = wl.astype(np.float64), x.astype(np.float64)
                exact = w64 @ x64
                scale = np.abs(w64) @ np.abs(x64)
                if acc:
                    exact, scale = exact + ops["c0"], scale + np.abs(ops["c0"])
                if with_bias:
                    rb = ops["row_bias"][:, None].astype(np.float64)
                    exact, scale = exact + rb, scale + np.abs(rb)
                if with_add:
                    exact, scale = exact + ops["addend"], scale + np.abs(ops["addend"])
                pre = exact
                exact = _act64(exact, act, lo, hi)
                _check_close(cbuf[:, :n], exact, scale, k, act, pre)
                assert (cbuf[:, n:] == -3.0).all(), "wrote outside C"
    finally:
        mod.set_level(native.cpu_level())


@pytest.mark.parametrize("level", LEVELS)
def test_nan_and_inf_propagate(level):
    mod = _module()
    mod.set_level(level)
    try:
        rng = np.random.default_rng(3)
        m, k, n = 30, 40, 70
        a = rng.standard_normal((m, k)).astype(np.float32)
        w = np.abs(rng.standard_normal((k, n))).astype(np.float32) + 0.5
        a[3, 5] = np.nan  # row 3: NaN everywhere, whatever the activation
        a[17, :] = np.abs(a[17, :])
        a[17, 9] = np.inf  # row 17: +Inf (every product positive)
        a[20, 2] = -np.inf  # row 20: -Inf, Relu makes it 0
        acts = (
            packed_gemm.ACT_NONE,
            packed_gemm.ACT_RELU,
            packed_gemm.ACT_CLIP,
            packed_gemm.ACT_HARDSWISH,
            packed_gemm.ACT_SILU,
        )
        # SiLU of -Inf: -Inf times the Sigmoid kernel's value there.
        silu_low = float(compiled_silu(np.array([-np.inf], np.float32))[0])
        for act in acts:
            out = np.zeros((m, n), np.float32)
            packed_gemm.matmul_packed(
                mod, a, packed_gemm.pack(w, mod), out, act=act, lo=-1.0, hi=NAN
            )
            assert np.isnan(out[3]).all()
            assert (out[17] == np.inf).all()
            # HardSwish of -Inf: -Inf times a gate of 0, NaN (as numpy's kernel has it).
            want = {
                packed_gemm.ACT_NONE: -np.inf,
                packed_gemm.ACT_RELU: 0.0,
                packed_gemm.ACT_HARDSWISH: np.nan,
                packed_gemm.ACT_SILU: silu_low,
            }.get(act, -1.0)
            np.testing.assert_array_equal(out[20], np.full(n, want, np.float32))
            others = np.delete(out, [3, 17, 20], axis=0)
            assert np.isfinite(others).all()
            # The same through gemm_left: W's row 3 by the image.
            out_l = np.zeros((m, n), np.float32)
            packed_gemm.left_matmul_packed(
                mod, packed_gemm.pack_rows(a, mod), w, out_l, act=act, lo=-1.0, hi=NAN
            )
            np.testing.assert_array_equal(np.isnan(out_l), np.isnan(out))
            assert (out_l[17] == np.inf).all()
            np.testing.assert_array_equal(out_l[20], np.full(n, want, np.float32))
    finally:
        mod.set_level(native.cpu_level())


def test_every_wrong_call_is_a_value_error():
    mod = _module()
    mod.set_level(native.cpu_level())
    rng = np.random.default_rng(5)
    m, k, n = 20, 30, 40
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    p = packed_gemm.pack(w, mod)
    c = np.zeros((m, n), np.float32)
    bias = np.zeros(n, np.float32)

    def call(**kw: Any) -> None:
        args = dict(
            a=a, lda=k, m=m, k=k, data=p.data, offset=p.offset, n=n, nr=p.nr, c=c, ldc=n,
            bias=None, addend=None, ldadd=0, act=0, lo=NAN, hi=NAN, acc=False,
        )  # fmt: skip
        args.update(kw)
        mod.gemm(*args.values())

    call()  # the well-formed call works
    bad: list[dict[str, Any]] = [
        {"a": a[:-1]},  # A shorter than M rows
        {"lda": k - 1},  # rows overlapping
        {"m": 0},
        {"k": 0},
        {"n": n + 1},  # more columns than packed
        {"k": k + 1},  # packed for fewer rows
        {"c": c[:-1]},
        {"ldc": n - 1},
        {"bias": bias[:-1]},
        {"bias": bias.astype(np.float64)},
        {"addend": np.zeros((m - 1, n), np.float32), "ldadd": n},
        {"addend": np.zeros((m, n), np.float32), "ldadd": n - 1},
        {"act": 5},
        {"act": -1},
        {"offset": 64},
        # One float short of the panels (N rounded up to this level's panel width).
        {"data": bytes(p.data)[: p.offset + 4 * k * (-(-n // p.nr) * p.nr) - 4]},
        {"nr": 48 - p.nr},  # packed for another level's panels
        {"a": a.astype(np.float64)},
        {"c": c.astype(np.float64)},
        {"data": bytes(8)},
        {"c": a, "ldc": n, "n": k, "data": packed_gemm.pack(w[:, :k], mod).data},  # C is A
    ]
    for kw in bad:
        with pytest.raises(ValueError):
            call(**kw)
            pytest.fail(f"accepted {list(kw)}")
    ro = np.zeros((m, n), np.float32)
    ro.flags.writeable = False
    with pytest.raises((ValueError, BufferError, TypeError)):
        call(c=ro)
    # gemm_left: the same kinds of mistakes.
    pl = packed_gemm.pack_rows(a, mod)  # (m, k) weight
    x = rng.standard_normal((k, n)).astype(np.float32)
    mod.gemm_left(pl.data, pl.offset, m, k, pl.nr, x, n, n, c, n, None, None, 0, 0, NAN, NAN, 0)
    left_calls: list[tuple[Any, ...]] = [
        (pl.data, pl.offset, m, k, pl.nr, x[:-1], n, n, c, n, None, None, 0, 0, NAN, NAN, 0),
        (pl.data, pl.offset, m + 1, k, pl.nr, x, n, n, c, n, None, None, 0, 0, NAN, NAN, 0),
        (pl.data, pl.offset, m, k, pl.nr + 1, x, n, n, c, n, None, None, 0, 0, NAN, NAN, 0),
        (pl.data, pl.offset, m, k, pl.nr, x, n, n, c, n, bias, None, 0, 0, NAN, NAN, 0),
        (pl.data, pl.offset, m, k, pl.nr, x, n - 1, n, c, n, None, None, 0, 0, NAN, NAN, 0),
        (pl.data, pl.offset, m, k, pl.nr, x, n, n, x, n, None, None, 0, 0, NAN, NAN, 0),
        (pl.data, pl.offset, m, k, pl.nr, x, n, n, c, n, None, None, 0, 5, NAN, NAN, 0),
    ]
    for args in left_calls:
        with pytest.raises(ValueError):
            mod.gemm_left(*args)
    pack_calls: list[tuple[Any, ...]] = [(w, k, n + 1, 32), (w, k, n, 8), (w, 0, n, 16)]
    for args in pack_calls:
        with pytest.raises(ValueError):
            mod.pack(*args)
    with pytest.raises(ValueError):
        mod.pack_rows(a, m, k, 5)
    with pytest.raises(ValueError):
        packed_gemm.matmul_packed(mod, a[:, :-1].copy(), p, c)  # K does not match
    with pytest.raises(ValueError):
        mod.set_level(4)


@pytest.mark.parametrize("nr", [16, 32])
@pytest.mark.parametrize(("k", "n"), [(1, 1), (1, 40), (37, 1), (300, 33), (513, 16), (700, 95)])
def test_a_transposed_weight_packs_from_its_rows_into_the_same_panels(
    k: int, n: int, nr: int
) -> None:
    """pack(b, K, N, nr, transposed=True) of B's N x K transpose gives the bytes of pack of
    B itself (K x N): every panel, the last one's padding zero, K across its blocks; and
    packed_gemm.pack takes a transposed view (Gemm's transB weight) that way, not through
    a copy of the whole weight."""
    mod = _module()
    rng = np.random.default_rng(k * 1000 + n)
    b = rng.standard_normal((k, n)).astype(np.float32)
    b.reshape(-1)[:: max(1, b.size // 7)] = NAN  # NaNs are values to copy
    want, want_at = mod.pack(np.ascontiguousarray(b), k, n, nr)
    t = np.ascontiguousarray(b.T)
    got, got_at = mod.pack(t, k, n, nr, True)
    size = k * -(-n // nr) * nr * 4
    assert bytes(got[got_at : got_at + size]) == bytes(want[want_at : want_at + size])
    with pytest.raises(ValueError):  # the transpose must hold N x K floats
        mod.pack(t.reshape(-1)[:-1], k, n, nr, True)
    view = t.T  # a K x N view of the N x K rows
    assert not view.flags.c_contiguous or min(k, n) == 1
    p = packed_gemm.pack(view, mod)
    size_p = p.k * -(-p.n // p.nr) * p.nr * 4
    ref = packed_gemm.pack(np.ascontiguousarray(view), mod)
    assert bytes(p.data[p.offset : p.offset + size_p]) == bytes(
        ref.data[ref.offset : ref.offset + size_p]
    )


def test_a_weight_is_packed_once_and_only_when_constant():
    mod = _module()
    _weight_cache.clear()
    w = np.frombuffer(np.arange(12, dtype=np.float32).tobytes(), np.float32).reshape(3, 4)
    assert _weight_cache.frozen(w)
    first = packed_gemm.packed(w, mod)
    assert first is not None and packed_gemm.packed(w, mod) is first
    writeable = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert packed_gemm.packed(writeable, mod) is None


# -- wired in: a model -----------------------------------------------------------------------


def _init(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(arr.astype(np.float32), name)


def _model(rng: np.random.Generator) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x (1, 24, 14, 14): depthwise 3x3 -> 1x1 conv (bias) + x -> Relu -> 1x1 conv (bias)
    -> depthwise 3x3, a channels-last chain (fusion_layout: the pointwise convs sit
    between depthwise ones); z (1, 40, 7, 7): 1x1 conv (bias) + z -> Relu, NCHW on a 7x7 image
    (gemm_left); v (64, 48): MatMul + bias and a plain MatMul by constant weights."""
    c = 24
    nodes = [
        helper.make_node(
            "Conv", ["x", "wd", "bd"], ["d"], kernel_shape=[3, 3], pads=[1] * 4, group=c
        ),  # fmt: skip
        helper.make_node("Conv", ["d", "w1", "b1"], ["c1"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["c1", "x"], ["s1"]),
        helper.make_node("Relu", ["s1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["p2"], kernel_shape=[1, 1]),
        helper.make_node("Conv", ["p2", "wd2"], ["y"], kernel_shape=[3, 3], group=37),
        helper.make_node("Conv", ["z", "w3", "b3"], ["c3"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["c3", "z"], ["s3"]),
        helper.make_node("Relu", ["s3"], ["y3"]),
        helper.make_node("MatMul", ["v", "wm"], ["mm"]),
        helper.make_node("Add", ["mm", "bm"], ["ym"]),
        helper.make_node("MatMul", ["v", "wm2"], ["ym2"]),
    ]
    inits = [
        _init("wd", rng.standard_normal((c, 1, 3, 3)) * 0.3),
        _init("bd", rng.standard_normal(c)),
        _init("w1", rng.standard_normal((c, c, 1, 1)) * 0.2),
        _init("b1", rng.standard_normal(c)),
        _init("w2", rng.standard_normal((37, c, 1, 1)) * 0.2),
        _init("b2", rng.standard_normal(37)),
        _init("wd2", rng.standard_normal((37, 1, 3, 3)) * 0.3),
        _init("w3", rng.standard_normal((40, 40, 1, 1)) * 0.2),
        _init("b3", rng.standard_normal(40)),
        _init("wm", rng.standard_normal((48, 50)) * 0.2),
        _init("bm", rng.standard_normal(50)),
        _init("wm2", rng.standard_normal((48, 33)) * 0.2),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "packed_gemm",
        [
            helper.make_tensor_value_info("x", f, [1, c, 14, 14]),
            helper.make_tensor_value_info("z", f, [1, 40, 7, 7]),
            helper.make_tensor_value_info("v", f, [64, 48]),
        ],
        [helper.make_tensor_value_info(o, f, None) for o in ("y", "y3", "ym", "ym2")],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {
        "x": rng.standard_normal((1, c, 14, 14)).astype(np.float32),
        "z": rng.standard_normal((1, 40, 7, 7)).astype(np.float32),
        "v": rng.standard_normal((64, 48)).astype(np.float32),
    }
    return model, feeds


@contextmanager
def _counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    calls: Counter[str] = Counter()
    right, left = packed_gemm.matmul_packed, packed_gemm.left_matmul_packed

    def count_right(*args: Any, **kw: Any) -> None:
        calls["gemm"] += 1
        right(*args, **kw)

    def count_left(*args: Any, **kw: Any) -> None:
        calls["gemm_left"] += 1
        left(*args, **kw)

    def counting_product(*args: Any) -> Any:
        # The held product runs gemm in C: count the calls made through it.
        product = held(*args)

        def call(*ins: Any) -> Any:
            calls["gemm"] += 1
            return product(*ins)

        return call

    held = packed_gemm.held_product
    monkeypatch.setattr(packed_gemm, "matmul_packed", count_right)
    monkeypatch.setattr(packed_gemm, "left_matmul_packed", count_left)
    monkeypatch.setattr(packed_gemm, "held_product", counting_product)
    yield calls


def test_a_model_runs_the_kernel_and_gives_the_same_outputs(monkeypatch):
    _module()
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _model(np.random.default_rng(11))
    names = [o.name for o in model.graph.output]
    theirs = dict(zip(names, ort.InferenceSession(model.SerializeToString()).run(names, feeds)))
    with threadpool_limits(1):  # the kernel serves single-threaded BLAS (use_for)
        with _level(None):
            off = Session(model).run(feeds)
        for level in LEVELS:
            with _level(level), _counting(monkeypatch) as calls:
                _weight_cache.clear()
                on = Session(model).run(feeds)
            # The channels-last pointwise convs (2), MatMul + bias and the plain MatMul
            # run gemm; the 7x7 NCHW conv runs gemm_left at AVX-512 (below, OpenBLAS).
            left = 1 if level >= native.AVX512 else 0
            assert calls["gemm"] == 4 and calls["gemm_left"] == left, (level, calls)
            for name in names:
                scale = float(np.abs(theirs[name]).max()) + 1.0
                np.testing.assert_allclose(on[name], theirs[name], rtol=0, atol=1e-5 * scale)
                np.testing.assert_allclose(on[name], off[name], rtol=0, atol=1e-5 * scale)
            monkeypatch.undo()
        # Watched (stepped) runs and unwatched runs agree with the kernel on.
        assert_modes_agree(model, feeds)


def test_the_routing_can_be_turned_off(monkeypatch):
    _module()
    model, feeds = _model(np.random.default_rng(12))
    monkeypatch.setattr(packed_gemm, "ROUTED", False)
    with threadpool_limits(1), _counting(monkeypatch) as calls:
        Session(model).run(feeds)
    assert not calls


def test_a_weight_reshaped_at_run_time_is_packed_once_over_runs(monkeypatch):
    """A Reshape of an initializer to a shape computed from the input (as torch exports
    write it) cannot be folded: the kernel gets a new view of the constant on every run,
    and must not pack it again each time."""
    _module()
    rng = np.random.default_rng(13)
    i64 = TensorProto.INT64
    nodes = [
        helper.make_node("Shape", ["v"], ["vs"], start=1),  # [48]
        helper.make_node("Concat", ["vs", "minus1"], ["ws"], axis=0),  # [48, -1]
        helper.make_node("Reshape", ["wflat", "ws"], ["w"]),
        helper.make_node("MatMul", ["v", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["y"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "reshaped_weight",
        [helper.make_tensor_value_info("v", f, [16, 48])],
        [helper.make_tensor_value_info("y", f, None)],
        [
            _init("wflat", rng.standard_normal(48 * 40)),
            _init("b", rng.standard_normal(40)),
            helper.make_tensor("minus1", i64, [1], [-1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    v = rng.standard_normal((16, 48)).astype(np.float32)
    w = numpy_helper.to_array(graph.initializer[0]).reshape(48, 40).astype(np.float64)
    expected = v.astype(np.float64) @ w + numpy_helper.to_array(graph.initializer[1])
    packs: list[tuple[int, ...]] = []
    pack = packed_gemm.pack

    def counting_pack(weight: np.ndarray, m: Any) -> Any:
        packs.append(weight.shape)
        return pack(weight, m)

    monkeypatch.setattr(packed_gemm, "pack", counting_pack)
    _weight_cache.clear()
    # the kernels on at this CPU's level even under ONNXVIZ_NATIVE=off; one BLAS thread,
    # which the kernel serves (use_for)
    with threadpool_limits(1), _level(native.cpu_level()):
        session = Session(model)
        for _ in range(3):
            y = session.run({"v": v})["y"]
            np.testing.assert_allclose(y, expected, rtol=0, atol=1e-4)
    assert packs == [(48, 40)]


def _hardswish_model(rng: np.random.Generator) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x (1, 24, 14, 14): depthwise 3x3 -> 1x1 conv (bias) -> HardSwish -> depthwise 3x3,
    MobileNetV3's pattern: a channels-last chain whose 1x1 conv's HardSwish the GEMM
    applies as it stores."""
    c, m = 24, 40
    nodes = [
        helper.make_node(
            "Conv", ["x", "wd", "bd"], ["d"], kernel_shape=[3, 3], pads=[1] * 4, group=c
        ),  # fmt: skip
        helper.make_node("Conv", ["d", "w1", "b1"], ["c1"], kernel_shape=[1, 1]),
        helper.make_node("HardSwish", ["c1"], ["h1"]),
        helper.make_node("Conv", ["h1", "wd2"], ["y"], kernel_shape=[3, 3], group=m),
    ]
    inits = [
        _init("wd", rng.standard_normal((c, 1, 3, 3)) * 0.3),
        _init("bd", rng.standard_normal(c)),
        _init("w1", rng.standard_normal((m, c, 1, 1)) * 0.5),
        _init("b1", rng.standard_normal(m)),
        _init("wd2", rng.standard_normal((m, 1, 3, 3)) * 0.3),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "packed_gemm_hardswish",
        [helper.make_tensor_value_info("x", f, [1, c, 14, 14])],
        [helper.make_tensor_value_info("y", f, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, c, 14, 14)).astype(np.float32)}


def test_a_hardswish_runs_in_the_epilogue_and_gives_the_same_outputs(monkeypatch):
    _module()
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _hardswish_model(np.random.default_rng(21))
    theirs = ort.InferenceSession(model.SerializeToString()).run(["y"], feeds)[0]
    acts: list[int] = []
    right = packed_gemm.matmul_packed
    held = packed_gemm.held_pointwise

    def watch(*args: Any, **kw: Any) -> None:
        acts.append(kw.get("act", packed_gemm.ACT_NONE))
        right(*args, **kw)

    def watch_held(*args: Any) -> Any:
        acts.append(args[4][0])  # the held 1x1 conv's activation code
        return held(*args)

    with threadpool_limits(1):
        with _level(None):
            off = Session(model).run(feeds)["y"]
        scale = float(np.abs(theirs).max()) + 1.0
        for level in LEVELS:
            acts.clear()
            with _level(level):
                monkeypatch.setattr(packed_gemm, "matmul_packed", watch)
                monkeypatch.setattr(packed_gemm, "held_pointwise", watch_held)
                _weight_cache.clear()
                session = Session(model)
                on = session.run(feeds)["y"]
                # The runner's kept packed weight, through the chain's held call.
                again = session.run(feeds)["y"]
                monkeypatch.undo()
            # The first run's product, then the held call made for the next ones.
            assert acts == [packed_gemm.ACT_HARDSWISH] * 2, (level, acts)
            np.testing.assert_array_equal(again, on)
            np.testing.assert_allclose(on, theirs, rtol=0, atol=1e-5 * scale)
            np.testing.assert_allclose(on, off, rtol=0, atol=1e-5 * scale)
        assert_modes_agree(model, feeds)
        # The routing off: numpy's product and HardSwish, the same numbers.
        monkeypatch.setattr(packed_gemm, "ROUTED", False)
        acts.clear()
        monkeypatch.setattr(packed_gemm, "matmul_packed", watch)
        routed_off = Session(model).run(feeds)["y"]
        assert not acts
        np.testing.assert_allclose(routed_off, off, rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("rows", [1, 3, 9])
@pytest.mark.parametrize(
    "form",
    ["transB, C (N,)", "B, C (1, N)", "transB, no C", "alpha 0.5", "beta 2", "C (M, N)"],
)
def test_every_gemm_form_gives_its_definition_in_every_mode(rows: int, form: str) -> None:
    """A Gemm by a constant weight in the forms exporters write and the ones the held
    product leaves to the kernel (another alpha or beta, a C per row): the definition
    alpha A B' + beta C within the float32 bound, and the same in every run mode."""
    _module()
    rng = np.random.default_rng(rows + len(form))
    k, n = 96, 200
    trans = form.startswith("transB") or form in ("alpha 0.5", "beta 2", "C (M, N)")
    w = (rng.standard_normal((n, k) if trans else (k, n)) / 10).astype(np.float32)
    c_shape = {"B, C (1, N)": (1, n), "C (M, N)": (rows, n), "transB, no C": None}.get(form, (n,))
    attrs: dict[str, Any] = {"transB": int(trans)}
    if form == "alpha 0.5":
        attrs["alpha"] = 0.5
    if form == "beta 2":
        attrs["beta"] = 2.0
    inits = [numpy_helper.from_array(w, "w")]
    inputs = ["x", "w"]
    c = None
    if c_shape is not None:
        c = rng.standard_normal(c_shape).astype(np.float32)
        inits.append(numpy_helper.from_array(c, "c"))
        inputs.append("c")
    node = helper.make_node("Gemm", inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feeds = {"x": rng.standard_normal((rows, k)).astype(np.float32)}
    with threadpool_limits(1):
        session = Session(model)
        got = [session.run(feeds)["y"] for _ in range(3)]  # the held call from the 2nd
        assert_modes_agree(model, feeds)
    x64, w64 = feeds["x"].astype(np.float64), w.astype(np.float64)
    b64 = w64.T if trans else w64
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    exact = alpha * (x64 @ b64) + (0.0 if c is None else beta * c.astype(np.float64))
    scale = np.abs(alpha) * (np.abs(x64) @ np.abs(b64)) + (
        0.0 if c is None else np.abs(beta * c.astype(np.float64))
    )
    for y in got:
        assert y.shape == (rows, n)
        assert np.all(np.abs(y - exact) <= _gamma(k + 4) * scale), form


@pytest.mark.parametrize("rows", [1, 2, 5, 7, 8])
def test_a_classifier_on_a_few_rows_streams_its_weight_packed(monkeypatch, rows):
    """Gemm with transB (a torch Linear): on 2-7 rows OpenBLAS would pack the transposed
    weight on every call, so the kernel runs it with the weight packed once; one row and
    eight or more take MatMul's routes (packed_gemm.use_for: one row from AVX2 up, a
    classifier's head, in C through the node's held product).  The numbers are within
    the float32 bound of the product, in every run mode."""
    _module()
    rng = np.random.default_rng(rows)
    k, n = 576, 1000
    w = (rng.standard_normal((n, k)) / 24).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    graph = helper.make_graph(
        [node],
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feeds = {"x": rng.standard_normal((rows, k)).astype(np.float32)}
    with threadpool_limits(1), _counting(monkeypatch) as calls:
        got = Session(model).run(feeds)["y"]
        assert_modes_agree(model, feeds)
    with threadpool_limits(1):
        routed = native.level() is not None and (
            2 <= rows < packed_gemm.MIN_ROWS or packed_gemm.use_for(rows, k, n)
        )
    assert (calls["gemm"] > 0) == routed, calls
    x64 = feeds["x"].astype(np.float64)
    exact = x64 @ w.T.astype(np.float64) + bias
    scale = np.abs(x64) @ np.abs(w.T.astype(np.float64)) + np.abs(bias)
    assert np.all(np.abs(got - exact) <= _gamma(k + 3) * scale)
