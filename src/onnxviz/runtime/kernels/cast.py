"""Cast, CastLike and BitCast between every ONNX element type.

Rules (Cast spec, opset 19-28):

* float -> float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ): round to nearest even; with
  ``saturate=1`` (default) out-of-range values and infinities become +-FLT_MAX of the target,
  with ``saturate=0`` they become NaN (or +-inf for E5M2).  ml_dtypes' own conversion is
  the non-saturating one, so saturation clips before converting.
* float -> FLOAT8E8M0 (a pure power of two): ``round_mode`` up / down / nearest (ties up)
  in log space, then saturation to [2^-127, 2^127] or NaN; see `_to_e8m0`.
* integer -> sub-byte integers (int4, uint4, int2, uint2): keep the low bits (two's
  complement), like every fixed-point narrowing; float -> them: truncate in range, out of
  range (undefined in the spec) what ml_dtypes' conversion gives (`_to_small_int`).
* string <-> numbers: strings parse as Python numbers, "INF", "+INF", "-INF", "NaN" in any
  case included; numbers print in their shortest round-trip form.
"""

from __future__ import annotations

import functools
from typing import Any

import ml_dtypes
import numpy as np
from onnx import TensorProto

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels import half
from onnxviz.runtime.kernels.math_common import ML_FLOATS, ML_INTS
from onnxviz.runtime.registry import kernel, specializer

Array = np.ndarray
_TP = TensorProto
_OBJ = np.dtype(object)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _ml(name: str) -> np.dtype | None:
    t = getattr(ml_dtypes, name, None)
    return None if t is None else np.dtype(t)


_DTYPES: dict[int, np.dtype | None] = {
    _TP.FLOAT: _F32,
    _TP.UINT8: np.dtype(np.uint8),
    _TP.INT8: np.dtype(np.int8),
    _TP.UINT16: np.dtype(np.uint16),
    _TP.INT16: np.dtype(np.int16),
    _TP.INT32: np.dtype(np.int32),
    _TP.INT64: np.dtype(np.int64),
    _TP.STRING: _OBJ,
    _TP.BOOL: np.dtype(np.bool_),
    _TP.FLOAT16: np.dtype(np.float16),
    _TP.DOUBLE: _F64,
    _TP.UINT32: np.dtype(np.uint32),
    _TP.UINT64: np.dtype(np.uint64),
    _TP.COMPLEX64: np.dtype(np.complex64),
    _TP.COMPLEX128: np.dtype(np.complex128),
    _TP.BFLOAT16: _ml("bfloat16"),
    _TP.FLOAT8E4M3FN: _ml("float8_e4m3fn"),
    _TP.FLOAT8E4M3FNUZ: _ml("float8_e4m3fnuz"),
    _TP.FLOAT8E5M2: _ml("float8_e5m2"),
    _TP.FLOAT8E5M2FNUZ: _ml("float8_e5m2fnuz"),
    _TP.UINT4: _ml("uint4"),
    _TP.INT4: _ml("int4"),
    _TP.FLOAT4E2M1: _ml("float4_e2m1fn"),
    _TP.FLOAT8E8M0: _ml("float8_e8m0fnu"),
    getattr(_TP, "UINT2", 25): _ml("uint2"),
    getattr(_TP, "INT2", 26): _ml("int2"),
    getattr(_TP, "FLOAT6E2M3", 27): _ml("float6_e2m3fn"),
    getattr(_TP, "FLOAT6E3M2", 28): _ml("float6_e3m2fn"),
}

_FLOAT8 = frozenset(
    d
    for d in (
        _ml("float8_e4m3fn"),
        _ml("float8_e4m3fnuz"),
        _ml("float8_e5m2"),
        _ml("float8_e5m2fnuz"),
    )
    if d is not None
)
_E8M0 = _ml("float8_e8m0fnu")

