"""TensorProto <-> numpy for every ONNX element type.

Decoding (`to_array`) reads, in this order of precedence:

* external data (`data_location == EXTERNAL`): the bytes come from
  `onnxviz.model.external.read_external_bytes` and are decoded like raw_data;
* `raw_data`: fixed-width little-endian elements; bool one byte per element; complex as
  (real, imag) pairs; int4/uint4/float4e2m1 two per byte (first element in the low nibble);
  int2/uint2 four per byte (first element in bits 0-1); float6 types as an LSB-first 6-bit
  stream, four elements in three bytes, the last group zero-padded;
* the typed field named by the element-type table (`onnxviz.model.dtypes`), as onnx.proto
  documents it: float16/bfloat16/float8 bit patterns in int32_data, bool 0/1 in int32_data,
  4-bit types one packed byte (two elements) per int32_data entry, 2-bit types one packed
  byte (four elements) per entry, float6 one 6-bit pattern per entry, uint32/uint64 in
  uint64_data, complex as interleaved (real, imag) float_data/double_data.

Strings (STRING, always in string_data) decode to a `dtype=object` array whose elements are
Python `str` when the bytes are valid UTF-8 and the original `bytes` otherwise, so a model
with a broken string is still viewable and re-encodes to the same bytes.

Arrays decoded from raw or external bytes are read-only views over those bytes (no copy of
the data; note that the protobuf runtime itself hands out a fresh `bytes` copy of
`raw_data` on every attribute access).  Call `.copy()` before writing into them.

A tensor carrying `segment` (begin, end) holds the row-major elements [begin, end) of the
full tensor whose shape is `dims`; it decodes to that 1-D slice.

Every failure is a `TensorDecodeError` whose message names the tensor.  Decoding is
bounded: a tensor claiming more than `max_elements` elements is refused before anything is
allocated.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import SparseTensorProto, TensorProto

from onnxviz.errors import OnnxvizError
from onnxviz.model.dtypes import ELEMENT_TYPES, ElementType, elem_type_of

DEFAULT_MAX_ELEMENTS = 2**31

_TYPED_FIELDS = (
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)
_BIG_ENDIAN = sys.byteorder == "big"


class TensorDecodeError(OnnxvizError):
    """A TensorProto (or SparseTensorProto) cannot be turned into an array."""


# --------------------------------------------------------------------------- declarations


def _label(tensor: TensorProto) -> str:
    return f"tensor '{tensor.name}'" if tensor.name else "an unnamed tensor"


def _element_type(tensor: TensorProto) -> ElementType:
    et = ELEMENT_TYPES.get(tensor.data_type)
    if et is None:
        what = "no data type" if tensor.data_type == 0 else f"unknown data type {tensor.data_type}"
        raise TensorDecodeError(f"{_label(tensor).capitalize()} has {what}.")
    return et


def _dims(tensor: TensorProto) -> tuple[int, ...]:
    dims = tuple(int(d) for d in tensor.dims)
    if any(d < 0 for d in dims):
        raise TensorDecodeError(f"{_label(tensor).capitalize()} has negative dims {list(dims)}.")
    return dims


def _segment(tensor: TensorProto, total: int) -> tuple[int, int] | None:
    if not tensor.HasField("segment"):
        return None
    begin, end = int(tensor.segment.begin), int(tensor.segment.end)
    if not 0 <= begin <= end <= total:
        raise TensorDecodeError(
            f"{_label(tensor).capitalize()} has segment [{begin}, {end}) outside its "
            f"{total} elements."
        )
    return begin, end


def _stored_shape(tensor: TensorProto) -> tuple[int, ...]:
    """Shape of the array this TensorProto decodes to (the segment slice if it has one)."""
    dims = _dims(tensor)
    segment = _segment(tensor, math.prod(dims))
    if segment is None:
        return dims
    return (segment[1] - segment[0],)


def tensor_nbytes(tensor: TensorProto) -> int:
    """Declared data size in bytes from dims and type, without decoding.

    Sub-byte types count packed bytes (ceil(n * bits / 8)); strings count the bytes of
    their string_data entries.  Raises TensorDecodeError for unknown types or negative dims.
    """
    et = _element_type(tensor)
    if et.is_string:
        return sum(len(s) for s in tensor.string_data)
    return _packed_nbytes(math.prod(_dims(tensor)), et)


def describe_tensor(tensor: TensorProto) -> str:
    """Short text for UI rows, e.g. `float32[64,3,7,7]`; never raises."""
    et = ELEMENT_TYPES.get(tensor.data_type)
    name = et.name if et else ("undefined" if tensor.data_type == 0 else f"type{tensor.data_type}")
    return f"{name}[{','.join(str(d) for d in tensor.dims)}]"


def _packed_nbytes(count: int, et: ElementType) -> int:
    return (count * et.bits + 7) // 8


# --------------------------------------------------------------------------- decoding


def to_array(
    tensor: TensorProto,
    base_dir: str | None = None,
    *,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> np.ndarray:
    """Decode a TensorProto to a numpy array (read-only view over raw bytes when possible).

    `base_dir` is the model's folder, used to resolve external data.  Raises
    TensorDecodeError naming the tensor when the data cannot be decoded or the tensor
    claims more than `max_elements` elements.
    """
    et = _element_type(tensor)
    shape = _stored_shape(tensor)
    count = math.prod(shape)
    if count > max_elements:
        raise TensorDecodeError(
            f"{_label(tensor).capitalize()} claims {count} elements, more than the limit of "
            f"{max_elements}."
        )
    typed = [f for f in _TYPED_FIELDS if len(getattr(tensor, f))]
    has_raw = tensor.HasField("raw_data")
    external = tensor.data_location == TensorProto.EXTERNAL
    sources = typed + (["raw_data"] if has_raw else []) + (["external data"] if external else [])
    if len(sources) > 1:
        raise TensorDecodeError(
            f"{_label(tensor).capitalize()} stores its data in more than one place "
            f"({', '.join(sources)})."
        )
    if external:
        from onnxviz.model.external import read_external_bytes

        buffer = read_external_bytes(tensor, base_dir)
        return _decode_bytes(tensor, et, buffer, shape, "external data")
    if has_raw:
        return _decode_bytes(tensor, et, tensor.raw_data, shape, "raw_data")
    if typed and typed[0] != et.field:
        raise TensorDecodeError(
            f"{_label(tensor).capitalize()} of type {et.name} carries {typed[0]}, but that "
            f"type is stored in {et.field}."
        )
    return _decode_typed(tensor, et, shape)


def _decode_bytes(
    tensor: TensorProto, et: ElementType, buffer: Any, shape: tuple[int, ...], source: str
) -> np.ndarray:
    if et.is_string:
        raise TensorDecodeError(
            f"{_label(tensor).capitalize()} is a string tensor but stores {source}; "
            "strings must be in string_data."
        )
    data = memoryview(buffer).cast("B")
    count = math.prod(shape)
    expected = _packed_nbytes(count, et)
    if len(data) != expected:
        raise TensorDecodeError(
            f"{_label(tensor).capitalize()} has {len(data)} bytes of {source}, but "
            f"{et.name}{list(shape)} needs {expected}."
        )
    u8 = np.frombuffer(data, dtype=np.uint8)
    if et.is_sub_byte:
        return _unpack(u8, et, count).reshape(shape)
    if et.dtype == np.bool_:
        return (u8 != 0).reshape(shape)
    array = u8.view(et.dtype)
    if _BIG_ENDIAN and et.dtype.itemsize > 1:
        array = array.byteswap()
    return array.reshape(shape)


def _unpack(packed: np.ndarray, et: ElementType, count: int) -> np.ndarray:
    """Unpack sub-byte elements (LSB first) into one uint8 per element, viewed as et.dtype."""
    if et.bits == 6:
        return _unpack_6bit(packed, count).view(et.dtype)
    per_byte = 8 // et.bits
    mask = (1 << et.bits) - 1
    out = np.empty((packed.size, per_byte), dtype=np.uint8)
    for slot in range(per_byte):  # 2 or 4 vectorised passes, not a per-element loop
        np.bitwise_and(packed >> (slot * et.bits), mask, out=out[:, slot])
    return out.reshape(-1)[:count].view(et.dtype)


def _unpack_6bit(packed: np.ndarray, count: int) -> np.ndarray:
    groups = (count + 3) // 4
    padded = np.zeros(groups * 3, dtype=np.uint8)
    padded[: packed.size] = packed
    b0, b1, b2 = (padded[i::3] for i in range(3))
    out = np.empty((groups, 4), dtype=np.uint8)
    out[:, 0] = b0 & 0x3F
    out[:, 1] = (b0 >> 6) | ((b1 & 0x0F) << 2)
    out[:, 2] = (b1 >> 4) | ((b2 & 0x03) << 4)
    out[:, 3] = b2 >> 2
    return out.reshape(-1)[:count]


def _decode_typed(tensor: TensorProto, et: ElementType, shape: tuple[int, ...]) -> np.ndarray:
    count = math.prod(shape)
    field = getattr(tensor, et.field)
    if et.is_string:
        _expect_length(tensor, et, len(field), count, shape)
        return _decode_strings(field, shape)
    if et.bits < 8:
        # Sub-byte types: each int32_data entry is one packed byte, except float6 (one
        # element per entry).
        per_entry = 1 if et.bits == 6 else 8 // et.bits
        _expect_length(tensor, et, len(field), -(-count // per_entry), shape)
        low_bytes = np.asarray(field, dtype=np.int32).astype(np.uint8)
        if et.bits == 6:
            return (low_bytes & 0x3F).view(et.dtype).reshape(shape)
        return _unpack(low_bytes, et, count).reshape(shape)
    pairs = 2 if et.dtype.kind == "c" else 1
    _expect_length(tensor, et, len(field), count * pairs, shape)
    if pairs == 2:
        part = np.float32 if et.dtype == np.complex64 else np.float64
        return np.asarray(field, dtype=part).view(et.dtype).reshape(shape)
    if et.field == "int32_data":
        values = np.asarray(field, dtype=np.int32)
        if et.dtype == np.bool_:
            return (values != 0).reshape(shape)
        if et.dtype.kind in "iu":
            return values.astype(et.dtype).reshape(shape)  # wraps like a C cast
        # float16, bfloat16, float8: bit patterns in the low bits of each entry.
        bits_dtype = np.uint16 if et.dtype.itemsize == 2 else np.uint8
        return values.astype(bits_dtype).view(et.dtype).reshape(shape)
    storage = {"uint64_data": np.uint64, "int64_data": np.int64}.get(et.field)
    return np.asarray(field, dtype=storage or et.dtype).astype(et.dtype, copy=False).reshape(shape)


def _expect_length(
    tensor: TensorProto, et: ElementType, actual: int, expected: int, shape: tuple[int, ...]
) -> None:
    if actual != expected:
        raise TensorDecodeError(
            f"{_label(tensor).capitalize()} has {actual} entries in {et.field}, but "
            f"{et.name}{list(shape)} needs {expected}."
        )


def _decode_strings(values: Sequence[bytes], shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, raw in enumerate(values):  # strings are Python objects: one per element anyway
        try:
            out[i] = raw.decode("utf-8")
        except UnicodeDecodeError:
            out[i] = bytes(raw)
    return out.reshape(shape)


# --------------------------------------------------------------------------- encoding


def from_array(array: Any, name: str = "") -> TensorProto:
    """Encode an array (or anything `np.asarray` accepts) as a TensorProto.

    Numeric types go to little-endian `raw_data` (sub-byte types packed as onnx.proto
    prescribes); str/bytes/object arrays go to `string_data` (str encoded as UTF-8).
    Read-only arrays are fine: the input is never written.
    """
    arr = np.asarray(array)
    tensor = TensorProto()
    tensor.name = name
    tensor.dims.extend(int(d) for d in arr.shape)
    elem = elem_type_of(arr.dtype)
    tensor.data_type = elem
    et = ELEMENT_TYPES[elem]
    if et.is_string:
        tensor.string_data.extend(_encode_string(v, name) for v in arr.reshape(-1).tolist())
        return tensor
    tensor.raw_data = encode_raw(arr, et)
    return tensor


def encode_raw(arr: np.ndarray, et: ElementType) -> bytes:
    """The raw_data bytes of `arr` (already of dtype et.dtype or castable to it)."""
    flat = np.ascontiguousarray(arr, dtype=et.dtype).reshape(-1)
    if et.is_sub_byte:
        return _pack(flat.view(np.uint8), et).tobytes()
    if _BIG_ENDIAN and et.dtype.itemsize > 1:
        flat = flat.byteswap()
    return flat.tobytes()


def _pack(values: np.ndarray, et: ElementType) -> np.ndarray:
    """Pack one-element-per-byte sub-byte values (only low bits used) LSB first."""
    mask = (1 << et.bits) - 1
    if et.bits == 6:
        groups = (values.size + 3) // 4
        v = np.zeros((groups, 4), dtype=np.uint8)
        v.reshape(-1)[: values.size] = values & mask
        out = np.empty((groups, 3), dtype=np.uint8)
        out[:, 0] = v[:, 0] | (v[:, 1] << 6)
        out[:, 1] = (v[:, 1] >> 2) | (v[:, 2] << 4)
        out[:, 2] = (v[:, 2] >> 4) | (v[:, 3] << 2)
        return out.reshape(-1)[: (values.size * 6 + 7) // 8]
    per_byte = 8 // et.bits
    groups = (values.size + per_byte - 1) // per_byte
    v = np.zeros((groups, per_byte), dtype=np.uint8)
    v.reshape(-1)[: values.size] = values & mask
    packed = v[:, 0].copy()
    for slot in range(1, per_byte):  # 1 or 3 vectorised passes
        packed |= v[:, slot] << (slot * et.bits)
    return packed


def _encode_string(value: Any, name: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    what = f"tensor '{name}'" if name else "a string tensor"
    raise ValueError(
        f"Cannot store a {type(value).__name__} in {what}: string elements must be str or bytes."
    )


# --------------------------------------------------------------------------- sparse


def sparse_to_dense(
    sparse: SparseTensorProto,
    base_dir: str | None = None,
    *,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> np.ndarray:
    """Dense array of a SparseTensorProto (zeros, or "" for strings, where no value is given).

    Indices may be [NNZ] linearized row-major positions or [NNZ, rank] coordinates; they
    must be in range and strictly ascending (the IR requires it).
    """
    values_proto = sparse.values
    label = (
        f"sparse tensor '{values_proto.name}'" if values_proto.name else "an unnamed sparse tensor"
    )
    dims = tuple(int(d) for d in sparse.dims)
    if any(d < 0 for d in dims):
        raise TensorDecodeError(f"{label.capitalize()} has negative dims {list(dims)}.")
    total = math.prod(dims)
    if total > max_elements:
        raise TensorDecodeError(
            f"{label.capitalize()} claims {total} elements, more than the limit of {max_elements}."
        )
    values = to_array(values_proto, base_dir, max_elements=max_elements)
    if values.ndim != 1:
        raise TensorDecodeError(
            f"{label.capitalize()} has values of shape {list(values.shape)}; they must be [NNZ]."
        )
    nnz = values.shape[0]
    indices = to_array(sparse.indices, base_dir, max_elements=max_elements)
    if indices.dtype.kind not in "iu":
        raise TensorDecodeError(f"{label.capitalize()} has non-integer indices ({indices.dtype}).")
    linear = _linear_indices(indices.astype(np.int64), dims, nnz, label)
    if linear.size and (linear.min() < 0 or linear.max() >= total):
        raise TensorDecodeError(
            f"{label.capitalize()} has an index outside its shape {list(dims)}."
        )
    if linear.size > 1 and not bool(np.all(linear[1:] > linear[:-1])):
        raise TensorDecodeError(
            f"{label.capitalize()} has indices that are not strictly ascending."
        )
    if values.dtype == object:
        dense = np.full(total, "", dtype=object)
    else:
        dense = np.zeros(total, dtype=values.dtype)
    dense[linear] = values
    return dense.reshape(dims)


def _linear_indices(indices: np.ndarray, dims: tuple[int, ...], nnz: int, label: str) -> np.ndarray:
    if indices.ndim == 1 and indices.shape[0] == nnz:
        return indices
    if indices.ndim == 2 and indices.shape == (nnz, len(dims)):
        bounds = np.asarray(dims, dtype=np.int64)
        if nnz and (np.any(indices < 0) or np.any(indices >= bounds)):
            raise TensorDecodeError(
                f"{label.capitalize()} has an index outside its shape {list(dims)}."
            )
        strides = np.ones(len(dims), dtype=np.int64)
        for axis in range(len(dims) - 2, -1, -1):  # rank steps, not elements
            strides[axis] = strides[axis + 1] * dims[axis + 1]
        return indices @ strides if len(dims) else np.zeros(nnz, dtype=np.int64)
    raise TensorDecodeError(
        f"{label.capitalize()} has indices of shape {list(indices.shape)}; they must be "
        f"[{nnz}] or [{nnz}, {len(dims)}]."
    )
