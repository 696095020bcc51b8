"""Typed attribute text: what an attribute editor shows and how typed text becomes an
AttributeProto, checked against the operator schema (type, enum choices).

`parse_attribute(name, text, attr_type, choices)` raises `AttributeTextError` with a
reason a person can act on ("item 2, 'x', is not an integer"); nothing half-parsed is
ever returned.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import AttributeProto, NodeProto, helper

from onnxviz.model.tensors import from_array, to_array

A = AttributeProto


class AttributeTextError(ValueError):
    """Typed text that is not a valid value for the attribute."""


# Attributes whose schema documents a closed set of string values.  The schemas state
# these only in prose, so they are listed here; (op_type or "*", attribute name).
ENUM_CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("*", "auto_pad"): ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"),
    ("Resize", "mode"): ("nearest", "linear", "cubic"),
    ("Upsample", "mode"): ("nearest", "linear"),
    ("Pad", "mode"): ("constant", "reflect", "edge", "wrap"),
    ("GridSample", "mode"): ("linear", "nearest", "cubic", "bilinear", "bicubic"),
    ("GridSample", "padding_mode"): ("zeros", "border", "reflection"),
    ("DepthToSpace", "mode"): ("DCR", "CRD"),
    ("RoiAlign", "mode"): ("avg", "max"),
    ("RoiAlign", "coordinate_transformation_mode"): ("half_pixel", "output_half_pixel"),
    ("Resize", "coordinate_transformation_mode"): (
        "half_pixel",
        "half_pixel_symmetric",
        "pytorch_half_pixel",
        "align_corners",
        "asymmetric",
        "tf_crop_and_resize",
    ),
    ("Resize", "nearest_mode"): ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
    ("Resize", "keep_aspect_ratio_policy"): ("stretch", "not_larger", "not_smaller"),
    ("*", "direction"): ("forward", "reverse", "bidirectional"),
    ("ScatterElements", "reduction"): ("none", "add", "mul", "max", "min"),
    ("ScatterND", "reduction"): ("none", "add", "mul", "max", "min"),
    ("GatherElements", "reduction"): ("none", "add", "mul", "max", "min"),
    ("Gelu", "approximate"): ("none", "tanh"),
    ("CenterCropPad", "mode"): ("constant",),
}


def enum_choices(op_type: str, name: str) -> tuple[str, ...] | None:
    return ENUM_CHOICES.get((op_type, name)) or ENUM_CHOICES.get(("*", name))


@dataclass(frozen=True)
class AttributeSpec:
    """What the schema says about one attribute (type 0: the schema does not know it)."""

    name: str
    type: int
    required: bool
    default: AttributeProto | None
    description: str
    choices: tuple[str, ...] | None


def schema_for(node: NodeProto, opsets: dict[str, int]) -> Any:
    """The operator schema a node resolves to under the model's opsets, or None."""
    import onnx.defs

    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    try:
        return onnx.defs.get_schema(node.op_type, opsets.get(domain, 10_000), domain)
    except Exception:
        return None


def attribute_specs(schema: Any, op_type: str) -> dict[str, AttributeSpec]:
    out: dict[str, AttributeSpec] = {}
    if schema is None:
        return out
    for name, spec in schema.attributes.items():
        default = spec.default_value if spec.default_value.type != 0 else None
        out[name] = AttributeSpec(
            name,
            int(spec.type),
            bool(spec.required),
            default,
            spec.description or "",
            enum_choices(op_type, name),
        )
    return out


# -- text of a value --------------------------------------------------------------------


def _s(v: bytes | str) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def attribute_text(attr: AttributeProto) -> str:
    """The editable text of an attribute value (parse_attribute reads it back)."""
    t = attr.type
    if t == A.INT:
        return str(attr.i)
    if t == A.FLOAT:
        return repr(float(np.float32(attr.f)))
    if t == A.STRING:
        return _s(attr.s)
    if t == A.INTS:
        return ", ".join(str(v) for v in attr.ints)
    if t == A.FLOATS:
        return ", ".join(repr(float(np.float32(v))) for v in attr.floats)
    if t == A.STRINGS:
        return ", ".join(_s(v) for v in attr.strings)
    if t == A.TENSOR:
        try:
            arr = to_array(attr.t)
        except Exception:
            return ""
        if arr.size > 64:
            return ""
        return f"{arr.dtype.name} {arr.tolist()!r}"
    return ""


