"""`onnxviz run`: inputs from files or random, outputs written, JSON report, compare."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.cli.main import main
from onnxviz.runtime.session import Session

F = TensorProto.FLOAT


def _model(path: Path) -> Path:
    w = numpy_helper.from_array(np.arange(3, dtype=np.float32), "w")
    nodes = [
        helper.make_node("Add", ["x", "w"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y/out"], name="relu"),
        helper.make_node("SequenceConstruct", ["s", "s"], ["seq"], name="seq"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, ["N", 3])],
        [
            helper.make_tensor_value_info("y/out", F, ["N", 3]),
            helper.make_tensor_sequence_value_info("seq", F, None),
        ],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    out = path / "m.onnx"
    onnx.save(model, out)
    return out


def test_inputs_from_npy_and_outputs_written(tmp_path: Path) -> None:
    model = _model(tmp_path)
    x = np.array([[-5.0, 1.0, 2.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    out_dir = tmp_path / "out"
    rc = main(
        ["run", str(model), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(out_dir)]
    )
    assert rc == 0
    y = np.load(out_dir / "y_out.npy")  # '/' made safe for the file system
    expected = Session(onnx.load(model)).run({"x": x})["y/out"]
    np.testing.assert_array_equal(y, expected)
    seq = json.loads((out_dir / "seq.json").read_text())
    assert len(seq) == 2 and seq[0]["shape"] == [1, 3] and seq[0]["dtype"] == "float32"


def test_npz_and_pb_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _model(tmp_path)
    x = np.ones((2, 3), np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    (tmp_path / "x.pb").write_bytes(numpy_helper.from_array(x * 2, "x").SerializeToString())
    assert main(["run", str(model), "--input", str(tmp_path / "in.npz"), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["outputs"][0]["type"] == "float32[2,3]" and first["outputs"][0]["max"] == 3.0
    assert main(["run", str(model), "--input", f"x={tmp_path / 'x.pb'}", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["outputs"][0]["max"] == 4.0


def test_random_inputs_with_symbolic_dim_and_json_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _model(tmp_path)
    assert main(["run", str(model), "--random-inputs", "--dim", "N=4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"][0]["type"] == "float32[4,3]"
    assert report["outputs"][0]["type"] == "float32[4,3]"
    times = {t["node"]: t for t in report["node_times"]}
    assert set(times) == {"main::add", "main::relu", "main::seq"}
    assert all(t["calls"] == 1 and t["seconds"] >= 0 for t in times.values())


def test_compare_with_onnxruntime_per_output_and_intermediate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Tanh", ["h"], ["t"], name="tanh"),
        helper.make_node("Softmax", ["t"], ["y"], name="sm", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [2, 4])],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "c.onnx"
    onnx.save(model, path)
    rc = main(
        [
            "run",
            str(path),
            "--random-inputs",
            "--intermediates",
            "--compare",
            "onnxruntime",
            "--json",
        ]
    )
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    cmp = report["compare"]
    assert [e["name"] for e in cmp["outputs"]] == ["y"]
    assert cmp["outputs"][0]["max_abs"] < 1e-5
    assert {e["name"] for e in cmp["intermediates"]} == {"h", "t"}
    assert all(e["max_rel"] < 1e-4 for e in cmp["intermediates"])


def test_missing_inputs_is_one_clear_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _model(tmp_path)
    assert main(["run", str(model)]) == 2
    err = capsys.readouterr().err
    assert "--random-inputs" in err and "Traceback" not in err
    assert main(["run", str(model), "--input", f"x={tmp_path / 'nope.npy'}"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_kernel_failure_names_the_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _model(tmp_path)
    np.save(tmp_path / "bad.npy", np.ones((2, 5), np.float32))
    assert main(["run", str(model), "--input", f"x={tmp_path / 'bad.npy'}"]) == 2
    err = capsys.readouterr().err
    assert "Add node 'add' failed" in err and "float32[2,5]" in err


@pytest.mark.parametrize("verb", ["run", "info", "check"])
def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(tmp_path: Path, verb: str) -> None:
    """`onnxviz run ... --json | head -c 1500` ended in "internal error: BrokenPipeError";
    a closed pipe is a normal end for a command-line tool."""
    import subprocess
    import sys

    nodes, prev = [], "x"
    for i in range(3000):  # per-node times and op counts: far more than a pipe holds
        nodes.append(helper.make_node("Relu", [prev], [f"v{i}"], name=f"relu_{i}"))
        prev = f"v{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [4])],
        [helper.make_tensor_value_info(prev, F, [4])],
        # one value_info per value: check --json and info --json say a lot about them
        value_info=[
            helper.make_tensor_value_info(f"v{i}", TensorProto.INT64, [4]) for i in range(3000)
        ],
    )
    path = tmp_path / "long.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    extra = {"run": ["--random-inputs", "--json"], "info": ["--json"], "check": ["--json"]}[verb]
    proc = subprocess.Popen(
        [sys.executable, "-m", "onnxviz", verb, str(path), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    head = proc.stdout.read(1500)
    proc.stdout.close()  # the reader goes away, as `head -c 1500` does
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert head.lstrip().startswith((b"{", b"["))
    assert err == "" and code in (0, 1), (code, err[-400:])
