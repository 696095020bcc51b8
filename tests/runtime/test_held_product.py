"""The held product (native/_sgemm.c's `product`, kernels/packed_gemm.held_product): a
MatMul-like node's call by a constant weight packed once, run in C from the node loop.

* The calls it takes give the bits of the kernel's own route (`matmul_packed` by the same
  packed weight, bias in the epilogue), for 2-D and 3-D inputs, small products at any row
  count and larger ones from packed_gemm.MIN_ROWS rows, at every level.
* Every call it does not take goes to the fallback with the same arguments, and returns
  what the fallback returns: other operands (by identity), another dtype, a strided or
  1-D input, another K, rows the routing sends elsewhere (between the small products and
  MIN_ROWS; from MIN_ROWS on while OpenBLAS runs several threads), keywords, another
  level's panel width.
* Its results are fresh arrays nobody else holds; a wrong construction is a ValueError.
* In a model: small MatMul and MatMulNBits weights run it (counted) in unwatched runs,
  and the stepped run gives the same bits (differential.assert_modes_agree).
"""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import _weight_cache, packed_gemm
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled

from .differential import close, stepped_values

pytestmark = pytest.mark.numeric

LEVELS = native.levels()


def _module() -> Any:
    return compiled("sgemm", "the OpenBLAS paths run")


@contextmanager
def _level(mod: Any, level: int) -> Iterator[None]:
    with at_level("sgemm", level):
        mod.set_level(level)
        yield


