"""A model that crashes onnx's shape inference (onnx 1.23, LabelEncoder with an undefined
input and an untyped output) opens in the window, renders with --screenshot, and can be
made by an edit: onnx's C++ code runs only in check's worker process.  Before, the
window's own inference (present.typeinfo) ran in-process and the app died with SIGSEGV,
taking unsaved edits with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from onnxviz.model import commands as cmd


def _label_encoder(input_name: str) -> onnx.ModelProto:
    node = helper.make_node(
        "LabelEncoder",
        [input_name],
        ["y"],
        name="encode",
        domain="ai.onnx.ml",
        keys_strings=["a"],
        values_tensor=helper.make_tensor("v", TensorProto.INT32, [1], [1]),
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [1])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 4)]
    )
    model.ir_version = 10
    return model


def _crasher(path: Path) -> Path:
    model = _label_encoder("nowhere")
    model.graph.output[0].ClearField("type")
    onnx.save(model, path)
    return path


def test_a_model_that_crashes_inference_opens_in_the_window(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    window.files.open_path(str(_crasher(tmp_path / "crash.onnx")), background=False)
    window.edits.wait_validated()
    assert (
        window.session.doc is not None
        and window.session.doc.model.graph.node[0].op_type == "LabelEncoder"
    )
    codes = {d.code for d in window.edits.shown()}
    assert "G004" in codes  # the undefined input, located


@pytest.mark.slow
def test_screenshot_of_a_model_that_crashes_inference(tmp_path: Path) -> None:
    out = tmp_path / "shot.png"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "onnxviz",
            str(_crasher(tmp_path / "crash.onnx")),
            "--screenshot",
            str(out),
        ],
        capture_output=True,
        timeout=120,
        check=False,
        # The app's settings (recent files) go to a folder of the test's, not the user's.
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")},
    )
    assert done.returncode == 0, done.stderr.decode()[-500:]
    assert out.stat().st_size > 1000


def test_an_edit_that_makes_inference_crash_keeps_the_window_and_the_edit(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = _label_encoder("x")
    model.graph.output[0].ClearField("type")
    path = tmp_path / "fine.onnx"
    onnx.save(model, path)
    window.files.open_path(str(path), background=False)
    window.edits.wait_validated()
    # Remove the graph input the encoder reads: its input is now undefined, and onnx's
    # inference of the edited model crashes.
    assert window.edits.execute(cmd.RemoveGraphEntry("main", "input", "x"))
    window.edits.validate_pending()
    window.edits.wait_validated()
    window.edits.flush_views()
    assert len(window.session.doc.model.graph.input) == 0  # the edit is kept
    assert window.session.doc.can_undo
    assert "G004" in {d.code for d in window.edits.shown()}


def test_the_window_asks_before_saving_over_a_file_changed_on_disk(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "m.onnx"
    onnx.save(_label_encoder("x"), path)
    window.files.open_path(str(path), background=False)
    assert window.edits.execute(cmd.SetDocString("main", "my edit"))
    other = _label_encoder("x")
    other.doc_string = "another tool"
    onnx.save(other, path)
    window.prompter.overwrite = False
    window.files.save()
    assert window.prompter.asked == [("overwrite", "m.onnx")]
    assert onnx.load(path).doc_string == "another tool"
    assert window.session.doc.is_modified  # the edit is still there, unsaved
    window.prompter.overwrite = True
    window.files.save()
    assert onnx.load(path).graph.doc_string == "my edit" and not window.session.doc.is_modified