# Bit widths of the element types narrower than a byte (ml_dtypes keeps them one per byte,
# value bits in the low end).
_SUB_BYTE_BITS: dict[np.dtype, int] = {
    d: bits
    for d, bits in (
        (_ml("int4"), 4),
        (_ml("uint4"), 4),
        (_ml("float4_e2m1fn"), 4),
        (_ml("int2"), 2),
        (_ml("uint2"), 2),
        (_ml("float6_e2m3fn"), 6),
        (_ml("float6_e3m2fn"), 6),
    )
    if d is not None
}


def dtype_for(to: int) -> np.dtype:
    """numpy dtype of a TensorProto element type number."""
    dt = _DTYPES.get(int(to))
    if dt is None:
        raise ExecutionError(f"cannot cast to element type {to}")
    return dt


# ---------------------------------------------------------------- strings
def _parse_int(text: str) -> int:
    """Integer text keeps every digit; "100.5" gives 100 through float, as the spec allows."""
    try:
        return int(text)
    except ValueError:
        return int(float(text))


def _parse_strings(x: Array, to: np.dtype) -> Array:
    """Parse a string tensor into float64, or int64/uint64 for integer targets (so large
    integers keep every digit); "INF"/"-inf"/"NaN" in any case are special values."""
    flat = [s.decode() if isinstance(s, bytes) else str(s) for s in x.ravel().tolist()]
    try:
        if to.kind in "iu" or to in ML_INTS:
            target = np.uint64 if to.kind == "u" and to.itemsize == 8 else np.int64
            return np.array([_parse_int(s) for s in flat], dtype=target).reshape(x.shape)
        if to == np.bool_:  # numbers, or the words true/false in any case
            words = {"true": 1.0, "false": 0.0}
            values = [words.get(s.strip().lower()) for s in flat]
            floats = [float(s) if v is None else v for s, v in zip(flat, values)]
            return np.array(floats, dtype=np.float64).reshape(x.shape)
        return np.array([float(s) for s in flat], dtype=np.float64).reshape(x.shape)
    except (ValueError, OverflowError) as exc:
        raise ExecutionError(f"Cast: cannot parse string as a number ({exc})") from exc


_SPECIAL_TEXT = {"nan": "NaN", "inf": "INF", "-inf": "-INF"}


def _to_strings(x: Array) -> Array:
    if x.dtype in ML_FLOATS or x.dtype in ML_INTS:
        x = x.astype(_F32) if x.dtype in ML_FLOATS else x.astype(np.int32)
    if x.dtype.kind == "f":
        # numpy's str() of a scalar is the shortest text that reads back to the same value;
        # special values use the spellings the spec reserves (and runtimes print).
        text = [_SPECIAL_TEXT.get(t, t) for t in map(str, x.ravel())]
        return np.array(text, dtype=object).reshape(x.shape)
    if x.dtype == np.bool_:
        return np.where(x, "1", "0").astype(object)
    return x.astype(str).astype(object)


# ---------------------------------------------------------------- special targets
def _narrow_float64(x: Array) -> Array:
    """float64 -> float32 rounded to odd (truncate, then set the last bit if inexact).

    ml_dtypes converts doubles to its narrow floats through float32, which rounds twice
    and can land on a false tie.  Rounding to odd first keeps a sticky bit, so the second
    rounding (to at most 10 mantissa bits, far below float32's 23) equals a single
    correct rounding of the double."""
    if x.dtype != _F64:
        return x
    with np.errstate(over="ignore"):
        y = x.astype(_F32)
    bits = y.view(np.uint32)
    # Where RNE rounded away from zero, step one unit back toward zero (truncation).
    away = np.abs(y.astype(_F64)) > np.abs(x)
    bits = np.where(away & np.isfinite(x), bits - np.uint32(1), bits)  # inf -> FLT_MAX
    truncated = bits.view(_F32)
    inexact = (truncated.astype(_F64) != x) & np.isfinite(x)
    return np.where(inexact, bits | np.uint32(1), bits).view(_F32)


