"""Quantization kernels: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul.

Arithmetic happens in float32 (the types the specs name are emulated by rounding the
operands to them first, which gives the same result for the float16/bfloat16 products
and quotients involved) and integer matrix products go through float64 BLAS, which is
exact for 8/16-bit operands at any realistic K.
"""

from __future__ import annotations

import functools
from typing import Any

import ml_dtypes
import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.kernels._tensor_common import fail, normalize_axis, np_dtype
from onnxviz.runtime.registry import kernel, specialized_outputs, specializer

_FLOAT8 = {
    np.dtype(ml_dtypes.float8_e4m3fn),
    np.dtype(ml_dtypes.float8_e4m3fnuz),
    np.dtype(ml_dtypes.float8_e5m2),
    np.dtype(ml_dtypes.float8_e5m2fnuz),
}
_SUB_BYTE_INT = {
    np.dtype(ml_dtypes.int4),
    np.dtype(ml_dtypes.uint4),
    np.dtype(ml_dtypes.int2),
    np.dtype(ml_dtypes.uint2),
}
_F32 = np.float32


def _is_integer(dtype: np.dtype[Any]) -> bool:
    return dtype.kind in "iu" or dtype in _SUB_BYTE_INT


def _int_range(dtype: np.dtype[Any]) -> tuple[int, int]:
    info = ml_dtypes.iinfo(dtype) if dtype in _SUB_BYTE_INT else np.iinfo(dtype)
    return int(info.min), int(info.max)


def to_f32(x: np.ndarray) -> np.ndarray:
    """Any numeric tensor (incl. ml_dtypes types) as float32."""
    return x.astype(_F32, copy=False)


