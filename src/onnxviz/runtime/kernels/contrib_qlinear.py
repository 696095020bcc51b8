"""com.microsoft quantised ops written by onnxruntime's quantisation tools (QOperator
format and dynamic quantisation): DynamicQuantizeMatMul, MatMulIntegerToFloat, QGemm,
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
QLinearAveragePool, QLinearReduceMean, QLinearSoftmax, QLinearWhere, QLinearConcat.

Integer products are exact (float64 BLAS below 2**53); requantisation rounds half to even
and saturates, as onnxruntime does."""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.contrib_common import standard_kernel
from onnxviz.runtime.kernels.math_softmax import softmax
from onnxviz.runtime.kernels.nn_pool import average_pool
from onnxviz.runtime.registry import kernel

MS = "com.microsoft"


def _zp(zero_point: np.ndarray | None, like: np.ndarray) -> np.ndarray:
    if zero_point is None:
        return np.zeros((), dtype=like.dtype)
    return np.asarray(zero_point)


def dequantize(x: np.ndarray, scale: Any, zero_point: np.ndarray | None) -> np.ndarray:
    return (
        np.asarray(x).astype(np.float32) - _zp(zero_point, np.asarray(x)).astype(np.float32)
    ) * np.asarray(scale, dtype=np.float32)


def quantize(y: np.ndarray, scale: Any, zero_point: Any, dtype: Any) -> np.ndarray:
    info = np.iinfo(dtype)
    q = np.rint(np.asarray(y, dtype=np.float32) / np.asarray(scale, dtype=np.float32))
    q = q + np.asarray(zero_point).astype(np.float32)
    return np.clip(q, info.min, info.max).astype(dtype)


def _int_matmul(a: np.ndarray, a_zp: Any, b: np.ndarray, b_zp: Any) -> np.ndarray:
    """(A - a_zp) @ (B - b_zp) exactly, as float64; b_zp may be per output column."""
    av = np.asarray(a).astype(np.float64) - np.asarray(a_zp).astype(np.float64)
    bz = np.asarray(b_zp).astype(np.float64)
    if bz.ndim == 1 and bz.size > 1:
        bz = bz.reshape(1, -1)
    bv = np.asarray(b).astype(np.float64) - bz
    try:
        return np.matmul(av, bv)
    except ValueError as exc:
        raise ExecutionError(f"quantised matmul: {exc}") from None


