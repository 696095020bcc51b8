"""Tensor rules (D2xx; D1xx are the loader's): data length against dims for every
encoding, raw_data and typed fields both set, external data fields, sparse tensors."""

from __future__ import annotations

import math
import posixpath
from collections.abc import Iterable

from onnx import AttributeProto, SparseTensorProto, TensorProto

from onnxviz.check.context import CheckContext
from onnxviz.check.registry import diag
from onnxviz.model.diagnostics import Diagnostic
from onnxviz.model.scope_names import readable_path
from onnxviz.model.scopes import GraphScope

NameDiags = dict[str, list[Diagnostic]]
Problem = tuple[str, str]  # (code, text after "Tensor 'x' ")

try:
    from onnxviz.model.dtypes import ELEMENT_TYPES

    _BITS = {c: et.bits for c, et in ELEMENT_TYPES.items()}
    _FIELD = {c: et.field for c, et in ELEMENT_TYPES.items()}
except ImportError:  # pragma: no cover
    _BITS, _FIELD = {}, {}

_TYPED_FIELDS = (
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)
_EXTERNAL_KEYS = {"location", "offset", "length", "checksum", "basepath"}
_COMPLEX = {TensorProto.COMPLEX64, TensorProto.COMPLEX128}


_PLAIN_FIELDS = {"name", "dims", "data_type", "doc_string"}


def _plain_raw_ok(t: TensorProto) -> bool:
    """The common case in one protobuf call: an in-model raw_data tensor of a known
    fixed-width type whose byte count fits its dims."""
    raw = None
    dt = 0
    dims: Iterable[int] = ()
    for fd, value in t.ListFields():
        name = fd.name
        if name == "raw_data":
            raw = value
        elif name == "data_type":
            dt = value
        elif name == "dims":
            dims = value
        elif name not in _PLAIN_FIELDS:
            return False
    bits = _BITS.get(dt, 0)
    if raw is None or bits == 0:
        return False
    n = 1
    for d in dims:
        if d < 0:
            return False
        n *= d
    return len(raw) == (n * bits + 7) // 8


def tensor_problems(t: TensorProto) -> list[Problem]:
    if _plain_raw_ok(t):
        return []
    out: list[Problem] = []
    dt = t.data_type
    if dt == 0 or dt not in _BITS:
        out.append(("D210", "has no data type" if dt == 0 else f"has unknown data type {dt}"))
    if any(d < 0 for d in t.dims):
        out.append(("D213", f"has a negative dimension in {list(t.dims)}"))
        return out
    n = math.prod(t.dims)
    if t.HasField("segment"):
        n = max(0, t.segment.end - t.segment.begin)
    typed = [f for f in _TYPED_FIELDS if len(getattr(t, f))]
    has_raw = t.HasField("raw_data")
    if t.data_location == TensorProto.EXTERNAL:
        from onnxviz.model.inplace import inplace_ref

        kept = inplace_ref(t)
        if kept is not None and dt in _BITS and dt != TensorProto.STRING:
            # Embedded raw_data the loader left in the file (model.inplace): check it as such.
            want = (n * _BITS[dt] + 7) // 8
            if kept.length != want:
                out.append(
                    (
                        "D201",
                        f"has {kept.length} bytes of raw_data but its dims {list(t.dims)} need {want}",
                    )
                )
            return out
        out.extend(_external_problems(t))
        if typed or has_raw:
            out.append(
                (
                    "D206",
                    "is stored externally but also holds values in "
                    + ", ".join(typed + (["raw_data"] if has_raw else [])),
                )
            )
        return out
    if len(t.external_data):
        out.append(("D207", "has external_data entries but data_location is DEFAULT"))
    if dt not in _BITS:
        return out
    if has_raw and typed:
        out.append(("D202", f"holds data both in raw_data and in {', '.join(typed)}"))
        return out
    if dt == TensorProto.STRING:
        if has_raw:
            out.append(("D211", "is a string tensor stored in raw_data"))
        elif len(t.string_data) != n:
            out.append(
                ("D201", f"holds {len(t.string_data)} strings but its dims {list(t.dims)} need {n}")
            )
        return out
    bits = _BITS[dt]
    if has_raw:
        want = (n * bits + 7) // 8
        got = len(t.raw_data)
        if got != want:
            out.append(
                ("D201", f"has {got} bytes of raw_data but its dims {list(t.dims)} need {want}")
            )
        return out
    if not typed:
        if n != 0:
            out.append(("D201", f"holds no data but its dims {list(t.dims)} need {n} elements"))
        return out
    field = typed[0]
    count = len(getattr(t, field))
    if len(typed) > 1 or field != _FIELD.get(dt):
        out.append(
            (
                "D201",
                f"stores its values in {', '.join(typed)}, but a {TensorProto.DataType.Name(dt)} tensor uses {_FIELD.get(dt)}",
            )
        )
        return out
    if dt in _COMPLEX:
        want = 2 * n
    elif bits == 4:
        want = (n + 1) // 2
    elif bits == 2:
        want = (n + 3) // 4
    else:
        want = n
    if count != want:
        out.append(
            ("D201", f"holds {count} entries in {field} but its dims {list(t.dims)} need {want}")
        )
    return out


