"""The run panel on a real main window: stepping, breakpoints, loops, run-to, NaN
breaks, pause/stop, compare with onnxruntime."""

from __future__ import annotations

import os
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz import bundled
from tests.runtime.engine_models import chain_model, make, vi
from tests.ui.tables import cell_tooltip, column

pytestmark = pytest.mark.qt

EXAMPLES = str(bundled.root() / "examples")
CHAIN_FEEDS = {"x": np.array([1.0, 2.0, 3.0], np.float32)}
W = np.array([1.0, -5.0, 0.5], np.float32)


def _open(window, tmp_path, model: onnx.ModelProto, name: str = "m.onnx"):  # type: ignore[no-untyped-def]
    path = str(tmp_path / name)
    onnx.save(model, path)
    panel = window.run_panel
    window.files.open_path(path, background=False)
    window.wait_idle()
    return panel


def _settle(window, panel) -> None:  # type: ignore[no-untyped-def]
    assert panel.controller.wait(30)
    window.wait_idle()


def test_step_node_by_node_highlights_and_values(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    panel = _open(window, tmp_path, chain_model())
    assert panel.run(CHAIN_FEEDS, mode="step")
    _settle(window, panel)
    s = panel.controller.session
    for index, label in enumerate(["add", "relu", "mul"]):
        assert panel.current_key() == ("main", index)
        assert s.current_node.label == label
        marks = panel.overlay.marks
        assert marks[("main", index)].current
        assert sum(m.current for m in marks.values()) == 1
        assert {k for k, m in marks.items() if m.executed} == {("main", i) for i in range(index)}
        assert panel.status_text().startswith("paused at main::" + label)
        panel.step()
        _settle(window, panel)
        if label == "add":
            np.testing.assert_allclose(s.value("s"), CHAIN_FEEDS["x"] + W)
        if label == "relu":
            np.testing.assert_allclose(s.value("r"), np.maximum(CHAIN_FEEDS["x"] + W, 0))
    assert s.state == "finished"
    np.testing.assert_allclose(s.outputs["y"], np.maximum(CHAIN_FEEDS["x"] + W, 0) * 2)
    assert all(m.executed for m in panel.overlay.marks.values())
    # every computed value has a badge with its runtime shape
    assert {b.text for b in panel.overlay.badges} == {"3"}
    assert len(panel.overlay.badges) >= 3


def test_breakpoint_is_hit_and_marked(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    panel = _open(window, tmp_path, chain_model())
    node = window.graph_scene.nodes
    mul = next(n for n in node.values() if n.data_item.node_index == 2)
    window.view.select_and_show(mul)
    panel.toggle_breakpoint()
    assert panel.controller.breakpoints == {"main::mul"}
    assert panel.overlay.marks[("main", 2)].breakpoint
    panel.run(CHAIN_FEEDS)
    _settle(window, panel)
    pause = panel.controller.last_pause
    assert pause.reason == "breakpoint" and pause.event.node.label == "mul"
    assert panel.controller.debugger.hits == {"main::mul": 1}
    assert panel.controller.session.state == "paused"
    panel.continue_()
    _settle(window, panel)
    assert panel.controller.session.state == "finished"
    panel.toggle_breakpoint("main::mul")
    assert not panel.overlay.marks[("main", 2)].breakpoint


def test_step_into_loop_body_sees_each_iteration(window) -> None:  # type: ignore[no-untyped-def]
    panel = window.run_panel
    window.files.open_path(os.path.join(EXAMPLES, "loop_with_if.onnx"), background=False)
    feeds = {"x": np.array([1.0, 2.0, 3.0], np.float32), "trip_count": np.array(3)}
    panel.set_breakpoint("main/body:accumulate::keep_going", True)
    panel.run(feeds)
    _settle(window, panel)
    seen = []
    for iteration in range(3):
        s = panel.controller.session
        assert panel.controller.last_pause.reason == "breakpoint"
        assert f"accumulate iteration {iteration + 1}/3" in panel.widget.stack_label.text()
        seen.append(float(s.value("iter_f")))
        # the values table shows the body frame's values
        assert "iter_f" in column(panel.widget.values)
        # the current node was revealed on the canvas, inside the loop body
        assert panel.overlay.marks[("main/body:accumulate", 5)].current
        panel.continue_()
        _settle(window, panel)
    assert seen == [0.0, 1.0, 2.0]
    assert panel.controller.session.state == "finished"


def test_step_out_leaves_the_body(window) -> None:  # type: ignore[no-untyped-def]
    panel = window.run_panel
    window.files.open_path(os.path.join(EXAMPLES, "loop_with_if.onnx"), background=False)
    feeds = {"x": np.array([1.0, 2.0, 3.0], np.float32), "trip_count": np.array(2)}
    panel.run(feeds, mode="step")
    _settle(window, panel)
    panel.step()  # into the body
    _settle(window, panel)
    assert panel.controller.session.current_node.graph_path == "main/body:accumulate"
    panel.step_out()
    _settle(window, panel)
    assert panel.controller.last_pause.reason == "frame_left"
    assert "iteration 1/2" in panel.status_text()


def test_run_to_node(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    panel = _open(window, tmp_path, chain_model())
    window.remember = None
    from onnxviz.runtime.inputs import FeedRecipe
    from onnxviz.ui.run.inputs_dialog import remember

    remember(window.session.doc.path, {}, {"x": FeedRecipe("ones")})
    relu = next(n for n in window.graph_scene.nodes.values() if n.data_item.node_index == 1)
    window.view.select_and_show(relu)
    assert panel.run_to_selected()
    _settle(window, panel)
    s = panel.controller.session
    assert panel.controller.last_pause.reason == "run_to"
    assert s.current_node.label == "relu"
    np.testing.assert_allclose(s.value("s"), np.ones(3, np.float32) + W)
    assert panel.overlay.marks[("main", 1)].current and panel.overlay.marks[("main", 0)].executed


def _nan_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Abs", ["x"], ["a"], name="abs"),
        helper.make_node("Neg", ["a"], ["n"], name="neg"),
        helper.make_node("Sqrt", ["n"], ["q"], name="sqrt"),
        helper.make_node("Add", ["q", "x"], ["y"], name="add"),
    ]
    return make(nodes, [vi("x", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, [2])])


def test_break_on_nan(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    panel = _open(window, tmp_path, _nan_model())
    panel.act_nonfinite.setChecked(True)
    assert panel.widget.break_nonfinite.isChecked()
    panel.run({"x": np.array([1.0, 4.0], np.float32)})
    _settle(window, panel)
    pause = panel.controller.last_pause
    assert pause.reason == "nonfinite" and pause.event.node.label == "sqrt"
    assert np.isnan(pause.event.outputs["q"]).all()
    assert "NaN/Inf" in panel.status_text()


def _long_loop_model(trips: int) -> onnx.ModelProto:
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "one"], ["acc_out"], name="inc"),
            helper.make_node("Identity", ["c_in"], ["c_out"], name="keep"),
        ],
        "body",
        [
            vi("i", TensorProto.INT64, []),
            vi("c_in", TensorProto.BOOL, []),
            vi("acc_in", TensorProto.FLOAT, [1]),
        ],
        [vi("c_out", TensorProto.BOOL, []), vi("acc_out", TensorProto.FLOAT, [1])],
        initializer=[numpy_helper.from_array(np.ones(1, np.float32), "one")],
    )
    inits = [
        numpy_helper.from_array(np.array(trips, np.int64), "trip"),
        numpy_helper.from_array(np.array(True), "cond"),
    ]
    loop = helper.make_node("Loop", ["trip", "cond", "x"], ["y"], body=body, name="loop")
    return make(
        [loop],
        [vi("x", TensorProto.FLOAT, [1])],
        [vi("y", TensorProto.FLOAT, [1])],
        initializers=inits,
    )


