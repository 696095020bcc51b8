"""The run panel's engine choice (ui/run/engine_choice.py): with onnxruntime, Run fills
the value table, the inspector, the profile table and the heat colouring."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.runtime.engine_models import make, vi
from tests.ui.tables import column

pytestmark = pytest.mark.qt
pytest.importorskip("onnxruntime")

X = np.array([1.0, -2.0, 3.0], np.float32)
W = np.array([1.0, -5.0, 0.5], np.float32)


def _model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Add", ["x", "w"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r"]),  # unnamed: "#1" in our addresses
        helper.make_node("Mul", ["r", "r"], ["y"], name="mul"),
    ]
    w = numpy_helper.from_array(W, "w")
    return make(
        nodes,
        [vi("x", TensorProto.FLOAT, [3])],
        [vi("y", TensorProto.FLOAT, [3])],
        initializers=[w],
    )


def _open(window, tmp_path):  # type: ignore[no-untyped-def]
    path = str(tmp_path / "m.onnx")
    onnx.save(_model(), path)
    panel = window.run_panel
    window.files.open_path(path, background=False)
    window.wait_idle()
    return panel


def test_onnxruntime_run_fills_values_profile_and_heat(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    panel = _open(window, tmp_path)
    assert panel.engine.engine() == "onnxviz"
    panel.engine.set_engine("onnxruntime")
    assert panel.run({"x": X})
    assert panel.ort.wait(30)
    window.wait_idle()
    outcome = panel.ort_outcome
    assert outcome is not None and not outcome.dropped
    s = X + W
    np.testing.assert_allclose(outcome.values["s"], s)
    np.testing.assert_allclose(outcome.values["y"], np.maximum(s, 0) ** 2)
    # the value table lists what onnxruntime computed
    assert set(column(panel.widget.values)) == {"s", "r", "y"}
    # the profile table names our addresses, the unnamed node included
    assert set(column(panel.widget.profile)) == {"main::add", "main::#1", "main::mul"}
    assert "onnxruntime" in panel.widget.status.text()
    # the inspector opens on its values
    assert panel.inspect_value("main", "r")
    # heat colouring from onnxruntime's profile
    panel.widget.heat.setChecked(True)
    marks = panel.overlay.marks
    assert all(marks[("main", i)].fill is not None for i in range(3))
    assert all(marks[("main", i)].executed for i in range(3))
    assert all(marks[("main", i)].note.endswith("ms") for i in range(3))
    # switching back to our engine runs the stepping session again
    panel.engine.set_engine("onnxviz")
    assert panel.run({"x": X})
    assert panel.controller.wait(30)
    assert panel.ort_outcome is None
    assert panel.controller.session.state == "finished"


def test_values_over_the_memory_cap_are_dropped_not_kept(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.runtime.ort_engine import ModelInFolder
    from onnxviz.ui.run.engine_choice import run_onnxruntime

    source = ModelInFolder(_model(), None)
    outcome = run_onnxruntime(source, {"x": X}, memory_cap=12 + 12, chunk_bytes=12)
    # the output (12 bytes) and one 12-byte intermediate fit; the other does not
    assert set(outcome.values) == {"y", "s"}
    assert outcome.dropped == ["r"]
    assert outcome.chunks == 2
    assert "not kept" in outcome.status()


def test_the_choice_is_remembered(window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onnxviz.ui.run.engine_choice import EngineChoice

    first = EngineChoice()
    first.set_engine("onnxruntime")
    assert EngineChoice().engine() == "onnxruntime"
    first.set_engine("onnxviz")
    assert EngineChoice().engine() == "onnxviz"
