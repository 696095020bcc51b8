"""What onnxruntime does with MatMulNBits at ``accuracy_level=4``, to explain differences.

The attribute is a floor on accuracy: 4 allows int8 compute.  onnxruntime's CPU kernel
(MLAS "CompInt8", on CPUs with AVX2, AVX-512 or NEON kernels for it) then quantizes the
activations: every row of A is cut into blocks of ``block_size`` along K, each block gets
the scale ``max|a| / 127`` and its values times ``127 / max|a|`` are rounded to the
nearest int8; the products
with the 4-bit weights (minus their zero points) are summed in integers and scaled by
both block scales.  Levels 0-3 compute in float.  onnxruntime-genai's builder writes
level 4 for int4 CPU models, so on those ours and onnxruntime's differ by that
quantization (relative errors of a few percent on small values are normal there).

Our kernel stays exact: it computes the op's definition (dequantized weights, float
activations) at every level, the same as onnxruntime at levels 0-3.  `emulate_level4`
reproduces onnxruntime's level-4 arithmetic (to float rounding) so that a comparison can
say which side the difference comes from (`peer_note`, used by `exact_integer.peer_inexact`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from onnxviz.runtime.kernels.contrib_quant import matmul_nbits, unpack_bits


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def emulate_level4(
    a: np.ndarray,
    b: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    *,
    K: int,
    N: int,
    block_size: int,
    bits: int = 4,
) -> np.ndarray:
    """MatMulNBits with A quantized to int8 per block (onnxruntime at accuracy_level 4)."""
    av = np.asarray(a).astype(np.float32)
    k_blocks = (K + block_size - 1) // block_size
    pad = k_blocks * block_size - K
    rows = av.reshape(-1, K)
    if pad:
        rows = np.concatenate([rows, np.zeros((rows.shape[0], pad), np.float32)], axis=1)
    blocks = rows.reshape(rows.shape[0], k_blocks, block_size)
    amax = np.abs(blocks).max(axis=-1).astype(np.float32)
    scale_a = (amax / np.float32(127)).astype(np.float32)
    # 127 / max, not 1 / scale: the two differ in the last bit, and values that sit on a
    # rounding boundary then land on different integers (seen on a Qwen2 export)
    inverse = np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax != 0)
    inverse = inverse.astype(np.float32)
    qa = np.rint(blocks * inverse[..., None]).astype(np.int64)  # [M, kb, bs]
    blob = block_size * bits // 8
    q = unpack_bits(np.asarray(b, np.uint8).reshape(N, k_blocks, blob), bits, block_size)
    q = q.astype(np.int64).reshape(N, k_blocks, block_size)
    if zero_points is None:
        zp = np.full((N, k_blocks), 2 ** (bits - 1), np.float64)
    elif np.asarray(zero_points).dtype == np.uint8:
        zp_bytes = np.asarray(zero_points, np.uint8).reshape(N, -1)
        zp = unpack_bits(zp_bytes, bits, k_blocks).astype(np.float64)
    else:
        zp = np.asarray(zero_points).astype(np.float64).reshape(N, k_blocks)
    dots = np.einsum("mkb,nkb->mnk", qa, q).astype(np.float64)  # integer sums
    sums = qa.sum(axis=-1).astype(np.float64)  # [M, kb]: for the zero points
    per_block = dots - sums[:, None, :] * zp[None, :, :]
    sb = np.asarray(scales).astype(np.float32).reshape(N, k_blocks).astype(np.float64)
    y = (per_block * scale_a[:, None, :].astype(np.float64) * sb[None, :, :]).sum(axis=-1)
    if bias is not None:
        y = y + np.asarray(bias).astype(np.float64)
    return y.reshape(*av.shape[:-1], N).astype(np.asarray(a).dtype)


def peer_note(node: onnx.NodeProto, value_of: Callable[[str], Any], ours: Any, theirs: Any) -> str:
    """A sentence when ``node`` is a MatMulNBits at accuracy_level 4, ``theirs`` is
    `emulate_level4`'s result up to float rounding and ``ours`` the exact one, else ""."""
    if node.op_type != "MatMulNBits" or node.domain != "com.microsoft":
        return ""
    attrs = _attrs(node)
    if int(attrs.get("accuracy_level", 0)) != 4 or attrs.get("g_idx"):
        return ""
    try:
        ins = [value_of(n) if n else None for n in node.input]
        ins += [None] * (6 - len(ins))
        a, b, scales, zp, g_idx, bias = ins[:6]
        if a is None or b is None or scales is None or g_idx is not None:
            return ""
        kw: dict[str, int] = {k: int(attrs[k]) for k in ("K", "N", "block_size") if k in attrs}
        kw["bits"] = int(attrs.get("bits", 4))
        emulated = emulate_level4(a, b, scales, zp, bias, **kw)
        exact = matmul_nbits(a, b, scales, zp, None, bias, **kw)
        theirs_f = np.asarray(theirs).astype(np.float64)
        to_emulated = float(np.max(np.abs(theirs_f - emulated)))
        to_exact = float(np.max(np.abs(theirs_f - exact)))
        ours_off = float(np.max(np.abs(np.asarray(ours).astype(np.float64) - exact)))
    except Exception:  # an input we cannot read: no verdict, the numbers speak
        return ""
    # theirs must be the emulation up to float rounding, and ours the exact result
    rounding = 1e-4 * max(float(np.max(np.abs(exact))) if exact.size else 0.0, 1e-6)
    if to_emulated > rounding or to_emulated * 10 >= to_exact or ours_off > rounding:
        return ""
    return (
        f"onnxruntime computes this MatMulNBits at accuracy_level 4 with int8-quantized "
        f"activations (off the exact result by up to {to_exact:.3g}); ours is the exact "
        "float result the op defines"
    )
