"""Helpers of the validator tests: `LooseDoc` (a bare ModelProto to validate, no loader)
and the `no_screens` fixture (full runs without fastpath's screens, to compare both)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from onnx import ModelProto

from onnxviz.model.scopes import GraphScope, build_scopes


class LooseDoc:
    """A document without a loader: validate() on a bare ModelProto (no D1xx from the
    loader, so rules it would otherwise leave to the loader show)."""

    def __init__(self, model: ModelProto) -> None:
        self.model = model
        self.diagnostics: list[Any] = []
        self.revision = 0
        self.path: str | None = None
        self.base_dir: str | None = None
        self.source_format = "protobuf"
        self._scopes: list[GraphScope] | None = None

    def unedited_bytes(self) -> bytes | None:
        return None  # no file: the validator serializes the model

    def unedited_file(self) -> tuple[str, tuple[int, int, int]] | None:
        return None

    def model_bytes(self) -> bytes | None:
        return None  # the validator serializes the model itself

    def scopes(self) -> list[GraphScope]:
        if self._scopes is None:
            self._scopes = build_scopes(self.model)
        return self._scopes


@pytest.fixture
def no_screens() -> Iterator[None]:
    from onnxviz.check import fastpath

    fastpath.ENABLED = False
    try:
        yield
    finally:
        fastpath.ENABLED = True