class _Fallback:
    """A fallback that records its calls and returns a marker."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any, **kw: Any) -> str:
        self.calls.append(args + tuple(kw.items()))
        return "fallback"


def _held(mod: Any, k: int, n: int, *, bias: bool, seed: int) -> tuple[Any, Any, Any, Any]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32) if bias else None
    p = packed_gemm.pack(w, mod)
    fallback = _Fallback()
    return packed_gemm.held_product(mod, p, b, (w,), fallback), w, p, (b, fallback)


@pytest.mark.parametrize("level", LEVELS)
def test_the_calls_it_takes_give_the_kernels_bits(level):
    mod = _module()
    rng = np.random.default_rng(level)
    with _level(mod, level), threadpool_limits(1):
        # (k, n, shapes of A): small products at any row count, a larger weight from
        # MIN_ROWS rows on.
        for k, n, shapes in [
            (64, 128, [(1, 64), (4, 64), (1, 3, 64)]),
            (33, 70, [(2, 33), (14, 33), (2, 7, 33)]),
            (300, 200, [(8, 300), (2, 13, 300), (40, 300)]),
        ]:
            for bias in (False, True):
                held, w, p, (b, fallback) = _held(mod, k, n, bias=bias, seed=k + n)
                for shape in shapes:
                    a = rng.standard_normal(shape).astype(np.float32)
                    got = held(a, w)
                    assert not fallback.calls, (k, n, shape)
                    rows = a.reshape(-1, k)
                    want = np.empty((rows.shape[0], n), np.float32)
                    packed_gemm.matmul_packed(mod, rows, p, want, bias=b)
                    assert got.shape == shape[:-1] + (n,) and got.dtype == np.float32
                    np.testing.assert_array_equal(got.reshape(-1, n), want)
                    exact = a.astype(np.float64) @ w + (0 if b is None else b)
                    np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("level", LEVELS)
def test_a_strided_input_gives_the_bits_of_its_contiguous_copy(level):
    """A view (Transpose's, as a TorchScript attention's projection reads it; reversed;
    every other column) is copied in C order, as the kernel's own path does with
    np.ascontiguousarray: the same product, without the fallback."""
    mod = _module()
    rng = np.random.default_rng(level + 7)
    k, n = 32, 96
    with _level(mod, level), threadpool_limits(1):
        for bias in (False, True):
            held, w, _p, (_b, fallback) = _held(mod, k, n, bias=bias, seed=11)
            base = rng.standard_normal((7, 2, 2 * k)).astype(np.float32)
            views = [
                base[:, :, :k].transpose(1, 0, 2),  # rows of k contiguous floats, strided
                base[::-1, :, k:],  # negative strides
                base[:, :, ::2],  # every other float
                base[:, 0, ::2],  # 2-D
            ]
            for view in views:
                assert not view.flags.c_contiguous
                got = held(view, w)
                assert not fallback.calls
                want = held(np.ascontiguousarray(view), w)
                assert got.shape == view.shape[:-1] + (n,)
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["MatMul", "Gemm", "GemmT"])
def test_a_transposed_input_gives_the_stepped_bits_in_a_model(op):
    """Transpose -> MatMul / Gemm by a constant weight: the unwatched run's held product
    copies the view in C order, and the stepped run's kernel routes it the same way (its
    packed GEMM on the C-order copy), so the bits agree on every OpenBLAS core type."""
    rng = np.random.default_rng(31)
    k, n = 24, 40
    w = rng.standard_normal((n, k) if op == "GemmT" else (k, n)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    if op == "MatMul":
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        shape = [7, 2, k]
    else:
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "c"))
        node = helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=int(op == "GemmT"))
        shape = [14, k]
    nodes = [helper.make_node("Transpose", ["xt"], ["x"]), node]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("xt", TensorProto.FLOAT, shape[::-1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"xt": rng.standard_normal(shape[::-1]).astype(np.float32)}
    with threadpool_limits(1):
        want = stepped_values(model, feeds)["y"]
        session = Session(model)
        for _ in range(3):
            np.testing.assert_array_equal(session.run(feeds)["y"], want)


def test_every_call_it_does_not_take_goes_to_the_fallback():
    mod = _module()
    rng = np.random.default_rng(3)
    # A weight whose small products end at 2 or 3 rows at this level (small_macs), so
    # that 5 rows fall between them and MIN_ROWS.
    k, n = next((s, s) for s in (96, 192, 200) if 2 <= packed_gemm.small_rows(s, s) <= 3)
    assert packed_gemm.small_rows(k, n) < 5 < packed_gemm.MIN_ROWS
    held, w, _p, (_b, fallback) = _held(mod, k, n, bias=False, seed=4)
    a = rng.standard_normal((2, k)).astype(np.float32)

    class Sub(np.ndarray):
        pass

    others: list[tuple[Any, ...]] = [
        (a, w.copy()),  # another weight, equal but not the same object
        (a.astype(np.float64), w),
        (a[0], w),  # 1-D
        (rng.standard_normal((2, k + 1)).astype(np.float32), w),
        (a.tolist(), w),
        (a.view(Sub), w),
        (a,),
        (a, w, None),
        (np.empty((0, k), np.float32), w),
        (a.astype(np.float16), w),
        (a.astype(">f4"), w),
    ]
    for args in others:
        assert held(*args) == "fallback"
        got = fallback.calls.pop()
        assert len(got) == len(args) and all(x is y for x, y in zip(got, args))
    assert held(a, w=w) == "fallback"
    got = fallback.calls.pop()
    assert got[0] is a and got[1][0] == "w" and got[1][1] is w
    # Between the small products and MIN_ROWS: the kernel from AVX2 up
    # (test_few_rows_by_any_weight_...), the fallback below.
    five = rng.standard_normal((5, k)).astype(np.float32)
    with threadpool_limits(1):
        if packed_gemm.few_rows():
            assert held(five, w).shape == (5, n)
        else:
            assert held(five, w) == "fallback" and fallback.calls.pop()[0] is five
    # Many rows while OpenBLAS runs several threads: its product, not the kernel's.
    many = rng.standard_normal((16, k)).astype(np.float32)
    with threadpool_limits(2):
        assert held(five, w) == "fallback" and fallback.calls.pop()[0] is five
        assert held(many, w) == "fallback"
        assert fallback.calls.pop()[0] is many
        assert held(a, w).shape == (2, n) and not fallback.calls  # small: any thread count
    with threadpool_limits(1):
        assert held(many, w).shape == (16, n)
    assert not fallback.calls


def test_another_levels_panel_width_goes_to_the_fallback():
    mod = _module()
    widths = {lvl: _width(mod, lvl) for lvl in LEVELS}
    if len(set(widths.values())) < 2:
        pytest.skip("this CPU has one panel width")  # an AVX-512-less CPU: all 16
    top = max(LEVELS)
    with _level(mod, top):
        held, w, _p, (_b, fallback) = _held(mod, 64, 64, bias=False, seed=5)
    a = np.ones((2, 64), np.float32)
    low = min(lvl for lvl in LEVELS if widths[lvl] != widths[top])
    with _level(mod, low):
        assert held(a, w) == "fallback"
    with _level(mod, top):
        np.testing.assert_allclose(held(a, w), a @ w, rtol=1e-5, atol=1e-5)


def _width(mod: Any, level: int) -> int:
    with _level(mod, level):
        return int(mod.panel_width())


def test_results_are_fresh_arrays_and_nothing_leaks():
    mod = _module()
    held, w, _p, _ = _held(mod, 32, 48, bias=True, seed=6)
    a = np.ones((3, 32), np.float32)
    first = held(a, w)
    second = held(a, w)
    assert first is not second and not np.shares_memory(first, second)
    assert first.flags.writeable and first.flags.owndata
    ref = weakref.ref(first)
    del first
    gc.collect()
    assert ref() is None
    before = (sys.getrefcount(a), sys.getrefcount(w))
    for _ in range(100):
        held(a, w)
    assert (sys.getrefcount(a), sys.getrefcount(w)) == before


def test_a_wrong_construction_is_a_value_error():
    mod = _module()
    w = np.ones((8, 8), np.float32)
    p = packed_gemm.pack(w, mod)
    base = [p.data, p.offset, 8, 8, p.nr, None, 1, 8, False, 0, (), print, np.ndarray, np.empty]
    dt = np.dtype(np.float32)
    for i, bad in [(2, 0), (3, -1), (4, 24), (1, 64), (5, np.ones(7, np.float32)), (11, 3)]:
        args = list(base)
        args[i] = bad
        with pytest.raises((ValueError, TypeError)):
            mod.product(*args, dt)
    short = bytearray(16)
    with pytest.raises(ValueError):
        mod.product(short, 0, *base[2:], dt)


def _small_model(rng: np.random.Generator) -> tuple[Any, dict[str, np.ndarray]]:
    K, N, block = 64, 48, 32
    kb = K // block
    inits = [
        numpy_helper.from_array(rng.standard_normal((K, 40)).astype(np.float32), "wm"),
        numpy_helper.from_array(rng.integers(0, 256, (N, kb, block // 2), dtype=np.uint8), "qb"),
        numpy_helper.from_array((rng.standard_normal((N, kb)) * 0.05).astype(np.float32), "qs"),
        numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "qbias"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "wm"], ["y1"]),
        helper.make_node(
            "MatMulNBits",
            ["x", "qb", "qs", "", "", "qbias"],
            ["y2"],
            domain="com.microsoft",
            K=K,
            N=N,
            block_size=block,
            bits=4,
        ),  # fmt: skip
        helper.make_node("Relu", ["y2"], ["y3"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", f, [1, None, K])],
        [helper.make_tensor_value_info(o, f, None) for o in ("y1", "y3")],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    return model, {"x": rng.standard_normal((1, 3, K)).astype(np.float32)}


def test_small_weights_run_it_in_a_model_with_the_stepped_bits(monkeypatch):
    mod = _module()
    model, feeds = _small_model(np.random.default_rng(7))
    made: list[Any] = []
    real = packed_gemm.held_product

    def counting(*args: Any) -> Any:
        product = real(*args)
        made.append(product)
        return product

    for level in LEVELS:  # (whatever ONNXVIZ_NATIVE says: each level set directly)
        with _level(mod, level):
            monkeypatch.setattr(packed_gemm, "held_product", counting)
            made.clear()
            _weight_cache.clear()
            session = Session(model)
            session.run(feeds)
            assert len(made) == 2  # the MatMul's and the MatMulNBits' calls
            calls = {pn.op_type: pn.call for pn in run_nodes(session.plan)}
            assert calls["MatMul"] in made and calls["MatMulNBits"] in made
            monkeypatch.undo()
            stepped = stepped_values(model, feeds)
            for _ in range(2):
                got = session.run(feeds)
                for name in ("y1", "y3"):
                    np.testing.assert_array_equal(got[name], stepped[name])
    _weight_cache.clear()


def test_one_row_by_any_weight_runs_the_kernel_from_avx2_on_one_thread():
    """A decode step's product (one row, a weight past the small products): the kernel's
    one-row tile from AVX2 up while OpenBLAS runs on one thread (packed_gemm.one_row),
    else (the plain C level, more threads) the fallback (OpenBLAS's GEMV)."""
    mod = _module()
    rng = np.random.default_rng(12)
    k, n = 300, 500  # 150,000 multiply-adds: past small_macs() at every level
    for level in LEVELS:
        with _level(mod, level):
            assert packed_gemm.small_rows(k, n) == 0
            held, w, p, (b, fallback) = _held(mod, k, n, bias=True, seed=level)
            a = rng.standard_normal((1, 1, k)).astype(np.float32)
            with threadpool_limits(1):
                got = held(a, w)
                assert packed_gemm.use_for(1, k, n) == (level >= native.AVX2)
            if level >= native.AVX2:
                assert not fallback.calls
                want = np.empty((1, n), np.float32)
                packed_gemm.matmul_packed(mod, a.reshape(1, k), p, want, bias=b)
                np.testing.assert_array_equal(got.reshape(1, n), want)
                with threadpool_limits(2):
                    assert held(a, w) == "fallback" and not packed_gemm.use_for(1, k, n)
            else:
                assert got == "fallback"


@pytest.mark.parametrize("transposed", [False, True])
def test_few_rows_by_any_weight_run_the_kernel_from_avx2_on_one_thread(transposed):
    """2 to MIN_ROWS - 1 rows by a weight past the small products (an unrolled LSTM
    cell's 4 x 128 -> 512 step, a few tokens): the kernel from AVX2 up while OpenBLAS runs
    on one thread (packed_gemm.few_rows: OpenBLAS packs the weight on every call); at the
    plain C level only a transposed weight (a Gemm's transB, packed_gemm.use_for_few_rows),
    else the fallback.  The bits of the kernel's own call."""
    mod = _module()
    rng = np.random.default_rng(13)
    k, n = 256, 512  # 2 rows: 262,144 multiply-adds, past small_macs() at every level
    for level in LEVELS:
        with _level(mod, level):
            w = rng.standard_normal((k, n)).astype(np.float32)
            b = rng.standard_normal(n).astype(np.float32)
            p = packed_gemm.pack(w, mod)
            fallback = _Fallback()
            held = packed_gemm.held_product(mod, p, b, (w,), fallback, transposed=transposed)
            takes = level >= native.AVX2 or transposed
            for rows in range(2, packed_gemm.MIN_ROWS):
                assert rows > packed_gemm.small_rows(k, n)
                a = rng.standard_normal((rows, k)).astype(np.float32)
                with threadpool_limits(1):
                    got = held(a, w)
                    assert packed_gemm.use_for(rows, k, n) == (level >= native.AVX2)
                    assert packed_gemm.use_for_few_rows(rows)
                if not takes:
                    assert got == "fallback" and fallback.calls.pop()[0] is a
                    continue
                assert not fallback.calls
                want = np.empty((rows, n), np.float32)
                packed_gemm.matmul_packed(mod, a, p, want, bias=b)
                np.testing.assert_array_equal(got, want)
                with threadpool_limits(2):
                    assert held(a, w) == "fallback" and fallback.calls.pop()[0] is a


def test_an_unrolled_lstm_cells_few_row_products_run_held_with_the_stepped_numbers(
    monkeypatch,
):
    """A Linear layer's Gemm (transB, bias) and a MatMul on 4 rows by weights past the
    small products, as torch writes an LSTMCell out step by step: unwatched, from AVX2
    up, both run as held products (counted: no call reaches the kernels' Python
    functions), and give the stepped run's numbers."""
    _module()
    if not packed_gemm.few_rows():
        pytest.skip("few rows stay with OpenBLAS below AVX2")
    rng = np.random.default_rng(14)
    k, n = 128, 512
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.1  # [N, K]: transB
    c = rng.standard_normal(n).astype(np.float32)
    m = rng.standard_normal((n, k)).astype(np.float32) * 0.1
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w", "c"], ["g"], transB=1, name="gemm"),
            helper.make_node("MatMul", ["g", "m"], ["y"], name="matmul"),
        ],
        "cell",
        [helper.make_tensor_value_info("x", f, [4, k])],
        [helper.make_tensor_value_info("y", f, None)],
        initializer=[
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(c, "c"),
            numpy_helper.from_array(m, "m"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((4, k)).astype(np.float32)
    from onnxviz.runtime.kernels import math_linalg

    calls: list[str] = []
    for name in ("gemm", "matmul"):
        original = getattr(math_linalg, name)

        def counted(*args: Any, _name: str = name, _fn: Any = original, **kw: Any) -> Any:
            calls.append(_name)
            return _fn(*args, **kw)

        monkeypatch.setattr(math_linalg, name, counted)
    with threadpool_limits(1):
        sess = Session(model)
        got = sess.run({"x": x})["y"]
        calls.clear()
        got = sess.run({"x": x})["y"]
        assert not calls
        want = stepped_values(model, {"x": x})["y"]
    close(got, want, "y")
    exact = (x.astype(np.float64) @ w.T.astype(np.float64) + c) @ m.astype(np.float64)
    np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-3)


def test_a_deep_projection_runs_the_kernel_from_avx2_with_the_stepped_numbers(monkeypatch):
    """A transformer's projection (64 tokens by a 768 x 200 weight plus its bias: 48
    rows or more by K >= 576) runs the kernel from AVX2 up on one thread, where it beats
    OpenBLAS's product and the bias pass; at the generic level OpenBLAS's.  Unwatched
    runs give the stepped run's numbers either way (within float32 rounding: the stepped
    MatMul may run another product)."""
    mod = _module()
    rng = np.random.default_rng(31)
    k, n, rows = 768, 200, 64
    inits = [
        numpy_helper.from_array((rng.standard_normal((k, n)) * 0.05).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["y"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "projection",
        [helper.make_tensor_value_info("x", f, [1, rows, k])],
        [helper.make_tensor_value_info("y", f, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, rows, k)).astype(np.float32)}
    real_product, real_held = packed_gemm.matmul_packed, packed_gemm.held_product
    calls: list[str] = []

    def product(*args: Any, **kw: Any) -> None:
        calls.append("product")
        real_product(*args, **kw)

    def held(*args: Any) -> Any:
        made = real_held(*args)

        def call(*ins: Any) -> Any:
            calls.append("held")  # the held product runs the kernel's gemm in C
            return made(*ins)

        return call

    for level in sorted({*LEVELS, native.GENERIC}):
        calls.clear()
        with _level(mod, level), threadpool_limits(1):
            assert packed_gemm.use_for(rows, k, n) == (level >= native.AVX2)
            monkeypatch.setattr(packed_gemm, "matmul_packed", product)
            monkeypatch.setattr(packed_gemm, "held_product", held)
            _weight_cache.clear()
            session = Session(model)
            outs = [session.run(feeds)["y"] for _ in range(3)]
            monkeypatch.undo()
            stepped = stepped_values(model, feeds)["y"]
            for i, got in enumerate(outs):
                close(got, stepped, f"level {level}, unwatched run {i}")
                np.testing.assert_array_equal(got, outs[0])
            # The kernel's products (direct or held) from AVX2 up; none at the generic level.
            assert bool(calls) == (level >= native.AVX2), (level, calls)
    _weight_cache.clear()


def test_a_weight_the_cache_will_not_keep_is_never_packed_per_call(monkeypatch):
    """packed_gemm.packed gives only forms the weight cache keeps: past its bound the
    products run OpenBLAS (packing a decode step's weight on every call would cost more
    than the product)."""
    from onnxviz.runtime.kernels import _weight_cache as wc
    from onnxviz.runtime.kernels.math_linalg import matmul

    mod = _module()
    rng = np.random.default_rng(13)
    w = rng.standard_normal((64, 96)).astype(np.float32)
    w.flags.writeable = False
    wc.clear()
    monkeypatch.setattr(wc, "CAP_BYTES", 1024)
    assert packed_gemm.packed(w, mod) is None
    a = rng.standard_normal((20, 64)).astype(np.float32)
    np.testing.assert_allclose(matmul(a, w), a @ w, rtol=1e-5, atol=1e-5)
    assert wc.stored_bytes() == 0
    monkeypatch.undo()
    assert packed_gemm.packed(w, mod) is not None and wc.stored_bytes() > 0
    wc.clear()


@pytest.mark.parametrize("level", [0, 1, 2, 3], ids=["generic", "avx2", "avx512", "vnni"])
def test_at_the_generic_level_many_rows_by_a_deep_weight_go_to_openblas(level: int) -> None:
    """The routing only (no product runs, so any level can be asked on any CPU): at the
    generic level a product of 48 or more rows by a weight of K >= 576 runs OpenBLAS
    (its SIMD tiles beat plain C), fewer rows or a shallower weight the kernel
    (OpenBLAS would pack the weight on every call, or the conv's epilogue pays); from
    AVX2 up the kernel takes them all (it beats OpenBLAS's product and bias there)."""
    with at_level("sgemm", level), threadpool_limits(1):
        simd = level >= native.AVX2
        assert packed_gemm.use_for(128, 768, 768) == simd  # BERT-base's projections
        assert packed_gemm.use_for(196, 1024, 256) == simd  # a ResNet-50 1x1
        assert packed_gemm.use_for(47, 768, 768)  # a few tokens
        assert packed_gemm.use_for(3136, 512, 64)  # a shallow 1x1 conv
