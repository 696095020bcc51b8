"""Compare two initializers value by value, in chunks, so two 1 GB models never need
2 GB of memory: external data is read with ``readinto`` into two reused buffers (not
mapped, so the pages read do not stay in our resident memory), embedded data is
sliced in place.  Chunks whose bytes agree are skipped without decoding; the others
give the largest absolute and relative difference and the fraction of elements that
changed (NaN against NaN counts as equal).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
from onnx import TensorProto

from onnxviz.model.diff.results import TensorDiff
from onnxviz.model.dtypes import ELEMENT_TYPES
from onnxviz.model.external import external_ref, resolve_location
from onnxviz.model.tensors import describe_tensor, to_array
from onnxviz.model.text import as_text

CHUNK_BYTES = 8 << 20


def _dtype_name(t: TensorProto) -> str:
    et = ELEMENT_TYPES.get(t.data_type)
    return et.name if et else f"type{t.data_type}"


def _plain_dtype(t: TensorProto) -> np.dtype | None:
    """The numpy dtype of a fixed-width, byte-aligned element type stored as raw or
    external bytes; None when the tensor needs the full decoder."""
    et = ELEMENT_TYPES.get(t.data_type)
    if et is None or et.is_string or et.bits % 8 or t.HasField("segment"):
        return None
    if t.data_location != TensorProto.EXTERNAL and not t.HasField("raw_data"):
        return None
    try:
        dt = np.dtype(et.dtype)
    except Exception:
        return None
    if dt.itemsize * 8 != et.bits:
        return None
    return dt.newbyteorder("<") if dt.itemsize > 1 else dt


class _ByteSource:
    """The bytes of one tensor, read chunk by chunk."""

    def __init__(self, t: TensorProto, base_dir: str | None) -> None:
        self.file = None
        self.data: bytes | None = None
        if t.data_location == TensorProto.EXTERNAL:
            ref = external_ref(t)
            path = resolve_location(base_dir, ref.location, t.name)
            self.file = open(path, "rb")  # noqa: SIM115 - closed in close()
            self.offset = ref.offset
        else:
            self.data = t.raw_data

    def read(self, start: int, size: int, buf: bytearray) -> memoryview:
        if self.file is not None:
            self.file.seek(self.offset + start)
            n = self.file.readinto(memoryview(buf)[:size])
            return memoryview(buf)[:n]
        assert self.data is not None
        return memoryview(self.data)[start : start + size]

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def _same_bytes(x: memoryview, y: memoryview) -> bool:
    """memcmp speed: a memoryview's own == compares element by element in Python."""
    if len(x) != len(y):
        return False
    word = 8 if len(x) % 8 == 0 else 1
    dt = np.uint64 if word == 8 else np.uint8
    return bool(np.array_equal(np.frombuffer(x, dt), np.frombuffer(y, dt)))