@kernel("MatMulIntegerToFloat", domain=MS, since=1)
def matmul_integer_to_float(
    a: np.ndarray,
    b: np.ndarray,
    a_scale: np.ndarray,
    b_scale: np.ndarray,
    a_zero_point: np.ndarray | None = None,
    b_zero_point: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> np.ndarray:
    acc = _int_matmul(a, _zp(a_zero_point, a), b, _zp(b_zero_point, b))
    y = acc.astype(np.float32) * (np.asarray(a_scale, np.float32) * np.asarray(b_scale, np.float32))
    if bias is not None:
        y = y + np.asarray(bias, np.float32)
    return y.astype(np.asarray(a_scale).dtype)


@kernel("DynamicQuantizeMatMul", domain=MS, since=1)
def dynamic_quantize_matmul(
    a: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> np.ndarray:
    # A is quantised to uint8 per tensor at run time, exactly like DynamicQuantizeLinear.
    a_q, a_scale, a_zp = standard_kernel("DynamicQuantizeLinear", 11)(a)
    return matmul_integer_to_float(
        a_q, b, a_scale.astype(np.float32), b_scale, a_zp, b_zero_point, bias
    ).astype(np.asarray(a).dtype)


@kernel("QGemm", domain=MS, since=1)
def qgemm(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray,
    c: np.ndarray | None = None,
    y_scale: np.ndarray | None = None,
    y_zero_point: np.ndarray | None = None,
    *,
    alpha: float = 1.0,
    transA: int = 0,
    transB: int = 0,
) -> np.ndarray:
    aa = a.T if transA else a
    bb = b.T if transB else b
    acc = _int_matmul(aa, a_zero_point, bb, b_zero_point)
    if c is not None:  # int32 bias in the accumulator's scale
        acc = acc + np.asarray(c).astype(np.float64)
    multiplier = (
        np.float32(alpha) * np.asarray(a_scale, np.float32) * np.asarray(b_scale, np.float32)
    )
    y = acc.astype(np.float32) * multiplier
    if y_scale is None:
        return y.astype(np.float32)
    out_dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else np.uint8
    return quantize(y, y_scale, y_zero_point if y_zero_point is not None else 0, out_dtype)


def _binary(
    op: str,
    a: np.ndarray,
    a_scale: Any,
    a_zp: Any,
    b: np.ndarray,
    b_scale: Any,
    b_zp: Any,
    c_scale: Any,
    c_zp: Any,
) -> np.ndarray:
    """Like onnxruntime: the scale ratios are folded first (a_s / c_s, b_s / c_s or
    a_s * b_s / c_s) and the output zero point is added before rounding half to even, so
    results agree at the (frequent) half-way points."""
    f32 = np.float32
    av = np.asarray(a).astype(f32) - _zp(a_zp, np.asarray(a)).astype(f32)
    bv = np.asarray(b).astype(f32) - _zp(b_zp, np.asarray(b)).astype(f32)
    sa, sb, sc = (np.asarray(v, dtype=f32) for v in (a_scale, b_scale, c_scale))
    try:
        if op == "add":
            y = av * (sa / sc) + bv * (sb / sc)
        else:
            y = av * bv * (sa * sb / sc)
    except ValueError as exc:
        raise ExecutionError(f"QLinear{op.title()}: {exc}") from None
    dtype = np.asarray(a).dtype
    info = np.iinfo(dtype)
    shifted = y + _zp(c_zp, np.asarray(a)).astype(f32)
    return np.clip(np.rint(shifted), info.min, info.max).astype(dtype)


@kernel("QLinearAdd", domain=MS, since=1)
def qlinear_add(
    a: np.ndarray,
    a_scale: Any,
    a_zp: Any,
    b: np.ndarray,
    b_scale: Any,
    b_zp: Any,
    c_scale: Any,
    c_zp: Any = None,
) -> np.ndarray:
    return _binary("add", a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp)


@kernel("QLinearMul", domain=MS, since=1)
def qlinear_mul(
    a: np.ndarray,
    a_scale: Any,
    a_zp: Any,
    b: np.ndarray,
    b_scale: Any,
    b_zp: Any,
    c_scale: Any,
    c_zp: Any = None,
) -> np.ndarray:
    return _binary("mul", a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp)


@kernel("QLinearSigmoid", domain=MS, since=1)
def qlinear_sigmoid(
    x: np.ndarray, x_scale: Any, x_zp: Any, y_scale: Any, y_zp: Any = None
) -> np.ndarray:
    v = dequantize(x, x_scale, x_zp)
    y = np.float32(1) / (np.float32(1) + np.exp(-v))
    return quantize(y, y_scale, _zp(y_zp, np.asarray(x)), np.asarray(x).dtype)


@kernel("QLinearLeakyRelu", domain=MS, since=1)
def qlinear_leaky_relu(
    x: np.ndarray, x_scale: Any, x_zp: Any, y_scale: Any, y_zp: Any = None, *, alpha: float = 0.01
) -> np.ndarray:
    v = dequantize(x, x_scale, x_zp)
    y = np.where(v >= 0, v, v * np.float32(alpha))
    return quantize(y, y_scale, _zp(y_zp, np.asarray(x)), np.asarray(x).dtype)


@kernel("QLinearGlobalAveragePool", domain=MS, since=1)
def qlinear_global_average_pool(
    x: np.ndarray, x_scale: Any, x_zp: Any, y_scale: Any, y_zp: Any, *, channels_last: int = 0
) -> np.ndarray:
    """The mean of the dequantised input, requantised, in exact arithmetic: the sum of
    (x - zero point) is an exact integer, and one float64 expression scales it
    (onnxruntime scales in float32, so a mean on a half-way point can land one step
    away from ours)."""
    x = np.asarray(x)
    if x.ndim < 3:
        raise ExecutionError("QLinearGlobalAveragePool: input must be [N, C, spatial...]")
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    total = (x.astype(np.int64) - _zp(x_zp, x).astype(np.int64)).sum(axis=axes, keepdims=True)
    scale = np.float64(np.float32(x_scale)) / np.float64(np.float32(y_scale))
    q = np.rint(total * scale / max(count, 1)) + np.asarray(y_zp).astype(np.int64)
    info = np.iinfo(x.dtype)
    return np.clip(q, info.min, info.max).astype(x.dtype)


@kernel("QLinearConcat", domain=MS, since=1)
def qlinear_concat(y_scale: Any, y_zp: np.ndarray, *inputs: Any, axis: int) -> np.ndarray:
    if len(inputs) % 3:
        raise ExecutionError("QLinearConcat: inputs come in (tensor, scale, zero point) triples")
    parts = [dequantize(inputs[i], inputs[i + 1], inputs[i + 2]) for i in range(0, len(inputs), 3)]
    try:
        joined = np.concatenate(parts, axis=axis)
    except ValueError as exc:
        raise ExecutionError(f"QLinearConcat: {exc}") from None
    return quantize(joined, y_scale, y_zp, np.asarray(y_zp).dtype)


@kernel("QLinearAveragePool", domain=MS, since=1)
def qlinear_average_pool(
    x: np.ndarray,
    x_scale: Any,
    x_zp: Any,
    y_scale: Any,
    y_zp: Any = None,
    *,
    channels_last: int = 0,
    **pool: Any,
) -> np.ndarray:
    """AveragePool on the dequantised input, requantised: what onnxruntime computes in
    float for this op (its sums are exact integers, the one rounding is the final one)."""
    v = dequantize(x, x_scale, x_zp)
    if v.ndim < 3:
        raise ExecutionError("QLinearAveragePool: input must be [N, C, spatial...]")
    if channels_last:
        v = np.moveaxis(v, -1, 1)
    y = average_pool(v, **pool)
    if channels_last:
        y = np.moveaxis(y, 1, -1)
    return quantize(y, y_scale, _zp(y_zp, np.asarray(x)), np.asarray(x).dtype)


@kernel("QLinearReduceMean", domain=MS, since=1)
def qlinear_reduce_mean(
    data: np.ndarray,
    data_scale: Any,
    data_zp: Any,
    reduced_scale: Any,
    reduced_zp: Any = None,
    *,
    axes: list[int],
    keepdims: int,
) -> np.ndarray:
    v = dequantize(data, data_scale, data_zp)
    try:
        y = v.mean(axis=tuple(axes), keepdims=bool(keepdims))
    except (ValueError, np.exceptions.AxisError) as exc:
        raise ExecutionError(f"QLinearReduceMean: {exc}") from None
    return quantize(y, reduced_scale, _zp(reduced_zp, np.asarray(data)), np.asarray(data).dtype)


@kernel("QLinearSoftmax", domain=MS, since=1)
def qlinear_softmax(
    x: np.ndarray,
    x_scale: Any,
    x_zp: Any,
    y_scale: Any,
    y_zp: Any,
    *,
    axis: int = -1,
    opset: int,
) -> np.ndarray:
    """Softmax of the dequantised input.  onnxruntime reads exp from a 256-entry table and
    divides in fixed point, so its result can be one quantisation step off ours; before
    opset 13 the axis flattens the tensor to 2-D, as Softmax-1/11 does."""
    v = dequantize(x, x_scale, x_zp)
    if opset < 13:
        ax = axis % v.ndim if v.ndim else 0
        rows = int(np.prod(v.shape[:ax], dtype=np.int64))
        y = softmax(v.reshape(rows, -1), axis=1).reshape(v.shape)
    else:
        y = softmax(v, axis=axis)
    return quantize(y, y_scale, y_zp, np.asarray(x).dtype)


@kernel("QLinearWhere", domain=MS, since=1)
def qlinear_where(
    condition: np.ndarray,
    x: np.ndarray,
    x_scale: Any,
    x_zp: Any,
    y: np.ndarray,
    y_scale: Any,
    y_zp: Any,
    z_scale: Any,
    z_zp: Any,
) -> np.ndarray:
    chosen = np.where(
        np.asarray(condition, dtype=bool),
        dequantize(x, x_scale, x_zp),
        dequantize(y, y_scale, y_zp),
    )
    return quantize(chosen, z_scale, z_zp, np.asarray(x).dtype)
