"""The display graph: items, edges, groups, bodies, placement."""

from __future__ import annotations

import numpy as np
import pytest

from onnxviz.model.document import Document
from onnxviz.present.presenter import Presenter, display_graph
from onnxviz.present.scene import DisplayItem, Scene
from onnxviz.present.typeinfo import type_table
from tests.present.models import example, layernorm_model, scan_model, scoped_model


def _inside(inner: DisplayItem, outer: DisplayItem) -> bool:
    return (
        inner.x >= outer.x - 0.5
        and inner.y >= outer.y - 0.5
        and inner.x + inner.width <= outer.x + outer.width + 0.5
        and inner.y + inner.height <= outer.y + outer.height + 0.5
    )


def _overlap(a: DisplayItem, b: DisplayItem) -> bool:
    return not (
        a.x + a.width <= b.x
        or b.x + b.width <= a.x
        or a.y + a.height <= b.y
        or b.y + b.height <= a.y
    )


def _check_geometry(scene: Scene) -> None:
    """Every item lies inside its frame; siblings in a block do not overlap."""
    for item in scene.items.values():
        if item.parent is not None:
            assert _inside(item, scene.items[item.parent]), (item.id, item.parent)
    for block in scene.blocks.values():
        boxes = [it for it in block.items if it.kind != "proxy"]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                assert not _overlap(a, b), (a.id, b.id)


def _open(model_or_path) -> Presenter:  # type: ignore[no-untyped-def]
    doc = (
        Document.open(model_or_path)
        if isinstance(model_or_path, str)
        else Document.from_model(model_or_path)
    )
    p = Presenter(doc, types=type_table(doc))
    p.expanded |= p.default_expansion()
    return p


def test_small_cnn_items_rows_and_edges() -> None:
    p = _open(example("small_cnn.onnx"))
    scene = display_graph(p)
    g = p.doc.model.graph
    ops = scene.items_of_kind("op")
    assert len(ops) == len(g.node)
    inits = {t.name for t in g.initializer}
    for item in ops:
        node = g.node[item.node_index]
        assert item.title == node.op_type
        assert [r.name for r in item.rows] == [n for n in node.input if n in inits]
    # one edge per (producer output, consumer input) that is not an initializer
    expected = sum(1 for n in g.node for x in n.input if x and x not in inits) + len(g.output)
    assert len(scene.edges) == expected
    assert {it.value for it in scene.items_of_kind("input")} == {v.name for v in g.input} - inits
    # declared input type is not italic; an intermediate value's type is inferred
    first = next(e for e in scene.edges if e.source == f"main|in:{g.input[0].name}")
    assert first.label.startswith("float32[") and not first.inferred
    inner = next(e for e in scene.edges if e.source == "main#0")
    assert inner.label and inner.inferred
    _check_geometry(scene)


def test_unknown_dims_are_shown_as_such() -> None:
    p = _open(example("small_cnn.onnx"))
    scene = display_graph(p)
    labels = {e.label for e in scene.edges}
    assert any("batch" in label for label in labels)  # a dim_param stays symbolic


def test_initializer_rows_use_schema_input_names() -> None:
    p = _open(example("small_cnn.onnx"))
    scene = display_graph(p)
    conv = next(it for it in scene.items_of_kind("op") if it.title == "Conv")
    assert [r.label for r in conv.rows] == ["W", "B"]
    tensor = next(t for t in p.doc.model.graph.initializer if t.name == conv.rows[0].name)
    assert conv.rows[0].shape == "×".join(map(str, tensor.dims))


