"""Text of ONNX string fields that may not be UTF-8.

The IR spec says strings are UTF-8, but proto2 ``string`` fields can hold any bytes, and
protobuf then hands Python ``bytes`` instead of ``str`` (a mutated or hand-made file: a
node name, a metadata key, a doc string).  The ModelProto keeps those bytes untouched, so
an unedited save gives them back; everything that shows or prints a string goes through
`as_text`, a lossless escaped form (``b"N\\xff"`` -> ``"N\\\\xff"``).
"""

from __future__ import annotations

from typing import Any


def as_text(value: str | bytes) -> str:
    """A string field as text: invalid UTF-8 bytes written as ``\\xNN`` escapes."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return value


def jsonable(value: Any) -> Any:
    """``value`` with every bytes key or string in it made text (`as_text`), for JSON."""
    if isinstance(value, bytes):
        return as_text(value)
    if isinstance(value, dict):
        return {as_text(k) if isinstance(k, bytes) else k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value
