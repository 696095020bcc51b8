"""A Validator's validate(changes) after an edit returns what a full run on the edited
model returns."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from onnxviz.check import validate
from onnxviz.check.validator import Validator
from onnxviz.model import commands as cmd
from onnxviz.model.document import Document
from tests.check.cases import init, model, vi

F = TensorProto.FLOAT


def _sample() -> onnx.ModelProto:
    """A model with a Loop body that uses outer values, several rule hits (undefined
    input, non-identifier names, duplicate node names) and a value_info entry."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond"], ["cond_out"], name="keep"),
            helper.make_node("Add", ["v", "/enc/w"], ["v_out"], name="acc"),
        ],
        "body",
        [vi("i", TensorProto.INT64, ()), vi("cond", TensorProto.BOOL, ()), vi("v")],
        [vi("cond_out", TensorProto.BOOL, ()), vi("v_out")],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["/enc/w"], name="relu"),
        helper.make_node("Loop", ["n", "", "x"], ["loop_out"], body=body, name="loop"),
        helper.make_node("Mul", ["loop_out", "scale"], ["t"], name="mul"),
        helper.make_node("Add", ["t", "ghost"], ["u"], name="dup"),
        helper.make_node("Neg", ["t"], ["y"], name="dup"),
    ]
    return model(
        nodes,
        [vi("x"), vi("n", TensorProto.INT64, ())],
        [vi("y"), vi("u")],
        [init("scale")],
        value_info=[vi("t")],
    )


def _full(doc: Document) -> list[dict[str, object]]:
    copy = onnx.ModelProto()
    copy.CopyFrom(doc.model)
    return [d.to_json() for d in validate(Document.from_model(copy))]


def _step(v: Validator, command: cmd.Command | str) -> None:
    doc = v.doc
    assert isinstance(doc, Document)
    if command == "undo":
        changes = doc.undo()
    elif command == "redo":
        changes = doc.redo()
    else:
        assert not isinstance(command, str)
        changes = doc.execute(command)
    got = [d.to_json() for d in v.validate(changes)]
    assert got == _full(doc)


def _spy_on_local_runs(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, for each attribute edit re-checked from here on, whether it took the
    one-node path (incremental._local_attribute_run answered) or fell back."""
    from onnxviz.check import incremental

    local: list[bool] = []
    original = incremental._local_attribute_run

    def spy(*args: object, **kwargs: object) -> object:
        got = original(*args, **kwargs)  # type: ignore[arg-type]
        local.append(got is not None)
        return got

    monkeypatch.setattr(incremental, "_local_attribute_run", spy)
    return local


def test_rename_is_rechecked_in_place() -> None:
    doc = Document.from_model(_sample())
    v = Validator(doc)
    first = v.validate()
    assert {"G004", "N003", "N004"} <= {d.code for d in first}
    # '/enc/w' is only used in the loop body: judged where it is defined, not there.
    assert [d.location.graph_path for d in first if d.code == "N004"] == ["main"]
    state = v.state
    _step(v, cmd.RenameValue("main", "/enc/w", "enc_w"))
    # The rename took the fast path: the same state object, inference not re-run.
    assert v.state is state
    _step(v, cmd.RenameValue("main", "t", "scaled"))
    _step(v, cmd.RenameValue("main", "x", "input_x"))
    _step(v, "undo")
    _step(v, "redo")
    _step(v, cmd.RenameValue("main", "enc_w", "/again/w"))
    _step(v, cmd.RenameValue("main/body:loop", "v", "v.state"))
    assert v.state is state


def test_rename_follows_names_that_rules_look_at() -> None:
    """Identifier summary (N004), training bindings (M003) and shadowing-free renames."""
    m = model(
        [
            helper.make_node("Add", ["x", "w"], ["a"], name="r1"),
            helper.make_node("Neg", ["a"], ["y"], name="r2"),
        ],
        [vi("x")],
        [vi("y")],
        [init("w")],
    )
    ti = m.training_info.add()
    ti.initialization.CopyFrom(
        helper.make_graph(
            [helper.make_node("Identity", ["c"], ["w_new"])], "init", [], [vi("w_new")], [init("c")]
        )
    )
    ti.initialization_binding.add(key="w", value="w_new")
    doc = Document.from_model(m)
    v = Validator(doc)
    assert "M003" not in {d.code for d in v.validate()}
    _step(v, cmd.RenameValue("main", "a", "a.b"))
    assert "N004" in {d.code for d in v.validate()}
    _step(v, cmd.RenameValue("main", "w", "weight"))
    _step(v, "undo")
    _step(v, cmd.RenameValue("main", "x", "x.in"))


def test_edits_that_change_types_or_structure() -> None:
    doc = Document.from_model(_sample())
    v = Validator(doc)
    v.validate()
    _step(v, cmd.SetAttribute("main", 3, helper.make_attribute("alpha", 2.0)))  # O008 on an Add
    _step(v, cmd.SetValueType("main", "t", helper.make_tensor_type_proto(TensorProto.INT64, [2])))
    _step(v, cmd.RemoveNode("main", 3))
    _step(v, cmd.AddNode("main", helper.make_node("Relu", ["y"], ["z"], name="late")))
    _step(v, cmd.RewireInput("main", 2, 1, "x"))
    _step(v, "undo")
    _step(v, "undo")
    _step(v, "redo")


@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.INT64])
def test_retype_run_matches_full(elem: int) -> None:
    m = model(
        [
            helper.make_node("Sqrt", ["x"], ["t"], name="s"),
            helper.make_node("Relu", ["t"], ["y"], name="r"),
        ],
        [vi("x")],
        [vi("y")],
    )
    doc = Document.from_model(m)
    v = Validator(doc)
    v.validate()
    state = v.state
    _step(v, cmd.SetValueType("main", "x", helper.make_tensor_type_proto(elem, [2])))
    # Float stays float: inference is re-run, the rules only re-check what changed.
    assert (v.state is state) == (elem == TensorProto.FLOAT)


def test_random_edit_sequences_match_full_runs() -> None:
    import random

    from onnxviz.errors import EditError

    rng = random.Random(3)
    doc = Document.from_model(_sample())
    v = Validator(doc)
    v.validate()
    for step in range(40):
        scopes = doc.scopes()
        scope = rng.choice(scopes)
        names = sorted(n for n in scope.producer if n)
        kind = rng.choice(["rename", "rename", "rewire", "node_name", "attr", "undo"])
        try:
            if kind == "rename" and names:
                command: cmd.Command | str = cmd.RenameValue(
                    scope.path, rng.choice(names), f"v{step}.{rng.randrange(3)}"
                )
            elif kind == "rewire" and len(scope.nodes):
                i = rng.randrange(len(scope.nodes))
                visible = sorted(n for n in scope.visible_names() if n)
                if not len(scope.nodes[i].input) or not visible:
                    continue
                command = cmd.RewireInput(
                    scope.path, i, rng.randrange(len(scope.nodes[i].input)), rng.choice(visible)
                )
            elif kind == "node_name" and len(scope.nodes):
                command = cmd.SetNodeField(
                    scope.path,
                    rng.randrange(len(scope.nodes)),
                    "name",
                    rng.choice(["dup", "n1", "n2"]),
                )
            elif kind == "attr" and len(scope.nodes):
                command = cmd.SetAttribute(
                    scope.path,
                    rng.randrange(len(scope.nodes)),
                    helper.make_attribute("axis", rng.randrange(2)),
                )
            elif kind == "undo" and doc.can_undo:
                command = "undo"
            else:
                continue
            _step(v, command)
        except EditError:
            continue


def test_edits_missed_between_calls_force_a_full_run() -> None:
    doc = Document.from_model(_sample())
    v = Validator(doc)
    v.validate()
    state = v.state
    doc.rename_value("t", "t1")  # validated by nobody
    changes = doc.rename_value("t1", "t2")
    got = [d.to_json() for d in v.validate(changes)]
    assert v.state is not state
    assert got == _full(doc)


def _mutated(attr: onnx.AttributeProto, rng: object) -> onnx.AttributeProto | None:
    """The same attribute with another plausible value (ints nudged, floats scaled)."""
    new = onnx.AttributeProto()
    new.CopyFrom(attr)
    if attr.type == onnx.AttributeProto.INT:
        new.i = attr.i + rng.choice([-1, 1])  # type: ignore[attr-defined]
    elif attr.type == onnx.AttributeProto.FLOAT:
        new.f = attr.f * 1.5 + 0.25
    elif attr.type == onnx.AttributeProto.INTS and len(attr.ints):
        k = rng.randrange(len(attr.ints))  # type: ignore[attr-defined]
        new.ints[k] = attr.ints[k] + rng.choice([-1, 1])  # type: ignore[attr-defined]
    else:
        return None
    return new


@pytest.mark.parametrize(
    ("name", "some_local"),
    [
        ("torch_dynamo_transformer", True),
        ("torch_torchscript_cnn", True),
        ("transformer_like", True),
        # onnx.checker rejects this model (an onnxruntime extension op): every edit takes
        # the whole-model path, whose answer is the one to compare with.
        ("ort_genai_llama_int4", False),
    ],
)
def test_attribute_edits_rechecked_locally_match_full_runs(
    name: str, some_local: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every attribute edit (valid or not, type-changing or not) re-checked incrementally
    gives the diagnostics of a full run; on a model the checker accepts, edits that keep
    the node's types take the one-node path."""
    import random

    from onnxviz.errors import EditError

    if name == "transformer_like":
        from benchmarks.models import transformer_like

        base = transformer_like(600)
    else:
        from tests.data.exporters import path_of

        base = onnx.load(str(path_of(name)))
    local = _spy_on_local_runs(monkeypatch)
    rng = random.Random(7)
    doc = Document.from_model(base)
    v = Validator(doc)
    v.validate()
    candidates = [
        (i, a)
        for i, n in enumerate(doc.main_scope.nodes)
        for a in n.attribute
        if a.type in (1, 2, 7)
    ]
    for i, attr in rng.sample(candidates, min(12, len(candidates))):
        new = _mutated(attr, rng)
        if new is None:
            continue
        try:
            _step(v, cmd.SetAttribute("main", i, new))
            _step(v, "undo")
        except EditError:
            continue
    assert local and any(local) == some_local


@pytest.mark.parametrize(
    ("name", "small_cone"),
    [
        ("transformer_like", True),
        ("torch_dynamo_transformer", True),
        # A new padding changes every later spatial size and breaks the residual Adds:
        # such edits are inferred whole (and must still match a full run).
        ("torch_dynamo_cnn", False),
    ],
)
def test_type_changing_edits_reinfer_only_the_downstream_cone_and_match_full_runs(
    name: str, small_cone: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Edits that change a node's output types (a Cast's target type, a Transpose's
    permutation, a Gather's axis, a Conv's padding) re-infer the nodes downstream of
    the edit, seeded with the types at its boundary, and give a full run's diagnostics;
    the cone really is the part inferred (not the whole model)."""
    import random

    from onnxviz.check import local_recheck
    from onnxviz.errors import EditError

    if name == "transformer_like":
        from benchmarks.models import transformer_like

        base = transformer_like(600)
    else:
        from tests.data.exporters import path_of

        base = onnx.load(str(path_of(name)))
    cones: list[int] = []
    original = local_recheck.cone_types

    def spy(model, ctx, scope, cone, types):  # type: ignore[no-untyped-def]
        got = original(model, ctx, scope, cone, types)
        if got is not None:
            cones.append(len(cone))
        return got

    monkeypatch.setattr(local_recheck, "cone_types", spy)
    from onnxviz.check import incremental

    monkeypatch.setattr(incremental, "cone_types", spy)
    doc = Document.from_model(base)
    v = Validator(doc)
    v.validate()
    nodes = doc.main_scope.nodes
    edits: list[tuple[int, onnx.AttributeProto]] = []
    for i, node in enumerate(nodes):
        for a in node.attribute:
            if node.op_type == "Cast" and a.name == "to":
                edits.append((i, helper.make_attribute("to", TensorProto.DOUBLE)))
            elif node.op_type == "Transpose" and a.name == "perm" and len(a.ints) >= 2:
                perm = list(a.ints)
                perm[-1], perm[-2] = perm[-2], perm[-1]
                edits.append((i, helper.make_attribute("perm", perm)))
            elif node.op_type in ("Gather", "Concat", "Softmax") and a.name == "axis":
                edits.append((i, helper.make_attribute("axis", a.i - 1 if a.i > 0 else a.i + 1)))
            elif node.op_type == "Conv" and a.name == "pads":
                edits.append((i, helper.make_attribute("pads", [p + 1 for p in a.ints])))
    rng = random.Random(5)
    # The last ones first: their cones are small; then a sample of the rest.
    chosen = edits[-4:] + rng.sample(edits[:-4], min(6, max(len(edits) - 4, 0)))
    assert chosen, f"{name} has no type-changing attribute to edit"
    for i, attr in chosen:
        try:
            _step(v, cmd.SetAttribute("main", i, attr))
            _step(v, "undo")
        except EditError:
            continue
    if small_cone:
        assert cones, "no edit was answered from its downstream cone"
        assert min(cones) < len(nodes) // 2


def test_local_attribute_rechecks_keep_and_refresh_names_that_are_not_utf8(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A one-node re-check reads N008 only for the edited node and keeps the others' (the
    whole-graph walk cost 0.6 s at 100k nodes); the result, order included, is a full
    run's, whichever node the edit touches."""
    from tests.check.cases import with_raw_string

    nodes = [
        helper.make_node("Softmax", [src], [dst], name=name, axis=1)
        for src, dst, name in (("x", "a", "NODEA"), ("a", "b", "mid"), ("b", "y", "NODEC"))
    ]
    vi = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2, 3]) for n in ("x", "y")]
    m = helper.make_model(
        helper.make_graph(nodes, "g", [vi[0]], [vi[1]]), opset_imports=[helper.make_opsetid("", 17)]
    )
    m = with_raw_string(m, b"NODEA", b"N\xffDEA")
    m = with_raw_string(m, b"NODEC", b"N\xfeDEC")
    local = _spy_on_local_runs(monkeypatch)
    doc = Document.from_model(m)
    v = Validator(doc)
    assert [d.code for d in v.validate()].count("N008") == 2
    for index in (1, 0, 2):
        _step(v, cmd.SetAttribute("main", index, helper.make_attribute("axis", 0)))
        _step(v, "undo")
    assert local and all(local)
