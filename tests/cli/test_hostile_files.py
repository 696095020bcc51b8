"""Hostile files: one clear sentence and exit 2, or open with a located diagnostic;
within a second, in bounded memory, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxviz.cli.main import _build_parser, main
from tests.model.builders import deeply_nested_model_bytes, simple_model, with_external


def _bytes_cases(tmp_path) -> dict[str, bytes]:
    good = simple_model().SerializeToString()
    rng = np.random.default_rng(1)
    return {
        "empty": b"",
        "truncated": good[: len(good) // 2],
        "random": rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "text": b"This is a README, not a model.\n" * 20,
        "tensor_message": helper.make_tensor(
            "t", TensorProto.FLOAT, [2], [1.0, 2.0]
        ).SerializeToString(),
        "deep_200": deeply_nested_model_bytes(200),
    }


# Import every subcommand once, so timings below measure the work, not first imports.
_build_parser()

# Hostile files must fail fast: these take milliseconds, and a file that made the loader
# allocate what it claims or walk 10^12 elements would take minutes.  The bound leaves
# room for a busy 2-core machine; memory is the sharp check (tracemalloc peaks below).
FAST_S = 5.0


def _run(
    argv: list[str], capsys, *, measure_memory: bool = False
) -> tuple[int, str, str, float, int]:
    start = time.perf_counter()
    code = main(argv)
    elapsed = time.perf_counter() - start
    out, err = capsys.readouterr()
    peak = 0
    if measure_memory:  # a second run under tracemalloc (which slows Python down)
        tracemalloc.start()
        main(argv)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        capsys.readouterr()
    return code, out, err, elapsed, peak


@pytest.mark.parametrize(
    "case", ["empty", "truncated", "random", "text", "tensor_message", "deep_200"]
)
def test_unreadable_files_give_one_sentence_and_exit_2(tmp_path, capsys, case):
    path = tmp_path / f"{case}.onnx"
    path.write_bytes(_bytes_cases(tmp_path)[case])
    code, out, err, elapsed, peak = _run(["info", str(path)], capsys, measure_memory=True)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0]
    assert "Traceback" not in err
    assert elapsed < FAST_S
    assert peak < 50 * 2**20


def test_missing_file_and_folder(tmp_path, capsys):
    code, _, err, _, _ = _run(["info", str(tmp_path / "nope.onnx")], capsys)
    assert code == 2 and "no such file" in err
    code, _, err, _, _ = _run(["info", str(tmp_path)], capsys)
    assert code == 2 and "folder" in err


@pytest.mark.parametrize(
    ("location", "code"),
    [("../../etc/passwd", "D102"), ("/etc/passwd", "D102"), ("missing.bin", "D101")],
)
def test_bad_external_data_opens_with_a_located_diagnostic(tmp_path, capsys, location, code):
    path = with_external(str(tmp_path / "m"), location=location)
    rc, out, _, elapsed, _ = _run(["info", path, "--json"], capsys)
    assert rc == 0 and elapsed < FAST_S
    diags = json.loads(out)["load_diagnostics"]
    assert [d["code"] for d in diags] == [code]
    assert diags[0]["location"]["value"] == "w"


def test_offset_past_end(tmp_path, capsys):
    path = with_external(str(tmp_path / "m"))
    model = onnx.load(path, load_external_data=False)
    model.graph.initializer[0].external_data[1].value = str(10**15)
    with open(path, "wb") as fh:
        fh.write(model.SerializeToString())
    rc, out, _, _, _ = _run(["info", path, "--json"], capsys)
    assert rc == 0 and [d["code"] for d in json.loads(out)["load_diagnostics"]] == ["D103"]


def test_dims_claiming_10_to_the_12_elements_are_not_allocated(tmp_path, capsys):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1_000_000, 1_000_000])
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [t],
    )
    path = tmp_path / "huge.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    rc, out, _, elapsed, peak = _run(["info", str(path), "--json"], capsys, measure_memory=True)
    assert rc == 0 and json.loads(out)["initializer_count"] == 1
    assert elapsed < FAST_S and peak < 50 * 2**20


def test_node_with_100k_inputs(tmp_path, capsys):
    node = helper.make_node("Concat", ["x"] * 100_000, ["y"], axis=0)
    graph = helper.make_graph(
        [node],
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [100_000])],
    )
    path = tmp_path / "wide.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    rc, out, _, elapsed, _ = _run(["info", str(path), "--json"], capsys)
    assert rc == 0 and json.loads(out)["op_types"] == {"Concat": 1}
    assert elapsed < FAST_S


def test_no_traceback_end_to_end(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x08\x96\x01garbage" * 10)
    proc = subprocess.run(
        [sys.executable, "-m", "onnxviz", "info", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert os.path.basename(str(path)) in proc.stderr
