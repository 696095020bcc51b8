"""MatMulNBits at ``accuracy_level=4``: int8 activations, and how to tell engines apart.

The attribute is a floor on accuracy: 4 allows int8 compute.  onnxruntime's CPU kernel
(MLAS "CompInt8", on CPUs with AVX2, AVX-512 or NEON kernels for it) then quantizes the
activations: every row of A is cut into blocks of ``block_size`` along K, each block gets
the scale ``max|a| / 127`` and its values times ``127 / max|a|`` are rounded to the
nearest int8; the products with the 4-bit weights (minus their zero points) are summed
in integers and scaled by both block scales.  Levels 0-3 compute in float.
onnxruntime-genai's builder writes level 4 for int4 CPU models.

Ours does the same where onnxruntime does (kernels/contrib_quant.py's int8_activations:
packed or no zero points, no g_idx), on every CPU; `emulate_level4` is the float64
reference of that arithmetic.  Two engines can still part at such a node, and
`peer_note` says why:

* one quantized and the other did not (onnxruntime on a CPU without int8 kernels computes
  level 4 in float): one result is the emulation's, the other the float product's;
* both quantized, from inputs that differ in their last bits: a value that sits on a
  rounding boundary lands on neighbouring int8 steps, and the outputs differ by about one
  step times a weight.  Expected, as with QuantizeLinear.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from onnxviz.runtime.kernels.contrib_quant import dequantize_nbits, unpack_bits


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _blocks(a: np.ndarray, K: int, block_size: int) -> np.ndarray:
    """The rows of ``a`` (float32, K features) as [M, k_blocks, block_size], the last block
    padded with zeros."""
    k_blocks = (K + block_size - 1) // block_size
    rows = np.asarray(a, np.float32).reshape(-1, K)
    padded = np.zeros((rows.shape[0], k_blocks * block_size), np.float32)
    padded[:, :K] = rows
    return padded.reshape(rows.shape[0], k_blocks, block_size)


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
    blocks = _blocks(av, K, block_size)
    amax = np.abs(blocks).max(axis=-1).astype(np.float32)
    scale_a = (amax / np.float32(127)).astype(np.float32)
    # 127 / max, not 1 / scale: the two differ in the last bit, and values that sit on a
    # rounding boundary then land on different integers (seen on a Qwen2 export)
    inverse = np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax != 0)
    inverse = inverse.astype(np.float32)
    with np.errstate(invalid="ignore"):
        qa = np.rint(np.nan_to_num(blocks * inverse[..., None])).astype(np.int64)  # [M, kb, bs]
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
    with np.errstate(invalid="ignore"):  # a NaN row's inf * 0: NaN below all the same
        y = (per_block * scale_a[:, None, :].astype(np.float64) * sb[None, :, :]).sum(axis=-1)
    if bias is not None:
        y = y + np.asarray(bias).astype(np.float64)
    y[~np.isfinite(av.reshape(-1, K)).all(axis=1)] = np.nan  # no int8 form: NaN rows
    return y.reshape(*av.shape[:-1], N).astype(np.asarray(a).dtype)


def _one_step(a: np.ndarray, w_abs: np.ndarray, K: int, block_size: int) -> np.ndarray:
    """[M, N]: what moving one activation by one int8 step can change each output by
    (the largest step of a row's blocks times the largest |weight| of a column)."""
    step = np.abs(_blocks(a, K, block_size)).max(axis=(1, 2)).astype(np.float64) / 127
    return step[:, None] * w_abs.max(axis=1)[None, :]


def peer_note(node: onnx.NodeProto, value_of: Callable[[str], Any], ours: Any, theirs: Any) -> str:
    """A sentence when ``node`` is a MatMulNBits at accuracy_level 4 and ``ours`` and
    ``theirs`` differ as the int8 activations explain (the module's docstring), else ""."""
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
        emulated = emulate_level4(a, b, scales, zp, bias, **kw).astype(np.float64)
        # the float product (accuracy_level 0's), in float64 from the dequantized weight
        # the one-step bound reads too
        w = dequantize_nbits(b, scales, zp, None, kw["K"], kw["N"], kw["block_size"], kw["bits"])
        w64 = w.astype(np.float64)
        exact = np.asarray(a, np.float64).reshape(-1, kw["K"]) @ w64.T
        if bias is not None:
            exact = exact + np.asarray(bias, np.float64)
        exact = exact.reshape(emulated.shape)
        ours_f = np.asarray(ours, np.float64)
        theirs_f = np.asarray(theirs, np.float64)
        step = _one_step(a, np.abs(w64), kw["K"], kw["block_size"])
    except Exception:  # an input we cannot read: no verdict, the numbers speak
        return ""
    rounding = 1e-4 * max(float(np.max(np.abs(exact))) if exact.size else 0.0, 1e-6)

    def near(x: np.ndarray, y: np.ndarray) -> bool:
        return bool(np.max(np.abs(x - y), initial=0.0) <= rounding)

    def far(x: np.ndarray, y: np.ndarray) -> bool:
        return bool(np.max(np.abs(x - y), initial=0.0) > 10 * rounding)

    if near(theirs_f, emulated) and near(ours_f, exact) and far(emulated, exact):
        return (
            "onnxruntime computes this MatMulNBits at accuracy_level 4 with int8-quantized "
            f"activations (off the float product by up to {float(np.max(np.abs(theirs_f - exact))):.3g}); "
            "ours computed the float product here"
        )
    if near(ours_f, emulated) and near(theirs_f, exact) and far(emulated, exact):
        return (
            "onnxruntime computed this MatMulNBits in float although accuracy_level 4 allows "
            "int8 activations (its CPU has no int8 kernel for it); ours rounds the "
            f"activations to int8 steps, as onnxruntime does on CPUs that have one (off the "
            f"float product by up to {float(np.max(np.abs(ours_f - exact))):.3g})"
        )
    # both quantized, from inputs a few bits apart: neighbouring steps, a few elements each
    diff = np.abs(ours_f - theirs_f).reshape(step.shape)
    if near(ours_f, emulated) and np.all(diff <= 2 * step + rounding):
        return (
            "at accuracy_level 4 both engines round the activations to int8 steps; inputs "
            "that differ in their last bits can land on neighbouring steps, which moves "
            f"outputs by up to a step times a weight (here {float(np.max(diff)):.3g})"
        )
    return ""
