"""`onnxviz diff A B`: exit codes, the JSON contract, --run with given or random feeds."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from onnxviz.cli.main import main
from tests.model import diff_corpus as C


def _save(tmp_path, name: str, model: onnx.ModelProto) -> str:
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


def _json(argv: list[str], capsys) -> tuple[int, dict]:
    code = main(argv + ["--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_equal_models_exit_0_even_when_every_name_differs(tmp_path, capsys) -> None:
    a = _save(tmp_path, "a.onnx", C.mlp())
    b = _save(tmp_path, "b.onnx", C.rename_everything(C.mlp(), 4))
    code, data = _json(["diff", a, b], capsys)
    assert code == 0
    assert data["equal"] is True and data["structure_equal"] is True
    assert data["counts"]["renamed_values"] > 0
    assert data["numeric"] is None
    assert main(["diff", a, b]) == 0
    assert "equal" in capsys.readouterr().out


def test_different_models_exit_1_with_the_change_in_json(tmp_path, capsys) -> None:
    m = C.mlp()
    changed = C.copy(m)
    C.node(changed, "softmax").attribute[0].i = 0
    a, b = _save(tmp_path, "a.onnx", m), _save(tmp_path, "b.onnx", changed)
    code, data = _json(["diff", a, b], capsys)
    assert code == 1
    assert data["format"] == "onnxviz.diff/1" and data["a"] == a and data["b"] == b
    (main_graph,) = [g for g in data["graphs"] if g["a"] == "main"]
    (change,) = main_graph["changed"]
    assert change["a"] == {"graph": "main", "node": "softmax", "op_type": "Softmax"}
    assert change["details"] == [{"what": "attribute", "name": "axis", "a": "-1", "b": "0"}]
    assert main(["diff", a, b]) == 1
    text = capsys.readouterr().out
    assert "changed   softmax (Softmax): attribute axis: -1 -> 0" in text


def test_unreadable_model_exits_2_with_one_line(tmp_path, capsys) -> None:
    a = _save(tmp_path, "a.onnx", C.mlp())
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\xff not a model")
    assert main(["diff", a, str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("onnxviz: ") and "bad.onnx" in err and "\n" not in err
    assert main(["diff", a, str(tmp_path / "missing.onnx")]) == 2


@pytest.mark.numeric
def test_run_with_random_inputs_names_first_divergence(tmp_path, capsys) -> None:
    m = C.mlp(layers=4, width=16)
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    q = C.quantize_qdq(m, x, bad_value="relu1", bad_scale=0.2)
    a, b = _save(tmp_path, "a.onnx", m), _save(tmp_path, "q.onnx", q)
    np.save(tmp_path / "x.npy", x)
    code, data = _json(["diff", a, b, "--run", "--input", f"x={tmp_path / 'x.npy'}"], capsys)
    assert code == 1
    first = data["numeric"]["first_divergence"]
    assert first["a"] == "relu1" and first["b"] == "relu1_dqa" and first["beyond"] is True
    assert first["quant_step"] > 0 and first["max_abs"] > first["tolerance"]
    assert first["local_abs"] > first["tolerance"]  # the error relu1's own nodes add
    assert data["numeric"]["quantized"] is True
    # the same, in words
    assert main(["diff", a, b, "--run", "--input", f"x={tmp_path / 'x.npy'}"]) == 1
    out = capsys.readouterr().out
    assert "first divergence: relu1" in out and f"its nodes add {first['local_abs']:.3g}" in out


@pytest.mark.numeric
@pytest.mark.parametrize("engine", ["onnxviz", "onnxruntime"])
def test_run_equal_models_exit_0(tmp_path, capsys, engine: str) -> None:
    a = _save(tmp_path, "a.onnx", C.layernorm(False))
    b = _save(tmp_path, "b.onnx", C.layernorm(True))
    code, data = _json(["diff", a, b, "--run", "--random-inputs", "--engine", engine], capsys)
    # structure differs (a fused group) so the exit is 1, but the numbers agree
    assert code == 1 and data["structure_equal"] is False
    assert data["numeric"]["first_divergence"] is None
    assert data["numeric"]["engine"] == engine


def test_run_without_feeds_is_a_clear_error(tmp_path, capsys) -> None:
    a = _save(tmp_path, "a.onnx", C.mlp())
    assert main(["diff", a, a, "--run"]) == 2
    assert "--random-inputs" in capsys.readouterr().err


@pytest.mark.numeric
def test_tolerances_decide(tmp_path, capsys) -> None:
    m = C.mlp()
    b_model = C.copy(m)
    idx = next(i for i, t in enumerate(b_model.graph.initializer) if t.name == "b2")
    arr = onnx.numpy_helper.to_array(b_model.graph.initializer[idx]) + np.float32(0.01)
    b_model.graph.initializer[idx].CopyFrom(onnx.numpy_helper.from_array(arr, "b2"))
    a, b = _save(tmp_path, "a.onnx", m), _save(tmp_path, "b.onnx", b_model)
    _, tight = _json(["diff", a, b, "--run", "--random-inputs"], capsys)
    assert tight["numeric"]["first_divergence"]["a"] == "add2"
    _, loose = _json(["diff", a, b, "--run", "--random-inputs", "--atol", "0.1"], capsys)
    assert loose["numeric"]["first_divergence"] is None


def test_anchor_option(tmp_path, capsys) -> None:
    a = _save(tmp_path, "a.onnx", C.mlp())
    assert main(["diff", a, a, "--anchor", "relu0"]) == 2
    assert "NODE_A=NODE_B" in capsys.readouterr().err
    assert main(["diff", a, a, "--anchor", "relu0=relu0", "--json"]) == 0
