"""NodeId and its written forms (model.node_id): made and read in one place."""

from __future__ import annotations

from onnx import helper

from onnxviz.model.document import Document
from onnxviz.model.node_id import (
    NodeId,
    group_item_id,
    parse_item_id,
    resolve_address,
    split_address,
    split_group_id,
)
from tests.check.cases import model, vi


def test_identity_is_path_and_index_and_prints_as_the_address() -> None:
    a = NodeId("main", 3, "relu")
    assert a == NodeId("main", 3) and hash(a) == hash(NodeId("main", 3))
    assert str(a) == "main::relu" and str(NodeId("main", 3)) == "main::#3"
    assert a.item_id == "main#3"
    assert sorted([NodeId("main", 2), NodeId("main", 1)])[0].index == 1


def test_item_ids_round_trip_and_other_items_are_not_nodes() -> None:
    ref = NodeId("main/body:Loop_3", 12)
    assert parse_item_id(ref.item_id) == ref
    assert parse_item_id("main|g:/enc") is None
    assert parse_item_id("main|g:/enc#1") is None
    assert parse_item_id("main|in:x") is None
    assert split_group_id(group_item_id("main", "/enc/layer")) == ("main", "/enc/layer")
    assert split_group_id("main#4") is None


def test_addresses_split_where_the_graph_part_is_a_graph() -> None:
    # A function with an empty domain has '::' in its path; a node name may too.
    graphs = {"main", "function::Gelu"}
    assert split_address("function::Gelu::#0", graphs) == ("function::Gelu", "#0")
    assert split_address("main::a::b", graphs) == ("main", "a::b")
    assert split_address("relu") is None


def test_resolving_an_address_against_a_documents_index() -> None:
    m = model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="a::b"),
            helper.make_node("Neg", ["a"], ["y"]),
        ],
        [vi("x")],
        [vi("y")],
    )
    doc = Document.from_model(m)
    graphs = {s.path for s in doc.scopes()}

    def index_of(path: str, label: str) -> int | None:
        return doc.scope(path).node_index(label)

    assert resolve_address("main::a::b", graphs, index_of) == NodeId("main", 0)
    assert resolve_address("main::#1", graphs, index_of) == NodeId("main", 1)
    assert resolve_address("main::#7", graphs, index_of) is None
    assert resolve_address("nowhere::#0", graphs, index_of) is None
