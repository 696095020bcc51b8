"""`onnxviz check`: exit codes, grouping of the human report, JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from onnxviz.cli.main import main

F = TensorProto.FLOAT


def _save(path: Path, nodes: list[onnx.NodeProto], outputs: tuple[str, ...] = ("y",)) -> Path:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info(o, F, [2]) for o in outputs],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    onnx.save(m, str(path))
    return path


def test_clean_model_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "ok.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r")])
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "no problems found" in out


def test_errors_exit_one_and_group_by_graph_and_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [
        helper.make_node("Relu", ["nope"], ["a"], name="first"),
        helper.make_node("Relux", ["a"], ["y"], name="second"),
    ]
    path = _save(tmp_path / "bad.onnx", nodes, outputs=("y", "missing"))
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(str(path)) and "errors" in out[0]
    assert "graph main" in out
    first, second = out.index("  node first"), out.index("  node second")
    assert any("G004" in line for line in out[first + 1 : second])
    assert any("O003" in line for line in out[second + 1 :])
    # The graph-level problem (undefined output) is listed before the nodes.
    g005 = next(i for i, line in enumerate(out) if "G005" in line)
    assert g005 < first
    assert any(line.strip().startswith("hint:") for line in out)


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "bad.onnx", [helper.make_node("Relu", ["nope"], ["y"], name="r")])
    assert main(["check", str(path), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, list) and data
    g004 = next(d for d in data if d["code"] == "G004")
    assert g004["severity"] == "error"
    assert set(g004["location"]) == {"graph_path", "node", "value", "attribute", "field"}
    assert g004["location"]["node"] == "r" and g004["location"]["value"] == "nope"
    assert g004["message"] and g004["spec"] and g004["hint"]


def test_unreadable_model_exits_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x00not a model at all\xff" * 3)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onnxviz:") and "Traceback" not in err
    assert main(["check", str(tmp_path / "absent.onnx")]) == 2


def test_warnings_only_exit_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="n"),
        helper.make_node("Relu", ["a"], ["y"], name="n"),
    ]
    path = _save(tmp_path / "dup.onnx", nodes)
    assert main(["check", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["code"] for d in data] == ["N003"]
    assert data[0]["severity"] == "warning"
