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
    """erf(a) for a >= 0 (float64), each branch evaluated only on its own elements."""
    out = np.empty_like(a)
    small = a < 0.84375
    mid = (a >= 0.84375) & (a < 1.25)
    tail = (a >= 1.25) & (a < 6.0)
    out[a >= 6.0] = 1.0
    if small.any():
        x = a[small]
        z = x * x
        out[small] = x + x * (_poly(_PP, z) / _poly(_QQ, z))
    if mid.any():
        s = a[mid] - 1.0
        out[mid] = _ERX + _poly(_PA, s) / _poly(_QA, s)
    if tail.any():
        x = a[tail]
        s = 1.0 / (x * x)
        near = x < 1.0 / 0.35
        ratio = np.where(near, _poly(_RA, s) / _poly(_SA, s), _poly(_RB, s) / _poly(_SB, s))
        out[tail] = 1.0 - np.exp(-x * x - 0.5625 + ratio) / x
    out[np.isnan(a)] = np.nan
    return out


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, element-wise, in x's float dtype (computed in float64)."""
    x64 = np.asarray(x, dtype=np.float64)
    out = np.copysign(_erf_abs(np.abs(x64)), x64)
    return out.astype(x.dtype, copy=False) if x.dtype.kind == "f" else out
