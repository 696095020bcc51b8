"""Graph surgery: compound edits built from Document commands (one undo step each).

Each function checks its preconditions, raises EditError with a reason when the edit
cannot be done, and otherwise executes one `MacroCommand` on the document.  The
analysis (who consumes what, what becomes dead) uses the document's scope index.
"""

from __future__ import annotations

from collections import deque

from onnx import ModelProto, NodeProto, TensorProto, TypeProto, ValueInfoProto, helper

from onnxviz.errors import EditError
from onnxviz.model import hooks
from onnxviz.model.changes import ChangeSet
from onnxviz.model.commands import (
    AddGraphEntry,
    AddNode,
    Command,
    MacroCommand,
    RemoveGraphEntry,
    RemoveNode,
    RewireInput,
)
from onnxviz.model.document import Document
from onnxviz.model.scope_names import readable_graph_path
from onnxviz.model.scopes import GraphScope


def _declared_type(scope: GraphScope, name: str) -> TypeProto | None:
    """The type declared for ``name`` in this graph or an enclosing one, if any."""
    s: GraphScope | None = scope
    while s is not None:
        g = s.graph
        if g is not None:
            for container in (g.input, g.output, g.value_info):
                for vi in container:
                    if vi.name == name and vi.HasField("type"):
                        return vi.type
            for t in g.initializer:
                if t.name == name:
                    return helper.make_tensor_type_proto(t.data_type, list(t.dims))
        s = s.parent
    return None


def _uses_in_nested(scope: GraphScope, name: str) -> list[tuple[GraphScope, int, int]]:
    """(scope, node index, input index) of every use of ``name`` in graphs nested in
    ``scope`` that see it (do not redefine it)."""
    found: list[tuple[GraphScope, int, int]] = []
    stack = [c for c in scope.children if name in c.free_names]
    while stack:
        sub = stack.pop()
        if sub.defines(name):
            continue
        found += [(sub, ni, ii) for ni, ii in sub.consumers.get(name, ())]
        stack.extend(c for c in sub.children if name in c.free_names)
    return found


def _is_used(scope: GraphScope, name: str) -> bool:
    return bool(
        scope.consumers.get(name) or name in scope.output_uses or _uses_in_nested(scope, name)
    )


def _run(doc: Document, label: str, commands: list[Command]) -> ChangeSet:
    if not commands:
        raise EditError(f"{label}: nothing to do")
    return doc.execute(MacroCommand(commands, label))


def bypass_node(doc: Document, graph_path: str, node_index: int) -> ChangeSet:
    """Delete a node and reconnect the consumers of its first output to its first input
    (refused when their declared types differ)."""
    scope = doc.scope(graph_path)
    node = scope.nodes[node_index]
    label = scope.node_label(node_index)
    if not node.input or not node.input[0] or not node.output or not node.output[0]:
        raise EditError(
            f"cannot bypass '{label}': it needs a first input and a first output",
            graph_path=graph_path,
            node=label,
        )
    src, out = node.input[0], node.output[0]
    t_in, t_out = _declared_type(scope, src), _declared_type(scope, out)
    if (
        t_in is not None
        and t_out is not None
        and t_in.SerializeToString() != t_out.SerializeToString()
    ):
        from onnxviz.model.types import type_to_text

        raise EditError(
            f"cannot bypass '{label}': its input '{src}' is {type_to_text(t_in)} but its output "
            f"'{out}' is {type_to_text(t_out)}",
            graph_path=graph_path,
            node=label,
        )
    for extra in node.output[1:]:
        if extra and _is_used(scope, extra):
            raise EditError(
                f"cannot bypass '{label}': its output '{extra}' is used too",
                graph_path=graph_path,
                node=label,
            )
    cmds: list[Command] = []
    for ni, ii in scope.consumers.get(out, ()):
        cmds.append(RewireInput(scope.path, ni, ii, src))
    for sub, ni, ii in _uses_in_nested(scope, out):
        cmds.append(RewireInput(sub.path, ni, ii, src))
    if out in scope.output_uses and scope.graph is not None:
        # The graph output now names the bypassed node's input.
        for vi in scope.graph.output:
            if vi.name == out:
                new = ValueInfoProto()
                new.CopyFrom(vi)
                new.name = src
                index = list(scope.output_names()).index(out)
                cmds.append(RemoveGraphEntry(scope.path, "output", out))
                cmds.append(AddGraphEntry(scope.path, "output", new, index))
                break
    cmds.append(RemoveNode(scope.path, node_index))
    return _run(doc, f"Bypass {node.op_type} '{label}'", cmds)


def _has_live_output(scope: GraphScope, node: NodeProto, dead: set[int]) -> bool:
    """Whether something outside ``dead`` (a node, a graph output, a nested graph) uses
    one of the node's outputs."""
    for out in node.output:
        if not out:
            continue
        if out in scope.output_uses or _uses_in_nested(scope, out):
            return True
        if any(c not in dead for c, _ in scope.consumers.get(out, ())):
            return True
    return False


