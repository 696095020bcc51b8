"""model.elem_bits (no imports, for check's worker) says what model.dtypes says."""

from __future__ import annotations

from onnx import TensorProto

from onnxviz.model.dtypes import ELEMENT_TYPES
from onnxviz.model.elem_bits import ELEMENT_BITS


def test_the_worker_table_matches_the_dtype_table() -> None:
    assert {code: et.bits for code, et in ELEMENT_TYPES.items()} == ELEMENT_BITS


def test_every_onnx_element_type_is_in_it() -> None:
    known = set(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}
    assert known <= set(ELEMENT_BITS)
