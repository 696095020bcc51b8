"""float32 <-> float16 by native/_half.c: numpy's astype bits (rounding to nearest even,
overflow to infinity, subnormals, NaN payloads) without numpy's element-by-element
loop (3.4 ns a float to float16 and 1.7 back on a Zen 4 core, against about 0.1 with
the F16C instructions).  Every float16 model converts around each kernel that computes
in float32 (`math_common.widen` and the narrowing back), and Cast converts explicitly.
Small arrays, and every call with the compiled kernels off, take numpy's astype."""

from __future__ import annotations

import numpy as np

from onnxviz.runtime import native

_HALF = native.load("half")
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)

# Elements below which numpy's astype is as fast (its fixed cost is the smaller).
MIN_SIZE = 256


def to_float16(x: np.ndarray) -> np.ndarray:
    """``x.astype(np.float16)`` for a float32 ``x`` (a new C-contiguous array)."""
    return _converted(x, _F32, _F16, "to_half")


def to_float32(x: np.ndarray) -> np.ndarray:
    """``x.astype(np.float32)`` for a float16 ``x`` (a new C-contiguous array)."""
    return _converted(x, _F16, _F32, "to_single")


def _converted(x: np.ndarray, src: np.dtype, dst: np.dtype, name: str) -> np.ndarray:
    """x (of ``src``) as ``dst`` by the module's function ``name``, or numpy's astype."""
    module = _HALF
    if module is None or x.dtype != src or x.size < MIN_SIZE:
        return x.astype(dst)
    x = np.ascontiguousarray(x)
    out = np.empty(x.shape, dst)
    getattr(module, name)(x, out)
    return out


def convert(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """``x.astype(to)``, by this module's conversions between float32 and float16."""
    if to == _F16 and x.dtype == _F32:
        return to_float16(x)
    if to == _F32 and x.dtype == _F16:
        return to_float32(x)
    return x.astype(to)
