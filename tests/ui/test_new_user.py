"""What a new user meets in the docks and on the canvas (issue 18, widget-level items):
each test drives the clicks a user would and checks what they then see."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

pytestmark = pytest.mark.qt

EXPORTERS = Path(__file__).resolve().parent.parent / "data" / "exporters"


def _select(window, title: str):  # type: ignore[no-untyped-def]
    node = next(
        n
        for n in window.graph_scene.nodes.values()
        if n.data_item.title == title and not n.is_frame
    )
    window.graph_scene.clearSelection()
    node.setSelected(True)
    return node


def _items(tree):  # type: ignore[no-untyped-def]
    stack = [tree.topLevelItem(i) for i in range(tree.topLevelItemCount())]
    while stack:
        item = stack.pop()
        yield item
        stack.extend(item.child(j) for j in range(item.childCount()))


@pytest.mark.parametrize("width", [1400, 1024])
def test_properties_of_a_torch_conv_keep_the_values_in_view(window, qtbot, width: int) -> None:  # type: ignore[no-untyped-def]
    window.resize(width, 640 if width < 1400 else 900)
    window.open_path(str(EXPORTERS / "torch_dynamo_cnn.onnx"), background=False)
    _select(window, "Conv")
    dock = window.properties_dock
    tree = dock.tree
    qtbot.waitUntil(lambda: tree.viewport().width() > 0)
    viewport = tree.viewport().width()
    names = tree.header().sectionSize(0)
    # values get most of the width; nothing scrolls sideways
    assert names <= viewport * 0.5
    assert tree.header().sectionSize(1) >= viewport * 0.5
    assert tree.horizontalScrollBar().maximum() == 0 or not tree.horizontalScrollBar().isVisible()
    # the long metadata keys sit in one collapsed group
    group = next(i for i in _items(tree) if i.text(0).startswith("metadata ("))
    keys = [group.child(j).toolTip(0) for j in range(group.childCount())]
    assert "metadata pkg.onnxscript.rewriter.rule_name" in keys or any(
        k.startswith("metadata pkg.torch.onnx") for k in keys
    )
    assert not group.isExpanded()
    assert group.text(0) == f"metadata ({group.childCount()})"
    # a name too long for its column is elided on screen and whole in its tooltip
    longest = max(keys, key=len)
    item = next(group.child(j) for j in range(group.childCount()))
    assert item.toolTip(0).startswith("metadata ")
    assert tree.fontMetrics().horizontalAdvance(longest) > names  # it had to elide
    # an editor sits in the value column, inside the viewport, and still edits
    editor = dock.editor("Attributes", "strides")
    rect = editor.geometry()
    assert rect.left() >= names - 2 and rect.right() <= viewport + 2
    editor.setText("1, 1")
    editor.textEdited.emit("1, 1")
    editor.editingFinished.emit()
    conv = window.doc.main_scope.nodes[
        next(i for i, n in enumerate(window.doc.main_scope.nodes) if n.op_type == "Conv")
    ]
    assert list(next(a for a in conv.attribute if a.name == "strides").ints) == [1, 1]


def test_focusing_a_metadata_field_opens_its_group(window) -> None:  # type: ignore[no-untyped-def]
    window.open_path(str(EXPORTERS / "torch_dynamo_cnn.onnx"), background=False)
    node = _select(window, "Conv")
    assert node is not None
    dock = window.properties_dock
    row = next(r for r in dock.rows() if r.key.startswith("metadata "))
    assert dock.focus_field(row.field)
    group = next(i for i in _items(dock.tree) if i.text(0).startswith("metadata ("))
    assert group.isExpanded()
    assert dock.tree.currentItem().parent() is group
    assert dock.tree.currentItem().data(0, Qt.ItemDataRole.UserRole) is row
