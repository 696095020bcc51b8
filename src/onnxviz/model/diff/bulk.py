"""Checks over every matched node pair at once, for graphs of 100k nodes.

A graph diff asks the same questions of each matched pair: which values do their
outputs map to, which of their inputs are weights, does every input of A's node map
to B's input at the same slot.  Asked pair by pair in Python that is a loop of a few
microseconds per pair, several times over.  Here the inputs (or outputs) of all the
pairs are laid end to end in two flat lists, the per-name work is done by C-level
``map`` over dict lookups, and the per-pair answers gathered with numpy.  Pairs whose
lists differ in length are left out of the flat lists and answered False: the caller
looks at those one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain, compress, repeat
from operator import eq, is_not, ne

import numpy as np


class Flat:
    """The lists of each pair (node inputs or outputs) laid end to end."""

    def __init__(self, lists_a: Sequence[Sequence[str]], lists_b: Sequence[Sequence[str]]) -> None:
        lens_a = list(map(len, lists_a))
        lens_b = list(map(len, lists_b))
        self.count = len(lens_a)
        self.same_len = np.fromiter(map(eq, lens_a, lens_b), bool, self.count)
        if self.same_len.all():
            kept_a, kept_b, lens = lists_a, lists_b, lens_a
            self.pair_of = np.repeat(np.arange(self.count), lens_a)
        else:
            mask = self.same_len.tolist()
            kept_a = list(compress(lists_a, mask))
            kept_b = list(compress(lists_b, mask))
            lens = list(compress(lens_a, mask))
            self.pair_of = np.repeat(np.flatnonzero(self.same_len), lens)
        self.a: list[str] = list(chain.from_iterable(kept_a))
        self.b: list[str] = list(chain.from_iterable(kept_b))

    def agrees(self, mapping: dict[str, str]) -> np.ndarray:
        """Per pair: same length, and ``mapping[x] == y`` for every slot (an input
        left out, "", agrees with one left out)."""
        added = "" not in mapping
        if added:
            mapping[""] = ""
        try:
            mapped = map(mapping.get, self.a)
            bad = np.fromiter(map(ne, mapped, self.b), bool, len(self.a))
        finally:
            if added:
                del mapping[""]
        count = np.bincount(self.pair_of[bad], minlength=self.count)
        return self.same_len & (count == 0)

    def hits(self, lookup: Callable[[str], object]) -> list[tuple[int, object]]:
        """(flat position, found) for the names of A that ``lookup`` finds (not None)."""
        found = list(map(lookup, self.a))
        where = list(compress(range(len(found)), map(is_not, found, repeat(None))))
        return [(k, found[k]) for k in where]
