"""Find across nested graphs; property sections; name-scope group trees; categories."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from onnxviz.model.document import Document
from onnxviz.present.categories import category_of
from onnxviz.present.find import find
from onnxviz.present.groups import build_group_tree
from onnxviz.present.properties import model_sections, node_sections, value_sections
from onnxviz.present.typeinfo import type_table
from tests.present.models import example, scan_model


def test_find_reaches_nested_bodies_and_functions() -> None:
    doc = Document.open(example("loop_with_if.onnx"))
    hits = find(doc, "then_add")
    assert hits[0].kind == "node" and hits[0].graph_path.endswith("then_branch:maybe_add")
    values = find(doc, "then_out")
    assert any(h.kind == "output" for h in values)
    fdoc = Document.open(example("with_functions.onnx"))
    assert any(h.graph_path.startswith("function:") for h in find(fdoc, "sigmoid"))
    sdoc = Document.from_model(scan_model())
    # a captured value is found where it is used, inside the body
    assert any(h.graph_path == "main/body:scan" and h.value == "scale" for h in find(sdoc, "scale"))
    assert find(doc, "   ") == []


def test_exact_match_ranks_first() -> None:
    doc = Document.from_model(scan_model())
    hits = find(doc, "scan")
    assert hits[0].text == "scan"


def test_node_sections_mark_defaults_and_show_schema() -> None:
    doc = Document.open(example("small_cnn.onnx"))
    conv = next(i for i, n in enumerate(doc.model.graph.node) if n.op_type == "Conv")
    sections = {s.title: s for s in node_sections(doc, "main", conv, type_table(doc))}
    attrs = {r.key: r for r in sections["Attributes"].rows}
    given = {a.name for a in doc.model.graph.node[conv].attribute}
    assert all(attrs[name].note != "default" for name in given)
    assert attrs["group"].note == "default" and attrs["group"].value == "1"
    assert "since_version" in {r.key for r in sections["Node"].rows}
    assert "convolution" in sections["Documentation"].text.lower()
    assert [r.key for r in sections["Inputs"].rows][:2] == ["X", "W"]


def test_tensor_statistics_match_numpy() -> None:
    doc = Document.open(example("small_cnn.onnx"))
    tensor = doc.model.graph.initializer[0]
    arr = onnx.numpy_helper.to_array(tensor).astype(np.float64)
    sections = {s.title: s for s in value_sections(doc, "main", tensor.name, type_table(doc))}
    rows = {r.key: r.value for r in sections["Tensor"].rows}
    assert float(rows["min"]) == np.float64(f"{arr.min():.6g}")
    assert float(rows["mean"]) == np.float64(f"{arr.mean():.6g}")
    assert rows["shape"] == "[" + ", ".join(map(str, tensor.dims)) + "]"
    assert sections["Values"].text.startswith(str(arr.reshape(-1)[0].astype(np.float32)))


def test_model_sections_cover_metadata_and_opsets() -> None:
    doc = Document.open(example("small_cnn.onnx"))
    titles = {s.title: s for s in model_sections(doc)}
    keys = {r.key for r in titles["Model"].rows}
    assert {"ir_version", "producer_name", "opset ai.onnx"} <= keys
    assert {r.key for r in titles["Metadata"].rows} == {p.key for p in doc.model.metadata_props}


def test_group_tree_drops_wrappers_and_singletons() -> None:
    names = [
        "/model/a/x/MatMul",
        "/model/a/x/Add",
        "/model/a/y/Relu",
        "/model/b/Relu",
        "/model/b/Add",
        "/model/c/Only",
    ]
    nodes = [helper.make_node("Relu", [], [], name=n) for n in names]
    tree = build_group_tree(nodes)
    assert set(tree.groups) == {"/model/a", "/model/a/x", "/model/b"}
    assert tree.groups["/model/a"].label == "a" and tree.groups["/model/a/x"].label == "x"
    assert tree.groups["/model/a"].size == 3
    assert tree.node_group == ["/model/a/x", "/model/a/x", "/model/a", "/model/b", "/model/b", None]


def test_categories() -> None:
    assert category_of("Conv") == "layer"
    assert category_of("Relu") == "activation"
    assert category_of("If") == "control"
    assert category_of("ZipMap", "ai.onnx.ml") == "ml"
    assert category_of("Foo", "my.domain") == "custom"
    assert category_of("QuantizeLinear") == "quantization"


def test_multi_device_configuration_and_training_info_are_listed() -> None:
    model = scan_model()
    cfg = model.configuration.add()
    cfg.name = "two_gpus"
    cfg.num_devices = 2
    cfg.device.extend(["cuda:0", "cuda:1"])
    node = model.graph.node[0]
    dc = node.device_configurations.add()
    dc.configuration_id = "two_gpus"
    model.training_info.add()
    doc = Document.from_model(model)
    titles = {s.title: s for s in model_sections(doc)}
    row = titles["Multi-device configuration"].rows[0]
    assert row.key == "two_gpus" and "2 devices" in row.value and "cuda:1" in row.value
    assert "Training info" in titles
    node_rows = {r.key: r.value for s in node_sections(doc, "main", 0) for r in s.rows}
    assert node_rows["device configuration"].startswith("two_gpus")
