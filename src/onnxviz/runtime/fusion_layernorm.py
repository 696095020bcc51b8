"""Layer normalisation written out node by node, run as one node in unwatched runs.

TorchScript exports (and older opsets, which have no LayerNormalization) write
``nn.LayerNorm`` as nine nodes over the last axis::

    m = ReduceMean(x)          d = Sub(x, m)          p = Pow(d, 2)  (or Mul(d, d))
    v = ReduceMean(p)          e = Add(v, eps)        s = Sqrt(e)
    n = Div(d, s)              [y = Mul(n, gamma)]    [z = Add(y, beta)]

Each node is a dispatch, an allocation and a pass through memory; on a small transformer
(BERT-tiny, a GPT-2 decoder step over a few tokens) the nine nodes cost more than the
arithmetic.  `find_layer_norms` finds the pattern (every intermediate used only inside
it, none a graph output) and `LayerNormChain` runs it as one node.  In float32, with
gamma and beta one value per column (or absent), that node is the compiled row kernel
(kernels/row_norm.py: one pass through memory), within float32 rounding of the nodes;
otherwise (float64, compiled kernels off) it computes the nodes' own steps in their
order and dtype into one output array, bit for bit the nodes' result.

What the plan cannot see is checked at run time: both means over exactly the last axis
with kept dimensions, an exponent of 2, a one-element epsilon, and gamma/beta of the
input's dtype that do not grow the result.  Anything else runs the nodes one by one, so
results and error messages are those of the plain kernels.

RMS normalisation (Llama's, Mistral's, T5's) is written out the same way by torch, in
six to eight nodes over the last axis::

    p = Pow(x, 2)  (or Mul(x, x))   v = ReduceMean(p)     e = Add(v, eps)
    s = Sqrt(e)    r = Div(1, s)  (or Reciprocal(s))      n = Mul(x, r)
    (or n = Div(x, s))    [n = Cast(n, to=float)]    [y = Mul(n, gamma)]

`find_rms_norms` finds it and `RmsNormChain` runs it as the compiled row kernel's RMS
form for float32 (HF Llama's decode step through optimum had 63 such nodes of its 694
in nine norms, most of them numpy calls on [1, 1, 256]), within float32 rounding of the
nodes, and the nodes one by one otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime import quiet_loop
from onnxviz.runtime.kernels import row_norm
from onnxviz.runtime.plan import PlanNode, plain_kernel, run_steps

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _plain(pn: PlanNode, op_type: str) -> bool:
    return plain_kernel(pn, op_type) and pn.outputs[0] >= 0 and min(pn.inputs, default=-1) >= 0


def _binary(pn: PlanNode, op_type: str) -> bool:
    return _plain(pn, op_type) and pn.opset >= 7 and len(pn.inputs) == 2


def _mean(pn: PlanNode) -> bool:
    """A ReduceMean that keeps its dimensions (its axes are checked at run time)."""
    if not _plain(pn, "ReduceMean") or not pn.attrs.get("keepdims", 1):
        return False
    if pn.opset >= 18:
        return len(pn.inputs) == 2  # axes as an input (absent axes: every axis)
    axes = pn.attrs.get("axes")
    return len(pn.inputs) == 1 and axes is not None and len(axes) == 1


def _reader_of(
    nodes: list[PlanNode], users: dict[int, list[int]], keep: set[int], used: set[int]
) -> Callable[[int], PlanNode | None]:
    """A finder's ``only(slot)``: the one node reading ``slot`` (once), if nothing else
    sees the value and no norm found so far took that node (``used``, which grows)."""

    def only(slot: int) -> PlanNode | None:
        readers = users.get(slot, [])
        if slot in keep or len(readers) != 1 or readers[0] in used:
            return None
        return nodes[readers[0]]

    return only


def _eps_sqrt(
    mean: PlanNode, only: Callable[[int], PlanNode | None], const: set[int]
) -> tuple[PlanNode, PlanNode] | None:
    """Both norms' variance steps after their second mean: the Add of a constant epsilon
    to ``mean``'s output, then the Sqrt of that sum, each the only reader of what it
    reads; None when they are not there."""
    v = mean.outputs[0]
    add = only(v)
    if add is None or not _binary(add, "Add"):
        return None
    eps = add.inputs[1] if add.inputs[0] == v else add.inputs[0]
    if eps not in const or eps == v:
        return None
    sqrt = only(add.outputs[0])
    if sqrt is None or not _plain(sqrt, "Sqrt") or len(sqrt.inputs) != 1:
        return None
    return add, sqrt


def find_layer_norms(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    const: set[int],
    keep: set[int],
    taken: set[int],
) -> list[list[int]]:
    """Node positions (in order) of every written-out layer norm, none of them in
    ``taken``."""
    found: list[list[int]] = []
    used = set(taken)
    only = _reader_of(nodes, users, keep, used)
    position = {id(pn): i for i, pn in enumerate(nodes)}
    for i, mean in enumerate(nodes):
        if i in used or not _mean(mean):
            continue
        x, m = mean.inputs[0], mean.outputs[0]
        sub = only(m)
        if sub is None or not _binary(sub, "Sub") or sub.inputs != (x, m) or x == m:
            continue
        d = sub.outputs[0]
        readers = users.get(d, [])
        if d in keep or len(readers) not in (2, 3) or any(r in used for r in readers):
            continue
        square = div = None
        for r in dict.fromkeys(readers):
            pn = nodes[r]
            pow_d = _binary(pn, "Pow") and pn.inputs[0] == d and pn.inputs[1] in const
            if pow_d or (_binary(pn, "Mul") and pn.inputs == (d, d)):
                square = pn
            elif _binary(pn, "Div") and pn.inputs[0] == d and pn.inputs[1] != d:
                div = pn
        if square is None or div is None:
            continue
        # Pow(d, k) and Div read d once each; Mul(d, d) twice (users lists it twice).
        if len(readers) != (3 if square.op_type == "Mul" else 2):
            continue
        var = only(square.outputs[0])
        if var is None or not _mean(var) or var.inputs[0] != square.outputs[0]:
            continue
        steps = _eps_sqrt(var, only, const)
        if steps is None:
            continue
        add, sqrt = steps
        if only(sqrt.outputs[0]) is not div or div.inputs[1] != sqrt.outputs[0]:
            continue
        chain = [mean, sub, square, var, add, sqrt, div]
        for op_type in ("Mul", "Add"):  # gamma, then beta
            last = chain[-1].outputs[0]
            nxt = only(last)
            if nxt is None or not _binary(nxt, op_type) or nxt.inputs.count(last) != 1:
                break
            other = nxt.inputs[1] if nxt.inputs[0] == last else nxt.inputs[0]
            if other not in const:
                break
            chain.append(nxt)
        positions = sorted(position[id(pn)] for pn in chain)
        found.append(positions)
        used.update(positions)
    return found


def find_rms_norms(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    const: set[int],
    keep: set[int],
    taken: set[int],
) -> list[list[int]]:
    """Node positions (in order) of every written-out RMS norm, none of them in
    ``taken``."""
    found: list[list[int]] = []
    used = set(taken)
    only = _reader_of(nodes, users, keep, used)
    position = {id(pn): i for i, pn in enumerate(nodes)}
    for i, square in enumerate(nodes):
        if i in used:
            continue
        powered = _binary(square, "Pow") and square.inputs[1] in const
        if not (powered or (_binary(square, "Mul") and square.inputs[0] == square.inputs[1])):
            continue
        x = square.inputs[0]  # squared by Pow(x, 2) or Mul(x, x)
        if x in const:
            continue
        mean = only(square.outputs[0])
        if mean is None or not _mean(mean) or mean.inputs[0] != square.outputs[0]:
            continue
        steps = _eps_sqrt(mean, only, const)
        if steps is None:
            continue
        add, sqrt = steps
        s = sqrt.outputs[0]
        nxt = only(s)
        if nxt is None:
            continue
        chain = [square, mean, add, sqrt]
        if _binary(nxt, "Div") and nxt.inputs == (x, s):
            scaled = nxt  # x / s
        else:
            inverse = nxt  # 1 / s, then x * (1 / s)
            one = _binary(inverse, "Div") and inverse.inputs[1] == s and inverse.inputs[0] in const
            recip = _plain(inverse, "Reciprocal") and inverse.inputs == (s,)
            if not (one or recip):
                continue
            r = inverse.outputs[0]
            times = only(r)
            if times is None or not _binary(times, "Mul") or sorted(times.inputs) != sorted((x, r)):
                continue
            scaled = times
            chain.append(inverse)
        chain.append(scaled)  # (x may have other readers: it is the chain's input)
        last = scaled.outputs[0]
        cast = only(last)
        if cast is not None and _plain(cast, "Cast") and len(cast.inputs) == 1:
            chain.append(cast)  # to float: checked at run time
            last = cast.outputs[0]
        gamma = only(last)
        if gamma is not None and _binary(gamma, "Mul") and gamma.inputs.count(last) == 1:
            other = gamma.inputs[1] if gamma.inputs[0] == last else gamma.inputs[0]
            if other in const:
                chain.append(gamma)
        if chain[-1].op_type == "Cast":
            chain.pop()  # a Cast with nothing after it stays a node of its own
        positions = sorted(position[id(pn)] for pn in chain)
        found.append(positions)
        used.update(positions)
    return found


class _NormChain:
    """What the written-out norms share: their steps one by one, and the compiled row
    kernel's call held for the last float32 call's constants, with the compiled loop's
    quick call made from it."""

    rms = False
    x: int  # x's slot (the subclass's)

    def __init__(self, steps: list[PlanNode], place_of: dict[int, int]) -> None:
        self.steps = steps
        self.place_of = place_of
        # The compiled kernel's call for the last float32 call's constants, held while
        # the same read-only constants come with an input of the same rank (what every
        # check depends on): (x's rank, [(place, constant)], call).  A decoder's norms
        # are on a few rows, where the checks were most of an 8 us call.
        self._held: tuple[int, list[tuple[int, Any]], Any] | None = None
        # The compiled loop's first try: a held norm once the call is held, else None.
        self.quick: Any = None

    def _held_result(self, ins: list[Any], x: Any) -> np.ndarray | None:
        """The held call's result for these inputs, or None (not held for them)."""
        held = self._held
        if held is None or type(x) is not np.ndarray or x.ndim != held[0]:
            return None
        for i, v in held[1]:
            if ins[i] is not v:
                return None
        done = held[2](x)  # None: not float32, another row length, not contiguous
        return None if done is None else done[0]  # type: ignore[no-any-return]

    def _hold(self, ins: list[Any], x: np.ndarray, epsilon: float, gamma: Any, beta: Any) -> None:
        """Hold the kernel's call for these constants (all but x read-only arrays)."""
        if gamma is None:  # with_constants' rows start from gamma
            return
        xp = self.place_of[self.x]
        others = [(i, v) for i, v in enumerate(ins) if i != xp]
        if any(type(v) is not np.ndarray or v.flags.writeable for _, v in others):
            return
        rows = row_norm.with_constants(epsilon, rms=self.rms, gamma=gamma, beta=beta)
        self._held = None if rows is None else (x.ndim, others, rows)
        module = row_norm.module()
        if rows is not None and module is not None and xp == 0:
            # The compiled loop's first try (quiet_loop.step_mode): the same rows in C
            # (native/_norm.c's held norm, x of this rank and these constants), so the
            # same bits as the call above; anything else comes to this node's call.
            self.quick = module.held(
                gamma.shape[0], float(np.float32(epsilon)), self.rms, gamma, beta, None,
                False, tuple(others), (0,), True, quiet_loop.decline, np.ndarray, np.empty,
                np.dtype(np.float32), x.ndim,
            )  # fmt: skip

    def _one_by_one(self, ex: Executor, ins: list[Any]) -> list[Any]:
        return run_steps(ex, self.steps, self.place_of, ins)


