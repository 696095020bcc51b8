"""The Compare window: colours, the changes list that jumps, synced selection and zoom,
side-by-side properties, numeric colouring and the first divergence, compare with disk."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxviz.model.document import Document
from onnxviz.ui.diff.pair_rows import node_rows
from tests.model import diff_corpus as C

pytestmark = pytest.mark.qt


def _window(qtbot, a, b):  # type: ignore[no-untyped-def]
    from onnxviz.ui.diff.compare_window import CompareWindow

    w = CompareWindow(Document.from_model(a), Document.from_model(b), title_a="a", title_b="b")
    qtbot.addWidget(w)
    w.show()
    return w


def test_colours_mark_every_change_on_its_side(qtbot) -> None:  # type: ignore[no-untyped-def]
    a = C.cnn(True)
    b = C.fold_batchnorm(a)
    C.node(b, "relu1").op_type = "Sigmoid"
    w = _window(qtbot, a, b)
    kinds_a = sorted(m.kind for m in w.a.marks.nodes.values())
    kinds_b = sorted(m.kind for m in w.b.marks.nodes.values())
    assert kinds_a == ["changed"] + ["fused"] * 4  # conv+bn twice, relu1 changed op
    assert kinds_b == ["changed"] + ["fused"] * 2
    marked = {w.a.key_of[i] for i, m in w.a.marks.nodes.items() if m.kind == "changed"}
    assert marked == {("main", next(i for i, n in enumerate(a.graph.node) if n.name == "relu1"))}


def test_changes_list_jumps_and_selects_both_sides(qtbot) -> None:  # type: ignore[no-untyped-def]
    a = C.mlp()
    b = C.rename_everything(a, 2)
    for n in b.graph.node:
        if n.op_type == "Softmax":
            n.attribute[0].i = 0
    w = _window(qtbot, a, b)
    assert w.change_list.topLevelItemCount() == 1
    w.step_change(1)
    ka, kb = w.a.selected_key(), w.b.selected_key()
    assert a.graph.node[ka[1]].name == "softmax"
    assert b.graph.node[kb[1]].op_type == "Softmax"
    rows = {r[0]: r for r in _rows(w)}
    assert rows["attribute axis"][1:] == ("-1", "0", True)
    assert rows["op"][3] is False


def _rows(w):  # type: ignore[no-untyped-def]
    out = []
    for r in range(w.props.rowCount()):
        cells = [w.props.item(r, c).text() for c in range(3)]
        from PySide6.QtCore import Qt

        differs = w.props.item(r, 0).background().style() != Qt.BrushStyle.NoBrush
        out.append((cells[0], cells[1], cells[2], differs))
    return out


def test_selection_and_zoom_follow_on_the_other_side(qtbot) -> None:  # type: ignore[no-untyped-def]
    a = C.mlp()
    b = C.rename_everything(a, 5)
    w = _window(qtbot, a, b)
    relu = next(i for i, n in enumerate(a.graph.node) if n.name == "relu1")
    item = w.a.node_item(("main", relu))
    item.setSelected(True)
    kb = w.b.selected_key()
    assert kb is not None and w.counterpart(w.a, ("main", relu)) == kb
    assert b.graph.node[kb[1]].op_type == "Relu"
    w.a.view.set_zoom(0.37)
    assert w.b.view.zoom() == pytest.approx(0.37)
    w.b.view.set_zoom(1.5)
    assert w.a.view.zoom() == pytest.approx(1.5)


def test_numbers_colour_edges_and_first_divergence(qtbot) -> None:  # type: ignore[no-untyped-def]
    a = C.mlp(layers=4, width=16)
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    q = C.quantize_qdq(a, x, bad_value="relu1", bad_scale=0.2)
    w = _window(qtbot, a, q)
    assert not w.first_action.isEnabled()
    w.compare_numbers({"x": x})
    assert w.first_action.isEnabled()
    assert w.a.marks.edges and w.b.marks.edges
    red = [m for m in w.a.marks.edges if m.pen().color().name() == "#d23c3c"]
    assert red  # the saturated value and what it feeds
    w.show_first_divergence()
    ka = w.a.selected_key()
    assert a.graph.node[ka[1]].name == "relu1"
    rows = {r[0]: r for r in _rows(w)}
    assert rows["value"][1:3] == ("relu1", "relu1_dqa")
    assert float(rows["max abs error"][1]) > 1.0
    assert w.tensor_dock is not None and w.tensor_dock.isVisible()  # both tensors inspected


def test_compare_with_file_on_disk(qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.diff import open_compare_window

    path = tmp_path / "m.onnx"
    onnx.save(C.mlp(), str(path))
    doc = Document.open(str(path))
    doc.set_attribute("softmax", "axis", 0)
    w = open_compare_window(None, doc, with_disk=True)
    qtbot.addWidget(w)
    assert "on disk" in w.a.title.text() and "edited" in w.b.title.text()
    (change,) = w.changes
    assert change.kind == "changed" and change.details[0].name == "axis"
    assert doc.is_modified  # comparing changed nothing


def test_pair_rows_flag_what_differs_not_renames() -> None:
    a = C.mlp()
    b = C.rename_everything(a, 1)
    na = next(n for n in a.graph.node if n.name == "matmul0")
    nb = next(
        n for n in b.graph.node if n.op_type == "MatMul" and n.input[0] == b.graph.input[0].name
    )
    rows = node_rows(na, nb, [])
    assert all(not r[3] for r in rows)  # renamed inputs are not differences
    assert [r[0] for r in rows] == ["op", "name", "input 0", "input 1", "output 0"]


def test_file_menu_compare_with_disk(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "m.onnx"
    onnx.save(C.mlp(), str(path))
    window.files.open_path(str(path), background=False)
    texts = [a.text() for a in window.compare_actions]
    assert texts == ["Compare &With…", "Compare With File on &Disk"]
    file_menu = window.menuBar().actions()[0].menu()
    assert all(a in file_menu.actions() for a in window.compare_actions)
    window.session.doc.set_attribute("softmax", "axis", 0)
    window.compare_actions[1].trigger()
    compare = window.compare_window
    assert [c.kind for c in compare.changes] == ["changed"]
    compare.close()