def _chunks(
    ta: TensorProto, base_a: str | None, tb: TensorProto, base_b: str | None, count: int
) -> Iterator[tuple[np.ndarray, np.ndarray, bool]]:
    """(a values, b values, bytes identical) per chunk, both sides aligned by element."""
    da, db = _plain_dtype(ta), _plain_dtype(tb)
    if da is None or db is None:
        va = np.asarray(to_array(ta, base_a)).reshape(-1)
        vb = np.asarray(to_array(tb, base_b)).reshape(-1)
        step = max(1, CHUNK_BYTES // max(va.itemsize, 1))
        for s in range(0, count, step):
            ca, cb = va[s : s + step], vb[s : s + step]
            same = ca.dtype == cb.dtype and ca.tobytes() == cb.tobytes()
            yield ca, cb, same
        return
    step = min(count, max(1, CHUNK_BYTES // max(da.itemsize, db.itemsize)))
    # Buffers only for data read from files; embedded bytes are sliced in place.
    buf_a = bytearray(step * da.itemsize if ta.data_location == TensorProto.EXTERNAL else 0)
    buf_b = bytearray(step * db.itemsize if tb.data_location == TensorProto.EXTERNAL else 0)
    src_a, src_b = _ByteSource(ta, base_a), _ByteSource(tb, base_b)
    try:
        for s in range(0, count, step):
            n = min(step, count - s)
            ra = src_a.read(s * da.itemsize, n * da.itemsize, buf_a)
            rb = src_b.read(s * db.itemsize, n * db.itemsize, buf_b)
            if len(ra) < n * da.itemsize or len(rb) < n * db.itemsize:
                raise ValueError("the data is shorter than the tensor's dims")
            same = da == db and _same_bytes(ra, rb)
            yield np.frombuffer(ra, da), np.frombuffer(rb, db), same
    finally:
        src_a.close()
        src_b.close()


def compare_tensors(
    ta: TensorProto,
    base_a: str | None,
    tb: TensorProto,
    base_b: str | None,
    graph: str = "main",
) -> TensorDiff:
    out = TensorDiff(
        as_text(ta.name),
        as_text(tb.name),
        graph,
        _dtype_name(ta),
        _dtype_name(tb),
        tuple(map(int, ta.dims)),
        tuple(map(int, tb.dims)),
    )
    if out.shape_a != out.shape_b:
        out.note = f"shape {describe_tensor(ta)} -> {describe_tensor(tb)}"
        return out
    count = math.prod(out.shape_a)
    if (
        ta.data_type == tb.data_type
        and ta.HasField("raw_data")
        and tb.HasField("raw_data")
        and ta.raw_data == tb.raw_data
    ):  # embedded and byte-identical: nothing to decode
        out.max_abs = out.max_rel = out.fraction_changed = 0.0
        return out
    try:
        _fill_stats(out, _chunks(ta, base_a, tb, base_b, count), count)
    except (OSError, ValueError, TypeError) as exc:
        out.note = f"values not compared: {exc}"
    except Exception as exc:  # a TensorDecodeError or ExternalDataError names the tensor
        out.note = f"values not compared: {getattr(exc, 'message', exc)}"
    return out


def _fill_stats(
    out: TensorDiff, chunks: Iterator[tuple[np.ndarray, np.ndarray, bool]], count: int
) -> None:
    max_abs = 0.0
    max_rel = 0.0
    changed = 0
    for ca, cb, same in chunks:
        if same:
            continue
        if ca.dtype.kind in "OUSb" or cb.dtype.kind in "OUSb":
            ne = np.asarray(ca != cb) if ca.dtype.kind != "b" else ca != cb
            n = int(np.count_nonzero(ne))
            changed += n
            if n:
                max_abs = max(max_abs, 1.0) if ca.dtype.kind == "b" else max_abs
            continue
        if ca.dtype.kind == "c" or cb.dtype.kind == "c":
            work: type = np.complex128
        elif ca.dtype == cb.dtype == np.float32:
            work = np.float32  # half the memory traffic of float64 on the common case
        else:
            work = np.float64
        fa: np.ndarray = ca.astype(work, copy=False)
        fb: np.ndarray = cb.astype(work, copy=False)
        with np.errstate(all="ignore"):
            diff = np.abs(fa - fb)
            nan = np.isnan(diff)
            if nan.any():
                both = np.isnan(fa) & np.isnan(fb)
                same_inf = np.isinf(fa) & (fa == fb)
                diff[both | same_inf] = 0
                diff[np.isnan(diff)] = np.inf
            m = float(diff.max()) if diff.size else 0.0
            if m > 0:
                changed += int(np.count_nonzero(diff))
                rel = diff / np.maximum(np.abs(fa), np.finfo(diff.dtype).tiny)
                max_rel = max(max_rel, float(rel.max()))
                max_abs = max(max_abs, m)
    out.max_abs = max_abs
    out.max_rel = max_rel
    out.fraction_changed = changed / count if count else 0.0
    if out.dtype_a != out.dtype_b:
        out.note = f"dtype {out.dtype_a} -> {out.dtype_b}"


def dequantized(
    q: TensorProto,
    scale: TensorProto,
    zero_point: TensorProto | None,
    axis: int,
    base_dir: str | None,
) -> np.ndarray:
    """The float values a DequantizeLinear makes of a quantized weight (per tensor or
    per axis; block quantization is left as stored)."""
    values = np.asarray(to_array(q, base_dir)).astype(np.float64)
    s = np.asarray(to_array(scale, base_dir)).astype(np.float64)
    zp = (
        np.asarray(to_array(zero_point, base_dir)).astype(np.float64)
        if zero_point is not None
        else 0.0
    )
    if s.ndim == 1 and values.ndim > 0 and s.size == values.shape[axis]:
        shape = [1] * values.ndim
        shape[axis] = s.size
        s = s.reshape(shape)
        zp = np.reshape(zp, shape) if np.ndim(zp) == 1 else zp
    elif s.ndim > 0 and s.size != 1:
        raise ValueError("blocked quantization is not compared")
    return (values - zp) * s.reshape(s.shape if s.ndim else ())


def compare_arrays(out: TensorDiff, va: np.ndarray, vb: np.ndarray) -> TensorDiff:
    """Fill ``out`` from two decoded arrays (dequantized weights)."""
    if va.shape != vb.shape:
        out.note = f"shape {list(va.shape)} -> {list(vb.shape)}"
        return out
    flat_a, flat_b = va.reshape(-1), vb.reshape(-1)
    _fill_stats(out, iter([(flat_a, flat_b, False)]), flat_a.size)
    return out
