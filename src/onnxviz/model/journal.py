"""A log of protobuf mutations that can be undone exactly.

Commands change the ModelProto only through a Journal, which remembers how to put
each field back.  Reverting replays the log backwards, so apply + revert gives a
byte-identical serialization.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message


class Journal:
    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def __len__(self) -> int:
        return len(self._undo)

    def set_scalar(self, msg: Message, name: str, value: Any) -> None:
        """Set a singular scalar field, remembering whether it was present."""
        had = msg.HasField(name)
        old = getattr(msg, name)
        setattr(msg, name, value)

        def undo() -> None:
            if had:
                setattr(msg, name, old)
            else:
                msg.ClearField(name)

        self._undo.append(undo)

    def set_message(self, msg: Message, name: str, value: Message | None) -> None:
        """Replace (or clear, with None) a singular message field."""
        had = msg.HasField(name)
        old = type(getattr(msg, name))()
        if had:
            old.CopyFrom(getattr(msg, name))
        if value is None:
            msg.ClearField(name)
        else:
            getattr(msg, name).CopyFrom(value)

        def undo() -> None:
            if had:
                getattr(msg, name).CopyFrom(old)
            else:
                msg.ClearField(name)

        self._undo.append(undo)

    def set_item(self, container: Any, index: int, value: Any) -> None:
        """Set one element of a repeated scalar field (node.input[i] = ...)."""
        old = container[index]
        container[index] = value

        def undo() -> None:
            container[index] = old

        self._undo.append(undo)

    def insert(self, container: Any, index: int, value: Any) -> None:
        """Insert into a repeated field (scalar or message; messages are copied in)."""
        if index >= len(container):
            index = len(container)
            if isinstance(value, Message):
                container.add().CopyFrom(value)
            else:
                container.append(value)
        else:
            container.insert(index, value)

        def undo() -> None:
            del container[index]

        self._undo.append(undo)

    def remove(self, container: Any, index: int) -> Any:
        """Remove one element of a repeated field; returns a copy of it."""
        item = container[index]
        if isinstance(item, Message):
            saved: Any = type(item)()
            saved.CopyFrom(item)
        else:
            saved = item
        del container[index]

        def undo() -> None:
            if index >= len(container):
                if isinstance(saved, Message):
                    container.add().CopyFrom(saved)
                else:
                    container.append(saved)
            else:
                container.insert(index, saved)

        self._undo.append(undo)
        return saved

    def replace_message(self, msg: Message, value: Message) -> None:
        """Overwrite a whole message in place (e.g. one AttributeProto)."""
        old = type(msg)()
        old.CopyFrom(msg)
        msg.CopyFrom(value)

        def undo() -> None:
            msg.CopyFrom(old)

        self._undo.append(undo)

    def on_undo(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when reverting (for side structures such as indexes)."""
        self._undo.append(fn)

    def revert(self) -> None:
        while self._undo:
            self._undo.pop()()
