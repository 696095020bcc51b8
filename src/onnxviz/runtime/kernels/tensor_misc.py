"""TopK, Unique, Trilu, OneHot."""

from __future__ import annotations

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels._tensor_common import as_int, fail, normalize_axis
from onnxviz.runtime.registry import kernel

# The compiled TopK (None: the kernels are off or not built).
_TOPK = native.load("topk")


def _sorted_order(values: np.ndarray, largest: int) -> np.ndarray:
    """Positions along the last axis that sort ``values``, ties by lower position first."""
    if not largest:
        return np.argsort(values, axis=-1, kind="stable")
    # Descending with ties by the LOWER index: sort the reversed axis ascending (stable),
    # read it backwards, and map the positions back.
    n = values.shape[-1]
    order = np.argsort(values[..., ::-1], axis=-1, kind="stable")
    return (n - 1) - order[..., ::-1]


def _topk_candidates(x: np.ndarray, k: int, largest: int) -> np.ndarray | None:
    """Ascending positions of the k winners along the last axis in O(n) (partition), or
    None when NaNs make the threshold unusable."""
    n = x.shape[-1]
    if largest:
        threshold = np.partition(x, n - k, axis=-1)[..., n - k : n - k + 1]
        strict = x > threshold
    else:
        threshold = np.partition(x, k - 1, axis=-1)[..., k - 1 : k]
        strict = x < threshold
    ties = x == threshold
    room = k - np.count_nonzero(strict, axis=-1)[..., None]
    chosen = strict | ties
    if np.any(np.count_nonzero(ties, axis=-1)[..., None] > room):
        # Among values equal to the threshold the spec keeps the lowest indices.
        chosen = strict | (ties & (np.cumsum(ties, axis=-1) <= room))
    # Flat positions in C order come out grouped by row and ascending along the axis
    # (np.nonzero on the 2-D mask is several times slower).
    flat = np.flatnonzero(chosen)
    if flat.size != k * (x.size // n):
        return None
    return (flat % n).reshape(*x.shape[:-1], k)


def _topk(
    data: np.ndarray, k: int, axis: int, largest: int, sorted_: int
) -> tuple[np.ndarray, np.ndarray]:
    axis = normalize_axis(axis, data.ndim)
    n = data.shape[axis]
    if not 0 <= k <= n:
        fail(f"TopK: k={k} is out of range for an axis of size {n}")
    # sorted=0 leaves the order undefined; sorted order is a valid answer.
    del sorted_
    last = axis == data.ndim - 1
    if k > 0 and data.dtype == np.float32 and _TOPK is not None:
        # native/_topk.c: a heap of the k best per row, in the order below (NaN above
        # every number, ties by lower position), so the same values and positions:
        # [8, 1000] with k = 10 102 -> 12 us (onnxruntime 13); below, numpy's passes.
        rows = np.ascontiguousarray(data if last else np.moveaxis(data, axis, -1))
        shape = (*rows.shape[:-1], k)
        values = np.empty(shape, dtype=np.float32)
        positions = np.empty(shape, dtype=np.int64)
        _TOPK.topk(rows, values, positions, rows.size // n, n, k, bool(largest))
        if last:
            return values, positions
        return np.moveaxis(values, -1, axis), np.moveaxis(positions, -1, axis)
    x = np.moveaxis(data, axis, -1)
    if not last:
        x = np.ascontiguousarray(x)  # sorting/partitioning strided rows is far slower
    candidates = None
    if k > 0 and 8 * k < n and data.dtype.kind in "iuf" and data.dtype.type.__module__ == "numpy":
        candidates = _topk_candidates(x, k, largest)
    if candidates is None:
        order = _sorted_order(x, largest)[..., :k]
    else:
        order = np.take_along_axis(
            candidates, _sorted_order(np.take_along_axis(x, candidates, -1), largest), -1
        )
    indices = order.astype(np.int64, copy=False)
    values = np.take_along_axis(x, indices, axis=-1)
    return np.moveaxis(values, -1, axis), np.moveaxis(indices, -1, axis)


@kernel("TopK", since=1)
def topk_v1(data: np.ndarray, k: int, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    return _topk(data, k, axis, 1, 1)


@kernel("TopK", since=10)
def topk_v10(data: np.ndarray, k: np.ndarray, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    return _topk(data, as_int(k), axis, 1, 1)


@kernel("TopK", since=(11, 24))
def topk(
    data: np.ndarray, k: np.ndarray, axis: int = -1, largest: int = 1, sorted: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    return _topk(data, as_int(k), axis, largest, sorted)


def _unique_object_slices(
    data: np.ndarray, axis: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """np.unique(..., axis) for string tensors (numpy refuses object arrays there): each
    slice along ``axis`` becomes a tuple; unique tuples are sorted lexicographically."""
    rows = [tuple(r) for r in np.moveaxis(data, axis, 0).reshape(data.shape[axis], -1).tolist()]
    uniques = sorted(set(rows))
    slot = {r: i for i, r in enumerate(uniques)}
    inverse = np.array([slot[r] for r in rows], dtype=np.int64)
    counts = np.bincount(inverse, minlength=len(uniques))
    first = np.full(len(uniques), len(rows), dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(len(rows)))
    return np.take(data, first, axis=axis), first, inverse, counts


@kernel("Unique", since=(11, 28))
def unique(
    data: np.ndarray, axis: int | None = None, sorted: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if axis is None:
        values, first, inverse, counts = np.unique(
            data.reshape(-1), return_index=True, return_inverse=True, return_counts=True
        )
        take_axis = 0
    else:
        take_axis = normalize_axis(axis, data.ndim)
        if data.dtype == object:
            values, first, inverse, counts = _unique_object_slices(data, take_axis)
        else:
            values, first, inverse, counts = np.unique(
                data, return_index=True, return_inverse=True, return_counts=True, axis=take_axis
            )
    inverse = inverse.reshape(-1)
    if not sorted:
        # Order of first occurrence: permute the sorted uniques by where they first appear.
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=take_axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    i64 = np.int64
    return values, first.astype(i64), inverse.astype(i64), counts.astype(i64)


@kernel("Trilu", since=14)
def trilu(data: np.ndarray, k: np.ndarray | None = None, upper: int = 1) -> np.ndarray:
    if data.ndim < 2:
        fail(f"Trilu: input must have rank >= 2, got {data.ndim}")
    diag = 0 if k is None else as_int(k)
    return np.triu(data, diag) if upper else np.tril(data, diag)


@kernel("OneHot", since=(9, 11, 28))
def one_hot(
    indices: np.ndarray, depth: np.ndarray, values: np.ndarray, axis: int = -1
) -> np.ndarray:
    n = int(np.asarray(depth).reshape(-1)[0])
    if n <= 0:
        fail(f"OneHot: depth must be positive, got {n}")
    values = values.reshape(-1)
    if values.size != 2:
        fail("OneHot: values must hold [off_value, on_value]")
    axis = normalize_axis(axis, indices.ndim, extra=1)
    idx = (
        indices.astype(np.int64)
        if indices.dtype.kind != "f"
        else np.trunc(indices).astype(np.int64)
    )
    idx = np.where(idx < 0, idx + n, idx)
    hot = idx[..., None] == np.arange(n)  # out-of-range indices match nothing: all off
    out = np.where(hot, values[1], values[0]).astype(values.dtype, copy=False)
    return np.moveaxis(out, -1, axis)
