"""The app's open path at 100k nodes, stage by stage, with its peers measured in the same run.

    python benchmarks/bench_open_app.py                  # 100k nodes, 5 alternating rounds
    python benchmarks/bench_open_app.py --nodes 20000 --rounds 3 --no-window

Per round (the peers alternate with ours, since timings on a shared machine are noisy):

* present path (what the window runs): first view (build + place on a fresh Presenter)
  and expanding one name-scope group, with the use filter of `present.visible`
  against the plain walk over every use (``walk_every_use``);
* the window (unless ``--no-window``): open to first full paint and until settled
  (inferred shapes drawn), the longest stop of the UI thread's event loop meanwhile and
  the UI thread's own CPU time in that turn.

Goals (issues 16 and 18): shown in under 1 s after load, a group expanded in under
100 ms, no UI-thread gap over 100 ms.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from benchmarks.event_loop_ticks import Ticks
from benchmarks.models import transformer_file
from onnxviz.model.document import Document
from onnxviz.present.presenter import Presenter, display_graph
from onnxviz.present.typeinfo import type_table

GROUP = "/model/layers.0"  # the group expanded (transformer_like's scopes)


def present_round(doc: Document, walk_every_use: bool) -> dict[str, float]:
    presenter = Presenter(doc, types=type_table(doc))
    presenter.expanded |= presenter.default_expansion()
    if walk_every_use:
        import onnxviz.present.presenter as present_module

        original = present_module.SceneBuilder

        def plain(*args: object, **kw: object) -> object:
            return original(*args, walk_every_use=True, **kw)  # type: ignore[arg-type]

        present_module.SceneBuilder = plain  # type: ignore[misc,assignment]
    try:
        t0 = time.perf_counter()
        display_graph(presenter)
        t1 = time.perf_counter()
        gid = next(g for g in presenter.all_group_ids() if g.endswith("|g:" + GROUP))
        presenter.toggle(gid)
        t2 = time.perf_counter()
        scene = display_graph(presenter)
        t3 = time.perf_counter()
    finally:
        if walk_every_use:
            present_module.SceneBuilder = original  # type: ignore[misc]
    return {
        "first": t1 - t0,
        "expand": t3 - t2,
        "expand_build": scene.timings["build"],
        "expand_place": scene.timings["place"],
    }


def window_round(path: Path, edit: bool = False) -> dict[str, float]:
    """Open in the window until it has settled (first view, every item made, shapes
    inferred in the worker process and the canvas redrawn with them), with a 5 ms timer
    ticking: the longest time between two ticks is the longest stop of the event loop;
    the most UI-thread CPU time between two ticks is the part of it that was the UI
    thread's own work (the rest: waiting for the GIL, or for a core on a loaded machine)."""
    from PySide6.QtWidgets import QApplication

    from onnxviz.ui.app import application
    from onnxviz.ui.main_window import MainWindow

    app = application()
    from onnxviz.ui.prompter import UnattendedPrompter

    window = MainWindow(UnattendedPrompter())  # no question may wait for a user
    window.resize(1400, 900)
    window.show()
    app.processEvents()
    ticks = Ticks()
    t0 = time.perf_counter()
    window.files.open_path(str(path), background=True)
    first_paint = 0.0
    end = t0 + 180
    while time.perf_counter() < end:
        app.processEvents()
        busy = window.work.task is not None or window.graph_scene.filling
        if not first_paint and not busy and window.session.doc is not None:
            window.view.viewport().grab()
            first_paint = time.perf_counter() - t0
        if first_paint and window.files.quiet():  # (validated in the worker process too)
            break
        time.sleep(0.001)
    settled = time.perf_counter() - t0
    gap, cpu = ticks.stop()
    edits = edit_stops(app, window) if edit else {}
    window.close()
    QApplication.processEvents()
    return {
        "first_paint": first_paint,
        "settled": settled,
        "longest_gap": gap,
        "longest_cpu": cpu,
        **edits,
    }


def edit_stops(app: Any, window: Any) -> dict[str, float]:
    """Working with the opened model: an attribute edit, then a node rename, each
    followed until the window has settled again (relayout, re-inference, validation);
    the longest event-loop stop and UI-thread CPU in one turn over both."""
    from onnx import helper

    from onnxviz.model import commands as c

    doc = window.session.doc
    index = next(i for i, n in enumerate(doc.model.graph.node) if n.op_type == "Softmax")
    ticks = Ticks()

    def settle() -> None:
        end = time.perf_counter() + 120
        while time.perf_counter() < end:
            app.processEvents()
            if window.files.quiet():
                break
            time.sleep(0.001)
        for _ in range(20):
            app.processEvents()
            time.sleep(0.005)

    window.edits.execute(c.SetAttribute("main", index, helper.make_attribute("axis", -1)))
    settle()
    window.edits.execute(c.SetNodeField("main", index, "name", "renamed_softmax"))
    settle()
    gap, cpu = ticks.stop()
    return {"edit_gap": gap, "edit_cpu": cpu}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-window", action="store_true")
    parser.add_argument(
        "--edits",
        action="store_true",
        help="also an attribute edit and a node rename after the open",
    )
    parser.add_argument("--folder", default=os.path.join(tempfile.gettempdir(), "onnxviz_bench"))
    args = parser.parse_args()
    path = transformer_file(args.nodes, args.folder)
    t0 = time.perf_counter()
    doc = Document.open(str(path))
    doc.scopes()
    load = time.perf_counter() - t0
    gc.freeze()  # as the app's open job does (ui/workers.py)
    rows: dict[str, list[dict[str, float]]] = {"fast": [], "plain": [], "win": []}
    for _ in range(args.rounds):
        rows["fast"].append(present_round(doc, walk_every_use=False))
        rows["plain"].append(present_round(doc, walk_every_use=True))
        if not args.no_window:
            rows["win"].append(window_round(path, args.edits))

    def med(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[kind])

    n = len(doc.main_scope.nodes)
    print(f"{n} nodes, load + index {load:.2f}s, median of {args.rounds} alternating rounds")
    print(f"{'':38} {'first view':>11} {'expand group':>13}")
    for kind, label in (
        ("fast", "present (use filter, what the app runs)"),
        ("plain", "present (plain walk over every use)"),
    ):
        print(f"{label:38} {med(kind, 'first'):10.3f}s {med(kind, 'expand'):12.3f}s")
    print(
        f"expand, present fast: build {med('fast', 'expand_build'):.3f}s + place "
        f"{med('fast', 'expand_place'):.3f}s; plain/fast expand ratio "
        f"{med('plain', 'expand') / med('fast', 'expand'):.2f}x"
    )
    if rows["win"]:
        print(
            f"window: open to first full paint {med('win', 'first_paint'):.2f}s, settled "
            f"(inferred shapes drawn) {med('win', 'settled'):.2f}s; longest event-loop stop "
            f"{med('win', 'longest_gap') * 1000:.0f} ms (max over rounds "
            f"{max(r['longest_gap'] for r in rows['win']) * 1000:.0f} ms), UI-thread CPU "
            f"in one turn {med('win', 'longest_cpu') * 1000:.0f} ms"
        )
    if rows["win"] and args.edits:
        print(
            f"editing (an attribute, then a node rename, each until settled): longest "
            f"event-loop stop {med('win', 'edit_gap') * 1000:.0f} ms (max over rounds "
            f"{max(r['edit_gap'] for r in rows['win']) * 1000:.0f} ms), UI-thread CPU in one "
            f"turn {med('win', 'edit_cpu') * 1000:.0f} ms"
        )
    if hasattr(os, "getloadavg"):
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
