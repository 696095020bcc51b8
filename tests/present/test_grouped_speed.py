"""Guards against gross slowdowns of the grouped layout the app runs (present lays out
each open name-scope group or body as a flat graph); CPU seconds with bounds several
times the targets, the real numbers come from benchmarks/bench_open_app.py."""

from __future__ import annotations

import time

from onnxviz.layout import LayoutCancelled


def cpu(fn):  # type: ignore[no-untyped-def]
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def test_grouped_first_view_and_expanding_a_group_within_budget() -> None:
    """The app's grouped path (present lays out each open block flat) on a 30k-node
    transformer: first view with the layers collapsed, then one layer opened."""
    from benchmarks.models import transformer_like

    from onnxviz.model.document import Document
    from onnxviz.present.presenter import Presenter, display_graph
    from onnxviz.present.typeinfo import type_table

    doc = Document.from_model(transformer_like(30_000))
    presenter = Presenter(doc, types=type_table(doc, infer=False))
    presenter.expanded |= presenter.default_expansion()
    first, scene = cpu(lambda: display_graph(presenter))
    # about 0.1 s here on a quiet machine; the bound leaves room for a loaded one
    assert first < 1.0
    layer = next(g for g in presenter.all_group_ids() if g.endswith("|g:/model/layers.3"))
    assert not scene.items[layer].expanded
    presenter.toggle(layer)
    one, scene = cpu(lambda: display_graph(presenter))
    assert scene.items[layer].expanded
    assert one < 0.5  # target 0.1 s (at 100k nodes: benchmarks/bench_open_app.py)


def test_grouped_layout_can_be_cancelled() -> None:
    from benchmarks.models import transformer_like

    from onnxviz.model.document import Document
    from onnxviz.present.build import BuildCancelled
    from onnxviz.present.presenter import Presenter, display_graph
    from onnxviz.present.typeinfo import type_table

    doc = Document.from_model(transformer_like(3000))
    presenter = Presenter(doc, types=type_table(doc, infer=False))
    presenter.expanded |= presenter.all_group_ids()
    try:
        display_graph(presenter, cancel=lambda: True)
    except (LayoutCancelled, BuildCancelled):
        pass
    else:
        raise AssertionError("cancel was ignored")
