"""Validation targets: what a model is checked against.

* ``onnx`` (the default): the ONNX spec, strictly.  An operator only onnxruntime provides
  is still reported (O020 in the default domain, O021 in onnxruntime's own domains),
  saying onnxruntime runs it but the model is not portable.
* ``onnxruntime``: the spec plus onnxruntime's extensions.  Its default-domain
  extensions are accepted (O020 as an info) and every node of a domain onnxruntime
  defines is checked against onnxruntime's own schema (`onnxruntime_ops`), like ONNX
  nodes against ONNX's; an operator onnxruntime does not have there is O022.

`validate(doc, target=...)` sets the target for the rules of one run (`using_target`);
the rules read it with `current_target()`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Literal

Target = Literal["onnx", "onnxruntime"]
TARGETS: tuple[Target, ...] = ("onnx", "onnxruntime")
DEFAULT_TARGET: Target = "onnx"
# What a chooser (the GUI's) shows for each target.
TARGET_LABELS: dict[Target, str] = {
    "onnx": "ONNX spec (strict, portable)",
    "onnxruntime": "onnxruntime (its extensions and contrib operators)",
}

_CURRENT: contextvars.ContextVar[Target] = contextvars.ContextVar(
    "onnxviz_check_target", default=DEFAULT_TARGET
)


def current_target() -> Target:
    return _CURRENT.get()


def check_target(target: str) -> Target:
    """``target`` if it is one we know, else ValueError naming the choices."""
    if target not in TARGETS:
        raise ValueError(f"unknown validation target '{target}' (choose {' or '.join(TARGETS)})")
    return target  # type: ignore[return-value]


@contextlib.contextmanager
def using_target(target: str) -> Iterator[Target]:
    token = _CURRENT.set(check_target(target))
    try:
        yield _CURRENT.get()
    finally:
        _CURRENT.reset(token)
