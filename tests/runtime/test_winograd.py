"""F(2x2, 3x3) Winograd convolution (kernels.nn_winograd): same numbers as the direct
conv, within float32 rounding, on the shapes and paddings it is used for."""

from __future__ import annotations

import numpy as np
import pytest

from onnxviz.runtime.kernels import nn_conv, nn_winograd
from onnxviz.runtime.kernels.nn_conv import ConvWeight, conv

pytestmark = pytest.mark.numeric

RNG = np.random.default_rng(31)


def _direct64(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pads: list[int]) -> np.ndarray:
    """The conv in float64 by the plain kernel (no Winograd: no wrapped weight)."""
    b64 = None if b is None else b.astype(np.float64)
    return conv(x.astype(np.float64), w.astype(np.float64), b64, pads=pads)


@pytest.mark.parametrize(
    "shape, m, pads, with_bias",
    [
        ((1, 32, 14, 14), 40, [1, 1, 1, 1], True),
        ((2, 33, 13, 15), 32, [1, 1, 1, 1], True),  # odd sizes: the last tiles are cropped
        ((1, 32, 16, 16), 32, [0, 0, 0, 0], False),  # "valid" conv, 14x14 out
        ((1, 32, 12, 17), 36, [2, 0, 1, 2], True),  # uneven pads
        ((1, 64, 28, 28), 64, [1, 1, 1, 1], True),
        ((1, 32, 63, 64), 48, [1, 1, 1, 1], True),  # a UNet level: the largest images
    ],
)
def test_winograd_matches_the_direct_conv(
    shape: tuple[int, ...], m: int, pads: list[int], with_bias: bool
) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    w = (RNG.standard_normal((m, shape[1], 3, 3)) * 0.1).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32) if with_bias else None
    want = _direct64(x, w, b, pads)
    out_shape = want.shape[2:]
    got = nn_winograd.winograd_conv(x, nn_winograd.transform_weights(w), b, pads, out_shape)
    assert got.shape == want.shape and got.dtype == np.float32
    direct = conv(x, w, b, pads=pads)  # float32, direct paths
    err_direct = float(np.abs(direct - want).max())
    err_wino = float(np.abs(got - want).max())
    assert err_wino <= max(4 * err_direct, 1e-5), (err_wino, err_direct)


def test_float64_weights_and_inputs_stay_float64() -> None:
    x = RNG.standard_normal((1, 32, 14, 14))
    w = RNG.standard_normal((32, 32, 3, 3)) * 0.1
    got = nn_winograd.winograd_conv(x, nn_winograd.transform_weights(w), None, [1] * 4, (14, 14))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, _direct64(x, w, None, [1] * 4), rtol=1e-10, atol=1e-10)


def test_wrapped_weight_takes_the_winograd_path_for_fitting_shapes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[int, ...]] = []
    original = nn_winograd.winograd_conv

    def counting(x: np.ndarray, *args: object) -> np.ndarray:
        calls.append(x.shape)
        return original(x, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(nn_winograd, "winograd_conv", counting)
    # This shape runs the compiled direct conv when it is on (nn_conv.direct_nchw_pays).
    monkeypatch.setenv("ONNXVIZ_DIRECT_CONV", "off")
    x = RNG.standard_normal((1, 64, 28, 28)).astype(np.float32)
    w = (RNG.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float32)
    b = RNG.standard_normal(64).astype(np.float32)
    r = RNG.standard_normal((1, 64, 28, 28)).astype(np.float32)
    packed = ConvWeight(w)
    got = conv(x, packed, b, pads=[1] * 4, addend=r)  # type: ignore[arg-type]
    assert calls == [(1, 64, 28, 28)]
    want = _direct64(x, w, b, [1] * 4) + r
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    conv(x, w, b, pads=[1] * 4)  # a plain weight: its transform would cost every call
    assert len(calls) == 1


@pytest.mark.parametrize(
    "c, m, group, kernel, strides, dilations, out",
    [
        (64, 64, 1, (3, 3), (2, 2), (1, 1), (14, 14)),  # strided
        (64, 64, 2, (3, 3), (1, 1), (1, 1), (14, 14)),  # grouped
        (64, 64, 1, (5, 5), (1, 1), (1, 1), (14, 14)),  # other kernel
        (64, 64, 1, (3, 3), (1, 1), (2, 2), (14, 14)),  # dilated
        (8, 64, 1, (3, 3), (1, 1), (1, 1), (14, 14)),  # few channels
        (64, 64, 1, (3, 3), (1, 1), (1, 1), (128, 128)),  # big image: direct is faster
        (64, 64, 1, (3, 3), (1, 1), (1, 1), (7, 7)),  # tiny image: thin GEMMs
    ],
)
def test_winograd_is_not_chosen_where_it_does_not_apply_or_pay(
    c: int,
    m: int,
    group: int,
    kernel: tuple[int, int],
    strides: tuple[int, int],
    dilations: tuple[int, int],
    out: tuple[int, int],
) -> None:
    assert not nn_winograd.fits(c, m, group, kernel, strides, dilations, [1] * 4, out)
    assert nn_winograd.fits(64, 64, 1, (3, 3), (1, 1), (1, 1), [1] * 4, (28, 28))
    assert nn_winograd.fits(32, 32, 1, (3, 3), (1, 1), (1, 1), [1] * 4, (64, 64))


def test_conv_module_uses_one_weight_transform_per_wrapped_weight() -> None:
    w = (RNG.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32)
    packed = nn_conv.ConvWeight(w)
    assert packed.winograd() is packed.winograd()
    assert packed.winograd().shape == (16, 32, 32)


def test_without_direct_blas_the_products_go_through_numpy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = RNG.standard_normal((2, 32, 13, 14)).astype(np.float32)
    w = (RNG.standard_normal((40, 32, 3, 3)) * 0.1).astype(np.float32)
    b = RNG.standard_normal(40).astype(np.float32)
    u = nn_winograd.transform_weights(w)
    direct = nn_winograd.winograd_conv(x, u, b, [1] * 4, (13, 14))
    monkeypatch.setattr(nn_winograd.blas, "raw_gemm", lambda dtype: None)
    assert not nn_winograd.fits(32, 40, 1, (3, 3), (1, 1), (1, 1), [1] * 4, (13, 14))
    fallback = nn_winograd.winograd_conv(x, u, b, [1] * 4, (13, 14))
    np.testing.assert_allclose(fallback, direct, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fallback, _direct64(x, w, b, [1] * 4), rtol=1e-4, atol=1e-4)
