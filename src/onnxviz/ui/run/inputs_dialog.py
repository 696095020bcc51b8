"""The inputs dialog: one row per graph input with its type, a way to fill it, and the
sizes of symbolic dims.  The last choices are remembered per model (QSettings).

Images are decoded here with QImage (PIL is not a dependency) and handed to
`runtime.inputs` as ``H x W x 3`` uint8 arrays.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
from PySide6.QtGui import QImage
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from onnxviz.errors import LoadError
from onnxviz.runtime.inputs import (
    DISTRIBUTIONS,
    IMAGE_PRESETS,
    FeedRecipe,
    InputSpec,
    build_feed,
    default_range,
    recipe_from_dict,
    recipe_to_dict,
    symbolic_dims,
)
from onnxviz.ui import settings
from onnxviz.ui.prompter import Prompter

MODE_LABELS = {
    "random": "Random",
    "zeros": "Zeros",
    "ones": "Ones",
    "file": "From file (.npy/.npz/.pb)",
    "image": "From image",
    "text": "Text",
}


def decode_image(path: str) -> np.ndarray:
    """An image file as an ``H x W x 3`` uint8 RGB array."""
    img = QImage(path)
    if img.isNull():
        raise LoadError(f"cannot read image '{path}'", file=path)
    img = img.convertToFormat(QImage.Format.Format_RGB888)
    w, h, stride = img.width(), img.height(), img.bytesPerLine()
    buf = np.frombuffer(img.constBits(), dtype=np.uint8, count=stride * h)
    return buf.reshape(h, stride)[:, : w * 3].reshape(h, w, 3).copy()


def settings_key(model_path: str | None) -> str:
    return "run_inputs/" + (os.path.abspath(model_path) if model_path else "untitled").replace(
        "/", "|"
    )


def load_remembered(model_path: str | None) -> tuple[dict[str, int], dict[str, FeedRecipe]]:
    raw = settings.load_str(settings_key(model_path), "")
    if not raw:
        return {}, {}
    try:
        data = json.loads(raw)
        dims = {str(k): int(v) for k, v in data.get("dims", {}).items()}
        recipes = {str(k): recipe_from_dict(v) for k, v in data.get("recipes", {}).items()}
    except (ValueError, TypeError, AttributeError):
        return {}, {}
    return dims, recipes


def remember(model_path: str | None, dims: dict[str, int], recipes: dict[str, FeedRecipe]) -> None:
    data = {"dims": dims, "recipes": {k: recipe_to_dict(r) for k, r in recipes.items()}}
    settings.save_value(settings_key(model_path), json.dumps(data))


def build_feeds(
    specs: list[InputSpec], dims: dict[str, int], recipes: dict[str, FeedRecipe], seed: int = 0
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    feeds: dict[str, Any] = {}
    for spec in specs:
        recipe = recipes.get(spec.name, FeedRecipe())
        image = decode_image(recipe.path) if recipe.mode == "image" else None
        feeds[spec.name] = build_feed(spec, recipe, dims, rng, image=image)
    return feeds


class InputRow:
    """The widgets of one input."""

    def __init__(
        self,
        spec: InputSpec,
        recipe: FeedRecipe,
        grid: QGridLayout,
        row: int,
        prompter: Prompter | None = None,
    ) -> None:
        self.spec = spec
        self.prompter = prompter or Prompter()  # asks for the file of "from file"
        self.mode = QComboBox()
        modes = ["random", "zeros", "ones", "file"]
        if spec.kind == "tensor" and spec.dtype is not None and spec.dtype.kind == "O":
            modes.append("text")
        elif spec.kind == "tensor" and spec.shape is not None and len(spec.shape) == 4:
            modes.append("image")
        for m in modes:
            self.mode.addItem(MODE_LABELS[m], m)
        self.stack = QStackedWidget()
        lo, hi = default_range(spec.dtype if spec.dtype is not None else np.dtype(np.float32))
        # random
        rnd = QWidget()
        rl = QHBoxLayout(rnd)
        rl.setContentsMargins(0, 0, 0, 0)
        self.low = QDoubleSpinBox()
        self.high = QDoubleSpinBox()
        for box, v, saved in ((self.low, lo, recipe.low), (self.high, hi, recipe.high)):
            box.setRange(-1e9, 1e9)
            box.setDecimals(4)
            box.setValue(v if saved is None else saved)
        self.dist = QComboBox()
        self.dist.addItems(list(DISTRIBUTIONS))
        self.dist.setCurrentText(recipe.distribution)
        for w in (QLabel("from"), self.low, QLabel("to"), self.high, self.dist):
            rl.addWidget(w)
        self.pages: dict[str, QWidget] = {"random": rnd, "zeros": QLabel(""), "ones": QLabel("")}
        # file / image
        self.path = QLineEdit(recipe.path)
        self.browse_button = browse = QPushButton("…")
        browse.clicked.connect(self._browse)
        fw = QWidget()
        fl = QHBoxLayout(fw)
        fl.setContentsMargins(0, 0, 0, 0)
        fl.addWidget(self.path, 1)
        fl.addWidget(browse)
        self.layout_box = QComboBox()
        self.layout_box.addItems(["auto", "NCHW", "NHWC"])
        self.layout_box.setCurrentText(recipe.layout)
        self.preset = QComboBox()
        self.preset.addItems(list(IMAGE_PRESETS))
        self.preset.setCurrentText(recipe.preset)
        fl.addWidget(self.layout_box)
        fl.addWidget(self.preset)
        self.pages["file"] = fw
        self.pages["image"] = fw
        self.text = QLineEdit(recipe.text)
        self.text.setPlaceholderText("strings separated by |")
        self.pages["text"] = self.text
        for page in {id(p): p for p in self.pages.values()}.values():
            self.stack.addWidget(page)
        self.mode.currentIndexChanged.connect(self._mode_changed)
        index = self.mode.findData(recipe.mode)
        self.mode.setCurrentIndex(max(index, 0))
        self._mode_changed()
        grid.addWidget(QLabel(f"<b>{spec.name}</b>"), row, 0)
        grid.addWidget(QLabel(spec.type_text), row, 1)
        grid.addWidget(self.mode, row, 2)
        grid.addWidget(self.stack, row, 3)

    def _mode_changed(self) -> None:
        mode = self.mode.currentData()
        self.stack.setCurrentWidget(self.pages[mode])
        image = mode == "image"
        self.layout_box.setVisible(image)
        self.preset.setVisible(image)

    def _browse(self) -> None:
        image = self.mode.currentData() == "image"
        pattern = "Images (*.png *.jpg *.jpeg *.bmp)" if image else "Arrays (*.npy *.npz *.pb)"
        path = self.prompter.open_file(f"Value for {self.spec.name}", "", pattern)
        if path:
            self.path.setText(path)

    def recipe(self) -> FeedRecipe:
        return FeedRecipe(
            mode=self.mode.currentData(),
            low=self.low.value(),
            high=self.high.value(),
            distribution=self.dist.currentText(),
            path=self.path.text(),
            text=self.text.text(),
            layout=self.layout_box.currentText(),
            preset=self.preset.currentText(),
        )


class InputsDialog(QDialog):
    def __init__(
        self,
        specs: list[InputSpec],
        dims: dict[str, int],
        recipes: dict[str, FeedRecipe],
        parent: QWidget | None = None,
        prompter: Prompter | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Run inputs")
        self.specs = specs
        lay = QVBoxLayout(self)
        body = QWidget()
        grid = QGridLayout(body)
        for c, h in enumerate(("input", "type", "value", "")):
            grid.addWidget(QLabel(f"<i>{h}</i>"), 0, c)
        self.rows = [
            InputRow(s, recipes.get(s.name, FeedRecipe()), grid, i + 1, prompter)
            for i, s in enumerate(specs)
        ]
        grid.setRowStretch(len(specs) + 1, 1)
        grid.setColumnStretch(3, 1)
        scroll = QScrollArea()
        scroll.setWidget(body)
        scroll.setWidgetResizable(True)
        lay.addWidget(scroll, 1)
        self.dims: dict[str, QSpinBox] = {}
        names = symbolic_dims(specs)
        if names:
            box = QGroupBox("Symbolic dimensions")
            form = QFormLayout(box)
            for n in names:
                spin = QSpinBox()
                spin.setRange(0, 1_000_000)
                spin.setValue(dims.get(n, 1))
                form.addRow(n, spin)
                self.dims[n] = spin
            lay.addWidget(box)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Run")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.resize(1040, min(640, 200 + 40 * len(specs)))

    def choices(self) -> tuple[dict[str, int], dict[str, FeedRecipe]]:
        dims = {n: s.value() for n, s in self.dims.items()}
        return dims, {r.spec.name: r.recipe() for r in self.rows}