def dead_ancestors(scope: GraphScope, node_index: int) -> list[int]:
    """Nodes (indexes, including ``node_index``) that become dead when it is deleted:
    ancestors none of whose outputs is used by anything that survives."""
    nodes = scope.nodes
    doomed = {node_index}
    queue = deque([node_index])
    while queue:
        ni = queue.popleft()
        for name in nodes[ni].input:
            if not name or name not in scope.producer:
                continue
            pi = scope.producer[name][0]
            if pi in doomed:
                continue
            if not _has_live_output(scope, nodes[pi], doomed):
                doomed.add(pi)
                queue.append(pi)
    return sorted(doomed)


def delete_with_ancestors(doc: Document, graph_path: str, node_index: int) -> ChangeSet:
    """Delete a node and every ancestor that only fed it (initializers stay)."""
    scope = doc.scope(graph_path)
    label = scope.node_label(node_index)
    doomed = dead_ancestors(scope, node_index)
    cmds: list[Command] = [RemoveNode(scope.path, i) for i in sorted(doomed, reverse=True)]
    return _run(doc, f"Delete '{label}' and {len(doomed) - 1} dead ancestors", cmds)


def insert_on_edge(
    doc: Document,
    graph_path: str,
    value: str,
    op_type: str,
    *,
    consumer: tuple[int, int] | None = None,
    domain: str = "",
    name: str | None = None,
    attributes: dict[str, object] | None = None,
) -> ChangeSet:
    """Insert a one-input node on the edge(s) leaving ``value``: the new node consumes
    it and the chosen consumer (node index, input index), or all of them, read the new
    node's output instead."""
    scope = doc.scope(graph_path)
    if scope.lookup(value) is None:
        raise EditError(
            f"no value named '{value}' is visible in graph '{readable_graph_path(doc, graph_path)}'"
        )
    base = f"{value}_{op_type.lower()}"
    new_out, k = base, 1
    taken = scope.visible_names()
    while new_out in taken or any(s.defines(new_out) for s in scope.descendants()):
        k += 1
        new_out = f"{base}_{k}"
    node = helper.make_node(
        op_type, [value], [new_out], name=name or new_out, domain=domain, **(attributes or {})
    )
    targets = [consumer] if consumer is not None else list(scope.consumers.get(value, ()))
    # Put the node right after the producer (or first): the graph stays topologically sorted.
    producer = scope.producer.get(value)
    position = producer[0] + 1 if producer else 0
    cmds: list[Command] = [AddNode(scope.path, node, position)]
    for ni, ii in targets:
        shifted = ni + 1 if ni >= position else ni
        cmds.append(RewireInput(scope.path, shifted, ii, new_out))
    return _run(doc, f"Insert {op_type} after '{value}'", cmds)


def _value_type(doc: Document, scope: GraphScope, name: str) -> TypeProto | None:
    declared = _declared_type(scope, name)
    if declared is not None:
        return declared
    # Shape inference runs only in check's worker process; check hands it over (hooks).
    infer = hooks.TYPE_INFERENCE
    if scope.kind != "main" or infer is None:
        return None
    return infer(doc.model).get("main", {}).get(name)


def make_graph_output(doc: Document, graph_path: str, value: str) -> ChangeSet:
    """Expose an intermediate value as a graph output (typed when known)."""
    scope = doc.scope(graph_path)
    if scope.lookup(value) is None:
        raise EditError(
            f"no value named '{value}' in graph '{readable_graph_path(doc, graph_path)}'"
        )
    if value in scope.output_uses:
        raise EditError(
            f"'{value}' is already an output of graph '{readable_graph_path(doc, graph_path)}'"
        )
    vi = ValueInfoProto(name=value)
    tp = _value_type(doc, scope, value)
    if tp is not None:
        vi.type.CopyFrom(tp)
    return _run(doc, f"Make '{value}' an output", [AddGraphEntry(scope.path, "output", vi)])


def remove_graph_output(doc: Document, graph_path: str, value: str) -> ChangeSet:
    return _run(doc, f"Remove output '{value}'", [RemoveGraphEntry(graph_path, "output", value)])


def initializer_to_input(doc: Document, graph_path: str, name: str) -> ChangeSet:
    """Turn an initializer into a graph input of the same type (its data is dropped;
    undo brings it back)."""
    scope = doc.scope(graph_path)
    graph = scope.graph
    if graph is None:
        raise EditError("function bodies have no initializers")
    tensor = next((t for t in graph.initializer if t.name == name), None)
    if tensor is None:
        raise EditError(
            f"graph '{readable_graph_path(doc, graph_path)}' has no initializer '{name}'"
        )
    cmds: list[Command] = [RemoveGraphEntry(scope.path, "initializer", name)]
    if name not in scope.input_names():
        vi = helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims))
        cmds.append(AddGraphEntry(scope.path, "input", vi))
    return _run(doc, f"Make initializer '{name}' an input", cmds)


