"""Operator, opset and attribute rules (O), plus the schema-driven empty-name rule G006.

Node rules are pure functions of (context, scope, node index), so the incremental
validator can re-run them for the nodes a command touched."""

from __future__ import annotations

from onnx import AttributeProto, NodeProto
from onnx.defs import OpSchema

from onnxviz.check.context import (
    ONNX_DOMAINS,
    CheckContext,
    get_schema,
    known_max_version,
    norm_domain,
)
from onnxviz.check.onnxruntime_ops import (
    ONNXRUNTIME,
    ORT_DOMAINS,
    PortableSchema,
    default_domain_extensions,
)
from onnxviz.check.registry import diag
from onnxviz.check.targets import current_target
from onnxviz.model.diagnostics import Diagnostic, Severity
from onnxviz.model.scopes import GraphScope

_A = AttributeProto
# AttributeProto.AttributeType -> the field holding the value.
VALUE_FIELD: dict[int, str] = {
    _A.FLOAT: "f",
    _A.INT: "i",
    _A.STRING: "s",
    _A.TENSOR: "t",
    _A.GRAPH: "g",
    _A.SPARSE_TENSOR: "sparse_tensor",
    _A.TYPE_PROTO: "tp",
    _A.FLOATS: "floats",
    _A.INTS: "ints",
    _A.STRINGS: "strings",
    _A.TENSORS: "tensors",
    _A.GRAPHS: "graphs",
    _A.SPARSE_TENSORS: "sparse_tensors",
    _A.TYPE_PROTOS: "type_protos",
}
_SINGULAR = ("f", "i", "s", "t", "g", "sparse_tensor", "tp")
_REPEATED = ("floats", "ints", "strings", "tensors", "graphs", "sparse_tensors", "type_protos")
# Types whose value has no protobuf default: holding no field means holding nothing.
_NEEDS_FIELD = {_A.TENSOR, _A.GRAPH, _A.SPARSE_TENSOR, _A.TYPE_PROTO}
_OPTION = OpSchema.FormalParameterOption


def attr_type_name(t: int) -> str:
    try:
        return str(_A.AttributeType.Name(t))
    except ValueError:
        return str(t)


def set_fields(attr: AttributeProto) -> list[str]:
    got = [f for f in _SINGULAR if attr.HasField(f)]
    got += [f for f in _REPEATED if len(getattr(attr, f))]
    return got


def node_rules(ctx: CheckContext, scope: GraphScope, index: int) -> list[Diagnostic]:
    node = scope.nodes[index]
    out: list[Diagnostic] = []
    path = scope.path
    label = scope.node_label(index)
    out.extend(_attribute_shape_rules(ctx, scope, node, label))
    domain = norm_domain(node.domain)
    opsets = ctx.opsets_for(scope)
    if domain not in opsets:
        if domain == "" and "" not in ctx.model_opsets:
            return out  # O001, reported once for the model
        shown = domain or "ai.onnx"
        out.append(
            diag(
                "O002",
                f"Node '{label}' uses domain '{shown}', which the model does not import.",
                path,
                node=label,
                field="domain",
            )
        )
        return out
    version = opsets[domain]
    fn = ctx.local_function(domain, node.op_type, node.overload)
    if fn is not None:
        if len(node.input) > len(fn.input) or len(node.output) > len(fn.output):
            out.append(
                diag(
                    "O018",
                    f"Node '{label}' passes {len(node.input)} inputs and {len(node.output)} outputs "
                    f"to function '{fn.name}', which has {len(fn.input)} and {len(fn.output)}.",
                    path,
                    node=label,
                )
            )
        return out
    if node.overload:
        out.append(
            diag(
                "O003",
                f"Node '{label}' calls '{node.op_type}' overload '{node.overload}' of domain "
                f"'{domain}', but no model-local function has that identity.",
                path,
                node=label,
                field="overload",
            )
        )
        return out
    schema: OpSchema | PortableSchema | None = get_schema(domain, node.op_type, version)
    if schema is None:
        if current_target() == "onnxruntime":
            found, said = _onnxruntime_schema(domain, node, version, label, path)
            out.extend(said)
            if found is None:
                return out
            schema = found
        else:
            out.append(_not_in_onnx(domain, node, version, label, path))
            return out
    if schema.deprecated:
        out.append(
            diag(
                "O005",
                f"Operator '{node.op_type}' (node '{label}') is deprecated in opset {version}.",
                path,
                node=label,
            )
        )
    out.extend(_arity_rules(schema, node, label, path))
    out.extend(_schema_attribute_rules(schema, node, label, path))
    return out


