"""A ModelProto's protobuf bytes built from many small serializations instead of one.

``SerializeToString`` holds the GIL for the whole walk: 20-60 ms at 100k nodes (and
``ByteSize``, often asked first, as long again).  A background thread serializing a big
model for a worker process therefore stopped the UI thread for that long.  Here the
model, its graphs and its functions are taken apart field by field, and the elements of
their repeated message fields (nodes, initializers, value infos...) are serialized a
batch at a time: the GIL can change hands between any two batches, so another thread
waits a fraction of a millisecond.

The bytes parse to the same message, and as protobuf writes known fields in field-number
order, they are the same bytes as ``SerializeToString`` gives (tested on real models).  A
message that carries fields this protobuf does not know is serialized in one call: where
its unknown fields would go is protobuf's business.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import unknown_fields
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from onnx import FunctionProto, GraphProto, ModelProto, NodeProto, ValueInfoProto

MAX_PROTO = 2**31 - 1  # protobuf's limit for one message: the worker could not parse more

# Messages whose fields are serialized one by one: the containers of many nodes.
_CONTAINERS = (ModelProto, GraphProto, FunctionProto)
# Nodes and value infos go in batches of `_BATCH` (one serialization of a message holding
# only them, copied in), about 0.2 ms each: one call per node costs more in Python than
# its serialization.  Tensors go one by one, never copied: one may be gigabytes.  A node
# is never taken apart, so one whose body holds a huge graph (a Loop of 50k nodes) is
# still one long call.
_BATCHED_NAMES = frozenset(c.DESCRIPTOR.full_name for c in (NodeProto, ValueInfoProto))
_BATCH = 256
_LENGTH_DELIMITED = 2


class TooBig(ValueError):
    """The model's bytes would exceed protobuf's 2 GB limit."""


def serialize_in_pieces(model: ModelProto, limit: int = MAX_PROTO) -> bytes:
    """``model.SerializeToString()`` in small steps (see the module).  TooBig when the
    result would exceed ``limit`` bytes, found before more than that is built."""
    parts: list[bytes] = []
    _Writer(parts, limit).message(model)
    return b"".join(parts)


class _Writer:
    def __init__(self, parts: list[bytes], limit: int) -> None:
        self.parts = parts
        self.limit = limit
        self.size = 0

    def add(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise TooBig(f"the model is over {self.limit} bytes")
        self.parts.append(data)

    def message(self, msg: Message) -> None:
        if not _takes_apart(msg):
            self.add(msg.SerializeToString())
            return
        for field, value in msg.ListFields():
            if field.type != FieldDescriptor.TYPE_MESSAGE:
                self.add(_field_alone(msg, field, value))
            elif not field.is_repeated:
                self.nested(field.number, value)
            elif field.message_type.full_name in _BATCHED_NAMES:
                for start in range(0, len(value), _BATCH):
                    batch = type(msg)()
                    getattr(batch, field.name).extend(value[start : start + _BATCH])
                    self.add(batch.SerializeToString())
            else:  # graphs and functions taken apart in turn, tensors whole
                for element in value:
                    self.nested(field.number, element)

    def nested(self, number: int, msg: Message) -> None:
        """One length-delimited field: its tag, the length, then the message's bytes."""
        head = _varint(number << 3 | _LENGTH_DELIMITED)
        if not _takes_apart(msg):
            data = msg.SerializeToString()
            self.add(head + _varint(len(data)))
            self.add(data)
            return
        inner: list[bytes] = []
        writer = _Writer(inner, self.limit - self.size)
        writer.message(msg)
        self.add(head + _varint(writer.size))
        for data in inner:
            self.add(data)


def _takes_apart(msg: Message) -> bool:
    return isinstance(msg, _CONTAINERS) and len(unknown_fields.UnknownFieldSet(msg)) == 0


def _field_alone(msg: Message, field: FieldDescriptor, value: Any) -> bytes:
    """The bytes of one non-message field (a scalar, a string or a repeated scalar): a
    message of the same type holding only that field, serialized."""
    alone = type(msg)()
    if field.is_repeated:
        getattr(alone, field.name).extend(value)
    else:
        setattr(alone, field.name, value)
    return alone.SerializeToString()


def _varint(value: int) -> bytes:
    """Protobuf's base-128 encoding of a length or a tag."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
