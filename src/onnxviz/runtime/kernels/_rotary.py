"""Rotary position embedding in four numpy passes, shared by the rotary kernels
(RotaryEmbedding of ONNX and of com.microsoft, GroupQueryAttention's do_rotary).

Each rotated pair (x1, x2) becomes (x1*c - x2*s, x2*c + x1*s).  Written pair by pair that
is six products and sums over half-width strided views, plus the copies that put the
halves back together; a decoder runs it once or twice per layer and token on small
tensors, where each numpy call costs more than its arithmetic.  Here every dimension j
takes ``x[j] * C[j] + x[partner(j)] * S[j]``, with C each dimension's cos and S its
partner's sin signed as the rotation wants (-sin on the first of a pair): the same
products and sums as the pairwise formula (a - b is a + (-b) exactly), so the same
roundings, in four passes (two of them half-width) instead of eight.
"""

from __future__ import annotations

import numpy as np


def pair_tables(
    cos: np.ndarray, sin: np.ndarray, interleaved: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(C, S) [..., 2*half] from the cos and sin rows [..., half] of each position."""
    half = cos.shape[-1]
    if interleaved:
        big_c = np.repeat(cos, 2, axis=-1)
        big_s = np.stack([-sin, sin], axis=-1).reshape(*sin.shape[:-1], 2 * half)
    else:
        big_c = np.concatenate([cos, cos], axis=-1)
        big_s = np.concatenate([-sin, sin], axis=-1)
    return big_c, big_s


def rotate(x: np.ndarray, big_c: np.ndarray, big_s: np.ndarray, interleaved: bool) -> np.ndarray:
    """The rotated first ``rot`` dimensions of x [..., >= rot] as a fresh array
    [..., rot], with C, S [..., rot] (pair_tables) broadcasting against x."""
    rot = big_c.shape[-1]
    part = x[..., :rot]
    rotated = part * big_c
    # x[partner] * S as two products into the halves of one buffer (a gather of the
    # partners, np.take, cost more than the products on long prompts).
    crossed = np.empty_like(rotated)
    if interleaved:
        np.multiply(part[..., 1::2], big_s[..., 0::2], out=crossed[..., 0::2])
        np.multiply(part[..., 0::2], big_s[..., 1::2], out=crossed[..., 1::2])
    else:
        half = rot // 2
        np.multiply(part[..., half:], big_s[..., :half], out=crossed[..., :half])
        np.multiply(part[..., :half], big_s[..., half:], out=crossed[..., half:])
    rotated += crossed
    return rotated