# -- parsing --------------------------------------------------------------------------------

_SPLIT = re.compile(r"[,\s]+")


def _items(text: str) -> list[str]:
    body = text.strip()
    if body.startswith(("[", "(")) and body.endswith(("]", ")")):
        body = body[1:-1]
    body = body.strip()
    if not body:
        return []
    return [p for p in _SPLIT.split(body) if p != ""]


def _int(token: str, where: str) -> int:
    try:
        return int(token, 0) if token.lower().startswith(("0x", "-0x")) else int(token)
    except ValueError:
        raise AttributeTextError(f"{where}'{token}' is not an integer") from None


def _float(token: str, where: str) -> float:
    try:
        return float(token)
    except ValueError:
        raise AttributeTextError(f"{where}'{token}' is not a number") from None


TENSOR_DTYPES = (
    "float32",
    "float64",
    "float16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
)


def parse_tensor_literal(text: str, name: str = "") -> Any:
    """``[1, 2, 3]``, ``int32 [[1, 2], [3, 4]]`` or ``float32 0.5`` -> TensorProto."""
    body = text.strip()
    dtype = None
    head, _, rest = body.partition(" ")
    if head in TENSOR_DTYPES:
        dtype, body = head, rest.strip()
    if not body:
        raise AttributeTextError("a tensor literal needs values, e.g. [1, 2, 3]")
    try:
        value = ast.literal_eval(body)
    except (ValueError, SyntaxError):
        raise AttributeTextError(
            f"'{body[:40]}' is not a tensor literal (numbers in nested [ ] lists)"
        ) from None
    try:
        arr = np.array(value, dtype=dtype)
    except (ValueError, TypeError) as exc:
        raise AttributeTextError(f"not a regular tensor: {exc}") from None
    if arr.dtype.kind not in "biuf":
        raise AttributeTextError("tensor literals hold numbers or booleans")
    if dtype is None:
        arr = arr.astype(np.float32 if arr.dtype.kind == "f" else np.int64)
    return from_array(arr, name)


def parse_attribute(
    name: str, text: str, attr_type: int, choices: tuple[str, ...] | None = None
) -> AttributeProto:
    """Parse typed text into an attribute of the given AttributeProto type."""
    t = attr_type
    if t == A.INT:
        value: Any = _int(text.strip(), "")
    elif t == A.FLOAT:
        value = _float(text.strip(), "")
    elif t == A.STRING:
        value = text
        if choices and text not in choices:
            raise AttributeTextError(f"'{text}' is not one of: {', '.join(choices)}")
    elif t == A.INTS:
        items = _items(text)
        value = [_int(tok, f"item {i + 1}, ") for i, tok in enumerate(items)]
    elif t == A.FLOATS:
        items = _items(text)
        value = [_float(tok, f"item {i + 1}, ") for i, tok in enumerate(items)]
    elif t == A.STRINGS:
        body = text.strip()
        if body.startswith("[") and body.endswith("]"):
            body = body[1:-1]
        value = [s.strip().strip("'\"") for s in body.split(",") if s.strip()]
    elif t == A.TENSOR:
        value = parse_tensor_literal(text, name)
    else:
        kind = A.AttributeType.Name(t) if t in A.AttributeType.values() else str(t)
        raise AttributeTextError(f"attributes of type {kind} cannot be typed as text")
    if t in (A.INTS, A.FLOATS, A.STRINGS):
        # an empty list: make_attribute cannot tell which kind without being told
        return helper.make_attribute(name, value, attr_type=t)
    return helper.make_attribute(name, value)


def parse_untyped(name: str, text: str) -> AttributeProto:
    """An attribute the schema does not describe: ints, then floats, then a string."""
    items = _items(text)
    for kind in (A.INT, A.FLOAT) if len(items) == 1 and "," not in text else (A.INTS, A.FLOATS):
        try:
            return parse_attribute(name, text, kind)
        except AttributeTextError:
            pass
    return parse_attribute(name, text, A.STRING)
