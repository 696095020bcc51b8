"""String kernels: ONNX node cases, onnxruntime comparisons and the documented behaviour
the cases miss."""

from __future__ import annotations

import numpy as np
import pytest

from onnxviz.errors import ExecutionError
from tests.runtime.datakernels_helpers import (
    STRING_OPS,
    assert_same,
    case_params,
    judge_case,
    run_ort,
    run_ours,
)

KNOWN_FAILURES: dict[str, str] = {}


def _strings(*items: str) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


@pytest.mark.parametrize("case", case_params(STRING_OPS, KNOWN_FAILURES))
def test_node_case(case: object) -> None:
    judge_case(case)


def test_string_normalizer_stopwords_and_case() -> None:
    # (onnxruntime needs an installed en_US locale for this op, so no comparison here.)
    x = _strings("The", "quick", "BROWN", "fox", "the")
    (low,) = run_ours("StringNormalizer", [x], 10, case_change_action="LOWER", stopwords=["the"])
    assert low.tolist() == ["quick", "brown", "fox"]
    (up,) = run_ours(
        "StringNormalizer",
        [x],
        10,
        case_change_action="UPPER",
        stopwords=["the"],
        is_case_sensitive=1,
    )
    assert up.tolist() == ["THE", "QUICK", "BROWN", "FOX"]
    assert run_ours("StringNormalizer", [x], 10)[0].tolist() == x.tolist()


def test_string_normalizer_all_removed_keeps_the_rank() -> None:
    x = _strings("a", "A").reshape(1, 2)
    (y,) = run_ours("StringNormalizer", [x], 10, stopwords=["a"])
    assert y.shape == (1, 1) and y.tolist() == [[""]]
    (z,) = run_ours("StringNormalizer", [x.reshape(2)], 10, stopwords=["a"])
    assert z.shape == (1,)


def test_regex_full_match_is_a_full_match_with_python_re() -> None:
    x = _strings("abc123", "abc", "123abc", "").reshape(2, 2)
    (y,) = run_ours("RegexFullMatch", [x], 20, pattern=r"[a-z]+\d*")
    assert y.dtype == np.bool_ and y.tolist() == [[True, True], [False, False]]
    # Python re accepts look-around, which RE2 (the spec's engine) would reject.
    (look,) = run_ours("RegexFullMatch", [_strings("ab", "ac")], 20, pattern=r"a(?=b)b")
    assert look.tolist() == [True, False]
    with pytest.raises(ExecutionError):
        run_ours("RegexFullMatch", [x], 20, pattern="(unclosed")


def test_regex_re2_only_spellings_are_translated() -> None:
    x = _strings("a.b*", "axb*", "ab")
    (quoted,) = run_ours("RegexFullMatch", [x], 20, pattern=r"\Qa.b*\E")
    assert quoted.tolist() == [True, False, False]
    (end,) = run_ours("RegexFullMatch", [x], 20, pattern=r"a.*\z")
    assert end.tolist() == [True, True, True]
    (escaped,) = run_ours("RegexFullMatch", [_strings("a\\z")], 20, pattern=r"a\\z")
    assert escaped.tolist() == [True]  # an escaped backslash followed by z stays literal


def test_string_split_delimiters_and_maxsplit() -> None:
    x = _strings("a,,b", "  lead  trail ", "")
    parts, counts = run_ours("StringSplit", [x], 20, n_outputs=2, delimiter=",")
    assert parts.tolist() == [["a", "", "b"], ["  lead  trail ", "", ""], ["", "", ""]]
    assert counts.tolist() == [3, 1, 1] and counts.dtype == np.int64
    parts, counts = run_ours("StringSplit", [x], 20, n_outputs=2)
    assert parts.tolist() == [["a,,b", ""], ["lead", "trail"], ["", ""]]
    assert counts.tolist() == [1, 2, 0]
    parts, counts = run_ours("StringSplit", [_strings("a b c d")], 20, n_outputs=2, maxsplit=2)
    assert parts.tolist() == [["a", "b", "c d"]] and counts.tolist() == [3]
    # Trailing whitespace is removed even from the unsplit remainder (the spec; onnxruntime
    # agrees, Python's str.split would keep it).
    parts, _ = run_ours("StringSplit", [_strings(" a  b c  ")], 20, n_outputs=2, maxsplit=1)
    assert parts.tolist() == [["a", "b c"]]


def test_string_concat_broadcasts() -> None:
    (z,) = run_ours("StringConcat", [_strings("a", "b").reshape(2, 1), _strings("x", "y", "z")], 20)
    assert z.shape == (2, 3) and z[1, 2] == "bz"


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
def test_tfidf_against_onnxruntime(mode: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 6, (3, 12)).astype(np.int64)
    kw = {
        "mode": mode,
        "min_gram_length": 1,
        "max_gram_length": 3,
        "max_skip_count": 2,
        # 4 unigrams, 3 bigrams, 2 trigrams; output slots shuffled.
        "ngram_counts": [0, 4, 10],
        "ngram_indexes": [3, 0, 1, 2, 8, 4, 5, 7, 6],
        "pool_int64s": [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 1, 2, 3, 5, 5, 0],
        "weights": [0.5, 1.0, 1.5, 2.0, 1.0, 2.0, 3.0, 4.0, 0.1],
    }
    assert_same(
        run_ours("TfIdfVectorizer", [x], 9, **kw)[0], run_ort("TfIdfVectorizer", [x], 9, **kw)[0]
    )
    assert_same(
        run_ours("TfIdfVectorizer", [x[0]], 9, **kw)[0],
        run_ort("TfIdfVectorizer", [x[0]], 9, **kw)[0],
    )


def test_split_concat_regex_against_onnxruntime() -> None:
    # (onnxruntime counts 0 substrings for "" split on a delimiter; the spec's rule that
    # delimiters delimit empty strings gives 1, as onnx.reference does: no "" here.)
    x = _strings("a,,b", "  lead  trail ", "x,y,z,w", ",", "a b  c ")
    for kw in ({"delimiter": ","}, {}, {"delimiter": ",", "maxsplit": 1}, {"maxsplit": 1}):
        ours = run_ours("StringSplit", [x], 20, n_outputs=2, **kw)
        theirs = run_ort("StringSplit", [x], 20, n_outputs=2, **kw)
        assert ours[0].tolist() == theirs[0].tolist()
        assert_same(ours[1], theirs[1])
    a, b = _strings("a", "b").reshape(2, 1), _strings("x", "y", "z")
    assert_same(run_ours("StringConcat", [a, b], 20)[0], run_ort("StringConcat", [a, b], 20)[0])
    words = _strings("abc123", "abc", "123abc", "", "A1")
    for pattern in (r"[a-z]+\d*", r"(?i)a\d", r".*", r"\Qabc\E"):
        assert_same(
            run_ours("RegexFullMatch", [words], 20, pattern=pattern)[0],
            run_ort("RegexFullMatch", [words], 20, pattern=pattern)[0],
        )