# Pause and Stop act before the next node; the 10M-trip loop would run for minutes.  The
# bound leaves room for a busy 2-core machine.
ACT_QUICKLY_S = 5.0


def _wait_running(panel, done_before: int = 0) -> None:  # type: ignore[no-untyped-def]
    """Until the worker runs the model's nodes (not merely builds the session): more
    nodes done than ``done_before``."""
    deadline = time.monotonic() + 30
    while (dbg := panel.controller.debugger) is None or dbg.snapshot().nodes_done <= done_before:
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.01)


def test_pause_and_stop_act_quickly(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    panel = _open(window, tmp_path, _long_loop_model(10_000_000))
    panel.run({"x": np.zeros(1, np.float32)})
    _wait_running(panel)
    assert panel.controller.busy
    t0 = time.perf_counter()
    panel.pause()
    _settle(window, panel)
    assert time.perf_counter() - t0 < ACT_QUICKLY_S
    assert panel.controller.last_pause.reason == "paused"
    assert panel.controller.session.state == "paused"
    paused_at = panel.controller.debugger.snapshot().nodes_done
    panel.continue_()
    _wait_running(panel, paused_at)
    t0 = time.perf_counter()
    panel.stop()
    _settle(window, panel)
    assert time.perf_counter() - t0 < ACT_QUICKLY_S
    assert panel.controller.session.state == "cancelled"


def test_compare_finds_injected_divergence(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("onnxruntime")
    panel = _open(window, tmp_path, chain_model())
    panel.run(CHAIN_FEEDS)
    _settle(window, panel)
    assert panel.controller.session.state == "finished"
    # the peer runs a copy whose initializer "w" was changed: its first reader diverges
    copy = onnx.ModelProto()
    copy.CopyFrom(window.session.doc.model)
    w = numpy_helper.to_array(copy.graph.initializer[0]).copy()
    w[1] = 7.0
    copy.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    window.session.doc.model = copy  # what the peer is given
    try:
        panel.compare()
        panel.wait_compare()
    finally:
        pass
    cmp = panel.comparison
    assert cmp is not None
    first = cmp.first_beyond(1e-4, 1e-3)
    assert first is not None and first.address == "main::add"
    assert panel.jump_to_divergence() == "main::add"
    window.wait_idle()
    marks = panel.overlay.marks
    assert marks[("main", 0)].fill is not None and marks[("main", 0)].fill.red() > 200
    assert "main::add" in panel.widget.compare_status.text()


def test_compare_colours_a_transformer_by_error(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("onnxruntime")
    from tests.ui.run_models import transformer_block, with_changed_initializer

    model = transformer_block()
    panel = _open(window, tmp_path, model)
    x = np.random.default_rng(1).standard_normal((1, 8, 32)).astype(np.float32)
    panel.run({"x": x})
    _settle(window, panel)
    window.session.doc.model = with_changed_initializer(model, "w1", 0.5)  # the peer's copy
    panel.compare()
    panel.wait_compare()
    window.wait_idle()
    first = panel.comparison.first_beyond(1e-4, 1e-3)
    assert first is not None and first.address == "main::ff_up"
    order = [n.address for n in panel.comparison.nodes]
    red = {
        k[1]
        for k, m in panel.overlay.marks.items()
        # red: the old saturated (230, 40, 40) or the "over" tint of compare_colours
        if m.fill is not None and m.fill.red() > 200 and m.fill.green() < 190
    }
    before = set(range(order.index("main::ff_up")))
    assert order.index("main::ff_up") in red and not (red & before)


def test_step_into_function_marks_the_call_node(window) -> None:  # type: ignore[no-untyped-def]
    panel = window.run_panel
    window.files.open_path(os.path.join(EXAMPLES, "with_functions.onnx"), background=False)
    panel.run({"x": np.ones((1, 4), np.float32)}, mode="step")
    _settle(window, panel)
    panel.step()  # before act1, the call of the model-local function
    _settle(window, panel)
    call = panel.current_key()
    assert panel.controller.session.current_node.label == "act1"
    panel.step()  # into the function body
    _settle(window, panel)
    assert panel.controller.session.current_node.graph_path.startswith("function:")
    assert "ScaledSwish function" in panel.widget.stack_label.text()
    # the view stays on the main graph and the call node stands for the current node
    assert window.session.presenter.root_path == "main"
    assert panel.overlay.marks[call].current
    panel.step_out()
    _settle(window, panel)
    assert panel.controller.last_pause.reason == "frame_left"


def test_step_over_runs_a_loop_whole(window) -> None:  # type: ignore[no-untyped-def]
    panel = window.run_panel
    window.files.open_path(os.path.join(EXAMPLES, "loop_with_if.onnx"), background=False)
    feeds = {"x": np.array([1.0, 2.0, 3.0], np.float32), "trip_count": np.array(3)}
    panel.run(feeds, mode="step")
    _settle(window, panel)
    assert panel.controller.session.current_node.op_type == "Loop"
    panel.step_over()
    _settle(window, panel)
    s = panel.controller.session
    assert s.state == "finished"
    body = {k for k in panel.controller.debugger.snapshot().executed if k[0] != "main"}
    assert ("main/body:accumulate", 0) in body  # the body ran, without pausing in it
    assert panel.controller.debugger.profiler.nodes["main/body:accumulate::scale"].calls == 3


def test_compare_names_a_saturating_onnxruntime_as_the_inexact_side(
    window, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Where onnxruntime's u8s8 kernel saturates (AVX2 without VNNI), the run panel says
    in words that onnxruntime is the inexact side, on the status line and the row."""
    import onnxviz.runtime.compare as compare
    from tests.runtime.test_compare import _matmul_integer_model, _saturating_u8s8

    rng = np.random.default_rng(3)
    a = rng.integers(200, 256, (3, 8)).astype(np.uint8)
    b = rng.integers(100, 128, (8, 4)).astype(np.int8)
    panel = _open(window, tmp_path, _matmul_integer_model(b))
    panel.run({"a": a})
    _settle(window, panel)
    monkeypatch.setattr(
        compare, "run_onnxruntime", lambda m, f, names: {"y": _saturating_u8s8(f["a"], b, 2)}
    )
    panel.compare()
    panel.wait_compare()
    status = panel.widget.compare_status.text()
    assert "main::mmi" in status and "onnxruntime is inexact here" in status
    assert "ours equals exact integer arithmetic" in cell_tooltip(panel.widget.compare, 0, 0)


def test_a_big_scenes_marks_come_in_slices_and_show_the_runs_state(
    window, qtbot, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Over `SYNC_MARKS` boxes the marks come a slice per turn, the boxes in view first;
    a mark made later shows the state the panel last gave (executed, breakpoint), a box
    still without its mark is found, and each update changes only what changed."""
    from onnxviz.ui.run import canvas_overlay

    monkeypatch.setattr(canvas_overlay, "SYNC_MARKS", 1)
    monkeypatch.setattr(canvas_overlay, "MARK_SLICE_SECONDS", 0.0)  # one batch per turn
    n = 120
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"r{i}") for i in range(n)]
    model = make(nodes, [vi("v0", shape=[3])], [vi(f"v{n}", shape=[3])])
    panel = _open(window, tmp_path, model)
    overlay = panel.overlay
    panel.set_breakpoint(panel.address_of("main", n - 1), True)
    assert panel.run({"v0": CHAIN_FEEDS["x"]})
    _settle(window, panel)
    qtbot.waitUntil(lambda: not overlay.marking, timeout=20_000)
    marks = overlay.marks
    assert len(marks) == n
    assert marks[("main", n - 1)].breakpoint and marks[("main", n - 1)].current
    assert all(m.executed for k, m in marks.items() if k != ("main", n - 1))
    panel.set_breakpoint(panel.address_of("main", n - 1), False)
    assert not marks[("main", n - 1)].breakpoint
    # a rebuilt scene: the boxes in view are marked at once, the rest over the turns,
    # each new mark with the state last shown
    window.navigation.relayout(background=False)
    assert overlay.item_for("main", 0) is not None
    assert overlay.marking and 0 < len(overlay.marks) < n
    far = next(i for i in range(n) if ("main", i) not in overlay.marks)
    box = overlay.item_for("main", far)  # found before its mark is made
    assert box is not None and box.data_item.node_index == far
    from onnxviz.ui.export import export_any

    export_any(window.graph_scene, str(tmp_path / "marked.svg"))  # draws every mark
    assert not overlay.marking
    assert len(overlay.marks) == n
    assert all(m.executed for k, m in overlay.marks.items() if k != ("main", n - 1))
    assert overlay.marks[("main", n - 1)].current
    assert not any(m.breakpoint for m in overlay.marks.values())
