"""Direct BLAS products (kernels.blas) and the conv paths built on them."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from onnxviz.runtime.kernels import blas
from onnxviz.runtime.kernels.nn_conv import ConvWeight, conv

RNG = np.random.default_rng(21)


def _rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def test_numpy_bundled_openblas_is_used_directly() -> None:
    config = str(np.show_config(mode="dicts")).lower()  # type: ignore[func-returns-value]
    if "openblas" not in config:
        pytest.xfail("this numpy is not built on OpenBLAS; products go through numpy")
    assert blas.available()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_matches_numpy_for_plain_transposed_and_strided_operands(dtype: type) -> None:
    a, b = _rand(37, 21, dtype=dtype), _rand(21, 45, dtype=dtype)
    out = np.empty((37, 45), dtype=dtype)
    blas.gemm(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    # Transposed views (F-order) and a column block of a wider output.
    at, bt = np.asfortranarray(a), np.asfortranarray(b)
    wide = np.zeros((37, 60), dtype=dtype)
    blas.gemm(at, bt, wide[:, 10:55])
    np.testing.assert_allclose(wide[:, 10:55], a @ b, rtol=1e-5, atol=1e-5)
    assert not wide[:, :10].any() and not wide[:, 55:].any()
    # Row slices of a bigger matrix keep their leading dimension.
    big = _rand(50, 80, dtype=dtype)
    blas.gemm(big[3:40, 5:26], b, out)
    np.testing.assert_allclose(out, big[3:40, 5:26] @ b, rtol=1e-5, atol=1e-5)


def test_gemm_accumulates_onto_the_output() -> None:
    a, b = _rand(8, 5), _rand(5, 9)
    out = np.full((8, 9), 2.5, np.float32)
    blas.gemm(a, b, out, accumulate=True)
    np.testing.assert_allclose(out, a @ b + 2.5, rtol=1e-5, atol=1e-5)


def test_views_blas_cannot_read_fall_back_to_numpy() -> None:
    a = _rand(12, 20)[:, ::2]  # inner stride 2
    b = _rand(10, 7)[::-1]  # negative row stride
    out = np.ones((12, 7), np.float32)
    blas.gemm(a, b, out, accumulate=True)
    np.testing.assert_allclose(out, a @ b + 1, rtol=1e-5, atol=1e-5)
    mixed = np.empty((12, 7), np.float64)
    blas.gemm(a, b, mixed)  # dtypes differ: numpy casts
    np.testing.assert_allclose(mixed, a @ b, rtol=1e-5, atol=1e-5)


def test_gemm_rejects_shapes_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        blas.gemm(_rand(3, 4), _rand(5, 2), np.empty((3, 2), np.float32))


CONV_CASES = [
    ((1, 16, 34, 34), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 16, 48, 50), (8, 16, 3, 3), {"strides": [2, 2], "pads": [1] * 4}),
    ((2, 32, 20, 20), (16, 32, 1, 1), {}),
    ((1, 24, 9, 9), (16, 24, 3, 3), {"pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("shape_x, shape_w, attrs", CONV_CASES)
def test_wrapped_conv_weight_gives_the_plain_result(
    shape_x: tuple[int, ...], shape_w: tuple[int, ...], attrs: dict[str, list[int]]
) -> None:
    x, w, b = _rand(*shape_x), _rand(*shape_w), _rand(shape_w[0])
    plain = conv(x, w, b, **attrs)  # type: ignore[arg-type]
    packed = ConvWeight(w)
    for _ in range(2):  # the repacked forms are made on the first call, then reused
        np.testing.assert_allclose(
            conv(x, packed, b, **attrs),  # type: ignore[arg-type]
            plain,
            rtol=1e-5,
            atol=1e-4,
        )
    # Weight in float64 against float32 data: the wrapper's forms are not used.
    w64 = ConvWeight(w.astype(np.float64))
    np.testing.assert_allclose(
        conv(x, w64, b, **attrs),
        plain,
        rtol=1e-5,
        atol=1e-4,  # type: ignore[arg-type]
    )


def test_conv_without_direct_blas_gives_the_same_numbers() -> None:
    code = (
        "import numpy as np\n"
        "from onnxviz.runtime.kernels import blas\n"
        "from onnxviz.runtime.kernels.nn_conv import conv\n"
        "assert not blas.available()\n"
        "r = np.random.default_rng(3)\n"
        "x = r.standard_normal((1, 16, 34, 34)).astype(np.float32)\n"
        "w = r.standard_normal((24, 16, 3, 3)).astype(np.float32)\n"
        "b = r.standard_normal(24).astype(np.float32)\n"
        "np.save(__import__('sys').argv[1], conv(x, w, b, pads=[1, 1, 1, 1]))\n"
    )
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"onnxviz-conv-{os.getpid()}.npy")
    env = dict(os.environ, ONNXVIZ_DIRECT_BLAS="0")
    subprocess.run([sys.executable, "-c", code, out], check=True, env=env, timeout=120)
    try:
        fallback = np.load(out)
    finally:
        os.unlink(out)
    r = np.random.default_rng(3)
    x = r.standard_normal((1, 16, 34, 34)).astype(np.float32)
    w = r.standard_normal((24, 16, 3, 3)).astype(np.float32)
    b = r.standard_normal(24).astype(np.float32)
    np.testing.assert_allclose(fallback, conv(x, w, b, pads=[1, 1, 1, 1]), rtol=1e-5, atol=1e-4)


def test_raw_gemm_reads_and_writes_the_addressed_blocks() -> None:
    raw = blas.raw_gemm(np.dtype(np.float32))
    if raw is None:
        pytest.xfail("no direct BLAS on this numpy build")
    a, b = _rand(6, 10), _rand(30, 12)
    out = np.zeros((8, 9), np.float32)
    item = 4

    def block_product(accumulate: bool) -> None:
        """out[1:7, 2:7] (+)= a[:, 2:10] @ b[3:11, 4:9], blocks of bigger buffers by address."""
        a_at = a.ctypes.data + 2 * item
        b_at = b.ctypes.data + (3 * 12 + 4) * item
        out_at = out.ctypes.data + (1 * 9 + 2) * item
        raw(6, 5, 8, a_at, 10, b_at, 12, out_at, 9, accumulate)

    block_product(False)
    want = np.zeros((8, 9), np.float32)
    want[1:7, 2:7] = a[:, 2:10] @ b[3:11, 4:9]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    block_product(True)
    np.testing.assert_allclose(out, 2 * want, rtol=1e-5, atol=1e-5)
