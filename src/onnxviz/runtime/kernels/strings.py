"""String kernels: StringNormalizer, RegexFullMatch, StringSplit, StringConcat,
TfIdfVectorizer.

String tensors are object arrays of ``str``; per-string work is inherently a Python
loop over the elements (numpy has no vectorised string kernels for object arrays).

RegexFullMatch uses Python's ``re`` instead of RE2, after translating the two RE2-only
spellings that have a Python equivalent: ``\\z`` (end of text, Python ``\\Z``) and
``\\Q...\\E`` (literal text, escaped here).  Remaining differences: RE2 has no
backreferences or look-around (``re`` accepts them, so patterns RE2 would reject run
here); RE2 guarantees linear time while ``re`` can backtrack exponentially on
pathological patterns; RE2's ``\\pN`` / ``\\p{Greek}`` Unicode classes and ``\\C``
do not exist in ``re`` (such patterns fail with a clear error); POSIX classes like
``[[:alpha:]]`` are not understood by ``re``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from onnxviz.runtime.kernels._tensor_common import fail
from onnxviz.runtime.registry import kernel


def _object_array(items: list[str], shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


@kernel("StringNormalizer", since=10)
def string_normalizer(
    data: np.ndarray,
    case_change_action: str = "NONE",
    is_case_sensitive: int = 0,
    locale: str | None = None,
    stopwords: list[str] | None = None,
) -> np.ndarray:
    # locale: Python's str.lower/upper are locale independent (full Unicode case mapping).
    del locale
    if data.ndim == 2 and data.shape[0] != 1 or data.ndim not in (1, 2):
        fail(f"StringNormalizer: input must be [C] or [1, C], got {list(data.shape)}")
    words = [str(w) for w in data.reshape(-1).tolist()]
    if stopwords:
        if is_case_sensitive:
            stop = set(stopwords)
            words = [w for w in words if w not in stop]
        else:
            stop = {s.casefold() for s in stopwords}
            words = [w for w in words if w.casefold() not in stop]
    if case_change_action == "LOWER":
        words = [w.lower() for w in words]
    elif case_change_action == "UPPER":
        words = [w.upper() for w in words]
    elif case_change_action != "NONE":
        fail(f"StringNormalizer: unknown case_change_action {case_change_action!r}")
    if not words:
        words = [""]
    shape = (len(words),) if data.ndim == 1 else (1, len(words))
    return _object_array(words, shape)


def re2_to_python(pattern: str) -> str:
    """Rewrite RE2's ``\\z`` and ``\\Q...\\E`` into Python ``re`` syntax."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch != "\\" or i + 1 == len(pattern):
            out.append(ch)
            i += 1
            continue
        nxt = pattern[i + 1]
        if nxt == "z":
            out.append("\\Z")
            i += 2
        elif nxt == "Q":
            end = pattern.find("\\E", i + 2)
            stop = len(pattern) if end < 0 else end
            out.append(re.escape(pattern[i + 2 : stop]))
            i = stop if end < 0 else end + 2
        else:
            out.append(pattern[i : i + 2])  # any other escape is kept as written
            i += 2
    return "".join(out)


@kernel("RegexFullMatch", since=20)
def regex_full_match(data: np.ndarray, pattern: str | None = None) -> np.ndarray:
    if pattern is None:
        fail("RegexFullMatch: the pattern attribute is required")
    try:
        regex = re.compile(re2_to_python(pattern))
    except re.error as exc:
        fail(f"RegexFullMatch: invalid pattern {pattern!r}: {exc}")
    flat = [regex.fullmatch(str(s)) is not None for s in data.reshape(-1).tolist()]
    return np.array(flat, dtype=bool).reshape(data.shape)