def input_to_initializer(doc: Document, graph_path: str, tensor: TensorProto) -> ChangeSet:
    """Give a graph input constant data: it becomes an initializer."""
    scope = doc.scope(graph_path)
    if tensor.name not in scope.input_names():
        raise EditError(
            f"graph '{readable_graph_path(doc, graph_path)}' has no input '{tensor.name}'"
        )
    cmds: list[Command] = [RemoveGraphEntry(scope.path, "input", tensor.name)]
    cmds.append(AddGraphEntry(scope.path, "initializer", tensor))
    return _run(doc, f"Make input '{tensor.name}' an initializer", cmds)


def unused(doc: Document) -> dict[str, tuple[list[int], list[str]]]:
    """Per graph path: (node indexes, initializer names) that nothing uses, transitively."""
    result: dict[str, tuple[list[int], list[str]]] = {}
    for scope in doc.scopes():
        nodes = scope.nodes
        dead: set[int] = set()
        changed = True
        while changed:
            changed = False
            for ni, node in enumerate(nodes):
                if ni in dead:
                    continue
                if node.output and not _has_live_output(scope, node, dead):
                    dead.add(ni)
                    changed = True
        inits = []
        for name in scope.initializer_names():
            users = [c for c, _ in scope.consumers.get(name, ()) if c not in dead]
            if not users and name not in scope.output_uses and not _uses_in_nested(scope, name):
                inits.append(name)
        if dead or inits:
            result[scope.path] = (sorted(dead), inits)
    return result


def clean_up(doc: Document) -> ChangeSet:
    """Remove every unused node and initializer, in every graph, as one undo step."""
    plan = unused(doc)
    cmds: list[Command] = []
    # Nested graphs first, and nodes from the end, so earlier indexes stay valid.
    for path in sorted(plan, key=lambda p: -p.count("/")):
        nodes, inits = plan[path]
        cmds += [RemoveNode(path, i) for i in sorted(nodes, reverse=True)]
        cmds += [RemoveGraphEntry(path, "initializer", n) for n in inits]
    n_nodes = sum(len(v[0]) for v in plan.values())
    n_inits = sum(len(v[1]) for v in plan.values())
    return _run(doc, f"Clean up {n_nodes} nodes and {n_inits} initializers", cmds)


def extract(doc: Document, inputs: list[str], outputs: list[str]) -> ModelProto:
    """A new model computing ``outputs`` of the main graph from ``inputs`` (and the
    initializers it needs).  Raises EditError when an output needs a value that is
    neither computed inside nor given."""
    scope = doc.main_scope
    graph = scope.graph
    assert graph is not None
    given = set(inputs)
    inits = {t.name: t for t in graph.initializer}
    needed_nodes: set[int] = set()
    needed_inits: set[str] = set()
    queue = deque(outputs)
    seen: set[str] = set()
    while queue:
        name = queue.popleft()
        if name in seen or not name:
            continue
        seen.add(name)
        if name in given:
            continue
        if name in inits:
            needed_inits.add(name)
            continue
        if name not in scope.producer:
            raise EditError(
                f"cannot extract: '{name}' is needed but is neither computed between the "
                "chosen values nor one of the chosen inputs"
            )
        ni = scope.producer[name][0]
        if ni in needed_nodes:
            continue
        needed_nodes.add(ni)
        node = scope.nodes[ni]
        queue.extend(node.input)
        for sub in scope.children:
            if sub.owner_node_index == ni:
                queue.extend(sub.free_names)
    types: dict[str, ValueInfoProto] = {}
    infer = hooks.TYPE_INFERENCE
    inferred = infer(doc.model).get(scope.path, {}) if infer else {}
    for name, tp in inferred.items():
        types[name] = ValueInfoProto(name=name, type=tp)
    for vi in (*graph.input, *graph.value_info, *graph.output):  # declared ones win
        if vi.HasField("type"):
            types[vi.name] = vi

    def info(name: str) -> ValueInfoProto:
        vi = ValueInfoProto()
        if name in types:
            vi.CopyFrom(types[name])
        vi.name = name
        return vi

    nodes: list[NodeProto] = [scope.nodes[i] for i in sorted(needed_nodes)]
    new_graph = helper.make_graph(
        nodes,
        f"{graph.name or 'graph'}_extract",
        [info(n) for n in inputs],
        [info(n) for n in outputs],
        [inits[n] for n in sorted(needed_inits)],
    )
    model = helper.make_model(new_graph, opset_imports=list(doc.model.opset_import))
    model.ir_version = doc.model.ir_version
    model.functions.extend(doc.model.functions)
    return model
