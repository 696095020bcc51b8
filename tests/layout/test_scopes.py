"""Name-scope grouping."""

from __future__ import annotations

from onnxviz.layout import groups_from_scopes


def test_scopes_nest_and_nodes_go_to_their_deepest_scope() -> None:
    names = [
        "/model/layers.0/self_attn/MatMul",
        "/model/layers.0/self_attn/Softmax",
        "/model/layers.0/mlp/MatMul",
        "/model/layers.0/mlp/Relu",
        "/model/layers.1/mlp/MatMul",
        "/model/layers.1/mlp/Relu",
        "input",
    ]
    groups, parents = groups_from_scopes(names)
    by_id = {g.id: g for g in groups}
    assert parents[0] == "/model/layers.0/self_attn"
    assert parents[6] is None
    assert by_id["/model/layers.0/self_attn"].parent == "/model/layers.0"
    assert by_id["/model/layers.0"].parent == "/model"
    assert by_id["/model"].parent is None
    assert by_id["/model/layers.0/mlp"].label == "mlp"


def test_single_child_scopes_fold_into_their_parent() -> None:
    names = [
        "/m/layers.0/q_proj/MatMul",  # q_proj holds only this node
        "/m/layers.0/Softmax",
        "/m/layers.0/k_proj/MatMul",
        "/m/layers.0/k_proj/Add",
    ]
    groups, parents = groups_from_scopes(names)
    ids = {g.id for g in groups}
    assert "/m/layers.0/q_proj" not in ids
    assert parents[0] == "/m/layers.0"
    assert parents[2] == "/m/layers.0/k_proj"
    # /m holds only layers.0, so it folds too and layers.0 becomes top level.
    assert "/m" not in ids
    assert {g.id: g.parent for g in groups}["/m/layers.0"] is None


def test_folding_can_be_turned_off() -> None:
    groups, parents = groups_from_scopes(["/a/b/X"], collapse_single_child=False)
    assert {g.id for g in groups} == {"/a", "/a/b"}
    assert parents == ["/a/b"]
