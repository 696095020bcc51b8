"""Kernel registry: which Python function runs (domain, op_type) at an opset version.

Kernels are plain functions registered with `@kernel`.  The interpreter resolves a
node with the ONNX rule "largest since_version <= the model's opset for that domain"
(`resolve`).  Calling convention, the contract every kernel module follows:

* positional arguments are the node's inputs in order: ``np.ndarray`` for tensors
  (string tensors are ``dtype=object`` arrays of ``str``), ``list`` for sequences,
  ``dict`` for maps, and ``None`` both for an absent optional input (empty name) and
  for an empty optional value; a variadic input arrives as several positionals;
* keyword arguments are the node's attributes, decoded (int, float, str, bytes never,
  list[int], list[float], list[str], np.ndarray for TENSOR, GraphProto for GRAPH,
  TypeProto for TYPE_PROTO) and defaulted from the operator schema; an optional
  attribute without a default and not given is simply not passed;
* a kernel registered with ``ctx=True`` gets a `KernelContext` as first argument
  (number of outputs the node asks for, random generator, opset, node name);
* the return value is one value (single-output op) or a tuple/list of values, one per
  output the node declares (trailing unused outputs may be returned as ``None``).

Kernels never loop over elements in Python on a hot path and never mutate inputs.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

KernelFn = Callable[..., Any]


@dataclass
class KernelContext:
    """What a kernel may need beyond inputs and attributes."""

    n_outputs: int = 1
    opset: int = 0
    node_name: str = ""
    # The run's random generator, or a function that makes it: made only when a kernel
    # draws (making one costs tens of microseconds, and most context kernels never do).
    rng_source: np.random.Generator | Callable[[], np.random.Generator] | None = None
    # Names of outputs the node really asks for ("" = not requested), same length as n_outputs.
    output_names: tuple[str, ...] = ()

    @property
    def rng(self) -> np.random.Generator:
        source = self.rng_source
        if isinstance(source, np.random.Generator):
            return source
        rng = source() if source is not None else np.random.default_rng(0)
        self.rng_source = rng
        return rng

    def wants_output(self, index: int) -> bool:
        return index < len(self.output_names) and self.output_names[index] != ""


@dataclass(frozen=True)
class KernelSpec:
    domain: str
    op_type: str
    since_version: int
    fn: KernelFn
    needs_ctx: bool = False


_REGISTRY: dict[tuple[str, str], list[KernelSpec]] = {}
_loaded = False

# "ai.onnx" is an alias of the default domain in models.
_DOMAIN_ALIASES = {"ai.onnx": ""}


def normalize_domain(domain: str) -> str:
    return _DOMAIN_ALIASES.get(domain, domain)


def kernel(
    op_type: str,
    *,
    domain: str = "",
    since: int | tuple[int, ...] = 1,
    ctx: bool = False,
) -> Callable[[KernelFn], KernelFn]:
    """Register ``fn`` for ``op_type`` from opset ``since`` on (several versions at once
    with a tuple).  A later registration with the same version replaces the earlier."""

    versions = (since,) if isinstance(since, int) else tuple(since)

    def register(fn: KernelFn) -> KernelFn:
        key = (normalize_domain(domain), op_type)
        specs = _REGISTRY.setdefault(key, [])
        for version in versions:
            specs[:] = [s for s in specs if s.since_version != version]
            specs.append(KernelSpec(key[0], op_type, version, fn, ctx))
        specs.sort(key=lambda s: s.since_version)
        return fn

    return register


# Specialised calls for unwatched runs (prepared.py): a kernel may register a maker that,
# given a node's decoded attributes, its inputs known when the run's node list is made
# (an initializer's array; RUNTIME for a value computed or fed at run time, None for an
# absent optional input) and its number of outputs, returns a positional callable
# taking the same inputs as the kernel (returning the output, or for several outputs
# the list of them, one per output), or None to keep the kernel.  The callable works
# out once what the kernel would work out on every call (a dequantized weight, a
# resolved dtype) and must give the kernel's numbers: it calls the kernel for anything
# it was not made for (an overridden initializer, another dtype).  Stepped runs always
# call the kernel, so the differential tests compare the two.  The maker of a kernel
# that takes a KernelContext gets a fourth argument, the node's context, made once: its
# generator cannot be used (`no_generator`), so kernels that draw register no maker.
class _Runtime:
    def __repr__(self) -> str:
        return "RUNTIME"


RUNTIME: Any = _Runtime()
Specializer = Callable[..., Callable[..., Any] | None]
_SPECIALIZERS: dict[KernelFn, Specializer] = {}


def specializer(fn: KernelFn) -> Callable[[Specializer], Specializer]:
    """Register the decorated maker for the kernel function ``fn`` (see above)."""

    def register(maker: Specializer) -> Specializer:
        _SPECIALIZERS[fn] = maker
        return maker

    return register


def specializer_of(fn: KernelFn) -> Specializer | None:
    return _SPECIALIZERS.get(fn)


def specialized_outputs(outs: Any, n: int) -> Any:
    """What a specialized call of a node of ``n`` outputs returns, from a kernel's
    result ``outs`` (a sequence): the output itself for one, else the list of ``n``
    (None for those ``outs`` lacks)."""
    if n == 1:
        return outs[0]
    if len(outs) == n:
        # The common case without the copies: a written-out GRU cell's Split (3 parts)
        # spent 0.5 of its 1.5 us here.  A list is the call's own (the specializers
        # build theirs per call); a tuple becomes one.
        return outs if type(outs) is list else list(outs)
    given = list(outs[:n])
    return given + [None] * (n - len(given))


def no_generator() -> np.random.Generator:
    """The generator source of a specialized call's context (see above)."""
    raise RuntimeError("a specialized call has no run generator: a kernel that draws has none")


def load_all_kernels() -> None:
    """Import every module of `onnxviz.runtime.kernels` so their decorators run.
    Kernel families live in their own modules; adding a module is enough."""
    global _loaded
    if _loaded:
        return
    from onnxviz.runtime import kernels

    for info in pkgutil.iter_modules(kernels.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{kernels.__name__}.{info.name}")
    _loaded = True


def resolve(domain: str, op_type: str, opset: int) -> KernelSpec | None:
    """The kernel with the largest since_version <= opset, or None."""
    load_all_kernels()
    specs = _REGISTRY.get((normalize_domain(domain), op_type))
    if not specs:
        return None
    best = None
    for spec in specs:
        if spec.since_version <= opset:
            best = spec
    return best


def registered() -> dict[tuple[str, str], list[KernelSpec]]:
    """Every registration, for coverage tests and reports."""
    load_all_kernels()
    return {k: list(v) for k, v in _REGISTRY.items()}
