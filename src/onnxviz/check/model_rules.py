"""Model rules (M): ir_version, metadata keys, training bindings, IR 11 multi-device
configuration (model configurations and the node-level references into them)."""

from __future__ import annotations

from collections import Counter

import onnx
from onnx import GraphProto, ModelProto

from onnxviz.check.context import CheckContext
from onnxviz.check.registry import diag
from onnxviz.model.diagnostics import Diagnostic
from onnxviz.model.scope_names import readable_path
from onnxviz.model.scopes import GraphScope


def _dup_keys(props: object) -> list[str]:
    counts = Counter(p.key for p in props)  # type: ignore[attr-defined]
    return sorted(k for k, c in counts.items() if c > 1)


def model_rules(ctx: CheckContext) -> list[Diagnostic]:
    m: ModelProto = ctx.model
    out: list[Diagnostic] = []
    ir = ctx.ir_version
    if ir < 1 or ir > onnx.IR_VERSION:
        why = (
            "is missing"
            if ir == 0
            else f"is {ir}, which the onnx package (IR {onnx.IR_VERSION}) does not know"
        )
        out.append(diag("M001", f"The model's ir_version {why}.", field="ir_version"))
    for key in _dup_keys(m.metadata_props):
        out.append(
            diag(
                "M002",
                f"Model metadata key '{key}' appears more than once.",
                field="metadata_props",
            )
        )
    out.extend(_training(ctx))
    out.extend(_configurations(ctx))
    return out


def scope_rules(ctx: CheckContext, scope: GraphScope) -> list[Diagnostic]:
    props = scope.graph.metadata_props if scope.graph is not None else scope.function.metadata_props  # type: ignore[union-attr]
    out = [
        diag(
            "M002",
            f"Metadata key '{k}' appears more than once.",
            scope.path,
            field="metadata_props",
        )
        for k in _dup_keys(props)
    ]
    if scope.graph is not None and len(props) and 0 < ctx.ir_version < 10:
        out.append(
            diag(
                "F005",
                f"Graph '{readable_path(scope)}' has metadata_props, which need IR version 10 (the model has {ctx.ir_version}).",
                scope.path,
                field="metadata_props",
            )
        )
    return out


def _training(ctx: CheckContext) -> list[Diagnostic]:
    m = ctx.model
    out: list[Diagnostic] = []
    if not len(m.training_info):
        return out
    if 0 < ctx.ir_version < 7:
        out.append(
            diag(
                "M006",
                f"The model has training_info, which needs IR version 7 (the model has {ctx.ir_version}).",
                field="training_info",
            )
        )
    main_inits = {t.name for t in m.graph.initializer}
    for ti_index, ti in enumerate(m.training_info):
        algo_inits = {t.name for t in ti.algorithm.initializer}
        for field_name, binding, graph in (
            ("initialization_binding", ti.initialization_binding, ti.initialization),
            ("update_binding", ti.update_binding, ti.algorithm),
        ):
            fld = f"training_info[{ti_index}].{field_name}"
            outputs = {v.name for v in graph.output} if isinstance(graph, GraphProto) else set()
            if field_name == "update_binding":
                outputs |= {
                    v.name for v in m.graph.output
                }  # the algorithm implicitly includes the inference graph
            keys: Counter[str] = Counter()
            for entry in binding:
                keys[entry.key] += 1
                if entry.key not in main_inits and entry.key not in algo_inits:
                    out.append(
                        diag(
                            "M003",
                            f"{field_name} key '{entry.key}' is not an initializer of the main or the algorithm graph.",
                            value=entry.key,
                            field=fld,
                        )
                    )
                if entry.value not in outputs:
                    which = (
                        "initialization" if field_name == "initialization_binding" else "algorithm"
                    )
                    out.append(
                        diag(
                            "M004",
                            f"{field_name} value '{entry.value}' is not an output of the {which} graph.",
                            value=entry.value,
                            field=fld,
                        )
                    )
            for k, c in keys.items():
                if c > 1:
                    out.append(
                        diag("M005", f"{field_name} binds '{k}' {c} times.", value=k, field=fld)
                    )
    return out


