"""TypeProto <-> text, the one type notation used by the UI, the CLI and diagnostics.

Grammar (whitespace between tokens is ignored when reading; never written):

    type    := tensor | "seq(" [type] ")" | "map(" elem "," [type] ")"
             | "optional(" [type] ")" | "sparse(" tensor ")" | "opaque(" [word] "," [word] ")"
             | "?"                                  a TypeProto with no kind set
    tensor  := elem                                 unknown rank (no shape field)
             | elem "[" [dim ("," dim)*] "]"        known rank; "float32[]" is a scalar
    dim     := integer                              dim_value
             | "?"                                  neither dim_value nor dim_param
             | name                                 dim_param matching [A-Za-z_][A-Za-z0-9_.+*/:-]*
             | "\"...\""                            any other dim_param, JSON-quoted
    elem    := short element name from onnxviz.model.dtypes (float32, int4, ...)
             | "undefined" (elem_type unset or 0) | "type<N>" (a code this onnx does not know)

Examples: `float32[N,3,224,224]`, `float16[?,8]`, `seq(float32[N])`,
`map(string,seq(float32))`, `optional(seq(float32[?]))`, `sparse(float32[10,10])`,
`opaque(com.example,Blob)`.

Denotations (type and dimension) are not written; every other field round-trips.  Inner
fields that are absent are written empty: `seq()`, `map(int64,)`, `optional()`.
"""

from __future__ import annotations

import json
import re

from onnx import TensorShapeProto, TypeProto, ValueInfoProto

from onnxviz.model.dtypes import ELEMENT_TYPES, elem_type_from_name
from onnxviz.model.text import as_text

_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.+*/:\-]*")
_PLAIN_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_UNKNOWN_CODE = re.compile(r"type([0-9]+)")
_KINDS = ("seq", "map", "optional", "sparse", "opaque")

Dim = int | str | None


# --------------------------------------------------------------------------- writing


def elem_text(code: int) -> str:
    if code == 0:
        return "undefined"
    et = ELEMENT_TYPES.get(code)
    return et.name if et else f"type{code}"


def _quoted_if_needed(text: str | bytes, plain: re.Pattern[str]) -> str:
    text = as_text(text)  # a dim_param or denotation that is not UTF-8 comes as bytes
    return text if plain.fullmatch(text) else json.dumps(text, ensure_ascii=False)


def _dim_text(dim: TensorShapeProto.Dimension) -> str:
    which = dim.WhichOneof("value")
    if which == "dim_value":
        return str(dim.dim_value)
    if which == "dim_param":
        return _quoted_if_needed(dim.dim_param, _PLAIN_NAME)
    return "?"


def _tensor_text(elem_type: int, has_shape: bool, shape: TensorShapeProto) -> str:
    name = elem_text(elem_type)
    if not has_shape:
        return name
    return f"{name}[{','.join(_dim_text(d) for d in shape.dim)}]"


def type_to_text(tp: TypeProto) -> str:
    """Text for a TypeProto, e.g. `float32[N,3,224,224]` or `seq(map(int64,float32))`."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        t = tp.tensor_type
        return _tensor_text(t.elem_type, t.HasField("shape"), t.shape)
    if kind == "sparse_tensor_type":
        s = tp.sparse_tensor_type
        return f"sparse({_tensor_text(s.elem_type, s.HasField('shape'), s.shape)})"
    if kind == "sequence_type":
        seq = tp.sequence_type
        inner = type_to_text(seq.elem_type) if seq.HasField("elem_type") else ""
        return f"seq({inner})"
    if kind == "optional_type":
        opt = tp.optional_type
        inner = type_to_text(opt.elem_type) if opt.HasField("elem_type") else ""
        return f"optional({inner})"
    if kind == "map_type":
        m = tp.map_type
        value = type_to_text(m.value_type) if m.HasField("value_type") else ""
        return f"map({elem_text(m.key_type)},{value})"
    if kind == "opaque_type":
        o = tp.opaque_type
        domain = _quoted_if_needed(o.domain, _PLAIN_WORD) if o.domain else ""
        name = _quoted_if_needed(o.name, _PLAIN_WORD) if o.name else ""
        return f"opaque({domain},{name})"
    return "?"


def value_info_text(vi: ValueInfoProto) -> str:
    """`name: type`, e.g. `input: float32[N,3,224,224]` (`name: ?` when no type is given)."""
    return f"{vi.name}: {type_to_text(vi.type)}"


def shape_of(tp: TypeProto) -> list[Dim] | None:
    """Dims of a tensor or sparse tensor type: int (dim_value), str (dim_param) or None
    (unknown); None when the rank is unknown or the type is not a tensor."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        t = tp.tensor_type
        has_shape, shape = t.HasField("shape"), t.shape
    elif kind == "sparse_tensor_type":
        s = tp.sparse_tensor_type
        has_shape, shape = s.HasField("shape"), s.shape
    else:
        return None
    if not has_shape:
        return None
    dims: list[Dim] = []
    for dim in shape.dim:
        which = dim.WhichOneof("value")
        dims.append(
            dim.dim_value
            if which == "dim_value"
            else dim.dim_param
            if which == "dim_param"
            else None
        )
    return dims


# --------------------------------------------------------------------------- reading


