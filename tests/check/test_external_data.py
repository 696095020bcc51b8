"""Inference and the checker see a model with external data as the loader does: the data
next to the model file, wherever the current directory is, big tensors never read.

Before, shape inference reported I001 "Cannot parse data from external tensors" from any
folder, and the checker C001 "not regular file" whenever the current directory was not
the model's folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.check import validate
from onnxviz.model.document import Document

F = TensorProto.FLOAT


def _save_with_external(folder: Path) -> Path:
    """Gather from a 3000x8 external table, then Reshape by an external (small) shape
    tensor: inference must read the small one to know the output shape."""
    table = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((3000, 8)).astype(np.float32), "table"
    )
    shape = numpy_helper.from_array(np.array([-1, 4, 2], np.int64), "shape")
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["rows"], name="gather"),
            helper.make_node("Reshape", ["rows", "shape"], ["y"], name="reshape"),
        ],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [5])],
        [helper.make_tensor_value_info("y", F, [5, 4, 2])],
        initializer=[table, shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "model.onnx"
    onnx.save(
        model,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    return path


@pytest.mark.parametrize("cwd", ["model folder", "elsewhere"])
def test_external_data_gives_no_false_errors_from_any_folder(
    tmp_path: Path, cwd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _save_with_external(_mk(tmp_path / "m"))
    monkeypatch.chdir(path.parent if cwd == "model folder" else _mk(tmp_path / "other"))
    doc = Document.open(str(path))
    diags = validate(doc)
    errors = [d for d in diags if d.severity.name == "ERROR"]
    assert errors == [], [f"{d.code} {d.message}" for d in errors]
    assert not [d for d in diags if d.code in ("I001", "I002", "C001", "C002")]


def test_small_external_tensors_feed_inference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Reshape's shape lives in the data file: the inferred output shape proves
    inference read it (from the model's folder, not the current directory)."""
    from onnxviz.check.inference import infer_types

    path = _save_with_external(_mk(tmp_path / "m"))
    monkeypatch.chdir(tmp_path)
    doc = Document.open(str(path))
    types = infer_types(doc)
    rows, y = types[("main", "rows")], types[("main", "y")]
    assert [d.dim_value for d in rows.tensor_type.shape.dim] == [5, 8]
    assert [d.dim_value for d in y.tensor_type.shape.dim] == [5, 4, 2]


def test_a_missing_external_file_is_still_an_error(tmp_path: Path) -> None:
    path = _save_with_external(_mk(tmp_path / "m"))
    (path.parent / "weights.bin").unlink()
    diags = validate(Document.open(str(path)))
    missing = [d for d in diags if d.code == "D101"]
    assert missing and all(d.severity.name == "ERROR" for d in missing)
    assert {d.location.value for d in missing} == {"table", "shape"}


def _mk(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder
