"""Structural diff: planted changes are found, renames and re-sorting are not changes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.model.diff import diff
from onnxviz.model.document import Document
from tests.model import diff_corpus as C

PAIRS = {
    "mlp": C.mlp,
    "cnn": lambda: C.cnn(True),
    "layernorm": lambda: C.layernorm(True),
    "loop": C.loop_model,
}


def _one_change(d, kind: str):
    graphs = d.graphs()
    return [x for g in graphs for x in getattr(g, kind)]


@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("seed", [1, 2])
def test_renamed_and_resorted_model_has_no_change(name: str, seed: int) -> None:
    model = PAIRS[name]()
    renamed = C.rename_everything(model, seed)
    d = diff(model, renamed)
    assert d.equal, d.to_json()
    assert d.counts()["renamed_values"] > 0
    # every node found its counterpart (names played no part)
    assert all(len(g.matches) == len(diff(model, model).main.matches) for g in [d.main])


def test_identical_models_are_equal() -> None:
    m = C.mlp()
    d = diff(m, C.copy(m))
    assert d.equal and d.counts()["renamed_values"] == 0
    assert d.counts()["matched"] == len(m.graph.node)


@pytest.mark.parametrize("renamed", [False, True])
def test_attribute_edit_is_found_on_its_node(renamed: bool) -> None:
    a = C.mlp()
    b = C.copy(a)
    C.node(b, "softmax").attribute[0].i = 0
    if renamed:
        b = C.rename_everything(b, 5)
    d = diff(a, b)
    assert not d.equal
    assert [c.a.label for c in d.main.changed] == ["softmax"]
    (detail,) = d.main.changed[0].details
    assert (detail.what, detail.name, detail.a, detail.b) == ("attribute", "axis", "-1", "0")


def test_attribute_added_and_removed() -> None:
    a = C.mlp()
    b = C.copy(a)
    del C.node(b, "softmax").attribute[:]
    d = diff(a, b)
    assert [x.what for x in d.main.changed[0].details] == ["attribute_removed"]
    d = diff(b, a)
    assert [x.what for x in d.main.changed[0].details] == ["attribute_added"]


def test_rewired_input_is_found() -> None:
    a = C.mlp()
    b = C.copy(a)
    C.node(b, "add1").input[0] = "mm0"  # was mm1: a skip from layer 0
    for renamed in (False, True):
        d = diff(a, C.rename_everything(b, 3) if renamed else b)
        changed = {c.a.label: c for c in d.main.changed}
        assert "add1" in changed
        detail = changed["add1"].details[0]
        assert detail.what == "input" and detail.name == "input 0" and detail.a == "mm1"


def test_inserted_and_removed_nodes() -> None:
    a = C.mlp()
    b = C.copy(a)
    b.graph.node.insert(2, helper.make_node("Identity", ["add0"], ["ins"], name="inserted"))
    C.node(b, "relu0").input[0] = "ins"
    d = diff(a, b)
    assert [n.label for n in d.main.added] == ["inserted"]
    assert not d.main.removed and not d.main.changed  # relu0 reads the new node: told there
    d = diff(C.rename_everything(b, 9), a)
    assert [n.op_type for n in d.main.removed] == ["Identity"]
    assert not d.main.added and not d.main.changed


def test_changed_weight_reports_value_statistics() -> None:
    a = C.mlp()
    b = C.copy(a)
    w = numpy_helper.to_array(next(t for t in b.graph.initializer if t.name == "w1")).copy()
    w_old = w.copy()
    w[0, :4] += 0.25
    idx = next(i for i, t in enumerate(b.graph.initializer) if t.name == "w1")
    b.graph.initializer[idx].CopyFrom(numpy_helper.from_array(w, "w1"))
    d = diff(a, C.rename_everything(b, 4))
    (changed,) = d.main.changed_weights
    assert changed.a == "w1"
    assert changed.max_abs == pytest.approx(0.25, abs=1e-6)
    assert changed.fraction_changed == pytest.approx(4 / 64)
    assert changed.max_rel == pytest.approx(float(np.max(0.25 / np.abs(w_old[0, :4]))), rel=1e-5)
    assert not d.main.changed  # a weight change is not a node change


def test_weight_dtype_change() -> None:
    a = C.mlp()
    b = C.copy(a)
    idx = next(i for i, t in enumerate(b.graph.initializer) if t.name == "b0")
    arr = numpy_helper.to_array(b.graph.initializer[idx]).astype(np.float16)
    b.graph.initializer[idx].CopyFrom(numpy_helper.from_array(arr, "b0"))
    (w,) = diff(a, b).main.changed_weights
    assert (w.dtype_a, w.dtype_b) == ("float32", "float16")
    assert 0 < w.max_abs < 1e-3


def test_change_inside_loop_body_shows_on_the_loop() -> None:
    d = diff(C.loop_model(1.0), C.rename_everything(C.loop_model(2.0), 7))
    (loop,) = d.main.changed
    assert loop.a.op_type == "Loop"
    assert [x.what for x in loop.details] == ["body"]
    body = d.main.children[0]
    assert body.path_a == "main/body:loop"
    (alpha,) = body.changed
    assert alpha.a.label == "alpha" and alpha.details[0].name == "value"


def test_change_two_levels_down_shows_on_every_parent() -> None:
    a = C.loop_model()
    b = C.copy(a)
    body = b.graph.node[0].attribute[0].g
    choose = next(n for n in body.node if n.op_type == "If")
    else_branch = next(x for x in choose.attribute if x.name == "else_branch").g
    else_branch.node[0].op_type = "Abs"
    d = diff(a, b)
    assert [c.a.label for c in d.main.changed] == ["loop"]
    loop_body = d.main.children[0]
    assert [c.a.label for c in loop_body.changed] == ["choose"]
    inner = {g.path_a: g for g in loop_body.children}
    branch = inner["main/body:loop/else_branch:choose"]
    (replaced,) = branch.changed  # one op for another at the same place
    assert (replaced.a.op_type, replaced.b.op_type) == ("Neg", "Abs")
    assert replaced.details[0].what == "op"
    assert inner["main/body:loop/then_branch:choose"].equal


@pytest.mark.parametrize("rename", [False, True])
def test_batchnorm_folding_matches_fused_convs_to_conv_bn_pairs(rename: bool) -> None:
    before = C.cnn(True)
    after = C.fold_batchnorm(before)
    d = diff(C.rename_everything(before, 2) if rename else before, after)
    groups = sorted(d.main.fused, key=lambda f: f.b[0].label)
    assert [f.kind for f in groups] == ["many-to-1", "many-to-1"]
    assert [sorted(n.op_type for n in f.a) for f in groups] == [["BatchNormalization", "Conv"]] * 2
    assert [[n.label for n in f.b] for f in groups] == [["fused_conv0"], ["fused_conv1"]]
    assert not d.main.added and not d.main.removed
    # the other way round: 1-to-many
    d = diff(after, before)
    assert sorted(f.kind for f in d.main.fused) == ["1-to-many", "1-to-many"]


def test_layernorm_matches_its_decomposition() -> None:
    d = diff(C.layernorm(False), C.rename_everything(C.layernorm(True), 4))
    (group,) = d.main.fused
    assert group.kind == "1-to-many"
    assert [n.op_type for n in group.a] == ["LayerNormalization"]
    assert len(group.b) == 9
    assert not d.main.added and not d.main.removed
    assert {c.a.label for c in d.main.changed} == set()


def test_qdq_model_matches_node_for_node_and_compares_dequantized_weights() -> None:
    a = C.mlp()
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    q = C.quantize_qdq(a, x)
    d = diff(a, q)
    assert not d.main.added and not d.main.removed and not d.main.changed
    assert d.counts()["matched"] == len(a.graph.node)
    weights = {w.a: w for w in d.main.weights}
    assert weights["w0"].note == "compared dequantized"
    assert weights["w0"].max_abs < 0.01  # half a quantization step


def test_model_level_fields() -> None:
    a = C.mlp()
    b = C.copy(a)
    b.opset_import[0].version = 18
    b.ir_version = 9
    b.producer_name = "other"
    helper.set_model_props(b, {"k": "v"})
    d = diff(a, b)
    found = {(x.what, x.name): (x.a, x.b) for x in d.model}
    assert found[("opset", "ai.onnx")] == ("17", "18")
    assert found[("ir_version", "ir_version")] == ("8", "9")
    assert found[("model", "producer_name")] == ("", "other")
    assert found[("metadata", "k")] == ("", "v")
    assert not d.equal


def test_graph_input_type_change() -> None:
    a = C.mlp()
    b = C.copy(a)
    b.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    d = diff(a, b)
    assert [(x.what, x.a, x.b) for x in d.main.io] == [
        ("graph_input", "float32[2,8]", "float64[2,8]")
    ]


def test_anchor_pins_an_ambiguous_match() -> None:
    # two parallel identical branches: structure alone cannot tell them apart
    def model(names: tuple[str, str]):
        nodes = [
            helper.make_node("Relu", ["x"], ["r0"], name=names[0]),
            helper.make_node("Relu", ["x"], ["r1"], name=names[1]),
            helper.make_node("Add", ["r0", "r1"], ["y"], name="add"),
        ]
        return helper.make_model(
            helper.make_graph(
                nodes,
                "g",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
            )
        )

    a, b = model(("p", "q")), model(("s", "t"))
    d = diff(a, b, anchors=[("p", "t")])
    pairs = {(a.graph.node[i].name, b.graph.node[j].name) for i, j in d.main.matches}
    assert ("p", "t") in pairs and ("q", "s") in pairs


def test_functions_are_diffed_and_listed() -> None:
    from onnx import helper as h

    def with_function(op: str):
        fn = h.make_function(
            "local", "F", ["a"], ["b"], [h.make_node(op, ["a"], ["b"])], [h.make_opsetid("", 17)]
        )
        g = h.make_graph(
            [h.make_node("F", ["x"], ["y"], domain="local", name="f")],
            "g",
            [h.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [h.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        )
        return h.make_model(
            g, functions=[fn], opset_imports=[h.make_opsetid("", 17), h.make_opsetid("local", 1)]
        )

    d = diff(with_function("Relu"), with_function("Relu"))
    assert d.equal
    d = diff(with_function("Relu"), with_function("Neg"))
    (fd,) = d.functions
    assert fd.path_a == "function:local:F"
    (replaced,) = fd.changed
    assert (replaced.a.op_type, replaced.b.op_type) == ("Relu", "Neg")
    assert not d.equal


def test_external_weights_compared_in_chunks(tmp_path, monkeypatch) -> None:
    from onnxviz.model.diff import weights

    monkeypatch.setattr(weights, "CHUNK_BYTES", 1000)  # many chunks, boundaries mid-row
    rng = np.random.default_rng(1)
    w = rng.standard_normal((300, 7)).astype(np.float32)
    w2 = w.copy()
    w2[123, 3] = np.nan
    w2[250, 1] += 3.0
    paths = []
    for k, arr in enumerate((w, w2)):
        folder = tmp_path / f"m{k}"
        folder.mkdir()
        (folder / "data.bin").write_bytes(b"\0" * 16 + arr.tobytes())
        t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[300, 7])
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "data.bin"), ("offset", "16"), ("length", str(arr.nbytes))):
            t.external_data.add(key=key, value=value)
        g = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 300])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 7])],
            [t],
        )
        m = helper.make_model(g)
        path = str(folder / "m.onnx")
        with open(path, "wb") as fh:
            fh.write(m.SerializeToString())
        paths.append(path)
    d = diff(Document.open(paths[0]), Document.open(paths[1]))
    (wd,) = d.main.changed_weights
    assert wd.fraction_changed == pytest.approx(2 / w.size)
    assert wd.max_abs == np.inf  # a NaN against a number
    d_same = diff(Document.open(paths[0]), Document.open(paths[0]))
    assert d_same.equal and d_same.main.weights[0].fraction_changed == 0.0


def test_replaced_op_in_a_chain_keeps_the_rest_matched() -> None:
    a = C.mlp(layers=3)
    b = C.copy(a)
    C.node(b, "add1").op_type = "Sub"
    d = diff(a, C.rename_everything(b, 6))
    (changed,) = d.main.changed
    assert changed.a.label == "add1" and changed.b.op_type == "Sub"
    assert [(x.what, x.a, x.b) for x in changed.details] == [("op", "::Add", "::Sub")]
    assert d.counts()["matched"] == len(a.graph.node)
    assert not d.main.added and not d.main.removed


def test_inserted_identities_do_not_shift_a_repeated_chain() -> None:
    # A long chain of identical layers: an inserted node must not slide the matching
    a = C.mlp(layers=12, width=4)
    b = C.copy(a)
    for k in (2, 7):
        b.graph.node.append(
            helper.make_node("Identity", [f"relu{k}"], [f"relu{k}_id"], name=f"id{k}")
        )
        C.node(b, f"matmul{k + 1}").input[0] = f"relu{k}_id"
    d = diff(a, C.rename_everything(b, 11))
    b_names = C.rename_everything(b, 11)
    pairs = [(a.graph.node[i].name, b_names.graph.node[j].op_type) for i, j in d.main.matches]
    assert len(pairs) == len(a.graph.node)
    assert sorted(n.op_type for n in d.main.added) == ["Identity", "Identity"]
    assert not d.main.changed and not d.main.removed


def test_json_form_is_stable() -> None:
    a = C.mlp()
    b = C.copy(a)
    C.node(b, "softmax").attribute[0].i = 0
    data = diff(a, b).to_json()
    assert data["format"] == "onnxviz.diff/1"
    assert set(data) == {"format", "a", "b", "equal", "counts", "model", "graphs"}
    graph = data["graphs"][0]
    assert set(graph) == {
        "a",
        "b",
        "equal",
        "matched",
        "changed",
        "added",
        "removed",
        "fused",
        "weights",
        "io",
        "renamed_values",
    }
    assert graph["changed"][0]["details"][0] == {
        "what": "attribute",
        "name": "axis",
        "a": "-1",
        "b": "0",
    }
