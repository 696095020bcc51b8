"""Activation kernels (Relu family, sigmoids, Gelu/Mish/Swish, PRelu, Shrink, Clip).

Half-precision and ml_dtypes inputs are evaluated in float32 and rounded once at the end,
the way runtimes do it, instead of rounding after every intermediate step.  Constants are
Python floats: numpy casts them to the array's type ("weak" scalars) on its fast path,
where numpy scalar operands take a slower one.

Max/min against a constant (Relu, Clip) run against a row of that constant rather than
the scalar: numpy 2.4's maximum/minimum with a broadcast scalar runs a loop 3-4x slower
than with two contiguous operands (200k float32: 61 us against 20 us), for the same bits
(`bounded_into`).  The fused conv chains and the in-place Relu use the same function, so
their numbers are the kernels'.  Likewise, selections (Elu, Selu, PRelu, Shrink, ...)
pick bits with integer masks (`select`), since np.where branches per element, and
Softplus/Mish avoid np.logaddexp, an unvectorised loop.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels import chain_program, half
from onnxviz.runtime.kernels.dense import dense
from onnxviz.runtime.kernels.math_common import ML_FLOATS, widen
from onnxviz.runtime.kernels.math_erf import erf
from onnxviz.runtime.kernels.nn_geometry import scratch
from onnxviz.runtime.registry import kernel, specializer

Array = np.ndarray
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _in_float32(fn: Callable[..., Array]) -> Callable[..., Array]:
    """Evaluate ``fn`` on widened inputs; give the result the first input's dtype."""

    @functools.wraps(fn)
    def run(x: Array, *rest: Any, **attrs: Any) -> Array:
        dt = x.dtype
        out = np.asarray(fn(widen(x), *rest, **attrs))
        return out if out.dtype == dt else half.convert(out, dt)

    return run


# Length of `bounded_into`'s constant rows: 64 KB of float32, so a row stays in L2 while
# the rows of x stream past it, and the per-row cost of the ufunc's outer loop is small
# (1024-element rows measured 25% slower on 800k floats).
_ROW = 16384
_ROWS: dict[tuple[Any, ...], np.ndarray] = {}
_MAX_ROWS = 32  # distinct (dtype, constant) rows kept; Clip bounds are per model
# Below this many elements the scalar loop's cost is less than this function's own.
_MIN_SIZE = 4096


def _row(dtype: np.dtype, value: Any) -> np.ndarray:
    """A read-only row of ``value`` cast to ``dtype`` (cached)."""
    plain = type(value) is int or type(value) is float
    key = (dtype, value) if plain else (dtype, np.asarray(value).astype(dtype).tobytes())
    row = _ROWS.get(key)
    if row is None:
        row = np.full(_ROW, np.asarray(value).astype(dtype), dtype=dtype)
        row.flags.writeable = False
        if len(_ROWS) >= _MAX_ROWS:
            _ROWS.clear()
        _ROWS[key] = row
    return row


def bounded_into(ufunc: np.ufunc, x: Array, value: Any, out: Array) -> Array:
    """``ufunc(x, value, out=out)`` for np.maximum/np.minimum and a scalar ``value``
    (cast to x's dtype first, as numpy casts a Python scalar), bit for bit, computed
    against a row of ``value`` when x and out are contiguous arrays of one shape.
    ``out`` may be x itself."""
    n = x.size
    if n < _MIN_SIZE or not (x.flags.c_contiguous and out.flags.c_contiguous):
        rows = _strided_rows(x, out)
        if rows is not None:
            # numpy's loop against a stride-0 scalar does not vectorize; against a row
            # it does (a sliced TCN activation, 4 x 64 x 256 of a 258-wide buffer: 59
            # -> 30 us)
            ufunc(rows, _row(x.dtype, value)[: rows.shape[1]], out=out.reshape(rows.shape))
            return out
        return ufunc(x, np.asarray(value).astype(x.dtype), out=out)  # type: ignore[no-any-return]
    if x.shape != out.shape:
        raise ValueError(f"bounded_into: shapes {x.shape} and {out.shape} differ")
    row = _row(x.dtype, value)
    flat, dest = x.reshape(-1), out.reshape(-1)
    whole = n - n % _ROW
    if whole:
        ufunc(flat[:whole].reshape(-1, _ROW), row, out=dest[:whole].reshape(-1, _ROW))
    if whole < n:
        ufunc(flat[whole:], row[: n - whole], out=dest[whole:])
    return out


