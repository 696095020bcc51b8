"""Bundled example models (resources/examples/, see onnxviz.bundled), so they work from an
installed wheel as well as from a source tree."""

from __future__ import annotations

from onnxviz import bundled

DEFAULT_EXAMPLE = "small_cnn.onnx"


def example_names() -> list[str]:
    folder = bundled.root() / "examples"
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".onnx"))


def example_path(name: str = DEFAULT_EXAMPLE) -> str:
    """A file system path to a bundled example (extracted if the package is zipped)."""
    return bundled.as_path("examples", name)