def _external_problems(t: TensorProto) -> list[Problem]:
    out: list[Problem] = []
    entries: dict[str, str] = {}
    for e in t.external_data:
        entries.setdefault(e.key, e.value)
        if e.key not in _EXTERNAL_KEYS:
            out.append(("D212", f"has unknown external data key '{e.key}'"))
    loc = entries.get("location")
    if not loc:
        out.append(("D203", "is stored externally but has no 'location'"))
    else:
        norm = posixpath.normpath(loc.replace("\\", "/"))
        if (
            norm.startswith("/")
            or norm == ".."
            or norm.startswith("../")
            or (len(loc) > 1 and loc[1] == ":")
        ):
            out.append(("D205", f"has external location '{loc}', which leaves the model's folder"))
    for key in ("offset", "length"):
        v = entries.get(key)
        if v is not None and not (v.isdigit() and v.isascii()):
            out.append(("D204", f"has external {key} '{v}', which is not a non-negative integer"))
    return out


def sparse_problems(s: SparseTensorProto) -> list[Problem]:
    out: list[Problem] = []
    values, indices, dims = s.values, s.indices, list(s.dims)
    out.extend(tensor_problems(values))
    if indices.dims or indices.data_type:
        out.extend(tensor_problems(indices))
    if any(code in ("D201", "D213", "D210", "D202") for code, _ in out):
        return out
    if any(d < 0 for d in dims):
        return [("D209", f"has negative dense dims {dims}")]
    if len(values.dims) != 1:
        return [("D209", f"has values of rank {len(values.dims)}; values must be 1-D")]
    nnz = values.dims[0]
    if indices.data_type != TensorProto.INT64:
        return [("D209", "has indices that are not int64")]
    r = len(dims)
    idims = list(indices.dims)
    if idims not in ([nnz], [nnz, r]):
        return [("D209", f"has indices of shape {idims}; [{nnz}] or [{nnz}, {r}] is needed")]
    if (
        values.data_location == TensorProto.EXTERNAL
        or indices.data_location == TensorProto.EXTERNAL
    ):
        return out
    import numpy as np

    try:
        from onnxviz.model.tensors import to_array

        idx = np.asarray(to_array(indices), dtype=np.int64)
    except Exception:
        return out
    total = math.prod(dims)
    if idx.ndim == 2:
        if ((idx < 0) | (idx >= np.asarray(dims, dtype=np.int64))).any():
            return [("D208", f"has an index outside the dense shape {dims}")]
        strides = np.asarray([math.prod(dims[k + 1 :]) for k in range(r)], dtype=np.int64)
        idx = idx @ strides if r else np.zeros(len(idx), dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= total):
        return [("D208", f"has an index outside the dense shape {dims} ({total} elements)")]
    if idx.size > 1 and (np.diff(idx) <= 0).any():
        return [("D208", "has indices that are not strictly increasing")]
    return out


def _loader_reported(ctx: CheckContext, name: str) -> bool:
    return any(
        getattr(d, "code", "").startswith("D1") and d.location.value == name
        for d in ctx.load_diagnostics
    )


def name_rules(ctx: CheckContext, scope: GraphScope, names: Iterable[str]) -> NameDiags:
    """Initializers (dense and sparse) defined under these names."""
    g = scope.graph
    out: NameDiags = {}
    if g is None:
        return out
    path = scope.path
    for name in names:
        found: list[Diagnostic] = []
        for d in scope.other_definitions().get(name, ()):  # initializers are never node outputs
            if d.kind == "initializer":
                probs = tensor_problems(g.initializer[d.index])
                fld = "initializer"
                what = "Initializer"
            elif d.kind == "sparse_initializer":
                probs = sparse_problems(g.sparse_initializer[d.index])
                fld = "sparse_initializer"
                what = "Sparse initializer"
            else:
                continue
            for code, text in probs:
                if code == "D205" and _loader_reported(ctx, name):
                    continue
                found.append(diag(code, f"{what} '{name}' {text}.", path, value=name, field=fld))
        if found:
            out[name] = found
    return out


def scope_rules(ctx: CheckContext, scope: GraphScope) -> list[Diagnostic]:
    g = scope.graph
    if g is None or not len(g.sparse_initializer) or ctx.ir_version >= 6 or ctx.ir_version == 0:
        return []
    return [
        diag(
            "M013",
            f"Graph '{readable_path(scope)}' has sparse initializers, which need IR version 6 (the model has {ctx.ir_version}).",
            scope.path,
            field="sparse_initializer",
        )
    ]


def node_rules(ctx: CheckContext, scope: GraphScope, index: int) -> list[Diagnostic]:
    """Tensors held by node attributes (Constant values and the like)."""
    node = scope.nodes[index]
    out: list[Diagnostic] = []
    for attr in node.attribute:
        t = attr.type
        if t not in (
            AttributeProto.TENSOR,
            AttributeProto.TENSORS,
            AttributeProto.SPARSE_TENSOR,
            AttributeProto.SPARSE_TENSORS,
            AttributeProto.UNDEFINED,
        ):
            continue
        items: list[tuple[str, list[Problem]]] = []
        if attr.HasField("t"):
            items.append(("tensor", tensor_problems(attr.t)))
        if attr.HasField("sparse_tensor"):
            items.append(("sparse tensor", sparse_problems(attr.sparse_tensor)))
        for i, tt in enumerate(attr.tensors):
            items.append((f"tensor #{i}", tensor_problems(tt)))
        for i, st in enumerate(attr.sparse_tensors):
            items.append((f"sparse tensor #{i}", sparse_problems(st)))
        if not any(p for _, p in items):
            continue
        label = scope.node_label(index)
        for what, probs in items:
            for code, text in probs:
                out.append(
                    diag(
                        code,
                        f"The {what} in attribute '{attr.name}' of node '{label}' {text}.",
                        scope.path,
                        node=label,
                        attribute=attr.name,
                    )
                )
    return out