def text_to_type(text: str) -> TypeProto:
    """Parse type text (see module doc); ValueError with a clear sentence on bad text."""
    parser = _Parser(text)
    tp = parser.parse_type()
    parser.skip_space()
    if not parser.at_end():
        parser.fail(f"unexpected '{parser.rest()}' after the type")
    return tp


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    # -- helpers

    def fail(self, what: str) -> None:
        raise ValueError(f"Cannot read type '{self.text}': {what} (at character {self.pos}).")

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def rest(self) -> str:
        return self.text[self.pos :]

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, char: str, context: str) -> None:
        found = self.peek()
        if found != char:
            got = f"'{found}'" if found else "the end of the text"
            self.fail(f"expected '{char}' {context} but found {got}")
        self.pos += 1

    def word(self) -> str:
        self.skip_space()
        start = self.pos
        while self.pos < len(self.text) and (
            self.text[self.pos].isalnum() or self.text[self.pos] == "_"
        ):
            self.pos += 1
        return self.text[start : self.pos]

    def quoted(self) -> str:
        start = self.pos
        self.pos += 1
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "\\":
                self.pos += 2
                continue
            self.pos += 1
            if char == '"':
                try:
                    value = json.loads(self.text[start : self.pos])
                except json.JSONDecodeError:
                    self.pos = start
                    self.fail("a quoted name has a bad escape")
                return str(value)
        self.pos = start
        self.fail("a quoted name is not closed")
        return ""  # unreachable: fail raises

    # -- grammar

    def parse_type(self) -> TypeProto:
        tp = TypeProto()
        if self.peek() == "?":
            self.pos += 1
            return tp
        start = self.pos
        word = self.word()
        if not word:
            found = self.peek()
            self.fail(f"expected a type but found {repr(found) if found else 'nothing'}")
        if word in _KINDS and self.peek() == "(":
            self.pos += 1
            self._parse_kind(word, tp)
            self.expect(")", f"to close '{word}('")
            return tp
        self.pos = start
        self._parse_tensor(tp.tensor_type)
        return tp

    def _parse_kind(self, kind: str, tp: TypeProto) -> None:
        if kind == "seq":
            tp.sequence_type.SetInParent()
            if self.peek() not in (")", ""):
                tp.sequence_type.elem_type.CopyFrom(self.parse_type())
        elif kind == "optional":
            tp.optional_type.SetInParent()
            if self.peek() not in (")", ""):
                tp.optional_type.elem_type.CopyFrom(self.parse_type())
        elif kind == "map":
            tp.map_type.SetInParent()
            key = self._parse_elem()
            if key:
                tp.map_type.key_type = key
            self.expect(",", "between the key and value types of 'map('")
            if self.peek() not in (")", ""):
                tp.map_type.value_type.CopyFrom(self.parse_type())
        elif kind == "sparse":
            self._parse_tensor(tp.sparse_tensor_type)
        else:
            tp.opaque_type.SetInParent()
            domain = self._parse_opaque_word()
            self.expect(",", "between the domain and name of 'opaque('")
            name = self._parse_opaque_word()
            if domain:
                tp.opaque_type.domain = domain
            if name:
                tp.opaque_type.name = name

    def _parse_opaque_word(self) -> str:
        if self.peek() == '"':
            return self.quoted()
        self.skip_space()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in ",)":
            self.pos += 1
        word = self.text[start : self.pos].strip()
        if word and not _PLAIN_WORD.fullmatch(word):
            self.pos = start
            self.fail(f"'{word}' is not a plain name; quote it")
        return word

    def _parse_elem(self) -> int:
        """An element type name; 0 for 'undefined'."""
        word = self.word()
        if not word:
            found = self.peek()
            self.fail(f"expected an element type but found {repr(found) if found else 'nothing'}")
        if word == "undefined":
            return 0
        unknown = _UNKNOWN_CODE.fullmatch(word)
        if unknown:
            return int(unknown.group(1))
        try:
            return elem_type_from_name(word)
        except ValueError:
            self.pos -= len(word)
            self.fail(f"'{word}' is not a known element type")
        return 0  # unreachable: fail raises

    def _parse_tensor(self, target: TypeProto.Tensor | TypeProto.SparseTensor) -> None:
        target.SetInParent()
        elem = self._parse_elem()
        if elem:
            target.elem_type = elem
        if self.peek() != "[":
            return
        self.pos += 1
        target.shape.SetInParent()
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            self._parse_dim(target.shape.dim.add())
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]", "to close the shape")
            return

    def _parse_dim(self, dim: TensorShapeProto.Dimension) -> None:
        if self.peek() == '"':
            dim.dim_param = self.quoted()
            return
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in ",]":
            self.pos += 1
        token = self.text[start : self.pos].strip()
        if self.at_end():
            self.fail("the shape is not closed with ']'")
        if token == "?":
            return
        if _INTEGER.fullmatch(token):
            value = int(token)
            if not -(2**63) <= value < 2**63:
                self.pos = start
                self.fail(f"dimension {token} does not fit in 64 bits")
            dim.dim_value = value
            return
        if _PLAIN_NAME.fullmatch(token):
            dim.dim_param = token
            return
        self.pos = start
        self.fail(
            "a dimension is empty" if not token else f"'{token}' is not a dimension; quote it"
        )