# Shortest last axis `bounded_into` runs row by row on a strided x (below it the outer
# loop's per-row cost outweighs the vector loop).
_MIN_STRIDED_ROW = 64


def _strided_rows(x: Array, out: Array) -> Array | None:
    """x as a 2-D view of its last axis when that axis is contiguous and long and the
    others merge into one stride (a view sliced along its last axis: a causal conv's cut
    output), for a contiguous ``out`` of x's shape; None otherwise (never a copy)."""
    if (
        x.ndim < 2
        or x.size < _MIN_SIZE
        or not out.flags.c_contiguous
        or x.shape != out.shape
        or x.strides[-1] != x.itemsize
        or not _MIN_STRIDED_ROW <= x.shape[-1] <= _ROW
    ):
        return None
    rows = x.view()
    try:
        rows.shape = (-1, x.shape[-1])  # raises where only a copy could give that shape
    except AttributeError:
        return None
    return rows


def relu_into(x: Array, out: Array) -> Array:
    """max(x, 0) into ``out`` (may be x), bit for bit np.maximum(x, 0): NaN kept,
    -0 -> +0."""
    return bounded_into(np.maximum, x, 0, out)


def select(cond: Array, a: Array, b: Array | None) -> Array:
    """np.where(cond, a, b) (b None: zeros) bit for bit, for float32 ``a``/``b`` of
    cond's shape: the bits picked with integer masks.  numpy's where and masked copyto
    branch per element and run 8-9x slower on the random masks activations give (200k
    float32: 745 us against 82 us).  Anything else goes to np.where."""
    if (
        a.dtype == np.float32
        and (b is None or (b.dtype == a.dtype and b.shape == a.shape))
        and a.shape == cond.shape
        and cond.dtype == np.bool_
        and a.size >= _MIN_SIZE
    ):
        m = np.ascontiguousarray(cond).astype(np.int32)
        np.negative(m, out=m)  # 0 or all ones
        ab = np.ascontiguousarray(a).view(np.int32)
        if b is None:
            m &= ab
            return m.view(np.float32)
        bb = np.ascontiguousarray(b).view(np.int32)
        out = np.bitwise_xor(ab, bb)
        out &= m
        out ^= bb  # a where m is all ones, b where it is 0
        return out.view(np.float32)
    return np.where(cond, a, 0.0 if b is None else b)  # type: ignore[no-any-return]


def sigmoid_f(x: Array) -> Array:
    """1 / (1 + exp(-x)) in a fresh array; exp overflow for very negative x gives the
    correct limit 0, so no branch is needed."""
    return sigmoid_into(x, np.empty(x.shape, dtype=x.dtype))


# Sigmoid of float32 by the compiled chain's one Sigmoid step (vector_math.h's sigmoid:
# e^-|x| never overflows, within 3 ulp: tests/runtime/test_native_chain.py), so a fused
# chain with a Sigmoid step (a SiLU: x * sigmoid(x)) gives the stepped run's bits.
_SIGMOID = chain_program.program([("Sigmoid", chain_program.NONE, True, 0.0)])


