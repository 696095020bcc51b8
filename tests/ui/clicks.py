"""What the UI tests do as a user would, shared: pick a box on the canvas by its title,
walk every row of a tree widget."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def select_box(window: Any, title: str) -> Any:
    """Select (as a click would) the first box, not a frame, titled ``title``."""
    node = next(
        n
        for n in window.graph_scene.nodes.values()
        if n.data_item.title == title and not n.is_frame
    )
    window.graph_scene.clearSelection()
    node.setSelected(True)
    return node


def tree_items(tree: Any) -> Iterator[Any]:
    """Every item of a QTreeWidget, depth first."""
    stack = [tree.topLevelItem(i) for i in range(tree.topLevelItemCount())]
    while stack:
        item = stack.pop()
        yield item
        stack.extend(item.child(j) for j in range(item.childCount()))
