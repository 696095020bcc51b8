"""Export (SVG, PNG, PDF), `onnxviz render`, `--screenshot`, outline, drag and drop."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

import onnx
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent, QImage

from tests.present.models import example

pytestmark = pytest.mark.qt


def _svg_texts(path: str) -> list[str]:
    root = ET.parse(path).getroot()
    return [el.text for el in root.iter() if el.tag.endswith("text") and el.text]


def test_export_svg_and_png_whole_graph_and_view(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.export import export_any, export_png

    window.files.open_path(example("small_cnn.onnx"), background=False)
    svg = str(tmp_path / "g.svg")
    export_any(window.graph_scene, svg, title="cnn")
    texts = _svg_texts(svg)
    ops = {n.op_type for n in window.session.doc.model.graph.node}
    assert ops <= set(texts)  # every op type is drawn as vector text
    png = str(tmp_path / "g.png")
    size = export_png(window.graph_scene, png, scale=1.5)
    image = QImage(png)
    rect = window.graph_scene.sceneRect()
    assert image.width() == round(rect.width() * 1.5) and image.height() == size.height()
    # something is drawn: not a single flat colour
    colours = {
        image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)
    }
    assert len(colours) > 10
    view_png = str(tmp_path / "view.png")
    window.view.set_zoom(1.0)
    export_any(window.graph_scene, view_png, window.navigation.visible_rect(), scale=1.0)
    vis = window.navigation.visible_rect()
    assert QImage(view_png).width() == round(vis.width())
    pdf = str(tmp_path / "g.pdf")
    export_any(window.graph_scene, pdf)
    with open(pdf, "rb") as fh:
        assert fh.read(5) == b"%PDF-"
    with pytest.raises(Exception, match="svg, .png or .pdf"):
        export_any(window.graph_scene, str(tmp_path / "g.bmp"))


def test_png_scale_is_capped_for_huge_drawings() -> None:
    from PySide6.QtCore import QRectF

    from onnxviz.ui.export import MAX_PNG_SIDE, png_scale

    assert png_scale(QRectF(0, 0, 100, 50_000), 2.0) * 50_000 <= MAX_PNG_SIDE
    assert png_scale(QRectF(0, 0, 100, 100), 2.0) == 2.0


def test_render_cli_writes_svg_png_pdf(qapp, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.cli.main import main

    model = example("loop_with_if.onnx")
    for ext in ("svg", "png", "pdf"):
        out = str(tmp_path / f"loop.{ext}")
        assert main(["render", model, "-o", out, "--expand", "all"]) == 0
        assert os.path.getsize(out) > 500
    texts = _svg_texts(str(tmp_path / "loop.svg"))
    assert {"Loop", "If", "Add", "then_branch", "else_branch"} <= set(texts)
    body = str(tmp_path / "body.svg")
    graph = "main/body:accumulate"
    assert main(["render", model, "-o", body, "--graph", graph]) == 0
    assert "Loop" not in _svg_texts(body) and "If" in _svg_texts(body)
    assert main(["render", model, "-o", str(tmp_path / "x.svg"), "--graph", "nope"]) == 2
    assert "no graph 'nope'" in capsys.readouterr().err
    assert main(["render", model, "-o", str(tmp_path / "x.gif")]) == 2


def test_screenshot_option(qapp, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.app import run_app

    out = str(tmp_path / "shot.png")
    assert run_app(example("with_functions.onnx"), screenshot=out) == 0
    image = QImage(out)
    assert image.width() >= 1000 and image.height() >= 600
    assert run_app(str(tmp_path / "missing.onnx"), screenshot=str(tmp_path / "no.png")) == 2
    assert not os.path.exists(tmp_path / "no.png")


def test_outline_lists_graphs_and_jumps(window) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("loop_with_if.onnx"), background=False)
    tree = window.outline_dock.tree
    main = tree.topLevelItem(0)
    texts = [main.child(i).text(0) for i in range(main.childCount())]
    assert texts[:4] == ["inputs (2)", "outputs (1)", "initializers (3)", "nodes (1)"]
    body = main.child(4)
    assert body.text(0).startswith("accumulate  (")  # the Loop by name, as the breadcrumbs say
    body.setExpanded(True)
    nodes = next(
        body.child(i) for i in range(body.childCount()) if body.child(i).text(0).startswith("nodes")
    )
    nodes.setExpanded(True)
    assert nodes.childCount() == len(window.session.doc.scope("main/body:accumulate").nodes)
    window.outline_dock._activated(nodes.child(4), 0)
    selected = window.view.selected_node()
    assert selected is not None and selected.data_item.graph_path == "main/body:accumulate"


def test_drop_a_file_opens_it(window, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "dropped.onnx")
    onnx.save(onnx.load(example("small_cnn.onnx")), path)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(path)])
    event = QDropEvent(
        QPointF(10, 10),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    window.dropEvent(event)
    qtbot.waitUntil(
        lambda: window.session.doc is not None and window.session.doc.path == path, timeout=20000
    )


def test_cancel_stops_an_open(window, qtbot) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(example("small_cnn.onnx"))
    window.work.cancel()
    qtbot.waitUntil(lambda: window.work.task is None, timeout=20000)
    # either it finished before the cancel landed, or nothing was adopted
    assert window.session.doc is None or window.session.doc.display_name == "small_cnn.onnx"
    assert window.status_line.progress.isHidden()
