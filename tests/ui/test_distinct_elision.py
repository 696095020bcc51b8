"""Attribute names in a narrow Properties dock stay apart (issue 18 item 1, tried again
on an skl2onnx tree ensemble): elided in the middle, nodes_falsenodeids, nodes_featureids,
nodes_nodeids and nodes_treeids all read "node…eids"."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper
from PySide6.QtWidgets import QStyle, QStyleOptionViewItem

pytestmark = pytest.mark.qt

# a TreeEnsembleClassifier's integer-list attributes, as skl2onnx writes them
ATTRIBUTES = [
    "class_ids",
    "class_nodeids",
    "class_treeids",
    "nodes_falsenodeids",
    "nodes_featureids",
    "nodes_missing_value_tracks_true",
    "nodes_nodeids",
    "nodes_treeids",
    "nodes_truenodeids",
]


def _ensemble_like() -> onnx.ModelProto:
    node = helper.make_node(
        "Forest", ["x"], ["y"], domain="my.ml", **{name: [0, 1] for name in ATTRIBUTES}
    )
    t = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node], "g", [t("x", TensorProto.FLOAT, [2])], [t("y", TensorProto.FLOAT, [2])]
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ml", 1)]
    )


def _shown_name(tree, item) -> str:  # type: ignore[no-untyped-def]
    """The name as the tree paints it: elided by the column's delegate to its width."""
    index = tree.indexFromItem(item, 0)
    option = QStyleOptionViewItem()
    tree.initViewItemOption(option)
    option.rect = tree.visualRect(index)
    delegate = tree.itemDelegateForColumn(0) or tree.itemDelegate()
    delegate.initStyleOption(option, index)
    width = tree.style().subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, tree).width()
    return option.fontMetrics.elidedText(option.text, option.textElideMode, width)


@pytest.mark.parametrize("width", [1280, 1024])
def test_elided_attribute_names_stay_distinct(window, qtbot, tmp_path, width: int) -> None:  # type: ignore[no-untyped-def]
    window.resize(width, 640)
    path = str(tmp_path / "forest.onnx")
    onnx.save(_ensemble_like(), path)
    window.files.open_path(path, background=False)
    node = next(
        n for n in window.graph_scene.nodes.values() if n.data_item.title.endswith("Forest")
    )
    window.graph_scene.clearSelection()
    node.setSelected(True)  # a click on the box
    tree = window.properties_dock.tree
    qtbot.waitUntil(lambda: tree.viewport().width() > 0)
    items = {
        tree.topLevelItem(i).child(j).text(0): tree.topLevelItem(i).child(j)
        for i in range(tree.topLevelItemCount())
        for j in range(tree.topLevelItem(i).childCount())
    }
    shown = {name: _shown_name(tree, items[name]) for name in ATTRIBUTES}
    assert any("…" in text for text in shown.values())  # the column is too narrow for them
    assert len(set(shown.values())) == len(ATTRIBUTES), shown