def _not_in_onnx(domain: str, node: NodeProto, version: int, label: str, path: str) -> Diagnostic:
    """The ``onnx`` target's word on an operator ONNX has no schema for."""
    if domain == "" and node.op_type in default_domain_extensions():
        return diag(
            "O020",
            f"Operator '{node.op_type}' is not an ONNX operator (opset {version} of "
            f"'ai.onnx' has none by that name), but onnxruntime runs it as an extension "
            f"of that domain (node '{label}'): the model runs in onnxruntime and is not "
            "portable to other runtimes.",
            path,
            node=label,
            field="op_type",
        )
    if domain in ONNX_DOMAINS:
        shown = domain or "ai.onnx"
        return diag(
            "O003",
            f"Operator '{node.op_type}' does not exist in opset {version} of domain '{shown}' "
            f"(node '{label}').",
            path,
            node=label,
            field="op_type",
        )
    if domain in ORT_DOMAINS:
        return diag(
            "O021",
            f"Operator '{node.op_type}' of domain '{domain}' (node '{label}') is an onnxruntime "
            "contrib operator: onnxruntime runs it, other runtimes may not, so the model is not "
            "portable; check with the onnxruntime target to check it against onnxruntime's "
            "schema.",
            path,
            node=label,
            field="domain",
        )
    return diag(
        "O004",
        f"No schema is known for '{node.op_type}' of custom domain '{domain}'; "
        "its signature is not checked.",
        path,
        node=label,
    )


def _onnxruntime_schema(
    domain: str, node: NodeProto, version: int, label: str, path: str
) -> tuple[PortableSchema | None, list[Diagnostic]]:
    """The ``onnxruntime`` target: onnxruntime's schema for a node ONNX has none for,
    or what to say instead."""
    found = ONNXRUNTIME.schema(domain, node.op_type, version)
    if found is not None:
        extra = []
        if domain == "":
            extra.append(
                diag(
                    "O020",
                    f"Operator '{node.op_type}' (node '{label}') is an onnxruntime extension "
                    f"of the default domain (ONNX opset {version} has none by that name): "
                    "accepted for the onnxruntime target and checked against onnxruntime's "
                    "schema; other runtimes will not run it.",
                    path,
                    node=label,
                    field="op_type",
                    severity=Severity.INFO,
                )
            )
        return found, extra
    if not ONNXRUNTIME.available():
        # No onnxruntime to ask: the onnx target's word, noting what is missing.
        return None, [_not_in_onnx(domain, node, version, label, path)]
    shown = domain or "ai.onnx"
    if domain in ONNX_DOMAINS:
        return None, [_not_in_onnx(domain, node, version, label, path)]
    if domain in ORT_DOMAINS:
        known = ONNXRUNTIME.knows(domain, node.op_type)
        reason = f"only from a later opset than {version}" if known else "no operator by that name"
        return None, [
            diag(
                "O022",
                f"onnxruntime has {reason} for '{node.op_type}' in domain '{shown}' "
                f"(node '{label}'): onnxruntime cannot run the model.",
                path,
                node=label,
                field="op_type",
            )
        ]
    return None, [
        diag(
            "O004",
            f"No schema is known for '{node.op_type}' of custom domain '{domain}' (neither ONNX "
            "nor onnxruntime defines it); its signature is not checked.",
            path,
            node=label,
        )
    ]


