"""Sequence and optional kernels.

Sequences are Python lists of arrays and are never modified in place: every kernel that
"changes" a sequence returns a new list (the arrays themselves are shared).  An empty
optional is ``None``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxviz.runtime.kernels._tensor_common import as_int, as_ints, fail, normalize_axis
from onnxviz.runtime.registry import kernel


def _position(position: np.ndarray | None, length: int, *, insert: bool) -> int:
    """Negative positions count from the back; inserting may also target ``length``."""
    if position is None:
        return length if insert else length - 1
    pos = as_int(position)
    upper = length if insert else length - 1
    if not -length <= pos <= upper:
        fail(f"sequence position {pos} is out of range for length {length}")
    return pos + length if pos < 0 else pos


def _sequence(value: Any, op: str) -> list[Any]:
    if not isinstance(value, list):
        fail(f"{op}: expected a sequence, got {type(value).__name__}")
    return value


@kernel("SequenceEmpty", since=11)
def sequence_empty(dtype: int | None = None) -> list[Any]:
    # The element type (default float) is static type information only.
    del dtype
    return []


@kernel("SequenceConstruct", since=11)
def sequence_construct(*inputs: np.ndarray) -> list[Any]:
    return list(inputs)


@kernel("SequenceAt", since=11)
def sequence_at(seq: list[Any], position: np.ndarray) -> Any:
    seq = _sequence(seq, "SequenceAt")
    return seq[_position(position, len(seq), insert=False)]


@kernel("SequenceErase", since=11)
def sequence_erase(seq: list[Any], position: np.ndarray | None = None) -> list[Any]:
    seq = _sequence(seq, "SequenceErase")
    if not seq:
        fail("SequenceErase: the sequence is empty")
    pos = _position(position, len(seq), insert=False)
    return seq[:pos] + seq[pos + 1 :]


@kernel("SequenceInsert", since=11)
def sequence_insert(
    seq: list[Any], tensor: np.ndarray, position: np.ndarray | None = None
) -> list[Any]:
    seq = _sequence(seq, "SequenceInsert")
    if seq and seq[0].dtype != tensor.dtype:
        fail(f"SequenceInsert: element type {tensor.dtype} != sequence type {seq[0].dtype}")
    pos = _position(position, len(seq), insert=True)
    return [*seq[:pos], tensor, *seq[pos:]]


@kernel("SequenceLength", since=11)
def sequence_length(seq: list[Any]) -> np.ndarray:
    return np.array(len(_sequence(seq, "SequenceLength")), dtype=np.int64)


@kernel("SplitToSequence", since=(11, 24))
def split_to_sequence(
    data: np.ndarray, split: np.ndarray | None = None, axis: int = 0, keepdims: int = 1
) -> list[np.ndarray]:
    axis = normalize_axis(axis, data.ndim)
    dim = data.shape[axis]
    if split is None:
        parts = np.split(data, dim, axis=axis) if dim else []
        return parts if keepdims else [np.squeeze(p, axis=axis) for p in parts]
    if split.ndim == 0:
        chunk = int(split)
        if chunk <= 0:
            fail(f"SplitToSequence: split must be positive, got {chunk}")
        bounds = list(range(chunk, dim, chunk))
    else:
        sizes = as_ints(split)
        if any(s < 0 for s in sizes) or sum(sizes) != dim:
            fail(f"SplitToSequence: sizes {sizes} do not add up to dimension {dim}")
        bounds = np.cumsum(sizes)[:-1].tolist()
    return list(np.split(data, bounds, axis=axis))


@kernel("ConcatFromSequence", since=11)
def concat_from_sequence(seq: list[Any], axis: int, new_axis: int = 0) -> np.ndarray:
    seq = _sequence(seq, "ConcatFromSequence")
    if not seq:
        fail("ConcatFromSequence: the sequence is empty")
    rank = seq[0].ndim
    if new_axis:
        return np.stack(seq, axis=normalize_axis(axis, rank, extra=1))
    return np.concatenate(seq, axis=normalize_axis(axis, rank))


@kernel("Optional", since=(15, 28))
def optional(value: Any = None, type: Any = None) -> Any:  # ONNX attribute name
    # The 'type' attribute only types the empty optional; the value is None either way.
    del type
    return value


@kernel("OptionalGetElement", since=(15, 18, 28))
def optional_get_element(value: Any) -> Any:
    if value is None:
        fail("OptionalGetElement: the optional is empty")
    return value


@kernel("OptionalHasElement", since=(15, 18, 28))
def optional_has_element(value: Any = None) -> np.ndarray:
    return np.array(value is not None)
