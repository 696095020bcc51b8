"""Full garbage collections wait while a model opens and settles (`ui.collector`): a
full collection over a 100k-node model's objects stops every thread for 80-250 ms."""

from __future__ import annotations

import gc

import onnx
import pytest

from onnxviz.ui import collector
from tests.runtime.engine_models import chain_model

pytestmark = pytest.mark.qt


def test_full_collections_are_held_until_settled_then_the_survivors_frozen() -> None:
    collector.settle()  # nothing held from elsewhere
    before = gc.get_threshold()
    collector.hold_full()
    collector.hold_full()  # a second open before the first settled: still one hold
    try:
        assert collector.holding()
        assert gc.get_threshold()[:2] == before[:2]  # young collections go on
        assert gc.get_threshold()[2] > 10**6
        frozen = gc.get_freeze_count()
        kept = [[i] for i in range(1000)]  # long-lived objects made while opening
        garbage = [[]]  # and a cycle that died young
        garbage[0].append(garbage)
        del garbage
        collector.settle()
        assert not collector.holding()
        assert gc.get_threshold() == before
        assert gc.get_freeze_count() >= frozen + len(kept)
        collector.settle()  # nothing held: nothing happens
        assert gc.get_threshold() == before
    finally:
        collector.settle()


def test_an_open_and_a_run_hold_full_collections_each_on_their_own() -> None:
    """A run started while an opened model settles: the open settling must not end the
    run's hold (a full collection over the run's values stopped the UI for 232 ms), nor
    the run's end the open's."""
    collector.settle()
    before = gc.get_threshold()
    try:
        collector.hold_full("open")
        collector.hold_full("run")
        collector.settle("open")
        assert collector.holding() and collector.holding("run") and not collector.holding("open")
        assert gc.get_threshold()[2] > 10**6  # (an open job of an earlier test may freeze)
        collector.hold_full("open")  # the next open
        collector.settle("run")
        assert collector.holding("open") and gc.get_threshold()[2] > 10**6
        collector.settle("open")
        assert not collector.holding() and gc.get_threshold() == before
    finally:
        collector.settle()


def test_an_opened_model_settles_and_full_collections_run_again(window, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "chain.onnx")
    onnx.save(chain_model(), path)
    before = gc.get_threshold()
    window.files.open_path(path, background=True)
    assert collector.holding()
    qtbot.waitUntil(lambda: not collector.holding(), timeout=20_000)
    assert window.session.doc is not None
    assert gc.get_threshold() == before


def test_a_big_relayout_holds_full_collections_until_its_canvas_is_filled(
    window, qtbot, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """After a model has settled, an expand-all at 100k nodes made Python run full
    collections over the new canvas items again and again (0.6-1.0 s each on the UI
    thread): a relayout in the background holds them until layout and fill are done."""
    from onnxviz.ui.controllers.navigation_controller import CANVAS_HOLDER

    path = str(tmp_path / "chain.onnx")
    onnx.save(chain_model(), path)
    window.files.open_path(path, background=False)
    qtbot.waitUntil(lambda: not collector.holding(), timeout=20_000)
    window.navigation.relayout(background=True)
    assert collector.holding(CANVAS_HOLDER)
    qtbot.waitUntil(lambda: not collector.holding(), timeout=20_000)
    assert window.work.task is None and not window.graph_scene.filling


def test_a_failed_open_settles_too(window, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07not a model at all")
    window.files.open_path(str(path), background=True)
    qtbot.waitUntil(lambda: not collector.holding(), timeout=20_000)


def test_the_windows_worker_processes_run_below_it(window) -> None:  # type: ignore[no-untyped-def]
    """A big model's inference, checker and validation are busy processes: on a 2-core
    machine they must not take the UI thread's core."""
    import os
    import time

    from onnxviz.check import worker as worker_module
    from onnxviz.ui.main_window import WORKER_NICE

    mine = os.getpriority(os.PRIO_PROCESS, 0)
    fresh = worker_module.InferenceWorker()  # started after the window, as the app's are
    proc = fresh.start()
    try:
        end = time.monotonic() + 20
        while os.getpriority(os.PRIO_PROCESS, proc.pid) < max(mine, WORKER_NICE):
            assert time.monotonic() < end, "the worker never lowered its priority"
            time.sleep(0.05)
        assert os.getpriority(os.PRIO_PROCESS, 0) == mine  # the app itself is as it was
        # and its answers are still the same: a text model parsed there
        text = b'<ir_version: 8, opset_import: ["" : 17]>\ng (float[2] x) => (float[2] y) { y = Relu(x) }'
        answer = fresh.begin(text, "parse")()
        assert answer[0] == "parsed"
    finally:
        fresh.close()
        worker_module.run_workers_below(0)  # (the test process's later workers as the CLI's)
