"""The installed package carries its resources (not only a checkout does)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from importlib import resources

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bundled_examples_are_valid_models():
    examples = resources.files("onnxviz") / "resources" / "examples"
    names = sorted(p.name for p in examples.iterdir() if p.name.endswith(".onnx"))
    assert {"small_cnn.onnx", "loop_with_if.onnx", "with_functions.onnx"} <= set(names)
    for name in names:
        onnx.checker.check_model(
            onnx.load_from_string((examples / name).read_bytes()), full_check=True
        )


def test_wheel_contains_resources(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            ROOT,
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = [p for p in os.listdir(tmp_path) if p.endswith(".whl")]
    with zipfile.ZipFile(tmp_path / wheel) as zf:
        names = set(zf.namelist())
    assert "onnxviz/resources/examples/small_cnn.onnx" in names
    assert "onnxviz/cli/main.py" in names
    assert any(n.startswith("onnxviz-") and n.endswith("entry_points.txt") for n in names)
