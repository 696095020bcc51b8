"""Run panel responsiveness on ResNet-50 (offscreen window).

Measures, in one process:
- a full run through the panel (worker thread, debugger walking every event, intermediates
  kept) against a bare `Session.run` and against onnxruntime: the debugger's overhead;
- Pause latency: from pressing Pause mid-run to the UI getting the paused state;
- Stop latency: from pressing Stop mid-run to the UI getting the cancelled state;
- UI frame time while a run goes on: intervals of a 16 ms timer on the UI thread.

    python benchmarks/bench_run_panel.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import onnx

RESNET = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_resnet50.onnx")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from onnxviz.runtime.session import Session
    from onnxviz.ui.main_window import MainWindow
    from onnxviz.ui.prompter import UnattendedPrompter

    window = MainWindow(UnattendedPrompter())  # no question may wait for a user
    window.resize(1400, 900)
    window.show()
    panel = window.run_panel
    window.files.open_path(RESNET, background=False)
    window.wait_idle()
    model = window.session.doc.model
    name = model.graph.input[0].name
    feeds = {name: np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}

    # bare interpreter
    bare = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        Session(window.session.doc).run(feeds)
        bare.append(time.perf_counter() - t0)

    # onnxruntime, the peer
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    sess.run(None, feeds)
    peer = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        peer.append(time.perf_counter() - t0)

    # the panel: full runs, with UI frame intervals measured meanwhile
    frames: list[float] = []
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        frames.append(now - last[0])
        last[0] = now

    timer = QTimer()
    timer.setInterval(16)
    timer.timeout.connect(tick)
    panel_runs = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        last[0] = t0
        timer.start()
        panel.run(feeds)
        panel.controller.wait(600)
        timer.stop()
        panel_runs.append(time.perf_counter() - t0)
        assert panel.controller.session.state == "finished", panel.status_text()

    # pause and stop latency at different points of the run
    pauses, stops = [], []
    for k in range(args.repeats):
        delay = 0.3 + 0.4 * k
        panel.run(feeds)
        end = time.perf_counter() + delay
        while time.perf_counter() < end:
            app.processEvents()
            time.sleep(0.005)
        t0 = time.perf_counter()
        panel.pause()
        panel.controller.wait(60)
        pauses.append(time.perf_counter() - t0)
        assert panel.controller.last_pause.reason == "paused", panel.status_text()
        panel.continue_()
        end = time.perf_counter() + 0.2
        while time.perf_counter() < end:
            app.processEvents()
            time.sleep(0.005)
        t0 = time.perf_counter()
        panel.stop()
        panel.controller.wait(60)
        stops.append(time.perf_counter() - t0)
        assert panel.controller.session.state == "cancelled", panel.status_text()

    med = statistics.median
    frames_ms = sorted(f * 1000 for f in frames)
    p95 = frames_ms[int(0.95 * (len(frames_ms) - 1))] if frames_ms else float("nan")
    print(f"ResNet-50, {args.repeats} repeats (median)")
    print(f"  bare Session.run        {med(bare) * 1000:9.1f} ms")
    print(
        f"  run panel (to the end)  {med(panel_runs) * 1000:9.1f} ms"
        f"   x{med(panel_runs) / med(bare):.2f} of bare"
    )
    print(
        f"  onnxruntime (peer)      {med(peer) * 1000:9.1f} ms"
        f"   panel is x{med(panel_runs) / med(peer):.1f} of onnxruntime"
    )
    print(f"  Pause latency           {med(pauses) * 1000:9.1f} ms (max {max(pauses) * 1000:.1f})")
    print(f"  Stop latency            {med(stops) * 1000:9.1f} ms (max {max(stops) * 1000:.1f})")
    print(
        f"  UI frame interval while running: median {med(frames_ms):.1f} ms, "
        f"p95 {p95:.1f} ms, max {frames_ms[-1] if frames_ms else float('nan'):.1f} ms "
        f"(timer 16 ms, {len(frames_ms)} frames)"
    )
    window.close()


if __name__ == "__main__":
    main()
