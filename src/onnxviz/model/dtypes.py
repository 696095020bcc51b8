"""The element-type table: one row per `TensorProto.DataType`.

Every place in onnxviz that needs to know something about an ONNX element type (its numpy
dtype, its short name in type strings, its width, the typed TensorProto field that carries it,
the IR version that introduced it) reads it from `ELEMENT_TYPES` here, so the codec, the type
text and the checks cannot disagree.

Non-native numpy types come from `ml_dtypes` (bfloat16, float8 variants, float4_e2m1fn,
float6_e2m3fn / float6_e3m2fn, int4/uint4, int2/uint2).  `ml_dtypes` stores each sub-byte
element in one byte; packing to the wire format happens in `onnxviz.model.tensors`.

Minimum IR versions come from the comments on `enum Version` in onnx.proto (onnx 1.23.2):
IR 4 "Add type BFLOAT16"; IR 9 "Added FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ";
IR 10 "Added UINT4, INT4"; IR 11 "Added FLOAT4E2M1"; IR 12 "Added FLOAT8E8M0";
IR 13 "Added UINT2, INT2"; IR 14 "Added FLOAT6E2M3, FLOAT6E3M2".  All other types exist
since the first published IR (version 1, 2017-10-10).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
from onnx import TensorProto


@dataclass(frozen=True)
class ElementType:
    """One ONNX element type and how onnxviz handles it."""

    code: int  # TensorProto.DataType value
    onnx_name: str  # enum name, e.g. "FLOAT"
    name: str  # short name used in type strings, e.g. "float32"
    dtype: np.dtype[Any]  # numpy dtype of decoded arrays (object for strings)
    bits: int  # bits per element on the wire (raw_data); 0 for strings
    field: str  # typed field carrying values when raw_data is not used
    min_ir_version: int  # first IR version that allows this type

    @property
    def is_string(self) -> bool:
        return self.code == TensorProto.STRING

    @property
    def is_sub_byte(self) -> bool:
        """Packed several to a byte in raw_data (4-, 2- and 6-bit types)."""
        return 0 < self.bits < 8


_T = TensorProto
_ROWS: list[tuple[int, str, Any, int, str, int]] = [
    # code, short name, numpy dtype, bits, typed field, min IR
    (_T.FLOAT, "float32", np.float32, 32, "float_data", 1),
    (_T.UINT8, "uint8", np.uint8, 8, "int32_data", 1),
    (_T.INT8, "int8", np.int8, 8, "int32_data", 1),
    (_T.UINT16, "uint16", np.uint16, 16, "int32_data", 1),
    (_T.INT16, "int16", np.int16, 16, "int32_data", 1),
    (_T.INT32, "int32", np.int32, 32, "int32_data", 1),
    (_T.INT64, "int64", np.int64, 64, "int64_data", 1),
    (_T.STRING, "string", object, 0, "string_data", 1),
    (_T.BOOL, "bool", np.bool_, 8, "int32_data", 1),
    (_T.FLOAT16, "float16", np.float16, 16, "int32_data", 1),
    (_T.DOUBLE, "float64", np.float64, 64, "double_data", 1),
    (_T.UINT32, "uint32", np.uint32, 32, "uint64_data", 1),
    (_T.UINT64, "uint64", np.uint64, 64, "uint64_data", 1),
    (_T.COMPLEX64, "complex64", np.complex64, 64, "float_data", 1),
    (_T.COMPLEX128, "complex128", np.complex128, 128, "double_data", 1),
    (_T.BFLOAT16, "bfloat16", ml_dtypes.bfloat16, 16, "int32_data", 4),
    (_T.FLOAT8E4M3FN, "float8e4m3fn", ml_dtypes.float8_e4m3fn, 8, "int32_data", 9),
    (_T.FLOAT8E4M3FNUZ, "float8e4m3fnuz", ml_dtypes.float8_e4m3fnuz, 8, "int32_data", 9),
    (_T.FLOAT8E5M2, "float8e5m2", ml_dtypes.float8_e5m2, 8, "int32_data", 9),
    (_T.FLOAT8E5M2FNUZ, "float8e5m2fnuz", ml_dtypes.float8_e5m2fnuz, 8, "int32_data", 9),
    (_T.UINT4, "uint4", ml_dtypes.uint4, 4, "int32_data", 10),
    (_T.INT4, "int4", ml_dtypes.int4, 4, "int32_data", 10),
    (_T.FLOAT4E2M1, "float4e2m1", ml_dtypes.float4_e2m1fn, 4, "int32_data", 11),
    (_T.FLOAT8E8M0, "float8e8m0", ml_dtypes.float8_e8m0fnu, 8, "int32_data", 12),
    (_T.UINT2, "uint2", ml_dtypes.uint2, 2, "int32_data", 13),
    (_T.INT2, "int2", ml_dtypes.int2, 2, "int32_data", 13),
    (_T.FLOAT6E2M3, "float6e2m3", ml_dtypes.float6_e2m3fn, 6, "int32_data", 14),
    (_T.FLOAT6E3M2, "float6e3m2", ml_dtypes.float6_e3m2fn, 6, "int32_data", 14),
]

ELEMENT_TYPES: dict[int, ElementType] = {
    code: ElementType(
        code=code,
        onnx_name=TensorProto.DataType.Name(code),
        name=name,
        dtype=np.dtype(dtype),
        bits=bits,
        field=field,
        min_ir_version=min_ir,
    )
    for code, name, dtype, bits, field, min_ir in _ROWS
}

_BY_NAME: dict[str, ElementType] = {}
for _et in ELEMENT_TYPES.values():
    _BY_NAME[_et.name] = _et
    _BY_NAME[_et.onnx_name.lower()] = _et
# Names used by the ONNX textual syntax and by numpy users.
_BY_NAME["float"] = ELEMENT_TYPES[TensorProto.FLOAT]
_BY_NAME["double"] = ELEMENT_TYPES[TensorProto.DOUBLE]

_BY_DTYPE: dict[np.dtype[Any], ElementType] = {
    et.dtype: et for et in ELEMENT_TYPES.values() if not et.is_string
}


def element_type(elem_type: int) -> ElementType:
    """The table row for an ONNX element type code; ValueError for unknown codes."""
    try:
        return ELEMENT_TYPES[elem_type]
    except KeyError:
        raise ValueError(f"{elem_type!r} is not a known ONNX element type.") from None


def np_dtype(elem_type: int) -> np.dtype[Any]:
    """The numpy dtype of decoded arrays (`object` for STRING)."""
    return element_type(elem_type).dtype


def elem_type_of(dtype: Any) -> int:
    """The ONNX element type code for a numpy dtype (str/bytes/object dtypes give STRING)."""
    dt = np.dtype(dtype)
    if dt.kind in "OUS":
        return TensorProto.STRING
    et = _BY_DTYPE.get(dt.newbyteorder("=") if dt.byteorder in "<>" else dt)
    if et is None:
        raise ValueError(f"numpy dtype {dt} has no ONNX element type.")
    return et.code


def type_name(elem_type: int) -> str:
    """Short name used in type strings, e.g. `float32`, `float8e4m3fn`, `int4`."""
    return element_type(elem_type).name


def elem_type_from_name(text: str) -> int:
    """Element type code for a short name (`float32`) or an enum name (`FLOAT`, any case).

    `float` and `double` are accepted as in the ONNX textual syntax.
    """
    et = _BY_NAME.get(text.strip().lower())
    if et is None:
        raise ValueError(f"'{text}' is not a known ONNX element type name.")
    return et.code


def is_known_elem_type(elem_type: int) -> bool:
    return elem_type in ELEMENT_TYPES
