"""com.microsoft FusedGemm and FusedConv: Gemm / Conv followed by an activation (what
onnxruntime writes when it saves a graph optimised at the "extended" level)."""

from __future__ import annotations

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.contrib_common import standard_kernel
from onnxviz.runtime.registry import kernel

MS = "com.microsoft"


def activate(y: np.ndarray, name: str, params: list[float]) -> np.ndarray:
    """The activation named by ``activation`` with its parameters (alpha, beta, ...)."""
    t = y.dtype.type
    if not name:
        return y
    if name == "Relu":
        return np.maximum(y, t(0))
    if name == "LeakyRelu":
        alpha = params[0] if params else 0.01
        return np.where(y >= 0, y, y * t(alpha))
    if name == "Sigmoid":
        with np.errstate(over="ignore"):
            return t(1) / (t(1) + np.exp(-y))
    if name == "Tanh":
        return np.tanh(y)
    if name == "Clip":
        lo = params[0] if len(params) > 0 else -np.inf
        hi = params[1] if len(params) > 1 else np.inf
        return np.clip(y, t(lo), t(hi))
    if name == "HardSigmoid":
        alpha = params[0] if len(params) > 0 else 0.2
        beta = params[1] if len(params) > 1 else 0.5
        return np.clip(y * t(alpha) + t(beta), t(0), t(1))
    raise ExecutionError(f"unsupported fused activation '{name}'")


@kernel("FusedGemm", domain=MS, since=1)
def fused_gemm(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    activation: str = "",
    activation_alpha: float | None = None,
    activation_beta: float | None = None,
    activation_gamma: float | None = None,
) -> np.ndarray:
    aa = a.T if transA else a
    bb = b.T if transB else b
    y = (aa @ bb) * a.dtype.type(alpha)
    if c is not None:
        y = y + np.asarray(c) * a.dtype.type(beta)
    params = [p for p in (activation_alpha, activation_beta, activation_gamma) if p is not None]
    return activate(y, activation, params).astype(a.dtype)


@kernel("FusedConv", domain=MS, since=1)
def fused_conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    z: np.ndarray | None = None,
    *,
    activation: str = "",
    activation_params: list[float] | None = None,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    y = standard_kernel("Conv", 22)(
        x,
        w,
        b,
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )
    if z is not None:  # the residual "sum" input is added before the activation
        y = y + z
    return activate(y, activation, list(activation_params or [])).astype(x.dtype)
