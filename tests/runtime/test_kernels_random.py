"""Random kernels: values cannot match other generators, so the tests check shapes,
dtypes, ranges, seed determinism and distribution moments."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from tests.runtime.datakernels_helpers import RANDOM_OPS, case_params, run_ours
from tests.runtime.nodecases import run_graph_simply, to_value

KNOWN_FAILURES: dict[str, str] = {}


@pytest.mark.parametrize("case", case_params(RANDOM_OPS, KNOWN_FAILURES))
def test_node_case(case: object) -> None:
    """Random draws cannot equal the reference's: the graph must run and give outputs of
    the expected dtype and shape; Bernoulli outputs must be 0/1 (the cases use p in (0,1))."""
    for inputs, expected in case.data_sets:
        actual = run_graph_simply(case.model, list(inputs))
        for e, a in zip(expected, actual):
            e = to_value(e)
            assert a.dtype == e.dtype and a.shape == e.shape
            if "bernoulli" in case.name:
                assert set(np.unique(a.astype(np.float64)).tolist()) <= {0.0, 1.0}


def test_normal_shape_dtype_moments_and_seed() -> None:
    (x,) = run_ours("RandomNormal", [], 22, shape=[200, 100], mean=2.0, scale=3.0)
    assert x.shape == (200, 100) and x.dtype == np.float32
    assert abs(x.mean() - 2.0) < 0.1 and abs(x.std() - 3.0) < 0.1
    a = run_ours("RandomNormal", [], 1, shape=[5], seed=3.0, rng=np.random.default_rng(1))[0]
    b = run_ours("RandomNormal", [], 1, shape=[5], seed=3.0, rng=np.random.default_rng(2))[0]
    c = run_ours("RandomNormal", [], 1, shape=[5], seed=4.0)[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    (h,) = run_ours("RandomNormal", [], 22, shape=[3], dtype=TensorProto.BFLOAT16)
    assert h.dtype == ml_dtypes.bfloat16


def test_session_generator_is_used_without_seed() -> None:
    a = run_ours("RandomUniform", [], 22, shape=[4], rng=np.random.default_rng(5))[0]
    b = run_ours("RandomUniform", [], 22, shape=[4], rng=np.random.default_rng(5))[0]
    np.testing.assert_array_equal(a, b)


def test_uniform_like_range_and_dtype() -> None:
    like = np.zeros((300, 50), np.float16)
    (u,) = run_ours("RandomUniformLike", [like], 22, low=-2.0, high=6.0)
    assert u.dtype == np.float16 and u.shape == like.shape
    assert u.min() >= -2.0 and u.max() < 6.0 and abs(float(u.mean()) - 2.0) < 0.1
    (d,) = run_ours("RandomUniformLike", [like], 1, dtype=TensorProto.DOUBLE)
    assert d.dtype == np.float64 and d.min() >= 0 and d.max() < 1
    (n,) = run_ours("RandomNormalLike", [like], 22, dtype=TensorProto.FLOAT)
    assert n.dtype == np.float32 and n.shape == like.shape


def test_bernoulli_rate_and_dtype() -> None:
    p = np.full((100, 100), 0.3, np.float32)
    p[:, :10] = 0.0
    p[:, -10:] = 1.0
    (b,) = run_ours("Bernoulli", [p], 15, seed=1.0)
    assert b.dtype == np.float32 and set(np.unique(b)) <= {0.0, 1.0}
    assert not b[:, :10].any() and b[:, -10:].all()
    assert abs(b[:, 10:-10].mean() - 0.3) < 0.02
    (i,) = run_ours("Bernoulli", [p], 22, dtype=TensorProto.INT32)
    assert i.dtype == np.int32


def test_multinomial_frequencies() -> None:
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]])
    logits = np.log(np.maximum(probs, 1e-30)).astype(np.float32)
    (s,) = run_ours("Multinomial", [logits], 7, sample_size=20000, seed=2.0)
    assert s.dtype == np.int32 and s.shape == (2, 20000)
    for row, p in zip(s, probs):
        freq = np.bincount(row, minlength=3) / row.size
        np.testing.assert_allclose(freq, p, atol=0.015)
    (s64,) = run_ours("Multinomial", [logits], 22, dtype=TensorProto.INT64)
    assert s64.dtype == np.int64 and s64.shape == (2, 1)


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT])
@pytest.mark.parametrize("high", [1.0, 0.0, -3.0])
def test_uniform_never_reaches_high_after_rounding(dtype: int, high: float) -> None:
    # Draws within half an ulp of ``high`` round up to it in narrow types; the kernel
    # must keep the interval half-open.
    (u,) = run_ours("RandomUniform", [], 22, shape=[20000], dtype=dtype, low=high - 0.01, high=high)
    assert float(u.astype(np.float32).max()) < high
