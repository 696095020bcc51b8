"""Products of a few rows cut into column blocks (blas.few_rows_matmul): the blocks give
the plain product's numbers, on every kernel set, in the kernels that use them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxviz.runtime.kernels import blas, math_linalg, nn_rnn

pytestmark = pytest.mark.numeric

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture
def blocks() -> Iterator[None]:
    """Column blocks on, whatever kernel set this machine runs; automatic afterwards."""
    blas.set_split_few_rows(True)
    yield
    blas.set_split_few_rows(None)


def _exact_close(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    exact = a.astype(np.float64) @ b.astype(np.float64)
    tol = 8 * float(np.finfo(np.float32).eps) * a.shape[1]
    np.testing.assert_allclose(got, exact, rtol=tol, atol=tol)


@SETTINGS
@given(
    m=st.integers(2, 8),
    n=st.integers(64, 7812),
    extra_k=st.integers(0, 600),
    a_transposed=st.booleans(),
    b_wider=st.integers(0, 5),
    out_kind=st.sampled_from(["none", "contiguous", "inside_wider"]),
    seed=st.integers(0, 2**16),
)
def test_blocks_give_the_float64_product(
    m: int, n: int, extra_k: int, a_transposed: bool, b_wider: int, out_kind: str, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    k = 1_000_000 // (m * n) + 1 + extra_k  # above the limit: the blocks are used
    a = rng.standard_normal((m, k)).astype(np.float32)
    if a_transposed:
        a = np.ascontiguousarray(a.T).T
    # b may be a column slice of a wider matrix (rows contiguous, leading dimension > n).
    b = rng.standard_normal((k, n + b_wider)).astype(np.float32)[:, :n]
    wide = np.full((m, n + 4), np.nan, dtype=np.float32)  # blocks must overwrite, then add
    out = {
        "none": None,
        "contiguous": np.full((m, n), np.nan, np.float32),
        "inside_wider": wide[:, 2 : n + 2],
    }[out_kind]
    got = blas.few_rows_matmul(a, b, out, split=True)
    if out is not None:
        assert got is out
    _exact_close(got, a, b)
    if out_kind == "inside_wider":
        assert np.isnan(wide[:, :2]).all() and np.isnan(wide[:, n + 2 :]).all()


def test_blocks_are_used_only_where_they_pay(blocks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = blas.raw_gemm

    def counting(dtype: np.dtype) -> object:
        fn = real(dtype)

        def call(m: int, n: int, k: int, *rest: object) -> None:
            calls.append(k)
            fn(m, n, k, *rest)

        return call

    monkeypatch.setattr(blas, "raw_gemm", counting)
    rng = np.random.default_rng(3)

    def run(m: int, k: int, n: int, dtype: type = np.float32) -> list[int]:
        calls.clear()
        a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
        _exact_close(blas.few_rows_matmul(a, b), a, b)
        return list(calls)

    # An LSTM step (4 x 256 x 1024) and GPT-2's projections (8 rows): blocks of K of at
    # most 1e6 multiply-adds that cover K once.
    for m, k, n in ((4, 256, 1024), (8, 768, 2304), (8, 3072, 768)):
        depths = run(m, k, n)
        assert len(depths) > 1 and sum(depths) == k
        assert all(m * n * d <= 1_000_000 for d in depths)
    # One plain product: one row (numpy's gemv), 9 rows, under the limit, float64, and
    # a row of B so long that a block would hold fewer than 16 rows of it.
    for shape in ((1, 768, 3072), (9, 768, 3072), (8, 100, 1000), (8, 768, 8000)):
        assert run(*shape) == []
    assert run(4, 256, 1024, np.float64) == []


@SETTINGS
@given(
    batch=st.integers(2, 8),
    hidden=st.sampled_from([128, 256]),
    op=st.sampled_from(["LSTM", "GRU", "GRU_lbr"]),
    seed=st.integers(0, 2**16),
)
def test_recurrent_steps_match_the_plain_products(
    batch: int, hidden: int, op: str, seed: int
) -> None:
    # The step GEMM h @ R^T is [batch, hidden] x [hidden, gates*hidden]: over the limit
    # for hidden 256 (LSTM: 4 x 256 x 1024), under it for some of the 128 cases.
    rng = np.random.default_rng(seed)
    gates = 4 if op == "LSTM" else 3
    x = rng.standard_normal((5, batch, 32)).astype(np.float32)
    w = (rng.standard_normal((1, gates * hidden, 32)) * 0.2).astype(np.float32)
    r = (rng.standard_normal((1, gates * hidden, hidden)) * 0.1).astype(np.float32)
    b = (rng.standard_normal((1, 2 * gates * hidden)) * 0.1).astype(np.float32)
    h0 = rng.standard_normal((1, batch, hidden)).astype(np.float32)

    def run() -> list[np.ndarray]:
        if op == "LSTM":
            return list(nn_rnn.lstm(x, w, r, b, None, h0, hidden_size=hidden))
        lbr = int(op == "GRU_lbr")
        return list(nn_rnn.gru(x, w, r, b, None, h0, hidden_size=hidden, linear_before_reset=lbr))

    try:
        blas.set_split_few_rows(False)
        # The numpy loops' step products (the compiled loop has its own: it would make the
        # two runs one and the same).
        with mock.patch.object(nn_rnn, "_RECURRENT", None):
            plain = run()
            blas.set_split_few_rows(True)
            split = run()
    finally:
        blas.set_split_few_rows(None)
    for p, s in zip(plain, split, strict=True):
        np.testing.assert_allclose(s, p, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("rows", [2, 8])
def test_matmul_and_gemm_kernels_match_the_plain_products(rows: int) -> None:
    rng = np.random.default_rng(rows)
    x3 = rng.standard_normal((1, rows, 768)).astype(np.float32)
    w = rng.standard_normal((768, 1536)).astype(np.float32)
    c = rng.standard_normal(1536).astype(np.float32)
    try:
        blas.set_split_few_rows(False)
        plain = [
            math_linalg.matmul(x3, w),
            math_linalg.matmul(x3[0], w),
            math_linalg.gemm(x3[0], w, c, alpha=0.5),
        ]
        blas.set_split_few_rows(True)
        split = [
            math_linalg.matmul(x3, w),
            math_linalg.matmul(x3[0], w),
            math_linalg.gemm(x3[0], w, c, alpha=0.5),
        ]
    finally:
        blas.set_split_few_rows(None)
    for p, s in zip(plain, split, strict=True):
        assert s.shape == p.shape and s.dtype == p.dtype
        np.testing.assert_allclose(s, p, rtol=1e-4, atol=1e-4)


def test_blocks_follow_the_kernel_set_and_the_off_switch() -> None:
    # In a fresh process: on exactly when OpenBLAS runs a kernel set with a small-matrix
    # path, and off with ONNXVIZ_SPLIT_FEW_ROWS=0 whatever the kernel set.
    code = (
        "from onnxviz.runtime.kernels import blas\n"
        "print(blas.status()['core'], blas.splits_few_rows())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    core, on = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert (on == "True") == (core.lower() in {"skylakex", "cooperlake", "sapphirerapids"})
    env["ONNXVIZ_SPLIT_FEW_ROWS"] = "0"
    off = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert off == [core, "False"]


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize(("m", "k", "n"), [(4, 256, 1024), (8, 768, 2304), (3, 700, 900)])
def test_gemm_blocks_overwrite_or_accumulate(
    blocks: None, m: int, k: int, n: int, accumulate: bool
) -> None:
    # blas.gemm (the MatMul + bias fusion's product onto the bias) takes the blocks too.
    rng = np.random.default_rng(m * n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    start = rng.standard_normal((m, n)).astype(np.float32)
    out = start.copy() if accumulate else np.full((m, n), np.nan, np.float32)
    blas.gemm(a, b, out, accumulate=accumulate)
    exact = a.astype(np.float64) @ b.astype(np.float64) + (start if accumulate else 0)
    tol = 8 * float(np.finfo(np.float32).eps) * k
    np.testing.assert_allclose(out, exact, rtol=tol, atol=tol)


def test_fused_linear_layers_with_blocks_match_the_stepped_plain_run() -> None:
    # GPT-2's shape of work: [1, rows, K] @ W + bias twice, fused (MatMul + Add onto the
    # bias, in blocks) against the stepped run without fusions or blocks.
    from onnx import TensorProto, helper, numpy_helper

    from onnxviz.runtime.session import Session

    rng = np.random.default_rng(9)
    w1 = numpy_helper.from_array((rng.standard_normal((256, 1024)) * 0.05).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(1024).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(
        (rng.standard_normal((1024, 1024)) * 0.03).astype(np.float32), "w2"
    )
    b2 = numpy_helper.from_array(rng.standard_normal(1024).astype(np.float32), "b2")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Add", ["h", "b1"], ["hb"]),
            helper.make_node("MatMul", ["hb", "w2"], ["y0"]),
            helper.make_node("Add", ["b2", "y0"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "rows", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[w1, b1, w2, b2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for rows in (4, 8):
        x = rng.standard_normal((1, rows, 256)).astype(np.float32)
        try:
            blas.set_split_few_rows(False)
            plain = Session(model, fuse_ops=False, keep_intermediates=True).run({"x": x})["y"]
            blas.set_split_few_rows(True)
            fused = Session(model).run({"x": x})["y"]
        finally:
            blas.set_split_few_rows(None)
        np.testing.assert_allclose(fused, plain, rtol=2e-4, atol=2e-4)
