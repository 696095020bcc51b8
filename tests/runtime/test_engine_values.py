"""Values through the Session: every tensor element type, sequences, maps, optionals,
protobuf feeds, and the wider-type helpers for types numpy cannot compute in."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime.memory import IntermediateStore
from onnxviz.runtime.session import Session
from onnxviz.runtime.values import (
    compute_dtype,
    describe,
    elem_type_to_dtype,
    from_proto,
    has_nonfinite,
    narrow,
    nbytes,
    widen,
)
from tests.runtime.engine_models import make, vi

ELEM_TYPES = [v for k, v in TensorProto.DataType.items() if k != "UNDEFINED"]


def _sample(dtype: np.dtype) -> np.ndarray:
    if dtype == np.dtype(object):
        return np.array([["a", "bc"], ["", "d"]], dtype=object)
    if dtype == np.dtype(bool):
        return np.array([[True, False], [False, True]])
    if dtype.kind == "c":
        return np.array([[1 + 2j, 0], [3, -1j]], dtype=dtype)
    return np.array([[1, 0.5], [1, 0.25]], dtype=np.float32).astype(dtype)  # e8m0: powers of 2


@pytest.mark.parametrize(
    "elem_type", ELEM_TYPES, ids=[TensorProto.DataType.Name(t) for t in ELEM_TYPES]
)
def test_identity_keeps_every_element_type(elem_type: int) -> None:
    model = make(
        [helper.make_node("Identity", ["x"], ["y"])],
        [vi("x", elem_type, [2, 2])],
        [vi("y", elem_type, [2, 2])],
    )
    x = _sample(elem_type_to_dtype(elem_type))
    y = Session(model).run({"x": x})["y"]
    assert y.dtype == x.dtype and y.shape == (2, 2)
    assert np.array_equal(y.astype(object) if y.dtype == object else y, x)


def test_string_feed_from_unicode_array_becomes_object() -> None:
    st = TensorProto.STRING
    model = make(
        [helper.make_node("Identity", ["x"], ["y"])], [vi("x", st, [2])], [vi("y", st, [2])]
    )
    y = Session(model).run({"x": np.array(["ab", "c"])})["y"]
    assert y.dtype == object and list(y) == ["ab", "c"]


def test_protobuf_feeds_sequence_and_optional() -> None:
    seq_proto = helper.make_sequence(
        "s",
        1,
        [
            numpy_helper.from_array(np.ones(2, np.float32)),
            numpy_helper.from_array(np.zeros(3, np.float32)),
        ],
    )
    value = from_proto(seq_proto)
    assert isinstance(value, list) and [v.shape for v in value] == [(2,), (3,)]
    opt = helper.make_optional("o", 0, None)  # empty optional
    assert from_proto(opt) is None
    map_proto = helper.make_map(
        "m",
        TensorProto.INT64,
        [1, 2],
        helper.make_sequence("v", 1, [numpy_helper.from_array(np.ones(1, np.float32))] * 2),
    )
    m = from_proto(map_proto)
    assert set(m) == {1, 2} and m[1].shape == (1,)
    seq_vi = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    model = make(
        [helper.make_node("SequenceLength", ["s"], ["n"])],
        [seq_vi],
        [vi("n", TensorProto.INT64, [])],
    )
    assert int(Session(model).run({"s": seq_proto})["n"]) == 2


def test_wider_type_helpers() -> None:
    bf = np.array([1.5, 2.25], dtype=ml_dtypes.bfloat16)
    assert compute_dtype(bf.dtype) == np.float32
    assert compute_dtype(np.dtype(ml_dtypes.int4)) == np.int32
    assert compute_dtype(np.dtype(np.float64)) == np.float64
    w = widen(bf)
    assert w.dtype == np.float32
    back = narrow(w * 2, bf.dtype)
    assert back.dtype == bf.dtype and back.astype(np.float32).tolist() == [3.0, 4.5]


def test_describe_nbytes_nonfinite() -> None:
    x = np.zeros((2, 3), np.float32)
    assert describe(x) == "float32[2,3]"
    assert describe([x, x]) == "seq(float32[2,3]) x2"
    assert describe(None) == "optional(empty)"
    assert nbytes([x, {"a": x}]) >= 48
    assert not has_nonfinite(x)
    assert has_nonfinite(np.array([1.0, np.inf], dtype=ml_dtypes.bfloat16))
    assert has_nonfinite([np.array([np.nan])])
    assert not has_nonfinite(np.array([1, 2], np.int64))


def test_store_never_holds_more_than_its_cap() -> None:
    store = IntermediateStore(100)
    store.put("main", "a", np.zeros(10, np.float32))  # 40 bytes
    store.put("main", "b", np.zeros(10, np.float32))  # 80
    store.put("main", "c", np.zeros(10, np.float32))  # would be 120: drops a
    assert [d.name for d in store.dropped] == ["a"] and store.used_bytes == 80
    store.put("main", "huge", np.zeros(100, np.float32))
    assert (
        store.dropped[-1].name == "huge"
        and "larger than the memory cap" in store.dropped[-1].reason
    )
    assert store.get("main", "c") is not None


@given(
    ops=st.lists(
        st.one_of(
            st.tuples(
                st.just("put"),
                st.sampled_from(["main", "main/body:loop", "f"]),
                st.sampled_from("abcdef"),
                st.integers(0, 40),
            ),
            st.tuples(st.just("clear"), st.just(""), st.just(""), st.just(0)),
        ),
        max_size=60,
    ),
    cap=st.integers(0, 200),
)
@settings(max_examples=200, deadline=None)
def test_the_names_of_a_graph_are_the_values_kept_for_it_in_order(ops, cap) -> None:  # type: ignore[no-untyped-def]
    """`names` answers from an index kept beside the values (a pass over every kept value
    was 60-120 ms at a big run's end): after any puts, overwrites, evictions under the
    cap and clears, it is what that pass gave, in the same order."""
    store = IntermediateStore(cap_bytes=cap)
    for op, path, name, size in ops:
        if op == "clear":
            store.clear()
        else:
            store.put(path, name, np.zeros(size, dtype=np.uint8))
    for path in ("main", "main/body:loop", "f", "absent"):
        by_pass = {k[1]: v for (k, v) in store.items() if k[0] == path}
        names = store.names(path)
        assert list(names) == list(by_pass)
        assert all(names[n] is by_pass[n] for n in names)
        names.clear()  # a new dict: the caller may change it
        assert list(store.names(path)) == list(by_pass)
