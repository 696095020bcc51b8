"""Indexing kernels: Slice, Gather, GatherElements, GatherND, Scatter, ScatterElements,
ScatterND, Compress, NonZero, ReverseSequence, TensorScatter.

Slice returns a view (numpy slicing with any step); Gather uses np.take; the scatters
copy the data once and write with vectorised (ufunc.at for reductions) indexing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxviz.runtime.kernels._tensor_common import as_ints, fail, normalize_axis
from onnxviz.runtime.kernels._weight_cache import frozen
from onnxviz.runtime.registry import RUNTIME, kernel, specializer


def _slice_bounds(start: int, end: int, step: int, dim: int) -> slice:
    """ONNX clamping rules turned into a Python slice (negative steps included)."""
    if step == 0:
        fail("Slice: step 0")
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        return slice(start, end, step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    # end == -1 here means "through index 0", which a Python slice spells as None.
    return slice(start, None if end < 0 else end, step)


def _slice(
    data: np.ndarray,
    starts: list[int],
    ends: list[int],
    axes: list[int] | None,
    steps: list[int] | None,
) -> np.ndarray:
    return data[_slice_index(data.shape, starts, ends, axes, steps)]


def _slice_index(
    shape: tuple[int, ...],
    starts: list[int],
    ends: list[int],
    axes: list[int] | None,
    steps: list[int] | None,
) -> tuple[Any, ...]:
    """The numpy index of a Slice of an array of ``shape``."""
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        fail("Slice: starts, ends, axes and steps must have the same length")
    index: list[Any] = [slice(None)] * len(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        ax = normalize_axis(a, len(shape))
        index[ax] = _slice_bounds(s, e, st, shape[ax])
    return tuple(index)


@kernel("Slice", since=1)
def slice_v1(
    data: np.ndarray, starts: list[int], ends: list[int], axes: list[int] | None = None
) -> np.ndarray:
    return _slice(data, starts, ends, axes, None)


@kernel("Slice", since=(10, 11, 13))
def slice_op(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    axes: np.ndarray | None = None,
    steps: np.ndarray | None = None,
) -> np.ndarray:
    return _slice(
        data,
        as_ints(starts),
        as_ints(ends),
        None if axes is None else as_ints(axes),
        None if steps is None else as_ints(steps),
    )


@specializer(slice_op)
def _prepared_slice(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs, starts/ends/axes/steps initializers: their ints read once and the
    index of each input shape made once (a transformer slices the same shapes on every
    run; the per-call work was most of a small Slice's 4 us).  Another input array (an
    initializer overridden by a feed) takes the kernel."""
    params = known[1:]
    if len(params) < 2:
        return None
    if any(p is RUNTIME for p in params):
        return _slice_by_identity()
    try:
        starts, ends = as_ints(params[0]), as_ints(params[1])
        axes = None if len(params) < 3 or params[2] is None else as_ints(params[2])
        steps = None if len(params) < 4 or params[3] is None else as_ints(params[3])
    except (TypeError, ValueError):  # not integers: the kernel says so when it runs
        return None
    indexes: dict[tuple[int, ...], tuple[Any, ...]] = {}

    def call(data: Any, *given: Any) -> Any:
        for g, p in zip(given, params):
            if g is not p:
                return slice_op(data, *given)
        if type(data) is not np.ndarray:
            return slice_op(data, *given)
        index = indexes.get(data.shape)
        if index is None:
            index = _slice_index(data.shape, starts, ends, axes, steps)
            if len(indexes) < 64:
                indexes[data.shape] = index
        return data[index]

    return call


def _slice_by_identity() -> Any:
    """A Slice whose starts, ends, axes or steps are computed at run time (HF's
    rotate_half slices at x.shape[-1] // 2, from Shape arithmetic): those values are the
    same read-only arrays run after run (shape_memo keeps them), so the index of the last
    call is kept with the arrays it was made from and taken again while the same arrays
    come with an input of the same shape (0.9-1.1 against 2.7 us a call); anything else
    (an array whose contents may change, another array or shape) takes the kernel, and
    is kept in turn when its values cannot change (_weight_cache.frozen)."""
    last: list[Any] = [None, None, None]  # params, shape, index

    def call(data: Any, *given: Any) -> Any:
        if type(data) is not np.ndarray:
            return slice_op(data, *given)
        held = last[0]
        if held is not None and data.shape == last[1] and len(given) == len(held):
            for g, h in zip(given, held):
                if g is not h:
                    break
            else:
                return data[last[2]]
        out = slice_op(data, *given)
        if all(g is None or frozen(g) for g in given):
            # (the kernel's own index for these values: it ran without an error above)
            last[:] = [given, data.shape, _index_of(data.shape, given)]
        return out

    return call


