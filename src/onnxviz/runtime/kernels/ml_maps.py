"""ai.onnx.ml ops on maps and sequences of maps: ZipMap, CastMap, DictVectorizer.

Maps are Python dicts and sequences are lists (the runtime's value convention)."""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.ml_common import as_batch
from onnxviz.runtime.registry import kernel

ML = "ai.onnx.ml"


@kernel("ZipMap", domain=ML, since=1)
def zip_map(
    x: np.ndarray,
    *,
    classlabels_int64s: list[int] | None = None,
    classlabels_strings: list[str] | None = None,
) -> list[dict[Any, float]]:
    if classlabels_strings and classlabels_int64s:
        raise ExecutionError("ZipMap: give classlabels_strings or classlabels_int64s, not both")
    keys: list[Any] = list(classlabels_strings or classlabels_int64s or [])
    rows = as_batch(np.asarray(x, dtype=np.float32), "ZipMap")
    if rows.shape[1] != len(keys):
        raise ExecutionError(f"ZipMap: {rows.shape[1]} columns for {len(keys)} labels")
    # One dict per row is the output format itself; building it is unavoidable.
    return [dict(zip(keys, row)) for row in rows.tolist()]


def _map_value_dtype(values: list[Any]) -> Any:
    sample = values[0] if values else 0.0
    if isinstance(sample, str):
        return object
    if isinstance(sample, np.generic):
        return np.asarray(sample).dtype
    if isinstance(sample, (bool, int)):
        return np.int64
    return np.float32


@kernel("DictVectorizer", domain=ML, since=1)
def dict_vectorizer(
    x: dict[Any, Any],
    *,
    int64_vocabulary: list[int] | None = None,
    string_vocabulary: list[str] | None = None,
) -> np.ndarray:
    if not isinstance(x, dict):
        raise ExecutionError(f"DictVectorizer: input must be a map, not {type(x).__name__}")
    vocab: list[Any] = list(string_vocabulary or int64_vocabulary or [])
    if not vocab:
        raise ExecutionError("DictVectorizer: a vocabulary attribute is required")
    values = list(x.values())
    dtype = _map_value_dtype(values)
    fill: Any = "" if dtype is object else 0
    normalized = {(k.item() if isinstance(k, np.generic) else k): v for k, v in x.items()}
    row = [normalized.get(k, fill) for k in vocab]  # one lookup per vocabulary entry
    return np.array(row, dtype=dtype).reshape(1, len(vocab))


def _cast_value(values: np.ndarray, cast_to: str) -> np.ndarray:
    if cast_to == "TO_FLOAT":
        return values.astype(np.float32)
    if cast_to == "TO_INT64":
        if values.dtype == object:
            return values.astype(np.float64).astype(np.int64)
        return values.astype(np.int64)
    if values.dtype == object:
        return values
    # Floats print the way C++ std::to_string does ("1.500000").
    return np.array([f"{v:f}" for v in values.tolist()], dtype=object)


@kernel("CastMap", domain=ML, since=1)
def cast_map(
    x: dict[int, Any],
    *,
    cast_to: str = "TO_FLOAT",
    map_form: str = "DENSE",
    max_map: int = 1,
) -> np.ndarray:
    if not isinstance(x, dict):
        raise ExecutionError(f"CastMap: input must be a map, not {type(x).__name__}")
    cast_to = cast_to.upper()
    if cast_to not in ("TO_FLOAT", "TO_STRING", "TO_INT64"):
        raise ExecutionError(f"CastMap: unknown cast_to '{cast_to}'")
    keys = np.array([int(k) for k in x], dtype=np.int64)
    raw = list(x.values())
    values = np.array(raw, dtype=object if raw and isinstance(raw[0], str) else np.float32)
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    converted = _cast_value(values, cast_to) if values.size else values
    out_dtype: Any = {"TO_FLOAT": np.float32, "TO_INT64": np.int64, "TO_STRING": object}[cast_to]
    form = map_form.upper()
    if form == "DENSE":
        return np.asarray(converted, dtype=out_dtype).reshape(1, -1)
    if form != "SPARSE":
        raise ExecutionError(f"CastMap: unknown map_form '{map_form}'")
    if keys.size and keys[0] < 0:
        raise ExecutionError("CastMap: negative keys cannot be packed sparsely")
    pad: Any = "0.f" if cast_to == "TO_STRING" else 0
    out = np.full(max_map, pad, dtype=out_dtype)
    inside = keys < max_map
    out[keys[inside]] = converted[inside]
    return out.reshape(1, -1)
