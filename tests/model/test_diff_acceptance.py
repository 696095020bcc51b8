"""Acceptance of the structural diff on pairs it never saw: random models (hypothesis
draws the seeds) with one random planted change each, found on the right node and
nothing else reported; renamed and re-sorted copies with nothing reported."""

from __future__ import annotations

import onnx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from onnxviz.model.diff import GraphDiff, diff
from tests.model import diff_corpus as C
from tests.model import diff_random as R

KINDS = ["attribute", "input", "added", "removed", "weight"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _summary(g: GraphDiff) -> dict[str, object]:
    return {
        "changed": [(c.a.label, [(d.what, d.name) for d in c.details]) for c in g.changed],
        "added": [n.label for n in g.added],
        "removed": [n.label for n in g.removed],
        "fused": len(g.fused),
        "weights": [w.a for w in g.changed_weights],
        "io": [(d.what, d.name) for d in g.io],
    }


def _expected(p: R.Planted) -> dict[str, object]:
    out: dict[str, object] = {
        "changed": [],
        "added": [],
        "removed": [],
        "fused": 0,
        "weights": [],
        "io": [],
    }
    if p.kind == "attribute":
        out["changed"] = [(p.node, [("attribute", p.detail)])]
    elif p.kind == "input":
        out["changed"] = [(p.node, [("input", p.detail)])]
    elif p.kind == "added":
        out["added"] = [p.node]
    elif p.kind == "removed":
        out["removed"] = [p.node]
    else:
        out["weights"] = [p.detail]
    return out


def _planted_pair(
    make: object, seed: int, kind: str, where: str
) -> tuple[onnx.ModelProto, onnx.ModelProto, R.Planted] | None:
    a = make(seed)  # type: ignore[operator]
    b = C.copy(a)
    p = R.plant(b, kind, seed + 1, where)
    if p is None:
        return None
    onnx.checker.check_model(b)  # the planted model is still a valid model
    # Rename and re-sort the side whose names the expectation does not use.
    if kind == "added":
        a = C.rename_everything(a, seed + 2)
    else:
        b = C.rename_everything(b, seed + 2)
    return a, b, p


@SETTINGS
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(KINDS))
def test_every_planted_change_is_found_and_nothing_else(seed: int, kind: str) -> None:
    made = _planted_pair(R.random_model, seed, kind, "main")
    if made is None:
        return
    a, b, p = made
    d = diff(a, b)
    assert _summary(d.main) == _expected(p)
    assert not d.model


NESTED = {
    "if": (R.if_model, "If", "/then_branch:"),
    "loop": (R.loop_model, "Loop", "/body:"),
}


@SETTINGS
@given(
    seed=st.integers(0, 10**6), kind=st.sampled_from(KINDS), where=st.sampled_from(sorted(NESTED))
)
# Found by this test (none in 4,290 other cases): rewiring a Softmax of a chain of three
# to the first one's input leaves two identical Softmaxes of one value, and the matcher
# pairs the wrong one: "one added, one removed" instead of "one input changed".  Both
# describe the change; the planted one is the smaller.
@example(seed=395, kind="input", where="if").xfail(
    reason="the matcher's tie between identical ops is not the smallest edit", raises=AssertionError
)
def test_a_change_inside_a_nested_body_is_shown_on_its_owner(
    seed: int, kind: str, where: str
) -> None:
    make, owner_op, path = NESTED[where]
    made = _planted_pair(make, seed, kind, where)
    if made is None:
        return
    a, b, p = made
    d = diff(a, b)
    (owner,) = d.main.changed
    assert owner.a.op_type == owner_op
    assert [x.what for x in owner.details] == ["body"]
    assert not (d.main.added or d.main.removed or d.main.changed_weights)
    (inside,) = [c for c in d.main.children if path in c.path_a]
    assert _summary(inside) == _expected(p)
    assert all(c.equal for c in d.main.children if c is not inside)


@SETTINGS
@given(seed=st.integers(0, 10**6), body=st.booleans())
def test_renamed_and_resorted_random_model_has_no_change(seed: int, body: bool) -> None:
    a = (R.if_model(seed) if seed % 2 else R.loop_model(seed)) if body else R.random_model(seed, 20)
    b = C.rename_everything(a, seed)
    d = diff(a, b)
    assert d.equal, d.to_json()
    assert len(d.main.matches) == len(a.graph.node)
    assert d.counts()["renamed_values"] > 0


