"""Element-wise arithmetic kernels: unary math, binary arithmetic, variadic Max/Min/Sum/Mean.

Opset 1 nodes may carry ``consumed_inputs`` (a legacy in-place hint that never changes the
result); it is accepted and ignored.  Binary ops before opset 7 broadcast only with
``broadcast=1`` (see `math_common.legacy_broadcast`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels import chain_program
from onnxviz.runtime.kernels.math_common import (
    ML_FLOATS,
    ML_INTS,
    as_compute,
    float_unary,
    is_float,
    legacy_broadcast,
)
from onnxviz.runtime.kernels.math_erf import erf
from onnxviz.runtime.registry import kernel, specializer

Array = np.ndarray


# ---------------------------------------------------------------- unary math
def _register_unary(op: str, since: tuple[int, ...], fn: Callable[[Array], Array]) -> None:
    apply = float_unary(fn)

    def run(x: Array, **_legacy: Any) -> Array:
        return apply(x)

    run.__name__ = f"kernel_{op.lower()}"
    kernel(op, since=since)(run)
    if fn is _tanh:
        specializer(run)(_prepared_tanh(run))


def _prepared_tanh(run: Callable[..., Array]) -> Callable[..., Any]:
    """Unwatched runs: a float32 Tanh by the compiled chain's Tanh step called from the
    node loop (chain_program.held_unary: the kernel's bits without its Python layers);
    other calls run the kernel."""

    def prepare(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
        if attrs:  # opset 1's consumed_inputs
            return None
        return chain_program.held_unary("Tanh", run)

    return prepare


def _reciprocal(x: Array) -> Array:
    return np.reciprocal(x) if is_float(x.dtype) else np.floor_divide(1, x)


# Tanh of float32 by the compiled chain's one Tanh step (vector_math.h's tanh, within 2
# ulp of the exact value: tests/runtime/test_native_chain.py), so a fused chain with a
# Tanh step (a GPT-2's written-out tanh GELU) gives the stepped run's bits.
_TANH = chain_program.program([("Tanh", chain_program.NONE, True, 0.0)])


def _tanh(x: Array) -> Array:
    if chain_program.CHAIN is None or x.dtype != np.float32 or not x.size:
        return np.tanh(x)
    out = np.empty(x.shape, np.float32)
    tanh_into(x, out)
    return out


def tanh_into(x: Array, out: Array) -> None:
    """out = tanh(x) as the Tanh kernel computes it (out may be x): an elementwise
    chain's numpy block path takes its Tanh steps here."""
    chain = chain_program.CHAIN
    if chain is None or x.dtype != np.float32 or not out.flags.c_contiguous:
        np.tanh(x, out=out)
    elif x.size:  # (another layout read through one contiguous copy: the same values)
        chain.run(np.ascontiguousarray(x), out, _TANH)


_UNARY: list[tuple[str, tuple[int, ...], Callable[[Array], Array]]] = [
    ("Abs", (1, 6, 13), np.abs),
    ("Neg", (1, 6, 13), np.negative),
    ("Ceil", (1, 6, 13), np.ceil),
    ("Floor", (1, 6, 13), np.floor),
    ("Round", (11, 22), np.rint),  # rint rounds halves to even, as the spec asks
    ("Sign", (9, 13), np.sign),
    ("Exp", (1, 6, 13), np.exp),
    ("Log", (1, 6, 13), np.log),
    ("Sqrt", (1, 6, 13), np.sqrt),
    ("Reciprocal", (1, 6, 13), _reciprocal),
    ("Tanh", (1, 6, 13), _tanh),
    ("Erf", (9, 13), erf),
    ("Sin", (7, 22), np.sin),
    ("Cos", (7, 22), np.cos),
    ("Tan", (7, 22), np.tan),
    ("Asin", (7, 22), np.arcsin),
    ("Acos", (7, 22), np.arccos),
    ("Atan", (7, 22), np.arctan),
    ("Sinh", (9, 22), np.sinh),
    ("Cosh", (9, 22), np.cosh),
    ("Asinh", (9, 22), np.arcsinh),
    ("Acosh", (9, 22), np.arccosh),
    ("Atanh", (9, 22), np.arctanh),
]

for _op, _since, _fn in _UNARY:
    _register_unary(_op, _since, _fn)


@kernel("IsNaN", since=(9, 13, 20))
def is_nan(x: Array) -> Array:
    return np.isnan(as_compute(x))


@kernel("IsInf", since=(10, 20))
def is_inf(x: Array, detect_negative: int = 1, detect_positive: int = 1) -> Array:
    x = as_compute(x)
    if x.dtype.kind != "f":
        return np.zeros(x.shape, dtype=bool)
    if detect_negative and detect_positive:
        return np.isinf(x)
    if detect_positive:
        return np.isposinf(x)
    if detect_negative:
        return np.isneginf(x)
    return np.zeros(x.shape, dtype=bool)


# ---------------------------------------------------------------- binary arithmetic
def _same_type(fn: Callable[[Array, Array], Array]) -> Callable[[Array, Array], Array]:
    """Run ``fn`` in the compute dtype of A and give the result A's dtype."""

    def apply(a: Array, b: Array) -> Array:
        dt = a.dtype
        if dt in ML_FLOATS or dt in ML_INTS:
            return np.asarray(fn(as_compute(a), as_compute(b))).astype(dt)
        if b.dtype != dt:
            b = b.astype(dt)
        out = np.asarray(fn(a, b))
        return out if out.dtype == dt else out.astype(dt)

    return apply


def _divide(a: Array, b: Array) -> Array:
    if a.dtype.kind == "f":
        return np.divide(a, b)
    # Integer division truncates toward zero (C semantics, as runtimes implement it);
    # a - fmod(a, b) is an exact multiple of b, so floor division is exact there.
    # Division by zero is undefined by the spec; numpy yields 0 without trapping.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if a.dtype.kind == "u":
            return np.floor_divide(a, b)
        return np.floor_divide(a - np.fmod(a, b), b)


_BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "Add": _same_type(np.add),
    "Sub": _same_type(np.subtract),
    "Mul": _same_type(np.multiply),
    "Div": _same_type(_divide),
}