def sigmoid_into(x: Array, out: Array) -> Array:
    """sigmoid_f into ``out`` (may be x: the in-place Sigmoid): float32 by the compiled
    chain (contiguous buffers), else the numpy steps."""
    chain = chain_program.CHAIN
    if chain is not None and x.dtype == _F32 and out.dtype == _F32 and out.flags.c_contiguous:
        if x.size:  # (another layout read through one contiguous copy: the same values)
            chain.run(np.ascontiguousarray(x), out, _SIGMOID)
        return out
    t = np.negative(x, out=out)
    with np.errstate(over="ignore"):
        np.exp(t, out=t)
    t += 1
    # 1 / t as a division by the scalar: the same correctly rounded quotient as
    # np.reciprocal, whose loop numpy 2.4 does not vectorise (400k float32: 36 us
    # against 63 us).
    np.divide(1.0, t, out=t)
    return t


@kernel("Relu", since=(1, 6, 13, 14))
def relu(x: Array, **_legacy: Any) -> Array:
    if x.dtype in ML_FLOATS:
        return _relu_wide(x)
    if x.size < _MIN_SIZE or x.dtype.kind == "b" or x.dtype == np.float16:
        # float16: the row does not pay (the loop is the cost); asarray: 0-d stays an array
        return np.asarray(np.maximum(x, 0))
    return relu_into(x, np.empty(x.shape, dtype=x.dtype))


@_in_float32
def _relu_wide(x: Array) -> Array:
    return relu_into(x, np.empty(x.shape, dtype=x.dtype))