def _arity_rules(
    schema: OpSchema | PortableSchema, node: NodeProto, label: str, path: str
) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    n_in, n_out = len(node.input), len(node.output)
    if not schema.min_input <= n_in <= schema.max_input:
        out.append(
            diag(
                "O006",
                f"Node '{label}' ({node.op_type}) has {n_in} inputs; the operator takes "
                f"{_range(schema.min_input, schema.max_input)}.",
                path,
                node=label,
                field="input",
            )
        )
    if not schema.min_output <= n_out <= schema.max_output:
        out.append(
            diag(
                "O007",
                f"Node '{label}' ({node.op_type}) has {n_out} outputs; the operator gives "
                f"{_range(schema.min_output, schema.max_output)}.",
                path,
                node=label,
                field="output",
            )
        )
    formals_in, formals_out = schema.inputs, schema.outputs
    for kind, names, formals in (
        ("input", node.input, formals_in),
        ("output", node.output, formals_out),
    ):
        if not formals:
            continue
        for i, nm in enumerate(names):
            if nm:
                continue
            formal = formals[min(i, len(formals) - 1)]
            if int(formal.option) == int(_OPTION.Single):
                out.append(
                    diag(
                        "G006",
                        f"{kind.capitalize()} #{i} ('{formal.name}') of node '{label}' is empty, but "
                        f"{node.op_type} requires it.",
                        path,
                        node=label,
                        field=f"{kind}[{i}]",
                    )
                )
    return out


def _range(lo: int, hi: int) -> str:
    if lo == hi:
        return f"exactly {lo}"
    if hi >= 2**31 - 1:
        return f"at least {lo}"
    return f"{lo} to {hi}"


def _attribute_shape_rules(
    ctx: CheckContext, scope: GraphScope, node: NodeProto, label: str
) -> list[Diagnostic]:
    """Rules about the AttributeProto itself, independent of the operator schema."""
    out: list[Diagnostic] = []
    path = scope.path
    seen: set[str] = set()
    fn = ctx.function_of(scope)
    for attr in node.attribute:
        an = attr.name
        if not an or attr.type == _A.UNDEFINED and not attr.ref_attr_name and not set_fields(attr):
            out.append(
                diag(
                    "O016",
                    f"An attribute of node '{label}' has no " + ("name." if not an else "type."),
                    path,
                    node=label,
                    attribute=an or None,
                )
            )
            continue
        if an in seen:
            out.append(
                diag(
                    "O014",
                    f"Node '{label}' has attribute '{an}' more than once.",
                    path,
                    node=label,
                    attribute=an,
                )
            )
        seen.add(an)
        if attr.ref_attr_name:
            if fn is None:
                out.append(
                    diag(
                        "O012",
                        f"Attribute '{an}' of node '{label}' refers to '{attr.ref_attr_name}', but "
                        "ref_attr_name is only allowed inside a function body.",
                        path,
                        node=label,
                        attribute=an,
                    )
                )
            else:
                declared = set(fn.attribute) | {a.name for a in fn.attribute_proto}
                if attr.ref_attr_name not in declared:
                    out.append(
                        diag(
                            "O013",
                            f"Attribute '{an}' of node '{label}' refers to '{attr.ref_attr_name}', which "
                            f"function '{fn.name}' does not declare.",
                            path,
                            node=label,
                            attribute=an,
                        )
                    )
            continue
        fields = set_fields(attr)
        expected = VALUE_FIELD.get(attr.type)
        if len(fields) > 1:
            out.append(
                diag(
                    "O011",
                    f"Attribute '{an}' of node '{label}' holds {len(fields)} values "
                    f"({', '.join(fields)}).",
                    path,
                    node=label,
                    attribute=an,
                )
            )
        elif expected is None and attr.type != _A.UNDEFINED:
            out.append(
                diag(
                    "O011",
                    f"Attribute '{an}' of node '{label}' has unknown type {attr.type}.",
                    path,
                    node=label,
                    attribute=an,
                )
            )
        elif fields and attr.type != _A.UNDEFINED and fields[0] != expected:
            out.append(
                diag(
                    "O011",
                    f"Attribute '{an}' of node '{label}' is declared {attr_type_name(attr.type)} but "
                    f"holds '{fields[0]}'.",
                    path,
                    node=label,
                    attribute=an,
                )
            )
        elif not fields and attr.type in _NEEDS_FIELD:
            out.append(
                diag(
                    "O011",
                    f"Attribute '{an}' of node '{label}' is {attr_type_name(attr.type)} but holds no value.",
                    path,
                    node=label,
                    attribute=an,
                )
            )
    return out


