"""What a new user meets on the canvas (issue 18, items 13-16): every box says what it
is, the expand marker leaves titles alone, overloads look different, paths of unnamed
nodes name their op, and one action opens every body."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from onnxviz.present.options import MARKER_W
from tests.present.models import example, nested_control_flow, overloads_and_nested_calls

pytestmark = pytest.mark.qt

EXPORTERS = Path(__file__).resolve().parent.parent / "data" / "exporters"


def _save(model: onnx.ModelProto, tmp_path: Path, name: str) -> str:
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


def test_expand_all_bodies_action_opens_loops_ifs_and_nested_function_calls(
    window, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(_save(nested_control_flow(), tmp_path, "cf.onnx"), background=False)
    assert not any(
        it.expanded for it in window.session.display.items.values() if it.kind != "group"
    )
    window.actions_.expand_bodies.trigger()
    window.wait_idle()
    items = window.session.display.items
    containers = [it for it in items.values() if it.kind == "container"]
    assert {it.title for it in containers} == {"Loop", "If"}
    assert {"Add", "Mul"} <= {it.title for it in items.values() if it.kind == "op"}
    # function bodies, and a call inside a function body, open too
    window.files.open_path(
        _save(overloads_and_nested_calls(), tmp_path, "fn.onnx"), background=False
    )
    window.actions_.expand_bodies.trigger()
    window.wait_idle()
    titles = [it.title for it in window.session.display.items.values() if it.kind == "op"]
    assert "Relu" in titles  # Outer -> Inner -> Relu
    assert not [
        it.id
        for it in window.session.display.items.values()
        if it.kind == "op" and it.expandable and not it.expanded
    ]


def test_two_overloads_look_different_and_open_their_own_bodies(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(
        _save(overloads_and_nested_calls(), tmp_path, "fn.onnx"), background=False
    )
    first, second = (window.session.display.items[f"main#{i}"] for i in (0, 1))
    assert first.title != second.title
    assert "double" in first.title and "square" in second.title
    window.navigation.toggle("main#0")
    window.wait_idle()
    window.navigation.toggle("main#1")
    window.wait_idle()
    inside = {
        it.id.split("/fn")[0]: it.title
        for it in window.session.display.items.values()
        if it.kind == "op" and "/fn" in it.id
    }
    assert inside == {"main#0": "Add", "main#1": "Mul"}


def test_expand_marker_leaves_room_for_the_title(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.theme import TextMetrics

    measure = TextMetrics()
    for model in (example("with_functions.onnx"), example("loop_with_if.onnx")):
        window.files.open_path(model, background=False)
        window.actions_.expand_bodies.trigger()
        window.wait_idle()
        for item in window.session.display.items.values():
            if item.kind == "op" and item.expandable:
                # centred title, marker at the right: a marker's width free on each side
                assert measure(item.title, True) + 2 * MARKER_W <= item.width, item.title
            if item.kind == "container":
                assert measure(item.title, True) + 2 * MARKER_W <= item.width, item.title


def test_breadcrumbs_name_unnamed_owners_by_op_type(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(_save(nested_control_flow(), tmp_path, "cf.onnx"), background=False)
    window.navigation.open_graph("main/body:#0/else_branch:#1")
    window.wait_idle()
    assert window.crumb_bar.label.text() == "main  ›  Loop#0  ›  If#1 (else)"


@pytest.mark.parametrize(
    "name", ["torch_torchscript_transformer", "torch_dynamo_transformer", "optimum_bert"]
)
def test_every_box_says_what_it_is(window, name: str) -> None:  # type: ignore[no-untyped-def]
    path = EXPORTERS / f"{name}.onnx"
    window.files.open_path(str(path), background=False)
    window.navigation.expand_all()
    window.actions_.expand_bodies.trigger()
    window.wait_idle()
    for node in window.graph_scene.nodes.values():
        d = node.data_item
        assert d.title.strip() or node.toolTip().strip(), d.id
        if d.kind == "proxy":
            assert d.title and d.title in node.toolTip()


def _dark_pixels_inside(window, item_id: str) -> int:  # type: ignore[no-untyped-def]
    node = window.graph_scene.nodes[item_id]
    rect = window.view.mapFromScene(node.sceneBoundingRect()).boundingRect().adjusted(3, 3, -3, -3)
    image = window.view.viewport().grab(rect).toImage()
    return sum(
        1
        for x in range(image.width())
        for y in range(image.height())
        if image.pixelColor(x, y).lightness() < 110
    )


def test_fitted_cnn_keeps_op_titles_readable(window) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.canvas import lod

    window.files.open_path(str(EXPORTERS / "torch_dynamo_cnn.onnx"), background=False)
    window.view.fit()
    zoom = window.view.zoom()
    assert zoom < lod.TEXT_MIN  # the whole CNN at once: box text would be unreadable
    conv = next(i for i, it in window.session.display.items.items() if it.title == "Conv")
    assert _dark_pixels_inside(window, conv) > 10  # the title is drawn
    # far out the box is too small for its title: a label over the canvas names it
    window.view.set_zoom(lod.SMALL_TITLE_MIN / 2)
    assert ("Conv", conv) in {
        (label.text, label.item_id) for label in window.view.zoomed_out_labels()
    }
