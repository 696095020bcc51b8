"""Runtime values: tensors (np.ndarray), sequences (list), maps (dict), optionals (None
for empty).  Helpers to describe them, to measure them, to turn protobuf values (test
data, .pb files) into them, and to compute in a wider type where numpy has no
arithmetic for an element type (ml_dtypes floats, int4/uint4/int2/uint2).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import MapProto, OptionalProto, SequenceProto, TensorProto, TypeProto
from onnx.helper import np_dtype_to_tensor_dtype, tensor_dtype_to_np_dtype

from onnxviz.errors import ExecutionError
from onnxviz.model.tensors import to_array


def elem_type_to_dtype(elem_type: int) -> np.dtype[Any]:
    try:
        return np.dtype(tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        raise ExecutionError(f"unknown tensor element type {elem_type}") from None


def dtype_to_elem_type(dtype: np.dtype[Any]) -> int:
    if dtype == np.dtype(object):
        return TensorProto.STRING
    return int(np_dtype_to_tensor_dtype(dtype))


def is_tensor(value: Any) -> bool:
    return isinstance(value, np.ndarray)


# dtype -> its name in describe(): numpy's str(dtype) runs Python code (~10 us), and the
# run panel describes every value of a stepped run.
_DTYPE_NAMES: dict[np.dtype[Any], str] = {}


def describe(value: Any) -> str:
    """Short type-and-shape text: ``float32[1,3,224,224]``, ``seq(float32[2]) x3``,
    ``map(int64 -> float32) x4``, ``optional(empty)``."""
    if value is None:
        return "optional(empty)"
    if isinstance(value, np.ndarray):
        dt = value.dtype
        dtype = _DTYPE_NAMES.get(dt)
        if dtype is None:
            dtype = _DTYPE_NAMES[dt] = "string" if dt.kind == "O" else str(dt)
        return f"{dtype}[{','.join(map(str, value.shape))}]"
    if isinstance(value, np.generic):
        return describe(np.asarray(value))
    if isinstance(value, list):
        inner = describe(value[0]) if value else "?"
        return f"seq({inner}) x{len(value)}"
    if isinstance(value, dict):
        if not value:
            return "map(empty)"
        k, v = next(iter(value.items()))
        return f"map({type(k).__name__} -> {describe(v)}) x{len(value)}"
    return type(value).__name__


def nbytes(value: Any) -> int:
    """Memory held by a value (tensors inside sequences and maps included)."""
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return int(value.size * 8 + sum(len(str(s)) for s in value.flat))
        return int(value.nbytes)
    if isinstance(value, list):
        return sum(nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values()) + 8 * len(value)
    return 0


def _float_view(value: np.ndarray) -> np.ndarray | None:
    kind = value.dtype.kind
    if kind in "fc":
        return value
    if kind == "V" or (kind not in "biuOUS" and value.dtype.itemsize <= 2):
        # ml_dtypes floats report kind 'V' in some numpy versions
        try:
            return value.astype(np.float32)
        except (TypeError, ValueError):
            return None
    return None


def has_nonfinite(value: Any) -> bool:
    """True if a float tensor (or one inside a sequence/map) holds NaN or Inf."""
    if isinstance(value, np.ndarray):
        if value.dtype == object or value.dtype.kind in "biuUS":
            return False
        floats = _float_view(value)
        if floats is None:
            return False
        return not bool(np.isfinite(floats).all())
    if isinstance(value, list):
        return any(has_nonfinite(v) for v in value)
    if isinstance(value, dict):
        return any(has_nonfinite(v) for v in value.values())
    return False


# numpy has no arithmetic for these; compute in the wider type, then cast back.
_NARROW_FLOAT_NAMES = {
    "bfloat16",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
}
_NARROW_INT_NAMES = {"int4", "uint4", "int2", "uint2"}


def compute_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype to do arithmetic in for ``dtype`` (itself when numpy supports it)."""
    if dtype.name in _NARROW_FLOAT_NAMES:
        return np.dtype(np.float32)
    if dtype.name in _NARROW_INT_NAMES:
        return np.dtype(np.int32)
    return dtype


