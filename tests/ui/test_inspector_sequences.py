"""Inspecting a sequence of maps (an skl2onnx classifier's ZipMap output) in a narrow
Tensor Inspector (issue 18 tried again on fresh models): the element tree kept 70 px,
"outp..." behind a scroll bar, and the header named the value twice."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PySide6.QtCore import Qt

pytestmark = pytest.mark.qt


def _zipmap_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [
            helper.make_node(
                "ZipMap",
                ["probabilities"],
                ["output_probability"],
                domain="ai.onnx.ml",
                classlabels_int64s=[0, 1],
            )
        ],
        "classifier",
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 2])],
        [
            helper.make_value_info(
                "output_probability",
                helper.make_sequence_type_proto(
                    helper.make_map_type_proto(
                        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])
                    )
                ),
            )
        ],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)],
    )


def test_a_sequence_of_maps_shows_its_element_names_in_a_narrow_inspector(
    window, qtbot, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    window.resize(1280, 720)
    path = str(tmp_path / "zipmap.onnx")
    onnx.save(_zipmap_model(), path)
    window.files.open_path(path, background=False)
    panel = window.run_panel
    probabilities = np.array([[0.25, 0.75]], np.float32)
    assert panel.run({"probabilities": probabilities})
    assert panel.controller.wait(30)
    window.wait_idle()
    assert panel.inspect_value("main", "output_probability")
    window.inspector_dock.show()
    window.inspector_dock.raise_()
    inspector = window.inspector_dock.inspector
    tree = inspector.tree
    root = tree.topLevelItem(0)
    name = tree.fontMetrics().horizontalAdvance(root.text(0))
    # the names read whole: the tree gets the width its first column needs
    qtbot.waitUntil(lambda: tree.isVisible() and tree.viewport().width() >= tree.columnWidth(0))
    assert tree.columnWidth(0) >= name
    # the header names the value once
    header = inspector.header.text()
    assert header.count("output_probability") == 1, header
    assert "seq(map(int -> float) x2) x1" in header
    # and the tree leads to the numbers, as numpy has them
    root.setExpanded(True)
    first = root.child(0)
    first.setExpanded(True)
    tree.setCurrentItem(first.child(1))
    assert float(first.child(1).data(0, Qt.ItemDataRole.UserRole)) == pytest.approx(
        float(probabilities[0, 1])
    )