def _register_binary(op: str, fn: Callable[[Array, Array], Array]) -> None:
    def legacy(
        a: Array, b: Array, broadcast: int = 0, axis: int | None = None, **_legacy: Any
    ) -> Array:
        return fn(a, legacy_broadcast(a, b, broadcast, axis))

    def modern(a: Array, b: Array) -> Array:
        return fn(a, b)

    legacy.__name__ = f"kernel_{op.lower()}_legacy"
    modern.__name__ = f"kernel_{op.lower()}"
    kernel(op, since=(1, 6))(legacy)
    kernel(op, since=(7, 13, 14))(modern)


for _op, _fn2 in _BINARY.items():
    _register_binary(_op, _fn2)


def small_power(b: Array, base_ndim: int) -> int:
    """2 or 3 when the exponent ``b`` is that one value and adds no axis to the base's
    shape, else 0: the exponents `float_power` multiplies out (and the compiled chain's
    SQUARE and CUBE steps, fusion_elementwise)."""
    if b.size != 1 or b.ndim > base_ndim or b.dtype.kind not in "fiu":
        return 0
    e = b.reshape(-1)[0]
    return int(e) if e == 2 or e == 3 else 0


def float_power(base: Array, exp: Array, out: Array | None = None) -> Array:
    """Pow of a float32/float64 base by an exponent of the base's dtype (or a scalar):
    x * x and x * x * x for an exponent of 2 and 3, as onnxruntime computes them (the
    cube's two roundings; pow's own result differs in the last bit for about a third of
    float32 values), and numpy's power otherwise.  Besides onnxruntime's bits, this avoids
    numpy's pow for a negative base, which takes SVML's slow path value by value: a
    GPT-2 GELU's x ** 3 over 24,576 floats took 1.6 ms, x * x * x 0.07."""
    small = small_power(np.asarray(exp), base.ndim)
    if small == 2:
        return np.multiply(base, base, out=out)
    if small == 3:
        square = np.multiply(base, base)
        return np.multiply(square, base, out=out if out is not None else square)
    return np.power(base, exp, out=out)


