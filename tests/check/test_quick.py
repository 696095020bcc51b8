"""The quick check (check.quick): after an edit, the G004 findings for the touched names,
in the full run's words, from the index from before the edit (one node added or
removed) or the rebuilt index; differential against the full validator."""

from __future__ import annotations

import random

import onnx
import pytest
from onnx import TensorProto, helper

from onnxviz.check import validate
from onnxviz.check.quick import index_before, quick_check
from onnxviz.check.validator import Validator
from onnxviz.errors import EditError
from onnxviz.model import commands as cmd
from onnxviz.model.document import Document
from tests.check.cases import init, model, vi


def _chain() -> onnx.ModelProto:
    """x -> a -> b -> c -> y, with a Loop whose body reads the outer 'b', an
    initializer 'w' and a node with no name (labelled '#index')."""
    body = helper.make_graph(
        [helper.make_node("Add", ["v", "b"], ["v_out"], name="inner")],
        "body",
        [vi("i", TensorProto.INT64, ()), vi("cond", TensorProto.BOOL, ()), vi("v")],
        [vi("cond", TensorProto.BOOL, ()), vi("v_out")],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="first"),
        helper.make_node("Add", ["a", "w"], ["b"], name="second"),
        helper.make_node("Neg", ["b"], ["c"]),
        helper.make_node("Mul", ["c", "a"], ["y"], name="last"),
        helper.make_node("Loop", ["n", "", "x"], ["loop_out"], body=body, name="loop"),
    ]
    return model(
        nodes,
        [vi("x"), vi("n", TensorProto.INT64, ())],
        [vi("y"), vi("loop_out")],
        [init("w")],
    )


def _g004(diags: list, names: set[str]) -> list[tuple[object, ...]]:
    return sorted(
        (d.location.graph_path, d.location.node, d.location.value, d.location.field, d.message)
        for d in diags
        if d.code == "G004" and d.location.value in names and d.location.field
    )


def _check_edit(doc: Document, command: cmd.Command) -> tuple[list, list, object]:
    before = index_before(doc)
    changes = doc.execute(command)
    quick = quick_check(doc, changes, before)
    return quick, validate(doc), changes


def test_removing_a_used_producer_reports_its_users_at_once() -> None:
    doc = Document.from_model(_chain())
    quick, full, changes = _check_edit(doc, cmd.RemoveNode("main", 0))  # 'a' is gone
    assert changes.structural
    assert _g004(quick, {"a"}) == _g004(full, {"a"})
    got = {(d.location.node, d.location.field) for d in quick}
    # 'second' and 'last' kept their names; nothing else lost a definition.
    assert got == {("second", "input[0]"), ("last", "input[1]")}
    assert quick[0].message == (
        "Input #0 'a' of node 'second' is not defined in this graph or any outer graph."
    )


def test_an_unnamed_user_is_labelled_by_its_new_index() -> None:
    doc = Document.from_model(_chain())
    quick, full, _ = _check_edit(doc, cmd.RemoveNode("main", 1))  # 'b' gone; Neg #2 -> #1
    assert [d.location.node for d in quick if d.location.graph_path == "main"] == ["#1"]
    assert _g004(quick, {"b"}) == [g for g in _g004(full, {"b"}) if g[0] == "main"]


def test_an_added_node_with_an_undefined_input_is_reported_by_name() -> None:
    doc = Document.from_model(_chain())
    node = helper.make_node("Relu", ["ghost"], ["z"], name="late")
    quick, full, _ = _check_edit(doc, cmd.AddNode("main", node))
    assert [(d.location.node, d.location.value) for d in quick] == [("late", "ghost")]
    assert _g004(quick, {"ghost"}) == _g004(full, {"ghost"})


def test_a_node_that_defines_what_was_missing_clears_nothing_wrongly() -> None:
    doc = Document.from_model(_chain())
    doc.execute(cmd.RemoveNode("main", 0))
    quick, full, _ = _check_edit(
        doc, cmd.AddNode("main", helper.make_node("Relu", ["x"], ["a"], name="back"), 0)
    )
    assert quick == []
    assert _g004(full, {"a"}) == []


def test_inputs_and_initializers_stay_defined_across_node_edits() -> None:
    doc = Document.from_model(_chain())
    quick, _, _ = _check_edit(doc, cmd.RemoveNode("main", 1))  # uses 'a' and 'w'
    assert not [d for d in quick if d.location.value in ("w", "a", "x")]


def test_removing_an_initializer_is_checked_on_the_live_index() -> None:
    doc = Document.from_model(_chain())
    quick, full, changes = _check_edit(doc, cmd.RemoveGraphEntry("main", "initializer", "w"))
    assert not changes.structural
    assert [(d.location.node, d.location.field) for d in quick] == [("second", "input[1]")]
    assert _g004(quick, {"w"}) == _g004(full, {"w"})