class LayerNormChain(_NormChain):
    """A written-out layer norm as one node (see the module docstring)."""

    def __init__(self, steps: list[PlanNode], place_of: dict[int, int]) -> None:
        super().__init__(steps, place_of)
        by_op: dict[str, list[PlanNode]] = {}
        for pn in steps:
            by_op.setdefault(pn.op_type, []).append(pn)
        means = by_op["ReduceMean"]
        first, second = means[0], means[1]
        self.means = (first, second)
        self.x = first.inputs[0]
        sub = next(pn for pn in steps if pn.op_type == "Sub")
        d = sub.outputs[0]
        self.square = next(pn for pn in steps if pn.op_type in ("Pow", "Mul") and d in pn.inputs)
        add_eps = next(pn for pn in steps if pn.op_type == "Add" and second.outputs[0] in pn.inputs)
        self.eps = next(s for s in add_eps.inputs if s != second.outputs[0])
        # The optional affine steps after the Div: (slot of the constant) per step.
        div = next(pn for pn in steps if pn.op_type == "Div")
        tail = steps[steps.index(div) + 1 :]
        y = div.outputs[0]
        self.affine: list[tuple[str, int]] = []
        for pn in tail:
            self.affine.append((pn.op_type, pn.inputs[1] if pn.inputs[0] == y else pn.inputs[0]))
            y = pn.outputs[0]

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        place = self.place_of
        x = ins[place[self.x]]
        held = self._held_result(ins, x)
        if held is not None:
            return [held]
        if type(x) is not np.ndarray or x.dtype not in _FLOATS or x.ndim == 0 or not x.size:
            return self._one_by_one(ex, ins)
        if not all(_over_last_axis(pn, ins, self.place_of, x.ndim) for pn in self.means):
            return self._one_by_one(ex, ins)
        eps = ins[place[self.eps]]
        if not _scalar_of(eps, x):
            return self._one_by_one(ex, ins)
        if not _squares(self.square, ins, place):
            return self._one_by_one(ex, ins)
        consts = [ins[place[s]] for _, s in self.affine]
        if not all(_fits(c, x) for c in consts):
            return self._one_by_one(ex, ins)
        n = x.shape[-1]
        if n >= 1 << 24:  # the count is no longer exact in float32: numpy's own mean
            return self._one_by_one(ex, ins)
        if x.dtype == np.float32 and row_norm.enabled():
            # The affine steps are a Mul by gamma, then possibly an Add of beta.
            gamma = consts[0] if consts else None
            beta = consts[1] if len(consts) > 1 else None
            epsilon = float(eps.reshape(()))
            done = row_norm.normalize(x, x.ndim - 1, epsilon, gamma=gamma, beta=beta)
            if done is not None:
                self._hold(ins, x, epsilon, gamma, beta)
                return [done[0]]
        # The nodes' own steps, in their order and dtype, into one array.  The means are
        # numpy's (ReduceMean's kernel): the same pairwise sum in x's dtype, then a
        # division by the count, which numpy does in float64 and rounds once to x's
        # dtype; dividing in float32 by the exact count rounds the same (division is
        # correctly rounded, and float64 carries more than twice float32's digits).
        # Spelled out it skips numpy's Python-level mean, ~2 us per call.
        count = x.dtype.type(n)
        out = np.add.reduce(x, axis=-1, keepdims=True)
        out /= count
        out = np.subtract(x, out)
        var = np.add.reduce(np.square(out), axis=-1, keepdims=True)
        var /= count
        np.add(var, eps.reshape(()), out=var)
        np.sqrt(var, out=var)
        np.divide(out, var, out=out)
        for (op_type, _), c in zip(self.affine, consts):
            if op_type == "Mul":
                np.multiply(out, c, out=out)
            else:
                np.add(out, c, out=out)
        return [out]


