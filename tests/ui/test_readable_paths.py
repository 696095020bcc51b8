"""Every pane names a subgraph as the breadcrumbs do (issue 18, item 15, tried again on
fresh models): ``main > Loop#0 > If#1 (else)``, never the path ``main/body:#0/else_branch:#1``;
and the Outline lists the local functions of any model, not only of big ones."""

from __future__ import annotations

import re

import onnx
import pytest
from onnx import helper

from tests.present.models import nested_control_flow, overloads_and_nested_calls
from tests.ui.clicks import select_box, tree_items
from tests.ui.tables import column, double_click

pytestmark = pytest.mark.qt

ELSE = "main > Loop#0 > If#1 (else)"


def _nested_with_a_problem_in_the_else_branch() -> onnx.ModelProto:
    """torch-style unnamed Loop > If, whose else branch's Mul has an attribute Mul does
    not have (so the validator reports a problem located in that branch)."""
    model = nested_control_flow()
    loop = model.graph.node[0]
    if_node = loop.attribute[0].g.node[1]
    else_branch = next(a.g for a in if_node.attribute if a.name == "else_branch")
    else_branch.node[0].attribute.append(helper.make_attribute("bogus", 1))
    return model


def _open(window, model: onnx.ModelProto, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "model.onnx")
    onnx.save(model, path)
    window.files.open_path(path, background=False)