def _configurations(ctx: CheckContext) -> list[Diagnostic]:
    m = ctx.model
    out: list[Diagnostic] = []
    configs = list(getattr(m, "configuration", ()))
    if not configs:
        return out
    if 0 < ctx.ir_version < 11:
        out.append(
            diag(
                "M007",
                f"The model has {len(configs)} device configurations, which need IR version 11 "
                f"(the model has {ctx.ir_version}).",
                field="configuration",
            )
        )
    names: Counter[str] = Counter()
    for i, c in enumerate(configs):
        fld = f"configuration[{i}]"
        names[c.name] += 1
        if not c.name:
            out.append(diag("M008", f"Device configuration #{i} has no name.", field=fld))
        if c.num_devices <= 0:
            out.append(
                diag(
                    "M008",
                    f"Device configuration '{c.name}' has num_devices {c.num_devices}.",
                    field=fld,
                )
            )
        if len(c.device) and len(c.device) != c.num_devices:
            out.append(
                diag(
                    "M008",
                    f"Device configuration '{c.name}' names {len(c.device)} devices but num_devices is {c.num_devices}.",
                    field=fld,
                )
            )
    for name, count in names.items():
        if name and count > 1:
            out.append(
                diag(
                    "M008",
                    f"Device configuration name '{name}' is used {count} times.",
                    field="configuration",
                )
            )
    return out


def node_rules(ctx: CheckContext, scope: GraphScope, index: int) -> list[Diagnostic]:
    node = scope.nodes[index]
    out: list[Diagnostic] = []
    if len(node.metadata_props):
        label = scope.node_label(index)
        for k in _dup_keys(node.metadata_props):
            out.append(
                diag(
                    "M002",
                    f"Metadata key '{k}' of node '{label}' appears more than once.",
                    scope.path,
                    node=label,
                    field="metadata_props",
                )
            )
        if 0 < ctx.ir_version < 10:
            out.append(
                diag(
                    "F005",
                    f"Node '{label}' has metadata_props, which need IR version 10 (the model has {ctx.ir_version}).",
                    scope.path,
                    node=label,
                    field="metadata_props",
                )
            )
    dcs = getattr(node, "device_configurations", ())
    if len(dcs):
        out.extend(_node_devices(ctx, scope, index))
    return out


def _node_devices(ctx: CheckContext, scope: GraphScope, index: int) -> list[Diagnostic]:
    node = scope.nodes[index]
    label = scope.node_label(index)
    path = scope.path
    out: list[Diagnostic] = []
    configs = {c.name: c for c in ctx.model.configuration}
    if 0 < ctx.ir_version < 11:
        out.append(
            diag(
                "M007",
                f"Node '{label}' has device configurations, which need IR version 11 (the model has {ctx.ir_version}).",
                path,
                node=label,
                field="device_configurations",
            )
        )
    io = set(node.input) | set(node.output)
    for dc in node.device_configurations:
        cfg = configs.get(dc.configuration_id)
        if cfg is None:
            out.append(
                diag(
                    "M009",
                    f"Node '{label}' refers to device configuration '{dc.configuration_id}', which the model does not define.",
                    path,
                    node=label,
                    field="device_configurations",
                )
            )
        for spec in dc.sharding_spec:
            tn = spec.tensor_name
            if tn not in io or not tn:
                out.append(
                    diag(
                        "M010",
                        f"A sharding spec of node '{label}' names '{tn}', which is not an input or output of the node.",
                        path,
                        node=label,
                        value=tn or None,
                        field="sharding_spec",
                    )
                )
            if cfg is not None:
                ids = list(spec.device) + [
                    d for e in spec.index_to_device_group_map for d in e.value
                ]
                bad = [d for d in ids if d < 0 or d >= cfg.num_devices]
                if bad:
                    out.append(
                        diag(
                            "M011",
                            f"A sharding spec of node '{label}' uses device {bad[0]}, but configuration "
                            f"'{cfg.name}' has {cfg.num_devices} devices.",
                            path,
                            node=label,
                            value=tn or None,
                            field="sharding_spec",
                        )
                    )
            rank = _rank(ctx, scope, tn) if tn else None
            for sd in spec.sharded_dim:
                if rank is not None and not -rank <= sd.axis < rank:
                    out.append(
                        diag(
                            "M012",
                            f"Node '{label}' shards axis {sd.axis} of '{tn}', whose rank is {rank}.",
                            path,
                            node=label,
                            value=tn,
                            field="sharded_dim",
                        )
                    )
                for ss in sd.simple_sharding:
                    if ss.num_shards <= 0:
                        out.append(
                            diag(
                                "M012",
                                f"Node '{label}' splits an axis of '{tn}' into {ss.num_shards} shards.",
                                path,
                                node=label,
                                value=tn,
                                field="simple_sharding",
                            )
                        )
    return out


def _rank(ctx: CheckContext, scope: GraphScope, name: str) -> int | None:
    tp = ctx.value_type(scope, name)
    if (
        tp is None
        or tp.WhichOneof("value") != "tensor_type"
        or not tp.tensor_type.HasField("shape")
    ):
        return None
    return len(tp.tensor_type.shape.dim)
