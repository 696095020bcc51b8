"""A QDQ model's MatMul by a constant weight run as an exact integer product (unwatched
runs).

onnxruntime.quantization's QDQ format (quantize_static; the QNN and NPU flows write it
with uint8 activations) writes a quantized MatMul as float nodes around integers::

    a (8-bit codes) -> DequantizeLinear -> MatMul -> QuantizeLinear -> DequantizeLinear
    W (8-bit, constant) -> DequantizeLinear -^

and one dequantized activation is often read by several MatMuls (a transformer's Q, K and
V projections).  Stepped, the MatMul multiplies the dequantized float32 values in
float32.  `find_qdq_matmuls` finds the chain (the MatMul's output read only by the
quantizer, its codes only by the dequantizer, none a graph output) and `QdqMatMul` runs
it as::

    acc = (A - za) @ (W - zw)                   exact int32 (int8_products.matmul)
    v = float32(acc) * s[n],  s[n] = float32(sa * sw[n])

then the output pair's QuantizeLinear -> DequantizeLinear in float32 steps (the
quantizer's division taken as a product by float32(1 / qs), as the conv's rescale takes
it: within an ulp of the quotient), in one compiled pass over each row
(`_int8.scale_columns_qdq`).  As with fusion_qdq_conv's QdqConv, v is the product of the
real dequantized values within about 2 float32 ulps,
where the stepped float32 MatMul carries K * 2^-24 of the sum of |terms|: the two runs
can differ by one quantization step, only where the exact value lies that close to a
rounding boundary of the output quantizer.

A Gemm by a constant (A as it is, alpha 1, B transposed or not, C a constant bias added
after the scale in float32: a classifier's last layer) runs the same way.

onnxruntime.quantization adds a MatMul's bias after the MatMul's own pair, as a float
Add of a dequantized constant followed by a pair of its own (each a pass over the
output: 10-20 us and 5-19 us for BERT-tiny's projections).  When only that Add reads the
pair and only its pair reads the sum, the three join the node: the same row pass goes on
with + b[n] in float32 and the second pair's steps (`scale_columns_qdq`'s second stage),
the nodes' own float32 steps after the first pair.

The activation's dequantizer stays a node when something else reads its float value;
when only fused MatMuls do, it is dropped (they read its codes).  Either way no
QuantizeLinear -> DequantizeLinear pair fusion (fusion_qdq.QdqPair, which makes no
codes) takes it.  When another fused node ends at that dequantizer (the previous QDQ
MatMul of an MLP, a QDQ conv), it writes the float value and this node reads the codes
back from it by QuantizeLinear's steps, exactly (see `_integer`).  Scope at run time:
8-bit codes with one scale and zero point, a 2-D 8-bit weight with one scale and zero
point or one per column (axis 1; 0 for a transposed Gemm B), 8-bit output pair with one
scale and zero point each.  Anything else (a NaN, other types or shapes,
the kernels off) runs the original nodes one by one: the stepped values and errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from onnxviz.runtime import native, quiet_loop
from onnxviz.runtime.fusion_int8_matmul import column_values
from onnxviz.runtime.fusion_qdq import (
    CODE_TYPES,
    CODES_BACK_MAX,
    NORMAL_MIN,
    only_reader,
    plain_dequantizer,
    plain_quantizer,
    scalar,
)
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.kernels.quantize import quantize_compiled
from onnxviz.runtime.plan import PlanNode, fused_node, outside_inputs, plain_kernel, run_steps

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_F32 = np.dtype(np.float32)


def constant_dequantizer(pn: PlanNode, const: set[int]) -> bool:
    """A DequantizeLinear of constants (a quantized weight, so folded: not a
    plain_kernel), not blocked, float32 out."""
    return (
        pn.kind == "kernel"
        and pn.domain == ""
        and pn.op_type == "DequantizeLinear"
        and 2 <= len(pn.inputs) <= 3
        and all(s in const for s in pn.inputs if s >= 0)
        and not pn.attrs.get("block_size", 0)
        and pn.attrs.get("output_dtype", 0) in (0, 1)
    )


def _product(pn: PlanNode, const: set[int]) -> bool:
    """A MatMul by a constant, or a Gemm by one computing A B (+ C) with A as it is (a
    classifier's last layer: B often transposed, C a constant bias)."""
    if plain_kernel(pn, "MatMul"):
        return len(pn.inputs) == 2 and min(pn.inputs) >= 0 and pn.inputs[1] in const
    if not plain_kernel(pn, "Gemm") or not 2 <= len(pn.inputs) <= 3:
        return False
    attrs = pn.attrs
    bias = pn.inputs[2] if len(pn.inputs) == 3 else -1
    return (
        min(pn.inputs[:2]) >= 0
        and pn.inputs[1] in const
        and (bias < 0 or bias in const)
        and not attrs.get("transA", 0)
        and float(attrs.get("alpha", 1.0)) == 1.0
        and (bias < 0 or float(attrs.get("beta", 1.0)) == 1.0)
    )


def find_qdq_matmuls(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    producer: dict[int, int],
    const: set[int],
    keep: set[int],
    taken: set[int],
) -> tuple[list[QdqMatMulChain], set[int]]:
    """(every chain above, none of its MatMul, q and dq in ``taken``; the activation
    dequantizers only fused MatMuls read).  Empty when the int8 kernel is off."""
    if int8_products.module() is None:
        return [], set()
    found: list[QdqMatMulChain] = []
    own: set[int] = set()  # activation dequantizers whose codes the chains read
    for i, mm in enumerate(nodes):
        if i in taken or not _product(mm, const) or mm.outputs[0] < 0:
            continue
        a_at, w_at = producer.get(mm.inputs[0]), producer.get(mm.inputs[1])
        if a_at is None or w_at is None:
            continue
        if not plain_dequantizer(nodes[a_at]) or not constant_dequantizer(nodes[w_at], const):
            continue
        q_at = only_reader(users, mm.outputs[0], keep)
        if q_at is None or q_at in taken or not plain_quantizer(nodes[q_at]):
            continue
        if nodes[q_at].inputs[0] != mm.outputs[0]:
            continue
        dq_at = only_reader(users, nodes[q_at].outputs[0], keep)
        if dq_at is None or dq_at in taken or not plain_dequantizer(nodes[dq_at]):
            continue
        if nodes[dq_at].inputs[0] != nodes[q_at].outputs[0]:
            continue
        positions = [a_at, w_at, i, q_at, dq_at]
        positions += _bias_add(nodes, users, const, keep, taken, nodes[dq_at].outputs[0])
        # The activation dequantizer another fused node ends at (a previous QDQ MatMul's
        # or conv's output pair): that node writes its float value, and this one reads
        # the codes back from it.
        from_float = a_at in taken and a_at not in own
        found.append(QdqMatMulChain(positions, from_float))
        taken.update(positions[2:])
        if not from_float:
            own.add(a_at)
    fused = {chain.positions[2] for chain in found}
    dropped = set()
    for a_at in own:
        out = nodes[a_at].outputs[0]
        taken.add(a_at)  # (no QdqPair: it would make no codes)
        if out not in keep and all(r in fused for r in users.get(out, [])):
            dropped.add(a_at)
    return found, dropped


def _bias_add(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    const: set[int],
    keep: set[int],
    taken: set[int],
    y: int,
) -> list[int]:
    """[Add, q, dq] positions when the output pair's value ``y`` goes only to an Add of a
    constant (the bias, which onnxruntime.quantization adds after the MatMul's pair) whose
    sum goes only to a pair of its own; [] otherwise."""
    add_at = only_reader(users, y, keep)
    if add_at is None or add_at in taken or not plain_kernel(nodes[add_at], "Add"):
        return []
    add = nodes[add_at]
    if add.opset < 7 or len(add.inputs) != 2 or add.inputs.count(y) != 1 or add.outputs[0] < 0:
        return []
    if next(s for s in add.inputs if s != y) not in const:
        return []
    q_at = only_reader(users, add.outputs[0], keep)
    if q_at is None or q_at in taken or not plain_quantizer(nodes[q_at]):
        return []
    if nodes[q_at].inputs[0] != add.outputs[0]:
        return []
    dq_at = only_reader(users, nodes[q_at].outputs[0], keep)
    if dq_at is None or dq_at in taken or not plain_dequantizer(nodes[dq_at]):
        return []
    if nodes[dq_at].inputs[0] != nodes[q_at].outputs[0]:
        return []
    return [add_at, q_at, dq_at]


class QdqMatMulChain(NamedTuple):
    # activation dq, weight dq, MatMul or Gemm, q, dq[, bias Add, its q, its dq]
    positions: list[int]
    from_float: bool  # the codes read back from the activation dequantizer's output


def qdq_matmul_node(nodes: list[PlanNode], chain: QdqMatMulChain) -> PlanNode:
    """The fused node of a chain from find_qdq_matmuls, at the MatMul's identity."""
    a_dq, *steps = [nodes[p] for p in chain.positions]
    if not chain.from_float:
        steps.insert(0, a_dq)  # its codes are the input; the node-by-node run makes it
    ins, names, place_of = outside_inputs(steps)
    for slot, name in zip(a_dq.inputs[1:], a_dq.input_names[1:]):
        if slot >= 0 and slot not in place_of:  # the float input's scale and zero point
            place_of[slot] = len(ins)
            ins.append(slot)
            names.append(name)
    fused = QdqMatMul(steps, place_of, a_dq, chain.from_float)
    return fused_node(fused.product, steps[-1], ins, names, fused)


def _codes_back(v: Any, s: float, z: int, dtype: np.dtype[Any]) -> np.ndarray | None:
    """The codes a DequantizeLinear of scale s and zero point z made v from (see
    QdqMatMul._integer): QuantizeLinear's compiled pass; None (not a float32 array, a
    NaN) otherwise."""
    if type(v) is not np.ndarray or v.dtype != _F32 or not v.size:
        return None
    return quantize_compiled(v, np.array(s, dtype=_F32), np.array(z, dtype=dtype), dtype)


def pair_args(qs: Any, qz: Any, ds: Any, dz: Any) -> tuple[Any, ...] | None:
    """scale_columns_qdq's (signed, qs, qz, dqs, dqz) for a QuantizeLinear ->
    DequantizeLinear pair of these parameters: one float32 scale each, an 8-bit zero
    point for the quantizer and none or one of its type for the dequantizer; else None."""
    if (
        not scalar(qs, _F32)
        or not scalar(ds, _F32)
        or qz is None
        or not scalar(qz)
        or qz.dtype not in CODE_TYPES
        or (dz is not None and not scalar(dz, qz.dtype))
    ):
        return None
    return (
        qz.dtype == np.int8,
        np.float32(qs.reshape(())),
        int(qz.reshape(())),
        np.float32(ds.reshape(())),
        0 if dz is None else int(dz.reshape(())),
    )


class _Ready(NamedTuple):
    """Last run's call, held while its parameters stay the same objects."""

    params: tuple[tuple[int, Any], ...]  # (input place, the read-only array there)
    level: int
    a_dtype: np.dtype[Any]
    a_signed: bool
    sa: float  # (from_float: the codes' scale)
    za: int
    k: int
    n: int
    columns: bytes  # B packed for gemm_rows
    scale: np.ndarray
    bias: np.ndarray | bytes  # one float32 per column, or b"": none
    output: tuple[Any, ...]  # scale_columns_qdq's signed, qs, qz, dqs, dqz
    then: tuple[Any, ...]  # its bias2, signed2, qs2, qz2, dqs2, dqz2 (a bias Add), or ()
    then_rank: int  # the bias2 operand's rank: the codes may have no fewer axes


class QdqMatMul:
    """A QDQ MatMul chain as one exact integer product (see the module docstring)."""

    def __init__(
        self, steps: list[PlanNode], place_of: dict[int, int], a_dq: PlanNode, from_float: bool
    ) -> None:
        self.steps = steps  # what the node-by-node run runs
        self.place_of = place_of
        bias_add = steps[-3].op_type == "Add"  # (a Gemm is never one)
        w_dq, mm, q, dq = steps[-7:-3] if bias_add else steps[-4:]
        self.product = mm
        self.from_float = from_float

        def places(pn: PlanNode) -> list[int | None]:
            got = [place_of.get(s) if s >= 0 else None for s in pn.inputs]
            return got + [None] * (3 - len(got))

        # codes (or, from_float, the dequantized value), scale, zero point
        self.a_places = places(a_dq)
        if from_float:
            self.a_places[0] = place_of[a_dq.outputs[0]]
        self.w_places = places(w_dq)
        self.q_places = places(q)[1:]
        self.dq_places = places(dq)[1:]
        self.w_axis = int(w_dq.attrs.get("axis", 1))
        # The bias Add after the output pair: its constant's place, its pair's parameters.
        self.add_places: list[int | None] = []
        if bias_add:
            add, add_q, add_dq = steps[-3:]
            bias = next(s for s in add.inputs if s != dq.outputs[0])
            self.add_places = [place_of[bias], *places(add_q)[1:], *places(add_dq)[1:]]
        # Gemm: B may come transposed ([N, K]: its columns are W's rows, axis 0), and C is
        # a bias, added after the scale in float32 (the conv's v = acc * s + b).
        self.trans_b = mm.op_type == "Gemm" and bool(mm.attrs.get("transB", 0))
        self.column_axis = (0, -2) if self.trans_b else (1, -1)
        self.bias_place = (
            place_of.get(mm.inputs[2]) if len(mm.inputs) == 3 and mm.inputs[2] >= 0 else None
        )
        self.gemm = mm.op_type == "Gemm"
        # (sa, sw, the column scales made from them), replaced when either changes.
        self._scales: tuple[Any, Any, np.ndarray] | None = None
        self._ready: _Ready | None = None
        # `_ready`'s call made in C (native/_int8.c's held_rows_qdq), which the compiled
        # node loop tries first: made with `_ready`, gone with it.
        self.quick: Any = None

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        ready = self._ready
        if ready is not None and all(ins[p] is v for p, v in ready.params):
            y = self._again(ready, ins[self.a_places[0]])  # type: ignore[index]
            if y is not None:
                return [y]
        y = self._integer(ins)
        if y is not None:
            return [y]
        return run_steps(ex, self.steps, self.place_of, ins)

    def _again(self, ready: _Ready, a: Any) -> np.ndarray | None:
        """The call of last run again for new codes of the same type and width, every
        parameter the same read-only object (checked by the caller): no checks but
        these and no lookups (most of a BERT-tiny MatMul's fixed cost)."""
        mod = int8_products.module()
        if self.from_float and mod is not None:
            a = _codes_back(a, ready.sa, ready.za, ready.a_dtype)
        if (
            type(a) is not np.ndarray
            or a.dtype != ready.a_dtype
            or a.ndim < 2
            or a.shape[-1] != ready.k
            or a.ndim < ready.then_rank
            or (self.gemm and a.ndim != 2)  # a Gemm's error, as `_integer` leaves it
            or not a.size
            or mod is None
            or mod.level() != ready.level
        ):
            return None
        n = ready.n
        a2 = np.ascontiguousarray(a).reshape(-1)
        m = a2.size // ready.k
        acc = np.empty((m, n), np.int32)
        mod.gemm_rows(a2, m, ready.a_signed, ready.za, ready.columns, acc)
        out = np.empty((*a.shape[:-1], n), dtype=_F32)
        status = mod.scale_columns_qdq(
            acc.reshape(-1), m, n, ready.scale, ready.bias, *ready.output, out.reshape(-1),
            *ready.then,
        )  # fmt: skip
        return out if status == 0 else None

    def _integer(self, ins: list[Any]) -> np.ndarray | None:
        """The chain's output by the integer product, or None to run it node by node."""
        mod = int8_products.module()
        if mod is None:
            return None
        a, sa, za = (None if p is None else ins[p] for p in self.a_places)
        if self.from_float:
            # The dequantized value v = float32((t - z) * s), |t - z| <= 255: v / s in
            # float32 is within 255 * 2^-23 of t - z, so QuantizeLinear's steps give back
            # t exactly when s is a normal float32 and (t - z) * s cannot overflow.
            if (
                sa is None
                or za is None
                or not scalar(sa, _F32)
                or not NORMAL_MIN <= float(sa.reshape(())) <= CODES_BACK_MAX
                or not scalar(za)
                or za.dtype not in CODE_TYPES
            ):
                return None
            a = _codes_back(a, float(sa.reshape(())), int(za.reshape(())), za.dtype)
        w, sw, zw = (None if p is None else ins[p] for p in self.w_places)
        qs, qz = (None if p is None else ins[p] for p in self.q_places)
        ds, dz = (None if p is None else ins[p] for p in self.dq_places)
        if type(w) is not np.ndarray or w.ndim != 2:
            return None
        if self.trans_b:
            w = w.T  # B [K, N] (a view: packed once, keyed by the view)
        if (
            type(a) is not np.ndarray
            or a.dtype not in CODE_TYPES
            or a.ndim < 2
            or (self.gemm and a.ndim != 2)
            or not a.size
            or w.dtype not in CODE_TYPES
            or a.shape[-1] != w.shape[0]
            or not scalar(sa, _F32)
            or (za is not None and not scalar(za, a.dtype))
            or (zw is not None and (type(zw) is not np.ndarray or zw.dtype != w.dtype))
        ):
            return None
        output = pair_args(qs, qz, ds, dz)
        scale = self._column_scales(sa, sw, w.shape[1])
        bias = self._bias(ins, w.shape[1])
        if output is None or scale is None or bias is None:
            return None
        if zw is not None and zw.size not in (1, w.shape[1]):
            return None
        if za is None:
            za = np.zeros((), a.dtype)
        acc = int8_products.matmul(a, w, za, None if zw is None else zw.reshape(-1))
        if acc is None:
            return None
        n = w.shape[1]
        out = np.empty(acc.shape, dtype=_F32)
        then = self._then(ins, n, a.ndim)
        if then is None:
            return None
        status = mod.scale_columns_qdq(
            acc.reshape(-1), acc.size // n, n, scale, bias, *output, out.reshape(-1), *then
        )
        self._hold(mod, ins, a, w, za, zw, scale, bias, output, then)
        return out if status == 0 else None

    def _then(self, ins: list[Any], n: int, rank: int) -> tuple[Any, ...] | None:
        """scale_columns_qdq's arguments for the bias Add and its pair: () without one;
        None when they are not what the pass takes (a bias that is not one value or one
        per column, or adds axes; a pair that is not 8-bit per tensor)."""
        if not self.add_places:
            return ()
        b, qs, qz, ds, dz = (None if p is None else ins[p] for p in self.add_places)
        bias = column_values(b, n, rank)
        pair = pair_args(qs, qz, ds, dz)
        if bias is None or pair is None:
            return None
        return (bias, *pair)

    def _hold(
        self,
        mod: Any,
        ins: list[Any],
        a: np.ndarray,
        w: np.ndarray,
        za: np.ndarray,
        zw: Any,
        scale: np.ndarray,
        bias: np.ndarray | bytes,
        output: tuple[Any, ...],
        then: tuple[Any, ...],
    ) -> None:
        """Keep this call for `_again` when every parameter is a read-only array (a
        constant: the same object next run holds the same values) and B has one zero
        point (the row-major product's packed form), and its compiled form as `quick`."""
        self._ready = None
        self.quick = None
        places = [
            *self.a_places[1:],
            *self.w_places,
            *self.q_places,
            *self.dq_places,
            self.bias_place,
            *self.add_places,
        ]
        params = tuple((p, ins[p]) for p in places if p is not None)
        if not all(type(v) is np.ndarray and not v.flags.writeable for _, v in params):
            return
        zb = int8_products.one_zero_point(None if zw is None else zw.reshape(-1), w.dtype)
        if zb is None:
            return
        columns = int8_products.packed_columns(mod, w, zb)
        self._ready = _Ready(
            params=params,
            level=mod.level(),
            a_dtype=a.dtype,
            a_signed=a.dtype == np.int8,
            sa=float(ins[self.a_places[1]].reshape(())) if self.a_places[1] is not None else 1.0,
            za=int(za.reshape(())),
            k=w.shape[0],
            n=w.shape[1],
            columns=columns,
            scale=scale,
            bias=bias,
            output=output,
            then=then,
            then_rank=ins[self.add_places[0]].ndim if then else 0,  # type: ignore[index]
        )
        self.quick = self._held(mod, self._ready, len(ins))

    def _held(self, mod: Any, ready: _Ready, nargs: int) -> Any:
        """`_again` for ``ready`` in C from the node loop (native/_int8.c's held_rows_qdq:
        its checks, product and pass, so its bits; the Python around those two kernels
        was about a third of a QDQ BERT-tiny's projection), or None where it cannot be
        made (an output scale the pass refuses)."""
        then = ready.then
        bias2, pair2 = (then[0], then[1:]) if then else (None, (False, 1.0, 0, 1.0, 0))
        try:
            return mod.held_rows_qdq(
                ready.columns, ready.a_signed, ready.za, self.from_float, ready.sa,
                ready.scale, None if isinstance(ready.bias, bytes) else ready.bias,
                ready.output, bias2, pair2, ready.then_rank, self.gemm, self.a_places[0],
                nargs, tuple(p for p, _ in ready.params), tuple(v for _, v in ready.params),
                quiet_loop.decline, *native.held_arrays(),
            )  # fmt: skip
        except ValueError:
            return None

    def _bias(self, ins: list[Any], n: int) -> np.ndarray | bytes | None:
        """A Gemm's C as one float32 per column (`column_values` of a 2-D product), b""
        without one; None for anything else."""
        if self.bias_place is None:
            return b""
        return column_values(ins[self.bias_place], n, 2)

    def _column_scales(self, sa: Any, sw: Any, n: int) -> np.ndarray | None:
        """float32(sa * sw[n]) for each column, or None (not finite positive normals, or a
        weight scale that is not one value or one per column)."""
        kept = self._scales
        if (
            kept is not None
            and kept[0] is sa
            and kept[1] is sw
            and kept[2].size == n
            and not sa.flags.writeable
            and not sw.flags.writeable
        ):
            return kept[2]  # the same constants as last run
        if type(sw) is not np.ndarray or sw.dtype != _F32:
            return None
        if sw.size != 1 and not (sw.ndim == 1 and sw.size == n and self.w_axis in self.column_axis):
            return None
        scale = np.ascontiguousarray(
            np.broadcast_to(sa.reshape(()) * sw.reshape(-1), (n,)), dtype=_F32
        )
        ok = bool(np.all(scale >= NORMAL_MIN)) and bool(np.all(np.isfinite(scale)))
        made = scale if ok else None
        if made is not None:
            self._scales = (sa, sw, made)
        return made
