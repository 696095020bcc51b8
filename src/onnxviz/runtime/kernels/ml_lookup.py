"""Key -> value lookups for the ai.onnx.ml encoders (LabelEncoder, CategoryMapper, ...).

Strings are looked up once per *distinct* input value (np.unique + a dict), numbers through
a sorted key array and searchsorted, so no Python code runs per element."""

from __future__ import annotations

from typing import Any

import numpy as np


def lookup(
    x: np.ndarray, keys: np.ndarray, values: np.ndarray, default: Any, out_dtype: Any
) -> np.ndarray:
    """values[i] where x == keys[i] (last duplicate key wins), else default; x's shape."""
    x = np.asarray(x)
    out_dtype = np.dtype(out_dtype)
    if x.size == 0:
        return np.empty(x.shape, dtype=out_dtype)
    if x.dtype == object or keys.dtype == object:
        table = {k: v for k, v in zip(keys.tolist(), values.tolist())}
        uniq, inverse = np.unique(x.ravel().astype(object), return_inverse=True)
        mapped = np.array([table.get(u, default) for u in uniq.tolist()], dtype=out_dtype)
        return mapped[inverse.reshape(-1)].reshape(x.shape)
    # Numeric: last occurrence of a duplicated key wins.
    keys_num = np.asarray(keys)
    _, last_rev = np.unique(keys_num[::-1], return_index=True)
    keep = keys_num.size - 1 - last_rev
    k_sorted_order = np.argsort(keys_num[keep], kind="stable")
    k_sorted = keys_num[keep][k_sorted_order]
    v_sorted = np.asarray(values)[keep][k_sorted_order]
    if k_sorted.dtype.kind == "f":
        # NaN keys match any NaN input (they sort last, and np.unique keeps one of them).
        nan_key = np.isnan(k_sorted)
        nan_value = v_sorted[nan_key][-1] if nan_key.any() else None
        k_sorted, v_sorted = k_sorted[~nan_key], v_sorted[~nan_key]
    else:
        nan_value = None
    flat = x.ravel()
    result = np.full(flat.shape, default, dtype=out_dtype)
    if k_sorted.size:
        cmp = flat.astype(k_sorted.dtype) if flat.dtype != k_sorted.dtype else flat
        idx = np.searchsorted(k_sorted, cmp)
        idx_c = np.minimum(idx, k_sorted.size - 1)
        hit = k_sorted[idx_c] == cmp
        result[hit] = v_sorted[idx_c[hit]]
    if nan_value is not None and flat.dtype.kind == "f":
        result[np.isnan(flat)] = nan_value
    return result.reshape(x.shape)
