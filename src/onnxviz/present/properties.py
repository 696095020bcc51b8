"""What the properties panel shows, as plain data: sections of (key, value) rows for a
model, a graph, a node, a value or a tensor.  Read-only here; the editing issue adds
editors keyed by `Row.field`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import AttributeProto, ModelProto, NodeProto, TensorProto, helper

from onnxviz.model.attribute_values import attribute_specs
from onnxviz.model.document import Document
from onnxviz.model.node_id import NodeId
from onnxviz.model.scope_names import readable_path
from onnxviz.model.scopes import GraphScope
from onnxviz.model.types import elem_text, type_to_text
from onnxviz.present.row_edits import (
    AttrEdit,
    DocEdit,
    InputEdit,
    MetadataEdit,
    ModelFieldEdit,
    NodeFieldEdit,
    OpsetEdit,
    RenameEdit,
    RowEdit,
    TypeEdit,
)

PREVIEW_VALUES = 32
STATS_MAX_BYTES = 256 * 1024 * 1024


@dataclass
class Row:
    key: str
    value: str
    note: str = ""  # "default", "inferred", "since 13", ...
    field: str = ""  # what an editor would change (for the editing issue)
    target: tuple[str, str] | None = None  # ("value"|"tensor"|"node", name) to navigate to
    # What an editor changes (row_edits.py), read by the UI's editor factory.
    edit: RowEdit | None = None


# The kinds of `Row.edit` (row_edits.py).
EDIT_KINDS = ("model", "opset", "metadata", "doc", "node", "attr", "input", "rename", "type")


@dataclass
class Section:
    title: str
    rows: list[Row] = field(default_factory=list)
    text: str = ""  # free text (documentation)


def _short(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def model_sections(doc: Document) -> list[Section]:
    m: ModelProto = doc.model
    s = Section("Model")
    s.rows += [
        Row(
            "ir_version",
            str(m.ir_version),
            field="ir_version",
            edit=ModelFieldEdit("model", "ir_version"),
        ),
        Row(
            "producer_name",
            m.producer_name,
            field="producer_name",
            edit=ModelFieldEdit("model", "producer_name"),
        ),
        Row(
            "producer_version",
            m.producer_version,
            field="producer_version",
            edit=ModelFieldEdit("model", "producer_version"),
        ),
        Row("domain", m.domain, field="domain", edit=ModelFieldEdit("model", "domain")),
        Row(
            "model_version",
            str(m.model_version),
            field="model_version",
            edit=ModelFieldEdit("model", "model_version"),
        ),
        Row("file", doc.path or "(not saved)"),
    ]
    for o in m.opset_import:
        s.rows.append(
            Row(
                f"opset {o.domain or 'ai.onnx'}",
                str(o.version),
                field="opset_import",
                edit=OpsetEdit("opset", o.domain),
            )
        )
    s.rows.append(
        Row("doc", m.doc_string, field="doc_string", edit=ModelFieldEdit("model", "doc_string"))
    )
    sections = [s]
    sections.append(
        Section(
            "Metadata",
            [
                Row(
                    p.key,
                    p.value,
                    field=f"metadata:{p.key}",
                    edit=MetadataEdit("metadata", "model", p.key),
                )
                for p in m.metadata_props
            ],
        )
    )
    if m.training_info:
        t = Section("Training info")
        for i, ti in enumerate(m.training_info):
            t.rows.append(Row(f"[{i}] algorithm", f"{len(ti.algorithm.node)} nodes"))
            t.rows.append(Row(f"[{i}] initialization", f"{len(ti.initialization.node)} nodes"))
        sections.append(t)
    devices = list(getattr(m, "configuration", ()))
    if devices:
        d = Section("Multi-device configuration")
        for cfg in devices:
            names = ", ".join(cfg.device) if len(cfg.device) else ""
            d.rows.append(
                Row(
                    cfg.name or "(unnamed)",
                    f"{cfg.num_devices} devices" + (f": {names}" if names else ""),
                )
            )
        sections.append(d)
    if m.functions:
        sections.append(
            Section(
                "Functions",
                # overloads of one function differ only by their overload (IR 10)
                [
                    Row(
                        f"{f.name} ({f.overload})" if f.overload else f.name,
                        f"{f.domain} · {len(f.node)} nodes",
                    )
                    for f in m.functions
                ],
            )
        )
    return sections


def graph_sections(doc: Document, path: str) -> list[Section]:
    scope = doc.scope(path)
    s = Section(
        "Graph",
        [
            Row("path", readable_path(scope)),
            Row("name", scope.name),
            Row("nodes", str(len(scope.nodes))),
        ],
    )
    io = Section("Inputs and outputs")
    if scope.graph is not None:
        g = scope.graph
        s.rows.append(Row("initializers", str(len(g.initializer) + len(g.sparse_initializer))))
        s.rows.append(Row("doc", g.doc_string, field="doc_string", edit=DocEdit("doc", path)))
        for prop in getattr(g, "metadata_props", ()):
            s.rows.append(
                Row(
                    f"metadata {prop.key}",
                    prop.value,
                    edit=MetadataEdit("metadata", path, prop.key),
                )
            )
        for kind, entries in (("input", g.input), ("output", g.output)):
            for vi in entries:
                io.rows.append(
                    Row(
                        f"{kind} {vi.name}",
                        type_to_text(vi.type) if vi.HasField("type") else "",
                        field=f"{kind}:{vi.name}",
                        target=("value", vi.name),
                        edit=TypeEdit("type", path, vi.name),
                    )
                )
    else:
        for name in scope.input_names():
            io.rows.append(Row("input", name, target=("value", name)))
        for name in scope.output_names():
            io.rows.append(Row("output", name, target=("value", name)))
    return [s, io]


def _attr_text(attr: AttributeProto) -> str:
    if attr.type == AttributeProto.GRAPH:
        return f"graph '{attr.g.name}' ({len(attr.g.node)} nodes)"
    if attr.type == AttributeProto.GRAPHS:
        return f"{len(attr.graphs)} graphs"
    if attr.type == AttributeProto.TENSOR:
        t = attr.t
        return f"tensor {elem_text(t.data_type)}[{','.join(map(str, t.dims))}]"
    if attr.ref_attr_name:
        return f"ref → {attr.ref_attr_name}"
    try:
        value = helper.get_attribute_value(attr)
    except Exception:
        return "?"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    elif isinstance(value, list) and value and isinstance(value[0], bytes):
        value = [v.decode("utf-8", "replace") for v in value]
    return _short(str(value), 200)


def _schema(doc: Document, node: NodeProto) -> Any:
    try:
        import onnx.defs

        domain = "" if node.domain == "ai.onnx" else node.domain
        opsets = {
            o.domain if o.domain != "ai.onnx" else "": o.version for o in doc.model.opset_import
        }
        return onnx.defs.get_schema(node.op_type, opsets.get(domain, 10_000), domain)
    except Exception:
        return None


def node_sections(doc: Document, path: str, index: int, types: Any = None) -> list[Section]:
    scope = doc.scope(path)
    node = scope.nodes[index]
    schema = _schema(doc, node)
    s = Section(
        "Node",
        [
            Row("op_type", node.op_type, field="op_type"),
            Row("domain", node.domain or "ai.onnx", field="domain"),
            Row("name", node.name, field="name", edit=NodeFieldEdit("node", path, index, "name")),
            Row("graph", readable_path(scope)),
        ],
    )
    if schema is not None:
        s.rows.append(Row("since_version", str(schema.since_version)))
    s.rows.append(
        Row("doc", node.doc_string, field="doc_string", edit=DocEdit("doc", (path, index)))
    )
    if getattr(node, "overload", ""):
        s.rows.append(Row("overload", node.overload))
    for prop in getattr(node, "metadata_props", ()):
        s.rows.append(
            Row(
                f"metadata {prop.key}",
                prop.value,
                field=f"metadata:{prop.key}",
                edit=MetadataEdit("metadata", (path, index), prop.key),
            )
        )
    for dc in getattr(node, "device_configurations", ()):
        shards = len(dc.sharding_spec) if hasattr(dc, "sharding_spec") else 0
        s.rows.append(
            Row("device configuration", f"{dc.configuration_id} ({shards} sharding specs)")
        )
    attrs = Section("Attributes")
    given = {a.name for a in node.attribute}
    specs = attribute_specs(schema, node.op_type)

    def attr_edit(name: str, kind: int) -> AttrEdit:
        spec = specs.get(name)
        kind = spec.type if spec is not None and spec.type else kind
        return AttrEdit("attr", path, index, name, kind, spec.choices if spec else None)

    for a in node.attribute:
        attrs.rows.append(
            Row(
                a.name,
                _attr_text(a),
                note=AttributeProto.AttributeType.Name(a.type).lower(),
                field=f"attribute:{a.name}",
                edit=attr_edit(a.name, a.type) if not a.ref_attr_name else None,
            )
        )
    if schema is not None:
        for name, spec in sorted(schema.attributes.items()):
            if name in given:
                continue
            default = spec.default_value
            if default is not None and default.type != 0:
                attrs.rows.append(
                    Row(
                        name,
                        _attr_text(default),
                        note="default",
                        field=f"attribute:{name}",
                        edit=attr_edit(name, int(spec.type)),
                    )
                )
            elif spec.required:
                attrs.rows.append(
                    Row(
                        name,
                        "(missing)",
                        note="required",
                        field=f"attribute:{name}",
                        edit=attr_edit(name, int(spec.type)),
                    )
                )
    ins = Section("Inputs")
    formal = [p.name for p in schema.inputs] if schema is not None else []
    for k, name in enumerate(node.input):
        label = formal[min(k, len(formal) - 1)] if formal else f"input {k}"
        ins.rows.append(
            Row(
                label,
                name or "(absent)",
                note=_type_note(types, scope, name),
                field=f"input:{k}",
                target=("value", name) if name else None,
                edit=InputEdit("input", path, index, k),
            )
        )
    outs = Section("Outputs")
    formal_out = [p.name for p in schema.outputs] if schema is not None else []
    for k, name in enumerate(node.output):
        label = formal_out[min(k, len(formal_out) - 1)] if formal_out else f"output {k}"
        outs.rows.append(
            Row(
                label,
                name or "(absent)",
                note=_type_note(types, scope, name),
                field=f"output:{k}",
                target=("value", name) if name else None,
                edit=RenameEdit("rename", path, name) if name else None,
            )
        )
    sections = [s, attrs, ins, outs]
    if schema is not None and schema.doc:
        sections.append(Section("Documentation", text=schema.doc.strip()))
    return sections


def _type_note(types: Any, scope: GraphScope, name: str) -> str:
    if types is None or not name:
        return ""
    vt = types.lookup(scope, name)
    if vt is None:
        return ""
    return vt.text + (" (inferred)" if vt.inferred else "")


def value_sections(doc: Document, path: str, name: str, types: Any = None) -> list[Section]:
    scope = doc.scope(path)
    owner = scope.lookup(name) or scope
    s = Section(
        "Value",
        [
            Row("name", name, field="name", edit=RenameEdit("rename", owner.path, name)),
            Row("graph", readable_path(owner)),
        ],
    )
    if types is not None:
        vt = types.lookup(scope, name)
        s.rows.append(
            Row(
                "type",
                vt.text if vt else "unknown",
                note="inferred" if vt and vt.inferred else "",
                field="type",
                edit=TypeEdit("type", owner.path, name) if owner.graph is not None else None,
            )
        )
    if owner.graph is not None:
        is_out = name in owner.output_uses
        s.rows.append(Row("graph output", "yes" if is_out else "no", field="is_output"))
    defs = owner.definitions.get(name, [])
    for d in defs:
        if d.kind == "node_output":
            s.rows.append(
                Row(
                    "producer",
                    f"{owner.nodes[d.index].op_type} {owner.node_label(d.index)}",
                    target=("node", NodeId(owner.path, d.index).item_id),
                )
            )
        else:
            s.rows.append(Row("defined as", d.kind))
    if not defs:
        s.rows.append(Row("defined as", "nothing (undefined name)"))
    for ni, k in owner.consumers.get(name, [])[:200]:
        s.rows.append(
            Row(
                "consumer",
                f"{owner.nodes[ni].op_type} {owner.node_label(ni)} (input {k})",
                target=("node", NodeId(owner.path, ni).item_id),
            )
        )
    sections = [s]
    tensor = _find_tensor(owner, name)
    if tensor is not None:
        sections += tensor_sections(doc, tensor)
    return sections


def _find_tensor(scope: GraphScope, name: str) -> TensorProto | None:
    if scope.graph is None:
        return None
    for t in scope.graph.initializer:
        if t.name == name:
            return t
    return None


def tensor_sections(doc: Document, tensor: TensorProto) -> list[Section]:
    from onnxviz.model.external import is_external
    from onnxviz.model.tensors import tensor_nbytes

    s = Section(
        "Tensor",
        [
            Row("name", tensor.name),
            Row("dtype", elem_text(tensor.data_type)),
            Row("shape", "[" + ", ".join(map(str, tensor.dims)) + "]"),
        ],
    )
    try:
        nbytes = tensor_nbytes(tensor)
        s.rows.append(Row("size", f"{nbytes:,} bytes"))
    except Exception:
        nbytes = 0
    from onnxviz.model.inplace import is_inplace

    if is_inplace(tensor):
        # Embedded in the model file; read from a map of it, not parsed into memory.
        s.rows.append(Row("location", "inside the model"))
    elif is_external(tensor):
        loc = {e.key: e.value for e in tensor.external_data}
        s.rows.append(
            Row("location", f"external: {loc.get('location', '?')} @ {loc.get('offset', '0')}")
        )
    else:
        s.rows.append(Row("location", "inside the model"))
    if nbytes > STATS_MAX_BYTES:
        s.rows.append(Row("values", "too large to summarise here"))
        return [s]
    try:
        arr = doc.tensor_array(tensor)
    except Exception as exc:
        s.rows.append(Row("values", f"cannot decode: {exc}"))
        return [s]
    arr = np.asarray(arr)
    if arr.size and arr.dtype.kind in "biuf":
        data = arr.astype(np.float64, copy=False)
        finite = data[np.isfinite(data)] if arr.dtype.kind == "f" else data
        if finite.size:
            s.rows.append(Row("min", f"{finite.min():.6g}"))
            s.rows.append(Row("max", f"{finite.max():.6g}"))
            s.rows.append(Row("mean", f"{finite.mean():.6g}"))
        if arr.dtype.kind == "f" and finite.size != data.size:
            s.rows.append(Row("non-finite", str(int(data.size - finite.size))))
    flat = arr.reshape(-1)[:PREVIEW_VALUES]
    preview = ", ".join(str(v) for v in flat.tolist())
    if arr.size > PREVIEW_VALUES:
        preview += f", … ({arr.size:,} values)"
    return [s, Section("Values", text=preview)]
