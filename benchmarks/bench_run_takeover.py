"""Taking a finished run over in the Run dock, on a big model (issue 18 item 19).

    python benchmarks/bench_run_takeover.py                      # 100k nodes
    python benchmarks/bench_run_takeover.py --nodes 20000 --rounds 2

Opens ``transformer_like(nodes)`` in an offscreen window (1400x900), runs it to the end
through the Run panel (``RunPanel.run``) with a 5 ms timer ticking on the UI thread, and
reports, per round:

* the run's wall time, from the command to the Run dock filled;
* the longest stop of the event loop (wall clock between two ticks) and the most UI-thread
  CPU time between two ticks: the second is the UI thread's own work, which other
  processes on a loaded machine do not stretch;
* the time of each step of taking the result over (values, profile, memory, canvas), timed
  around the panel's own methods;
* the longest cyclic garbage collection meanwhile (any thread: it holds the GIL).

With ``--screenshot PATH`` the window is saved after the last round (the Run dock's look);
with ``--profile`` the UI thread's calls in the last round are profiled (cProfile, the
slowest 25 by cumulative time).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from benchmarks.event_loop_ticks import Ticks
from benchmarks.models import transformer_file


class Collections:
    """The longest full (generation 2) garbage collection while it listens."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._start = 0.0
        gc.callbacks.append(self._seen)

    def _seen(self, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.longest = max(self.longest, time.perf_counter() - self._start)

    def stop(self) -> float:
        gc.callbacks.remove(self._seen)
        return self.longest


def timed(owner: Any, name: str, spent: dict[str, float], label: str = "") -> None:
    """Wrap ``owner.name`` (a method or function) to add its time to ``spent[label]``
    (default: the name), the longest single call to ``spent[label + " max"]``."""
    inner: Callable[..., Any] = getattr(owner, name)
    label = label or name

    def wrapper(*args: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(*args, **kw)
        finally:
            took = time.perf_counter() - t0
            spent[label] = spent.get(label, 0.0) + took
            spent[label + " max"] = max(spent.get(label + " max", 0.0), took)

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--screenshot", default="")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    from PySide6.QtWidgets import QApplication

    from onnxviz.ui import collector
    from onnxviz.ui.app import application
    from onnxviz.ui.main_window import MainWindow
    from onnxviz.ui.prompter import UnattendedPrompter
    from onnxviz.ui.run.run_panel import RunPanel

    spent: dict[str, float] = {}
    # the whole take-over (the slot the stopped signal is connected to: patched on the
    # class before the window connects it) and the collector's settle after it
    timed(RunPanel, "_on_stopped", spent, "take-over")
    timed(collector, "settle", spent)
    app = application()
    window = MainWindow(UnattendedPrompter())
    window.resize(1400, 900)
    window.show()
    path = transformer_file(args.nodes)
    window.files.open_path(str(path), background=True)
    end = time.perf_counter() + 300
    while time.perf_counter() < end and not (window.session.doc and window.files.quiet()):
        app.processEvents()
        time.sleep(0.002)
    panel = window.run_panel
    feeds = panel.feeds()
    for name in ("_refresh_stack", "_refresh_canvas", "_refresh_profile", "_refresh_memory"):
        timed(panel, name, spent)
    for name in ("set_values", "set_profile", "set_memory", "set_comparison"):
        timed(panel.widget, name, spent)
    rounds = []
    profiler = None
    for k in range(args.rounds):
        if args.profile and k == args.rounds - 1:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        spent.clear()
        app.processEvents()
        ticks = Ticks()
        collections = Collections()
        t0 = time.perf_counter()
        assert panel.run(feeds)
        assert panel.controller.wait(600)
        wall = time.perf_counter() - t0
        # a few more turns: whatever the take-over left for the next turns
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            app.processEvents()
            time.sleep(0.002)
        gap, cpu = ticks.stop()
        if profiler is not None:
            profiler.disable()
        longest_gc = collections.stop()
        assert panel.controller.session.state == "finished", panel.status_text()
        rounds.append((wall, gap, cpu, dict(spent)))
        print(
            f"round: run {wall:6.2f} s, longest stop {gap * 1000:7.1f} ms,"
            f" UI CPU per turn {cpu * 1000:7.1f} ms, longest full GC {longest_gc * 1000:.0f} ms; "
            + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in sorted(spent.items())),
            flush=True,
        )
    if profiler is not None:
        import pstats

        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    w = panel.widget
    print(
        f"{args.nodes} nodes: values {w.values.model().rowCount()} rows,"
        f" profile {w.profile.model().rowCount()} rows;"
        f" median longest stop {statistics.median(r[1] for r in rounds) * 1000:.0f} ms,"
        f" UI CPU per turn {statistics.median(r[2] for r in rounds) * 1000:.0f} ms"
    )
    if args.screenshot:
        window.run_dock.show()
        w.tabs.setCurrentIndex(2)
        app.processEvents()
        window.grab().save(args.screenshot)
    window.close()
    QApplication.processEvents()


if __name__ == "__main__":
    main()
