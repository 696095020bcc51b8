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

then the output pair's QuantizeLinear -> DequantizeLinear in float32 steps, in one
compiled pass over each row (`_int8.scale_columns_qdq`).  As with fusion_qdq_conv's
QdqConv, v is the product of the real dequantized values within about 2 float32 ulps,
where the stepped float32 MatMul carries K * 2^-24 of the sum of |terms|: the two runs
can differ by one quantization step, only where the exact value lies that close to a
rounding boundary of the output quantizer.

The activation's dequantizer stays a node when something else reads its float value;
when only fused MatMuls do, it is dropped (they read its codes).  Either way no
QuantizeLinear -> DequantizeLinear pair fusion (fusion_qdq.QdqPair, which makes no
codes) takes it.  Scope at run time: 8-bit codes with one scale and zero point, a 2-D
8-bit weight with one scale and zero point or one per column (axis 1), 8-bit output
pair with one scale and zero point each.  Anything else (a NaN, other types or shapes,
the kernels off) runs the original nodes one by one: the stepped values and errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from onnxviz.runtime.fusion_qdq import only_reader, plain_dequantizer, plain_quantizer, scalar
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.plan import PlanNode, fused_node, outside_inputs, plain_kernel, run_steps

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_F32 = np.dtype(np.float32)
_BYTES = (np.dtype(np.uint8), np.dtype(np.int8))
_TINY = float(np.finfo(np.float32).tiny)  # the smallest normal float32


def _constant_dequantizer(pn: PlanNode, const: set[int]) -> bool:
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


def find_qdq_matmuls(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    const: set[int],
    keep: set[int],
    taken: set[int],
) -> tuple[list[list[int]], set[int]]:
    """([activation dq, weight dq, MatMul, q, dq] positions of every chain above, none of
    the last three in ``taken``; the activation dequantizers only fused MatMuls read).
    Empty when the int8 kernel is off."""
    if int8_products.module() is None:
        return [], set()
    producer = {s: i for i, pn in enumerate(nodes) for s in pn.outputs if s >= 0}
    found: list[list[int]] = []
    for i, mm in enumerate(nodes):
        if (
            i in taken
            or not plain_kernel(mm, "MatMul")
            or len(mm.inputs) != 2
            or min(mm.inputs) < 0
            or mm.inputs[1] not in const
            or mm.outputs[0] < 0
        ):
            continue
        a_at, w_at = producer.get(mm.inputs[0]), producer.get(mm.inputs[1])
        if a_at is None or w_at is None or a_at in taken and a_at not in _dequantizers(found):
            continue
        if not plain_dequantizer(nodes[a_at]) or not _constant_dequantizer(nodes[w_at], const):
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
        found.append([a_at, w_at, i, q_at, dq_at])
        taken.update((i, q_at, dq_at))
    fused = {chain[2] for chain in found}
    dropped = set()
    for a_at in _dequantizers(found):
        out = nodes[a_at].outputs[0]
        taken.add(a_at)  # (no QdqPair: it would make no codes)
        if out not in keep and all(r in fused for r in users.get(out, [])):
            dropped.add(a_at)
    return found, dropped


def _dequantizers(found: list[list[int]]) -> set[int]:
    return {chain[0] for chain in found}


def qdq_matmul_node(nodes: list[PlanNode], positions: list[int]) -> PlanNode:
    """The fused node of a chain from find_qdq_matmuls, at the MatMul's identity."""
    steps = [nodes[p] for p in positions]
    ins, names, place_of = outside_inputs(steps)
    return fused_node(steps[2], steps[-1], ins, names, QdqMatMul(steps, place_of))


class _Ready(NamedTuple):
    """Last run's call, held while its parameters stay the same objects."""

    params: tuple[tuple[int, Any], ...]  # (input place, the read-only array there)
    level: int
    a_dtype: np.dtype[Any]
    a_signed: bool
    za: int
    k: int
    n: int
    columns: bytes  # B packed for gemm_rows
    scale: np.ndarray
    output: tuple[Any, ...]  # scale_columns_qdq's signed, qs, qz, dqs, dqz


