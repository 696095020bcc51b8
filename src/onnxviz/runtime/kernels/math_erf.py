"""Vectorised error function (numpy has none and scipy is not a runtime dependency).

The piecewise rational approximations are the classic ones of Sun's fdlibm ``s_erf.c``
(near-correctly rounded in double precision): a polynomial in x^2 below 0.84375, an
expansion around erf(1) up to 1.25, and exp(-x^2) times a rational function in 1/x^2 for
the tail, where erf is 1 to double precision beyond 6.
"""

from __future__ import annotations

import numpy as np

_ERX = 8.45062911510467529297e-01
_EFX = 1.28379167095512586316e-01
_PP = (
    1.28379167095512558561e-01,
    -3.25042107247001499370e-01,
    -2.84817495755985104766e-02,
    -5.77027029648944159157e-03,
    -2.37630166566501626084e-05,
)
_QQ = (
    1.0,
    3.97917223959155352819e-01,
    6.50222499887672944485e-02,
    5.08130628187576562776e-03,
    1.32494738004321644526e-04,
    -3.96022827877536812320e-06,
)
_PA = (
    -2.36211856075265944077e-03,
    4.14856118683748331666e-01,
    -3.72207876035701323847e-01,
    3.18346619901161753674e-01,
    -1.10894694282396677476e-01,
    3.54783043256182359371e-02,
    -2.16637559486879084300e-03,
)
_QA = (
    1.0,
    1.06420880400844228286e-01,
    5.40397917702171048937e-01,
    7.18286544141962662868e-02,
    1.26171219808761642112e-01,
    1.36370839120290507362e-02,
    1.19844998467991074170e-02,
)
_RA = (
    -9.86494403484714822705e-03,
    -6.93858572707181764372e-01,
    -1.05586262253232909814e01,
    -6.23753324503260060396e01,
    -1.62396669462573470355e02,
    -1.84605092906711035994e02,
    -8.12874355063065934246e01,
    -9.81432934416914548592e00,
)
_SA = (
    1.0,
    1.96512716674392571292e01,
    1.37657754143519042600e02,
    4.34565877475229228821e02,
    6.45387271733267880336e02,
    4.29008140027567833386e02,
    1.08635005541779435134e02,
    6.57024977031928170135e00,
    -6.04244152148580987438e-02,
)
_RB = (
    -9.86494292470009928597e-03,
    -7.99283237680523006574e-01,
    -1.77579549177547519889e01,
    -1.60636384855821916062e02,
    -6.37566443368389627722e02,
    -1.02509513161107724954e03,
    -4.83519191608651397019e02,
)
_SB = (
    1.0,
    3.03380607434824582924e01,
    3.25792512996573918826e02,
    1.53672958608443695994e03,
    3.19985821950859553908e03,
    2.55305040643316442583e03,
    4.74528541206955367215e02,
    -2.24409524465858183362e01,
)


def _poly(coeffs: tuple[float, ...], t: np.ndarray) -> np.ndarray:
    """Horner evaluation of sum(coeffs[i] * t**i)."""
    acc = np.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc *= t
        acc += c
    return acc


def _erf_abs(a: np.ndarray) -> np.ndarray:
    """erf(a) for a >= 0 in float64.  Every branch is evaluated on the whole array and the
    right one selected: cheaper than gathering and scattering masked elements."""
    with np.errstate(all="ignore"):
        z = a * a
        small = _poly(_PP, z)
        small /= _poly(_QQ, z)
        small *= a
        small += a
        s = a - 1.0
        mid = _poly(_PA, s)
        mid /= _poly(_QA, s)
        mid += _ERX
        inv = 1.0 / z
        ratio = np.where(
            a < 1.0 / 0.35, _poly(_RA, inv) / _poly(_SA, inv), _poly(_RB, inv) / _poly(_SB, inv)
        )
        ratio -= z
        ratio -= 0.5625
        tail = np.exp(ratio, out=ratio)
        tail /= a
        np.subtract(1.0, tail, out=tail)
    out = np.where(a < 0.84375, small, np.where(a < 1.25, mid, np.where(a < 6.0, tail, 1.0)))
    return np.where(np.isnan(a), np.nan, out) if np.isnan(a).any() else out


# Single-precision path: one odd rational function of x on [-4, 4] (erf is +-1 to float32
# precision beyond), relative error below 7e-8, no branches.  These are the widely used
# coefficients of the Eigen / XLA float32 erf.
_ALPHA = (
    -1.60960333262415e-02,
    -2.95459980854025e-03,
    -7.34990630326855e-04,
    -5.69250639462346e-05,
    -2.10102402082508e-06,
    2.77068142495902e-08,
    -2.72614225801306e-10,
)
_BETA = (
    -1.42647390514189e-02,
    -7.37332916720468e-03,
    -1.68282697438203e-03,
    -2.13374055278905e-04,
    -1.45660718464996e-05,
)


# Elements per block: the ~25 passes of the rational function then stay in the CPU cache
# (about twice as fast as whole-array passes on BERT-sized tensors).
_BLOCK = 16384


def _erf_block(xs: np.ndarray, out: np.ndarray, t: np.ndarray, den: np.ndarray) -> None:
    """out = erf(xs) for one block; xs already clipped to [-4, 4]."""
    np.multiply(xs, xs, out=t)
    # Python-float coefficients: numpy rounds them to float32 on its fast scalar path.
    np.multiply(t, _ALPHA[-1], out=out)
    out += _ALPHA[-2]
    for c in _ALPHA[-3::-1]:
        out *= t
        out += c
    out *= xs
    np.multiply(t, _BETA[-1], out=den)
    den += _BETA[-2]
    for c in _BETA[-3::-1]:
        den *= t
        den += c
    out /= den


def _erf_single(x: np.ndarray) -> np.ndarray:
    """erf in float32 (for float32 and narrower inputs), block by block."""
    flat = np.clip(x.astype(np.float32).reshape(-1), -4.0, 4.0)  # NaN stays NaN
    out = np.empty_like(flat)
    n = flat.size
    size = min(n, _BLOCK)
    t = np.empty(size, dtype=np.float32)
    den = np.empty(size, dtype=np.float32)
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        m = stop - start
        _erf_block(flat[start:stop], out[start:stop], t[:m], den[:m])
    return out.reshape(x.shape)


def erf_into(x: np.ndarray, out: np.ndarray) -> None:
    """out = erf(x) for 1-D float32/float64 arrays of one length (``out`` may be ``x``);
    for callers that already work block by block."""
    if x.dtype == np.float64:
        out[...] = erf(x)
        return
    for start in range(0, x.size, _BLOCK):
        stop = min(start + _BLOCK, x.size)
        xs = np.clip(x[start:stop], -4.0, 4.0)  # a copy: out may be x
        t = np.empty_like(xs)
        den = np.empty_like(xs)
        _erf_block(xs, out[start:stop], t, den)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, element-wise, in x's float dtype."""
    if x.dtype != np.float64:
        out = _erf_single(x)
        return out if out.dtype == x.dtype else out.astype(x.dtype)
    return np.copysign(_erf_abs(np.abs(x)), x)
