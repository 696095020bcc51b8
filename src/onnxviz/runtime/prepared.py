"""Prepared calls: what the node loop needs per node, worked out once per node list.

The executor's loop (executor.py) runs a list of `PlanNode`; the per-node work it
does beyond the kernel is the engine's fixed cost, which dominates small models and
long chains of small ops (issue 21's add-chain benchmark).  `prepare` fills, for every
node of a list:

* ``gather``: values -> the node's inputs, read from resolved slot indices by a C-level
  ``operator.itemgetter`` where it can (absent optional inputs give None);
* ``out0``: the slot of a single-output node's output (-1 otherwise), written without
  a loop over outputs;
* ``call``: for a plain kernel (no context) with one output, a positional callable with
  the node's pre-decoded attributes bound, so the loop calls ``call(*ins)``;
* ``call_many``: for a plain kernel of several outputs with a specialized call (below),
  that call, which returns the list of outputs.

For node lists of unwatched runs (``fast=True``, fusion.run_nodes) the binary
arithmetic ops Add, Sub, Mul (float32/64, int32/64) and Div (float32/64), and the
comparisons Less, LessOrEqual, Equal, Greater and GreaterOrEqual (the same four dtypes),
get a shortcut that applies numpy's operator when both inputs are arrays of one of
those dtypes (what the kernel computes for them: the same ufunc, no casts) and calls
the kernel otherwise.  Stepped runs always call the kernel, so the differential tests
compare the two.

Also for unwatched runs, a kernel with a registered specializer (registry.specializer)
gets the call its maker returns for the node's attributes and constant inputs: per-call
work on constants (a dequantized weight, a dtype resolved from an attribute) is done
once per node list, and the call falls back to the kernel for anything else.

Also for unwatched runs, the nodes that compute shape arithmetic (Shape, and pure ops
of constants and shapes) keep their results between runs (shape_memo.py).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime import quiet_loop, shape_memo
from onnxviz.runtime.registry import RUNTIME, KernelContext, no_generator, specializer_of

if TYPE_CHECKING:
    from onnxviz.runtime.plan import PlanNode

_ND = np.ndarray
_ARITH = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))
_FLOAT = frozenset(np.dtype(t) for t in (np.float32, np.float64))


def _no_inputs(values: list[Any]) -> tuple[()]:
    return ()


def _gather(slots: tuple[int, ...]) -> Callable[[list[Any]], Any]:
    """values -> the inputs at ``slots`` (None for -1), as a sequence."""
    if not slots:
        return _no_inputs
    if any(s < 0 for s in slots):
        return lambda values: [values[s] if s >= 0 else None for s in slots]
    if len(slots) == 1:
        s = slots[0]
        return operator.itemgetter(slice(s, s + 1))  # a one-item list
    return operator.itemgetter(*slots)  # a tuple


def _shortcut(
    name: str, operation: Callable[[Any, Any], Any], dtypes: frozenset[np.dtype]
) -> Callable[..., Any]:
    """The Python shortcut ``name`` of a node whose kernel is ``kernel``: ``operation``
    (numpy's operator) on two arrays of one dtype object of ``dtypes``, the kernel for
    anything else."""

    def maker(kernel: Callable[..., Any]) -> Callable[..., Any]:
        def call(a: Any, b: Any) -> Any:
            if type(a) is _ND and type(b) is _ND and a.dtype is b.dtype and a.dtype in dtypes:
                return operation(a, b)
            return kernel(a, b)

        call.__name__ = name
        return call

    return maker


# op type -> (numpy's operator, the compiled call's op code, the dtypes it takes)
_FAST_BINARY: dict[str, tuple[Callable[[Any, Any], Any], int, frozenset[np.dtype]]] = {
    "Add": (operator.add, 0, _ARITH),
    "Sub": (operator.sub, 1, _ARITH),
    "Mul": (operator.mul, 2, _ARITH),
    # Integer Div truncates toward zero in the kernel; numpy's / would give floats.
    "Div": (operator.truediv, 3, _FLOAT),
    # (the kernel's Python frames and asarray were 1 us of a 0.3 us comparison: a Loop's
    # condition, a mask)
    "Less": (np.less, 4, _ARITH),
    "LessOrEqual": (np.less_equal, 5, _ARITH),
    "Equal": (np.equal, 6, _ARITH),
    "Greater": (np.greater, 7, _ARITH),
    "GreaterOrEqual": (np.greater_equal, 8, _ARITH),
}


def _fast_binary(op_type: str, kernel: Callable[..., Any]) -> Callable[..., Any] | None:
    """The shortcut of an arithmetic node (module docstring): the compiled loop's
    ``binary`` call when it is built (native/_runloop.c: the same check and the same
    numpy operator in C; the Python function's frame and checks were half of a small
    Add's time), else the Python function; None for another op."""
    entry = _FAST_BINARY.get(op_type)
    if entry is None:
        return None
    operation, code, dtypes = entry
    module = quiet_loop.loop()
    if module is not None:
        return module.binary(code, tuple(dtypes), kernel)  # type: ignore[no-any-return]
    return _shortcut(op_type.lower(), operation, dtypes)(kernel)  # type: ignore[no-any-return]


def _special(pn: PlanNode, constants: dict[int, Any]) -> Callable[..., Any] | None:
    """The specializer's call for a kernel node (registry.specializer), or None.  A
    context kernel's maker gets the node's context, made here once."""
    spec = pn.spec
    if pn.kind != "kernel" or spec is None:
        return None
    specialize = specializer_of(spec.fn)
    if specialize is None:
        return None
    known = tuple(None if s < 0 else constants.get(s, RUNTIME) for s in pn.inputs)
    try:
        if spec.needs_ctx:
            ctx = KernelContext(
                len(pn.outputs), pn.opset, pn.node.name, no_generator, pn.output_names
            )
            return specialize(pn.attrs, known, len(pn.outputs), ctx)
        return specialize(pn.attrs, known, len(pn.outputs))
    except Exception:  # a node its maker cannot read (a missing attribute): the kernel
        return None  # runs it, and says what is wrong when it does


def _call(
    pn: PlanNode, fast: bool, special: Callable[..., Any] | None
) -> Callable[..., Any] | None:
    spec = pn.spec
    if pn.kind != "kernel" or spec is None or len(pn.outputs) != 1:
        return None
    if special is not None:
        return special
    if spec.needs_ctx:
        return None
    fn: Callable[..., Any] = spec.fn
    if pn.attrs:
        fn = functools.partial(fn, **pn.attrs)
    if (
        fast
        and pn.domain == ""
        and pn.opset >= 7  # older binary ops had a broadcast attribute
        and len(pn.inputs) == 2
        and not pn.attrs
    ):
        fast_fn = _fast_binary(pn.op_type, fn)
        if fast_fn is not None:
            fn = fast_fn
    return fn


def prepare(nodes: list[PlanNode], *, fast: bool, constants: dict[int, Any] | None = None) -> None:
    """Fill ``gather``, ``out0`` and ``call`` of every node (see the module docstring);
    ``fast`` for the node lists of unwatched runs, ``constants`` their plan's
    initializers by slot (for the specializers)."""
    memo = shape_memo.memo_slots(nodes, constants) if fast and constants is not None else set()
    for i, pn in enumerate(nodes):
        pn.gather = _gather(pn.inputs)
        pn.out0 = pn.outputs[0] if len(pn.outputs) == 1 else -1
        special = _special(pn, constants) if fast and constants is not None else None
        pn.call = _call(pn, fast, special)
        if i in memo and pn.call is not None:
            pn.call = shape_memo.wrap(pn.op_type, pn.call)
        # A node of several outputs: its specialized call returns them all, a list.
        pn.call_many = special if len(pn.outputs) != 1 else None
        # The executor's short way: a plain call whose output is kept in its slot and
        # that no constant folding concerns.
        pn.plain = pn.call is not None and pn.out0 >= 0 and not pn.foldable
