"""Type text: exact forms, round trips both ways for generated nested types, bad text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, TypeProto, helper

from onnxviz.model.types import shape_of, text_to_type, type_to_text, value_info_text

ELEM_CODES = [code for name, code in TensorProto.DataType.items() if name != "UNDEFINED"]
KEY_CODES = [
    TensorProto.INT8,
    TensorProto.INT16,
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.UINT8,
    TensorProto.UINT64,
    TensorProto.STRING,
]
FAST = settings(max_examples=150, deadline=None)

# dim_param values: plain names, names that need quoting, and lookalikes of other dims.
dim_params = st.one_of(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True),
    st.sampled_from(["?", "3", "", "a b", 'q"t', "floor(N/2)", "x,y", "]", "s\\1", "\u00e9"]),
    st.text(max_size=6),
)
dims = st.one_of(
    st.integers(0, 4096).map(lambda v: ("value", v)),
    st.integers(-(2**63), 2**63 - 1).map(lambda v: ("value", v)),
    dim_params.map(lambda p: ("param", p)),
    st.just(("none", None)),
)
shapes = st.one_of(st.none(), st.lists(dims, max_size=4))


def _fill_tensor(target: TypeProto.Tensor | TypeProto.SparseTensor, elem: int, shape: list) -> None:
    target.elem_type = elem
    if shape is None:
        return
    target.shape.SetInParent()
    for kind, value in shape:
        dim = target.shape.dim.add()
        if kind == "value":
            dim.dim_value = value
        elif kind == "param":
            dim.dim_param = value


def _tensor(elem: int, shape: list) -> TypeProto:
    tp = TypeProto()
    _fill_tensor(tp.tensor_type, elem, shape)
    return tp


def _sparse(elem: int, shape: list) -> TypeProto:
    tp = TypeProto()
    _fill_tensor(tp.sparse_tensor_type, elem, shape)
    return tp


def _seq(inner: TypeProto) -> TypeProto:
    tp = TypeProto()
    tp.sequence_type.elem_type.CopyFrom(inner)
    return tp


def _optional(inner: TypeProto) -> TypeProto:
    tp = TypeProto()
    tp.optional_type.elem_type.CopyFrom(inner)
    return tp


def _map(key: int, value: TypeProto) -> TypeProto:
    tp = TypeProto()
    tp.map_type.key_type = key
    tp.map_type.value_type.CopyFrom(value)
    return tp


def _opaque(domain: str, name: str) -> TypeProto:
    tp = TypeProto()
    tp.opaque_type.SetInParent()
    if domain:
        tp.opaque_type.domain = domain
    if name:
        tp.opaque_type.name = name
    return tp


leaves = st.one_of(
    st.builds(_tensor, st.sampled_from(ELEM_CODES), shapes),
    st.builds(_sparse, st.sampled_from(ELEM_CODES), shapes),
    st.builds(_opaque, st.text(max_size=5), st.text(max_size=5)),
)
type_protos = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.builds(_seq, inner),
        st.builds(_optional, inner),
        st.builds(_map, st.sampled_from(KEY_CODES), inner),
    ),
    max_leaves=6,
)


@FAST
@given(type_protos)
def test_type_text_type_round_trip(tp: TypeProto) -> None:
    text = type_to_text(tp)
    back = text_to_type(text)
    assert back == tp, text
    assert type_to_text(back) == text


@FAST
@given(type_protos)
def test_text_type_text_round_trip_with_spaces(tp: TypeProto) -> None:
    text = type_to_text(tp)
    # Spaces around structural tokens are ignored when reading.
    spaced = text.replace("(", " ( ").replace(",", " , ") if '"' not in text else text
    assert type_to_text(text_to_type(spaced)) == text


@pytest.mark.parametrize(
    ("text", "build"),
    [
        (
            "float32[N,3,224,224]",
            lambda: helper.make_tensor_type_proto(TensorProto.FLOAT, ["N", 3, 224, 224]),
        ),
        ("float16[?,8]", lambda: helper.make_tensor_type_proto(TensorProto.FLOAT16, [None, 8])),
        ("float32", lambda: helper.make_tensor_type_proto(TensorProto.FLOAT, None)),
        ("float32[]", lambda: helper.make_tensor_type_proto(TensorProto.FLOAT, [])),
        (
            "seq(float32[N])",
            lambda: helper.make_sequence_type_proto(
                helper.make_tensor_type_proto(TensorProto.FLOAT, ["N"])
            ),
        ),
        (
            "map(int64,float32)",
            lambda: helper.make_map_type_proto(
                TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, None)
            ),
        ),
        (
            "map(string,seq(float32))",
            lambda: helper.make_map_type_proto(
                TensorProto.STRING,
                helper.make_sequence_type_proto(
                    helper.make_tensor_type_proto(TensorProto.FLOAT, None)
                ),
            ),
        ),
        (
            "optional(seq(float32[?]))",
            lambda: helper.make_optional_type_proto(
                helper.make_sequence_type_proto(
                    helper.make_tensor_type_proto(TensorProto.FLOAT, [None])
                )
            ),
        ),
        (
            "sparse(float32[10,10])",
            lambda: helper.make_sparse_tensor_type_proto(TensorProto.FLOAT, [10, 10]),
        ),
        ("float8e4m3fn[2]", lambda: helper.make_tensor_type_proto(TensorProto.FLOAT8E4M3FN, [2])),
        ("int4[3]", lambda: helper.make_tensor_type_proto(TensorProto.INT4, [3])),
    ],
)
def test_documented_forms_match_onnx_builders(text: str, build) -> None:
    tp = build()
    assert type_to_text(tp) == text
    assert text_to_type(text) == tp


def test_opaque_and_unusual_names() -> None:
    tp = _opaque("com.example", "Blob")
    assert type_to_text(tp) == "opaque(com.example,Blob)"
    weird = _tensor(TensorProto.INT64, [("param", "batch size"), ("param", "7"), ("none", None)])
    assert type_to_text(weird) == 'int64["batch size","7",?]'
    assert text_to_type(type_to_text(weird)) == weird


def test_missing_inner_types_and_unknown_codes() -> None:
    empty_seq = TypeProto()
    empty_seq.sequence_type.SetInParent()
    assert type_to_text(empty_seq) == "seq()"
    assert text_to_type("seq()") == empty_seq
    assert type_to_text(TypeProto()) == "?"
    assert text_to_type("?") == TypeProto()
    odd = _tensor(99, [("value", 1)])
    assert type_to_text(odd) == "type99[1]"
    assert text_to_type("type99[1]") == odd
    unset = TypeProto()
    unset.tensor_type.SetInParent()
    assert type_to_text(unset) == "undefined"


def test_denotations_are_not_written() -> None:
    tp = helper.make_tensor_type_proto(TensorProto.FLOAT, ["N", 3])
    tp.denotation = "TENSOR"
    tp.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    assert type_to_text(tp) == "float32[N,3]"


def test_shape_of() -> None:
    assert shape_of(text_to_type("float32[N,3,?]")) == ["N", 3, None]
    assert shape_of(text_to_type("float32")) is None
    assert shape_of(text_to_type("float32[]")) == []
    assert shape_of(text_to_type("sparse(int8[4,4])")) == [4, 4]
    assert shape_of(text_to_type("seq(float32[2])")) is None


def test_value_info_text() -> None:
    vi = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])
    assert value_info_text(vi) == "input: float32[N,3,224,224]"
    assert value_info_text(helper.make_empty_tensor_value_info("x")) == "x: ?"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("float32[3,x", "not closed"),
        ("floatx[3]", "'floatx' is not a known element type"),
        ("seq(float32", "expected ')'"),
        ("float32[3]]", "unexpected ']'"),
        ("map(int64)", "expected ','"),
        ("float32[3,,4]", "empty"),
        ("float32[a b]", "quote it"),
        ("", "expected a type"),
        ('float32["abc]', "not closed"),
        ("float32[99999999999999999999]", "64 bits"),
        ("sparse()", "expected an element type"),
        ("opaque(a b,c)", "quote it"),
    ],
)
def test_bad_text_raises_value_error(text: str, words: str) -> None:
    with pytest.raises(ValueError, match="Cannot read type") as info:
        text_to_type(text)
    assert words in str(info.value)
