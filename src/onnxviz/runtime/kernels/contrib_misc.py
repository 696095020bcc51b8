"""com.microsoft CDist (skl2onnx nearest-neighbour models with the "cdist" option) and
MurmurHash3 (skl2onnx FeatureHasher / HashingVectorizer)."""

from __future__ import annotations

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.registry import kernel

MS = "com.microsoft"


@kernel("CDist", domain=MS, since=1)
def cdist(a: np.ndarray, b: np.ndarray, *, metric: str = "sqeuclidean") -> np.ndarray:
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ExecutionError(f"CDist: needs [M, N] and [K, N] matrices, got {a.shape}, {b.shape}")
    if metric not in ("sqeuclidean", "euclidean"):
        raise ExecutionError(f"CDist: metric '{metric}' is not supported")
    wide = np.float64
    aa, bb = a.astype(wide), b.astype(wide)
    # |a|^2 - 2 a.b + |b|^2 through BLAS; clipped at 0 against rounding.
    sq = (aa * aa).sum(axis=1)[:, None] - 2.0 * (aa @ bb.T) + (bb * bb).sum(axis=1)[None, :]
    sq = np.maximum(sq, 0.0)
    out = np.sqrt(sq) if metric == "euclidean" else sq
    return out.astype(a.dtype)


_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def murmur3_blocks(blocks: np.ndarray, seed: int) -> np.ndarray:
    """MurmurHash3_x86_32 of keys made of whole 4-byte blocks: blocks is uint32 [n, k]."""
    h = np.full(blocks.shape[0], seed & 0xFFFFFFFF, dtype=np.uint32)
    with np.errstate(over="ignore"):
        for j in range(blocks.shape[1]):  # over the 1 or 2 words of a key, not elements
            k = blocks[:, j] * _C1
            k = _rotl(k, 15) * _C2
            h = h ^ k
            h = _rotl(h, 13) * np.uint32(5) + np.uint32(0xE6546B64)
        h = h ^ np.uint32(4 * blocks.shape[1])
        return _fmix(h)


def murmur3_bytes(data: bytes, seed: int) -> int:
    """MurmurHash3_x86_32 of one byte string (strings are hashed one distinct value at a
    time; their lengths differ)."""
    n = len(data)
    full = n // 4
    words = np.frombuffer(data[: full * 4], dtype="<u4").reshape(1, -1)
    h = np.array([seed & 0xFFFFFFFF], dtype=np.uint32)
    with np.errstate(over="ignore"):
        for j in range(full):
            k = words[:, j] * _C1
            k = _rotl(k, 15) * _C2
            h = h ^ k
            h = _rotl(h, 13) * np.uint32(5) + np.uint32(0xE6546B64)
        tail = data[full * 4 :]
        if tail:
            k1 = np.array([int.from_bytes(tail, "little")], dtype=np.uint32)
            k1 = _rotl(k1 * _C1, 15) * _C2
            h = h ^ k1
        h = h ^ np.uint32(n & 0xFFFFFFFF)
        return int(_fmix(h)[0])


@kernel("MurmurHash3", domain=MS, since=1)
def murmur_hash3(x: np.ndarray, *, positive: int = 1, seed: int = 0) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype == object or x.dtype.kind == "U":
        uniq, inverse = np.unique(x.ravel().astype(str), return_inverse=True)
        hashes = np.array(
            [murmur3_bytes(s.encode("utf-8"), seed) for s in uniq.tolist()], dtype=np.uint32
        )
        out = hashes[inverse.reshape(-1)].reshape(x.shape)
    elif x.dtype.itemsize in (4, 8) and x.dtype.kind in "iuf":
        words = np.ascontiguousarray(x).reshape(-1).view("<u4").reshape(x.size, -1)
        out = murmur3_blocks(words, seed).reshape(x.shape)
    else:
        raise ExecutionError(f"MurmurHash3: unsupported input type {x.dtype}")
    return out if positive else out.view(np.int32)
