"""Signal processing: DFT (17, 20), STFT, Hann/Hamming/Blackman windows, MelWeightMatrix.

Transforms run through numpy.fft (pocketfft) on the whole batch at once; complex values
travel as a trailing axis of size 2 (real, imaginary), real input as a trailing axis of 1.
"""

from __future__ import annotations

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.model.dtypes import np_dtype
from onnxviz.runtime.registry import KernelContext, kernel


def _scalar_int(v: np.ndarray | None, default: int | None) -> int | None:
    if v is None or np.size(v) == 0:
        return default
    return int(np.asarray(v).reshape(-1)[0])


def _as_complex(x: np.ndarray) -> np.ndarray:
    # Transform in the input's precision: complex64 for float32 and narrower, like peers.
    xf = x.astype(np.float64 if x.dtype == np.float64 else np.float32)
    if x.shape[-1] == 1:
        return xf[..., 0].astype(np.result_type(xf.dtype, np.complex64))
    if x.shape[-1] == 2:
        return (
            xf[..., 0] + np.asarray(1j, dtype=np.result_type(xf.dtype, np.complex64)) * xf[..., 1]
        )
    raise ExecutionError(f"DFT: last axis must be 1 (real) or 2 (complex), got shape {x.shape}")


def _to_pairs(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def dft_core(
    x: np.ndarray, length: int | None, axis: int, inverse: bool, onesided: bool
) -> np.ndarray:
    signal_rank = x.ndim - 1
    if not (-signal_rank - 1 <= axis < signal_rank) or axis in (-1, signal_rank):
        raise ExecutionError(f"DFT: axis {axis} is not a signal axis of shape {x.shape}")
    ax = axis % x.ndim
    z = _as_complex(x)
    if onesided and inverse:
        n = length if length is not None else 2 * (z.shape[ax] - 1)
        real = np.fft.irfft(z, n=n, axis=ax)
        return real[..., None].astype(x.dtype)
    n = length if length is not None else z.shape[ax]
    if n <= 0:
        raise ExecutionError(f"DFT: dft_length must be positive, got {n}")
    out = np.fft.ifft(z, n=n, axis=ax) if inverse else np.fft.fft(z, n=n, axis=ax)
    if onesided:
        out = np.take(out, np.arange(n // 2 + 1), axis=ax)
    return _to_pairs(out, x.dtype)


@kernel("DFT", since=17)
def dft_v17(
    x: np.ndarray,
    dft_length: np.ndarray | None = None,
    *,
    axis: int = 1,
    inverse: int = 0,
    onesided: int = 0,
) -> np.ndarray:
    return dft_core(x, _scalar_int(dft_length, None), axis, bool(inverse), bool(onesided))


@kernel("DFT", since=20)
def dft(
    x: np.ndarray,
    dft_length: np.ndarray | None = None,
    axis: np.ndarray | None = None,
    *,
    inverse: int = 0,
    onesided: int = 0,
) -> np.ndarray:
    ax = _scalar_int(axis, -2)
    assert ax is not None
    return dft_core(x, _scalar_int(dft_length, None), ax, bool(inverse), bool(onesided))


@kernel("STFT", since=17)
def stft(
    signal: np.ndarray,
    frame_step: np.ndarray,
    window: np.ndarray | None = None,
    frame_length: np.ndarray | None = None,
    *,
    onesided: int = 1,
) -> np.ndarray:
    z = _as_complex(signal)  # (B, L)
    step = _scalar_int(frame_step, None)
    if step is None or step <= 0:
        raise ExecutionError("STFT: frame_step must be a positive scalar")
    length = _scalar_int(frame_length, None)
    if length is None:
        length = window.shape[0] if window is not None else z.shape[1]
    if window is not None and window.shape[0] != length:
        raise ExecutionError(f"STFT: window length {window.shape[0]} != frame_length {length}")
    if length > z.shape[1]:
        raise ExecutionError(f"STFT: frame_length {length} exceeds the signal length {z.shape[1]}")
    frames = (z.shape[1] - length) // step + 1
    view = np.lib.stride_tricks.sliding_window_view(z, length, axis=1)[:, ::step][:, :frames]
    if window is not None:
        view = view * window.astype(np.float64)
    spec = np.fft.fft(view, axis=-1)
    if onesided:
        spec = spec[..., : length // 2 + 1]
    return _to_pairs(spec, signal.dtype)


def _window(size: np.ndarray, periodic: int, coeffs: tuple[float, ...], dtype: int) -> np.ndarray:
    n = _scalar_int(size, 0) or 0
    if n < 0:
        raise ExecutionError(f"window size must be >= 0, got {n}")
    denom = n if periodic else n - 1
    k = np.arange(n, dtype=np.float64)
    phase = 2 * np.pi * k / denom if denom > 0 else np.zeros(n)
    w = np.zeros(n)
    for m, c in enumerate(coeffs):
        w += ((-1) ** m) * c * np.cos(m * phase)
    return w.astype(np_dtype(dtype))


@kernel("HannWindow", since=17)
def hann_window(size: np.ndarray, *, output_datatype: int = 1, periodic: int = 1) -> np.ndarray:
    return _window(size, periodic, (0.5, 0.5), output_datatype)


@kernel("HammingWindow", since=17)
def hamming_window(size: np.ndarray, *, output_datatype: int = 1, periodic: int = 1) -> np.ndarray:
    alpha = 25.0 / 46.0
    return _window(size, periodic, (alpha, 1 - alpha), output_datatype)


@kernel("BlackmanWindow", since=17)
def blackman_window(size: np.ndarray, *, output_datatype: int = 1, periodic: int = 1) -> np.ndarray:
    return _window(size, periodic, (0.42, 0.5, 0.08), output_datatype)


@kernel("MelWeightMatrix", since=17, ctx=True)
def mel_weight_matrix(
    ctx: KernelContext,
    num_mel_bins: np.ndarray,
    dft_length: np.ndarray,
    sample_rate: np.ndarray,
    lower_edge_hertz: np.ndarray,
    upper_edge_hertz: np.ndarray,
    *,
    output_datatype: int = 1,
) -> np.ndarray:
    mels = _scalar_int(num_mel_bins, 0) or 0
    n_fft = _scalar_int(dft_length, 0) or 0
    rate = float(np.asarray(sample_rate).reshape(-1)[0])
    low = float(np.asarray(lower_edge_hertz).reshape(-1)[0])
    high = float(np.asarray(upper_edge_hertz).reshape(-1)[0])
    if mels <= 0 or n_fft <= 0 or rate <= 0 or not 0 <= low < high:
        raise ExecutionError("MelWeightMatrix: invalid bins, length, rate or edge frequencies")
    bins = n_fft // 2 + 1
    # mels + 2 band edges evenly spaced on the mel scale, mapped back to DFT bin indices.
    # The step is (high - low) / (mels + 2), as onnxruntime and the ONNX test data have it
    # (so the last edge stays just below upper_edge_hertz).
    low_mel = 2595 * np.log10(1 + low / 700)
    high_mel = 2595 * np.log10(1 + high / 700)
    edges_mel = low_mel + np.arange(mels + 2) * (high_mel - low_mel) / (mels + 2)
    edges_hz = 700 * (np.power(10, edges_mel / 2595) - 1)
    edges = np.floor((n_fft + 1) * edges_hz / rate).astype(np.int64)
    lower, center, upper = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(bins)[:, None]
    rise_span = center - lower
    fall_span = upper - center
    with np.errstate(divide="ignore", invalid="ignore"):
        rising = np.where(rise_span > 0, (j - lower) / np.where(rise_span > 0, rise_span, 1), 0)
        falling = np.where(fall_span > 0, (upper - j) / np.where(fall_span > 0, fall_span, 1), 0)
    out = np.zeros((bins, mels))
    out = np.where((j >= lower) & (j <= center), rising, out)
    out = np.where((j >= center) & (j < upper), falling, out)
    out = np.where((j == center) & (rise_span == 0), 1.0, out)
    return out.astype(np_dtype(output_datatype))