def widen(value: np.ndarray) -> np.ndarray:
    target = compute_dtype(value.dtype)
    return value if target == value.dtype else value.astype(target)


def narrow(value: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """Cast a widened result back (ml_dtypes rounds to nearest even as the spec says)."""
    return value if value.dtype == dtype else value.astype(dtype)


def from_proto(value: Any, base_dir: str | None = None) -> Any:
    """A TensorProto / SequenceProto / MapProto / OptionalProto (or a value that is
    already numpy / list / dict / None) as a runtime value."""
    if isinstance(value, TensorProto):
        return to_array(value, base_dir)
    if isinstance(value, SequenceProto):
        return _sequence_from_proto(value, base_dir)
    if isinstance(value, MapProto):
        keys = (
            [k.decode("utf-8") for k in value.string_keys]
            if value.key_type == TensorProto.STRING
            else [int(k) for k in value.keys]
        )
        vals = _sequence_from_proto(value.values, base_dir)
        return dict(zip(keys, vals))
    if isinstance(value, OptionalProto):
        if value.elem_type == OptionalProto.TENSOR and value.HasField("tensor_value"):
            return to_array(value.tensor_value, base_dir)
        if value.elem_type == OptionalProto.SEQUENCE and value.HasField("sequence_value"):
            return _sequence_from_proto(value.sequence_value, base_dir)
        if value.elem_type == OptionalProto.MAP and value.HasField("map_value"):
            return from_proto(value.map_value, base_dir)
        if value.elem_type == OptionalProto.OPTIONAL and value.HasField("optional_value"):
            return from_proto(value.optional_value, base_dir)
        return None
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, (list, tuple)):
        return [from_proto(v, base_dir) for v in value]
    if isinstance(value, dict):
        return {k: from_proto(v, base_dir) for k, v in value.items()}
    return value


def _sequence_from_proto(seq: SequenceProto, base_dir: str | None) -> list[Any]:
    et = seq.elem_type
    if et == SequenceProto.TENSOR:
        return [to_array(t, base_dir) for t in seq.tensor_values]
    if et == SequenceProto.SPARSE_TENSOR:
        from onnxviz.runtime.attributes import _sparse_to_dense

        return [_sparse_to_dense(s) for s in seq.sparse_tensor_values]
    if et == SequenceProto.SEQUENCE:
        return [_sequence_from_proto(s, base_dir) for s in seq.sequence_values]
    if et == SequenceProto.MAP:
        return [from_proto(m, base_dir) for m in seq.map_values]
    if et == SequenceProto.OPTIONAL:
        return [from_proto(o, base_dir) for o in seq.optional_values]
    return []


def load_proto_file(path: str) -> Any:
    """A value from a serialized TensorProto / SequenceProto / MapProto / OptionalProto
    file (the ONNX test-data format); tried in that order."""
    with open(path, "rb") as fh:
        data = fh.read()
    import os

    base_dir = os.path.dirname(os.path.abspath(path))
    for cls in (TensorProto, SequenceProto, MapProto, OptionalProto):
        proto = cls()
        try:
            proto.ParseFromString(data)
        except Exception:
            continue
        if cls is TensorProto and (proto.dims or proto.data_type):
            return to_array(proto, base_dir)
        if cls is SequenceProto and proto.elem_type:
            return _sequence_from_proto(proto, base_dir)
        if cls is MapProto and proto.key_type:
            return from_proto(proto, base_dir)
        if cls is OptionalProto and proto.elem_type:
            return from_proto(proto, base_dir)
    tensor = TensorProto()
    tensor.ParseFromString(data)
    return to_array(tensor, base_dir)


def empty_like_type(type_proto: TypeProto) -> Any:
    """An empty value of a declared type, for scan outputs of a loop that ran zero times:
    a tensor with a leading 0 and the declared dims (unknown dims become 0)."""
    if type_proto.HasField("tensor_type"):
        tt = type_proto.tensor_type
        dtype = elem_type_to_dtype(tt.elem_type) if tt.elem_type else np.dtype(np.float32)
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tt.shape.dim]
        return np.empty([0, *dims], dtype=dtype)
    if type_proto.HasField("sequence_type"):
        return []
    return np.empty([0], dtype=np.float32)