def test_name_scope_groups_collapse_and_expand() -> None:
    p = _open(scoped_model(3))
    scene = display_graph(p)
    groups = scene.items_of_kind("group")
    assert {g.title for g in groups} >= {"layer.0", "layer.1", "attn", "mlp"}
    assert all(g.expanded for g in groups)  # small graph: all open
    _check_geometry(scene)
    gid = "main|g:/encoder/layer.1"
    p.toggle(gid)
    collapsed = display_graph(p)
    box = collapsed.items[gid]
    assert not box.expanded and box.op_count == 6 and box.subtitle == "6 ops · 1 in · 1 out"
    assert not [
        it
        for it in collapsed.items.values()
        if it.id.startswith("main#")
        and "layer.1"
        in (p.doc.model.graph.node[it.node_index].name if it.node_index is not None else "")
    ]
    # the collapsed group's inputs and outputs are the values crossing its border
    assert box.group_inputs == ["/encoder/layer.0/mlp/out"]
    assert box.group_outputs == ["/encoder/layer.1/mlp/out"]
    into = [e for e in collapsed.edges if e.target == gid]
    assert len(into) == 1 and into[0].source.startswith("main#")
    _check_geometry(collapsed)
    p.toggle(gid)
    assert len(display_graph(p).items) == len(scene.items)
    # opening a group inside a closed one opens its parents too
    p.expanded.clear()
    p.toggle("main|g:/encoder/layer.1/attn")
    opened = display_graph(p)
    assert opened.items["main|g:/encoder/layer.1"].expanded
    assert opened.items["main|g:/encoder/layer.1/attn"].expanded
    assert not opened.items["main|g:/encoder/layer.0"].expanded


def test_loop_with_if_expands_inline_at_any_depth() -> None:
    p = _open(example("loop_with_if.onnx"))
    collapsed = display_graph(p)
    loop = next(it for it in collapsed.items_of_kind("op") if it.title == "Loop")
    assert loop.expandable and not loop.expanded
    # the body reads 'x' from the main graph: drawn as a dashed edge to the Loop
    assert any(e.kind == "captured" and e.target == loop.id for e in collapsed.edges)
    p.expanded |= p.all_body_ids()
    scene = display_graph(p)
    loop = scene.items[loop.id]
    assert loop.kind == "container" and loop.blocks
    iff = next(it for it in scene.items.values() if it.title == "If")
    assert iff.kind == "container" and {b.label for b in iff.blocks} == {
        "then_branch",
        "else_branch",
    }
    assert iff.parent == loop.id
    inner = [it for it in scene.items.values() if it.parent == iff.id]
    assert {it.title for it in inner if it.kind == "op"} == {"Add", "Identity"}
    # a value captured from the Loop body into the then branch links to its producer
    captured = [
        e for e in scene.edges if e.kind == "captured" and e.target in {it.id for it in inner}
    ]
    assert captured and all(
        scene.items[e.source].graph_path != iff.blocks[0].graph_path for e in captured
    )
    _check_geometry(scene)


def test_scan_body_and_outer_pills_when_opened_on_its_own() -> None:
    p = _open(scan_model())
    p.set_root("main/body:scan")
    scene = display_graph(p)
    outer = scene.items_of_kind("outer")
    assert [it.value for it in outer] == ["scale"]
    assert not outer[0].missing
    assert {it.title for it in scene.items_of_kind("op")} == {"Add", "Mul", "Identity"}


def test_function_body_and_schema_body() -> None:
    p = _open(example("with_functions.onnx"))
    p.expanded |= p.all_body_ids()
    scene = display_graph(p)
    calls = [it for it in scene.items.values() if it.kind == "container"]
    assert len(calls) == 2
    fn = p.doc.model.functions[0]
    for call in calls:
        body = [it for it in scene.items.values() if it.parent == call.id and it.kind == "op"]
        assert sorted(it.title for it in body) == sorted(n.op_type for n in fn.node)
    _check_geometry(scene)
    ln = _open(layernorm_model())
    ln.schema_expanded.add("main#0")
    scene = display_graph(ln)
    assert scene.items["main#0"].kind == "container"
    assert len([it for it in scene.items.values() if it.parent == "main#0" and it.kind == "op"]) > 3


def test_reveal_expands_what_hides_a_nested_node() -> None:
    p = _open(example("loop_with_if.onnx"))
    path = next(s.path for s in p.doc.scopes() if s.path.endswith("then_branch:maybe_add"))
    target = p.reveal(path, 0)
    scene = display_graph(p)
    assert target in scene.items and scene.items[target].title == "Add"


def test_directions_put_ranks_down_or_right() -> None:
    p = _open(example("small_cnn.onnx"))
    tb = display_graph(p)
    p.with_options(direction="LR")
    lr = display_graph(p)
    src, dst = "main|in:image", "main|out:probabilities"
    assert tb.items[dst].y > tb.items[src].y
    assert lr.items[dst].x > lr.items[src].x
    assert lr.width > lr.height and tb.height > tb.width