def test_a_use_in_a_nested_graph_is_judged_against_the_outer_scopes() -> None:
    doc = Document.from_model(_chain())
    body = "main/body:loop"
    # 'b' is the outer graph's: the body's use of it stays defined.
    quick, _, _ = _check_edit(doc, cmd.RewireInput(body, 0, 0, "b"))
    assert quick == []


def test_the_validator_keeps_quick_findings_until_its_next_run() -> None:
    doc = Document.from_model(_chain())
    validator = Validator(doc)
    validator.validate()
    seen: list[int] = []
    validator.subscribe(lambda diags: seen.append(len(diags)))
    before = index_before(doc)
    changes = doc.execute(cmd.RemoveNode("main", 0))
    new = validator.quick_check(changes, before)
    assert len(new) == 2 and all(d in validator.diagnostics for d in new)
    assert validator.quick_check(changes, before) == []  # already shown: not added twice
    after = validator.validate(changes)
    assert after == validate(doc) and len(seen) == 2


@pytest.mark.parametrize("seed", range(8))
def test_random_node_edits_match_the_rebuilt_index_and_the_full_run(seed: int) -> None:
    """Differential: quick check from the index before the edit == quick check on the
    rebuilt index, and both report exactly the full run's G004 for the touched names."""
    from benchmarks.models import transformer_like

    rng = random.Random(seed)
    doc = Document.from_model(transformer_like(300))
    found = 0
    for _ in range(16):
        nodes = doc.main_scope.nodes
        if rng.random() < 0.2 and doc.can_undo:
            before = index_before(doc)
            changes = doc.undo()
            fast = quick_check(doc, changes, before)
            touched = {n for p, n in changes.names if p == "main"}
            assert _g004(fast, touched) == _g004(validate(doc), touched)
            continue
        if rng.random() < 0.6 and len(nodes) > 1:
            command: cmd.Command = cmd.RemoveNode("main", rng.randrange(len(nodes)))
        else:
            names = sorted(doc.main_scope.visible_names())
            ins = [rng.choice(names + ["ghost"]) for _ in range(2)]
            # A name no node has, none, or one a node has (both are then labelled #i).
            named = rng.choice(["", f"new{rng.randrange(99)}", rng.choice(nodes).name])
            command = cmd.AddNode(
                "main",
                helper.make_node("Add", ins, [f"out{rng.randrange(10**6)}"], name=named),
                rng.randrange(len(nodes) + 1),
            )
        before = index_before(doc)
        try:
            changes = doc.execute(command)
        except EditError:
            continue
        fast = quick_check(doc, changes, before)
        indexed = quick_check(doc, changes, None)
        touched = {n for p, n in changes.names if p == "main"}
        assert _g004(fast, touched) == _g004(indexed, touched)
        assert _g004(indexed, touched) == _g004(validate(doc), touched)
        found += len(fast)
    assert found  # the edits did break uses: the comparison saw findings


def test_diagnostics_are_mapped_to_the_nodes_they_are_located_at() -> None:
    from onnxviz.check.validator import diagnostics_by_node
    from onnxviz.model.node_id import NodeId

    doc = Document.from_model(_chain())
    doc.execute(cmd.RemoveNode("main", 0))  # 'second' (now #0) and 'last' lose 'a'
    found = diagnostics_by_node(doc, validate(doc))
    assert {n for n, ds in found.items() if any(d.code == "G004" for d in ds)} == {
        NodeId("main", 0),
        NodeId("main", 2),
    }
    assert doc.find_node("last") == NodeId("main", 2) and str(doc.find_node("last")) == "main::last"
    assert doc.find_node("#1") == NodeId("main", 1) and doc.find_node("nope") is None


def test_labels_follow_names_that_become_unique_or_shared() -> None:
    m = model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="src"),
            helper.make_node("Neg", ["x"], ["b"], name="dup"),
            helper.make_node("Neg", ["a"], ["c"], name="dup"),
            helper.make_node("Add", ["a", "c"], ["y"], name="uses_a"),
        ],
        [vi("x")],
        [vi("y"), vi("b")],
    )
    doc = Document.from_model(m)
    # Removing the first 'dup' leaves one, so the user of 'a' is labelled 'dup' again.
    doc.execute(cmd.RemoveNode("main", 1))
    quick, full, _ = _check_edit(doc, cmd.RemoveNode("main", 0))  # 'a' is gone
    assert sorted(d.location.node for d in quick) == ["dup", "uses_a"]
    assert _g004(quick, {"a"}) == _g004(full, {"a"})
    # A new node called 'uses_a' makes that name shared: both are labelled by index.
    quick, full, _ = _check_edit(
        doc, cmd.AddNode("main", helper.make_node("Relu", ["a"], ["z"], name="uses_a"), 0)
    )
    assert sorted(d.location.node for d in quick) == ["#0", "#2", "dup"]
    assert _g004(quick, {"a"}) == _g004(full, {"a"})