def _schema_attribute_rules(
    schema: OpSchema | PortableSchema, node: NodeProto, label: str, path: str
) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    formal = schema.attributes
    present: set[str] = set()
    for attr in node.attribute:
        an = attr.name
        present.add(an)
        spec = formal.get(an)
        if spec is None:
            if an:
                out.append(
                    diag(
                        "O008",
                        f"Node '{label}' ({node.op_type}) has attribute '{an}', which the operator "
                        "does not define.",
                        path,
                        node=label,
                        attribute=an,
                    )
                )
            continue
        want = int(spec.type)
        got = attr.type
        if got == _A.UNDEFINED and not attr.ref_attr_name:
            fields = set_fields(attr)
            got = next(
                (t for t, f in VALUE_FIELD.items() if fields and f == fields[0]), _A.UNDEFINED
            )
        if got != want and got != _A.UNDEFINED:
            out.append(
                diag(
                    "O010",
                    f"Attribute '{an}' of node '{label}' is {attr_type_name(got)}; {node.op_type} "
                    f"expects {attr_type_name(want)}.",
                    path,
                    node=label,
                    attribute=an,
                )
            )
    for an, spec in formal.items():
        if spec.required and an not in present:
            out.append(
                diag(
                    "O009",
                    f"Node '{label}' ({node.op_type}) lacks the required attribute '{an}'.",
                    path,
                    node=label,
                    attribute=an,
                )
            )
    return out


def model_rules(ctx: CheckContext) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    m = ctx.model
    if "" not in ctx.model_opsets:
        user = _first_default_domain_node(ctx)
        if user is not None:
            out.append(
                diag(
                    "O001",
                    f"Node '{user[1]}' uses the default operator set (domain '' / 'ai.onnx'), "
                    "which the model does not import.",
                    user[0],
                    node=user[1],
                    field="opset_import",
                )
            )
    out.extend(_opset_list_rules(m.opset_import, "main", "opset_import"))
    for fn in m.functions:
        from onnxviz.model.scopes import function_path

        out.extend(_opset_list_rules(fn.opset_import, function_path(fn), "opset_import"))
    for domain, version in ctx.model_opsets.items():
        top = known_max_version(domain)
        if top is not None and version > top:
            shown = domain or "ai.onnx"
            out.append(
                diag(
                    "O015",
                    f"The model imports opset {version} of '{shown}', but the onnx package knows "
                    f"versions up to {top}.",
                    field="opset_import",
                )
            )
    return out


def _opset_list_rules(entries: object, path: str, field_name: str) -> list[Diagnostic]:
    """An opset is named by its (domain, version) pair (IR spec, operator set
    identifiers): two versions of one domain leave the model's operators undefined
    (O017), while the same pair twice, as skl2onnx 1.20 writes ('', 17), only repeats
    itself (O019, a warning)."""
    out: list[Diagnostic] = []
    seen: dict[str, int] = {}
    for e in entries:  # type: ignore[attr-defined]
        d = norm_domain(e.domain)
        shown = d or "ai.onnx"
        if d in seen and seen[d] != e.version:
            out.append(
                diag(
                    "O017",
                    f"opset_import gives domain '{shown}' two versions: {seen[d]} and {e.version}.",
                    path,
                    field=field_name,
                )
            )
        elif d in seen:
            out.append(
                diag(
                    "O019",
                    f"opset_import lists ('{shown}', {e.version}) more than once.",
                    path,
                    field=field_name,
                )
            )
        elif e.version < 1:
            out.append(
                diag(
                    "O017",
                    f"opset_import gives domain '{shown}' version {e.version}.",
                    path,
                    field=field_name,
                )
            )
        seen.setdefault(d, e.version)
    return out


def _first_default_domain_node(ctx: CheckContext) -> tuple[str, str] | None:
    for scope in ctx.scopes:
        if "" in ctx.opsets_for(scope):
            continue
        for i, node in enumerate(scope.nodes):
            if norm_domain(node.domain) == "":
                return scope.path, scope.node_label(i)
    return None
