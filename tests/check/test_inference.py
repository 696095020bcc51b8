"""Inference results kept apart from declared types; onnx crashes isolated."""

from __future__ import annotations

import sys

import pytest
from onnx import TensorProto, helper

from onnxviz.check import validate, worker
from onnxviz.check.inference import infer_types, run_inference
from onnxviz.check.validator import Validator
from onnxviz.model.document import Document
from tests.check.cases import model, vi

F = TensorProto.FLOAT


def _doc() -> Document:
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["t"], name="mm"),
        helper.make_node("Relu", ["t"], ["y"], name="r"),
    ]
    # 't' is declared with a wrong element type: the inferred one must not be overwritten.
    return Document.from_model(
        model(
            nodes,
            [vi("a", shape=(2, 3)), vi("b", shape=(3, 5))],
            [vi("y", shape=None)],
            value_info=[vi("t", TensorProto.INT64)],
        )
    )


def test_inferred_types_are_kept_apart_from_declared() -> None:
    doc = _doc()
    types = infer_types(doc)
    t = types[("main", "t")]
    assert t.tensor_type.elem_type == F
    assert [d.dim_value for d in t.tensor_type.shape.dim] == [2, 5]
    y = types[("main", "y")]
    assert [d.dim_value for d in y.tensor_type.shape.dim] == [2, 5]
    # The declared type in the model is untouched.
    assert doc.model.graph.value_info[0].type.tensor_type.elem_type == TensorProto.INT64
    assert ("main", "nowhere") not in types
    assert {"T005"} <= {d.code for d in validate(doc)}


def test_a_validators_inferred_types_are_reused_while_current() -> None:
    doc = _doc()
    validator = Validator(doc)
    validator.validate()
    first = validator.inferred_types()
    assert validator.inferred_types() is first
    doc.rename_value("t", "t2")  # not validated: the next ask runs inference again
    again = validator.inferred_types()
    assert ("main", "t2") in again and ("main", "t") not in again
    assert validator.current


def test_types_inside_subgraphs() -> None:
    then = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", shape=None)]
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["u"])], "else", [], [vi("u", shape=None)]
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if")
    doc = Document.from_model(model([node], [vi("c", TensorProto.BOOL, ()), vi("x")], [vi("y")]))
    types = infer_types(doc)
    assert types[("main/then_branch:if", "t")].tensor_type.elem_type == F


_CRASHER = "import os, signal, sys; sys.stdin.buffer.read(8); os.kill(os.getpid(), signal.SIGSEGV)"


@pytest.mark.skipif(sys.platform == "win32", reason="signals")
def test_a_crash_in_the_worker_is_reported_and_the_worker_restarts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    crasher = worker.InferenceWorker([sys.executable, "-c", _CRASHER])
    monkeypatch.setattr(worker, "WORKER", crasher)
    doc = _doc()
    result = run_inference(doc.model, doc.scopes(), isolate=True)
    assert result.crash is not None and "crashed" in result.crash and "11" in result.crash
    assert not result.types
    # A real worker after the crash: inference works again, isolated.
    monkeypatch.setattr(worker, "WORKER", worker.InferenceWorker())
    again = run_inference(doc.model, doc.scopes(), isolate=True)
    assert again.crash is None and again.types[("main", "t")].tensor_type.elem_type == F
    worker.WORKER.close()


def test_broken_models_are_inferred_in_a_worker() -> None:
    # onnx 1.23 dereferences a missing input type in LabelEncoder's inference; our rule
    # sees the undefined input first, so inference runs isolated and the process survives.
    node = helper.make_node(
        "LabelEncoder",
        ["nowhere"],
        ["y"],
        domain="ai.onnx.ml",
        keys_strings=["a"],
        values_tensor=helper.make_tensor("v", TensorProto.INT32, [1], [1]),
    )
    m = model(
        [node],
        [vi("x", TensorProto.STRING, (1,))],
        [vi("y", TensorProto.INT32, (1,))],
        opsets=[("ai.onnx.ml", 4)],
    )
    m.graph.output[0].ClearField("type")
    diags = validate(Document.from_model(m))
    assert "G004" in {d.code for d in diags}
    crashes = [d for d in diags if d.code == "I003"]
    assert all("crashed" in d.message for d in crashes)


def _declared(value_info=(), outputs=None):
    nodes = [
        helper.make_node("Relu", ["x"], ["t"], name="first"),
        helper.make_node("Relu", ["t"], ["y"], name="second"),
    ]
    return Document.from_model(
        model(nodes, [vi("x", shape=(2,))], outputs or [vi("y", shape=(2,))], value_info=value_info)
    )


def test_an_intermediate_shape_hint_that_inference_contradicts_is_a_located_warning() -> None:
    diags = validate(_declared(value_info=[vi("t", shape=(1,))]))
    (d,) = [d for d in diags if d.code in ("T005", "T009")]
    assert d.code == "T009" and d.severity.name == "WARNING"
    assert "float32[1]" in d.message and "float32[2]" in d.message  # both types named
    assert (d.location.node, d.location.value) == ("first", "t")  # badge on the producer


def test_a_declared_type_that_makes_the_model_invalid_stays_an_error() -> None:
    # Element type of an intermediate: a dtype conflict.
    diags = validate(_declared(value_info=[vi("t", TensorProto.INT64, shape=(2,))]))
    assert [(d.code, d.severity.name, d.location.node) for d in diags if d.code == "T005"] == [
        ("T005", "ERROR", "first")
    ]
    # A graph output's shape: the model's interface.
    diags = validate(_declared(outputs=[vi("y", shape=(3,))]))
    t005 = [d for d in diags if d.code == "T005"]
    assert t005 and t005[0].severity.name == "ERROR" and t005[0].location.node == "second"


def test_the_canvas_gets_type_texts_from_the_worker_from_a_file_or_the_model(
    tmp_path: pytest.TempPathFactory,
) -> None:
    """The UI's inference: the worker reads an unedited file itself (nothing serialized
    in the app) or takes the model's bytes, and answers the texts the canvas shows,
    the same as converting the inferred TypeProtos here would give."""
    import onnx

    from onnxviz.check.inference import infer_type_texts, infer_value_types
    from onnxviz.model.types import type_to_text

    doc = _doc()
    path = str(tmp_path / "m.onnx")  # type: ignore[operator]
    onnx.save(doc.model, path)
    here = {
        p: {name: type_to_text(tp) for name, tp in values.items()}
        for p, values in infer_value_types(doc.model).items()
    }
    assert here["main"]["t"] == "float32[2,5]"  # inferred, not the declared int64
    assert infer_type_texts(doc.model) == here
    assert infer_type_texts(doc.model, path=path) == here


def test_type_texts_travel_in_chunks_and_come_back_whole(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A big model's texts are unpickled a chunk at a time (each a short GIL hold)."""
    from onnxviz.check import inference

    monkeypatch.setattr(inference, "TEXT_CHUNK", 3)
    texts = {
        "main": {f"v{i}": f"float32[{i}]" for i in range(10)},
        "main/If#1:then_branch": {"t": "int64[]", "\u00e9\n": "bool"},
        "fn:local.f": {},
    }
    chunks = inference.texts_in_chunks(texts)
    assert len([c for c in chunks if c[0] == "main"]) == 4  # 3 + 3 + 3 + 1
    back = inference.texts_from_chunks(chunks)
    assert back == texts
    assert list(back["main"]) == list(texts["main"])  # in the order inference gave
