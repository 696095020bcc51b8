"""Document commands: apply/revert byte-identical, redo, renames through nested scopes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from onnxviz.errors import EditError
from onnxviz.model import commands as c
from onnxviz.model.document import Document
from onnxviz.model.types import text_to_type
from tests.model.builders import loop_model, simple_model

BODY = "main/body:loop"
THEN = "main/body:loop/then_branch:body_if"

COMMANDS: dict[str, Callable[[], c.Command]] = {
    "rename": lambda: c.RenameValue("main", "r", "relu_out"),
    "rewire": lambda: c.RewireInput("main", 1, 1, "x"),
    "set_attr_new": lambda: c.SetAttribute("main", 0, helper.make_attribute("alpha", 0.5)),
    "set_attr_replace": lambda: c.SetAttribute(
        BODY, 2, helper.make_attribute("then_branch", helper.make_graph([], "t", [], []))
    ),
    "remove_attr": lambda: c.RemoveAttribute(BODY, 2, "else_branch"),
    "node_name": lambda: c.SetNodeField("main", 0, "name", "first"),
    "add_node": lambda: c.AddNode("main", helper.make_node("Neg", ["x"], ["negx"], name="neg"), 1),
    "remove_node": lambda: c.RemoveNode("main", 0),
    "add_input": lambda: c.AddGraphEntry(
        "main", "input", helper.make_tensor_value_info("extra", TensorProto.FLOAT, [1])
    ),
    "remove_input": lambda: c.RemoveGraphEntry("main", "input", "flag"),
    "add_output": lambda: c.AddGraphEntry(
        "main", "output", helper.make_tensor_value_info("scale", TensorProto.FLOAT, [2])
    ),
    "remove_output": lambda: c.RemoveGraphEntry("main", "output", "out"),
    "move_input": lambda: c.MoveGraphEntry("main", "input", "flag", 0),
    "add_initializer": lambda: c.AddGraphEntry(
        "main", "initializer", numpy_helper.from_array(np.ones(2, np.float32), "ones")
    ),
    "set_type": lambda: c.SetValueType("main", "x", text_to_type("float32[batch]")),
    "set_type_value_info": lambda: c.SetValueType("main", "scale", text_to_type("float32[2]")),
    "clear_type": lambda: c.SetValueType("main", "x", None),
    "metadata_model": lambda: c.SetMetadataProp("model", "author", "me"),
    "metadata_graph": lambda: c.SetMetadataProp("main", "purpose", "test"),
    "metadata_node": lambda: c.SetMetadataProp(("main", 1), "note", "loop"),
    "doc_string": lambda: c.SetDocString(("main", 0), "makes the scale"),
    "producer": lambda: c.SetModelField("producer_name", "someone"),
    "ir_version": lambda: c.SetModelField("ir_version", 9),
    "opset_change": lambda: c.SetOpsetImport("", 18),
    "opset_add": lambda: c.SetOpsetImport("com.example", 1),
    "opset_remove": lambda: c.SetOpsetImport("", None),
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_apply_revert_is_byte_identical_and_redo_equals_apply(name):
    doc = Document.from_model(loop_model() if name != "rename" else simple_model())
    if name in ("rewire",):
        doc = Document.from_model(simple_model())
    before = doc.model.SerializeToString()
    doc.execute(COMMANDS[name]())
    applied = doc.model.SerializeToString()
    assert applied != before
    doc.undo()
    assert doc.model.SerializeToString() == before
    doc.redo()
    assert doc.model.SerializeToString() == applied
    doc.undo()
    assert doc.model.SerializeToString() == before
    # The indexes follow too: a fresh build equals the incrementally maintained one.
    fresh = Document.from_model(doc.model)
    for got, want in zip(doc.scopes(), fresh.scopes(), strict=True):
        assert got.path == want.path
        assert got.definitions == want.definitions and got.consumers == want.consumers
        assert got.free_names == want.free_names


def test_rename_follows_uses_into_nested_graphs():
    doc = Document.from_model(loop_model())
    doc.rename_value("scale", "gain")
    body = doc.scope(BODY)
    then = doc.scope(THEN)
    assert [n.input[1] for n in body.nodes if n.op_type == "Add"] == ["gain"]
    assert list(then.nodes[0].input) == ["acc_in", "gain"]
    assert "gain" in body.free_names and "scale" not in body.free_names
    assert doc.main_scope.producer["gain"] == (0, 0)
    assert doc.undo_label is None or doc.undo_label == "Rename 'scale' → 'gain'"


def test_rename_stops_where_a_nested_graph_redefines_the_name():
    doc = Document.from_model(loop_model())
    # acc_in is a body input; renaming the outer 'x' must not touch the body's own names.
    doc.rename_value("x", "inp")
    assert list(doc.main_scope.nodes[1].input) == ["n", "", "inp"]
    assert list(doc.scope(BODY).nodes[1].input) == ["acc_in", "scale"]


@pytest.mark.parametrize(
    ("graph", "old", "new", "reason"),
    [
        ("main", "scale", "x", "already defined"),
        ("main", "scale", "summed", "nested graph"),
        (BODY, "scale", "s2", "enclosing graph"),
        ("main", "nope", "z", "no value named"),
        ("main", "scale", "", "cannot be empty"),
        (BODY, "summed", "flag", "already defined"),
    ],
)
def test_rename_refusals_leave_the_model_untouched(graph, old, new, reason):
    doc = Document.from_model(loop_model())
    before = doc.model.SerializeToString()
    with pytest.raises(EditError, match=reason):
        doc.rename_value(old, new, graph=graph)
    assert doc.model.SerializeToString() == before
    assert not doc.can_undo


def test_consecutive_edits_of_one_field_merge_into_one_undo_step():
    doc = Document.from_model(simple_model())
    before = doc.model.SerializeToString()
    for value in (0.1, 0.2, 0.3):
        doc.set_attribute("relu", "alpha", value)
    attr = [a for a in doc.model.graph.node[0].attribute if a.name == "alpha"][0]
    assert attr.type == AttributeProto.FLOAT and attr.f == pytest.approx(0.3)
    doc.undo()
    assert doc.model.SerializeToString() == before
    assert not doc.can_undo


def test_modified_flag_follows_undo_and_save(tmp_path):
    doc = Document.from_model(simple_model())
    doc.save(str(tmp_path / "m.onnx"))
    assert not doc.is_modified
    doc.rename_value("r", "q")
    assert doc.is_modified
    doc.undo()
    assert not doc.is_modified
    doc.redo()
    assert doc.is_modified


def test_listeners_get_change_sets():
    doc = Document.from_model(loop_model())
    seen = []
    doc.subscribe(seen.append)
    doc.rename_value("scale", "gain")
    assert {g for g in seen[0].graphs} == {"main", BODY, THEN}
    assert ("main", "gain") in seen[0].names
    doc.execute(c.RemoveNode("main", 0))
    assert seen[1].structural


def test_add_node_refuses_a_clashing_output():
    doc = Document.from_model(simple_model())
    with pytest.raises(EditError, match="already defined"):
        doc.execute(c.AddNode("main", helper.make_node("Neg", ["x"], ["r"])))


def test_rewire_refuses_invisible_names():
    doc = Document.from_model(loop_model())
    with pytest.raises(EditError, match="no value named 'acc_in'"):
        doc.execute(c.RewireInput("main", 1, 0, "acc_in"))
    doc.execute(c.RewireInput(BODY, 1, 1, "x"))  # outer names are visible inside
    assert doc.scope(BODY).nodes[1].input[1] == "x"


def test_facade_set_attribute_by_node_name_and_index():
    doc = Document.from_model(simple_model())
    doc.set_attribute("#1", "note", "hello")
    assert doc.model.graph.node[1].attribute[0].s == b"hello"
    with pytest.raises(EditError, match="has no node"):
        doc.set_attribute("missing", "a", 1)


@pytest.mark.parametrize(
    "second",
    [
        lambda: c.RemoveNode("main", 1),
        lambda: c.RemoveNode("main", 0),
        lambda: c.RemoveAttribute("main", 0, "alpha"),
        lambda: c.RemoveGraphEntry("main", "input", "x"),
        lambda: c.SetOpsetImport("", None),
        lambda: c.MoveGraphEntry("main", "input", "flag", 0),
    ],
)
def test_undo_after_a_later_command_removed_what_an_earlier_one_edited(second):
    # A later removal re-inserts a *copy* on undo; earlier edits must still revert.
    doc = Document.from_model(loop_model())
    before = doc.model.SerializeToString()
    doc.execute(c.RewireInput("main", 1, 0, "x"))
    doc.execute(c.SetAttribute("main", 0, helper.make_attribute("alpha", 0.5)))
    doc.execute(c.SetValueType("main", "x", text_to_type("float32[batch]")))
    doc.execute(c.SetOpsetImport("", 18))
    doc.execute(second())
    applied = doc.model.SerializeToString()
    for _ in range(5):
        doc.undo()
    assert doc.model.SerializeToString() == before
    for _ in range(5):
        doc.redo()
    assert doc.model.SerializeToString() == applied


def test_undo_of_metadata_edit_after_its_entry_was_removed():
    doc = Document.from_model(simple_model())
    before = doc.model.SerializeToString()
    doc.execute(c.SetMetadataProp("model", "k", "changed"))
    doc.execute(c.SetDocString("model", "between"))  # keeps the two edits apart
    doc.execute(c.SetMetadataProp("model", "k", None))
    for _ in range(3):
        doc.undo()
    assert doc.model.SerializeToString() == before


def test_scope_seams_name_what_the_graph_defines_and_labels() -> None:
    from tests.check.cases import init, model, vi

    m = model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="r"),
            helper.make_node("Neg", ["a"], ["a"], name="r"),  # second definition of 'a'
            helper.make_node("Add", ["a", "w"], ["y"]),
        ],
        [vi("x")],
        [vi("y")],
        [init("w")],
    )
    scope = Document.from_model(m).main_scope
    assert scope.defined_names() == {"x", "w", "a", "y"}
    other = scope.other_definitions()
    assert [d.kind for d in other["x"]] == ["input"]
    assert [d.kind for d in other["w"]] == ["initializer"]
    assert [(d.kind, d.index) for d in other["a"]] == [("node_output", 1)]  # the repeat
    assert "y" not in other  # a name's first producer lives in `producer`
    assert list(scope.labels) == ["#0", "#1", "#2"]  # 'r' twice: by index


def test_a_macro_applies_its_parts_unrecorded_and_undoes_as_one() -> None:
    doc = Document.from_model(simple_model())
    heard = []
    doc.subscribe(heard.append)
    before = doc.model.SerializeToString()
    first = doc.main_scope.nodes[0].output[0]
    macro = c.MacroCommand(
        [c.RenameValue("main", first, "m1"), c.RenameValue("main", "m1", "m2")], "two renames"
    )
    doc.execute(macro)
    assert len(heard) == 1 and doc.undo_label == "two renames"
    assert doc.main_scope.defines("m2") and not doc.main_scope.defines(first)
    doc.undo()
    assert doc.model.SerializeToString() == before
    assert doc.main_scope.defines(first) and not doc.main_scope.defines("m2")


def test_mark_unsaved_shows_a_document_as_modified_until_saved(tmp_path) -> None:
    doc = Document.from_model(simple_model())
    assert not doc.is_modified
    doc.mark_unsaved()
    assert doc.is_modified
    doc.save(str(tmp_path / "m.onnx"))
    assert not doc.is_modified


def test_a_refused_rename_is_refused_by_check_before_anything_changes() -> None:
    doc = Document.from_model(simple_model())
    name = doc.main_scope.nodes[0].output[0]
    with pytest.raises(EditError, match="cannot be empty"):
        c.RenameValue("main", name, "").check(doc)
    assert doc.main_scope.defines(name) and not doc.can_undo


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_closed_document_is_freed_without_the_cycle_collector(name):
    """The app keeps loaded models out of the cycle collector's reach (it freezes them),
    so a closed document must go by reference counting alone, whatever its history."""
    import gc
    import weakref

    doc = Document.from_model(loop_model() if name != "rename" else simple_model())
    if name in ("rewire",):
        doc = Document.from_model(simple_model())
    doc.scopes()
    doc.execute(COMMANDS[name]())
    doc.undo()
    doc.redo()
    doc.subscribe(lambda _changes: None)
    gone = weakref.ref(doc)
    enabled = gc.isenabled()
    gc.disable()
    try:
        doc.close()
        del doc
        assert gone() is None
    finally:
        if enabled:
            gc.enable()


def _labelled_model():  # type: ignore[no-untyped-def]
    """Duplicate node names, an unnamed node, and a named If that owns subgraphs."""
    branch = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["t"], name="inner")],
        "b",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="dup"),
        helper.make_node("Relu", ["a"], ["b"], name="dup"),
        helper.make_node("Relu", ["b"], ["c"], name=""),
        helper.make_node("Relu", ["c"], ["d"], name="solo"),
        helper.make_node(
            "If", ["flag"], ["y"], name="branchy", then_branch=branch, else_branch=branch
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [2]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _index_view(doc: Document) -> dict[str, object]:
    out: dict[str, object] = {}
    for scope in doc.scopes():
        labels = list(scope.labels)
        out[scope.path] = (
            labels,
            [scope.node_index(label) for label in labels],
            {n.name: scope.name_count(n.name) for n in scope.nodes},
        )
    return out


@pytest.mark.parametrize("index", range(5))
@pytest.mark.parametrize("new", ["fresh", "dup", "", "solo", "branchy", "inner"])
def test_a_node_rename_keeps_the_index_true_without_a_rebuild(index: int, new: str) -> None:
    """Renaming a node relabels its graph in place (a 100k-node re-index took half a
    second); only when a graph path changes (the node, or a node sharing the old or new
    name, owns a subgraph) is the index rebuilt.  Either way it equals a fresh one, after
    the edit, its undo and its redo."""
    doc = Document.from_model(_labelled_model())
    main = doc.scope("main")
    old = doc.model.graph.node[index].name
    changes = doc.execute(c.SetNodeField("main", index, "name", new))
    assert changes.structural  # consumers rebuild: ids and paths carry labels
    assert _index_view(doc) == _index_view(Document.from_model(doc.model))
    owns_path = {index == 4, "branchy" in (old, new)}
    kept = doc.scope("main") is main
    assert kept == (True not in owns_path)
    doc.undo()
    assert _index_view(doc) == _index_view(Document.from_model(doc.model))
    doc.redo()
    assert _index_view(doc) == _index_view(Document.from_model(doc.model))