def _power(a: Array, b: Array) -> Array:
    """Pow: the result has the base's type T; the exponent's type T1 may differ."""
    dt = a.dtype
    if is_float(dt):
        # float16 in float32, rounded once at the end, as onnxruntime does (numpy's own
        # float16 power differed from it in a quarter of the cubes)
        base = a.astype(np.float32) if dt == np.float16 else as_compute(a)
        exp = b.astype(base.dtype) if b.dtype != base.dtype else b
        out = float_power(base, exp)
        return out if out.dtype == dt else out.astype(dt)
    # Integer base.  A float exponent, or a negative integer one (numpy refuses those),
    # is evaluated in double precision and truncated back to T.
    if b.dtype.kind == "f" or b.dtype in ML_FLOATS or (b.dtype.kind == "i" and (b < 0).any()):
        with np.errstate(all="ignore"):
            return np.power(a.astype(np.float64), as_compute(b).astype(np.float64)).astype(dt)
    return np.power(a, b.astype(dt) if b.dtype != dt else b)


@kernel("Pow", since=1)
def pow_legacy(a: Array, b: Array, broadcast: int = 0, axis: int | None = None) -> Array:
    return _power(a, legacy_broadcast(a, b, broadcast, axis))


@kernel("Pow", since=(7, 12, 13, 15))
def pow_(a: Array, b: Array) -> Array:
    return _power(a, b)


def _mod(a: Array, b: Array, fmod: int) -> Array:
    # fmod=0: A - floor(A/B)*B (sign of B); numpy's mod gives exactly the spec's special
    # cases (signed zero follows B, x mod ±inf gives x or B).  fmod=1: C fmod (sign of A).
    fn = np.fmod if fmod else np.mod
    with np.errstate(divide="ignore", invalid="ignore"):
        return _same_type(fn)(a, b)


@kernel("Mod", since=(10, 13, 28))
def mod(a: Array, b: Array, fmod: int = 0) -> Array:
    return _mod(a, b, fmod)


# ---------------------------------------------------------------- variadic
def _fold(fn: Any, arrays: tuple[Array, ...]) -> Array:
    """``fn`` applied pairwise over all inputs with numpy broadcasting, accumulating in
    place once the running result is a fresh array of the final shape."""
    if not arrays:
        raise ExecutionError("variadic operator needs at least one input")
    out = arrays[0]
    fresh = False
    for x in arrays[1:]:
        if fresh and np.broadcast_shapes(out.shape, x.shape) == out.shape:
            fn(out, x, out=out)
        else:
            out = fn(out, x)
            fresh = True
    return out


def _variadic(fn: Any, arrays: tuple[Array, ...]) -> Array:
    dt = arrays[0].dtype
    if dt in ML_FLOATS or dt in ML_INTS:
        return _fold(fn, tuple(as_compute(a) for a in arrays)).astype(dt)
    out = _fold(fn, arrays)
    return out if out.dtype == dt else out.astype(dt)


@kernel("Max", since=(1, 6, 8, 12, 13))
def max_(*inputs: Array, **_legacy: Any) -> Array:
    return _variadic(np.maximum, inputs)


@kernel("Min", since=(1, 6, 8, 12, 13))
def min_(*inputs: Array, **_legacy: Any) -> Array:
    return _variadic(np.minimum, inputs)


@kernel("Sum", since=(1, 6, 8, 13))
def sum_(*inputs: Array, **_legacy: Any) -> Array:
    return _variadic(np.add, inputs)


@kernel("Mean", since=(1, 6, 8, 13))
def mean(*inputs: Array, **_legacy: Any) -> Array:
    dt = inputs[0].dtype
    # float16 sums accumulate in float32 so the mean of many inputs keeps its precision.
    acc = np.dtype(np.float32) if dt == np.float16 or dt in ML_FLOATS else dt
    if len(inputs) == 1:
        return inputs[0]
    total = _fold(np.add, tuple(x.astype(acc, copy=False) for x in inputs))  # a fresh array
    np.divide(total, len(inputs), out=total)
    return total.astype(dt, copy=False)
