"""The diff's per-graph index (model/diff/index.py) built by numpy and C-level maps:
edges, topological order and consumers checked against plain loops over the nodes,
on random DAGs re-sorted at random, and on graphs with a cycle."""

from __future__ import annotations

import random

import numpy as np
import onnx
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from onnxviz.model.diff.index import index_graph


def _random_graph(seed: int, n: int, shuffle: bool) -> onnx.GraphProto:
    """n nodes, each reading up to three earlier values (graph input, a weight, or an
    output of an earlier node; repeats and left-out optional inputs included)."""
    rnd = random.Random(seed)
    values = ["x", "w"]
    nodes = []
    for i in range(n):
        ins = [rnd.choice(values) for _ in range(rnd.randint(1, 3))]
        if rnd.random() < 0.1:
            ins.insert(1, "")
        outs = [f"v{i}_{k}" for k in range(rnd.randint(1, 2))]
        nodes.append(helper.make_node("Sum", ins, outs, name=f"n{i}"))
        values += outs
    if shuffle:
        rnd.shuffle(nodes)
    w = helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])
    return helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info(values[-1], TensorProto.FLOAT, [1])],
        [w],
    )


def _plain_edges(graph: onnx.GraphProto) -> set[tuple[int, int, int]]:
    made: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for name in node.output:
            made.setdefault(name, i)
    return {
        (made[x], i, k)
        for i, node in enumerate(graph.node)
        for k, x in enumerate(node.input)
        if x in made
    }


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 60), st.booleans())
def test_edges_consumers_and_order_agree_with_plain_loops(seed: int, n: int, shuffle: bool) -> None:
    graph = _random_graph(seed, n, shuffle)
    gi = index_graph("main", graph)
    src, dst, slot = gi.edges()
    assert set(zip(src.tolist(), dst.tolist(), slot.tolist())) == _plain_edges(graph)
    assert len(src) == len(_plain_edges(graph))
    uses: dict[str, list[tuple[int, int]]] = {}
    for i, node in enumerate(graph.node):
        for k, x in enumerate(node.input):
            if x:
                uses.setdefault(x, []).append((i, k))
    assert gi.consumers == uses
    order = list(gi.topological_order())
    assert sorted(order) == list(range(len(graph.node)))
    pos = np.empty(len(order), np.int64)
    pos[order] = np.arange(len(order))
    assert bool((pos[src] < pos[dst]).all())


def test_a_cycle_goes_last_in_file_order_and_the_rest_stays_sorted() -> None:
    nodes = [
        helper.make_node("Add", ["c", "b"], ["d"], name="loop_a"),  # in the cycle
        helper.make_node("Relu", ["a"], ["b"], name="after_first"),
        helper.make_node("Neg", ["d"], ["c"], name="loop_b"),  # in the cycle
        helper.make_node("Abs", ["x"], ["a"], name="first"),
        helper.make_node("Exp", ["e"], ["e"], name="self_loop"),  # holds nothing back
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], []
    )
    order = list(index_graph("main", graph).topological_order())
    assert order[-2:] == [0, 2]
    assert set(order[:3]) == {1, 3, 4}
    assert order.index(3) < order.index(1)


def test_node_inputs_share_the_string_of_what_they_read() -> None:
    graph = _random_graph(7, 30, True)
    gi = index_graph("main", graph)
    for node in gi.nodes:
        for x in node.input:
            if x in gi.producer:
                p = gi.producer[x]
                assert gi.nodes[p[0]].output[p[1]] is x
            elif x in gi.initializers:
                assert next(k for k in gi.initializers if k == x) is x


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_local_keys_tell_apart_exactly_the_nodes_a_plain_tuple_does(seed: int) -> None:
    """The matcher's per-node local key (op, attributes, input count, the weight read
    at each slot), summed by numpy, against the plain tuple it stands for."""
    from onnxviz.model.diff.matching import Matcher

    rnd = random.Random(seed)
    weights = [helper.make_tensor(f"w{k}", TensorProto.FLOAT, [1], [float(k)]) for k in range(3)]
    names = ["x", "w0", "w1", "w2"]
    nodes = []
    for i in range(40):
        ins = [rnd.choice(names) for _ in range(rnd.randint(1, 3))]
        op = rnd.choice(["Sum", "Max"])
        attrs = {"note": rnd.randint(0, 1)} if rnd.random() < 0.3 else {}
        nodes.append(helper.make_node(op, ins, [f"v{i}"], name=f"n{i}", **attrs))
        names.append(f"v{i}")
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [1])],
        weights,
    )
    gi = index_graph("main", graph)
    m = Matcher(gi, gi, {})
    m.run()
    local = m.ha.local.tolist()
    plain = [
        (
            n.op_type,
            tuple((a.name, a.i) for a in n.attribute),
            tuple(x if x.startswith("w") else None for x in n.input),
        )
        for n in graph.node
    ]
    for i in range(len(plain)):
        for j in range(len(plain)):
            assert (local[i] == local[j]) == (plain[i] == plain[j])
