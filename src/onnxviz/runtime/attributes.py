"""Decode a node's attributes into Python values, defaulted from the operator schema."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import onnx.defs
from onnx import AttributeProto, NodeProto

from onnxviz.model.tensors import to_array

_A = AttributeProto


def _sparse_to_dense(sparse: Any) -> Any:
    import numpy as np

    values = to_array(sparse.values)
    indices = to_array(sparse.indices)
    dims = list(sparse.dims)
    dense = np.zeros(int(np.prod(dims)) if dims else 1, dtype=values.dtype)
    if indices.ndim == 2:  # coordinate form [NNZ, rank]
        flat = np.ravel_multi_index(tuple(indices.T), dims) if len(dims) else indices[:, 0]
    else:
        flat = indices
    dense[flat] = values
    return dense.reshape(dims)


def decode_attribute(attr: AttributeProto, base_dir: str | None = None) -> Any:
    """The Python value of one attribute (strings decoded as UTF-8)."""
    t = attr.type
    if t == _A.FLOAT:
        return float(attr.f)
    if t == _A.INT:
        return int(attr.i)
    if t == _A.STRING:
        return attr.s.decode("utf-8", errors="surrogateescape")
    if t == _A.TENSOR:
        return to_array(attr.t, base_dir)
    if t == _A.GRAPH:
        return attr.g
    if t == _A.SPARSE_TENSOR:
        return _sparse_to_dense(attr.sparse_tensor)
    if t == _A.TYPE_PROTO:
        return attr.tp
    if t == _A.FLOATS:
        return [float(v) for v in attr.floats]
    if t == _A.INTS:
        return [int(v) for v in attr.ints]
    if t == _A.STRINGS:
        return [s.decode("utf-8", errors="surrogateescape") for s in attr.strings]
    if t == _A.TENSORS:
        return [to_array(x, base_dir) for x in attr.tensors]
    if t == _A.GRAPHS:
        return list(attr.graphs)
    if t == _A.SPARSE_TENSORS:
        return [_sparse_to_dense(x) for x in attr.sparse_tensors]
    if t == _A.TYPE_PROTOS:
        return list(attr.type_protos)
    # Untyped attribute (old exporters): guess from the field that is set.
    for field, conv in (("f", float), ("i", int)):
        if attr.HasField(field):
            return conv(getattr(attr, field))
    if attr.HasField("s"):
        return attr.s.decode("utf-8", errors="surrogateescape")
    if attr.HasField("t"):
        return to_array(attr.t, base_dir)
    if attr.HasField("g"):
        return attr.g
    if attr.floats:
        return [float(v) for v in attr.floats]
    if attr.ints:
        return [int(v) for v in attr.ints]
    if attr.strings:
        return [s.decode("utf-8", errors="surrogateescape") for s in attr.strings]
    return None


@lru_cache(maxsize=4096)
def schema_defaults(domain: str, op_type: str, opset: int) -> tuple[tuple[str, Any], ...]:
    """(name, default value) for every attribute of the schema that has a default."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except Exception:
        return ()
    out = []
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if default is not None and default.type != _A.UNDEFINED:
            out.append((name, decode_attribute(default)))
    return tuple(out)


def node_attributes(
    node: NodeProto,
    opset: int,
    base_dir: str | None = None,
    outer: dict[str, AttributeProto] | None = None,
) -> dict[str, Any]:
    """Attributes of ``node`` as keyword arguments: schema defaults first, then the node's.

    ``outer`` maps attribute names of an enclosing function call, for attributes that
    carry ``ref_attr_name`` (function bodies); an unresolved reference is left out so the
    schema default applies.
    """
    domain = "" if node.domain == "ai.onnx" else node.domain
    kwargs: dict[str, Any] = dict(schema_defaults(domain, node.op_type, opset))
    for attr in node.attribute:
        if attr.ref_attr_name:
            if outer is None or attr.ref_attr_name not in outer:
                continue
            kwargs[attr.name] = decode_attribute(outer[attr.ref_attr_name], base_dir)
        else:
            kwargs[attr.name] = decode_attribute(attr, base_dir)
    return kwargs
