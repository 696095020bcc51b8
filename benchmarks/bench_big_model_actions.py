"""Working with a 100k-node model in the window: the longest stop of the event loop in
each action a user takes, until the window has settled again (issue 18, item 19: the UI
thread must never stop for more than 100 ms).

    python benchmarks/bench_big_model_actions.py                 # 100k nodes, 1 round
    python benchmarks/bench_big_model_actions.py --nodes 20000 --rounds 2

The model opens and settles first (`bench_open_app.py` measures the open itself); then,
in this order: an attribute edit, undo, redo, a node rename, Save As to a new file, a
Find query, the dark theme and back, a run to the end, Expand All Groups and Collapse
All.  Per action: the longest time between two ticks of a 5 ms timer on the UI thread
(the stop) and the most UI-thread CPU time between two (its own part; the rest is the
GIL held by a worker thread, or a core taken by another process on a loaded machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from benchmarks.event_loop_ticks import Ticks
from benchmarks.models import transformer_file


def _idle(window: Any) -> bool:
    # (getattr: the same script measures an older checkout, before saves, searches and
    # run marks went to the background, for a before/after in the same window)
    return (
        window.files.quiet()
        and not getattr(window.files, "saving", False)
        and not getattr(window.find_dock, "searching", False)
        and not window.run_panel.controller.busy
        and not getattr(window.run_panel.overlay, "marking", False)
    )


def _settle(app: Any, window: Any, limit: float = 180.0) -> None:
    end = time.perf_counter() + limit
    while time.perf_counter() < end and not _idle(window):
        app.processEvents()
        time.sleep(0.001)
    for _ in range(20):  # what the last turn left for the next ones
        app.processEvents()
        time.sleep(0.005)


def actions(window: Any) -> list[tuple[str, Callable[[], Any]]]:
    from onnx import helper

    from onnxviz.model import commands as c

    doc = window.session.doc
    index = next(i for i, n in enumerate(doc.model.graph.node) if n.op_type == "Softmax")
    saved = os.path.join(tempfile.mkdtemp(prefix="onnxviz_actions_"), "saved.onnx")

    def find() -> None:
        window.find_dock.query.setText("Softmax")
        window.find_dock.run_query()

    return [
        (
            "attribute edit",
            lambda: window.edits.execute(
                c.SetAttribute("main", index, helper.make_attribute("axis", -1))
            ),
        ),
        ("undo", window.edits.undo),
        ("redo", window.edits.redo),
        (
            "node rename",
            lambda: window.edits.execute(c.SetNodeField("main", index, "name", "renamed_softmax")),
        ),
        ("save as", lambda: window.files.save_to(saved)),
        ("find", find),
        ("dark theme", lambda: window.theme.set_mode("dark")),
        ("light theme", lambda: window.theme.set_mode("light")),
        ("run to the end", lambda: window.run_panel.run()),
        ("expand all groups", window.navigation.expand_all),
        ("collapse all", window.navigation.collapse_all),
    ]


def one_round(path: Path, only: set[str] | None = None) -> dict[str, tuple[float, float]]:
    from PySide6.QtWidgets import QApplication

    from onnxviz.ui.app import application
    from onnxviz.ui.main_window import MainWindow
    from onnxviz.ui.prompter import UnattendedPrompter

    app = application()
    window = MainWindow(UnattendedPrompter())
    window.resize(1400, 900)
    window.show()
    app.processEvents()
    window.files.open_path(str(path), background=True)
    time.sleep(0.05)
    _settle(app, window)
    found: dict[str, tuple[float, float]] = {}
    for label, act in actions(window):
        if only is not None and label not in only:
            continue
        ticks = Ticks()
        for _ in range(5):
            app.processEvents()
            time.sleep(0.005)
        act()
        _settle(app, window)
        found[label] = ticks.stop()
    window.close()
    QApplication.processEvents()
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--folder", default=os.path.join(tempfile.gettempdir(), "onnxviz_bench"))
    parser.add_argument(
        "--only",
        help="comma-separated actions to time, in their order (e.g. 'expand all groups,collapse all')",
    )
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    path = transformer_file(args.nodes, args.folder)
    rounds = [one_round(path, only) for _ in range(args.rounds)]
    load = os.getloadavg()[0]
    print(f"{args.nodes} nodes, {args.rounds} round(s), load average {load:.1f} on 2 cores")
    print(f"{'action':<22}{'longest stop':>14}{'UI CPU in a turn':>18}")
    for label in rounds[0]:
        gap = statistics.median(r[label][0] for r in rounds)
        cpu = statistics.median(r[label][1] for r in rounds)
        flag = "" if gap <= 0.1 else "   over 100 ms"
        print(f"{label:<22}{gap * 1000:>11.0f} ms{cpu * 1000:>15.0f} ms{flag}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
