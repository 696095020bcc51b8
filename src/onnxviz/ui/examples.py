"""Bundled example models, found through importlib.resources so they work from an
installed wheel as well as from a source tree."""

from __future__ import annotations

import atexit
import contextlib
from importlib import resources

DEFAULT_EXAMPLE = "small_cnn.onnx"
_stack = contextlib.ExitStack()
atexit.register(_stack.close)


def example_names() -> list[str]:
    folder = resources.files("onnxviz.resources") / "examples"
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".onnx"))


def example_path(name: str = DEFAULT_EXAMPLE) -> str:
    """A file system path to a bundled example (extracted if the package is zipped)."""
    ref = resources.files("onnxviz.resources") / "examples" / name
    return str(_stack.enter_context(resources.as_file(ref)))