def test_properties_find_and_diagnostics_name_a_branch_by_its_owners(
    window, qtbot, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    _open(window, _nested_with_a_problem_in_the_else_branch(), tmp_path)
    window.actions_.expand_bodies.trigger()
    select_box(window, "Mul")
    rows = {(r.key, r.value) for r in window.properties_dock.rows()}
    assert ("graph", ELSE) in rows

    # a value of the branch names its graph the same way
    window.properties.show_value("main/body:#0/else_branch:#1", "else_out")
    assert ("graph", ELSE) in {(r.key, r.value) for r in window.properties_dock.rows()}

    window.find_dock.query.setText("Mul")
    window.find_dock.run_query()
    texts = [
        window.find_dock.results.item(i).text() for i in range(window.find_dock.results.count())
    ]
    assert f"op: Mul (#0)  [{ELSE}]" in texts
    assert not any("body:" in t or "else_branch:" in t for t in texts)

    window.edits.wait_validated()
    tree = window.diagnostics_dock.tree
    qtbot.waitUntil(lambda: tree.topLevelItemCount() > 0)
    locations = [tree.topLevelItem(i).text(3) for i in range(tree.topLevelItemCount())]
    assert any(loc.startswith(ELSE) for loc in locations), locations
    assert not any("body:" in loc for loc in locations)
    # and a click on it still finds the node in that branch
    item = next(
        tree.topLevelItem(i)
        for i in range(tree.topLevelItemCount())
        if tree.topLevelItem(i).text(3).startswith(ELSE)
    )
    window.graph_scene.clearSelection()
    tree.itemClicked.emit(item, 0)
    selected = window.graph_scene.selectedItems()
    assert [n.data_item.title for n in selected] == ["Mul"]


def test_the_outline_names_subgraphs_by_their_owner_node(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _open(window, nested_control_flow(), tmp_path)
    tree = window.outline_dock.tree
    main = tree.topLevelItem(0)
    loop = next(
        main.child(j) for j in range(main.childCount()) if "nodes)" in main.child(j).text(0)
    )
    assert loop.text(0) == "Loop#0  (3 nodes)"
    loop.setExpanded(True)  # as a click on its arrow does
    branches = sorted(
        loop.child(j).text(0) for j in range(loop.childCount()) if "nodes)" in loop.child(j).text(0)
    )
    assert branches == ["If#1 (else)  (1 nodes)", "If#1 (then)  (1 nodes)"]
    # activating a branch shows it in Properties, named the same way
    other = next(
        loop.child(j)
        for j in range(loop.childCount())
        if loop.child(j).text(0).startswith("If#1 (else)")
    )
    tree.itemActivated.emit(other, 0)
    assert {r.key: r.value for r in window.properties_dock.rows()}["path"] == ELSE
    assert not any("body:" in i.text(0) or "_branch:" in i.text(0) for i in tree_items(tree))


def test_the_outline_lists_the_local_functions_of_a_small_model(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = overloads_and_nested_calls()
    _open(window, model, tmp_path)
    tree = window.outline_dock.tree
    tops = [tree.topLevelItem(i) for i in range(tree.topLevelItemCount())]
    functions = next(t for t in tops if t.text(0).startswith("functions"))
    assert functions.text(0) == f"functions ({len(model.functions)})"
    titles = [functions.child(j).text(0) for j in range(functions.childCount())]
    assert any(t.startswith("local.Scale (double)  (") for t in titles), titles
    assert any(t.startswith("local.Scale (square)  (") for t in titles), titles
    # activating a function's body shows it, as for any graph
    item = next(
        functions.child(j)
        for j in range(functions.childCount())
        if functions.child(j).text(0).startswith("local.Scale (double)")
    )
    tree.itemActivated.emit(item, 0)
    rows = {r.key: r.value for r in window.properties_dock.rows()}
    assert rows["path"] == "function local.Scale (double)"


def test_the_model_properties_tell_two_overloads_of_a_function_apart(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _open(window, overloads_and_nested_calls(), tmp_path)
    window.graph_scene.clearSelection()  # nothing selected: the model's properties
    functions = [
        r.key
        for r in window.properties_dock.rows()
        if r.value.startswith("local ·") and r.key.startswith("Scale")
    ]
    assert sorted(functions) == ["Scale (double)", "Scale (square)"]


def test_a_refused_rename_in_a_branch_names_the_graphs_as_the_breadcrumbs_do(
    window, qtbot, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt

    _open(window, nested_control_flow(), tmp_path)
    window.properties.show_value("main/body:#0/else_branch:#1", "else_out")
    editor = window.properties_dock.editor("Value", "name")
    editor.selectAll()
    qtbot.keyClicks(editor, "x_in")  # defined by the Loop body's Identity
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    message = window.statusBar().currentMessage()
    assert message.startswith("edit refused: cannot rename 'else_out' to 'x_in'"), message
    assert "already defined in graph 'main > Loop#0'" in message
    assert message.endswith(f"(graph '{ELSE}')")
    assert "body:" not in message and "_branch:" not in message
    refusal = next(d for d in window.diagnostics_dock.diagnostics if d.code == "EDIT")
    assert refusal.location.graph_path == "main/body:#0/else_branch:#1"  # still locatable


def test_stepping_into_unnamed_bodies_names_their_owners(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    _open(window, nested_control_flow(), tmp_path)
    panel = window.run_panel
    feeds = {"n": np.array(2, np.int64), "c": np.array(True), "x0": np.ones(2, np.float32)}
    assert panel.run(feeds, mode="step")  # Run > Step: pauses before the first node
    assert panel.controller.wait(30)
    for _ in range(10):  # F11 until the run is inside the If's branch
        if "then_branch" in panel.widget.stack_label.text():
            break
        assert panel.step()
        assert panel.controller.wait(30)
    window.wait_idle()
    stack = panel.widget.stack_label.text()
    assert "Loop#0 iteration 1/2" in stack and "If#1 then_branch" in stack, stack
    frames = [panel.widget.frames.item(i).text() for i in range(panel.widget.frames.count())]
    assert frames == ["main", "Loop#0 iteration 1/2", "If#1 then_branch"]
    assert panel.status_text() == "paused at main > Loop#0 > If#1 (then)::#0 (Add)"
    # a value of the body, inspected, is titled with its graph named the same way
    assert panel.inspect_value("main/body:#0", "x_in")
    header = window.inspector_dock.inspector.header.text()
    assert "x_in  (main > Loop#0)" in header, header


def test_breakpoints_and_profile_name_body_nodes_readably_and_still_jump(
    window, qtbot, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    _open(window, nested_control_flow(), tmp_path)
    panel = window.run_panel
    raw = "main/body:#0/then_branch:#1::#0"
    panel.toggle_breakpoint(raw)  # F9 on the then-branch's Add
    listed = panel.widget.breakpoints.item(0)
    assert listed.text().startswith("main > Loop#0 > If#1 (then)::#0")
    feeds = {"n": np.array(2, np.int64), "c": np.array(True), "x0": np.ones(2, np.float32)}
    assert panel.run(feeds)
    assert panel.controller.wait(30)
    assert panel.status_text() == "breakpoint hit at main > Loop#0 > If#1 (then)::#0 (Add)"
    panel.toggle_breakpoint(raw)
    assert panel.continue_()
    assert panel.controller.wait(30)
    window.wait_idle()
    table = panel.widget.profile
    rows = {text: r for r, text in enumerate(column(table))}
    assert "main > Loop#0 > If#1 (then)::#0" in rows, sorted(rows)
    assert not any("body:" in text for text in rows)
    # a double-click on the row still shows that node on the canvas
    window.run_dock.show()
    panel.widget.tabs.setCurrentIndex(2)  # Profile
    window.graph_scene.clearSelection()
    double_click(qtbot, table, rows["main > Loop#0 > If#1 (then)::#0"])
    selected = window.graph_scene.selectedItems()
    assert [(n.data_item.title, n.data_item.graph_path) for n in selected] == [
        ("Add", "main/body:#0/then_branch:#1")
    ]


def test_the_compare_window_says_which_body_a_changed_node_is_in(qtbot) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.model.document import Document
    from onnxviz.ui.diff.compare_window import CompareWindow

    before = Document.from_model(nested_control_flow())
    after = Document.from_model(_nested_with_a_problem_in_the_else_branch())
    window = CompareWindow(before, after, title_a="before", title_b="after")
    qtbot.addWidget(window)
    changes = window.change_list
    rows = [
        (changes.topLevelItem(i).text(0), changes.topLevelItem(i).text(1))
        for i in range(changes.topLevelItemCount())
    ]
    texts = [text for text, _ in rows]
    assert f"changed: #0 (Mul) in {ELSE}" in texts, rows
    # the nodes holding it say how much changed inside, without their graphs' paths
    loop = next(details for text, details in rows if text == "changed: #0 (Loop)")
    assert re.fullmatch(r"body: \d+ changes inside", loop), loop
    assert not any("body:#" in text or "_branch:#" in text for row in rows for text in row)


def test_rewiring_a_branch_input_to_an_unknown_value_names_the_branch(
    window, qtbot, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt

    _open(window, nested_control_flow(), tmp_path)
    window.actions_.expand_bodies.trigger()
    select_box(window, "Mul")
    editor = window.properties_dock.editor("Inputs", "A")
    line = editor.lineEdit()
    line.selectAll()
    qtbot.keyClicks(line, "nowhere")
    qtbot.keyClick(line, Qt.Key.Key_Return)
    message = window.statusBar().currentMessage()
    assert f"no value named 'nowhere' is visible in graph '{ELSE}'" in message, message
