"""The element-type table covers every TensorProto.DataType and agrees with onnx's own helpers."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxviz.model import dtypes

ALL_CODES = [code for name, code in TensorProto.DataType.items() if name != "UNDEFINED"]


def test_every_onnx_data_type_has_a_row() -> None:
    assert sorted(dtypes.ELEMENT_TYPES) == sorted(ALL_CODES)


@pytest.mark.parametrize("code", ALL_CODES)
def test_numpy_dtype_matches_onnx_helper(code: int) -> None:
    expected = helper.tensor_dtype_to_np_dtype(code)
    assert dtypes.np_dtype(code) == expected


@pytest.mark.parametrize("code", ALL_CODES)
def test_typed_field_matches_onnx_helper(code: int) -> None:
    assert dtypes.element_type(code).field == helper.tensor_dtype_to_field(code)


@pytest.mark.parametrize("code", ALL_CODES)
def test_name_round_trip(code: int) -> None:
    name = dtypes.type_name(code)
    assert dtypes.elem_type_from_name(name) == code
    # The enum name is accepted too, in any case.
    enum_name = TensorProto.DataType.Name(code)
    assert dtypes.elem_type_from_name(enum_name) == code
    assert dtypes.elem_type_from_name(enum_name.lower()) == code


@pytest.mark.parametrize("code", [c for c in ALL_CODES if c != TensorProto.STRING])
def test_elem_type_of_numpy_dtype_round_trip(code: int) -> None:
    assert dtypes.elem_type_of(dtypes.np_dtype(code)) == code


def test_string_like_dtypes_map_to_string() -> None:
    for dt in (object, "U5", "S3"):
        assert dtypes.elem_type_of(dt) == TensorProto.STRING


def test_names_used_in_type_strings() -> None:
    expected = {
        TensorProto.FLOAT: "float32",
        TensorProto.DOUBLE: "float64",
        TensorProto.FLOAT16: "float16",
        TensorProto.BFLOAT16: "bfloat16",
        TensorProto.FLOAT8E4M3FN: "float8e4m3fn",
        TensorProto.FLOAT8E8M0: "float8e8m0",
        TensorProto.FLOAT4E2M1: "float4e2m1",
        TensorProto.FLOAT6E2M3: "float6e2m3",
        TensorProto.FLOAT6E3M2: "float6e3m2",
        TensorProto.INT4: "int4",
        TensorProto.UINT2: "uint2",
        TensorProto.BOOL: "bool",
        TensorProto.STRING: "string",
        TensorProto.COMPLEX128: "complex128",
    }
    for code, name in expected.items():
        assert dtypes.type_name(code) == name
    assert dtypes.elem_type_from_name("float") == TensorProto.FLOAT
    assert dtypes.elem_type_from_name("double") == TensorProto.DOUBLE


def test_bits_per_element() -> None:
    for code in ALL_CODES:
        et = dtypes.element_type(code)
        if et.is_string:
            assert et.bits == 0
        elif et.is_sub_byte:
            assert et.bits in (2, 4, 6)
        else:
            assert et.bits == 8 * et.dtype.itemsize
    assert dtypes.element_type(TensorProto.FLOAT6E3M2).bits == 6
    assert dtypes.np_dtype(TensorProto.FLOAT6E2M3) == np.dtype(ml_dtypes.float6_e2m3fn)


def test_min_ir_versions_follow_onnx_proto() -> None:
    ir = {code: dtypes.element_type(code).min_ir_version for code in ALL_CODES}
    assert ir[TensorProto.FLOAT] == 1
    assert ir[TensorProto.BFLOAT16] == 4
    assert ir[TensorProto.FLOAT8E5M2FNUZ] == 9
    assert ir[TensorProto.INT4] == 10
    assert ir[TensorProto.FLOAT4E2M1] == 11
    assert ir[TensorProto.FLOAT8E8M0] == 12
    assert ir[TensorProto.INT2] == 13
    assert ir[TensorProto.FLOAT6E2M3] == 14
    assert max(ir.values()) <= onnx.IR_VERSION


def test_unknown_codes_and_names_raise_value_error() -> None:
    with pytest.raises(ValueError, match="99"):
        dtypes.type_name(99)
    with pytest.raises(ValueError, match="float33"):
        dtypes.elem_type_from_name("float33")
    with pytest.raises(ValueError, match="datetime64"):
        dtypes.elem_type_of(np.dtype("datetime64[s]"))