def _to_float8(x: Array, to: np.dtype, saturate: int) -> Array:
    if x.dtype.kind in "iub":
        x = x.astype(_F64)  # exact for every integer a float8 can come near
    if saturate:
        fmax = float(ml_dtypes.finfo(to).max)
        x = np.clip(x, -fmax, fmax)  # NaN stays NaN, +-inf become +-FLT_MAX
    return _narrow_float64(x).astype(to)


def _to_e8m0(x: Array, saturate: int, round_mode: str) -> Array:
    """FLOAT8E8M0 holds only 2^(code-127), code 0..254, 255 = NaN.  For a = |x| = f * 2^k
    with f in [1, 2): 'down' keeps k, 'up' takes k+1 unless f == 1, 'nearest' takes k+1
    when f >= 1.5 (the midpoint between 2^k and 2^(k+1); ties round up).  Negative inputs
    are undefined by the spec; their magnitude is used."""
    assert _E8M0 is not None
    f = x.astype(_F64)
    a = np.abs(f)
    mant, exp = np.frexp(a)  # a = mant * 2^exp, mant in [0.5, 1)
    k = exp.astype(np.int64) - 1
    frac = mant * 2.0
    if round_mode == "up":
        k += frac > 1.0
    elif round_mode == "nearest":
        k += frac >= 1.5
    elif round_mode != "down":
        raise ExecutionError(f"Cast round_mode must be up, down or nearest, got {round_mode!r}")
    code = k + 127
    too_big = (code > 254) | np.isinf(f)
    too_small = (code < 0) | (a == 0)
    if saturate:
        code = np.where(too_big, 254, np.where(too_small, 0, code))
    else:
        code = np.where(too_big | too_small, 255, code)
    code = np.where(np.isnan(f), 255, code)
    return code.astype(np.uint8).view(_E8M0)


def _to_small_int(x: Array, to: np.dtype) -> Array:
    """Sub-byte integers.  From integers: keep the low bits (two's complement), the spec's
    fixed-point narrowing.  From floats: truncated toward zero in range; out of range the
    spec leaves the result undefined, and the onnx package's conformance data for it is
    whatever ml_dtypes' conversion gives (0.6 wraps like the integers, 0.7 gives 0), so a
    float goes through ml_dtypes' own conversion: the same numbers as that data, and as
    onnx.reference, with either release."""
    if x.dtype.kind == "f":
        with np.errstate(invalid="ignore", over="ignore"):
            return x.astype(to)
    bits = _SUB_BYTE_BITS[to]
    low = (x.astype(np.int64) & ((1 << bits) - 1)).astype(np.uint8)
    return low.view(to)


# ---------------------------------------------------------------- the cast
def cast_array(x: Array, to: np.dtype, saturate: int = 1, round_mode: str = "up") -> Array:
    """``x`` converted to ``to`` following the Cast operator's rules."""
    src = x.dtype
    if src == to:
        return x
    if to == _OBJ:
        return _to_strings(x)
    if src == _OBJ:
        x = _parse_strings(x, to)
        if x.dtype == to:
            return x
    elif src in ML_FLOATS:
        x = x.astype(_F32)  # exact for every ml_dtypes float
    elif src in ML_INTS or src == np.bool_:
        x = x.astype(np.int8 if src.kind != "u" and src != np.bool_ else np.uint8)
    if to == np.bool_:
        return x != 0  # NaN is nonzero: True, as C++ runtimes give
    if to in _FLOAT8:
        return _to_float8(x, to, saturate)
    if to == _E8M0:
        return _to_e8m0(x, saturate, round_mode)
    if to in ML_INTS:
        return _to_small_int(x, to)
    if to in ML_FLOATS:  # bfloat16, float4, float6: ml_dtypes rounds to nearest even
        if x.dtype.kind in "iu":
            x = x.astype(_F64)
        return _narrow_float64(x).astype(to)
    with np.errstate(invalid="ignore", over="ignore"):
        if to.kind in "iu" and x.dtype.kind == "f":
            # Out-of-range float -> int is undefined; truncate like C without warnings.
            return x.astype(to)
        return half.convert(x, to)  # (float32 <-> float16 by F16C where compiled)


