"""A log of protobuf mutations that can be undone exactly.

Commands change the ModelProto only through a Journal, which remembers how to put
each field back.  Reverting replays the log backwards, so apply + revert gives a
byte-identical serialization.

Every entry names its target with a *ref*: a zero-argument function that finds the
message or repeated field from the document's root each time it is called.  Holding
the protobuf object itself is not safe: when a later command removes a node and its
undo inserts it back, the node is a new copy, and an object held by an earlier entry
would point at the detached original (undoing it would change nothing).  Reverts run
in exact reverse order, so a ref always resolves in the same structure it was
recorded in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message

Ref = Callable[[], Any]


def attr_ref(ref: Ref, name: str) -> Ref:
    """A field of what ``ref`` finds."""
    return lambda: getattr(ref(), name)


def item_ref(ref: Ref, index: int) -> Ref:
    """Element ``index`` of the repeated field ``ref`` finds."""
    return lambda: ref()[index]


class Journal:
    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def __len__(self) -> int:
        return len(self._undo)

    def set_scalar(self, msg: Ref, name: str, value: Any) -> None:
        """Set a singular scalar field, remembering whether it was present."""
        target = msg()
        had = target.HasField(name)
        old = getattr(target, name)
        setattr(target, name, value)

        def undo() -> None:
            m = msg()
            if had:
                setattr(m, name, old)
            else:
                m.ClearField(name)

        self._undo.append(undo)

    def set_message(self, msg: Ref, name: str, value: Message | None) -> None:
        """Replace (or clear, with None) a singular message field."""
        target = msg()
        had = target.HasField(name)
        old = type(getattr(target, name))()
        if had:
            old.CopyFrom(getattr(target, name))
        if value is None:
            target.ClearField(name)
        else:
            getattr(target, name).CopyFrom(value)

        def undo() -> None:
            m = msg()
            if had:
                getattr(m, name).CopyFrom(old)
            else:
                m.ClearField(name)

        self._undo.append(undo)

    def set_item(self, container: Ref, index: int, value: Any) -> None:
        """Set one element of a repeated scalar field (node.input[i] = ...)."""
        target = container()
        old = target[index]
        target[index] = value

        def undo() -> None:
            container()[index] = old

        self._undo.append(undo)

    def insert(self, container: Ref, index: int, value: Any) -> None:
        """Insert into a repeated field (scalar or message; messages are copied in)."""
        target = container()
        if index >= len(target):
            index = len(target)
            if isinstance(value, Message):
                target.add().CopyFrom(value)
            else:
                target.append(value)
        else:
            target.insert(index, value)

        def undo() -> None:
            del container()[index]

        self._undo.append(undo)

    def remove(self, container: Ref, index: int) -> Any:
        """Remove one element of a repeated field; returns a copy of it."""
        target = container()
        item = target[index]
        if isinstance(item, Message):
            saved: Any = type(item)()
            saved.CopyFrom(item)
        else:
            saved = item
        del target[index]

        def undo() -> None:
            c = container()
            if index >= len(c):
                if isinstance(saved, Message):
                    c.add().CopyFrom(saved)
                else:
                    c.append(saved)
            else:
                c.insert(index, saved)

        self._undo.append(undo)
        return saved

    def replace_message(self, msg: Ref, value: Message) -> None:
        """Overwrite a whole message in place (e.g. one AttributeProto)."""
        target = msg()
        old = type(target)()
        old.CopyFrom(target)
        target.CopyFrom(value)

        def undo() -> None:
            msg().CopyFrom(old)

        self._undo.append(undo)

    def on_undo(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when reverting (for side structures such as indexes)."""
        self._undo.append(fn)

    def revert(self) -> None:
        while self._undo:
            self._undo.pop()()
