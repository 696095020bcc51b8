"""Random models and random planted changes, for the diff's acceptance tests.

A model is a random DAG over values of one shape [2, W]: unary ops (some with an
attribute), binary ops between two earlier values, MatMul and Add with a weight of
their own (every weight drawn at random, so no two are equal).  A planted change is
made on a copy and returned with what the diff must report: the kind, and the
A-side or B-side node name (node names survive the planting; the diff may rename
nothing since the tests rename values and nodes afterwards through `rename_everything`,
so the expected names are kept on the side that is not renamed).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.model import diff_corpus as C

UNARY = ("Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp")
WITH_ATTR = ("LeakyRelu", "Softmax", "Elu")
BINARY = ("Add", "Mul", "Sub", "Max")


def random_graph_nodes(
    rnd: random.Random, count: int, width: int, prefix: str, first: str
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str]:
    """(nodes, initializers, the value that ends the graph): ``count`` nodes fed from
    the value ``first``; every value is read by a later node, so none is dead."""
    rng = np.random.default_rng(rnd.randrange(2**32))
    values = [first]
    unread = {first}
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    seen: set[tuple[object, ...]] = set()
    for i in range(count):
        name = f"{prefix}n{i}"
        out = f"{prefix}v{i}"
        # Prefer an unread value, so the graph stays connected and nothing is dead.
        pick = sorted(unread)[0] if unread and rnd.random() < 0.6 else rnd.choice(values)
        kind = rnd.random()
        if kind < 0.25:
            w = f"{prefix}w{i}"
            inits.append(
                numpy_helper.from_array(
                    rng.standard_normal((width, width)).astype(np.float32) * 0.3, w
                )
            )
            node = helper.make_node("MatMul", [pick, w], [out], name=name)
        elif kind < 0.4:
            bias = f"{prefix}b{i}"
            inits.append(
                numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), bias)
            )
            node = helper.make_node("Add", [pick, bias], [out], name=name)
        elif kind < 0.6 and len(values) > 1:
            other = rnd.choice([v for v in values if v != pick])
            node = helper.make_node(rnd.choice(BINARY), [pick, other], [out], name=name)
            unread.discard(other)
        elif kind < 0.8:
            op = rnd.choice(WITH_ATTR)
            attrs: dict[str, object] = (
                {"axis": -1} if op == "Softmax" else {"alpha": round(rnd.uniform(0.05, 0.9), 2)}
            )
            node = helper.make_node(op, [pick], [out], name=name, **attrs)
        else:
            node = helper.make_node(rnd.choice(UNARY), [pick], [out], name=name)
        key = (node.op_type, tuple(node.input), node.attribute[0].f if node.attribute else None)
        if key in seen:
            # Two nodes computing the same thing from the same values can swap places
            # in any diff: a planted change next to them would have two right answers.
            w = f"{prefix}w{i}"
            inits.append(
                numpy_helper.from_array(
                    rng.standard_normal((width, width)).astype(np.float32) * 0.3, w
                )
            )
            node = helper.make_node("MatMul", [pick, w], [out], name=name)
        seen.add(key)
        unread.discard(pick)
        nodes.append(node)
        values.append(out)
        unread.add(out)
    # Sum what no node reads into the end value, so every node counts.
    last = values[-1]
    rest = sorted(unread - {last})
    for k, v in enumerate(rest):
        out = f"{prefix}sum{k}"
        nodes.append(helper.make_node("Add", [last, v], [out], name=f"{prefix}sumnode{k}"))
        last = out
    return nodes, inits, last


def random_model(seed: int, count: int = 12, width: int = 4) -> onnx.ModelProto:
    rnd = random.Random(seed)
    nodes, inits, last = random_graph_nodes(rnd, count, width, "", "x")
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    return C._model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, width])],
        inits,
    )


@dataclass
class Planted:
    kind: str  # attribute, input, added, removed, weight
    node: str  # the node's name (A's for attribute/input/removed/weight, B's for added)
    detail: str = ""  # attribute name, "input k", or the weight's name


def _graph_of(model: onnx.ModelProto, where: str) -> onnx.GraphProto:
    """``where``: "main", "if" for the then-branch of the If node named "cond", or
    "loop" for the body of the Loop node named "loop"."""
    if where == "main":
        return model.graph
    if where == "loop":
        node = next(n for n in model.graph.node if n.name == "loop")
        return next(a.g for a in node.attribute if a.name == "body")
    node = next(n for n in model.graph.node if n.name == "cond")
    return next(a.g for a in node.attribute if a.name == "then_branch")


def plant(model: onnx.ModelProto, kind: str, seed: int, where: str = "main") -> Planted | None:
    """Plant one change of ``kind`` in ``model`` (in place), in the main graph or in a
    nested body; None when this model offers no place for it."""
    rnd = random.Random(seed)
    g = _graph_of(model, where)
    nodes = list(g.node)
    made = {o: n for n in nodes for o in n.output}
    inits = {t.name for t in g.initializer}
    if kind == "attribute":
        cands = [n for n in nodes if n.op_type in ("LeakyRelu", "Elu")]
        if not cands:
            return None
        n = rnd.choice(cands)
        n.attribute[0].f += 0.5
        return Planted("attribute", n.name, "alpha")
    if kind == "input":
        order = {n.name: i for i, n in enumerate(nodes)}
        cands = []
        for n in nodes:
            for k, x in enumerate(n.input):
                if x in inits or x not in made:
                    continue
                # an earlier value that is neither this one nor read by n already
                earlier = [
                    m.output[0]
                    for m in nodes[: order[n.name]]
                    if m.output[0] != x and m.output[0] not in n.input and m is not made[x]
                ]
                if earlier:
                    cands.append((n, k, earlier))
        if not cands:
            return None
        n, k, earlier = rnd.choice(cands)
        n.input[k] = rnd.choice(earlier)
        return Planted("input", n.name, f"input {k}")
    outputs = {o.name for o in g.output}
    if kind == "added":
        n = rnd.choice([n for n in nodes if n.output[0] not in outputs])
        old = n.output[0]
        fresh = old + "__planted"
        n.output[0] = fresh
        # An op the models never hold: next to a node of its own op, which of the two
        # was inserted would have two right answers.
        new = helper.make_node("Softsign", [fresh], [old], name="planted")
        at = nodes.index(n) + 1
        g.node.insert(at, new)
        return Planted("added", "planted")
    if kind == "removed":
        readers: dict[str, list[onnx.NodeProto]] = {}
        for m in nodes:
            for x in m.input:
                readers.setdefault(x, []).append(m)
        cands = [
            n
            for n in nodes
            if n.op_type in UNARY
            and n.input[0] in made
            and n.output[0] not in outputs
            # next to a node of its own op (Abs -> Abs), removing either is one answer
            and made[n.input[0]].op_type != n.op_type
            and all(m.op_type != n.op_type for m in readers.get(n.output[0], ()))
        ]
        if not cands:
            return None
        n = rnd.choice(cands)
        src, dst = n.input[0], n.output[0]
        for m in nodes:
            m.input[:] = [src if x == dst else x for x in m.input]
        g.node.remove(n)
        return Planted("removed", n.name)
    if kind == "weight":
        cands = [t for t in g.initializer]
        if not cands:
            return None
        t = rnd.choice(cands)
        arr = numpy_helper.to_array(t).copy()
        arr.flat[rnd.randrange(arr.size)] += 1.0
        t.CopyFrom(numpy_helper.from_array(arr, t.name))
        reader = next(n for n in nodes if t.name in n.input)
        return Planted("weight", reader.name, t.name)
    raise ValueError(kind)


def if_model(seed: int, count: int = 8, width: int = 4) -> onnx.ModelProto:
    """x -> a random main part -> If(cond) whose then-branch is a random graph over the
    outer value (the else branch an Identity) -> y."""
    rnd = random.Random(seed)
    pre, inits, last = random_graph_nodes(rnd, 3, width, "m", "x")
    body_nodes, body_inits, body_last = random_graph_nodes(rnd, count, width, "t", last)
    body_nodes.append(helper.make_node("Identity", [body_last], ["then_out"], name="t_out"))
    then_g = helper.make_graph(
        body_nodes,
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, width])],
        body_inits,
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", [last], ["else_out"], name="e_out")],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, width])],
    )
    nodes = pre + [
        helper.make_node("If", ["c"], ["y"], name="cond", then_branch=then_g, else_branch=else_g)
    ]
    return C._model(
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, width]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, width])],
        inits,
    )


def loop_model(seed: int, count: int = 8, width: int = 4) -> onnx.ModelProto:
    """x -> a random main part -> Loop(trip) whose body is a random graph over the
    loop-carried value -> y."""
    rnd = random.Random(seed)
    pre, inits, last = random_graph_nodes(rnd, 3, width, "m", "x")
    body_nodes, body_inits, body_last = random_graph_nodes(rnd, count, width, "l", "s")
    body_nodes += [
        helper.make_node("Identity", ["cond_in"], ["cond_out"], name="l_cond"),
        helper.make_node("Identity", [body_last], ["s_out"], name="l_out"),
    ]
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, width]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [2, width]),
        ],
        body_inits,
    )
    nodes = pre + [helper.make_node("Loop", ["trip", "", last], ["y"], name="loop", body=body)]
    return C._model(
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, width]),
            helper.make_tensor_value_info("trip", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, width])],
        inits,
    )