def _squares(square: PlanNode, ins: list[Any], place_of: dict[int, int]) -> bool:
    """The square step squares: Mul(x, x), or Pow by an exponent of one value, 2."""
    if square.op_type != "Pow":
        return True
    k = ins[place_of[square.inputs[1]]]
    if type(k) is not np.ndarray or k.size != 1 or k.dtype.kind not in "fiu":
        return False
    return float(k.reshape(())) == 2


def _over_last_axis(mean: PlanNode, ins: list[Any], place_of: dict[int, int], rank: int) -> bool:
    """The ReduceMean is over exactly the last axis."""
    if mean.opset >= 18:
        axes = ins[place_of[mean.inputs[1]]]
        if type(axes) is not np.ndarray or axes.dtype.kind not in "iu" or axes.size != 1:
            return False
        axis = int(axes.reshape(()))
    else:
        axis = int(mean.attrs["axes"][0])
    return axis in (-1, rank - 1)


def _fits(c: Any, x: np.ndarray) -> bool:
    """``c`` is an array of x's dtype that broadcasts to x's shape without growing it."""
    if type(c) is not np.ndarray or c.dtype != x.dtype or c.ndim > x.ndim:
        return False
    # The common case (gamma and beta over the last axes) without np.broadcast_shapes.
    if c.shape == x.shape[x.ndim - c.ndim :]:
        return True
    try:
        return np.broadcast_shapes(c.shape, x.shape) == x.shape
    except ValueError:  # the plain kernels say what does not broadcast
        return False


