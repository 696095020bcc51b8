"""A C-ordered copy of a strided array, by tiles where numpy's copy walks a large stride.

`dense(x)` is np.ascontiguousarray(x) with the same values, dtype and shape (x itself
when it is C-contiguous).  A permuted view whose last axis is not its densest one (a
ConvNeXt block's NCHW -> NHWC permute before its LayerNorm, a 2-D transpose) is copied
by native/_transpose.c in tiles: numpy reads each output row across lines a large stride
apart, 139 us for a [1, 32, 32, 48] permute of 49K floats against 23 here.  Other
arrays (rows already dense, small ones, item sizes other than 4 bytes) and runs with the
compiled kernels off, or at the plain-C level, where the tiles are no faster, take
numpy's copy.  A copy moves bits, so every path gives the same array.
"""

from __future__ import annotations

import numpy as np

from onnxviz.runtime import native

# The compiled copy from AVX2 up (its 8 x 8 register transposes), else None.
_NATIVE = native.load("transpose")
if _NATIVE is not None and int(_NATIVE.level()) < native.AVX2:
    _NATIVE = None

# Below this many items numpy's copy costs about as much as the call here.
MIN_ITEMS = 2048


def dense(x: np.ndarray) -> np.ndarray:
    """``x``'s values in a C-contiguous array (``x`` itself when it is one)."""
    if x.flags.c_contiguous:
        return x
    if (
        _NATIVE is not None
        and x.itemsize == 4
        and x.ndim >= 2
        and x.strides[-1] != 4
        and x.size >= MIN_ITEMS
        and not x.dtype.hasobject
    ):
        out = np.empty(x.shape, x.dtype)
        _NATIVE.copy(x, out)
        return out
    return np.ascontiguousarray(x)
