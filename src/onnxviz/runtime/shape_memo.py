"""Shape arithmetic kept between runs, for the node lists of unwatched runs.

Exporters compute shapes at run time: a TorchScript LSTM builds each initial state
from ``Shape(x) -> Gather -> Unsqueeze -> Concat -> Expand`` (five such chains in a
two-layer LSTM + GRU model), a GPT-2 its Reshape targets the same way.  Their values
depend only on the input's shape, which is the same run after run, yet each node cost
2-6 us a run, a third of a one-step recurrent model's time (issue 21).

`memo_slots` finds, once per node list, the nodes that may compute shape arithmetic:
Shape and Size (of anything), and the pure ops of `MEMO_OPS` whose every input is a
constant (an initializer, a folded node's output) or such a node's output.  Their calls
are wrapped:

* Shape and Size keep one read-only result per input shape (of at most `MAX_ELEMENTS`
  values, as the others);
* a `MEMO_OPS` node, when every input is a read-only array that owns its data or views
  a read-only one (a constant, a kept result), keeps its result keyed by the identity
  of its inputs (which the cache keeps alive, so an identity is never reused), read-only;
  anything else (a fed initializer of an IR 3 model, a view of a live value) computes.

With the compiled loop built, the second wrapper is its module's `memo` (native/
_runloop.c: the same rule in C, `_settle` deciding what is kept).

Results are small (at most `MAX_ELEMENTS`), a node keeps at most `ENTRIES` of them, and
the Session hands out copies of read-only graph outputs, so nobody can change a kept
result.  Stepped runs never take these calls: the differential tests compare the two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime import quiet_loop

if TYPE_CHECKING:
    from onnxviz.runtime.plan import PlanNode

# Pure, deterministic ops of the default domain that shape arithmetic uses.
MEMO_OPS = frozenset(
    {
        "Abs", "Add", "And", "Cast", "CastLike", "Ceil", "Concat", "ConstantOfShape",
        "Div", "Equal", "Expand", "Flatten", "Floor", "Gather", "GatherElements",
        "Greater", "GreaterOrEqual", "Identity", "Less", "LessOrEqual", "Max", "Min",
        "Mod", "Mul", "Neg", "Not", "Or", "Range", "ReduceMax", "ReduceMin", "ReduceProd",
        "ReduceSum", "Reshape", "Sign", "Slice", "Sqrt", "Squeeze", "Sub", "Tile",
        "Transpose", "Unsqueeze", "Where",
    }
)  # fmt: skip
SHAPE_OPS = frozenset({"Shape", "Size"})
MAX_ELEMENTS = 1 << 16
ENTRIES = 8

_ND = np.ndarray


def memo_slots(nodes: Sequence[PlanNode], constants: dict[int, Any]) -> set[int]:
    """Positions in ``nodes`` of the nodes whose calls `wrap` may keep results of."""
    known = set(constants)
    chosen: set[int] = set()
    for i, pn in enumerate(nodes):
        if pn.kind != "kernel" or pn.domain != "" or len(pn.outputs) != 1:
            if pn.foldable:
                known.update(s for s in pn.outputs if s >= 0)
            continue
        if pn.foldable:
            known.update(s for s in pn.outputs if s >= 0)
            continue
        if pn.op_type in SHAPE_OPS or (
            pn.op_type in MEMO_OPS and all(s < 0 or s in known for s in pn.inputs)
        ):
            chosen.add(i)
            known.update(s for s in pn.outputs if s >= 0)
    return chosen


def wrap(op_type: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (the node's call) keeping its results as the module docstring says."""
    if op_type in SHAPE_OPS:
        return _by_shape(fn)
    return _by_inputs(fn)


def _by_shape(fn: Callable[..., Any]) -> Callable[..., Any]:
    # In C with the compiled loop (its `memo_shape`): the Python wrapper cost 0.3 us of
    # each of a GPT-2 decode step's 50 Shape nodes.
    module = quiet_loop.loop()
    if module is not None:
        return module.memo_shape(fn, _settle, ENTRIES)  # type: ignore[no-any-return]
    return _by_shape_python(fn)


def _by_shape_python(fn: Callable[..., Any]) -> Callable[..., Any]:
    kept: dict[tuple[int, ...], Any] = {}

    def by_shape(x: Any) -> Any:
        if type(x) is not _ND:
            return fn(x)
        hit = kept.get(x.shape)
        if hit is None:
            hit = fn(x)
            if type(hit) is not _ND:
                return hit
            hit.flags.writeable = False
            if len(kept) >= ENTRIES:
                kept.clear()
            kept[x.shape] = hit
        return hit

    return by_shape


def _frozen(x: Any) -> bool:
    """A read-only array whose data nobody can change: it owns it, or views read-only."""
    if type(x) is not _ND or x.flags.writeable:
        return False
    base = x.base
    return base is None or (type(base) is _ND and not base.flags.writeable)


def _settle(out: Any) -> tuple[Any, bool]:
    """A computed result as kept: (the result, read-only when small, whether it may be
    kept: a small read-only array nobody can change)."""
    if isinstance(out, np.generic):  # a kernel's numpy scalar: the array it stands for
        out = np.asarray(out)
    if type(out) is _ND and out.size <= MAX_ELEMENTS:
        out.flags.writeable = False
        return out, _frozen(out)
    return out, False


def _by_inputs(fn: Callable[..., Any]) -> Callable[..., Any]:
    # The compiled loop's module keeps results in C (native/_runloop.c's `memo`), the
    # same rule: the Python wrapper's checks were most of such a node's cost.
    module = quiet_loop.loop()
    if module is not None:
        return module.memo(fn, _settle, ENTRIES)  # type: ignore[no-any-return]
    return _by_inputs_python(fn)


def _by_inputs_python(fn: Callable[..., Any]) -> Callable[..., Any]:
    kept: dict[tuple[int, ...], tuple[Any, tuple[Any, ...]]] = {}

    def by_inputs(*ins: Any) -> Any:
        for x in ins:
            if x is not None and not _frozen(x):
                return fn(*ins)
        key = tuple(map(id, ins))
        hit = kept.get(key)
        if hit is not None:
            return hit[0]
        out, keep = _settle(fn(*ins))
        if keep:
            if len(kept) >= ENTRIES:
                kept.clear()
            kept[key] = (out, ins)  # the inputs kept alive: their ids stay theirs
        return out

    return by_inputs
