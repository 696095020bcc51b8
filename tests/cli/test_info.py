"""`onnxviz info`: right on real models, clear on bad ones."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.cli.main import main
from tests.model.builders import loop_model, with_external

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
WHEEL_MODELS = sorted(
    glob.glob(os.path.join(DATA, "light", "*.onnx"))
    + glob.glob(os.path.join(DATA, "simple", "*", "model.onnx"))
    + glob.glob(os.path.join(DATA, "pytorch-converted", "*", "model.onnx"))
    + glob.glob(os.path.join(DATA, "pytorch-operator", "*", "model.onnx"))
)


def _info(path: str, capsys) -> dict:
    assert main(["info", path, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _expected(model: onnx.ModelProto) -> dict:
    """An independent, recursive count (the product's walk is iterative)."""
    ops: Counter[str] = Counter()
    counts = {"nodes": 0, "subgraphs": 0}

    def walk(nodes) -> None:
        for node in nodes:
            counts["nodes"] += 1
            ops[
                node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
            ] += 1
            for attr in node.attribute:
                subs = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
                for g in subs:
                    counts["subgraphs"] += 1
                    walk(g.node)

    walk(model.graph.node)
    for fn in model.functions:
        walk(fn.node)
    return {
        "ir_version": model.ir_version,
        "opset_import": {o.domain: o.version for o in model.opset_import},
        "node_count": len(model.graph.node),
        "node_count_total": counts["nodes"],
        "subgraph_count": counts["subgraphs"],
        "op_types": dict(ops),
        "inputs": [i.name for i in model.graph.input],
        "outputs": [o.name for o in model.graph.output],
        "initializer_count": len(model.graph.initializer) + len(model.graph.sparse_initializer),
        "producer_name": model.producer_name,
        "graph_name": model.graph.name,
    }


@pytest.mark.parametrize("path", WHEEL_MODELS, ids=lambda p: os.path.relpath(p, DATA))
def test_info_matches_an_independent_count_on_wheel_models(path, capsys):
    info = _info(path, capsys)
    want = _expected(onnx.load(path, load_external_data=False))
    got = {k: info[k] for k in want if k not in ("inputs", "outputs")}
    got["inputs"] = [i["name"] for i in info["inputs"]]
    got["outputs"] = [o["name"] for o in info["outputs"]]
    assert got == want
    assert all(isinstance(i["type"], str) and i["type"] for i in info["inputs"])


def test_info_types_and_nested_graphs(tmp_path, capsys):
    path = tmp_path / "loop.onnx"
    path.write_bytes(loop_model().SerializeToString())
    info = _info(str(path), capsys)
    assert info["inputs"] == [
        {"name": "x", "type": "float32[2]"},
        {"name": "n", "type": "int64[]"},
        {"name": "flag", "type": "bool[]"},
    ]
    assert info["subgraph_count"] == 3 and info["node_count"] == 2
    assert info["node_count_total"] == 2 + 3 + 1 + 1
    assert info["op_types"]["Identity"] == 2


def test_info_functions_overloads_metadata_training_and_sparse(tmp_path, capsys):
    fn_a = helper.make_function(
        "lib",
        "Act",
        ["X"],
        ["Y"],
        [helper.make_node("Relu", ["X"], ["Y"])],
        [helper.make_opsetid("", 18)],
        attributes=[],
    )
    fn_b = helper.make_function(
        "lib",
        "Act",
        ["X"],
        ["Y"],
        [helper.make_node("Sigmoid", ["X"], ["Y"])],
        [helper.make_opsetid("", 18)],
    )
    fn_b.overload = "sigmoid"
    fn_b.attribute_proto.extend([helper.make_attribute("alpha", 1.0)])
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "sp"),
        numpy_helper.from_array(np.array([0, 3], np.int64), "sp_idx"),
        [4],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Act", ["x"], ["a"], domain="lib", name="act"),
            helper.make_node("Act", ["a"], ["b"], domain="lib", name="act2", overload="sigmoid"),
            helper.make_node("Add", ["b", "sp"], ["y"], name="add"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        sparse_initializer=[sparse],
    )
    graph.metadata_props.add(key="graph_key", value="1")
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("lib", 1)],
        functions=[fn_a, fn_b],
    )
    model.ir_version = 10
    helper.set_model_props(model, {"model_key": "2"})
    model.training_info.add().algorithm.CopyFrom(helper.make_graph([], "algo", [], []))
    path = tmp_path / "fn.onnx"
    path.write_bytes(model.SerializeToString())
    info = _info(str(path), capsys)
    assert info["functions"] == [
        {"domain": "lib", "name": "Act", "overload": ""},
        {"domain": "lib", "name": "Act", "overload": "sigmoid"},
    ]
    assert info["op_types"] == {"lib::Act": 2, "Add": 1, "Relu": 1, "Sigmoid": 1}
    assert info["node_count_total"] == 5
    assert info["initializer_count"] == 1 and info["sparse_initializer_count"] == 1
    assert info["metadata_props"] == {"model_key": "2"}
    assert info["training_info_count"] == 1


def test_info_every_element_type(tmp_path, capsys):
    names = [n for n, v in TensorProto.DataType.items() if v != TensorProto.UNDEFINED]
    inputs = [
        helper.make_tensor_value_info(f"in_{n.lower()}", getattr(TensorProto, n), [2])
        for n in names
    ]
    graph = helper.make_graph([], "types", inputs, [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    path = tmp_path / "types.onnx"
    path.write_bytes(model.SerializeToString())
    info = _info(str(path), capsys)
    types = [i["type"] for i in info["inputs"]]
    assert len(set(types)) == len(names)  # every element type has its own name
    assert "float32[2]" in types and "bfloat16[2]" in types and "int4[2]" in types


def test_info_lists_external_files(tmp_path, capsys):
    path = with_external(str(tmp_path / "m"))
    info = _info(path, capsys)
    assert info["external_data_files"] == ["weights.bin"]
    assert info["load_diagnostics"] == []


def test_info_human_output(capsys):
    path = os.path.join(DATA, "light", "light_resnet50.onnx")
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "ir_version" in out and "Conv" in out and "gpu_0/data_0: float32[1,3,224,224]" in out


def test_version_flag():
    proc = subprocess.run(
        [sys.executable, "-m", "onnxviz", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.startswith("onnxviz ")