class QdqMatMul:
    """A QDQ MatMul chain as one exact integer product (see the module docstring)."""

    def __init__(self, steps: list[PlanNode], place_of: dict[int, int]) -> None:
        self.steps = steps
        self.place_of = place_of
        a_dq, w_dq, _mm, q, dq = steps

        def places(pn: PlanNode) -> list[int | None]:
            got = [place_of.get(s) if s >= 0 else None for s in pn.inputs]
            return got + [None] * (3 - len(got))

        self.a_places = places(a_dq)
        self.w_places = places(w_dq)
        self.q_places = places(q)[1:]
        self.dq_places = places(dq)[1:]
        self.w_axis = int(w_dq.attrs.get("axis", 1))
        # (sa, sw, the column scales made from them), replaced when either changes.
        self._scales: tuple[Any, Any, np.ndarray] | None = None
        self._ready: _Ready | None = None

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
        if (
            type(a) is not np.ndarray
            or a.dtype != ready.a_dtype
            or a.ndim < 2
            or a.shape[-1] != ready.k
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
            acc.reshape(-1), m, n, ready.scale, b"", *ready.output, out.reshape(-1)
        )
        return out if status == 0 else None

    def _integer(self, ins: list[Any]) -> np.ndarray | None:
        """The chain's output by the integer product, or None to run it node by node."""
        mod = int8_products.module()
        if mod is None:
            return None
        a, sa, za = (None if p is None else ins[p] for p in self.a_places)
        w, sw, zw = (None if p is None else ins[p] for p in self.w_places)
        qs, qz = (None if p is None else ins[p] for p in self.q_places)
        ds, dz = (None if p is None else ins[p] for p in self.dq_places)
        if (
            type(a) is not np.ndarray
            or a.dtype not in _BYTES
            or a.ndim < 2
            or not a.size
            or type(w) is not np.ndarray
            or w.dtype not in _BYTES
            or w.ndim != 2
            or a.shape[-1] != w.shape[0]
            or not scalar(sa, _F32)
            or (za is not None and not scalar(za, a.dtype))
            or (zw is not None and (type(zw) is not np.ndarray or zw.dtype != w.dtype))
            or not scalar(qs, _F32)
            or not scalar(ds, _F32)
            or qz is None
            or not scalar(qz)
            or qz.dtype not in _BYTES
            or (dz is not None and not scalar(dz, qz.dtype))
        ):
            return None
        scale = self._column_scales(sa, sw, w.shape[1])
        if scale is None:
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
        assert qs is not None and ds is not None  # (scalar() said so)
        output = (
            qz.dtype == np.int8,
            np.float32(qs.reshape(())),
            int(qz.reshape(())),
            np.float32(ds.reshape(())),
            0 if dz is None else int(dz.reshape(())),
        )
        status = mod.scale_columns_qdq(
            acc.reshape(-1), acc.size // n, n, scale, b"", *output, out.reshape(-1)
        )
        self._hold(mod, ins, a, w, za, zw, scale, output)
        return out if status == 0 else None

    def _hold(
        self,
        mod: Any,
        ins: list[Any],
        a: np.ndarray,
        w: np.ndarray,
        za: np.ndarray,
        zw: Any,
        scale: np.ndarray,
        output: tuple[Any, ...],
    ) -> None:
        """Keep this call for `_again` when every parameter is a read-only array (a
        constant: the same object next run holds the same values) and B has one zero
        point (the row-major product's packed form)."""
        self._ready = None
        places = [p for p in (*self.a_places[1:], *self.w_places, *self.q_places, *self.dq_places)]
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
            za=int(za.reshape(())),
            k=w.shape[0],
            n=w.shape[1],
            columns=columns,
            scale=scale,
            output=output,
        )

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
        if sw.size != 1 and not (sw.ndim == 1 and sw.size == n and self.w_axis in (1, -1)):
            return None
        scale = np.ascontiguousarray(
            np.broadcast_to(sa.reshape(()) * sw.reshape(-1), (n,)), dtype=_F32
        )
        ok = bool(np.all(scale >= _TINY)) and bool(np.all(np.isfinite(scale)))
        made = scale if ok else None
        if made is not None:
            self._scales = (sa, sw, made)
        return made
