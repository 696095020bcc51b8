"""onnxviz: explore, edit, validate and debug ONNX models.

The small, stable Python facade (docs/architecture.md §9)::

    doc = onnxviz.open_model(path)
    onnxviz.validate(doc)
    onnxviz.Session(doc).run(feeds)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from onnxviz.model.document import Document


def open_model(path: str) -> Document:
    import onnxviz.check  # noqa: F401  (hands graph surgery its shape inference)
    from onnxviz.model.document import Document

    return Document.open(path)


def validate(doc: Document, **kwargs: Any) -> list[Any]:
    from onnxviz.check import validate as _validate

    return _validate(doc, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "Session":
        from onnxviz.runtime.session import Session

        return Session
    raise AttributeError(name)