def _index_of(shape: tuple[int, ...], given: tuple[Any, ...]) -> tuple[Any, ...]:
    starts, ends = as_ints(given[0]), as_ints(given[1])
    axes = None if len(given) < 3 or given[2] is None else as_ints(given[2])
    steps = None if len(given) < 4 or given[3] is None else as_ints(given[3])
    return _slice_index(shape, starts, ends, axes, steps)


def _fix_negative(indices: np.ndarray, dim: int | np.ndarray) -> np.ndarray:
    """Indices in [-dim, dim-1] mapped to [0, dim-1]; out-of-range is an error.
    ``dim`` is one size, or one size per index column (last axis) for the ND ops."""
    idx = indices.astype(np.int64, copy=False)
    if not idx.size:
        return idx
    if isinstance(dim, int):
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -dim or hi >= dim:
            fail(f"index out of range for dimension of size {dim}")
        return idx + dim * (idx < 0) if lo < 0 else idx
    if np.any(idx < -dim) or np.any(idx >= dim):
        fail(f"index out of range for dimensions {dim.tolist()}")
    return np.where(idx < 0, idx + dim, idx)


@kernel("Gather", since=(1, 11, 13))
def gather(data: np.ndarray, indices: np.ndarray, axis: int = 0) -> np.ndarray:
    axis = normalize_axis(axis, data.ndim)
    try:
        return np.take(data, indices.astype(np.int64, copy=False), axis=axis)
    except IndexError as exc:
        fail(f"Gather: {exc}")


