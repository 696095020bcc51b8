"""Headless drawing of a model to SVG/PNG/PDF (`onnxviz render`): the same scene and
items as the window, painted without showing anything."""

from __future__ import annotations

import os
from dataclasses import dataclass

from onnxviz.errors import OnnxvizError


@dataclass
class Rendered:
    path: str
    items: int
    edges: int
    width: float
    height: float


def render_model(
    model: str,
    output: str,
    *,
    graph: str | None = None,
    theme: str = "light",
    scale: float = 2.0,
    direction: str = "TB",
    expand: str = "default",  # "default" | "all" | "none"
    show_names: bool = False,
) -> Rendered:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    ext = os.path.splitext(output)[1].lower()
    if ext not in (".svg", ".png", ".pdf"):
        raise OnnxvizError(
            f"cannot render to '{output}': the file name must end in .svg, .png or .pdf"
        )
    from onnxviz.model.document import Document
    from onnxviz.present.options import ViewOptions
    from onnxviz.present.presenter import Presenter, display_graph
    from onnxviz.present.typeinfo import type_table
    from onnxviz.ui.app import application

    application()
    from onnxviz.ui.canvas.scene import GraphScene
    from onnxviz.ui.export import export_any
    from onnxviz.ui.theme import TextMetrics, resolve_theme

    doc = Document.open(model)
    root = graph or "main"
    try:
        doc.scope(root)
    except KeyError:
        known = ", ".join(s.path for s in doc.scopes()[:8])
        raise OnnxvizError(f"the model has no graph '{root}' (graphs: {known})") from None
    options = ViewOptions(direction="LR" if direction == "LR" else "TB", show_names=show_names)
    presenter = Presenter(doc, options=options, types=type_table(doc, infer=True))
    presenter.root_path = root
    if expand == "all":
        presenter.expanded |= presenter.all_group_ids() | presenter.all_body_ids()
    elif expand == "default":
        presenter.expanded |= presenter.default_expansion()
    measure = TextMetrics()
    scene = display_graph(presenter, measure=measure)
    gscene = GraphScene(resolve_theme(theme))
    gscene.show_scene(scene, options.show_shapes)
    export_any(gscene, output, scale=scale, title=doc.display_name)
    return Rendered(output, len(scene.items), len(scene.edges), scene.width, scene.height)
