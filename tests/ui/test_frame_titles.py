"""Edge labels keep off the frames' titles (issue 18, item 14, tried again on fresh
models): a type label such as ``float32[N,4]`` sat on a group's title ("encoder") or on a
Loop's slot label ("body"), in torch exports with name scopes and in scripted loops."""

from __future__ import annotations

import onnx
import pytest

from onnxviz.ui.canvas.items import EdgeItem
from tests.present.models import scoped_model

pytestmark = pytest.mark.qt


def _labels_on_titles(window) -> tuple[int, list[tuple[str, str]]]:  # type: ignore[no-untyped-def]
    scene = window.graph_scene
    frames = [n for n in scene.nodes.values() if n.is_frame]
    assert frames
    shown = [e for e in scene.items() if isinstance(e, EdgeItem) and e.show_label]
    on = [
        (e.data_edge.label, f.data_item.title)
        for e in shown
        for f in frames
        if e.label_rect.intersects(f.title_band())
    ]
    return len(shown), on


@pytest.mark.parametrize("size", [(1400, 900), (1280, 720)])
def test_edge_labels_keep_off_group_titles(window, tmp_path, size) -> None:  # type: ignore[no-untyped-def]
    window.resize(*size)
    path = str(tmp_path / "scoped.onnx")
    onnx.save(scoped_model(3), path)
    window.files.open_path(path, background=False)
    window.navigation.expand_all()  # View > Expand All Groups
    shown, on = _labels_on_titles(window)
    assert on == []
    # moved aside rather than dropped: most edges still say their type (20 of 26 here,
    # as many as before; the rest collide with each other and keep their tooltip)
    labelled = [e for e in window.graph_scene.edge_items if e.data_edge.label]
    assert shown >= 0.7 * len(labelled)


def test_edge_labels_keep_off_a_loops_title_and_slot_label(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.ui.test_readable_paths import _nested_with_a_problem_in_the_else_branch

    path = str(tmp_path / "nested.onnx")
    onnx.save(_nested_with_a_problem_in_the_else_branch(), path)
    window.files.open_path(path, background=False)
    window.actions_.expand_bodies.trigger()  # View > Expand All Bodies
    _shown, on = _labels_on_titles(window)
    assert on == []


def test_every_edge_label_shown_lies_inside_the_scene(window) -> None:  # type: ignore[no-untyped-def]
    """A label moved aside (to the left of its edge, or up and down) must stay where the
    view can scroll: on onnx's light ResNet-50 the input's label hung past the scene's
    left edge and the first view showed it cut ('at32[1,3,224,224]')."""
    import os

    from onnxviz.runtime.conformance import light_dir

    window.files.open_path(os.path.join(light_dir(), "light_resnet50.onnx"), background=False)
    window.wait_idle()
    scene = window.graph_scene
    bounds = scene.sceneRect()
    shown = [e for e in scene.edge_items if e.show_label]
    assert len(shown) > 100
    outside = [e.data_edge.value for e in shown if not bounds.contains(e.label_rect)]
    assert outside == []