def _scalar_of(c: Any, x: np.ndarray) -> bool:
    return type(c) is np.ndarray and c.dtype == x.dtype and c.size == 1 and c.ndim <= x.ndim


class RmsNormChain(_NormChain):
    """A written-out RMS norm as one node (see the module docstring)."""

    rms = True

    def __init__(self, steps: list[PlanNode], place_of: dict[int, int]) -> None:
        super().__init__(steps, place_of)
        self.square = steps[0]
        self.x = self.square.inputs[0]
        self.mean = next(pn for pn in steps if pn.op_type == "ReduceMean")
        add = next(pn for pn in steps if pn.op_type == "Add")
        v = self.mean.outputs[0]
        self.eps = add.inputs[1] if add.inputs[0] == v else add.inputs[0]
        sqrt = next(pn for pn in steps if pn.op_type == "Sqrt")
        # Div(1, s)'s numerator, checked to be 1 at run time (None: Reciprocal or x / s).
        self.one: int | None = None
        for pn in steps:
            if pn.op_type == "Div" and pn.inputs[1] == sqrt.outputs[0] and pn.inputs[0] != self.x:
                self.one = pn.inputs[0]
        self.casts = [pn for pn in steps if pn.op_type == "Cast"]
        last = steps[-1]
        self.gamma: int | None = None
        if last.op_type == "Mul" and self.x not in last.inputs:
            y = (self.casts[0] if self.casts else steps[-2]).outputs[0]
            self.gamma = last.inputs[1] if last.inputs[0] == y else last.inputs[0]

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        place = self.place_of
        x = ins[place[self.x]]
        held = self._held_result(ins, x)
        if held is not None:
            return [held]
        if (
            type(x) is not np.ndarray
            or x.dtype != np.float32
            or x.ndim == 0
            or not x.size
            or x.shape[-1] >= 1 << 24
            or not row_norm.enabled()
            or not self._checks(ins, x)
        ):
            return self._one_by_one(ex, ins)
        gamma = None if self.gamma is None else ins[place[self.gamma]]
        if gamma is not None and not _fits(gamma, x):
            return self._one_by_one(ex, ins)
        epsilon = float(ins[place[self.eps]].reshape(()))
        done = row_norm.normalize(x, x.ndim - 1, epsilon, rms=True, gamma=gamma)
        if done is None:
            return self._one_by_one(ex, ins)
        self._hold(ins, x, epsilon, gamma, None)
        return [done[0]]

    def _checks(self, ins: list[Any], x: np.ndarray) -> bool:
        """What the plan could not see: the mean over the last axis, x squared, a
        one-element epsilon, 1 / s, and casts to float."""
        place = self.place_of
        if not _over_last_axis(self.mean, ins, place, x.ndim) or not _squares(
            self.square, ins, place
        ):
            return False
        if not _scalar_of(ins[place[self.eps]], x):
            return False
        if self.one is not None:
            one = ins[place[self.one]]
            if not _scalar_of(one, x) or float(one.reshape(())) != 1:
                return False
        return all(pn.attrs.get("to") == 1 for pn in self.casts)  # float: the identity
