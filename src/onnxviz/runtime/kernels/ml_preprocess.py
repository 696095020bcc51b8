"""ai.onnx.ml feature preprocessing: ArrayFeatureExtractor, Binarizer, FeatureVectorizer,
Imputer, Normalizer, OneHotEncoder, Scaler, LabelEncoder (1, 2, 4), CategoryMapper."""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.ml_common import as_batch
from onnxviz.runtime.kernels.ml_lookup import lookup
from onnxviz.runtime.registry import kernel

ML = "ai.onnx.ml"


@kernel("ArrayFeatureExtractor", domain=ML, since=1)
def array_feature_extractor(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    idx = np.asarray(indices, dtype=np.int64).ravel()
    if x.ndim == 0:
        raise ExecutionError("ArrayFeatureExtractor: input must have at least one dimension")
    last = x.shape[-1]
    if idx.size and (idx.min() < -last or idx.max() >= last):
        raise ExecutionError(
            f"ArrayFeatureExtractor: index out of range for a last dimension of {last}"
        )
    picked = np.take(x, idx, axis=-1)
    # A 1-D input gives one row (as onnxruntime does).
    return picked.reshape(1, -1) if x.ndim == 1 else picked


@kernel("Binarizer", domain=ML, since=1)
def binarizer(x: np.ndarray, *, threshold: float = 0.0) -> np.ndarray:
    x = np.asarray(x)
    return (x > threshold).astype(x.dtype)


@kernel("Scaler", domain=ML, since=1)
def scaler(
    x: np.ndarray, *, offset: list[float] | None = None, scale: list[float] | None = None
) -> np.ndarray:
    x = np.asarray(x)
    off = np.asarray(offset if offset else [0.0], dtype=np.float32)
    sc = np.asarray(scale if scale else [1.0], dtype=np.float32)
    last = x.shape[-1] if x.ndim else 1
    for name, arr in (("offset", off), ("scale", sc)):
        if arr.size not in (1, last):
            raise ExecutionError(f"Scaler: {name} has {arr.size} values for {last} features")
    return ((x.astype(np.float32) - off) * sc).astype(np.float32)


@kernel("Normalizer", domain=ML, since=1)
def normalizer(x: np.ndarray, *, norm: str = "MAX") -> np.ndarray:
    x = np.asarray(x)
    rows = as_batch(x, "Normalizer").astype(np.float32)
    kind = norm.upper()
    if kind == "MAX":
        div = rows.max(axis=1, keepdims=True)
    elif kind == "L1":
        div = np.abs(rows).sum(axis=1, keepdims=True)
    elif kind == "L2":
        div = np.sqrt((rows * rows).sum(axis=1, keepdims=True))
    else:
        raise ExecutionError(f"Normalizer: unknown norm '{norm}'")
    # A zero divisor leaves the row unchanged (spec).
    safe = np.where(div == 0, 1.0, div).astype(np.float32)
    return (rows / safe).reshape(x.shape).astype(np.float32)


@kernel("Imputer", domain=ML, since=1)
def imputer(
    x: np.ndarray,
    *,
    imputed_value_floats: list[float] | None = None,
    imputed_value_int64s: list[int] | None = None,
    replaced_value_float: float = 0.0,
    replaced_value_int64: int = 0,
) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "f":
        values: Any = imputed_value_floats
        replaced: Any = replaced_value_float
    else:
        values = imputed_value_int64s
        replaced = replaced_value_int64
    if not values:
        kind = "floats" if x.dtype.kind == "f" else "int64s"
        raise ExecutionError(f"Imputer: imputed_value_{kind} is needed for a {x.dtype} input")
    fill = np.asarray(values).astype(x.dtype)
    last = x.shape[-1] if x.ndim else 1
    if fill.size not in (1, last):
        raise ExecutionError(f"Imputer: {fill.size} imputed values for {last} features")
    if x.dtype.kind == "f" and np.isnan(replaced):
        mask = np.isnan(x)
    else:
        mask = x == replaced
    return np.where(mask, np.broadcast_to(fill, x.shape) if x.ndim else fill[0], x)


@kernel("OneHotEncoder", domain=ML, since=1)
def one_hot_encoder(
    x: np.ndarray,
    *,
    cats_int64s: list[int] | None = None,
    cats_strings: list[str] | None = None,
    zeros: int = 1,
) -> np.ndarray:
    x = np.asarray(x)
    if cats_strings:
        cats = np.array(cats_strings, dtype=object)
        keys = x.astype(object) if x.dtype != object else x
    elif cats_int64s:
        cats = np.asarray(cats_int64s, dtype=np.int64)
        if x.dtype == object:
            raise ExecutionError("OneHotEncoder: string input needs cats_strings")
        keys = x.astype(np.int64)
    else:
        raise ExecutionError("OneHotEncoder: one of cats_int64s / cats_strings is required")
    position = lookup(keys, cats, np.arange(cats.size, dtype=np.int64), -1, np.int64)
    if not zeros and (position < 0).any():
        raise ExecutionError("OneHotEncoder: an input value is not one of the categories")
    out = (position[..., None] == np.arange(cats.size)).astype(np.float32)
    return out


@kernel("FeatureVectorizer", domain=ML, since=1)
def feature_vectorizer(*inputs: np.ndarray, inputdimensions: list[int] | None = None) -> np.ndarray:
    dims = list(inputdimensions or [])
    if len(dims) != len(inputs):
        raise ExecutionError(
            f"FeatureVectorizer: {len(inputs)} inputs but {len(dims)} inputdimensions"
        )
    blocks = []
    n_rows = None
    for arr, width in zip(inputs, dims):
        a = np.asarray(arr)
        a = a.reshape(1, -1) if a.ndim <= 1 else a.reshape(a.shape[0], -1)
        if n_rows is not None and a.shape[0] != n_rows:
            raise ExecutionError("FeatureVectorizer: inputs have different batch sizes")
        n_rows = a.shape[0]
        block = np.zeros((a.shape[0], width), dtype=np.float32)
        take = min(width, a.shape[1])
        block[:, :take] = a[:, :take]
        blocks.append(block)
    if not blocks:
        return np.zeros((1, 0), dtype=np.float32)
    return np.concatenate(blocks, axis=1)


# --------------------------------------------------------------------------- encoders


def _label_encoder_v1(x: np.ndarray, kw: dict[str, Any]) -> np.ndarray:
    classes = np.array(kw.get("classes_strings") or [], dtype=object)
    if x.dtype == object:
        return lookup(
            x,
            classes,
            np.arange(classes.size, dtype=np.int64),
            int(kw.get("default_int64", -1)),
            np.int64,
        )
    idx = x.astype(np.int64)
    inside = (idx >= 0) & (idx < classes.size)
    out = np.full(x.shape, kw.get("default_string", "_Unused"), dtype=object)
    out[inside] = classes[idx[inside]]
    return out


_TYPE_SUFFIX = {"strings": object, "int64s": np.int64, "floats": np.float32}


def _attr_array(kw: dict[str, Any], prefix: str) -> np.ndarray | None:
    tensor = kw.get(prefix + "_tensor")
    if tensor is not None:
        return np.asarray(tensor).ravel()
    for suffix, dtype in _TYPE_SUFFIX.items():
        value = kw.get(f"{prefix}_{suffix}")
        if value:
            return np.asarray(value, dtype=dtype)
    return None


def _default_for(values: np.ndarray, kw: dict[str, Any]) -> Any:
    tensor = kw.get("default_tensor")
    if tensor is not None and np.asarray(tensor).size:
        return np.asarray(tensor).ravel()[0]
    if values.dtype == object:
        return kw.get("default_string", "_Unused")
    if values.dtype.kind in "iu":
        return int(kw.get("default_int64", -1))
    return float(kw.get("default_float", -0.0))


@kernel("LabelEncoder", domain=ML, since=(1, 2, 4), ctx=True)
def label_encoder(ctx: Any, x: np.ndarray, **kw: Any) -> np.ndarray:
    x = np.asarray(x)
    if ctx.opset < 2:
        return _label_encoder_v1(x, kw)
    keys = _attr_array(kw, "keys")
    values = _attr_array(kw, "values")
    if keys is None or values is None:
        raise ExecutionError("LabelEncoder: keys_* and values_* attributes are required")
    if keys.size != values.size:
        raise ExecutionError("LabelEncoder: keys and values differ in length")
    if (x.dtype == object) != (keys.dtype == object):
        raise ExecutionError(f"LabelEncoder: input of type {x.dtype} but keys of {keys.dtype}")
    return lookup(x, keys, values, _default_for(values, kw), values.dtype)


@kernel("CategoryMapper", domain=ML, since=1)
def category_mapper(
    x: np.ndarray,
    *,
    cats_int64s: list[int] | None = None,
    cats_strings: list[str] | None = None,
    default_int64: int = -1,
    default_string: str = "_Unused",
) -> np.ndarray:
    x = np.asarray(x)
    ints = np.asarray(cats_int64s or [], dtype=np.int64)
    strings = np.array(cats_strings or [], dtype=object)
    if ints.size != strings.size:
        raise ExecutionError("CategoryMapper: cats_int64s and cats_strings differ in length")
    if x.dtype == object:
        return lookup(x, strings, ints, default_int64, np.int64)
    return lookup(x.astype(np.int64), ints, strings, default_string, object)
