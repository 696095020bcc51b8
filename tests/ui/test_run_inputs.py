"""The inputs dialog: rows per input, remembered choices per model, image inputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxviz.runtime.inputs import FeedRecipe, spec_of
from onnxviz.ui.run.inputs_dialog import (
    InputsDialog,
    build_feeds,
    decode_image,
    load_remembered,
    remember,
)

pytestmark = pytest.mark.qt


def _specs() -> list:
    return [
        spec_of(
            "image", helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 4, 6]).type
        ),
        spec_of("words", helper.make_tensor_value_info("words", TensorProto.STRING, [2]).type),
        spec_of("k", helper.make_tensor_value_info("k", TensorProto.INT64, []).type),
    ]


def test_dialog_rows_and_choices(qtbot) -> None:  # type: ignore[no-untyped-def]
    specs = _specs()
    dlg = InputsDialog(specs, {"N": 2}, {"k": FeedRecipe("ones")})
    qtbot.addWidget(dlg)
    assert [r.spec.name for r in dlg.rows] == ["image", "words", "k"]
    image_row, words_row, k_row = dlg.rows
    assert image_row.mode.findData("image") >= 0 and image_row.mode.findData("text") < 0
    assert words_row.mode.findData("text") >= 0
    assert k_row.mode.currentData() == "ones"
    words_row.mode.setCurrentIndex(words_row.mode.findData("text"))
    words_row.text.setText("hello|world")
    dlg.dims["N"].setValue(3)
    dims, recipes = dlg.choices()
    assert dims == {"N": 3}
    feeds = build_feeds(specs, dims, recipes)
    assert feeds["image"].shape == (3, 3, 4, 6) and feeds["image"].dtype == np.float32
    assert feeds["words"].tolist() == ["hello", "world"]
    assert feeds["k"] == 1


def test_choices_are_remembered_per_model() -> None:
    remember("/models/a.onnx", {"N": 4}, {"x": FeedRecipe("zeros")})
    dims, recipes = load_remembered("/models/a.onnx")
    assert dims == {"N": 4} and recipes["x"].mode == "zeros"
    assert load_remembered("/models/b.onnx") == ({}, {})


def test_image_file_becomes_a_normalized_tensor(qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtGui import QColor, QImage

    img = QImage(8, 4, QImage.Format.Format_RGB32)
    img.fill(QColor(255, 0, 0))
    path = str(tmp_path / "red.png")
    assert img.save(path)
    rgb = decode_image(path)
    assert rgb.shape == (4, 8, 3) and rgb[0, 0].tolist() == [255, 0, 0]
    feeds = build_feeds(_specs()[:1], {"N": 1}, {"image": FeedRecipe("image", path=path)})
    t = feeds["image"]
    assert t.shape == (1, 3, 4, 6)
    np.testing.assert_allclose(t[0, 0], (1 - 0.485) / 0.229, rtol=1e-5)
    np.testing.assert_allclose(t[0, 2], (0 - 0.406) / 0.225, rtol=1e-5)