def _function_model(seed: int, planted: str | None = None) -> tuple[onnx.ModelProto, object]:
    """A model calling a local function whose body is a random graph."""
    import random

    from onnx import helper as h

    rnd = random.Random(seed)
    nodes, inits, last = R.random_graph_nodes(rnd, 8, 4, "f", "a")
    # Function bodies hold no initializers: their weights come in as Constants.
    consts = [h.make_node("Constant", [], [t.name], name=f"c_{t.name}", value=t) for t in inits]
    nodes = consts + nodes + [h.make_node("Identity", [last], ["b"], name="f_out")]
    fn = h.make_function("local", "F", ["a"], ["b"], nodes, [h.make_opsetid("", 17)])
    g = h.make_graph(
        [h.make_node("F", ["x"], ["y"], domain="local", name="call")],
        "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4])],
    )
    model = h.make_model(
        g, functions=[fn], opset_imports=[h.make_opsetid("", 17), h.make_opsetid("local", 1)]
    )
    model.ir_version = 8
    return model, fn


@SETTINGS
@given(seed=st.integers(0, 10**6))
def test_an_attribute_edit_inside_a_function_body_is_found(seed: int) -> None:
    a, _ = _function_model(seed)
    b = C.copy(a)
    cands = [n for n in b.functions[0].node if n.op_type in ("LeakyRelu", "Elu")]
    if not cands:
        return
    cands[seed % len(cands)].attribute[0].f += 0.25
    d = diff(a, b)
    (fd,) = d.functions
    assert [(c.a.label, [x.name for x in c.details]) for c in fd.changed] == [
        (cands[seed % len(cands)].name, ["alpha"])
    ]
    assert d.main.equal and not d.equal


@pytest.mark.parametrize("blocks", [1, 3, 5])
def test_batchnorm_folding_pairs_every_conv_with_its_conv_bn(blocks: int) -> None:
    a = C.cnn(True, blocks=blocks, seed=blocks)
    b = C.rename_everything(C.fold_batchnorm(a), blocks)
    d = diff(a, b)
    groups = sorted(
        (sorted(n.op_type for n in f.a), sorted(n.op_type for n in f.b)) for f in d.main.fused
    )
    assert groups == [(["BatchNormalization", "Conv"], ["Conv"])] * blocks
    # each group pairs a Conv with the BatchNormalization that reads it
    for f in d.main.fused:
        conv = next(n for n in f.a if n.op_type == "Conv")
        bn = next(n for n in f.a if n.op_type == "BatchNormalization")
        assert a.graph.node[bn.index].input[0] == a.graph.node[conv.index].output[0]
    assert not d.main.added and not d.main.removed and not d.main.changed


@pytest.mark.parametrize("renamed", [False, True])
def test_a_changed_declared_output_type_is_found_on_its_node(renamed: bool) -> None:
    from onnx import TensorProto, helper

    a = C.mlp()
    a.graph.value_info.extend(
        helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, [2, 8]) for n in a.graph.node
    )
    b = C.copy(a)
    vi = next(v for v in b.graph.value_info if v.name == "add1")
    vi.CopyFrom(helper.make_tensor_value_info("add1", TensorProto.FLOAT, [2, "n"]))
    if renamed:
        b = C.rename_everything(b, 3)
    d = diff(a, b)
    assert [(c.a.label, [(x.what, x.name) for x in c.details]) for c in d.main.changed] == [
        ("add1", [("type", "output 0")])
    ]


@pytest.mark.parametrize("fraction", [0.01, 0.1])
def test_the_benchmark_pair_reports_exactly_what_was_planted(fraction: float) -> None:
    """The structural benchmark's pair, small: Identities inserted after random nodes
    and attributes edited (or Add made Sub) on others, every name shuffled and the
    nodes re-sorted.  Exactly the inserted nodes are added and exactly the edited
    nodes changed (an inserted Identity must not pass for an Erf or a Shape whose
    op "changed")."""
    import random

    from benchmarks.bench_diff import _plant_changes, _shuffle_names_and_order
    from benchmarks.models import transformer_like

    a = transformer_like(3000)
    b = C.copy(a)
    _plant_changes(b, fraction, 3)
    _shuffle_names_and_order(b, 4)
    # What _plant_changes did, from its seed: even picks got an Identity after them,
    # odd picks an INT/FLOAT attribute edit or Add -> Sub (others only a doc string).
    picks = random.Random(3).sample(range(len(a.graph.node)), int(len(a.graph.node) * fraction))
    edited = set()
    for k, i in enumerate(picks):
        node = a.graph.node[i]
        if k % 2 == 0:
            continue
        if node.attribute:
            if node.attribute[0].type in (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT):
                edited.add(i)
        elif node.op_type == "Add":
            edited.add(i)
    d = diff(a, b)
    assert {c.a.index for c in d.main.changed} == edited
    assert sorted(n.op_type for n in d.main.added) == ["Identity"] * len(picks[::2])
    assert not d.main.removed and not d.main.fused