@kernel("StringSplit", since=20)
def string_split(
    data: np.ndarray, delimiter: str | None = None, maxsplit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    limit = -1 if maxsplit is None else maxsplit
    strings = [str(s) for s in data.reshape(-1).tolist()]
    if delimiter:
        parts = [s.split(delimiter, limit) for s in strings]
    else:
        # Runs of whitespace separate; leading AND trailing whitespace never reach the
        # output (also after the last allowed split, unlike Python's str.split).
        parts = [s.strip().split(None, limit) for s in strings]
    counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(data.shape)
    width = int(counts.max()) if counts.size else 0
    padded = [p + [""] * (width - len(p)) for p in parts]
    flat = [s for row in padded for s in row]
    return _object_array(flat, (*data.shape, width)), counts


@kernel("StringConcat", since=20)
def string_concat(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    try:
        shape = np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        fail(f"StringConcat: shapes {list(x.shape)} and {list(y.shape)} do not broadcast")
    xs = np.broadcast_to(x, shape).reshape(-1).tolist()
    ys = np.broadcast_to(y, shape).reshape(-1).tolist()
    return _object_array([str(a) + str(b) for a, b in zip(xs, ys)], shape)


def _ngram_table(
    pool: list[Any], ngram_counts: list[int], ngram_indexes: list[int]
) -> dict[int, dict[tuple[Any, ...], int]]:
    """n -> {n-gram tuple: pool position}; pool position i maps to output ngram_indexes[i]."""
    table: dict[int, dict[tuple[Any, ...], int]] = {}
    bounds = [*ngram_counts, len(pool)]
    pos = 0
    for level, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:]), start=1):
        entries = table.setdefault(level, {})
        for offset in range(start, stop, level):
            entries[tuple(pool[offset : offset + level])] = pos
            pos += 1
    if pos != len(ngram_indexes):
        fail(f"TfIdfVectorizer: {pos} n-grams in the pool but {len(ngram_indexes)} ngram_indexes")
    return table


@kernel("TfIdfVectorizer", since=9)
def tfidf_vectorizer(
    data: np.ndarray,
    max_gram_length: int,
    min_gram_length: int,
    max_skip_count: int,
    mode: str,
    ngram_counts: list[int],
    ngram_indexes: list[int],
    pool_int64s: list[int] | None = None,
    pool_strings: list[str] | None = None,
    weights: list[float] | None = None,
) -> np.ndarray:
    if (pool_int64s is None) == (pool_strings is None):
        fail("TfIdfVectorizer: exactly one of pool_int64s and pool_strings is required")
    pool: list[Any] = list(pool_int64s if pool_int64s is not None else pool_strings or [])
    if mode not in ("TF", "IDF", "TFIDF"):
        fail(f"TfIdfVectorizer: unknown mode {mode!r}")
    table = _ngram_table(pool, ngram_counts, ngram_indexes)
    out_index = np.asarray(ngram_indexes, dtype=np.int64)
    width = int(out_index.max()) + 1 if out_index.size else 0
    rows = data.reshape(1, -1) if data.ndim == 1 else data
    if rows.ndim != 2:
        fail(f"TfIdfVectorizer: input must be [C] or [N, C], got {list(data.shape)}")
    counts = np.zeros((rows.shape[0], len(ngram_indexes)), dtype=np.float32)
    for r, row in enumerate(rows.tolist()):
        tokens = [str(t) for t in row] if pool_strings is not None else [int(t) for t in row]
        c = len(tokens)
        for n in range(max(min_gram_length, 1), max_gram_length + 1):
            entries = table.get(n)
            if not entries:
                continue
            # Unigrams ignore skips (one count per token); longer grams try every skip.
            for skip in range(max_skip_count + 1 if n > 1 else 1):
                stride = skip + 1
                for i in range(c - (n - 1) * stride):
                    hit = entries.get(tuple(tokens[i : i + (n - 1) * stride + 1 : stride]))
                    if hit is not None:
                        counts[r, hit] += 1
    w = (
        np.ones(len(ngram_indexes), np.float32)
        if weights is None
        else np.asarray(weights, np.float32)
    )
    if mode == "IDF":
        counts = (counts > 0).astype(np.float32) * w
    elif mode == "TFIDF":
        counts = counts * w
    out = np.zeros((rows.shape[0], width), dtype=np.float32)
    out[:, out_index] = counts
    return out.reshape(width) if data.ndim == 1 else out
