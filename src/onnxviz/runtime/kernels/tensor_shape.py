"""Shape and layout kernels: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Transpose,
Concat, Split, Expand, Tile, DepthToSpace, SpaceToDepth, Identity.

Wherever the spec allows the result is a view of the input (Reshape, Flatten, Squeeze,
Unsqueeze, Transpose, Split, Expand, Identity); kernels never write into inputs, so
sharing memory is safe and saves a copy per node.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels._tensor_common import (
    as_int,
    as_ints,
    fail,
    normalize_axes,
    normalize_axis,
)
from onnxviz.runtime.kernels._weight_cache import frozen
from onnxviz.runtime.registry import (
    RUNTIME,
    KernelContext,
    kernel,
    specialized_outputs,
    specializer,
)

_ALL_SHAPE = (1, 13, 15, 19, 21, 23, 24, 25)


@kernel("Shape", since=_ALL_SHAPE)
def shape(data: np.ndarray, start: int = 0, end: int | None = None) -> np.ndarray:
    dims = data.shape
    rank = len(dims)
    lo = max(0, min(rank, start + rank if start < 0 else start))
    hi = rank if end is None else max(0, min(rank, end + rank if end < 0 else end))
    return np.array(dims[lo:hi], dtype=np.int64)


@kernel("Size", since=(1, 13, 19, 21, 23, 24, 25))
def size(data: np.ndarray) -> np.ndarray:
    return np.array(data.size, dtype=np.int64)


def reshape_target(in_shape: tuple[int, ...], target: list[int], allowzero: int) -> list[int]:
    """Resolve ONNX 0 (copy the input dim, unless allowzero) and -1 (infer) entries.
    Products of Python ints (math.prod): np.prod's per-call cost was most of a
    Reshape node, which decoders run several times per layer and token."""
    out = list(target)
    if not allowzero:
        for i, d in enumerate(out):
            if d == 0:
                if i >= len(in_shape):
                    fail(f"Reshape: 0 at position {i} but the input has rank {len(in_shape)}")
                out[i] = in_shape[i]
    unknown = [i for i, d in enumerate(out) if d == -1]
    if len(unknown) > 1:
        fail("Reshape: more than one -1 in the target shape")
    total = math.prod(in_shape)
    if unknown:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            fail(f"Reshape: cannot infer -1 reshaping {list(in_shape)} to {target}")
        out[unknown[0]] = total // known
    if any(d < 0 for d in out) or math.prod(out) != total:
        fail(f"Reshape: cannot reshape {list(in_shape)} to {target}")
    return out


@kernel("Reshape", since=1)
def reshape_v1(data: np.ndarray, shape: list[int] | None = None, **_: Any) -> np.ndarray:
    return data.reshape(reshape_target(data.shape, shape or [], 0))


@kernel("Reshape", since=(5, 13, 14, 19, 21, 23, 24, 25))
def reshape(data: np.ndarray, shape: np.ndarray, allowzero: int = 0) -> np.ndarray:
    return data.reshape(reshape_target(data.shape, as_ints(shape), allowzero))


@kernel("Flatten", since=(1, 9, 11, 13, 21, 23, 24, 25))
def flatten(data: np.ndarray, axis: int = 1) -> np.ndarray:
    axis = axis + data.ndim if axis < 0 else axis
    if not 0 <= axis <= data.ndim:
        fail(f"Flatten: axis {axis} is out of range for rank {data.ndim}")
    return data.reshape(math.prod(data.shape[:axis]), math.prod(data.shape[axis:]))


def _squeeze(data: np.ndarray, axes: Any) -> np.ndarray:
    # An empty axes list squeezes every 1 like an absent one (onnxruntime does the same;
    # the spec only speaks of "not provided").
    if axes is None or len(axes) == 0:
        return data.reshape([d for d in data.shape if d != 1])
    norm = normalize_axes(as_ints(axes), data.ndim)
    for a in norm:
        if data.shape[a] != 1:
            fail(f"Squeeze: dimension {a} has size {data.shape[a]}, not 1")
    return np.squeeze(data, axis=tuple(norm)) if norm else data


@kernel("Squeeze", since=(1, 11))
def squeeze_v1(data: np.ndarray, axes: list[int] | None = None) -> np.ndarray:
    return _squeeze(data, axes)


@kernel("Squeeze", since=(13, 21, 23, 24, 25))
def squeeze(data: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    return _squeeze(data, axes)


def _unsqueeze(data: np.ndarray, axes: list[int]) -> np.ndarray:
    out_rank = data.ndim + len(axes)
    norm = sorted(normalize_axis(a, out_rank) for a in axes)
    if len(set(norm)) != len(norm):
        fail(f"Unsqueeze: repeated axes {axes}")
    new_shape = list(data.shape)
    for a in norm:
        new_shape.insert(a, 1)
    return data.reshape(new_shape)


@kernel("Unsqueeze", since=(1, 11))
def unsqueeze_v1(data: np.ndarray, axes: list[int]) -> np.ndarray:
    return _unsqueeze(data, axes)


@kernel("Unsqueeze", since=(13, 21, 23, 24, 25))
def unsqueeze(data: np.ndarray, axes: np.ndarray) -> np.ndarray:
    return _unsqueeze(data, as_ints(axes))


def _by_shape(kernel_fn: Any, shape_of: Any) -> Any:
    """The specialized call of a view op whose second input is a constant (Reshape's
    shape, Squeeze's and Unsqueeze's axes) in unwatched runs: the output shape worked
    out by ``shape_of(input shape, that constant)`` once per input shape, then a plain
    reshape (the same view the kernel returns).  Another constant (an initializer
    overridden by a feed) or anything but an array takes the kernel."""

    def specialize(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
        if len(known) == 2 and known[1] is RUNTIME:
            return _by_kept_shape(kernel_fn, attrs)
        if len(known) != 2 or known[1] is None:
            return None
        const = known[1]
        shapes: dict[tuple[int, ...], tuple[int, ...]] = {}
        fallback = functools.partial(kernel_fn, **attrs)

        def call(data: Any, given: Any) -> Any:
            if given is not const or type(data) is not np.ndarray:
                return fallback(data, given)
            out = shapes.get(data.shape)
            if out is None:
                out = tuple(shape_of(data, const, attrs))
                if len(shapes) < 64:
                    shapes[data.shape] = out
            return data.reshape(out)

        return call

    return specialize


def _by_kept_shape(kernel_fn: Any, attrs: dict[str, Any]) -> Any:
    """`_by_shape`'s call for a second input computed at run time: an exporter's Reshape
    target built by Shape -> Gather -> Unsqueeze -> Concat, which shape_memo.py keeps
    between runs, so the same read-only array comes each run.  The output shape is kept
    for the last such array (held here, so its identity is never another's; `frozen`:
    its values cannot change) and input shape; another array takes the kernel's steps
    (a Hugging Face GPT-2's 30 Reshapes a token: 2.5 us each through the kernel)."""
    fallback = functools.partial(kernel_fn, **attrs)
    kept: list[Any] = [None, None, None]  # the array, the input shape, the output shape

    def call(data: Any, given: Any) -> Any:
        if type(data) is not np.ndarray or type(given) is not np.ndarray:
            return fallback(data, given)
        if given is kept[0] and data.shape == kept[1] and not given.flags.writeable:
            return data.reshape(kept[2])
        out = fallback(data, given)
        if frozen(given):  # (read-only down to its buffer: nobody can change it)
            kept[:] = [given, data.shape, out.shape]
        return out

    return call


def _reshape_shape(data: np.ndarray, const: Any, attrs: dict[str, Any]) -> list[int]:
    return reshape_target(data.shape, as_ints(const), attrs.get("allowzero", 0))


def _squeeze_shape(data: np.ndarray, const: Any, attrs: dict[str, Any]) -> tuple[int, ...]:
    return _squeeze(data, const).shape


def _unsqueeze_shape(data: np.ndarray, const: Any, attrs: dict[str, Any]) -> tuple[int, ...]:
    return _unsqueeze(data, as_ints(const)).shape


@specializer(reshape)
def _prepared_reshape(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """With the compiled loop built, the call in C (native/_runloop.c's `reshape`): the
    kernel's sizes and data.reshape, kept for a frozen target (a constant, or a kept
    result of the shape arithmetic); anything else goes to the kernel.  Without it,
    `_by_shape`'s Python call."""
    loop = native.load("runloop")
    if loop is not None and len(known) == 2:
        fallback = functools.partial(reshape, **attrs)
        return loop.reshape(fallback, bool(attrs.get("allowzero", 0)))
    return _by_shape(reshape, _reshape_shape)(attrs, known, n)


specializer(squeeze)(_by_shape(squeeze, _squeeze_shape))
specializer(unsqueeze)(_by_shape(unsqueeze, _unsqueeze_shape))


@kernel("Transpose", since=(1, 13, 21, 23, 24, 25))
def transpose(data: np.ndarray, perm: list[int] | None = None) -> np.ndarray:
    if perm is None:
        return data.T
    if sorted(perm) != list(range(data.ndim)):
        fail(f"Transpose: perm {perm} is not a permutation of rank {data.ndim}")
    return np.transpose(data, perm)


@specializer(transpose)
def _prepared_transpose(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs: the permutation checked once per rank, then the view."""
    perm = attrs.get("perm")
    if perm is None:
        return None
    perm = tuple(perm)
    valid = tuple(sorted(perm)) == tuple(range(len(perm)))

    def call(data: Any) -> Any:
        if valid and type(data) is np.ndarray and data.ndim == len(perm):
            return data.transpose(perm)
        return transpose(data, perm=list(perm))

    return call


@kernel("Concat", since=(1, 4, 11, 13))
def concat(*inputs: np.ndarray, axis: int = 1) -> np.ndarray:
    # Opset 1 made axis optional with default 1; from opset 4 it is required.
    arrays = [x for x in inputs if x is not None]
    if not arrays:
        fail("Concat: no inputs")
    rank = arrays[0].ndim
    return np.concatenate(arrays, axis=normalize_axis(axis, rank))


@specializer(concat)
def _prepared_concat(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs: numpy's concatenation of the inputs along the attribute's axis
    (it takes a negative one as the kernel normalizes it), the kernel's own call without
    its list and axis steps (a decoder's KV-cache Concat 1.6 -> 1.1 us); a call numpy
    refuses (an absent input, an axis out of range, ranks that differ) goes to the
    kernel, which says what is wrong."""
    axis = int(attrs.get("axis", 1))
    concatenate = np.concatenate

    def call(*ins: Any) -> Any:
        try:
            return concatenate(ins, axis=axis)
        except Exception:  # (the kernel raises the node's error, or drops a None)
            return concat(*ins, **attrs)

    return call


def _split_sizes(
    dim: int, split: list[int] | None, n_out: int, num_outputs: int | None
) -> list[int]:
    if split:
        if sum(split) != dim or min(split) < 0:
            fail(f"Split: sizes {split} do not add up to dimension {dim}")
        return split
    if num_outputs is not None:
        # Opset 18: chunks of ceil(dim / num_outputs), the last one smaller.
        chunk = -(-dim // num_outputs)
        sizes = [min(chunk, max(0, dim - i * chunk)) for i in range(num_outputs)]
        return sizes
    if dim % n_out:
        fail(f"Split: dimension {dim} cannot be split evenly into {n_out} outputs")
    return [dim // n_out] * n_out


def _split(data: np.ndarray, axis: int, sizes: list[int]) -> tuple[np.ndarray, ...]:
    axis = normalize_axis(axis, data.ndim)
    # Views by plain slicing (np.split's Python-level machinery cost several times more).
    lead = (slice(None),) * axis
    parts = []
    start = 0
    for size in sizes:
        parts.append(data[(*lead, slice(start, start + size))])
        start += size
    return tuple(parts)


@kernel("Split", since=1, ctx=True)
def split_v1(
    ctx: KernelContext,
    data: np.ndarray,
    split_in: np.ndarray | None = None,
    *,
    axis: int = 0,
    split: list[int] | None = None,
) -> tuple[np.ndarray, ...]:
    sizes = as_ints(split_in) if split_in is not None else split
    return _split(data, axis, _split_sizes(data.shape[axis], sizes, ctx.n_outputs, None))


@kernel("Split", since=(2, 11), ctx=True)
def split_v2(
    ctx: KernelContext, data: np.ndarray, axis: int = 0, split: list[int] | None = None
) -> tuple[np.ndarray, ...]:
    return _split(data, axis, _split_sizes(data.shape[axis], split, ctx.n_outputs, None))


@kernel("Split", since=(13, 18), ctx=True)
def split_v13(
    ctx: KernelContext,
    data: np.ndarray,
    split: np.ndarray | None = None,
    axis: int = 0,
    num_outputs: int | None = None,
) -> tuple[np.ndarray, ...]:
    sizes = as_ints(split) if split is not None else None
    if sizes and len(sizes) != ctx.n_outputs:
        fail(f"Split: {len(sizes)} sizes for {ctx.n_outputs} outputs")
    dim = data.shape[normalize_axis(axis, data.ndim)]
    return _split(data, axis, _split_sizes(dim, sizes, ctx.n_outputs, num_outputs))


_SPLIT_COPY_MAX = 1 << 14


def _specialize_split(kernel_fn: Any) -> Any:
    """The specialized call of a Split node (its sizes an attribute, a constant input or
    absent) in unwatched runs: the kernel's first result for an input shape gives the
    index of each part, and later inputs of that shape are sliced by them (the same
    views).  Another sizes input (an initializer a feed overrides) or anything but an
    array takes the kernel, as does a shape the kernel refuses (it raises)."""

    def specialize(
        attrs: dict[str, Any], known: tuple[Any, ...], n: int, ctx: KernelContext
    ) -> Any:
        sizes = known[1] if len(known) > 1 else None
        if sizes is RUNTIME:
            return None
        fallback = functools.partial(kernel_fn, ctx, **attrs)
        # input shape -> (each part's index, and the compiled copy's axis and lengths
        # when its parts are copied: None to slice them)
        cuts: dict[tuple[int, ...], tuple[list[tuple[slice, ...]], Any]] = {}
        axis_attr = int(attrs.get("axis", 0))
        copier = native.load("runloop")

        def call(data: Any, *rest: Any) -> Any:
            if (rest and rest[0] is not sizes) or type(data) is not np.ndarray:
                return specialized_outputs(fallback(data, *rest), n)
            cut = cuts.get(data.shape)
            if cut is None:
                parts = fallback(data, *rest)
                axis = normalize_axis(axis_attr, data.ndim)
                lead = (slice(None),) * axis
                index, start = [], 0
                for part in parts:
                    index.append((*lead, slice(start, start + part.shape[axis])))
                    start += part.shape[axis]
                # Small parts that are not contiguous (a split along a later axis: an
                # LSTM cell's gates, rows 4 x the gates apart) are copied: every reader
                # of a strided view pays for it (numpy's strided loops; the compiled
                # kernels take contiguous arrays), and the copies are what onnxruntime's
                # Split makes.  A written-out GRU cell's Adds of two such views cost 1.2
                # us each against 0.45 on copies.
                lengths = tuple(part.shape[axis] for part in parts)
                strided = any(not data[ix].flags.c_contiguous for ix in index)
                copy = (axis, lengths) if strided and data.size <= _SPLIT_COPY_MAX else None
                if len(cuts) < 64:
                    cuts[data.shape] = (index, copy)
                return specialized_outputs(parts, n)
            index, copy = cut
            if copy is None:
                return specialized_outputs([data[ix] for ix in index], n)
            if copier is not None and data.flags.c_contiguous:
                # one compiled call (_runloop.c's split_copy): numpy's slices and
                # strided copies took 2.6-3.2 us for a [4, 512] value's three or four
                return specialized_outputs(copier.split_copy(data, *copy, np.empty), n)
            parts = [data[ix] for ix in index]
            return specialized_outputs([p if p.flags.c_contiguous else p.copy() for p in parts], n)

        return call

    return specialize


specializer(split_v1)(_specialize_split(split_v1))
specializer(split_v2)(_specialize_split(split_v2))
specializer(split_v13)(_specialize_split(split_v13))


@kernel("Expand", since=(8, 13))
def expand(data: np.ndarray, shape: np.ndarray) -> np.ndarray:
    target = as_ints(shape)
    out_shape = _broadcast_shape(data.shape, target)
    if out_shape is None:
        fail(f"Expand: shape {list(data.shape)} cannot broadcast to {target}")
    # A read-only broadcast view: consumers never write into their inputs.  Made as an
    # ndarray over data's buffer with zero strides where it repeats: np.broadcast_to and
    # np.broadcast_shapes cost 5 of a small Expand's 7.5 us (an LSTM export's initial
    # states are five of them per run).
    if data.dtype.hasobject or not data.flags.c_contiguous or not data.size:
        return np.broadcast_to(data, out_shape)
    lead = len(out_shape) - data.ndim
    strides = [0] * lead
    for dim, size, stride in zip(out_shape[lead:], data.shape, data.strides):
        strides.append(0 if size == 1 and dim != 1 else stride)
    out = np.ndarray(out_shape, data.dtype, data, 0, tuple(strides))
    out.flags.writeable = False
    return out


@specializer(expand)
def _prepared_expand(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
    """Unwatched runs: the view's shape and strides kept for the last frozen target (a
    constant, or a kept result of the shape arithmetic: its values cannot change) and
    input layout, so a repeat call is the view alone.  A TorchScript attention expands
    its key padding mask each layer, 3 us through the kernel's checks and loops."""
    if len(known) != 2:
        return None
    # the target, the input's shape, strides and dtype, the view's shape and strides
    kept: list[Any] = [None] * 6

    def call(data: Any, given: Any) -> Any:
        if (
            given is kept[0]
            and type(data) is np.ndarray
            and data.shape == kept[1]
            and data.strides == kept[2]
            and data.dtype is kept[3]
            and not given.flags.writeable
        ):
            out = np.ndarray(kept[4], kept[3], data, 0, kept[5])
            out.flags.writeable = False
            return out
        out = expand(data, given)
        if (
            type(data) is np.ndarray
            and type(given) is np.ndarray
            and data.flags.c_contiguous  # the kernel's own view, not broadcast_to's
            and data.size
            and not data.dtype.hasobject
            and frozen(given)
        ):
            kept[:] = [given, data.shape, data.strides, data.dtype, out.shape, out.strides]
        return out

    return call


def _broadcast_shape(have: tuple[int, ...], want: list[int]) -> tuple[int, ...] | None:
    """Expand's output shape (numpy's broadcasting rule, of the two shapes), or None."""
    rank = max(len(have), len(want))
    a = (1,) * (rank - len(have)) + tuple(have)
    b = (1,) * (rank - len(want)) + tuple(want)
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1 and y >= 0:
            out.append(y)
        else:
            return None
    return tuple(out)


@kernel("Tile", since=1)
def tile_v1(data: np.ndarray, tiles: np.ndarray, axis: np.ndarray) -> np.ndarray:
    reps = [1] * data.ndim
    reps[normalize_axis(as_int(axis), data.ndim)] = as_int(tiles)
    return np.tile(data, reps)


@kernel("Tile", since=(6, 13))
def tile(data: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    reps = as_ints(repeats)
    if len(reps) != data.ndim:
        fail(f"Tile: {len(reps)} repeats for rank {data.ndim}")
    return np.tile(data, reps)


def _check_blocks(data: np.ndarray, blocksize: int, spatial: bool) -> tuple[int, ...]:
    if data.ndim != 4:
        fail(f"expected a 4-D input, got rank {data.ndim}")
    b, c, h, w = data.shape
    if blocksize <= 0:
        fail(f"blocksize must be positive, got {blocksize}")
    if spatial and (h % blocksize or w % blocksize):
        fail(f"spatial dims {h}x{w} are not divisible by blocksize {blocksize}")
    if not spatial and c % (blocksize * blocksize):
        fail(f"channels {c} are not divisible by blocksize^2 = {blocksize * blocksize}")
    return b, c, h, w


@kernel("DepthToSpace", since=(1, 11, 13, 28))
def depth_to_space(data: np.ndarray, blocksize: int, mode: str = "DCR") -> np.ndarray:
    b, c, h, w = _check_blocks(data, blocksize, spatial=False)
    bs = blocksize
    if mode == "DCR":
        tmp = data.reshape(b, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        tmp = data.reshape(b, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        fail(f"DepthToSpace: unknown mode {mode!r}")
    return tmp.reshape(b, c // (bs * bs), h * bs, w * bs)


@kernel("SpaceToDepth", since=(1, 13, 28))
def space_to_depth(data: np.ndarray, blocksize: int, mode: str = "DCR") -> np.ndarray:
    b, c, h, w = _check_blocks(data, blocksize, spatial=True)
    bs = blocksize
    if mode == "DCR":
        tmp = data.reshape(b, c, h // bs, bs, w // bs, bs).transpose(0, 3, 5, 1, 2, 4)
    elif mode == "CRD":
        tmp = data.reshape(b, c, h // bs, bs, w // bs, bs).transpose(0, 1, 3, 5, 2, 4)
    else:
        fail(f"SpaceToDepth: unknown mode {mode!r}")
    return tmp.reshape(b, c * bs * bs, h // bs, w // bs)


@kernel("Identity", since=(1, 13, 14, 16, 19, 21, 23, 24, 25))
def identity(value: Any) -> Any:
    # Tensors, sequences (lists) and optionals (None) pass through unchanged.
    return value
