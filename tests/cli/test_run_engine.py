"""`onnxviz run --engine onnxruntime`, ``--profile``, ``--chunk-mb`` and
``--first-divergence`` (cli/run_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.cli.main import main
from onnxviz.model.document import Document
from onnxviz.runtime import ort_engine
from onnxviz.runtime.session import Session

pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT
WIDTH = 2048  # floats per value: 8 KiB


def _model(folder: Path, *, external: bool = True, layers: int = 6) -> Path:
    """x -> (MatMul W_i, Tanh) x layers; weights in weights.bin beside the model."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    for i in range(layers):
        w = (rng.standard_normal((WIDTH // 32, WIDTH // 32)) * 0.2).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"W{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"W{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"t{i}"], name=f"tanh{i}"))
        prev = f"t{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [32, WIDTH // 32])],
        [helper.make_tensor_value_info(prev, F, [32, WIDTH // 32])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "m.onnx"
    if external:
        onnx.save(model, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    else:
        onnx.save(model, path)
    return path


def _run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["run", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _x(tmp_path: Path) -> Path:
    x = np.random.default_rng(5).standard_normal((32, WIDTH // 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return tmp_path / "x.npy"


@pytest.mark.numeric
def test_onnxruntime_engine_from_another_folder_matches_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _model(tmp_path / "model")
    x = _x(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = tmp_path / "out"
    report = _run_json(
        [str(path), "--input", f"x={x}", "--engine", "onnxruntime", "--output-dir", str(out)],
        capsys,
    )
    assert report["engine"]["name"] == "onnxruntime"
    assert report["engine"]["providers"][-1] == "CPUExecutionProvider"
    theirs = np.load(out / "t5.npy")
    ours = Session(Document.open(str(path))).run({"x": np.load(x)})["t5"]
    np.testing.assert_allclose(theirs, ours, rtol=1e-4, atol=1e-5)
    # --compare onnxruntime from the same folder (issue 19: it used to fail here)
    report = _run_json(
        [str(path), "--input", f"x={x}", "--compare", "onnxruntime", "--intermediates"], capsys
    )
    assert report["compare"]["outputs"][0]["max_abs"] < 1e-4
    assert len(report["compare"]["intermediates"]) == 11  # every value but the output


def test_intermediates_are_fetched_in_chunks_under_chunk_mb(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _model(tmp_path / "model", external=False)
    x = _x(tmp_path)
    out = tmp_path / "out"
    budget_mb = 3 * WIDTH * 4 / 2**20  # three 8 KiB values per run
    report = _run_json(
        [
            str(path),
            "--input",
            f"x={x}",
            "--engine",
            "onnxruntime",
            "--intermediates",
            "--chunk-mb",
            str(budget_mb),
            "--output-dir",
            str(out),
        ],
        capsys,
    )
    chunks = report["chunks"]
    assert len(chunks) == 4  # 12 values, 3 a run
    assert all(c["actual_bytes"] <= budget_mb * 2**20 for c in chunks)
    names = [e["name"] for e in report["intermediates"]]
    assert names == [n for i in range(6) for n in (f"m{i}", f"t{i}")][:-1]
    ours = Session(Document.open(str(path))).run({"x": np.load(x)}, fetch=names)
    for entry in report["intermediates"]:
        got = np.load(entry["file"])
        np.testing.assert_allclose(got, ours[entry["name"]], rtol=1e-4, atol=1e-5)


def test_profile_names_every_node_by_our_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _model(tmp_path / "model", layers=3)
    x = _x(tmp_path)
    report = _run_json(
        [str(path), "--input", f"x={x}", "--engine", "onnxruntime", "--profile"], capsys
    )
    rows = {r["node"]: r for r in report["node_times"]}
    # MatMuls are unnamed (#0, #2, #4 in our labels); the Tanh nodes are named
    assert set(rows) == {
        "main::#0",
        "main::tanh0",
        "main::#2",
        "main::tanh1",
        "main::#4",
        "main::tanh2",
    }
    assert rows["main::#2"]["op_type"] == "MatMul" and rows["main::tanh2"]["calls"] == 1
    seconds = [r["seconds"] for r in report["node_times"]]
    assert seconds == sorted(seconds, reverse=True)
    # the human report shows the slowest nodes too
    assert (
        main(["run", str(path), "--input", f"x={x}", "--engine", "onnxruntime", "--profile"]) == 0
    )
    assert "slowest nodes" in capsys.readouterr().out


def test_first_divergence_names_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """onnxruntime's values are perturbed from t2 on (as a kernel that differs would):
    the search names tanh2, whose input m2 agrees."""
    path = _model(tmp_path / "model")
    x = _x(tmp_path)
    real = ort_engine.fetch_values
    late = {"t2", "m3", "t3", "m4", "t4", "m5", "t5"}

    def perturbed(doc: Any, feeds: Any, names: list[str], options: Any = None) -> dict[str, Any]:
        got = real(doc, feeds, names, options)
        return {k: v + 0.5 if k in late else v for k, v in got.items()}

    monkeypatch.setattr(ort_engine, "fetch_values", perturbed)
    report = _run_json([str(path), "--input", f"x={x}", "--first-divergence"], capsys)
    found = report["first_divergence"]
    assert found["node"] == "main::tanh2" and found["op_type"] == "Tanh"
    assert found["values"][0]["name"] == "t2" and found["values"][0]["max_abs"] >= 0.4
    assert found["probes"] <= 6


@pytest.mark.numeric
def test_first_divergence_alone_finds_none_when_the_engines_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _model(tmp_path / "model", layers=2)
    x = _x(tmp_path)
    report = _run_json(
        [str(path), "--input", f"x={x}", "--engine", "onnxruntime", "--first-divergence"], capsys
    )
    assert report["first_divergence"]["node"] is None


def test_engine_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _model(tmp_path / "model", layers=1)
    x = _x(tmp_path)
    base = [str(path), "--input", f"x={x}", "--engine", "onnxruntime"]
    assert main(["run", *base, "--compare", "onnxruntime"]) == 2
    assert "needs --engine onnxviz" in capsys.readouterr().err
    assert main(["run", *base, "--intermediates", "--chunk-mb", "0"]) == 2
    assert "--chunk-mb must be positive" in capsys.readouterr().err
