"""TensorProto <-> numpy codec: round trips, peer agreement with onnx.numpy_helper, errors."""

from __future__ import annotations

import tracemalloc
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.model import dtypes
from onnxviz.model.tensors import (
    TensorDecodeError,
    describe_tensor,
    from_array,
    sparse_to_dense,
    tensor_nbytes,
    to_array,
)

NUMERIC_CODES = [
    code for name, code in TensorProto.DataType.items() if name not in ("UNDEFINED", "STRING")
]
SUB_BYTE_CODES = [c for c in NUMERIC_CODES if dtypes.element_type(c).is_sub_byte]

FAST = settings(max_examples=60, deadline=None)

shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)


def random_array(code: int, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Every bit pattern of the type is fair game (NaN payloads, -0, infinities)."""
    et = dtypes.element_type(code)
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    if et.dtype == np.bool_:
        return rng.integers(0, 2, count).astype(bool).reshape(shape)
    if et.is_sub_byte:
        return rng.integers(0, 1 << et.bits, count).astype(np.uint8).view(et.dtype).reshape(shape)
    raw = rng.integers(0, 256, count * et.dtype.itemsize, dtype=np.uint8)
    return raw.view(et.dtype).reshape(shape)


def bit_pattern(array: np.ndarray) -> bytes:
    """Bytes that identify every element exactly (sub-byte types: only their low bits)."""
    code = dtypes.elem_type_of(array.dtype)
    et = dtypes.element_type(code)
    if et.is_sub_byte:
        return (np.ascontiguousarray(array).view(np.uint8) & ((1 << et.bits) - 1)).tobytes()
    return np.ascontiguousarray(array).tobytes()


# --------------------------------------------------------------------------- round trips


@FAST
@given(code=st.sampled_from(NUMERIC_CODES), shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_round_trip_is_bit_exact(code: int, shape: tuple[int, ...], seed: int) -> None:
    array = random_array(code, shape, seed)
    tensor = from_array(array, "w")
    assert tensor.data_type == code
    assert list(tensor.dims) == list(shape)
    assert tensor.HasField("raw_data")
    back = to_array(tensor)
    assert back.dtype == array.dtype
    assert back.shape == array.shape
    assert bit_pattern(back) == bit_pattern(array)


@FAST
@given(code=st.sampled_from(NUMERIC_CODES), shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_our_encoding_is_read_by_onnx_numpy_helper(
    code: int, shape: tuple[int, ...], seed: int
) -> None:
    array = random_array(code, shape, seed)
    peer = numpy_helper.to_array(from_array(array))
    assert peer.dtype == array.dtype
    assert peer.shape == array.shape
    assert bit_pattern(peer) == bit_pattern(array)


@FAST
@given(code=st.sampled_from(NUMERIC_CODES), shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_we_read_onnx_numpy_helper_encoding(code: int, shape: tuple[int, ...], seed: int) -> None:
    array = random_array(code, shape, seed)
    ours = to_array(numpy_helper.from_array(array))
    assert ours.shape == array.shape
    assert bit_pattern(ours) == bit_pattern(array)


@FAST
@given(code=st.sampled_from(NUMERIC_CODES), shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_typed_field_encoding_from_make_tensor(
    code: int, shape: tuple[int, ...], seed: int
) -> None:
    array = random_array(code, shape, seed)
    tensor = helper.make_tensor("t", code, shape, array.reshape(-1), raw=False)
    assert not tensor.HasField("raw_data")
    ours = to_array(tensor)
    assert ours.shape == array.shape
    assert ours.dtype == array.dtype
    # make_tensor re-casts float8 (saturating, NaN payload not kept): compare with what
    # onnx itself decodes from the same typed fields.
    assert bit_pattern(ours) == bit_pattern(numpy_helper.to_array(tensor))
    if dtypes.element_type(code).dtype.kind in "iub":
        assert np.array_equal(ours, array)


def test_nan_payloads_survive() -> None:
    bits = np.array([0x7FC00001, 0xFFBFFFFF, 0x7F800001, 0x80000000], dtype=np.uint32)
    array = bits.view(np.float32)
    assert to_array(from_array(array)).view(np.uint32).tolist() == bits.tolist()
    half = np.array([0x7E01, 0xFC01, 0x8000], dtype=np.uint16)
    assert to_array(from_array(half.view(np.float16))).view(np.uint16).tolist() == half.tolist()


def test_scalar_and_empty_tensors() -> None:
    scalar = from_array(np.float64(2.5), "s")
    assert list(scalar.dims) == []
    assert to_array(scalar).shape == ()
    assert to_array(scalar)[()] == 2.5
    empty = from_array(np.zeros((3, 0, 2), dtype=ml_dtypes.int4))
    assert empty.raw_data == b""
    assert to_array(empty).shape == (3, 0, 2)


def test_sub_byte_packing_follows_onnx_proto() -> None:
    # int4: first element in the low nibble.
    t = from_array(np.array([1, -2, 3], dtype=ml_dtypes.int4))
    assert t.raw_data == bytes([0x1 | (0xE << 4), 0x3])
    # uint2: x0 | x1 << 2 | x2 << 4 | x3 << 6.
    t = from_array(np.array([1, 2, 3, 0, 3], dtype=ml_dtypes.uint2))
    assert t.raw_data == bytes([1 | 2 << 2 | 3 << 4, 3])
    # float6: LSB-first 6-bit stream, ceil(6n/8) bytes.
    codes = np.array([0x01, 0x3F, 0x15, 0x2A, 0x07], dtype=np.uint8)
    t = from_array(codes.view(ml_dtypes.float6_e2m3fn))
    x0, x1, x2, x3, x4 = (int(c) for c in codes)
    assert t.raw_data == bytes(
        [x0 | (x1 & 3) << 6, x1 >> 2 | (x2 & 0xF) << 4, x2 >> 4 | x3 << 2, x4]
    )
    assert to_array(t).view(np.uint8).tolist() == codes.tolist()


def test_hand_built_typed_fields_per_onnx_proto() -> None:
    half = np.array([1.0, -2.0, np.inf], dtype=np.float16)
    t = TensorProto(name="h", data_type=TensorProto.FLOAT16, dims=[3])
    t.int32_data.extend(half.view(np.uint16).tolist())
    assert to_array(t).tolist() == half.tolist()

    t = TensorProto(name="u", data_type=TensorProto.UINT32, dims=[2])
    t.uint64_data.extend([0, 2**32 - 1])
    assert to_array(t).tolist() == [0, 2**32 - 1]
    assert to_array(t).dtype == np.uint32

    t = TensorProto(name="b", data_type=TensorProto.BOOL, dims=[3])
    t.int32_data.extend([1, 0, 1])
    assert to_array(t).tolist() == [True, False, True]

    t = TensorProto(name="i16", data_type=TensorProto.INT16, dims=[2])
    t.int32_data.extend([-5, 300])
    assert to_array(t).tolist() == [-5, 300]

    # int4: one packed byte (two elements) per int32_data entry.
    t = TensorProto(name="q", data_type=TensorProto.INT4, dims=[3])
    t.int32_data.extend([0x1 | 0xF << 4, 0x7])
    assert to_array(t).astype(np.int8).tolist() == [1, -1, 7]

    # float6: one 6-bit pattern per entry.
    t = TensorProto(name="f6", data_type=TensorProto.FLOAT6E3M2, dims=[2])
    t.int32_data.extend([0x0C, 0x2C])
    expected = np.array([0x0C, 0x2C], dtype=np.uint8).view(ml_dtypes.float6_e3m2fn)
    assert to_array(t).tolist() == expected.tolist()

    t = TensorProto(name="c", data_type=TensorProto.COMPLEX64, dims=[2])
    t.float_data.extend([1.0, 2.0, 3.0, 4.0])
    assert to_array(t).tolist() == [1 + 2j, 3 + 4j]


def test_decoded_raw_arrays_are_read_only_views_and_from_array_accepts_them() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    decoded = to_array(from_array(array))
    assert not decoded.flags.writeable
    again = from_array(decoded, "copy")
    assert to_array(again).tolist() == array.tolist()
    frozen = np.arange(5, dtype=ml_dtypes.int4)
    frozen.flags.writeable = False
    assert to_array(from_array(frozen)).astype(int).tolist() == [0, 1, 2, 3, 4]


def test_non_contiguous_input() -> None:
    base = np.arange(24, dtype=np.int16).reshape(4, 6)
    view = base[::2, ::-3]
    assert to_array(from_array(view)).tolist() == view.tolist()


# --------------------------------------------------------------------------- strings


def test_strings_decode_to_str_or_bytes() -> None:
    t = TensorProto(name="s", data_type=TensorProto.STRING, dims=[2, 2])
    t.string_data.extend([b"cat", "\u00e9t\u00e9".encode(), b"", b"\xff\xfe"])
    array = to_array(t)
    assert array.dtype == object
    assert array.tolist() == [["cat", "\u00e9t\u00e9"], ["", b"\xff\xfe"]]
    # Re-encoding gives back the exact bytes, including the invalid UTF-8 element.
    assert list(from_array(array, "s").string_data) == list(t.string_data)


@FAST
@given(
    st.lists(st.one_of(st.text(max_size=8), st.binary(max_size=8)), max_size=12),
)
def test_string_round_trip(values: list[Any]) -> None:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    tensor = from_array(array, "s")
    assert tensor.data_type == TensorProto.STRING
    back = to_array(tensor)
    as_bytes = [v.encode() if isinstance(v, str) else v for v in values]
    assert [v.encode() if isinstance(v, str) else v for v in back.tolist()] == as_bytes
    for original, decoded in zip(values, back.tolist()):
        if isinstance(original, str):
            assert decoded == original


def test_numpy_unicode_strings_and_peer_reads_them() -> None:
    array = np.array([["a", "bc"], ["d\u00fc", ""]])
    tensor = from_array(array)
    assert to_array(tensor).tolist() == array.tolist()
    assert numpy_helper.to_array(tensor).tolist() == array.tolist()
    peer_made = numpy_helper.from_array(np.array(["x", "yz"], dtype=object))
    assert to_array(peer_made).tolist() == ["x", "yz"]


def test_non_string_object_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'bad'"):
        from_array(np.array([1.5, "x"], dtype=object), "bad")


# --------------------------------------------------------------------------- errors


def _error(tensor: TensorProto, **kwargs: Any) -> str:
    with pytest.raises(TensorDecodeError) as info:
        to_array(tensor, **kwargs)
    message = str(info.value)
    assert tensor.name in message
    return message


def test_raw_length_mismatch() -> None:
    t = TensorProto(name="short_raw", data_type=TensorProto.FLOAT, dims=[4], raw_data=b"\0" * 12)
    assert "12 bytes" in _error(t)
    t = TensorProto(name="short_int4", data_type=TensorProto.INT4, dims=[5], raw_data=b"\0" * 2)
    assert "needs 3" in _error(t)
    t = TensorProto(name="f6", data_type=TensorProto.FLOAT6E2M3, dims=[5], raw_data=b"\0" * 3)
    assert "needs 4" in _error(t)


@pytest.mark.parametrize("code", NUMERIC_CODES + [TensorProto.STRING])
def test_typed_length_mismatch_for_every_type(code: int) -> None:
    t = TensorProto(name=f"bad_{code}", data_type=code, dims=[7])
    field = dtypes.element_type(code).field
    value: Any = b"x" if code == TensorProto.STRING else 1
    getattr(t, field).extend([value])
    assert field in _error(t)


def test_missing_data_for_non_empty_tensor() -> None:
    t = TensorProto(name="nothing", data_type=TensorProto.INT64, dims=[2])
    _error(t)


def test_raw_and_typed_both_set() -> None:
    t = TensorProto(name="twice", data_type=TensorProto.FLOAT, dims=[1], raw_data=b"\0" * 4)
    t.float_data.append(1.0)
    assert "more than one place" in _error(t)


def test_wrong_typed_field() -> None:
    t = TensorProto(name="wrong_field", data_type=TensorProto.FLOAT, dims=[1])
    t.int64_data.append(1)
    assert "float_data" in _error(t)


def test_negative_dims() -> None:
    t = TensorProto(name="neg", data_type=TensorProto.FLOAT, dims=[2, -1])
    assert "negative" in _error(t)
    with pytest.raises(TensorDecodeError, match="neg"):
        tensor_nbytes(t)


def test_unknown_and_undefined_data_type() -> None:
    assert "unknown data type 99" in _error(
        TensorProto(name="odd", data_type=99, dims=[1], raw_data=b"\0")
    )
    assert "no data type" in _error(TensorProto(name="undef", dims=[1], raw_data=b"\0"))


def test_string_in_raw_data() -> None:
    t = TensorProto(name="raw_str", data_type=TensorProto.STRING, dims=[1], raw_data=b"a")
    assert "string_data" in _error(t)


def test_huge_claim_is_refused_without_allocating() -> None:
    t = TensorProto(name="huge", data_type=TensorProto.FLOAT, dims=[10**6, 10**6])
    t.raw_data = b"\0" * 16
    # What matters is memory, not time: 4 TB claimed, nothing near it allocated.
    tracemalloc.start()
    try:
        message = _error(t)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20
    assert "1000000000000" in message
    assert _error(from_array(np.zeros(10, np.int8), "small"), max_elements=5)


# --------------------------------------------------------------------------- sizes, text


def test_tensor_nbytes_and_describe() -> None:
    t = from_array(np.zeros((64, 3, 7, 7), dtype=np.float32), "w")
    assert tensor_nbytes(t) == 64 * 3 * 7 * 7 * 4
    assert describe_tensor(t) == "float32[64,3,7,7]"
    assert tensor_nbytes(from_array(np.zeros(5, dtype=ml_dtypes.uint4))) == 3
    assert tensor_nbytes(from_array(np.zeros(5, dtype=ml_dtypes.float6_e3m2fn))) == 4
    assert tensor_nbytes(from_array(np.array(["ab", "c"]))) == 3
    assert describe_tensor(from_array(np.float16(1))) == "float16[]"
    assert describe_tensor(TensorProto(data_type=77, dims=[2])) == "type77[2]"
    huge = TensorProto(name="h", data_type=TensorProto.DOUBLE, dims=[10**6, 10**6])
    assert tensor_nbytes(huge) == 8 * 10**12


# --------------------------------------------------------------------------- segments


def test_segment_decodes_its_slice() -> None:
    full = np.arange(8, dtype=np.int32).reshape(2, 4)
    t = TensorProto(name="seg", data_type=TensorProto.INT32, dims=[2, 4])
    t.segment.begin, t.segment.end = 2, 5
    t.raw_data = full.reshape(-1)[2:5].tobytes()
    assert to_array(t).tolist() == [2, 3, 4]
    t.ClearField("raw_data")
    t.int32_data.extend([2, 3, 4])
    assert to_array(t).tolist() == [2, 3, 4]


def test_segment_errors() -> None:
    t = TensorProto(name="seg_out", data_type=TensorProto.INT32, dims=[2, 4])
    t.segment.begin, t.segment.end = 6, 9
    t.raw_data = b"\0" * 12
    assert "segment" in _error(t)
    t = TensorProto(name="seg_len", data_type=TensorProto.INT32, dims=[8])
    t.segment.begin, t.segment.end = 0, 2
    t.raw_data = b"\0" * 12
    assert "needs 8" in _error(t)


# --------------------------------------------------------------------------- sparse


def _sparse(values: np.ndarray, indices: np.ndarray, dims: list[int]) -> onnx.SparseTensorProto:
    return helper.make_sparse_tensor(
        numpy_helper.from_array(values, "sp"), numpy_helper.from_array(indices, "sp_idx"), dims
    )


@FAST
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
    data=st.data(),
)
def test_sparse_both_index_forms(shape: tuple[int, ...], data: st.DataObject) -> None:
    total = int(np.prod(shape))
    positions = sorted(data.draw(st.sets(st.integers(0, total - 1), max_size=total)))
    linear = np.array(positions, dtype=np.int64)
    values = np.arange(1, len(positions) + 1, dtype=np.float32)
    expected = np.zeros(total, dtype=np.float32)
    expected[linear] = values
    expected = expected.reshape(shape)
    dense = sparse_to_dense(_sparse(values, linear, list(shape)))
    assert np.array_equal(dense, expected)
    coords = np.stack(np.unravel_index(linear, shape), axis=1).astype(np.int64)
    coords = coords.reshape(len(positions), len(shape))
    assert np.array_equal(sparse_to_dense(_sparse(values, coords, list(shape))), expected)


def test_sparse_strings_default_to_empty() -> None:
    values = np.array(["a", "b"], dtype=object)
    dense = sparse_to_dense(_sparse(values, np.array([0, 3], dtype=np.int64), [2, 2]))
    assert dense.tolist() == [["a", ""], ["", "b"]]


def test_sparse_errors_name_the_tensor() -> None:
    values = np.array([1.0, 2.0], dtype=np.float32)
    cases = [
        (np.array([0, 9], dtype=np.int64), [2, 2], "outside"),
        (np.array([3, 1], dtype=np.int64), [2, 2], "ascending"),
        (np.array([1, 1], dtype=np.int64), [2, 2], "ascending"),
        (np.array([[0, 0], [0, 5]], dtype=np.int64), [2, 2], "outside"),
        (np.zeros((2, 3), dtype=np.int64), [2, 2], "must be"),
        (np.array([0, 1], dtype=np.int64), [10**7, 10**7], "limit"),
    ]
    for indices, dims, words in cases:
        with pytest.raises(TensorDecodeError, match=f"'sp'.*{words}"):
            sparse_to_dense(_sparse(values, indices, dims))


# --------------------------------------------------------------------------- external data


def test_external_data_is_decoded(tmp_path: Any) -> None:
    weight = np.random.default_rng(1).standard_normal((40, 30)).astype(np.float32)
    packed = np.arange(-4, 5, dtype=np.int8).astype(ml_dtypes.int4)
    graph = helper.make_graph(
        [],
        "g",
        [],
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, [40, 30])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(packed, "q")],
    )
    model = helper.make_model(graph)
    path = tmp_path / "m.onnx"
    onnx.save_model(
        model, str(path), save_as_external_data=True, location="m.data", size_threshold=0
    )
    loaded = onnx.load_model(str(path), load_external_data=False)
    w, q = loaded.graph.initializer
    assert w.data_location == TensorProto.EXTERNAL
    decoded = to_array(w, str(tmp_path))
    assert np.array_equal(decoded, weight)
    assert not decoded.flags.writeable  # a view over the mapped file, not a copy
    assert to_array(q, str(tmp_path)).astype(int).tolist() == list(range(-4, 5))


def test_big_endian_input_is_written_little_endian() -> None:
    array = np.array([1.5, -2.0], dtype=">f4")
    tensor = from_array(array)
    assert tensor.raw_data == np.array([1.5, -2.0], dtype="<f4").tobytes()
    assert to_array(tensor).tolist() == [1.5, -2.0]


def test_bool_bytes_other_than_one_read_as_true() -> None:
    t = TensorProto(name="flags", data_type=TensorProto.BOOL, dims=[3], raw_data=b"\x00\x02\x01")
    assert to_array(t).tolist() == [False, True, True]