@specializer(gather)
def _prepared_gather(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs, a constant index of one element (a scalar: the axis goes, as an
    unrolled loop's x[t]; one index in a 1-D array: the axis stays, of size 1): the
    element picked by basic indexing, a view of ``data`` (the kernel's np.take copied it:
    2 us a node in an LSTMCell loop written out step by step), its index made once per
    input shape.  An index out of range, another index array (an initializer overridden
    by a feed) or anything but an ndarray takes the kernel, which says what is wrong."""
    idx = known[1] if len(known) == 2 else None
    table = known[0] if known else None
    if idx is RUNTIME and type(table) is np.ndarray and table.ndim:
        return _prepared_table_gather(table, attrs)
    if idx is RUNTIME:
        return _prepared_scalar_gather(attrs)
    if type(idx) is not np.ndarray or idx.dtype.kind not in "iu" or idx.size != 1 or idx.ndim > 1:
        return None
    value, keep_axis = int(idx.reshape(-1)[0]), idx.ndim == 1
    axis0 = int(attrs.get("axis", 0))
    indexes: dict[tuple[int, ...], Any] = {}

    def call(data: Any, given: Any) -> Any:
        if given is not idx or type(data) is not np.ndarray:
            return gather(data, given, **attrs)
        index = indexes.get(data.shape)
        if index is None:
            index = _basic_index(data.shape, axis0, value, keep_axis)
            if index is None:
                return gather(data, given, **attrs)
            if len(indexes) < 64:
                indexes[data.shape] = index
        return data[index]

    return call


def _basic_index(
    shape: tuple[int, ...], axis0: int, value: int, keep_axis: bool
) -> tuple[Any, ...] | None:
    """The basic index that picks element ``value`` along axis ``axis0`` of an array of
    ``shape`` (keeping that axis, of size 1, when ``keep_axis``), or None when the axis
    or the element is out of range (the kernel then says so)."""
    if not -len(shape) <= axis0 < len(shape):
        return None
    axis = axis0 % len(shape)
    dim = shape[axis]
    if not -dim <= value < dim:
        return None
    at = value % dim
    pick: Any = slice(at, at + 1) if keep_axis else at
    return (slice(None),) * axis + (pick,)


_INDEX_KINDS = (np.dtype(np.int32), np.dtype(np.int64))


def _prepared_scalar_gather(attrs: dict[str, Any]) -> Any:
    """Indices known only at run time: a 0-d int32/int64 index in range picks by basic
    indexing, a view of ``data`` as the constant index's call picks (a scripted loop's
    x[t] by its counter: the kernel's axis, dtype and take steps were 2 us of a 7 us
    iteration); any other call takes the kernel."""
    axis0 = int(attrs.get("axis", 0))

    def call(data: Any, given: Any) -> Any:
        if (
            type(data) is np.ndarray
            and type(given) is np.ndarray
            and given.ndim == 0
            and given.dtype in _INDEX_KINDS
        ):
            index = _basic_index(data.shape, axis0, int(given), False)
            if index is not None:
                return data[index]
        return gather(data, given, **attrs)

    return call


def _prepared_table_gather(table: np.ndarray, attrs: dict[str, Any]) -> Any:
    """A constant table (an embedding) gathered by indices each run: numpy's take of the
    int32/int64 indices along the axis found once, the kernel's take without its axis
    and dtype steps (a decoder's embedding of 3 tokens took 2.3 us through the kernel,
    1.2 here).  Indices out of range (take raises) and any other call take the kernel,
    which says what is wrong."""
    axis0 = int(attrs.get("axis", 0))
    if not -table.ndim <= axis0 < table.ndim:
        return None
    axis, take = axis0 % table.ndim, np.take

    def call(data: Any, indices: Any) -> Any:
        if data is table and type(indices) is np.ndarray and indices.dtype in _INDEX_KINDS:
            try:
                return take(table, indices, axis=axis)
            except IndexError:
                pass
        return gather(data, indices, **attrs)

    return call


@kernel("GatherElements", since=(11, 13))
def gather_elements(data: np.ndarray, indices: np.ndarray, axis: int = 0) -> np.ndarray:
    axis = normalize_axis(axis, data.ndim)
    if indices.ndim != data.ndim:
        fail("GatherElements: data and indices must have the same rank")
    idx = _fix_negative(indices, data.shape[axis])
    # Indices may be smaller than data in the other dimensions: restrict data first.
    if any(indices.shape[d] != data.shape[d] for d in range(data.ndim) if d != axis):
        window = tuple(
            slice(None) if d == axis else slice(0, indices.shape[d]) for d in range(data.ndim)
        )
        data = data[window]
    return np.take_along_axis(data, idx, axis=axis)


@kernel("GatherND", since=(11, 12, 13))
def gather_nd(data: np.ndarray, indices: np.ndarray, batch_dims: int = 0) -> np.ndarray:
    b = batch_dims
    k = indices.shape[-1]
    if b + k > data.ndim:
        fail(f"GatherND: batch_dims + indices.shape[-1] = {b + k} > rank {data.ndim}")
    batch_shape = data.shape[:b]
    n_batch = int(np.prod(batch_shape, dtype=np.int64))
    flat_data = data.reshape((n_batch, *data.shape[b:]))
    idx = _fix_negative(indices, np.array(data.shape[b : b + k], dtype=np.int64))
    idx = idx.reshape(n_batch, -1, k)
    batch_index = np.arange(n_batch)[:, None]
    gathered = flat_data[(batch_index, *(idx[..., j] for j in range(k)))]
    return gathered.reshape(indices.shape[:-1] + data.shape[b + k :])


_REDUCERS = {
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _write(out: np.ndarray, index: tuple[Any, ...], updates: np.ndarray, reduction: str) -> None:
    if reduction == "none":
        out[index] = updates
        return
    ufunc = _REDUCERS.get(reduction)
    if ufunc is None:
        fail(f"unknown reduction {reduction!r}")
    if out.dtype == np.bool_ and reduction in ("add", "mul"):
        ufunc = np.logical_or if reduction == "add" else np.logical_and
    ufunc.at(out, index, updates)


def _scatter_elements(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int, reduction: str
) -> np.ndarray:
    axis = normalize_axis(axis, data.ndim)
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        fail("ScatterElements: indices and updates must have the same shape and rank as data")
    idx = _fix_negative(indices, data.shape[axis])
    grid: list[np.ndarray] = list(np.indices(indices.shape, sparse=True))
    grid[axis] = idx
    out = data.copy()
    _write(out, tuple(grid), updates, reduction)
    return out


@kernel("Scatter", since=(9, 11))
def scatter(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int = 0
) -> np.ndarray:
    return _scatter_elements(data, indices, updates, axis, "none")


@kernel("ScatterElements", since=(11, 13, 16, 18))
def scatter_elements(
    data: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    axis: int = 0,
    reduction: str = "none",
) -> np.ndarray:
    return _scatter_elements(data, indices, updates, axis, reduction)


@kernel("ScatterND", since=(11, 13, 16, 18))
def scatter_nd(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str = "none"
) -> np.ndarray:
    k = indices.shape[-1]
    if k > data.ndim:
        fail(f"ScatterND: index depth {k} > rank {data.ndim}")
    expected = indices.shape[:-1] + data.shape[k:]
    if updates.shape != expected:
        fail(f"ScatterND: updates shape {list(updates.shape)} != expected {list(expected)}")
    idx = _fix_negative(indices, np.array(data.shape[:k], dtype=np.int64))
    out = data.copy()
    _write(out, tuple(idx[..., j] for j in range(k)), updates, reduction)
    return out


@kernel("Compress", since=(9, 11, 28))
def compress(data: np.ndarray, condition: np.ndarray, axis: int | None = None) -> np.ndarray:
    cond = condition.astype(bool, copy=False).reshape(-1)
    if axis is None:
        return np.compress(cond, data.reshape(-1))
    axis = normalize_axis(axis, data.ndim)
    if cond.size > data.shape[axis]:
        # numpy refuses a longer condition; ONNX only looks at the first dim entries.
        if np.any(cond[data.shape[axis] :]):
            fail("Compress: condition selects indices past the end of the axis")
        cond = cond[: data.shape[axis]]
    return np.compress(cond, data, axis=axis)


@kernel("NonZero", since=(9, 13))
def nonzero(data: np.ndarray) -> np.ndarray:
    if data.ndim == 0:
        # A scalar has no coordinates: shape [0, 1] if it is non-zero, else [0, 0].
        return np.zeros((0, int(bool(data))), dtype=np.int64)
    return np.array(np.nonzero(data), dtype=np.int64).reshape(data.ndim, -1)


@kernel("ReverseSequence", since=(10, 28))
def reverse_sequence(
    data: np.ndarray, sequence_lens: np.ndarray, batch_axis: int = 1, time_axis: int = 0
) -> np.ndarray:
    b_ax = normalize_axis(batch_axis, data.ndim)
    t_ax = normalize_axis(time_axis, data.ndim)
    n_time = data.shape[t_ax]
    lens = np.clip(sequence_lens.astype(np.int64).reshape(-1), 0, n_time)
    t = np.arange(n_time)
    # source time index per (batch, time): reversed within the length, unchanged after.
    src = np.where(t[None, :] < lens[:, None], lens[:, None] - 1 - t[None, :], t[None, :])
    shape = [1] * data.ndim
    shape[b_ax] = data.shape[b_ax]
    shape[t_ax] = n_time
    src = src if b_ax < t_ax else src.T
    src = src.reshape(shape)
    return np.take_along_axis(data, np.broadcast_to(src, data.shape), axis=t_ax)


@kernel("TensorScatter", since=24)
def tensor_scatter(
    past_cache: np.ndarray,
    update: np.ndarray,
    write_indices: np.ndarray | None = None,
    axis: int = -2,
    mode: str = "linear",
) -> np.ndarray:
    axis = normalize_axis(axis, past_cache.ndim)
    if axis == 0:
        fail("TensorScatter: the sequence axis cannot be the batch axis 0")
    batch = past_cache.shape[0]
    max_len = past_cache.shape[axis]
    seq_len = update.shape[axis]
    starts = (
        np.zeros(batch, dtype=np.int64)
        if write_indices is None
        else write_indices.astype(np.int64).reshape(-1)
    )
    pos = starts[:, None] + np.arange(seq_len)[None, :]
    if mode == "circular":
        pos = pos % max_len
    elif mode != "linear":
        fail(f"TensorScatter: unknown mode {mode!r}")
    if pos.size and (pos.min() < 0 or pos.max() >= max_len):
        fail("TensorScatter: write position past the cache length")
    out = past_cache.copy()
    # Put the sequence axis next to the batch axis (views) and write per (batch, position).
    out_view = np.moveaxis(out, axis, 1)
    upd_view = np.moveaxis(update, axis, 1)
    out_view[np.arange(batch)[:, None], pos] = upd_view
    return out