def round_to(values: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """float32 values rounded to the precision of ``dtype`` (kept as float32)."""
    if dtype == np.dtype(_F32) or dtype.kind in "iu":
        return values
    return values.astype(dtype).astype(_F32)


def saturate_cast(
    values: np.ndarray,
    dtype: np.dtype[Any],
    saturate: int = 1,
    *,
    owned: bool = False,
    rounded: bool = False,
) -> np.ndarray:
    """float32 values to a quantized type: RNE then clip for integers; for float8 clip to
    +-max when ``saturate`` (infinities included), else the type's own overflow (inf/NaN).
    ``owned``: ``values`` is a temporary this call may overwrite (saves two copies);
    ``rounded``: the values are already integral."""
    if _is_integer(dtype):
        lo, hi = _int_range(dtype)
        work = values if owned else values.copy()
        if not rounded:
            np.rint(work, out=work)
        np.clip(work, lo, hi, out=work)
        if dtype in _SUB_BYTE_INT:
            return work.astype(np.int8).astype(dtype)
        return work.astype(dtype)
    if dtype in _FLOAT8 and saturate:
        big = float(ml_dtypes.finfo(dtype).max)
        values = np.clip(values, -big, big)
    return values.astype(dtype)


def _broadcast_param(
    param: np.ndarray, x_shape: tuple[int, ...], axis: int, block_size: int, what: str
) -> np.ndarray:
    """A scale / zero point reshaped (per-axis) or expanded (blocked) to broadcast to x."""
    if param.size == 1 and block_size == 0:
        return param.reshape(())
    rank = len(x_shape)
    ax = normalize_axis(axis, rank)
    if block_size > 0:
        if param.ndim != rank:
            fail(f"blocked quantization: {what} must have rank {rank}, got {param.ndim}")
        n = x_shape[ax]
        if param.shape[ax] != -(-n // block_size):
            fail(
                f"blocked quantization: {what} has {param.shape[ax]} blocks on axis {ax}, "
                f"expected ceil({n}/{block_size})"
            )
        return np.repeat(param, block_size, axis=ax).take(np.arange(n), axis=ax)
    if param.ndim != 1 or param.shape[0] != x_shape[ax]:
        fail(
            f"per-axis quantization: {what} of shape {list(param.shape)} does not match "
            f"axis {ax} of size {x_shape[ax]}"
        )
    shape = [1] * rank
    shape[ax] = x_shape[ax]
    return param.reshape(shape)


_BYTE_TYPES = (np.dtype(np.uint8), np.dtype(np.int8))


def quantize_compiled(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, out_dtype: np.dtype[Any]
) -> np.ndarray | None:
    """Per-tensor float32 -> 8-bit QuantizeLinear in one compiled pass (native/_int8.c's
    `quantize`: divide, round half to even, add the zero point, clip, the float32 steps
    below, so the same bytes): a QDQ model's quantizers that no pair fusion takes, 128 x
    128 values 20 -> 7 us.  None (kernels off, a NaN met): the caller runs the steps."""
    module = native.load("int8")
    if module is None:
        return None
    y = np.empty(x.shape, dtype=out_dtype)
    zp = 0 if zero_point is None else int(zero_point.reshape(()))
    src = np.ascontiguousarray(x).reshape(-1)
    status = module.quantize(src, scale.reshape(()), zp, out_dtype == np.int8, y.reshape(-1))
    return y if status == 0 else None


def _quantize(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None,
    *,
    axis: int = 1,
    block_size: int = 0,
    saturate: int = 1,
    output_dtype: int = 0,
    precision: int = 0,
) -> np.ndarray:
    if zero_point is not None:
        out_dtype = zero_point.dtype
        if output_dtype and np_dtype(output_dtype) != out_dtype:
            fail("QuantizeLinear: output_dtype differs from the zero point type")
    else:
        out_dtype = np_dtype(output_dtype) if output_dtype else np.dtype(np.uint8)
    if (
        x.dtype == _F32
        and scale.dtype == _F32
        and scale.size == 1
        and (zero_point is None or zero_point.size == 1)
        and out_dtype in _BYTE_TYPES
        and (not precision or np_dtype(precision) == _F32)
        and x.size
    ):
        y = quantize_compiled(x, scale, zero_point, out_dtype)
        if y is not None:
            return y
    prec = np_dtype(precision) if precision else scale.dtype
    if prec.kind not in "f" and prec.name != "bfloat16":
        prec = np.dtype(_F32)  # int32 or float8e8m0 scales divide in float32
    s = round_to(to_f32(_broadcast_param(scale, x.shape, axis, block_size, "scale")), prec)
    q = np.asarray(round_to(np.divide(round_to(to_f32(x), prec), s, dtype=_F32), prec))
    if _is_integer(out_dtype):
        # Round before adding the zero point: x/s + zp in float32 can lose the .5 tie.
        np.rint(q, out=q)
    if zero_point is not None:
        zp = to_f32(_broadcast_param(zero_point, x.shape, axis, block_size, "zero point"))
        q += zp
    # Integer targets were rounded above and the zero point is integral.
    return saturate_cast(q, out_dtype, saturate, owned=True, rounded=True)


@kernel("QuantizeLinear", since=10)
def quantize_linear_v10(
    x: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray | None = None
) -> np.ndarray:
    if y_scale.size != 1:
        fail("QuantizeLinear-10 supports per-tensor quantization only")
    return _quantize(x, y_scale, y_zero_point)


@kernel("QuantizeLinear", since=(13, 19, 21, 23, 24, 25, 28))
def quantize_linear(
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
    axis: int = 1,
    saturate: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
    precision: int = 0,
) -> np.ndarray:
    return _quantize(
        x,
        y_scale,
        y_zero_point,
        axis=axis,
        block_size=block_size,
        saturate=saturate,
        output_dtype=output_dtype,
        precision=precision,
    )


def _dequantize(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
) -> np.ndarray:
    if output_dtype:
        out_dtype = np_dtype(output_dtype)
    elif scale.dtype.kind == "f" or scale.dtype.name == "bfloat16":
        out_dtype = scale.dtype
    else:
        out_dtype = np.dtype(_F32)
    values = np.array(x, dtype=_F32)  # a fresh buffer, updated in place below
    if zero_point is not None:
        if zero_point.dtype != x.dtype:
            fail(f"DequantizeLinear: zero point type {zero_point.dtype} != input type {x.dtype}")
        values -= to_f32(_broadcast_param(zero_point, x.shape, axis, block_size, "zero point"))
    s = to_f32(_broadcast_param(scale, x.shape, axis, block_size, "scale"))
    # The output type is the multiplication's precision: round both operands to it first.
    values = round_to(values, out_dtype)
    values *= round_to(s, out_dtype)
    return values.astype(out_dtype, copy=False)


@kernel("DequantizeLinear", since=10)
def dequantize_linear_v10(
    x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray | None = None
) -> np.ndarray:
    if x_scale.size != 1:
        fail("DequantizeLinear-10 supports per-tensor dequantization only")
    return _dequantize(x, x_scale, x_zero_point)


@kernel("DequantizeLinear", since=(13, 19, 21, 23, 24, 25, 28))
def dequantize_linear(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
) -> np.ndarray:
    return _dequantize(
        x, x_scale, x_zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype
    )


_EIGHT_BITS = (np.dtype(np.uint8), np.dtype(np.int8))


def _dequantize_specializer(kernel_fn: Any) -> Any:
    """The specializer of ``kernel_fn`` (a DequantizeLinear kernel): unwatched runs of a
    per-tensor DequantizeLinear whose float32 scale and 8-bit zero point are constants
    compute (x - zero point) * scale in float32, the kernel's own steps on the same
    values (so its bits), without its checks and broadcasts of the two constants on
    every call (a quantized embedding's output, 448 values: 3.9 -> 1.5 us).  Any other
    call (another scale or dtype) runs the kernel."""

    def specialize(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
        if attrs.get("block_size", 0) or attrs.get("output_dtype", 0) or len(known) < 2:
            return None
        scale, zero = known[1], known[2] if len(known) > 2 else None
        if type(scale) is not np.ndarray or scale.dtype != _F32 or scale.size != 1:
            return None
        if zero is not None and (
            type(zero) is not np.ndarray or zero.size != 1 or zero.dtype not in _EIGHT_BITS
        ):
            return None
        fallback = functools.partial(kernel_fn, **attrs)
        s = _F32(scale.reshape(()))
        z = None if zero is None else _F32(zero.reshape(()))

        def call(x: Any, *rest: Any) -> Any:
            if (
                rest[0] is not scale
                or (rest[1] if len(rest) > 1 else None) is not zero
                or type(x) is not np.ndarray
                or x.dtype not in _EIGHT_BITS
                or (zero is not None and x.dtype != zero.dtype)
            ):
                return fallback(x, *rest)
            values = x.astype(_F32)
            if z is not None:
                values -= z
            values *= s
            return values

        return call

    return specialize


specializer(dequantize_linear)(_dequantize_specializer(dequantize_linear))
specializer(dequantize_linear_v10)(_dequantize_specializer(dequantize_linear_v10))


@kernel("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The range, scale and zero point in the definition's float32 steps (onnxruntime's
    and the ONNX reference's): scale = (max(max x, 0) - min(min x, 0)) / 255, each step
    rounded to float32, zero point = clip(rint(0 - min / scale), 0, 255)."""
    values = to_f32(x)
    module = native.load("int8")
    if module is not None and values.dtype == _F32 and values.size:
        # The same steps in two compiled passes (native/_int8.c's `dynamic_quantize`: the
        # range, then QuantizeLinear's divide, round half to even, add, clip), where
        # numpy took four (a decoder layer's 128 x 768 activations: 52 -> 33 us).  A
        # NaN, an all-zero x or an infinite range (status -1) takes the steps below.
        y = np.empty(values.shape, dtype=np.uint8)
        status, scale_c, zero_c = module.dynamic_quantize(
            np.ascontiguousarray(values).reshape(-1), y.reshape(-1)
        )
        if status == 0:
            return y, np.array(scale_c, dtype=_F32), np.array(zero_c, dtype=np.uint8)
    lo = min(_F32(values.min()) if values.size else _F32(0), _F32(0))
    hi = max(_F32(values.max()) if values.size else _F32(0), _F32(0))
    scale = _F32(_F32(hi - lo) / _F32(255))
    if scale == 0:
        # All zeros: the spec's formula divides by zero; like onnxruntime, use scale 1.
        zero = np.array(0, dtype=np.uint8)
        return np.zeros(x.shape, dtype=np.uint8), np.array(1.0, dtype=_F32), zero
    zero = np.array(np.clip(np.rint(_F32(0.0) - _F32(lo) / scale), 0, 255), dtype=np.uint8)
    scale_a = np.array(scale, dtype=_F32)
    return _quantize(values, scale_a, zero), scale_a, zero  # QuantizeLinear's steps


@specializer(dynamic_quantize_linear)
def _prepared_dynamic_quantize(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs: DynamicQuantizeLinear's three outputs from the compiled pass for a
    C-contiguous float32 x (the kernel's own first case: the same bytes), without the
    executor's generic kernel call around it (a dynamic-quantized BERT-tiny's eight took
    20-45 us each, the pass 8-28); anything else, and a pass that declines (a NaN, all
    zeros), calls the kernel."""
    if attrs:
        return None
    module = native.load("int8")
    if module is None:  # (the kernel's numpy steps, still without the generic call)
        return lambda x: specialized_outputs(dynamic_quantize_linear(x), n)
    f32, u8 = _F32, np.dtype(np.uint8)
    quantize, empty, array = module.dynamic_quantize, np.empty, np.array

    def call(x: Any) -> Any:
        # (The pass reads any C-contiguous buffer, whatever its shape: a strided x is
        # the kernel's.  Its lookups and reshapes had been half of a 448-value call.)
        if type(x) is np.ndarray and x.dtype == f32 and x.size:
            y = empty(x.shape, dtype=u8)
            try:
                status, scale, zero = quantize(x, y)
            except ValueError:  # not C-contiguous (the buffer protocol says so)
                status = -1
            if status == 0:
                outs = [y, array(scale, f32), array(zero, u8)]
                return outs if n == 3 else specialized_outputs(outs, n)
        return specialized_outputs(dynamic_quantize_linear(x), n)

    return call


_F32_EXACT = 2**24  # float32 holds every integer of smaller magnitude exactly


def _exact_int_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Matrix product of integer-valued arrays, exactly, through BLAS (as float64 values).

    float32 GEMM is exact while every partial sum stays below 2**24, i.e. when
    max|a| * max|b| * K < 2**24 (typical for int8 x int8 with K up to ~1000); otherwise
    float64 (exact below 2**53).  Splitting B into two exact float32 halves was measured
    slower than one float64 GEMM."""
    k = a.shape[-1]
    a_max = float(np.abs(a).max()) if a.size else 0.0
    b_max = float(np.abs(b).max()) if b.size else 0.0
    if a_max * b_max * k < _F32_EXACT:
        return np.matmul(a.astype(_F32), b.astype(_F32)).astype(np.float64)
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _row_param(param: np.ndarray, a: np.ndarray) -> np.ndarray:
    """A per-row parameter of ``a`` ([M] vector) reshaped to broadcast as [M, 1]."""
    if param.ndim == 1 and param.size > 1 and a.ndim >= 2:
        if param.shape[0] != a.shape[-2]:
            fail(f"per-row parameter of length {param.shape[0]} for {a.shape[-2]} rows")
        return param.reshape(-1, 1)
    return param


@kernel("MatMulInteger", since=10)
def matmul_integer(
    a: np.ndarray,
    b: np.ndarray,
    a_zero_point: np.ndarray | None = None,
    b_zero_point: np.ndarray | None = None,
) -> np.ndarray:
    exact = int8_products.matmul(a, b, a_zero_point, b_zero_point)
    if exact is not None:
        return exact
    a_val = a.astype(np.int32)
    b_val = b.astype(np.int32)
    if a_zero_point is not None:
        a_val = a_val - _row_param(a_zero_point, a).astype(np.int32)
    if b_zero_point is not None:
        b_val = b_val - b_zero_point.astype(np.int32)
    return np.rint(_exact_int_matmul(a_val, b_val)).astype(np.int32)


@kernel("QLinearMatMul", since=(10, 21))
def qlinear_matmul(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
) -> np.ndarray:
    exact = int8_products.matmul(a, b, a_zero_point, b_zero_point)
    if exact is not None:
        acc = exact.astype(_F32)  # the same exact integers as the float64 product below
    else:
        a_val = to_f32(a) - to_f32(_row_param(a_zero_point, a))
        b_val = to_f32(b) - to_f32(b_zero_point)
        if _is_integer(a.dtype) and _is_integer(b.dtype):
            acc = _exact_int_matmul(a_val, b_val).astype(_F32)
        else:
            acc = np.matmul(a_val, b_val)
    # One float32 multiplier per output element: a_scale[row] * b_scale[col] / y_scale.
    multiplier = to_f32(_row_param(a_scale, a)) * to_f32(b_scale) / to_f32(y_scale)
    y = acc * multiplier
    if _is_integer(y_zero_point.dtype):
        y = np.rint(y)  # round before the zero point joins (float32 would lose .5 ties)
    return saturate_cast(np.asarray(y + to_f32(y_zero_point)), y_zero_point.dtype, owned=True)
