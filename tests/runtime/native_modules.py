"""The compiled module a native kernel's tests prove: built wherever this machine can
compile (test_native checks the build), so a missing one fails there and is skipped
only where no C compiler or Python headers are (the numpy paths then run)."""

from __future__ import annotations

import importlib
import os
import shutil
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from onnxviz.runtime import native, registry


def can_compile() -> bool:
    headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    return shutil.which("cc") is not None and os.path.exists(headers)


def compiled(name: str, without: str = "the numpy paths run") -> ModuleType:
    """``onnxviz.runtime.native._<name>`` (whatever ONNXVIZ_NATIVE says), or the test
    fails (a compiler is here) or is skipped (none: ``without`` says what runs)."""
    if not native.built(name):
        if can_compile():
            pytest.fail(f"a C compiler is here but _{name} was not built")
        pytest.skip(f"no C compiler here: {without}")
    return importlib.import_module(f"onnxviz.runtime.native._{name}")


@contextmanager
def at_level(name: str, level: int | None) -> Iterator[None]:
    """native.load answers at ``level`` (None: the kernels are off) inside the block; then
    the process's level again, ``_<name>`` set back to it."""
    # Kernel modules take their compiled module when first imported (native.load at
    # import: nn_rnn's _RECURRENT, row_norm's _NORM, ...): import them all at the
    # process's level first, so a block at None never leaves one without its kernel for
    # the rest of the process (the recurrent layers' tests then failed, by test order).
    registry.load_all_kernels()
    saved = native._LEVEL
    native._LEVEL = level
    try:
        yield
    finally:
        native._LEVEL = saved
        if saved is not None and native.built(name):
            importlib.import_module(f"onnxviz.runtime.native._{name}").set_level(saved)


class CountingAttend:
    """native/_gqa.c's module, counting its `attend` calls (so a test knows which path ran:
    GroupQueryAttention's, Attention's and MultiHeadAttention's compiled core)."""

    def __init__(self, module: Any) -> None:
        self.module, self.calls = module, 0

    def level(self) -> int:
        return int(self.module.level())

    def attend(self, *args: Any) -> None:
        self.calls += 1
        self.module.attend(*args)


def compiled_silu(y: np.ndarray) -> np.ndarray:
    """y * sigmoid(y) by the compiled float32 sigmoid (vector_math.h's: the chain
    module's, which the Sigmoid kernel runs when the kernels are on, the same bits at
    every level), whatever ONNXVIZ_NATIVE says: what a conv kernel's SiLU epilogue gives
    when a test runs that kernel itself."""
    from onnxviz.runtime.kernels import chain_program

    y = np.ascontiguousarray(y, dtype=np.float32)
    g = np.empty_like(y)
    if y.size:
        one = chain_program.program([("Sigmoid", chain_program.NONE, True, 0.0)])
        compiled("chain").run(y.reshape(-1), g.reshape(-1), one)
    return y * g
