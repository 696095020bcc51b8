"""com.microsoft Tokenizer (skl2onnx text pipelines).

onnxruntime matches with RE2 in leftmost-longest mode; Python's ``re`` is leftmost-first.
The two agree for the patterns exporters produce (word character classes, literal or
whitespace separators).  Each distinct input string is tokenised once."""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.registry import kernel

MS = "com.microsoft"
START, END = "\x02", "\x03"


@lru_cache(maxsize=64)
def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ExecutionError(f"Tokenizer: cannot compile '{pattern}': {exc}") from None


def _split_by(text: str, sep: re.Pattern[str], mincharnum: int) -> list[str]:
    """The pieces between separator matches that are at least mincharnum long."""
    tokens = []
    start = 0
    n = len(text)
    while True:
        m = sep.search(text, start) if start <= n else None
        if m is None:
            if n - start >= mincharnum:
                tokens.append(text[start:])
            return tokens
        if m.start() - start >= mincharnum:
            tokens.append(text[start : m.start()])
        # An empty separator match still moves on by one character.
        start = m.end() if m.end() > m.start() else m.start() + 1


def _tokens_by_expression(text: str, expr: re.Pattern[str], mincharnum: int) -> list[str]:
    tokens = []
    pos = 0
    while pos <= len(text):
        m = expr.search(text, pos)
        if m is None:
            break
        if len(m.group(0)) >= mincharnum:
            tokens.append(m.group(0))
            pos = m.end()
        else:
            pos = m.start() + 1
    return tokens


@kernel("Tokenizer", domain=MS, since=1)
def tokenizer(
    x: np.ndarray,
    *,
    mark: int,
    pad_value: str,
    mincharnum: int,
    separators: list[str] | None = None,
    tokenexp: str | None = None,
) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim not in (1, 2):
        raise ExecutionError("Tokenizer: input must be [C] or [N, C]")
    if mincharnum < 1:
        raise ExecutionError("Tokenizer: mincharnum must be positive")
    if x.size == 0:
        return np.empty((*x.shape[:-1], 0) if x.ndim == 2 else (0,), dtype=object)
    if separators:
        char_mode = len(separators) == 1 and separators[0] == ""
    elif tokenexp:
        char_mode = tokenexp == "."
    else:
        raise ExecutionError("Tokenizer: one of separators / tokenexp is required")
    if char_mode and mincharnum > 1:
        raise ExecutionError("Tokenizer: mincharnum is too big for character tokenization")

    uniq, inverse = np.unique(x.ravel().astype(str), return_inverse=True)
    rows: list[list[str]] = []
    for text in uniq.tolist():  # once per distinct string
        if char_mode:
            rows.append(list(text))
        elif separators:
            parts = [text]
            for sep in separators:
                pattern = _compile(sep)
                parts = [t for p in parts for t in _split_by(p, pattern, mincharnum)]
            rows.append(parts)
        else:
            assert tokenexp is not None
            rows.append(_tokens_by_expression(text, _compile(tokenexp), mincharnum))
    width = max(len(r) for r in rows)
    if width == 0:
        return np.empty((*x.shape, 0), dtype=object)
    full = width + (2 if mark else 0)
    table = np.full((len(rows), full), pad_value, dtype=object)
    for i, row in enumerate(rows):
        cells = [START, *row, END] if mark else row
        table[i, : len(cells)] = cells
    return table[inverse.reshape(-1)].reshape(*x.shape, full)
