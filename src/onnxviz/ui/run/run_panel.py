"""The run panel: step through a model on the canvas.

`RunPanel` follows the window's `DocumentSession` (another model drops the run, its
values and its comparison) and drives the session's run controller.  The main window
places its widget in the Run dock, its actions in the Run menu and toolbar
(`fill_menu`, `fill_toolbar`), and run marks are drawn on the canvas by our own child
items (`canvas_overlay.py`).

Shortcuts follow common debuggers: F5 run / continue, Shift+F5 stop, F9 toggle
breakpoint, F10 step over, F11 step (into), Shift+F11 step out, Ctrl+F10 run to the
selected node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QColor, QKeySequence
from PySide6.QtWidgets import QMenu, QToolBar, QWidget

from onnxviz.errors import OnnxvizError
from onnxviz.model.node_id import NodeId, resolve_address
from onnxviz.model.scope_names import readable_graph_path
from onnxviz.runtime.compare import Comparison, compare_with_onnxruntime
from onnxviz.runtime.events import FrameLeft, NodeFailed, Pause, RunFinished
from onnxviz.runtime.inputs import FeedRecipe, input_specs
from onnxviz.runtime.session import Session, document_feed_inputs
from onnxviz.ui import settings
from onnxviz.ui.canvas.scene import GraphScene
from onnxviz.ui.canvas.view import GraphView
from onnxviz.ui.inspector import InspectorDock
from onnxviz.ui.prompter import Prompter
from onnxviz.ui.run.canvas_overlay import CanvasOverlay
from onnxviz.ui.run.compare_colours import compare_colour
from onnxviz.ui.run.debugger import Executed
from onnxviz.ui.run.engine_choice import EngineChoice, OrtOutcome, OrtRunner
from onnxviz.ui.run.inputs_dialog import InputsDialog, build_feeds, load_remembered, remember
from onnxviz.ui.run.run_panel_widget import RunPanelWidget
from onnxviz.ui.run.run_tables import BIG_TABLE_ROWS
from onnxviz.ui.run.worker_thread import start_worker_thread

if TYPE_CHECKING:  # the session imports ui.run's controller: no import cycle at run time
    from onnxviz.ui.controllers.navigation_controller import NavigationController
    from onnxviz.ui.doc_session import DocumentSession

__all__ = ["RunPanel", "heat_colour"]

DEFAULT_MEMORY_CAP_MB = 1024


def heat_colour(x: float) -> QColor:
    """0 -> pale yellow, 1 -> red."""
    x = min(max(x, 0.0), 1.0)
    return QColor(255, int(235 - 200 * x), int(160 - 160 * x))


class RunPanel(QObject):
    compareDone = Signal(object)  # Comparison or OnnxvizError, from the compare thread
    show_requested = Signal()  # a run starts: the Run dock should be visible

    def __init__(
        self,
        session: DocumentSession,
        navigation: NavigationController,
        scene: GraphScene,
        view: GraphView,
        inspector_dock: InspectorDock,
        prompter: Prompter,
        parent: QWidget,
    ) -> None:
        super().__init__(session)
        self.session = session
        self.navigation = navigation
        self.graph_scene = scene
        self.view = view
        self.inspector_dock = inspector_dock
        self.prompter = prompter
        self.parent_widget = parent
        self.controller = session.runner
        self.comparison: Comparison | None = None
        self.colouring = "none"
        self.frame_index = -1
        self.last_message = ""
        self.drop_when_stopped = False  # a run stopped because its model went away
        self._build_actions()
        self.widget = RunPanelWidget(
            [
                self.act_run,
                self.act_continue,
                self.act_step,
                self.act_step_over,
                self.act_step_out,
                self.act_run_to,
                self.act_pause,
                self.act_stop,
                None,  # type: ignore[list-item]
                self.act_inputs,
            ]
        )
        self.widget.address_text = self.readable_address
        # onnxruntime as the second engine (engine_choice.py): its last run, when newer
        # than ours, is what the values, profile and heat colouring show.
        self.engine = EngineChoice()
        self.widget.layout().insertWidget(0, self.engine)  # type: ignore[union-attr]
        self.ort = OrtRunner(self)
        self.ort.finished.connect(self._ort_done)
        self.ort_outcome: OrtOutcome | None = None
        self.overlay = CanvasOverlay(scene, self.inspect_value)
        self.widget.memory_cap.setValue(self.memory_cap_bytes() // (1024 * 1024))
        self.widget.memory_cap.valueChanged.connect(
            lambda mb: settings.save_value("run/memory_cap_mb", int(mb))
        )
        self._connect()
        self._sync()

    # -- construction ------------------------------------------------------------------
    def _action(self, text: str, slot: Any, shortcut: Any = None, tip: str = "") -> QAction:
        a = QAction(text, self.parent_widget)
        if shortcut is not None:
            a.setShortcut(QKeySequence(shortcut))
        a.setToolTip(tip or text.replace("&", ""))
        a.triggered.connect(lambda _c=False: slot())
        return a

    def _build_actions(self) -> None:
        mk = self._action
        self.act_run = mk("&Run", self.run_or_continue, "F5", "Run, or continue when paused (F5)")
        self.act_continue = mk("&Continue", self.continue_, "Ctrl+F5", "Continue (Ctrl+F5)")
        self.act_step = mk("&Step", self.step, "F11", "Step into the next node (F11)")
        self.act_step_over = mk("Step &Over", self.step_over, "F10", "Step over (F10)")
        self.act_step_out = mk("Step O&ut", self.step_out, "Shift+F11", "Step out (Shift+F11)")
        self.act_run_to = mk("Run &to Selected Node", self.run_to_selected, "Ctrl+F10")
        self.act_breakpoint = mk("Toggle &Breakpoint", self.toggle_breakpoint, "F9")
        self.act_nonfinite = mk("Break on &NaN/Inf", lambda: None)
        self.act_nonfinite.setCheckable(True)
        self.act_nonfinite.toggled.connect(self._set_nonfinite)
        self.act_pause = mk("&Pause", self.pause, "Ctrl+Alt+Pause", "Pause at the next node")
        self.act_stop = mk("S&top", self.stop, "Shift+F5", "Stop the run (Shift+F5)")
        self.act_inputs = mk("&Inputs…", self.edit_inputs, None, "Choose the input values")

    def fill_menu(self, run_menu: QMenu) -> None:
        """The debugger's entries of the window's Run menu."""
        run_menu.addSeparator()
        for a in (self.act_run, self.act_continue, self.act_pause, self.act_stop):
            run_menu.addAction(a)
        run_menu.addSeparator()
        for a in (self.act_step, self.act_step_over, self.act_step_out, self.act_run_to):
            run_menu.addAction(a)
        run_menu.addSeparator()
        run_menu.addAction(self.act_breakpoint)
        run_menu.addAction(self.act_nonfinite)
        run_menu.addSeparator()
        run_menu.addAction(self.act_inputs)
        run_menu.addAction(self.inspector_dock.toggleViewAction())
        self.run_menu = run_menu

    def fill_toolbar(self, bar: QToolBar) -> None:
        for a in (
            self.act_run,
            self.act_continue,
            self.act_step,
            self.act_step_over,
            self.act_step_out,
            self.act_pause,
            self.act_stop,
            self.act_breakpoint,
        ):
            bar.addAction(a)
        self.toolbar = bar

    def _connect(self) -> None:
        c = self.controller
        c.started.connect(self._sync)
        c.stopped.connect(self._on_stopped)
        c.progress.connect(self._on_progress)
        p = self.widget
        p.frameChosen.connect(self._frame_chosen)
        p.valueActivated.connect(self._value_activated)
        p.nodeActivated.connect(self.reveal_address)
        p.breakpointRemoved.connect(lambda a: self.set_breakpoint(a, False))
        p.break_nonfinite.toggled.connect(self.act_nonfinite.setChecked)
        p.compareRequested.connect(self.compare)
        p.jumpToDivergence.connect(self.jump_to_divergence)
        p.colouringChanged.connect(self._set_colouring)
        self.compareDone.connect(self._compare_done)
        self.graph_scene.changed.connect(lambda _r: self._scene_changed())
        self.graph_scene.selectionChanged.connect(self._selection_changed)
        self.graph_scene.exporting.connect(self.overlay.finish_marks)
        self.session.document_replaced.connect(self._document_replaced)
        self.session.edited.connect(self._model_edited)

    # -- model and inputs ----------------------------------------------------------------
    @property
    def doc(self) -> Any:
        return self.session.doc

    def _document_replaced(self, _doc: object) -> None:
        """Another document (or none): forget the old run, its values, comparison and
        breakpoints."""
        self.controller.breakpoints.clear()
        self.forget_run()

    def _model_edited(self) -> None:
        """The model changed under the run: its values and paused frames describe a
        model that is gone, and a running worker must not read a model being edited."""
        c = self.controller
        if c.debugger is None and not c.busy:
            return
        live = c.busy or c.can_continue
        self.forget_run()
        if live:
            self._message("the model changed: the run was stopped")

    def forget_run(self) -> None:
        """Drop the run and everything shown of it (a running one stops first)."""
        if self.controller.busy:
            self.controller.stop()
            self.drop_when_stopped = True
        else:
            self.controller.debugger = None
        self.comparison = None
        self.ort_outcome = None
        self.frame_index = -1
        self.widget.set_comparison(None, "")
        self.widget.compare_status.setText("")
        self.widget.set_stack([], 0)
        self.widget.set_values({})
        self.widget.set_breakpoints([], {})
        self.widget.set_profile([])
        self._sync()
        self._refresh_canvas()

    def memory_cap_bytes(self) -> int:
        raw = settings.settings().value("run/memory_cap_mb", DEFAULT_MEMORY_CAP_MB)
        try:
            return max(1, int(str(raw))) * 1024 * 1024
        except (TypeError, ValueError):
            return DEFAULT_MEMORY_CAP_MB * 1024 * 1024

    def _session(self) -> Session:
        return Session(self.doc, keep_intermediates=True, memory_cap_bytes=self.memory_cap_bytes())

    def specs(self) -> list[Any]:
        # the inputs without a plan: compiling one took seconds on this thread at 100k
        # nodes; the run compiles its own in its worker thread
        return input_specs(document_feed_inputs(self.doc) if self.doc is not None else [])

    def feeds(self) -> dict[str, Any]:
        """The remembered inputs of this model (random ones when none were chosen)."""
        dims, recipes = load_remembered(self.doc.path)
        specs = self.specs()
        for s in specs:
            recipes.setdefault(s.name, FeedRecipe())
        return build_feeds(specs, dims, recipes)

    def edit_inputs(self, then_run: bool = False) -> bool:
        """Open the inputs dialog (a run follows when ``then_run``); False when it
        was not shown."""
        if self.doc is None:
            return False
        try:
            specs = self.specs()
        except OnnxvizError as exc:
            self._message(str(exc))
            return False
        dims, recipes = load_remembered(self.doc.path)
        dialog = InputsDialog(specs, dims, recipes, self.parent_widget, self.prompter)
        self.inputs_dialog = dialog

        def accepted() -> None:
            d, r = dialog.choices()
            remember(self.doc.path, d, r)
            if then_run:
                self.run()

        dialog.accepted.connect(accepted)
        return self.prompter.ask(dialog)

    # -- commands --------------------------------------------------------------------------
    def run(self, feeds: dict[str, Any] | None = None, mode: str = "continue") -> bool:
        """Start a new run with ``feeds`` (default: the remembered inputs)."""
        if self.doc is None or self.controller.busy:
            return False
        if feeds is None:
            try:
                feeds = self.feeds()
            except OnnxvizError as exc:
                self._message(str(exc))
                return False
        self.show_requested.emit()
        self.comparison = None
        if self.engine.engine() == "onnxruntime":
            return self._run_onnxruntime(feeds)
        self.ort_outcome = None
        return self.controller.start_run(self._session, feeds, mode)

    def _run_onnxruntime(self, feeds: dict[str, Any]) -> bool:
        if self.ort.busy:
            return False
        self.controller.last_feeds = feeds  # Compare uses the same inputs
        self.widget.status.setText("running in onnxruntime…")
        cap = self.memory_cap_bytes()
        return self.ort.start(self.doc, feeds, cap, min(cap, 256 * 2**20))

    def _ort_done(self, result: Any) -> None:
        if isinstance(result, OnnxvizError):
            self._message(str(result))
            self.widget.status.setText(str(result))
            return
        self.ort_outcome = result
        self.widget.set_stack(["main (onnxruntime)"], 0)
        self.widget.set_values(result.values)
        self.widget.set_profile(list(result.profiler.nodes.values()))  # the table sorts
        self.widget.status.setText(result.status())
        self._refresh_canvas()

    def run_or_continue(self) -> bool:
        """F5: continue a paused run; else a new run, asking for inputs the first time
        when none were chosen for this model yet."""
        if self.controller.can_continue:
            return self.controller.advance("continue")
        if self.doc is None or self.controller.busy:
            return False
        dims, recipes = load_remembered(self.doc.path)
        if not recipes and self.edit_inputs(then_run=True):
            return False  # the run starts when the inputs are chosen
        return self.run()

    def _advance_or_start(self, mode: str, target: str | None = None) -> bool:
        if self.controller.can_continue:
            return self.controller.advance(mode, target)
        if self.controller.busy or self.doc is None:
            return False
        # not started (or finished): a new run, paused as the command asks
        if mode in ("step", "step_over"):
            return self.run(mode="step")
        if mode == "run_to":
            try:
                feeds = self.feeds()
            except OnnxvizError as exc:
                self._message(str(exc))
                return False
            return self.controller.start_run(self._session, feeds, "run_to", target)
        return self.run()

    def continue_(self) -> bool:
        return self._advance_or_start("continue")

    def step(self) -> bool:
        return self._advance_or_start("step")

    def step_over(self) -> bool:
        return self._advance_or_start("step_over")

    def step_out(self) -> bool:
        return self._advance_or_start("step_out")

    def run_to(self, address: str) -> bool:
        return self._advance_or_start("run_to", address)

    def run_to_selected(self) -> bool:
        address = self.selected_address()
        if address is None:
            self._message("select a node to run to")
            return False
        return self.run_to(address)

    def pause(self) -> None:
        self.controller.pause()

    def stop(self) -> None:
        self.controller.stop()

    # -- breakpoints -----------------------------------------------------------------------
    def address_of(self, graph_path: str, index: int) -> str:
        return NodeId(graph_path, index, self.doc.scope(graph_path).node_label(index)).address

    def key_of(self, address: str) -> tuple[str, int] | None:
        graphs = {s.path for s in self.doc.scopes()}
        node = resolve_address(address, graphs, lambda p, lab: self.doc.scope(p).node_index(lab))
        return None if node is None else (node.graph_path, node.index)

    def selected_address(self) -> str | None:
        node = self.view.selected_node()
        if node is None or self.doc is None:
            return None
        d = node.data_item
        if d.node_index is None or d.kind in ("input", "output", "outer", "proxy", "group"):
            return None
        try:
            return self.address_of(d.graph_path, d.node_index)
        except (KeyError, IndexError):
            return None

    def toggle_breakpoint(self, address: str | None = None) -> None:
        address = address or self.selected_address()
        if address is None:
            self._message("select a node to toggle its breakpoint")
            return
        self.set_breakpoint(address, address not in self.controller.breakpoints)

    def set_breakpoint(self, address: str, on: bool) -> None:
        self.controller.set_breakpoint(address, on)
        self._refresh_breakpoints()
        self._refresh_canvas()

    def _set_nonfinite(self, on: bool) -> None:
        self.controller.set_break_on_nonfinite(on)
        self.widget.break_nonfinite.blockSignals(True)
        self.widget.break_nonfinite.setChecked(on)
        self.widget.break_nonfinite.blockSignals(False)

    # -- after a stop ----------------------------------------------------------------------
    def _on_stopped(self, result: Any) -> None:
        if self.drop_when_stopped:
            self.drop_when_stopped = False
            self.controller.debugger = None
            self._sync()
            self._refresh_canvas()
            return
        if isinstance(result, OnnxvizError):
            self._message(str(result))
            self._sync()
            return
        pause: Pause = result
        self.frame_index = -1
        self._sync()
        self._refresh_stack()
        self._refresh_canvas(scroll=True)
        self._refresh_breakpoints()
        self._refresh_profile()
        self._refresh_memory()
        if pause.reason in ("failed",) and isinstance(pause.event, NodeFailed):
            self._message(str(pause.event.error))

    def _on_progress(self) -> None:
        dbg = self.controller.debugger
        if dbg is None:
            return
        snap = dbg.snapshot(values=False)
        self.widget.status.setText(f"running… {snap.nodes_done} nodes done")
        self.widget.stack_label.setText(snap.stack)
        self._refresh_canvas()

    def readable_address(self, address: str) -> str:
        """A node address (``graph::label``) or a graph path with the graph named as the
        breadcrumbs name it: ``main > Scan#0 > Loop#2::#3``, not ``main/body:#0/body:#2::#3``."""
        graph, sep, label = address.rpartition("::") if "::" in address else (address, "", "")
        doc = self.session.doc
        named = readable_graph_path(doc, graph) if doc is not None else graph
        return f"{named}{sep}{label}"

    def status_text(self) -> str:
        c = self.controller
        if c.busy:
            return "running…"
        p = c.last_pause
        s = c.session
        if s is None or p is None:
            return "not started"
        ev = p.event
        where = ""
        if ev is not None and getattr(ev, "node", None) is not None:
            node = ev.node  # type: ignore[attr-defined]
            where = f" at {self.readable_address(node.address)} ({node.op_type})"
        reason = {
            "step": "paused",
            "paused": "paused",
            "breakpoint": "breakpoint hit",
            "nonfinite": "NaN/Inf produced",
            "run_to": "reached",
            "frame_left": "stepped out",
        }.get(p.reason, p.reason)
        if isinstance(ev, RunFinished):
            # compute time: the time spent paused between steps is not the model's
            return f"finished: {c.compute_seconds * 1000:.1f} ms of compute"
        if isinstance(ev, FrameLeft):
            where = f" leaving {ev.frame.title}"
        return reason + where

    def _sync(self) -> None:
        c = self.controller
        busy = c.busy
        has_doc = self.session.doc is not None
        paused = c.can_continue
        self.act_run.setEnabled(has_doc and not busy)
        for a in (self.act_step, self.act_step_over, self.act_run_to):
            a.setEnabled(has_doc and not busy)
        self.act_continue.setEnabled(paused)
        self.act_step_out.setEnabled(paused)
        self.act_pause.setEnabled(busy)
        self.act_stop.setEnabled(busy or paused)
        self.act_inputs.setEnabled(has_doc and not busy)
        self.widget.status.setText(self.status_text())

    def _refresh_stack(self) -> None:
        s = self.controller.session
        if s is None:
            self.widget.set_stack([], 0)
            return
        titles = [f.title for f in s.stack]
        if not titles:
            titles = ["main (finished)" if s.state == "finished" else "main"]
        self.widget.set_stack(titles, len(titles) - 1)
        self._show_frame_values(len(titles) - 1)

    def _frame_chosen(self, row: int) -> None:
        self.frame_index = row
        self._show_frame_values(row)

    def _show_frame_values(self, row: int) -> None:
        s = self.controller.session
        if s is None or self.controller.busy:
            return
        frames = s.frames
        dbg = self.controller.debugger
        if frames and 0 <= row < len(frames):
            # the frame's inputs and what it computed so far (initializers left out: a
            # ResNet has hundreds, and the canvas shows them already)
            live = s.values(row)
            plan = frames[row].plan
            path = plan.path
            names = (
                dbg.frame_names[row] if dbg is not None and row < len(dbg.frame_names) else set()
            )
            values = {
                n: live[n] for n in plan.input_names if n in live and n not in plan.overridable
            }
            for name in names:
                if name in live:
                    values[name] = live[name]
                elif s.store is not None and (path, name) in s.store:
                    values[name] = s.store.get(path, name)
        else:
            store, outputs = s.store, s.outputs

            def main_values() -> dict[str, Any]:
                found = store.names("main") if store is not None else {}  # a new dict
                found.update(outputs)
                return found

            if store is not None and len(store) > BIG_TABLE_ROWS:
                # gathered when the table is filled, a later turn than the take-over's
                # (60 ms for the names of 100k kept values)
                self.widget.set_values(main_values)
                return
            values = main_values()
        self.widget.set_values(values)

    def _value_activated(self, row: int, name: str) -> None:
        if self.ort_outcome is not None and name in self.ort_outcome.values:
            self.inspector_dock.show_value(name, self.ort_outcome.values[name])
            return
        s = self.controller.session
        if s is None or self.controller.busy:
            return
        frames = s.frames
        try:
            value = s.value(name, row) if frames and 0 <= row < len(frames) else s.value(name)
        except KeyError:
            self._message(f"'{name}' is no longer kept")
            return
        self.inspector_dock.show_value(name, value)

    def inspect_value(self, graph_path: str, name: str) -> bool:
        """Open the inspector on a computed value (badge click, edge selection)."""
        ort = self.ort_outcome
        if ort is not None and graph_path == "main" and name in ort.values:
            self.inspector_dock.show_value(f"{name}  (onnxruntime)", ort.values[name])
            return True
        s = self.controller.session
        if s is None or self.controller.busy:
            return False
        value: Any = None
        found = False
        for f in reversed(s.frames):
            if f.plan.path == graph_path or graph_path.startswith(f.plan.path):
                try:
                    value = f.lookup(name)
                    found = value is not None
                except KeyError:
                    found = False
                if found:
                    break
        if not found and s.store is not None and (graph_path, name) in s.store:
            value, found = s.store.get(graph_path, name), True
        if not found and name in s.outputs:
            value, found = s.outputs[name], True
        if not found:
            self._message(f"'{name}' was not computed or is no longer kept")
            return False
        self.inspector_dock.show_value(f"{name}  ({self.readable_address(graph_path)})", value)
        return True

    def _selection_changed(self) -> None:
        from onnxviz.ui.canvas.items import EdgeItem

        if self.controller.session is None or self.controller.busy:
            return
        try:
            selected = self.graph_scene.selectedItems()
        except RuntimeError:
            return
        for it in selected:
            if isinstance(it, EdgeItem):
                d = it.data_edge
                snap = self.controller.debugger.snapshot()  # type: ignore[union-attr]
                if (d.graph_path, d.value) in snap.value_types or any(
                    name == d.value for _graph, name in snap.value_types
                ):
                    self.inspect_value(d.graph_path, d.value)
                return

    def _refresh_breakpoints(self) -> None:
        dbg = self.controller.debugger
        self.widget.set_breakpoints(
            sorted(self.controller.breakpoints), dbg.hits if dbg is not None else {}
        )

    def _refresh_profile(self) -> None:
        dbg = self.controller.debugger
        # unsorted: the table sorts them by one key per row (rows() sorted through a lambda)
        self.widget.set_profile(list(dbg.profiler.nodes.values()) if dbg is not None else [])

    def _refresh_memory(self) -> None:
        s = self.controller.session
        if s is None or s.store is None:
            return
        # the store's own count and total: no walk over 100k kept values
        self.widget.set_memory(s.store.used_bytes, len(s.store), s.memory_cap_bytes, s.dropped)

    # -- canvas -----------------------------------------------------------------------------
    def current_key(self) -> tuple[str, int] | None:
        dbg = self.controller.debugger
        if dbg is None:
            return None
        ref = dbg.snapshot(values=False).current_ref
        return (ref.graph_path, ref.index) if ref is not None else None

    def _scene_changed(self) -> None:
        if not self.overlay.follows(self.graph_scene.nodes):
            self._refresh_canvas()

    def _refresh_canvas(self, scroll: bool = False) -> None:
        if self.doc is None:
            return
        dbg = self.controller.debugger
        busy = self.controller.busy  # (value badges only once it has stopped)
        snap = dbg.snapshot(values=not busy) if dbg is not None else None
        bps = {k for a in self.controller.breakpoints if (k := self.key_of(a)) is not None}
        current = None
        if snap is not None and snap.current_ref is not None:
            current = (snap.current_ref.graph_path, snap.current_ref.index)
            if not self.controller.busy:
                current = self._shown_current(current, scroll)
        fills: dict[tuple[str, int], QColor] = {}
        notes: dict[tuple[str, int], str] = {}
        profiler = self.ort_outcome.profiler if self.ort_outcome is not None else None
        if profiler is None and dbg is not None:
            profiler = dbg.profiler
        if self.colouring == "heat" and profiler is not None:
            for address, x in profiler.heat().items():
                row = profiler.nodes[address]
                key = (row.graph_path, row.index)
                fills[key] = heat_colour(x)
                notes[key] = f"{row.seconds * 1000:.2f} ms"
        elif self.colouring == "error" and self.comparison is not None:
            atol, rtol = self.widget.atol.value(), self.widget.rtol.value()
            for n in self.comparison.nodes:
                key = ("main", n.index)
                fills[key] = compare_colour(n, atol, rtol)
                if n.max_abs is not None:
                    notes[key] = f"abs {n.max_abs:.2g} rel {n.max_rel:.2g}"
                    if n.peer_note:  # the peer's number is the wrong one here
                        notes[key] += " · onnxruntime inexact"
        executed: Executed | set[tuple[str, int]] = snap.executed if snap is not None else set()
        if self.ort_outcome is not None:  # onnxruntime ran every node it profiled
            executed = {(r.graph_path, r.index) for r in self.ort_outcome.profiler.nodes.values()}
        self.overlay.update(
            executed,
            current,
            bps,
            fills,
            notes,
            snap.value_types if snap is not None and not busy else {},
        )
        if scroll and current is not None:
            self.show_node(*current)

    def _shown_current(self, key: tuple[str, int], reveal: bool) -> tuple[str, int]:
        """The box that stands for the current node: itself when the canvas shows it or
        can expand to it without leaving the current view (``reveal``: do expand);
        else the nearest calling node that is shown (a function body's call node)."""
        if self.overlay.item_for(*key) is not None:
            return key
        presenter = self.session.presenter
        root = presenter.root_path if presenter is not None else "main"
        scopes = {s.path for s in self.doc.scopes()}
        if key[0] in scopes and (key[0] == root or key[0].startswith(root + "/")):
            if reveal:
                self.navigation.reveal(*key)
            return key
        s = self.controller.session
        for frame in reversed(s.frames if s is not None else []):
            pn = frame.current
            if pn is not None and self.overlay.item_for(pn.graph_path, pn.index) is not None:
                return (pn.graph_path, pn.index)
        return key

    def show_node(self, graph_path: str, index: int) -> None:
        """Scroll a node into view, expanding what hides it within the current view."""
        item = self.overlay.item_for(graph_path, index)
        if item is not None:
            self.view.ensureVisible(item, 80, 80)

    def reveal_address(self, address: str) -> None:
        key = self.key_of(address)
        if key is not None:
            self.navigation.reveal(*key)

    def _set_colouring(self, mode: str) -> None:
        self.colouring = mode
        self._refresh_canvas()

    # -- compare ---------------------------------------------------------------------------
    def compare(self) -> None:
        """Run the last inputs in onnxruntime (a thread) and compare with our values."""
        if self.doc is None:
            return
        s = self.controller.session
        feeds = self.controller.last_feeds
        if not feeds:
            try:
                feeds = self.feeds()
            except OnnxvizError as exc:
                self._message(str(exc))
                return
        ours = None
        if s is not None and s.state == "finished" and s.store is not None and not s.dropped:
            ours = dict(s.store.names("main"))
            ours.update(s.outputs)
        model = self.doc.model
        base_dir = getattr(self.doc, "base_dir", None)
        self.widget.compare_button.setEnabled(False)
        self.widget.set_comparison(None, "running onnxruntime…")

        self._compare_thread = start_worker_thread(
            lambda: compare_with_onnxruntime(model, feeds, ours, base_dir=base_dir),
            self.compareDone.emit,
            name="onnxviz-compare",
            failure="compare failed",
        )

    def _compare_done(self, result: Any) -> None:
        self.widget.compare_button.setEnabled(True)
        if isinstance(result, OnnxvizError):
            self.widget.set_comparison(None, str(result))
            return
        self.comparison = result
        summary = result.summary(self.widget.atol.value(), self.widget.rtol.value())
        self.widget.set_comparison(result, summary)
        if not self.widget.error_colours.isChecked():
            self.widget.error_colours.setChecked(True)
        else:
            self._refresh_canvas()

    def jump_to_divergence(self) -> str | None:
        if self.comparison is None:
            return None
        first = self.comparison.first_beyond(self.widget.atol.value(), self.widget.rtol.value())
        if first is None:
            self._message("no node passes the tolerance")
            return None
        self.navigation.reveal("main", first.index)
        return first.address

    def wait_compare(self, timeout_s: float = 60.0) -> None:
        import time

        from PySide6.QtWidgets import QApplication

        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            QApplication.processEvents()
            t = getattr(self, "_compare_thread", None)
            if (t is None or not t.is_alive()) and self.widget.compare_button.isEnabled():
                break
            time.sleep(0.005)
        QApplication.processEvents()

    # -- misc -------------------------------------------------------------------------------
    def _message(self, text: str) -> None:
        self.session.status(text, 8000)
        self.last_message = text
