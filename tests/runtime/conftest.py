"""Kernel tests draw their inputs from a module-level numpy Generator; pytest-xdist
spreads tests over workers differently from run to run, so without this each test's
inputs would depend on which tests ran before it in the same process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

_FIRST_STATE: dict[tuple[str, str], Any] = {}


@pytest.fixture(autouse=True)
def _module_generators_start_alike(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every module-level Generator (RNG, rng, _RNG) is put back, before each test, to
    the state it had before the module's first test ran."""
    module = request.module
    for attr in ("RNG", "rng", "_RNG"):
        gen = getattr(module, attr, None)
        if not isinstance(gen, np.random.Generator):
            continue
        key = (module.__name__, attr)
        if key not in _FIRST_STATE:
            _FIRST_STATE[key] = gen.bit_generator.state
        gen.bit_generator.state = _FIRST_STATE[key]
    yield
