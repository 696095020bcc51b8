"""Exact integer arithmetic for the integer matmul and conv ops, to judge a comparison.

When our value and onnxruntime's differ on a MatMulInteger, ConvInteger or
MatMulIntegerToFloat node, the numbers alone cannot say who is right.  onnxruntime's
u8s8 kernels on x86 CPUs with AVX2 but no VNNI add pairs of u8 x s8 products in
saturating 16-bit arithmetic (vpmaddubsw), so on large int8 weights its result is off
by up to tens of thousands.  `peer_inexact` recomputes the node in int64 (or float64 for
the float-output form and the conv, exact while sums stay below 2**53) and says in words
when ours is the exact one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx

INTEGER_OPS = {
    ("", "MatMulInteger"),
    ("", "ConvInteger"),
    ("com.microsoft", "MatMulIntegerToFloat"),
}


def _zero_point(zp: Any, rows_axis: int | None, ndim: int) -> Any:
    """A zero point as an int64 array that broadcasts against the operand: a scalar,
    or one per row (A, ``rows_axis`` -2) or per column (B, the last axis)."""
    if zp is None:
        return 0
    z = np.asarray(zp).astype(np.int64)
    if z.ndim == 0 or z.size == 1:
        return z.reshape(())
    if rows_axis is not None:  # per row of A: (..., M) -> (..., M, 1)
        return z.reshape(z.shape + (1,))
    return z


def _matmul_exact(a: Any, b: Any, a_zp: Any, b_zp: Any) -> np.ndarray:
    ai = np.asarray(a).astype(np.int64) - _zero_point(a_zp, -2, np.ndim(a))
    bi = np.asarray(b).astype(np.int64) - _zero_point(b_zp, None, np.ndim(b))
    return np.matmul(ai, bi)


def _conv_exact(node: onnx.NodeProto, ins: list[Any]) -> np.ndarray:
    from onnxviz.runtime.kernels.nn_conv import conv

    x, w = ins[0], ins[1]
    x_zp = ins[2] if len(ins) > 2 else None
    w_zp = ins[3] if len(ins) > 3 else None
    xf = np.asarray(x).astype(np.float64) - (0 if x_zp is None else float(np.asarray(x_zp)))
    wf = np.asarray(w).astype(np.float64)
    if w_zp is not None:
        z = np.asarray(w_zp).astype(np.float64)
        wf = wf - (z.reshape((-1,) + (1,) * (wf.ndim - 1)) if z.size > 1 else z)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
    return conv(xf, wf, None, **attrs)


def exact_result(node: onnx.NodeProto, ins: list[Any]) -> np.ndarray | None:
    """The node's output in exact arithmetic (float64 for float outputs), or None for an
    op this module does not know."""
    ins = list(ins) + [None] * 7
    if node.op_type == "MatMulInteger" and node.domain in ("", "ai.onnx"):
        return _matmul_exact(ins[0], ins[1], ins[2], ins[3])
    if node.op_type == "ConvInteger" and node.domain in ("", "ai.onnx"):
        return _conv_exact(node, [v for v in ins[:4]])
    if node.op_type == "MatMulIntegerToFloat" and node.domain == "com.microsoft":
        a, b, a_scale, b_scale, a_zp, b_zp, bias = ins[:7]
        y = _matmul_exact(a, b, a_zp, b_zp).astype(np.float64)
        y = y * np.asarray(a_scale).astype(np.float64) * np.asarray(b_scale).astype(np.float64)
        return y if bias is None else y + np.asarray(bias).astype(np.float64)
    return None


def _equal(value: Any, exact: np.ndarray) -> bool:
    if not isinstance(value, np.ndarray) or value.shape != exact.shape:
        return False
    if value.dtype.kind in "iu":
        return bool(np.array_equal(value.astype(np.int64), exact))
    scale = float(np.max(np.abs(exact), initial=0.0))
    tol = 4 * float(np.finfo(value.dtype).eps) * max(scale, 1e-30)
    return bool(np.max(np.abs(value.astype(np.float64) - exact), initial=0.0) <= tol)


def peer_inexact(
    node: onnx.NodeProto,
    value_of: Callable[[str], Any],
    ours: Any,
    theirs: Any,
    peer: str = "onnxruntime",
) -> str:
    """A sentence when ``ours`` equals exact arithmetic and ``theirs`` does not (else "").
    ``value_of`` gives the node's input values by name (None for a missing optional)."""
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    if node.op_type == "MatMulNBits":  # int8 activations at accuracy_level 4
        from onnxviz.runtime.nbits_accuracy import peer_note

        return peer_note(node, value_of, ours, theirs)
    if (domain, node.op_type) not in INTEGER_OPS:
        return ""
    try:
        ins = [value_of(n) if n else None for n in node.input]
        if ins[0] is None or ins[1] is None:
            return ""
        exact = exact_result(node, ins)
    except Exception:  # an input we cannot read: no verdict, the numbers speak
        return ""
    if exact is None or not _equal(ours, exact) or _equal(theirs, exact):
        return ""
    off = float(np.max(np.abs(np.asarray(theirs).astype(np.float64) - exact)))
    return (
        f"{peer} is inexact here (off by up to {off:.6g}): its u8s8 integer kernels on "
        "CPUs without VNNI add products in saturating 16-bit arithmetic; "
        "ours equals exact integer arithmetic"
    )


def initializer_lookup(model: onnx.ModelProto, *sources: Mapping[str, Any]) -> Callable[[str], Any]:
    """``value_of`` for `peer_inexact`: the given value maps first, then the main
    graph's initializers (decoded only when asked for)."""
    inits = {t.name: t for t in model.graph.initializer}

    def value_of(name: str) -> Any:
        for source in sources:
            if name in source:
                return source[name]
        if name in inits:
            return onnx.numpy_helper.to_array(inits[name])
        return None

    return value_of
