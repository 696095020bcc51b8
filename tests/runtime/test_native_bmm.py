"""The batched product of small matrices (runtime/native/_bmm.c) and the MatMul route to
it (kernels/math_linalg.small_batched): every output one chain of fused multiply-adds in
k order, so the same bits at every level this CPU has, within K + 1 roundings of the
float64 product; a b whose rows are strided (K^T as a view) gives the bits of its
contiguous copy; an exported attention runs it in both modes with the stepped bits.
Wrong buffers raise ValueError."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import math_linalg
from tests.runtime.differential import assert_stepped_bits
from tests.runtime.native_modules import compiled

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
U = 2.0**-24


def _module() -> Any:
    return compiled("bmm", "MatMul runs numpy's product")


def _within_bound(y: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    k = a.shape[-1]
    bound = (k + 1) * U * (np.abs(a64) @ np.abs(b64)) * 1.01 + 1e-38
    assert np.all(np.abs(y.astype(np.float64) - a64 @ b64) <= bound)


@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(
    batch=st.sampled_from([(3,), (1, 1), (2, 4), (1, 12), (3, 2)]),
    m=st.integers(1, 19),
    k=st.integers(1, 40),
    n=st.integers(1, 40),
    b_layout=st.sampled_from(["c", "transposed", "sliced"]),
    a_layout=st.sampled_from(["c", "permuted"]),
    seed=st.integers(0, 2**16),
)
def test_random_products_have_the_same_bits_at_every_level(
    batch, m, k, n, b_layout, a_layout, seed
) -> None:
    module = _module()
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((*batch, m, k)).astype(np.float32)
    if a_layout == "permuted" and len(batch) == 2:  # (B, H, S, D) as a view of (B, S, H, D)
        a = np.ascontiguousarray(a.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    b = rng.standard_normal((*batch, k, n)).astype(np.float32)
    if b_layout == "transposed":
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2)).swapaxes(-1, -2)
    elif b_layout == "sliced":
        b = np.repeat(b, 2, axis=-1)[..., ::2]
    want = None
    for level in LEVELS:
        module.set_level(level)
        out = np.full((*batch, m, n), 7.0, np.float32)
        module.bmm(a, b, out)
        if want is None:
            want = out
            _within_bound(out, a, b)
            dense = np.empty_like(out)
            module.bmm(np.ascontiguousarray(a), np.ascontiguousarray(b), dense)
            np.testing.assert_array_equal(dense.view(np.int32), out.view(np.int32))
        np.testing.assert_array_equal(out.view(np.int32), want.view(np.int32), f"level {level}")
    module.set_level(native.cpu_level())


def test_wrong_buffers_raise_value_error() -> None:
    module = _module()
    a = np.zeros((2, 3, 4), np.float32)
    b = np.zeros((2, 4, 5), np.float32)
    for args in (
        (a, b, np.zeros((2, 3, 4), np.float32)),  # out of the wrong size
        (a, np.zeros((2, 5, 5), np.float32), np.zeros((2, 3, 5), np.float32)),  # depths differ
        (a, np.zeros((3, 4, 5), np.float32), np.zeros((3, 3, 5), np.float32)),  # batches differ
        (a.astype(np.float64), b, np.zeros((2, 3, 5), np.float32)),
        (a, b, np.zeros((2, 5, 3), np.float32).transpose(0, 2, 1)),  # out not C-contiguous
        (a[0], b[0], np.zeros((3, 5), np.float32)),  # rank 2
        (np.zeros((1, 2, 300), np.float32), np.zeros((1, 300, 2), np.float32),
         np.zeros((1, 2, 2), np.float32)),  # depth beyond 256
    ):  # fmt: skip
        with pytest.raises((ValueError, BufferError)):
            module.bmm(*args)


def test_product_is_bmm_and_declines_what_it_does_not_take() -> None:
    """`product` (the route's one call) gives `bmm`'s bits in a new C-contiguous array,
    and None, with no error, for what it does not take."""
    module = _module()
    module.setup(np.empty, np.dtype(np.float32))
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 2, 5, 6)).astype(np.float32)
    b = rng.standard_normal((3, 2, 9, 6)).astype(np.float32).swapaxes(-1, -2)
    got = module.product(a, b)
    want = np.empty((3, 2, 5, 9), np.float32)
    module.bmm(a, b, want)
    assert got.flags.c_contiguous and got.dtype == np.float32 and got.shape == (3, 2, 5, 9)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
    big = np.zeros((1, 2, 64, 64), np.float32)
    for args in (
        (a[0, 0], b[0, 0]),  # rank 2
        (a.astype(np.float64), b),
        (a, b[:2]),  # batches differ
        (a, b.swapaxes(-1, -2)),  # depths differ
        (big, big),  # 256K multiply-adds a matrix: BLAS's
        (np.zeros((1, 1, 2, 64), np.float32), np.zeros((1, 1, 32, 64), np.float32).swapaxes(-1, -2)),
        ([[1.0]], [[1.0]]),  # not buffers of floats
        (a, b[None]),  # ranks differ
    ):  # fmt: skip
        assert module.product(*args) is None


def test_matmul_routes_small_batches_only() -> None:
    _module()
    rng = np.random.default_rng(3)
    small = rng.standard_normal((2, 4, 7, 8)).astype(np.float32)
    kt = rng.standard_normal((2, 4, 7, 8)).astype(np.float32).swapaxes(-1, -2)
    if native.level() is None:  # kernels off: numpy's product
        assert math_linalg.small_batched(small, kt) is None
        return
    assert math_linalg.small_batched(small, kt) is not None
    got = math_linalg.matmul(small, kt)
    np.testing.assert_array_equal(got, math_linalg.small_batched(small, kt))
    big = rng.standard_normal((1, 12, 128, 64)).astype(np.float32)
    assert math_linalg.small_batched(big, big.swapaxes(-1, -2)) is None  # BLAS's
    assert math_linalg.small_batched(small, small[0]) is None  # a broadcast batch
    assert math_linalg.small_batched(small.astype(np.float64), kt) is None


def _attention() -> tuple[Any, dict[str, np.ndarray]]:
    """Q K^T (K^T as Transpose's view), softmax, P V, over 2 x 4 heads of 7 tokens."""
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "attention",
        [helper.make_tensor_value_info(x, f, [2, 4, 7, 8]) for x in "qkv"],
        [helper.make_tensor_value_info("y", f, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(4)
    return model, {x: rng.standard_normal((2, 4, 7, 8)).astype(np.float32) for x in "qkv"}


def test_an_exported_attention_gives_the_stepped_bits() -> None:
    _module()
    model, feeds = _attention()
    _, got = assert_stepped_bits(model, feeds, runs=3)
    q, k, v = (feeds[x].astype(np.float64) for x in "qkv")
    s = q @ k.swapaxes(-1, -2)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(got["y"], p @ v, rtol=1e-5, atol=1e-6)
