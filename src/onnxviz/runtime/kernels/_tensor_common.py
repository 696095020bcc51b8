"""Small helpers shared by the tensor / sequence / quantize / string kernel modules."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any, NoReturn

import numpy as np
from onnx import TensorProto, helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels._weight_cache import frozen


def fail(message: str) -> NoReturn:
    """Raise the error the interpreter turns into a node-level report."""
    raise ExecutionError(message)


def as_ints(value: Any) -> list[int]:
    """A shape/axes/pads argument (array, list or scalar) as a list of Python ints (a
    fresh list the caller may change)."""
    if value is None:
        return []
    if type(value) is np.ndarray:
        if not value.flags.writeable:
            return list(_constant_ints(value))
        return [int(v) for v in value.reshape(-1).tolist()]
    if isinstance(value, np.ndarray):
        return [int(v) for v in value.reshape(-1).tolist()]
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


# The ints of arrays that cannot change (_weight_cache.frozen: initializers, the kept
# outputs of folded Constant nodes), by the array's id with a weak reference to it: the
# axes, starts and shapes of Slice, Squeeze, Unsqueeze, Reshape and Expand are such
# arrays, read on every call (the conversion was most of a small Slice's 4 us).
_INTS: dict[int, tuple[weakref.ref[np.ndarray], tuple[int, ...]]] = {}
_INTS_MAX = 4096


def _constant_ints(value: np.ndarray) -> tuple[int, ...]:
    hit = _INTS.get(id(value))
    if hit is not None and hit[0]() is value:
        return hit[1]
    ints = tuple(int(v) for v in value.reshape(-1).tolist())
    if frozen(value):
        if len(_INTS) >= _INTS_MAX:
            _INTS.clear()
        _INTS[id(value)] = (weakref.ref(value), ints)
    return ints


def as_int(value: Any) -> int:
    """A scalar (0-d or 1-element) tensor as a Python int."""
    arr = np.asarray(value)
    if arr.size != 1:
        fail(f"expected a single value, got shape {arr.shape}")
    return int(arr.reshape(-1)[0])


def normalize_axis(axis: int, rank: int, *, extra: int = 0) -> int:
    """``axis`` in [-rank-extra, rank+extra-1] mapped to [0, rank+extra-1]."""
    size = rank + extra
    if not -size <= axis < size:
        fail(f"axis {axis} is out of range for rank {rank}")
    return axis + size if axis < 0 else axis


def normalize_axes(axes: Iterable[int], rank: int) -> list[int]:
    return [normalize_axis(int(a), rank) for a in axes]


def np_dtype(onnx_type: int) -> np.dtype[Any]:
    """numpy (or ml_dtypes) dtype of a TensorProto element type."""
    if onnx_type == TensorProto.STRING:
        return np.dtype(object)
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type))
    except Exception:  # unknown enum value
        fail(f"unsupported element type {onnx_type}")


def onnx_type_of(dtype: np.dtype[Any]) -> int:
    if dtype == np.dtype(object):
        return TensorProto.STRING
    return int(helper.np_dtype_to_tensor_dtype(dtype))