@kernel("Cast", since=(1, 6, 9, 13))
def cast_legacy(x: Array, to: Any = None) -> Array:
    if isinstance(to, str):  # opset 1 spelled the type as a string ("FLOAT")
        to = _TP.DataType.Value(to.upper())
    if to is None:
        raise ExecutionError("Cast needs the 'to' attribute")
    return cast_array(x, dtype_for(to))


@kernel("Cast", since=(19, 21, 23, 24, 25, 28))
def cast(x: Array, to: int | None = None, saturate: int = 1, round_mode: str = "up") -> Array:
    if to is None:
        raise ExecutionError("Cast needs the 'to' attribute")
    return cast_array(x, dtype_for(to), saturate, round_mode)


# The numpy types whose casts among themselves are cast_array's plain astype (or != 0 to
# bool): every conversion but strings, float8/4/6, bfloat16, sub-byte ints and e8m0.
_PLAIN = frozenset(
    np.dtype(t)
    for t in (
        np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
        np.uint8, np.uint16, np.uint32, np.uint64,
    )
)  # fmt: skip
_BOOL = np.dtype(np.bool_)


def _prepared_cast(kernel_fn: Any) -> Any:
    """The specializer of a Cast kernel: in unwatched runs, the target type resolved
    once, and a plain numeric cast as the astype (or the comparison to bool) cast_array
    ends in, without its checks and error-state switch (unwatched runs ignore
    floating-point errors already).  A decoder's mask arithmetic casts a few scalars,
    where those were most of a 2.6 us call.  Anything else (from bool, strings, the
    ml_dtypes) takes the kernel."""

    def specialize(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
        to_code = attrs.get("to")
        if type(to_code) is not int or _DTYPES.get(to_code) is None:
            return None
        to = _DTYPES[to_code]
        if to not in _PLAIN and to != _BOOL:
            return None
        fallback = functools.partial(kernel_fn, **attrs)

        def call(x: Any) -> Any:
            if type(x) is not np.ndarray or x.dtype not in _PLAIN:
                return fallback(x)
            if x.dtype == to:
                return x
            if to == _BOOL:
                return x != 0
            return half.convert(x, to)

        return call

    return specialize


specializer(cast)(_prepared_cast(cast))
specializer(cast_legacy)(_prepared_cast(cast_legacy))


@kernel("CastLike", since=(15, 19, 21, 23, 24, 25))
def cast_like(x: Array, target: Array, saturate: int = 1, round_mode: str = "up") -> Array:
    return cast_array(x, target.dtype, saturate, round_mode)


# ---------------------------------------------------------------- BitCast
def _bits(dt: np.dtype) -> int:
    return _SUB_BYTE_BITS.get(dt, dt.itemsize * 8)


_UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@kernel("BitCast", since=26)
def bit_cast(x: Array, to: int | None = None) -> Array:
    if to is None:
        raise ExecutionError("BitCast needs the 'to' attribute")
    dst = dtype_for(to)
    if x.dtype == _OBJ or dst == _OBJ:
        raise ExecutionError("BitCast does not accept string tensors")
    if _bits(x.dtype) != _bits(dst):
        raise ExecutionError(
            f"BitCast needs equal bit widths, got {x.dtype} ({_bits(x.dtype)} bits) "
            f"and {dst} ({_bits(dst)} bits)"
        )
    if x.dtype == dst:
        return x
    if dst == np.bool_:
        return x.view(np.uint8) != 0
    if dst in _SUB_BYTE_BITS:
        # ml_dtypes keeps sub-byte values in the low bits of a byte; keep only those bits.
        low = x.view(np.uint8) & np.uint8((1 << _bits(dst)) - 1)
        return low.view(dst)
    if x.ndim == 0:
        return x.reshape(1).view(dst).reshape(())
    return x.view(dst) if x.flags.c_contiguous else np.ascontiguousarray(x).view(dst)
