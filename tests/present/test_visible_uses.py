"""Differential tests of the use filter (`present.visible`): the scene built with numpy
dropping the uses that draw nothing equals the scene built by walking every use, for
every expansion state a user reaches (default, all groups open, bodies open, groups
collapsed again), on exporter models, control flow and a model-local function."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import onnxviz.present.presenter as present_module
from onnxviz.model.document import Document
from onnxviz.present.build import SceneBuilder
from onnxviz.present.presenter import Presenter
from onnxviz.present.scene import Scene
from onnxviz.present.typeinfo import type_table
from tests.present.models import example, scan_model, scoped_model

EXPORTERS = Path(__file__).resolve().parent.parent / "data" / "exporters"


def _scene(presenter: Presenter, plain: bool) -> Scene:
    builder = SceneBuilder(
        presenter.doc,
        presenter.root_path,
        presenter.expanded,
        presenter.options,
        presenter.types,  # type: ignore[arg-type]
        group_trees=presenter.group_trees,
        schema_expanded=presenter.schema_expanded,
        use_tables=presenter.use_tables,
        walk_every_use=plain,
    )
    scene = builder.build()
    present_module.place(scene)
    return scene


def _summary(scene: Scene) -> tuple[object, ...]:
    items = sorted(
        (
            it.id,
            it.kind,
            it.title,
            it.subtitle,
            it.ports_in,
            it.ports_out,
            tuple(it.group_inputs),
            tuple(it.group_outputs),
            tuple((r.input_index, r.name) for r in it.rows),
            round(it.x, 3),
            round(it.y, 3),
        )
        for it in scene.items.values()
    )
    edges = [
        (e.source, e.source_port, e.target, e.target_port, e.value, e.kind, e.layout_key)
        for e in scene.edges
    ]
    producers = {inst: dict(p) for inst, p in scene.producers.items()}
    return items, edges, producers


def _states(presenter: Presenter) -> list[set[str]]:
    rng = random.Random(7)
    groups = sorted(presenter.all_group_ids())
    bodies = sorted(presenter.all_body_ids())
    some = set(rng.sample(groups, len(groups) // 2)) if groups else set()
    return [
        set(presenter.expanded),
        set(),
        set(groups),
        set(groups) | set(bodies),
        some | set(bodies),
    ]


def _models() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = [
        ("scoped", scoped_model(4)),
        ("scan", scan_model()),
        ("loop_with_if", example("loop_with_if.onnx")),
        ("with_functions", example("with_functions.onnx")),
    ]
    for name in ("optimum_bert", "torch_dynamo_control_flow", "ort_genai_llama_int4"):
        path = EXPORTERS / f"{name}.onnx"
        if path.exists():
            out.append((name, str(path)))
    return out


@pytest.mark.parametrize(("name", "model"), _models(), ids=[n for n, _ in _models()])
@pytest.mark.parametrize("show_initializers", [True, False])
def test_use_filter_builds_the_same_scene_as_walking_every_use(
    name: str, model: object, show_initializers: bool
) -> None:
    doc = Document.open(model) if isinstance(model, str) else Document.from_model(model)  # type: ignore[arg-type]
    presenter = Presenter(doc, types=type_table(doc))
    presenter.expanded |= presenter.default_expansion()
    presenter.with_options(show_initializers=show_initializers)
    for state in _states(presenter):
        presenter.expanded = state
        fast = _summary(_scene(presenter, plain=False))
        plain = _summary(_scene(presenter, plain=True))
        assert fast == plain, (name, sorted(state)[:5])


def test_use_table_follows_an_edit_of_the_graph() -> None:
    """A table built before an edit is not reused after it (the index dicts change)."""
    from onnxviz.model.commands import RenameValue

    doc = Document.from_model(scoped_model(3))
    presenter = Presenter(doc, types=type_table(doc))
    presenter.expanded = set()
    before = _scene(presenter, plain=False)
    edge = next(e for e in before.edges if e.kind == "data" and "|in:" in e.source)
    doc.execute(RenameValue("main", edge.value, "renamed_input"))
    after_fast = _summary(_scene(presenter, plain=False))
    after_plain = _summary(_scene(presenter, plain=True))
    assert after_fast == after_plain
    assert any(e[4] == "renamed_input" for e in after_fast[1])
