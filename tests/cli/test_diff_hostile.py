"""`onnxviz diff` on the committed exporter corpus and fuzz findings: a model against
itself is equal, against another model different, and nothing ever ends in an internal
error (names that are not UTF-8, dangling inputs, broken tensors included)."""

from __future__ import annotations

import glob
import os

import onnx
import pytest

from onnxviz.cli.main import main
from tests.model import diff_corpus as C

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = sorted(glob.glob(os.path.join(HERE, "data", "**", "*.onnx"), recursive=True))
OTHER = os.path.join(HERE, "data", "exporters", "onnxsim_cnn.onnx")


@pytest.mark.parametrize("path", MODELS, ids=os.path.basename)
def test_model_against_itself_and_another(path: str, capsys) -> None:
    assert main(["diff", path, path, "--json"]) in (0, 2)
    err = capsys.readouterr().err
    assert "internal error" not in err
    if path != OTHER:
        assert main(["diff", path, OTHER]) in (1, 2)
        assert "internal error" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "name", [p for p in MODELS if os.sep + "exporters" + os.sep in p][:12], ids=os.path.basename
)
def test_exported_model_renamed_and_resorted_is_equal(name: str, tmp_path, capsys) -> None:
    model = onnx.load(name, load_external_data=False)
    renamed = C.rename_everything(model, 3)
    out = str(tmp_path / "renamed.onnx")
    onnx.save(renamed, out)
    code = main(["diff", name, out])
    text = capsys.readouterr().out
    assert code == 0, text