@specializer(relu)
def _prepared_relu(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs: a float32 C-contiguous Relu by the compiled chain's Relu step from
    the node loop (chain_program.held_unary: np.maximum(x, 0)'s bits, NaN kept and -0 to
    +0, as relu_into); other calls run the kernel.  A Relu no conv chain absorbs
    (ShuffleNet's after each channel Concat, 136 x 28 x 28) took 52 us through the
    kernel's row-wise maximum, onnxruntime 25."""
    if attrs:  # opset 1's consumed_inputs
        return None
    return chain_program.held_unary("Relu", relu)


@kernel("LeakyRelu", since=(1, 6, 16))
@_in_float32
def leaky_relu(x: Array, alpha: float = 0.01, **_legacy: Any) -> Array:
    # x if x >= 0 else alpha*x is max(x, alpha*x) for alpha <= 1 and min(...) above 1:
    # two passes and one allocation instead of a mask and a select.
    out = x * float(alpha)
    (np.maximum if alpha <= 1.0 else np.minimum)(out, x, out=out)
    return out


def leaky_relu_in_place(x: Array, alpha: float) -> Array:
    """The LeakyRelu kernel's steps, in its operand order (the same bits), in place on a
    float32/float64 array nobody else holds (a fused conv's fresh output)."""
    tmp = scratch("leaky_relu", x.shape, x.dtype)  # no page faults for a fresh temporary
    np.multiply(x, float(alpha), out=tmp)
    (np.maximum if alpha <= 1.0 else np.minimum)(tmp, x, out=x)
    return x


@kernel("Elu", since=(1, 6, 22))
@_in_float32
def elu(x: Array, alpha: float = 1.0, **_legacy: Any) -> Array:
    x = np.asarray(x)
    out = bounded_into(np.minimum, x, 0, np.empty(x.shape, dtype=x.dtype))
    np.expm1(out, out=out)
    out *= float(alpha)
    return select(x >= 0, x, out)


@kernel("Selu", since=(1, 6, 22))
@_in_float32
def selu(
    x: Array,
    alpha: float = 1.67326319217681884765625,
    gamma: float = 1.05070102214813232421875,
    **_legacy: Any,
) -> Array:
    x = np.asarray(x)
    neg = bounded_into(np.minimum, x, 0, np.empty(x.shape, dtype=x.dtype))
    np.expm1(neg, out=neg)
    neg *= float(alpha)
    out = select(x > 0, x, neg)
    out *= float(gamma)
    return out


@kernel("Celu", since=(12, 28))
@_in_float32
def celu(x: Array, alpha: float = 1.0) -> Array:
    x = np.asarray(x)
    neg = np.asarray(np.expm1(x / float(alpha)))  # asarray: 0-d results are scalars
    neg *= float(alpha)
    bounded_into(np.minimum, neg, 0, neg)
    pos = relu_into(x, np.empty(x.shape, dtype=x.dtype))
    pos += neg  # max(x, 0) + min(...): the sum's operands in the spec's order
    return pos


@kernel("ThresholdedRelu", since=(10, 22))
@_in_float32
def thresholded_relu(x: Array, alpha: float = 1.0) -> Array:
    return select(x > float(alpha), x, None)


@kernel("HardSigmoid", since=(1, 6, 22))
@_in_float32
def hard_sigmoid(x: Array, alpha: float = 0.2, beta: float = 0.5, **_legacy: Any) -> Array:
    out = x * float(alpha)
    out += float(beta)
    return np.clip(out, 0, 1, out=out)


@kernel("HardSwish", since=(14, 22))
@_in_float32
def hard_swish(x: Array) -> Array:
    if x.dtype == np.float32 and x.size:
        module = native.load("activation")
        if module is not None:
            # The same four steps in one compiled pass (native/_activation.c, code 3) over
            # a copy in x's own layout (a channels-last value stays so; a QDQ
            # MobileNetV3's standalone HardSwishes, 96 x 28 x 28: 46 -> 20 us).
            out = np.copy(x, order="K")
            dense = out if out.flags.c_contiguous else out.transpose(0, 2, 3, 1)
            if dense.flags.c_contiguous:
                module.activate(dense, 3, math.nan, math.nan)
                return out
    gate = x * (1.0 / 6.0)
    gate += 0.5
    np.clip(gate, 0, 1, out=gate)
    gate *= x
    return gate


@kernel("Sigmoid", since=(1, 6, 13))
@_in_float32
def sigmoid(x: Array, **_legacy: Any) -> Array:
    return sigmoid_f(x)


@specializer(sigmoid)
def _prepared_sigmoid(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs: float32/64 through sigmoid_into's steps without the wrappers and
    the error-state switch (unwatched runs are under np.errstate(all="ignore") already):
    a decoder's SiLU gates are small, where those were half of a 5 us call."""
    if attrs:  # opset 1's consumed_inputs
        return None

    def call(x: Any) -> Any:
        if type(x) is not np.ndarray or (x.dtype != _F32 and x.dtype != _F64) or not x.ndim:
            return sigmoid(x)  # (a 0-d array's negative would be a numpy scalar)
        if x.dtype == _F32 and chain_program.CHAIN is not None:
            return sigmoid_into(x, np.empty(x.shape, dtype=_F32))
        t = np.negative(x)
        np.exp(t, out=t)
        t += 1
        np.divide(1.0, t, out=t)
        return t

    # A float32 C-contiguous array by the compiled Sigmoid step from the node loop
    # (chain_program.held_unary: sigmoid_into's program, so its bits), the rest above.
    return chain_program.held_unary("Sigmoid", call) or call


def softplus_f(x: Array) -> Array:
    """log(1 + exp(x)) without overflow, as max(x, 0) + log1p(exp(-|x|)) in a fresh
    array.  np.logaddexp(0, x) gives the same to an ulp but runs an unvectorised loop
    (200k float32: 2.3-3.4 ms against about 0.25 ms here); log1p's argument is in
    (0, 1], where numpy's float32 log1p is its fast vectorised loop.  NaN stays NaN,
    +inf gives +inf, -inf gives 0."""
    t = np.abs(x)
    np.negative(t, out=t)
    np.exp(t, out=t)
    np.log1p(t, out=t)
    out = np.empty(x.shape, dtype=x.dtype)
    relu_into(x, out)
    out += t
    return out


@kernel("Softplus", since=(1, 22))
@_in_float32
def softplus(x: Array) -> Array:
    return softplus_f(np.asarray(x))


@kernel("Softsign", since=(1, 22))
@_in_float32
def softsign(x: Array) -> Array:
    d = np.abs(x)
    d += 1
    return np.divide(x, d, out=d)


@kernel("Mish", since=(18, 22))
@_in_float32
def mish(x: Array) -> Array:
    out = softplus_f(np.asarray(x))
    np.tanh(out, out=out)
    out *= x
    return out


@kernel("Swish", since=24)
@_in_float32
def swish(x: Array, alpha: float = 1.0) -> Array:
    out = sigmoid_f(x * float(alpha)) if alpha != 1.0 else sigmoid_f(x)
    out *= x
    return out


@kernel("SwiGLU", since=28)
def swiglu(a: Array, b: Array, alpha: float = 1.0) -> Array:
    dt = a.dtype
    gate = swish(widen(a), alpha=alpha)
    gate *= widen(b)
    return gate if gate.dtype == dt else gate.astype(dt)


# Gelu (approximate "none") as the compiled chain's program: the numpy steps below, in
# their order and float32 roundings (the constant is 1/sqrt(2) rounded to float32, as
# numpy rounds the Python float), in one pass instead of five.
GELU_ERF = chain_program.program(
    [
        ("Mul", chain_program.SCALAR, True, 1.0 / math.sqrt(2.0)),
        ("Erf", chain_program.NONE, True, 0.0),
        ("Add", chain_program.SCALAR, True, 1.0),
        ("Mul", chain_program.INPUT, True, 0.0),
        ("Mul", chain_program.SCALAR, True, 0.5),
    ]
)


# approximate "tanh" likewise: the steps below in their order (x * x, * 0.044715, + 1,
# * x, * sqrt(2 / pi), tanh, + 1, * x, * 0.5), the chain's Tanh being the Tanh kernel's.
_GELU_TANH = chain_program.program(
    [
        ("Mul", chain_program.INPUT, True, 0.0),
        ("Mul", chain_program.SCALAR, True, 0.044715),
        ("Add", chain_program.SCALAR, True, 1.0),
        ("Mul", chain_program.INPUT, True, 0.0),
        ("Mul", chain_program.SCALAR, True, math.sqrt(2.0 / math.pi)),
        ("Tanh", chain_program.NONE, True, 0.0),
        ("Add", chain_program.SCALAR, True, 1.0),
        ("Mul", chain_program.INPUT, True, 0.0),
        ("Mul", chain_program.SCALAR, True, 0.5),
    ]
)


def gelu_erf_in_place(x: Array) -> bool:
    """Gelu (approximate "none") over a C-contiguous float32 ``x`` in place by the
    compiled pass, the Gelu kernel's numbers; False (x untouched) when it cannot run
    (compiled kernels off, another dtype or layout).  For callers whose input is a fresh
    array of their own (BiasGelu's sum), which then skip the kernel's output array."""
    chain = chain_program.CHAIN
    if chain is None or x.dtype != np.float32 or not x.flags.c_contiguous:
        return False
    chain.run(x, x, GELU_ERF)
    return True


@kernel("Gelu", since=20)
@_in_float32
def gelu(x: Array, approximate: str = "none") -> Array:
    if x.dtype == np.float32 and chain_program.CHAIN is not None:
        src = dense(x) if x.ndim else np.ascontiguousarray(x)
        out = np.empty(src.shape, np.float32)
        chain_program.CHAIN.run(src, out, _GELU_TANH if approximate == "tanh" else GELU_ERF)
        return out
    if approximate == "tanh":  # (float64, or the compiled kernels off)
        inner = x * x
        inner *= 0.044715
        inner += 1
        inner *= x
        inner *= math.sqrt(2.0 / math.pi)
        out = np.tanh(inner, out=inner)
    else:
        out = erf(x * (1.0 / math.sqrt(2.0)))
    out += 1
    out *= x
    out *= 0.5
    return out


@specializer(gelu)
def _held_gelu(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs: the kernel's compiled pass held in C from the node loop (the
    chain's held call: a float32 array of at least one axis, C-contiguous or one dense
    buffer in another axis order, into empty_like's array of its layout), any other call
    the kernel.  The same program over the same values, so the kernel's bits; a decoder's
    3 x 128 values took 2.2 us through the kernel's layers, 0.7 held."""
    chain = chain_program.CHAIN
    approximate = attrs.get("approximate", "none")
    if chain is None or approximate not in ("none", "tanh"):
        return None
    program = _GELU_TANH if approximate == "tanh" else GELU_ERF
    return chain.held(program, (), 1, functools.partial(gelu, **attrs), np.ndarray, np.empty_like)


@kernel("Shrink", since=9)
def shrink(x: Array, bias: float = 0.0, lambd: float = 0.5) -> Array:
    dt = x.dtype
    w = widen(x)
    if w.dtype.kind == "f":
        inner = select(w > float(lambd), w - float(bias), None)
        out = select(w < -float(lambd), w + float(bias), inner)
    else:  # integer inputs: compare and shift in float64, results are whole numbers
        f = w.astype(np.float64)
        out = np.where(f < -lambd, f + bias, np.where(f > lambd, f - bias, 0.0))
    return out.astype(dt, copy=False)


@kernel("PRelu", since=(1, 6))
def prelu_legacy(x: Array, slope: Array, **_legacy: Any) -> Array:
    # Before opset 7 a per-channel slope of shape (C,) applied to N x C x ... inputs.
    if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1] and slope.size > 1:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
    return prelu(x, slope)


@kernel("PRelu", since=(7, 9, 16))
def prelu(x: Array, slope: Array) -> Array:
    dt = x.dtype
    w, s = widen(x), widen(slope)
    scaled = w * s
    out = select(w < 0, scaled, w) if scaled.shape == w.shape else np.where(w < 0, scaled, w)
    return out if out.dtype == dt else out.astype(dt)


@kernel("Clip", since=(1, 6))
def clip_legacy(
    x: Array, min: float | None = None, max: float | None = None, **_legacy: Any
) -> Array:
    return _clip(x, min, max)


@kernel("Clip", since=(11, 12, 13))
def clip(x: Array, min: Array | None = None, max: Array | None = None) -> Array:
    return _clip(x, min, max)


def _clip(x: Array, lo: Any, hi: Any) -> Array:
    """max(x, lo) then min(., hi): when lo > hi every value becomes hi, as the spec says."""
    if lo is None and hi is None:
        return x  # nothing to clip: the input itself, no copy
    dt = x.dtype
    w = widen(x)
    out: Array | None = None
    for ufunc, bound in ((np.maximum, lo), (np.minimum, hi)):
        if bound is None:
            continue
        b = np.asarray(bound).astype(w.dtype)
        src = w if out is None else out
        if b.size == 1 and b.ndim <= w.ndim:  # the result keeps x's shape
            if out is None:
                out = np.empty(w.shape, dtype=w.dtype)
            bounded_into(ufunc, src, b.reshape(()), out)
        elif out is None:
            # asarray: on 0-d inputs numpy returns a scalar, not an `out=` target.
            out = np.asarray(ufunc(src, b))
        else:
            ufunc(out, b, out=out)
    assert out is not None
    return out if out.dtype == dt else out.astype(dt)


def clip_into(x: Array, lo: Any, hi: Any, out: Array) -> Array:
    """The Clip kernel's max-then-min with scalar bounds (None: no bound) into ``out``
    (may be x), bit for bit."""
    src = x
    if lo is not None:
        src = bounded_into(np.maximum, src, lo, out)
    if hi is not None:
        src = bounded_into(np.minimum, src, hi, out)
    if src is not out:
        np.copyto(out, src)
    return out
