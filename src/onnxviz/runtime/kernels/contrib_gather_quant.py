"""com.microsoft GatherBlockQuantized: Gather from a block-wise quantized table (LLM
embeddings exported by onnxruntime-genai with int4 or int8 weights), dequantized.

The rows are gathered first and only they are dequantized: an embedding table of a
150k-token vocabulary is never expanded to float.  Data may be uint8 (2-, 4- or 8-bit
values, sub-byte ones packed along the last axis, low bits first; default zero point
2^(bits-1)), int4/uint4 (default zero point 0) or an FP8/FP4 type (no zero point;
``block_size`` 0: one block per row), as onnxruntime's schema describes.
"""

from __future__ import annotations

import functools
from typing import Any

import ml_dtypes
import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels._weight_cache import frozen
from onnxviz.runtime.kernels.contrib_quant import unpack_bits
from onnxviz.runtime.registry import RUNTIME, kernel, specializer

MS = "com.microsoft"
_NARROW = (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4))


def _float_types() -> tuple[np.dtype, ...]:
    names = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")
    return tuple(np.dtype(getattr(ml_dtypes, n)) for n in names if hasattr(ml_dtypes, n))


def _take(a: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    """np.take along ``axis``; an axis of size 1 (a broadcast scale) gives its one entry
    for every index."""
    if a.shape[axis] == 1:
        indices = np.zeros_like(indices)
    return np.take(a, indices, axis=axis)


@kernel("GatherBlockQuantized", domain=MS, since=1)
def gather_block_quantized(
    data: np.ndarray,
    indices: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None = None,
    *,
    gather_axis: int = 0,
    quantize_axis: int = 1,
    block_size: int = 128,
    bits: int = 4,
) -> np.ndarray:
    d = np.asarray(data)
    rank = d.ndim
    if rank == 0:
        raise ExecutionError("GatherBlockQuantized: data must have at least one dimension")
    ga, qa = gather_axis % rank, quantize_axis % rank
    sc = np.asarray(scales)
    out_dtype = sc.dtype
    is_float = d.dtype in _float_types()
    if block_size == 0 and is_float:
        block_size = 0
    elif block_size < 16 or block_size & (block_size - 1):
        raise ExecutionError("GatherBlockQuantized: block_size must be a power of two >= 16")
    per_byte = 1
    if d.dtype == np.uint8:
        if bits not in (2, 4, 8):
            raise ExecutionError(f"GatherBlockQuantized: bits={bits} (2, 4 or 8 for uint8)")
        if ga != 0:
            raise ExecutionError("GatherBlockQuantized: uint8 data needs gather_axis 0")
        per_byte = 8 // bits
        if per_byte > 1 and ga == rank - 1:
            raise ExecutionError("GatherBlockQuantized: packed data cannot gather its last axis")
        default_zp = float(2 ** (bits - 1))
    elif d.dtype in _NARROW:
        default_zp = 0.0
    elif is_float:
        if zero_points is not None:
            raise ExecutionError("GatherBlockQuantized: FP8/FP4 data takes no zero points")
        default_zp = 0.0
    else:
        raise ExecutionError(f"GatherBlockQuantized: data of type {d.dtype} is not supported")
    idx = np.asarray(indices).astype(np.int64)
    size = d.shape[ga]
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise ExecutionError(f"GatherBlockQuantized: an index is out of range for {size} rows")
    idx = np.where(idx < 0, idx + size, idx)

    def logical(a: np.ndarray) -> np.ndarray:
        """Unpacked values as float32 (sub-byte uint8 values unpacked along the last axis)."""
        if a.dtype == np.uint8 and per_byte > 1:
            a = unpack_bits(a, bits, a.shape[-1] * per_byte)
        return a.astype(np.float32)

    # where the quantize axis lands once the gather has put idx's dims in place of ga
    if ga == qa:
        q = logical(np.take(d, idx, axis=ga))
        blocks = idx // block_size if block_size else np.zeros_like(idx)
        s = _take(sc, blocks, ga).astype(np.float32)
        zp = (
            np.float32(default_zp)
            if zero_points is None
            else logical(_take(np.asarray(zero_points), blocks, ga))
        )
        return ((q - zp) * s).astype(out_dtype)
    q = logical(np.take(d, idx, axis=ga))
    qa_out = qa + idx.ndim - 1 if qa > ga else qa
    length = q.shape[qa_out]
    block_of = np.arange(length) // block_size if block_size else np.zeros(length, np.int64)
    s = _take(_take(sc, idx, ga), block_of, qa_out).astype(np.float32)
    if zero_points is None:
        zp = np.float32(default_zp)
    else:
        # the gathered rows' zero points only (uint8 data gathers axis 0): unpacking the
        # whole table was a 150k-row vocabulary's zero points on every token
        zpa = _take(np.asarray(zero_points), idx, ga)
        if zpa.dtype == np.uint8 and per_byte > 1:
            zpa = unpack_bits(zpa, bits, sc.shape[-1])
        zp = _take(zpa.astype(np.float32), block_of, qa_out)
    if s.shape != q.shape:
        s = np.broadcast_to(s, q.shape)
    return ((q - zp) * s).astype(out_dtype)


# A dequantized table is kept (float32: 4 bytes a value) up to this many values.
_KEPT_VALUES = 1 << 20


@specializer(gather_block_quantized)
def _prepared_gather(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs of a node whose table, scales and zero points are constants
    (frozen) and whose table is small (at most `_KEPT_VALUES` values dequantized): the
    whole table dequantized once by the kernel, then each call a gather of its rows:
    the kernel's own values, since each is (q - zero point) * scale on its own.  A tiny
    genai model's embedding took 24 us a call through the kernel's unpacking steps.
    Another table, or an index out of range (the kernel says so), goes to the kernel."""
    if len(known) < 3:
        return None
    consts = [known[0], known[2], known[3] if len(known) > 3 else None]
    if any(c is RUNTIME for c in consts) or known[0] is None or known[2] is None:
        return None
    if any(c is not None and (type(c) is not np.ndarray or not frozen(c)) for c in consts):
        return None
    data = consts[0]
    ga = attrs.get("gather_axis", 0) % max(data.ndim, 1)
    per_byte = 8 // attrs.get("bits", 4) if data.dtype == np.uint8 else 1
    if not data.ndim or data.size * per_byte > _KEPT_VALUES:
        return None
    fallback = functools.partial(gather_block_quantized, **attrs)
    try:
        table = fallback(data, np.arange(data.shape[ga]), consts[1], consts[2])
    except ExecutionError:
        return None  # (the kernel says what is wrong on every call)
    table.flags.writeable = False

    def call(*ins: Any) -> Any:
        if (
            len(ins) < 3
            or ins[0] is not consts[0]
            or ins[2] is not consts[1]
            or (ins[3] if len(ins) > 3 else None) is not consts[2]
            or type(ins[1]) is not np.ndarray
            or ins[1].dtype.kind not in "iu"
        ):
            return fallback(*ins)
        try:  # (np.take's range: [-rows, rows), the kernel's; outside it the kernel's error)
            return np.take(table, ins[1], axis=ga)
        except IndexError:
            return fallback(*ins)

    return call
