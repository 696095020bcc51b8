"""The full-run screens (onnxviz.check.fastpath) never hide a diagnostic: a screened run
and an unscreened one agree on the rule cases, the node test models and their mutants."""

from __future__ import annotations

import random

import onnx
import pytest

from onnxviz.check import validate
from tests.check.cases import CASES
from tests.check.conftest import LooseDoc
from tests.check.nodecases import node_models
from tests.check.test_corpus import _mutants


def _both(m: onnx.ModelProto) -> tuple[list[str], list[str]]:
    from onnxviz.check import fastpath

    screened = [str(d) for d in validate(LooseDoc(m))]
    fastpath.ENABLED = False
    try:
        full = [str(d) for d in validate(LooseDoc(m))]
    finally:
        fastpath.ENABLED = True
    return screened, full


@pytest.mark.parametrize("code", sorted(CASES))
def test_rule_cases(code: str) -> None:
    for bad in (True, False):
        screened, full = _both(CASES[code](bad))
        assert screened == full


def test_node_models_and_mutants() -> None:
    rng = random.Random(11)
    for name, m in rng.sample(node_models(), 30):
        screened, full = _both(m)
        assert screened == full, name
        for label, bad in _mutants(m, rng):
            screened, full = _both(bad)
            assert screened == full, (name, label)
