"""The small Python facade of docs/architecture.md §9, as a script author uses it."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort

import onnxviz
from onnxviz import bundled

EXAMPLES = str(bundled.root() / "examples")


def test_open_validate_run_edit_save(tmp_path):
    path = os.path.join(EXAMPLES, "loop_with_if.onnx")
    doc = onnxviz.open_model(path)
    assert doc.diagnostics == []
    assert [d for d in onnxviz.validate(doc) if d.severity.value == "error"] == []
    feeds = {"x": np.array([1.0, 2.0, 3.0], np.float32), "trip_count": np.array(5, np.int64)}
    ours = onnxviz.Session(doc).run(feeds)
    (ref,) = ort.InferenceSession(path).run(None, feeds)
    np.testing.assert_allclose(ours["total"], ref)

    doc.rename_value("x", "values")  # used inside the Loop body and its If branch
    doc.set_attribute("iter_to_float", "to", 11, graph="main/body:accumulate")  # double
    errors = [d for d in onnxviz.validate(doc) if d.severity.value == "error"]
    assert errors and {d.location.node for d in errors} <= {
        "scale",
        "maybe_add",
        "then_add",
        "accumulate",
    }
    assert any(d.location.node == "scale" for d in errors)  # float32 * float64
    doc.set_attribute("iter_to_float", "to", 1, graph="main/body:accumulate")
    out = tmp_path / "edited.onnx"
    doc.save(str(out))
    reopened = onnxviz.open_model(str(out))
    assert [d for d in onnxviz.validate(reopened) if d.severity.value == "error"] == []
    assert reopened.model.graph.input[0].name == "values"
    doc.undo()  # both edits of 'to' merged into one step
    doc.undo()
    assert doc.model.graph.input[0].name == "x"
    assert not doc.can_undo
