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


def _painted_names(tree) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Each name as the tree paints it: the Properties delegate's elision, recorded
    while the viewport is drawn."""
    from onnxviz.ui.docks.distinct_elision import DistinctElisionDelegate

    painted: dict[str, str] = {}
    production = tree.itemDelegateForColumn(0)
    assert isinstance(production, DistinctElisionDelegate)

    class Recorder(DistinctElisionDelegate):
        def paint(self, painter, option, index) -> None:  # type: ignore[no-untyped-def]
            shown = QStyleOptionViewItem(option)
            self.initStyleOption(shown, index)
            # one line (a wrapped name showed its first words and an ellipsis)
            wraps = shown.features & QStyleOptionViewItem.ViewItemFeature.WrapText
            assert not (shown.text and wraps), shown.text
            style = tree.style()
            width = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, shown, tree)
            painted[shown.text] = shown.fontMetrics.elidedText(
                shown.text, shown.textElideMode, width.width()
            )
            super().paint(painter, option, index)

    recorder = Recorder(tree)
    tree.setItemDelegateForColumn(0, recorder)
    try:
        tree.viewport().repaint()
        tree.viewport().grab()
    finally:
        tree.setItemDelegateForColumn(0, production)
    return painted


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
    painted = _painted_names(tree)
    shown = {name: painted[name] for name in ATTRIBUTES}
    assert any("…" in text for text in shown.values())  # the column is too narrow for them
    assert len(set(shown.values())) == len(ATTRIBUTES), shown


def test_a_function_overload_reads_whole_in_the_model_properties(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.present.models import overloads_and_nested_calls

    path = str(tmp_path / "overloads.onnx")
    onnx.save(overloads_and_nested_calls(), path)
    window.files.open_path(path, background=False)
    tree = window.properties_dock.tree
    functions = next(
        tree.topLevelItem(i)
        for i in range(tree.topLevelItemCount())
        if tree.topLevelItem(i).text(0) == "Functions"
    )
    painted = _painted_names(tree)
    names = [functions.child(j).text(0) for j in range(functions.childCount())]
    shown = [painted[name] for name in names]
    # the two overloads read apart (each whole, or elided where they differ)
    assert len(set(shown)) == len(names), shown
    assert all("…" not in text or text.startswith("Scale") for text in shown), shown


def test_a_long_graph_value_wraps_instead_of_being_cut(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QRect, Qt

    from tests.present.models import overloads_and_nested_calls

    path = str(tmp_path / "overloads.onnx")
    onnx.save(overloads_and_nested_calls(), path)
    window.resize(1280, 720)
    window.files.open_path(path, background=False)
    window.actions_.expand_bodies.trigger()  # View > Expand All Bodies
    inside = next(
        n
        for n in window.graph_scene.nodes.values()
        if n.data_item.graph_path.startswith("function:") and not n.is_frame
    )
    window.graph_scene.clearSelection()
    inside.setSelected(True)  # a node inside a function body
    tree = window.properties_dock.tree
    node = tree.topLevelItem(0)
    graph = next(
        node.child(j) for j in range(node.childCount()) if node.child(j).text(0) == "graph"
    )
    text = graph.text(1)
    assert text.startswith("function local.")
    width = tree.header().sectionSize(1) - 8
    metrics = tree.fontMetrics()
    assert metrics.horizontalAdvance(text) > width  # one line cannot hold it
    needed = metrics.boundingRect(
        QRect(0, 0, width, 1000), int(Qt.TextFlag.TextWordWrap), text
    ).height()
    assert tree.visualItemRect(graph).height() >= needed  # the row has its lines
    # rows with an editor keep the editor's height
    name = next(node.child(j) for j in range(node.childCount()) if node.child(j).text(0) == "name")
    editor = tree.itemWidget(name, 1)
    assert (
        editor is not None and tree.visualItemRect(name).height() <= editor.sizeHint().height() + 6
    )


def test_a_default_attribute_keeps_its_name_when_elided(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import numpy as np
    from onnx import numpy_helper

    t = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        "g",
        [t("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [t("y", TensorProto.FLOAT, [1, 1, 2, 2])],
        initializer=[numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")],
    )
    path = str(tmp_path / "conv.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    window.resize(1024, 640)
    window.files.open_path(path, background=False)
    conv = next(n for n in window.graph_scene.nodes.values() if n.data_item.title == "Conv")
    window.graph_scene.clearSelection()
    conv.setSelected(True)
    painted = _painted_names(window.properties_dock.tree)
    shown = painted["auto_pad (default)"]
    assert "…" in shown  # the column is too narrow for it here
    assert shown.startswith("auto_pad"), shown
