"""Function expansion: model-local functions and operator schemas defined as functions.

A node whose op has no kernel is run through a function body when one exists:

* a model-local function (``ModelProto.functions``) matching (domain, op_type,
  overload); its attribute defaults (``attribute_proto``) apply, and body nodes that
  refer to call attributes (``ref_attr_name``) get the caller's values;
* an operator schema from ``onnx.defs`` with a function body (``schema.has_function``),
  taking the body written for the largest opset <= the model's;
* a context-dependent schema function (``schema.has_context_dependent_function``),
  built from the node and the element types of the actual inputs at the first call.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import onnx.defs
from onnx import AttributeProto, FunctionProto, NodeProto, TypeProto, helper

from onnxviz.runtime.values import dtype_to_elem_type

FunctionKey = tuple[str, str, str]  # (domain, name, overload)


def local_function_index(functions: Any) -> dict[FunctionKey, FunctionProto]:
    index: dict[FunctionKey, FunctionProto] = {}
    for fn in functions:
        index[(fn.domain, fn.name, getattr(fn, "overload", ""))] = fn
    return index


def find_local_function(
    index: dict[FunctionKey, FunctionProto], node: NodeProto
) -> FunctionProto | None:
    overload = getattr(node, "overload", "")
    domain = node.domain
    for dom in (
        domain,
        "ai.onnx" if domain == "" else domain,
        "" if domain == "ai.onnx" else domain,
    ):
        fn = index.get((dom, node.op_type, overload))
        if fn is not None:
            return fn
    return None


@lru_cache(maxsize=2048)
def _schema(domain: str, op_type: str, opset: int) -> Any:
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except Exception:
        return None


def schema_since_version(domain: str, op_type: str, opset: int) -> int:
    """since_version of the schema in force at ``opset`` (0 for an unknown op)."""
    schema = _schema(domain, op_type, opset)
    return int(schema.since_version) if schema is not None else 0


def has_schema_function(domain: str, op_type: str, opset: int) -> bool:
    schema = _schema(domain, op_type, opset)
    if schema is None:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def _pick_version(versions: list[int], opset: int) -> int | None:
    fitting = [v for v in versions if v <= opset]
    if fitting:
        return max(fitting)
    return min(versions) if versions else None


@lru_cache(maxsize=1024)
def static_schema_function(domain: str, op_type: str, opset: int) -> FunctionProto | None:
    """The schema's context-independent function body for this opset, or None."""
    schema = _schema(domain, op_type, opset)
    if schema is None or not schema.has_function:
        return None
    version = _pick_version(list(schema.function_opset_versions), opset)
    if version is not None:
        try:
            data = schema.get_function_with_opset_version(version)
            fn = FunctionProto()
            fn.ParseFromString(data)
            if fn.node:
                return fn
        except Exception:
            pass
    body = schema.function_body
    return body if body is not None and len(body.node) else None


def _type_of(value: Any) -> TypeProto:
    if isinstance(value, np.ndarray):
        return helper.make_tensor_type_proto(dtype_to_elem_type(value.dtype), list(value.shape))
    if isinstance(value, list):
        inner = _type_of(value[0]) if value else helper.make_tensor_type_proto(1, None)
        return helper.make_sequence_type_proto(inner)
    return TypeProto()


def context_function(
    node: NodeProto, domain: str, opset: int, inputs: list[Any]
) -> FunctionProto | None:
    """Build the schema's context-dependent body for these actual inputs, or None."""
    schema = _schema(domain, node.op_type, opset)
    if schema is None or not schema.has_context_dependent_function:
        return None
    types = [_type_of(v).SerializeToString() for v in inputs]
    version = _pick_version(list(schema.context_dependent_function_opset_versions), opset)
    try:
        if version is not None:
            data = schema.get_context_dependent_function_with_opset_version(
                version, node.SerializeToString(), types
            )
        else:
            data = schema.get_context_dependent_function(node.SerializeToString(), types)
    except Exception:
        return None
    if not data:
        return None
    fn = FunctionProto()
    fn.ParseFromString(data)
    return fn if fn.node else None


def input_signature(inputs: list[Any]) -> tuple[str, ...]:
    """Key for caching context-dependent bodies: element type (and rank) per input."""
    out = []
    for v in inputs:
        if isinstance(v, np.ndarray):
            out.append(f"{v.dtype.str}/{v.ndim}")
        elif isinstance(v, list):
            out.append("seq")
        elif v is None:
            out.append("none")
        else:
            out.append(type(v).__name__)
    return tuple(out)


def call_attributes(
    node: NodeProto,
    fn: FunctionProto,
    opset: int,
    outer: dict[str, AttributeProto] | None,
) -> dict[str, AttributeProto]:
    """Attributes the body's ``ref_attr_name`` references resolve to: schema defaults
    (for schema functions), function defaults (``attribute_proto``), then the call's
    own attributes (themselves resolved when the call sits in another function body)."""
    attrs: dict[str, AttributeProto] = {}
    domain = "" if node.domain == "ai.onnx" else node.domain
    schema = _schema(domain, node.op_type, opset)
    if schema is not None:
        for name, a in schema.attributes.items():
            default = a.default_value
            if default is not None and default.type != AttributeProto.UNDEFINED:
                proto = AttributeProto()
                proto.CopyFrom(default)
                proto.name = name
                attrs[name] = proto
    for a in fn.attribute_proto:
        attrs[a.name] = a
    for a in node.attribute:
        if a.ref_attr_name:
            if outer is not None and a.ref_attr_name in outer:
                resolved = AttributeProto()
                resolved.CopyFrom(outer[a.ref_attr_name])
                resolved.name = a.name
                attrs[a.name] = resolved
        else:
            attrs[a.name] = a
    return attrs


def function_opsets(fn: FunctionProto, model_opsets: dict[str, int]) -> dict[str, int]:
    opsets = dict(model_opsets)
    for imp in fn.opset_import:
        opsets["" if imp.domain == "ai.onnx" else imp.domain] = imp.version
    return opsets