def test_large_graph_opens_collapsed_within_budget() -> None:
    from benchmarks.models import transformer_like

    p = _open(transformer_like(3000))
    scene = display_graph(p)
    assert len(scene.items) < 1200
    assert scene.items_of_kind("group")
    total = sum(it.op_count for it in scene.items_of_kind("group") if not it.expanded)
    shown = len(scene.items_of_kind("op"))
    assert total + shown == len(p.doc.model.graph.node)


@pytest.mark.parametrize("show", [True, False])
def test_show_initializers_option(show: bool) -> None:
    p = _open(example("small_cnn.onnx"))
    p.with_options(show_initializers=show)
    scene = display_graph(p)
    rows = sum(len(it.rows) for it in scene.items_of_kind("op"))
    assert (rows > 0) == show
    assert np.isfinite(scene.width)


def test_layout_cache_belongs_to_the_presenter_and_reuses_identical_layers() -> None:
    from onnxviz.present import placement

    first = _open(scoped_model(6))
    first.expanded |= first.all_group_ids()
    calls: list[int] = []
    original = placement.compute

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return original(*args, **kwargs)

    placement.compute = counting  # type: ignore[assignment]
    try:
        display_graph(first)
        cold = len(calls)
        display_graph(first)  # same structure again: every block from the cache
        assert len(calls) == cold
        # six identical layers: fewer layouts than blocks
        blocks = len(display_graph(first).blocks)
        assert 0 < cold < blocks
        second = _open(scoped_model(6))  # another document starts with its own cache
        second.expanded |= second.all_group_ids()
        assert len(second.layout_cache) == 0
        display_graph(second)
        assert len(calls) == 2 * cold
    finally:
        placement.compute = original  # type: ignore[assignment]


def _cached_layers(layers: int):  # type: ignore[no-untyped-def]
    """A decoder-like chain with one cache input per layer (as LLM exports have two)
    and a mask every layer reads."""
    import onnx
    from onnx import TensorProto, helper

    nodes, inputs = [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])]
    inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [4]))
    x = "x"
    for i in range(layers):
        scope = f"/model/layers.{i}"
        inputs.append(helper.make_tensor_value_info(f"cache.{i}", TensorProto.FLOAT, [4]))
        nodes.append(
            helper.make_node("Add", [x, f"cache.{i}"], [f"{scope}/a"], name=f"{scope}/Add")
        )
        nodes.append(
            helper.make_node("Mul", [f"{scope}/a", "mask"], [f"{scope}/m"], name=f"{scope}/Mul")
        )
        nodes.append(helper.make_node("Relu", [f"{scope}/m"], [f"{scope}/r"], name=f"{scope}/Relu"))
        x = f"{scope}/r"
    graph = helper.make_graph(
        nodes, "cached", inputs, [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4])]
    )
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_many_inputs_are_placed_with_their_uses_not_in_a_row_across_the_top() -> None:
    from onnxviz.present import build

    layers = build.FEW_INPUTS + 2
    doc = Document.from_model(_cached_layers(layers))
    presenter = Presenter(doc, types=type_table(doc))
    presenter.expanded |= presenter.all_group_ids()
    scene = display_graph(presenter)
    _check_geometry(scene)
    for i in range(layers):
        cache = scene.items[f"main|in:cache.{i}"]
        assert cache.parent == f"main|g:/model/layers.{i}"  # inside its layer's frame
    assert scene.items["main|in:mask"].parent is None  # every layer reads it
    assert scene.items["main|in:x"].parent == "main|g:/model/layers.0"
    # layers collapsed: each cache input sits right above its layer's box, not at the
    # top of the drawing
    presenter.expanded = set()
    scene = display_graph(presenter)
    _check_geometry(scene)
    last = scene.items[f"main|g:/model/layers.{layers - 1}"]
    cache = scene.items[f"main|in:cache.{layers - 1}"]
    assert cache.parent == last.parent
    assert 0 < last.y - (cache.y + cache.height) < 3 * cache.height
    # with few inputs they keep the top row
    small = Document.from_model(_cached_layers(build.FEW_INPUTS - 2))
    presenter = Presenter(small, types=type_table(small))
    presenter.expanded |= presenter.all_group_ids()
    scene = display_graph(presenter)
    assert all(it.parent is None for it in scene.items.values() if it.kind == "input")
