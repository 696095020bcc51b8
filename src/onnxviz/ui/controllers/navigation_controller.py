"""The canvas and moving around it: showing (re)laid-out scenes, drill-down views with
a breadcrumb, expanding and collapsing, revealing and selecting nodes, view options,
diagnostics badges, and the canvas's follow-up to each change of the model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from PySide6.QtCore import QObject, QPointF, Signal
from PySide6.QtGui import QTransform
from PySide6.QtWidgets import QLabel, QMenu, QWidget

from onnxviz.model.changes import ChangeSet
from onnxviz.model.diagnostics import Diagnostic, Severity
from onnxviz.model.scope_names import graph_trail
from onnxviz.present.find import FindResult
from onnxviz.present.scene import Scene
from onnxviz.ui import collector, settings
from onnxviz.ui.canvas import scene as canvas_scene
from onnxviz.ui.canvas.items import NodeItem
from onnxviz.ui.canvas.scene import GraphScene
from onnxviz.ui.canvas.view import GraphView
from onnxviz.ui.controllers.background_work import BackgroundWork
from onnxviz.ui.doc_session import DocumentSession
from onnxviz.ui.theme import TextMetrics
from onnxviz.ui.workers import Task, layout_job

# Re-layouts of scenes with more boxes than this run in a worker thread.
BACKGROUND_LAYOUT_ITEMS = 3000
# After an edit of a model with more nodes than this, the canvas is re-laid out in a
# worker thread (the window stays responsive; the old drawing shows until then).
BACKGROUND_EDIT_NODES = 3000


@dataclass
class Crumb:
    """A view left by drilling down: Back returns to it as it was."""

    root_path: str
    transform: QTransform
    center: QPointF
    expanded: set[str]


# While a big scene is laid out and filled, full garbage collections wait (`collector`):
# after a model had settled, an expand-all at 100k nodes made Python run them over the
# new items again and again, 0.6-1.0 s each on the UI thread and up to 0.3 s in the
# layout thread.  The hold ends once neither runs, two looks in a row.
CANVAS_HOLDER = "canvas"


class NavigationController(QObject):
    crumbs_changed = Signal()  # the breadcrumb (and Back) changed

    def __init__(
        self,
        session: DocumentSession,
        scene: GraphScene,
        view: GraphView,
        work: BackgroundWork,
        crumb_bar: QWidget,
        crumb_label: QLabel,
    ) -> None:
        super().__init__(session)
        self.session = session
        self.graph_scene = scene
        self.view = view
        self.work = work
        self.crumb_bar = crumb_bar
        self.crumb_label = crumb_label
        self.crumbs: list[Crumb] = []
        self.badges: dict[str, list[str]] = {}
        self.inference_task: Task | None = None
        # what relayouts asked to do once laid out, until one is (see `relayout`)
        self._after_relayout: list[Callable[[], Any]] = []
        self._canvas_settled = collector.HoldUntilQuiet(
            CANVAS_HOLDER, lambda: self.work.task is None and not scene.filling, self
        )
        scene.filled.connect(self._apply_badges)  # big scenes fill in slices
        scene.toggleRequested.connect(self.toggle)
        scene.jumpRequested.connect(self.select_item)
        session.document_replaced.connect(self._document_replaced)
        session.changed.connect(self.document_changed)
        session.diagnostics_changed.connect(self._diagnostics_changed)

    # -- documents ------------------------------------------------------------------------
    def _document_replaced(self, doc: Any) -> None:
        self.cancel_inference()  # shapes of the model being replaced are not needed
        self._after_relayout = []  # (what a cancelled relayout of the old one was to do)
        self.crumbs = []
        self.badges = {}
        if doc is None:
            self.graph_scene.clear()
            self.graph_scene.nodes = {}
            self.crumb_bar.hide()
            self.crumbs_changed.emit()

    def adopt_scene(self, scene: Scene) -> None:
        """The first scene of a newly opened document."""
        self.show(scene)
        self.view.fit_width_top()
        presenter = self.session.presenter
        if presenter is not None and presenter.types is not None and not presenter.types.complete:
            self.start_inference()

    def cancel_inference(self) -> None:
        task = self.inference_task
        if task is not None and not task.done:
            task.cancel()

    def stop(self) -> None:
        """Closing: no worker may outlive the window."""
        task = self.inference_task
        if task is not None and not task.done:
            task.cancel()
            task.wait(5000)

    def start_inference(self) -> None:
        """Big models: shapes are inferred after the first paint, in another process."""
        from onnxviz.present.typeinfo import InferredEntries, add_inferred_entries
        from onnxviz.ui.workers import inference_job

        doc, presenter = self.session.doc, self.session.presenter
        assert doc is not None and presenter is not None
        task = Task(inference_job(doc), self)
        self.inference_task = task
        self.session.status("inferring shapes in the background…", 0)

        def done(found: InferredEntries) -> None:
            if self.session.presenter is presenter and presenter.types is not None:
                add_inferred_entries(presenter.types, found)
                self.session.status("inferred shapes added", 3000)
                self.relayout()

        task.finished.connect(done)
        task.start()

    # -- showing ------------------------------------------------------------------------------
    def show(self, scene: Scene) -> None:
        self.session.display = scene
        self.graph_scene.show_scene(scene, self.session.options.show_shapes)
        self.view.refresh_detail()
        self._update_crumbs()
        self.session.scene_ready.emit(scene)

    def relayout(
        self,
        anchor: str | None = None,
        after: Callable[[], Any] | None = None,
        background: bool | None = None,
        grows_by: int = 0,
    ) -> None:
        """Rebuild and re-place the scene, keeping ``anchor`` (an item id) where it is
        (``background`` None: in a worker thread when the scene is or will be big;
        ``grows_by``: about how many boxes an expansion adds to the one shown)."""
        presenter = self.session.presenter
        if presenter is None:
            return
        before = None
        if anchor and (pos := self.graph_scene.item_pos(anchor)) is not None:
            before = self.view.mapFromScene(pos)
        center = self.view.mapToScene(self.view.viewport().rect().center())
        if background is None:
            display = self.session.display
            # in the background also when the canvas fills in slices: an inline layout
            # fills the whole canvas at once (inline callers want it complete)
            # also for a big model behind a small view: building its scene walks the
            # whole index (a 100k-node model's inline relayout after inferred shapes
            # arrived was a 100 ms stop)
            # and when an expansion is about to make it big: Expand All on a 3,000-node
            # model was laid out and filled inline, a 237 ms stop
            shown = (len(display.items), len(display.edges)) if display else (0, 0)
            background = (
                self.session.total_nodes > BACKGROUND_EDIT_NODES
                or shown[0] + grows_by > BACKGROUND_LAYOUT_ITEMS
                or shown[0] + shown[1] + 2 * grows_by > canvas_scene.SYNC_ITEMS
            )

        # A relayout asked while another runs cancels it (the window's one background
        # job): what the cancelled one was to do after (select a found node, fit) is
        # done after this one.  A find's jump was lost when the inferred shapes of a
        # model just opened asked for their relayout meanwhile.
        if after is not None:
            self._after_relayout.append(after)

        def done(scene: Scene) -> None:
            self.show(scene)
            pos = self.graph_scene.item_pos(anchor) if anchor else None
            if before is not None and pos is not None:
                delta = self.view.mapFromScene(pos) - before
                bar = self.view.horizontalScrollBar()
                bar.setValue(bar.value() + delta.x())
                bar = self.view.verticalScrollBar()
                bar.setValue(bar.value() + delta.y())
            else:
                self.view.centerOn(center)
            pending, self._after_relayout = self._after_relayout, []
            for then in pending:
                then()

        if background:
            self._canvas_settled.start()
        self.work.run(layout_job(presenter, TextMetrics), done, background, "laying out")

    def toggle(self, item_id: str) -> None:
        if self.session.presenter is None:
            return
        display = self.session.display
        item = display.items.get(item_id) if display is not None else None
        # a collapsed group opening: its nodes join the scene (about an edge each)
        presenter = self.session.presenter
        opening = item is not None and item.kind == "group" and item_id not in presenter.expanded
        grows = item.op_count if opening and item is not None else 0
        presenter.toggle(item_id)
        self.relayout(
            anchor=item_id,
            after=lambda: self.select_item(item_id, center=False),
            grows_by=grows,
        )

    def toggle_schema_body(self, item_id: str) -> None:
        presenter = self.session.presenter
        if presenter is None:
            return
        if item_id in presenter.schema_expanded:
            presenter.schema_expanded.discard(item_id)
        else:
            presenter.schema_expanded.add(item_id)
        self.relayout(anchor=item_id)

    def expand_all(self) -> None:
        if self.session.presenter is not None:
            self.session.presenter.expanded |= self.session.presenter.all_group_ids()
            # The box in the middle of the view stays where it is: the view's point
            # itself was empty canvas once everything around it had opened.
            self.relayout(anchor=self.item_in_view(), grows_by=self.session.total_nodes)

    def item_in_view(self) -> str | None:
        """The id of the box nearest the middle of the view (None: none in view)."""
        view = self.view
        middle = view.mapToScene(view.viewport().rect().center())
        best: tuple[float, str] | None = None
        for item in view.items(view.viewport().rect()):
            if isinstance(item, NodeItem):
                d = item.data_item
                gap = abs(d.x + d.width / 2 - middle.x()) + abs(d.y + d.height / 2 - middle.y())
                if best is None or gap < best[0]:
                    best = (gap, d.id)
        return best[1] if best is not None else None

    def expand_all_bodies(self) -> None:
        """Open every Loop/If/Scan body and function body under the shown graph."""
        if self.session.presenter is None:
            return
        opened = self.session.presenter.open_all_bodies()
        self.session.status(f"opened {opened} bodies" if opened else "no bodies to open", 4000)
        self.relayout(grows_by=self.session.total_nodes if opened else 0)

    def collapse_all(self) -> None:
        presenter = self.session.presenter
        if presenter is not None:
            presenter.expanded -= presenter.all_group_ids()
            self.relayout(after=self.view.fit)

    def set_options(self, **changes: Any) -> None:
        self.session.options = replace(self.session.options, **changes)
        for key, value in changes.items():
            settings.save_value(key, value)
        if self.session.presenter is not None:
            self.session.presenter.options = self.session.options
            self.relayout()

    def set_direction(self, direction: str) -> None:
        if direction != self.session.options.direction:
            self.set_options(direction=direction)
            self.view.fit()

    # -- drill-down -----------------------------------------------------------------------------
    def open_graph(self, path: str) -> None:
        """Show a subgraph or function body as a view of its own (Back returns)."""
        presenter = self.session.presenter
        if presenter is None or path == presenter.root_path:
            return
        self.crumbs.append(
            Crumb(
                presenter.root_path,
                self.view.transform(),
                self.view.mapToScene(self.view.viewport().rect().center()),
                set(presenter.expanded),
            )
        )
        presenter.set_root(path)
        self.relayout(after=self.view.fit)

    def back(self) -> None:
        presenter = self.session.presenter
        if not self.crumbs or presenter is None:
            return
        crumb = self.crumbs.pop()
        presenter.root_path = crumb.root_path
        presenter.expanded = crumb.expanded

        def restore() -> None:
            self.view.setTransform(crumb.transform)
            self.view.refresh_detail()
            self.view.centerOn(crumb.center)
            self.view.zoomChanged.emit(self.view.zoom())

        self.relayout(after=restore)

    def _update_crumbs(self) -> None:
        presenter, doc = self.session.presenter, self.session.doc
        if doc is None or presenter is None or presenter.root_path == "main" and not self.crumbs:
            self.crumb_bar.hide()
        else:
            # the graph shown, with the graphs around it: main › Scan#0 › If#4 (else)
            scope = doc.scope(presenter.root_path)
            self.crumb_label.setText("  ›  ".join(graph_trail(scope)))
            self.crumb_bar.show()
        self.crumbs_changed.emit()

    # -- selecting and revealing ----------------------------------------------------------------
    def select_item(self, item_id: str, center: bool = True) -> bool:
        if item_id not in self.graph_scene.nodes:
            self.graph_scene.finish_filling()  # a big scene still being filled
        node = self.graph_scene.nodes.get(item_id)
        if node is None:
            return False
        self.view.select_and_show(node, center)
        return True

    def jump_to(self, result: FindResult) -> None:
        """Show a find result: change the root if needed, expand what hides it, select."""
        self.reveal(result.graph_path, result.node_index)

    def reveal(self, graph_path: str, node_index: int | None) -> None:
        presenter, doc = self.session.presenter, self.session.doc
        if presenter is None or doc is None:
            return
        target = presenter.reveal(graph_path, node_index)
        if target is None:
            # not under the current root: go to the graph's top (main or a function)
            top = doc.scope(graph_path)
            while top.parent is not None:
                top = top.parent
            self.open_graph(top.path)
            target = presenter.reveal(graph_path, node_index)
        if target is None:
            return
        found = target
        self.relayout(after=lambda: self.select_item(found))

    def visible_rect(self) -> Any:
        return self.view.mapToScene(self.view.viewport().rect()).boundingRect()

    def fill_context_menu(self, item: Any, menu: QMenu) -> None:
        """The canvas menu's view entries for ``item``: expand, open a body in a view."""
        doc, presenter = self.session.doc, self.session.presenter
        if doc is None or presenter is None or not isinstance(item, NodeItem):
            return
        d = item.data_item
        if d.expandable:
            menu.addAction("Collapse" if d.expanded else "Expand", lambda: self.toggle(d.id))
        if d.node_index is None or d.graph_path not in {s.path for s in doc.scopes()}:
            return
        scope = doc.scope(d.graph_path)
        for child in scope.children:
            if child.owner_node_index == d.node_index:
                menu.addAction(
                    f"Open '{child.owner_attribute}' in its own view",
                    partial(self.open_graph, child.path),
                )
        node = scope.nodes[d.node_index]
        fn = next(
            (f for f in doc.model.functions if (f.domain, f.name) == (node.domain, node.op_type)),
            None,
        )
        if fn is not None:
            from onnxviz.model.scopes import function_path

            fn_path = function_path(fn)
            menu.addAction(
                "Open the function body in its own view", lambda: self.open_graph(fn_path)
            )
        elif d.kind == "op" or d.id in presenter.schema_expanded:
            from onnxviz.present.build import schema_function_body

            if schema_function_body(doc.model, node) is not None:
                shown = d.id in presenter.schema_expanded
                menu.addAction(
                    "Hide the schema function body" if shown else "Expand the schema function body",
                    lambda: self.toggle_schema_body(d.id),
                )

    # -- after each change ------------------------------------------------------------------
    def document_changed(self, changes: ChangeSet) -> None:
        """The canvas follows an edit: in place when no box moves, else a relayout."""
        from onnxviz.present.typeinfo import type_table

        doc, presenter = self.session.doc, self.session.presenter
        if doc is None or presenter is None:
            return
        if changes.structural:
            presenter.group_trees = {}
        try:
            doc.scope(presenter.root_path)
        except KeyError:  # the viewed subgraph is gone (undo of its creation, ...)
            presenter.root_path = "main"
            self.crumbs = []
        old_types = presenter.types
        presenter.types = type_table(doc)
        if old_types is not None and not (
            changes.structural or changes.names or changes.model_fields
        ):
            presenter.types.keep_initializer_index(old_types)
        if not presenter.types.complete:
            if old_types is not None:  # keep the last inferred texts until new ones come
                by_graph = presenter.types.by_graph
                for path, values in old_types.by_graph.items():
                    # the old entries, then the new table's over them (one C-level copy:
                    # a setdefault per value was 30 ms at 100k nodes, in the edit's turn)
                    merged = dict(values)
                    merged.update(by_graph.get(path, {}))
                    by_graph[path] = merged
            self.cancel_inference()  # its model is out of date
            self.start_inference()
        if in_place(changes):
            self._refresh_in_place()
        else:
            big = self.session.total_nodes > BACKGROUND_EDIT_NODES
            self.relayout(background=True if big else None)
        self.show_diagnostic_badges(self.session.diagnostics)

    def _refresh_in_place(self) -> None:
        """Edge labels (shapes) follow the new types; boxes stay where they are."""
        doc, presenter = self.session.doc, self.session.presenter
        if presenter is None or presenter.types is None or doc is None:
            return
        types = presenter.types
        scopes = {s.path: s for s in doc.scopes()}
        for edge in self.graph_scene.edge_items:
            d = edge.data_edge
            scope = scopes.get(d.graph_path)
            if scope is None:
                continue
            vt = types.lookup(scope, d.value)
            text = vt.text if vt else ""
            if text != d.label:
                d.label, d.inferred = text, bool(vt and vt.inferred)
                edge.setToolTip(f"{d.value}: {text}" if text else d.value)
                edge.update()

    # -- diagnostics on the canvas ------------------------------------------------------------
    def _diagnostics_changed(self, diagnostics: list[Diagnostic], badges: bool) -> None:
        if badges:
            self.show_diagnostic_badges(diagnostics)

    def show_diagnostic_badges(self, diagnostics: list[Diagnostic]) -> None:
        counts: dict[str, list[str]] = {}
        doc = self.session.doc
        if doc is not None:
            from onnxviz.check.validator import diagnostics_by_node

            for node_id, found in diagnostics_by_node(doc, diagnostics).items():
                # Notes stay in the Diagnostics dock: a red dot on every contrib op of a
                # genai export (O021, "runs in onnxruntime only") read as a broken model.
                shown = [d for d in found if d.severity is not Severity.INFO]
                if shown:
                    shown.sort(key=lambda d: d.severity is not Severity.ERROR)  # errors first
                    counts[node_id.item_id] = [
                        f"{d.severity.value} {d.code}: {d.message}" for d in shown
                    ]
        self.badges = counts
        for item_id, node in self.graph_scene.nodes.items():
            node.set_problems(counts.get(item_id, []))

    def _apply_badges(self) -> None:
        for item_id, problems in self.badges.items():
            node = self.graph_scene.nodes.get(item_id)
            if node is not None:
                node.set_problems(problems)


def in_place(changes: ChangeSet) -> bool:
    """Edits that do not move boxes or edges: attribute, type, doc, metadata, model
    fields.  Everything that adds, removes or rewires re-lays out."""
    renames = bool(changes.names) and bool(changes.nodes)  # a value rename touches both
    return not changes.structural and not changes.reindex and not renames
