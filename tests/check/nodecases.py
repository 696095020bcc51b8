"""The onnx backend node test models, collected once per test session (collecting them
takes seconds)."""

from __future__ import annotations

from functools import lru_cache

import onnx
from onnx.backend.test.case.node import collect_testcases


@lru_cache(maxsize=1)
def node_models() -> tuple[tuple[str, onnx.ModelProto], ...]:
    return tuple((c.name, c.model) for c in collect_testcases() if c.model is not None)
