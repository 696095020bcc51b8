"""What `onnxviz check` and `onnxviz info` import: a verb imports what it needs, and
start-up is part of what a user waits for (issue 19's floor).  onnxruntime, scipy and
Qt cost hundreds of milliseconds and neither verb uses them (the onnxruntime target reads
onnxruntime's schemas in the checker's worker process, not in the CLI's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from onnx import TensorProto, helper, save

HEAVY = ("onnxruntime", "scipy", "PySide6", "onnxviz.ui", "onnxviz.runtime", "onnxviz.layout")


def _model(tmp_path: Path) -> str:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    save(model, str(path))
    return str(path)


def _imported(argv: list[str]) -> tuple[int, list[str]]:
    code = (
        "import json, sys\n"
        "from onnxviz.cli.main import main\n"
        f"rc = main({argv!r})\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} "
        f"or m.startswith({HEAVY!r}))\n"
        "sys.stderr.write(json.dumps([rc, heavy]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    rc, heavy = json.loads(out.stderr.strip().splitlines()[-1])
    return rc, heavy


@pytest.mark.parametrize(
    "verb", [["info"], ["check"], ["check", "--target", "onnxruntime"], ["check", "--json"]]
)
def test_check_and_info_import_no_engine_no_qt_no_scipy(tmp_path: Path, verb: list[str]) -> None:
    rc, heavy = _imported([*verb, _model(tmp_path)])
    assert rc == 0
    assert heavy == []


def test_the_check_worker_is_started_before_onnx_is_imported(tmp_path: Path) -> None:
    """`onnxviz check` starts its workers first: when they start, the CLI has not yet
    imported onnx (their start-up overlaps its own)."""
    code = (
        "import sys\n"
        "from onnxviz.check import worker\n"
        "seen = []\n"
        "start = worker.InferenceWorker.start\n"
        "def spy(self):\n"
        "    seen.append('onnx' in sys.modules)\n"
        "    return start(self)\n"
        "worker.InferenceWorker.start = spy\n"
        "from onnxviz.cli.main import main\n"
        f"rc = main(['check', {_model(tmp_path)!r}])\n"
        "sys.stderr.write(repr((rc, seen[:2])))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stderr.strip().splitlines()[-1] == "(0, [False, False])"


def test_the_onnxruntime_target_asks_for_schemas_before_onnx_is_imported(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from onnxviz.check import worker\n"
        "seen = []\n"
        "begin = worker.InferenceWorker.begin\n"
        "def spy(self, data, kind='infer', base_dir=None):\n"
        "    seen.append((kind, 'onnx' in sys.modules))\n"
        "    return begin(self, data, kind, base_dir)\n"
        "worker.InferenceWorker.begin = spy\n"
        "from onnxviz.cli.main import main\n"
        f"rc = main(['check', '--target', 'onnxruntime', {_model(tmp_path)!r}])\n"
        "sys.stderr.write(repr((rc, [s for s in seen if s[0] == 'onnxruntime-schemas'])))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stderr.strip().splitlines()[-1] == "(0, [('onnxruntime-schemas', False)])"
