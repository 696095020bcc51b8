"""What the editor of a property row changes: one small named tuple per kind, read by
the UI's editor factory and edit menus by field name (``edit.path``, ``edit.name``).

They stay tuples (first field: the kind's name), so a row's edit compares equal to the
plain tuple it once was.  A metadata or doc-string target is ``"model"``, a graph path,
or ``(graph path, node index)`` for a node's own."""

from __future__ import annotations

from typing import Literal, NamedTuple

MetaTarget = str | tuple[str, int]


class ModelFieldEdit(NamedTuple):
    """ir_version, producer_name, producer_version, domain, model_version, doc_string."""

    kind: Literal["model"]
    field: str


class OpsetEdit(NamedTuple):
    """The version of an imported opset."""

    kind: Literal["opset"]
    domain: str


class MetadataEdit(NamedTuple):
    kind: Literal["metadata"]
    target: MetaTarget
    key: str


class DocEdit(NamedTuple):
    kind: Literal["doc"]
    target: MetaTarget


class NodeFieldEdit(NamedTuple):
    """A node's name, domain or op_type."""

    kind: Literal["node"]
    path: str
    node_index: int
    field: str


class AttrEdit(NamedTuple):
    kind: Literal["attr"]
    path: str
    node_index: int
    name: str
    attr_type: int  # AttributeProto.AttributeType
    choices: tuple[str, ...] | None  # an enum attribute's allowed values


class InputEdit(NamedTuple):
    """Rewire input ``k`` of a node."""

    kind: Literal["input"]
    path: str
    node_index: int
    k: int


class RenameEdit(NamedTuple):
    """Rename a value (every use follows)."""

    kind: Literal["rename"]
    path: str
    name: str


class TypeEdit(NamedTuple):
    """The declared type of a graph input, output or value."""

    kind: Literal["type"]
    path: str
    name: str


RowEdit = (
    ModelFieldEdit
    | OpsetEdit
    | MetadataEdit
    | DocEdit
    | NodeFieldEdit
    | AttrEdit
    | InputEdit
    | RenameEdit
    | TypeEdit
)
