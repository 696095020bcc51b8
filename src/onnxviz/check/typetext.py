"""Type strings: the operator-schema form (``tensor(float)``, ``seq(tensor(int64))``) used to
match type constraints, and a short human form for messages."""

from __future__ import annotations

from onnx import TensorProto, TypeProto


def elem_str(elem_type: int) -> str | None:
    """Schema spelling of an element type (``float``, ``int64``, ``float8e4m3fn``)."""
    if elem_type == 0:
        return None
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return None


def schema_type_str(tp: TypeProto) -> str | None:
    """The operator-schema type string, or None when the type is incomplete."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        e = elem_str(tp.tensor_type.elem_type)
        return f"tensor({e})" if e else None
    if kind == "sparse_tensor_type":
        e = elem_str(tp.sparse_tensor_type.elem_type)
        return f"sparse_tensor({e})" if e else None
    if kind == "sequence_type":
        inner = schema_type_str(tp.sequence_type.elem_type)
        return f"seq({inner})" if inner else None
    if kind == "optional_type":
        inner = schema_type_str(tp.optional_type.elem_type)
        return f"optional({inner})" if inner else None
    if kind == "map_type":
        k = elem_str(tp.map_type.key_type)
        v = schema_type_str(tp.map_type.value_type)
        return f"map({k},{v})" if k and v else None
    return None


def type_text(tp: TypeProto | None) -> str:
    """Human text for a type; uses onnxviz.model.types when available."""
    if tp is None:
        return "no type"
    try:
        from onnxviz.model.types import type_to_text  # written by another helper

        return str(type_to_text(tp))
    except Exception:
        return _own_text(tp)


def _shape_text(shape_holder: TypeProto.Tensor | TypeProto.SparseTensor) -> str:
    if not shape_holder.HasField("shape"):
        return ""
    dims = []
    for d in shape_holder.shape.dim:
        if d.HasField("dim_value"):
            dims.append(str(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append("?")
    return "[" + ",".join(dims) + "]"


def _own_text(tp: TypeProto) -> str:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return f"{elem_str(tp.tensor_type.elem_type) or '?'}{_shape_text(tp.tensor_type)}"
    if kind == "sparse_tensor_type":
        e = elem_str(tp.sparse_tensor_type.elem_type) or "?"
        return f"sparse {e}{_shape_text(tp.sparse_tensor_type)}"
    if kind == "sequence_type":
        return f"seq<{_own_text(tp.sequence_type.elem_type)}>"
    if kind == "optional_type":
        return f"optional<{_own_text(tp.optional_type.elem_type)}>"
    if kind == "map_type":
        return f"map<{elem_str(tp.map_type.key_type)},{_own_text(tp.map_type.value_type)}>"
    return "no type"
