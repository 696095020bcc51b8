"""Sequence and optional kernels: ONNX node cases and the rules the cases miss
(negative positions, defaults, inputs never modified, errors)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxviz.errors import ExecutionError
from tests.runtime.datakernels_helpers import SEQUENCE_OPS, case_params, judge_case, run_ours

KNOWN_FAILURES: dict[str, str] = {}


@pytest.mark.parametrize("case", case_params(SEQUENCE_OPS, KNOWN_FAILURES))
def test_node_case(case: object) -> None:
    judge_case(case)


def _seq() -> list[np.ndarray]:
    return [np.full((2,), i, np.float32) for i in range(3)]


def test_construct_at_length() -> None:
    a, b = np.ones(2), np.zeros(3)
    (seq,) = run_ours("SequenceConstruct", [a, b], 11)
    assert isinstance(seq, list) and seq[1] is b
    assert run_ours("SequenceAt", [seq, np.array(-1, np.int64)], 11)[0] is b
    (n,) = run_ours("SequenceLength", [seq], 11)
    assert n.dtype == np.int64 and n.shape == () and int(n) == 2
    assert run_ours("SequenceEmpty", [], 11, dtype=TensorProto.INT64)[0] == []
    with pytest.raises(ExecutionError):
        run_ours("SequenceAt", [seq, np.array(2, np.int64)], 11)


def test_insert_and_erase_return_new_lists() -> None:
    seq = _seq()
    t = np.full((2,), 9, np.float32)
    (appended,) = run_ours("SequenceInsert", [seq, t], 11)
    (front,) = run_ours("SequenceInsert", [seq, t, np.array(-3, np.int64)], 11)
    assert [int(x[0]) for x in appended] == [0, 1, 2, 9]
    assert [int(x[0]) for x in front] == [9, 0, 1, 2]
    (erased_last,) = run_ours("SequenceErase", [seq], 11)
    (erased_first,) = run_ours("SequenceErase", [seq, np.array(-3, np.int64)], 11)
    assert [int(x[0]) for x in erased_last] == [0, 1]
    assert [int(x[0]) for x in erased_first] == [1, 2]
    assert len(seq) == 3  # the input sequence is untouched
    with pytest.raises(ExecutionError):
        run_ours("SequenceInsert", [seq, t, np.array(4, np.int64)], 11)
    with pytest.raises(ExecutionError):
        run_ours("SequenceInsert", [seq, t.astype(np.int32)], 11)


def test_split_to_sequence_forms() -> None:
    x = np.arange(14, dtype=np.float32).reshape(7, 2)
    (ones,) = run_ours("SplitToSequence", [x], 11)
    assert len(ones) == 7 and ones[0].shape == (1, 2)
    (squeezed,) = run_ours("SplitToSequence", [x], 11, keepdims=0)
    assert squeezed[0].shape == (2,)
    (chunks,) = run_ours("SplitToSequence", [x, np.array(3, np.int64)], 11)
    assert [c.shape[0] for c in chunks] == [3, 3, 1]
    (sized,) = run_ours("SplitToSequence", [x, np.array([1, 1], np.int32)], 24, axis=-1)
    assert [c.shape for c in sized] == [(7, 1), (7, 1)]
    with pytest.raises(ExecutionError):
        run_ours("SplitToSequence", [x, np.array([3, 3], np.int64)], 11)


def test_concat_from_sequence_with_and_without_new_axis() -> None:
    seq = _seq()
    assert run_ours("ConcatFromSequence", [seq], 11, axis=0)[0].shape == (6,)
    assert run_ours("ConcatFromSequence", [seq], 11, axis=-1, new_axis=1)[0].shape == (2, 3)
    assert run_ours("ConcatFromSequence", [seq], 11, axis=0, new_axis=1)[0].shape == (3, 2)


def test_optionals() -> None:
    t = np.ones(2)
    tp = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    assert run_ours("Optional", [t], 15)[0] is t
    assert run_ours("Optional", [], 15, type=tp)[0] is None
    assert bool(run_ours("OptionalHasElement", [None], 18)[0]) is False
    assert bool(run_ours("OptionalHasElement", [[t]], 18)[0]) is True
    assert run_ours("OptionalHasElement", [t], 18)[0].dtype == np.bool_
    assert run_ours("OptionalGetElement", [t], 18)[0] is t
    with pytest.raises(ExecutionError):
        run_ours("OptionalGetElement", [None], 15)


@pytest.mark.parametrize(
    ("split", "attrs"),
    [
        (None, {}),
        (None, {"keepdims": 0}),
        (np.array(3, np.int64), {}),
        (np.array([1, 1]), {"axis": -1}),
    ],
    ids=["ones", "no-keepdims", "scalar-chunks", "sizes"],
)
def test_split_to_sequence_against_onnxruntime(split: np.ndarray | None, attrs: dict) -> None:
    from tests.runtime.datakernels_helpers import assert_same, run_ort

    x = np.random.default_rng(0).random((7, 2)).astype(np.float32)
    args = [x] if split is None else [x, split]
    (ours,) = run_ours("SplitToSequence", args, 11, **attrs)
    (theirs,) = run_ort("SplitToSequence", args, 11, **attrs)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert_same(a, b)
