"""A big unedited model is validated by a worker process (`check.file_validation`):
the answer must be the one the app's own Validator gives, and it must never stand for
a document that is no longer that file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from onnxviz.check import file_validation
from onnxviz.check.validator import Validator
from onnxviz.model import commands as c
from onnxviz.model.document import Document

EXPORTERS = Path(__file__).resolve().parent.parent / "data" / "exporters"


def _broken_model() -> onnx.ModelProto:
    """An error (an undefined input), a warning (an unused initializer) and a nested body."""
    then = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["nowhere"], ["r"], name="relu"),
            helper.make_node("If", ["flag"], ["y"], name="if", then_branch=then, else_branch=then),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [helper.make_tensor("unused", TensorProto.FLOAT, [1], [1.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "name",
    [
        "torch_dynamo_control_flow.onnx",
        "ort_genai_llama_int4.onnx",
        "skl2onnx_label_encoder_strings.onnx",
        "optimum_gpt2_with_past.onnx",
    ],
)
def test_the_workers_answer_is_the_apps_own(name: str, tmp_path: Path) -> None:
    path = str(tmp_path / name)
    shutil.copy(EXPORTERS / name, path)
    doc = Document.open(path)
    here = Validator(doc).validate()
    validator = Validator(doc)
    assert validator.validate_unedited_file()
    assert validator.diagnostics == here
    assert validator.state is None  # the per-rule results stayed in the worker


def test_errors_and_their_locations_come_back_whole(tmp_path: Path) -> None:
    path = str(tmp_path / "broken.onnx")
    onnx.save(_broken_model(), path)
    doc = Document.open(path)
    here = Validator(doc).validate()
    assert any(d.severity.name == "ERROR" for d in here)
    found = file_validation.validate_file_in_worker(*doc.unedited_file(), "onnx")  # type: ignore[misc]
    assert found == here
    assert [d.location for d in found] == [d.location for d in here]


def test_an_edited_document_or_a_changed_file_is_validated_here(tmp_path: Path) -> None:
    path = str(tmp_path / "broken.onnx")
    onnx.save(_broken_model(), path)
    doc = Document.open(path)
    doc.execute(c.SetNodeField("main", 0, "name", "renamed"))
    validator = Validator(doc)
    assert doc.unedited_file() is None
    assert not validator.validate_unedited_file()
    doc.undo()
    assert doc.unedited_file() is not None
    # another program rewrites the file: the worker would see another model
    stat = os.stat(path)
    onnx.save(helper.make_model(helper.make_graph([], "other", [], [])), path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert doc.unedited_file() is None
    assert not validator.validate_unedited_file()


def test_the_worker_refuses_a_file_that_changed_after_the_request(tmp_path: Path) -> None:
    path = str(tmp_path / "broken.onnx")
    onnx.save(_broken_model(), path)
    doc = Document.open(path)
    unedited = doc.unedited_file()
    assert unedited is not None
    stat = os.stat(path)
    onnx.save(helper.make_model(helper.make_graph([], "other", [], [])), path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    answer = file_validation.validate_file_here(unedited[0], unedited[1], "onnx")
    assert isinstance(answer, str) and "changed on disk" in answer
    assert file_validation.validate_file_in_worker(unedited[0], unedited[1], "onnx") is None


def test_an_answer_for_a_document_edited_meanwhile_is_dropped(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "broken.onnx")
    onnx.save(_broken_model(), path)
    doc = Document.open(path)
    validator = Validator(doc)
    before = list(validator.diagnostics)
    real = file_validation.validate_file_in_worker

    def edited_while_the_worker_ran(*args):  # type: ignore[no-untyped-def]
        answer = real(*args)
        doc.execute(c.SetNodeField("main", 0, "name", "renamed"))
        return answer

    monkeypatch.setattr(file_validation, "validate_file_in_worker", edited_while_the_worker_ran)
    assert not validator.validate_unedited_file()
    assert validator.diagnostics == before  # nothing of the stale answer


def test_the_check_target_travels_with_the_request(tmp_path: Path) -> None:
    name = "ort_transformers_bert_attention.onnx"  # com.microsoft ops
    path = str(tmp_path / name)
    shutil.copy(EXPORTERS / name, path)
    doc = Document.open(path)
    for target in ("onnx", "onnxruntime"):
        here = Validator(doc, target=target).validate()
        elsewhere = Validator(doc, target=target)
        assert elsewhere.validate_unedited_file()
        assert elsewhere.diagnostics == here


def test_the_validator_process_keeps_no_workers_of_its_own_between_requests(tmp_path: Path) -> None:
    """Its inference and checker processes held the whole model (450 MB at 100k nodes)
    for as long as the app ran."""
    from onnxviz.check.worker import VALIDATOR

    path = str(tmp_path / "broken.onnx")
    onnx.save(_broken_model(), path)
    doc = Document.open(path)
    assert Validator(doc).validate_unedited_file()
    proc = VALIDATOR.start()  # the running one
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    if not children.exists():  # no such file on this kernel: ask ps
        import subprocess

        out = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(proc.pid)], capture_output=True, text=True
        ).stdout
        assert out.strip() == ""
    else:
        assert children.read_text().strip() == ""


@pytest.mark.parametrize(
    "name", ["torch_dynamo_control_flow.onnx", "ort_genai_llama_int4.onnx", "optimum_bert.onnx"]
)
def test_an_edited_model_is_validated_by_the_worker_from_its_bytes(
    name: str, tmp_path: Path
) -> None:
    """After an edit the file is no longer the document: the worker gets the model's
    bytes, its path (for external data) and its load-time problems, and answers what a
    full run here gives."""
    path = str(tmp_path / name)
    shutil.copy(EXPORTERS / name, path)
    doc = Document.open(path)
    doc.execute(c.SetNodeField("main", 0, "name", "renamed by the user"))
    out = doc.model.graph.output[0].name
    producer = next(i for i, n in enumerate(doc.model.graph.node) if out in n.output)
    doc.execute(c.RemoveNode("main", producer))  # a graph output nothing makes: an error
    validator = Validator(doc)
    assert doc.unedited_file() is None
    assert validator.validate_in_worker()
    here = Validator(doc).validate()
    assert validator.diagnostics == here
    assert any(d.severity.name == "ERROR" for d in here)


def test_an_edited_model_with_weights_in_place_is_validated_by_the_worker(tmp_path: Path) -> None:
    """A big file's weights stay in the file (`model.inplace`): the worker reads them from
    the document's folder, as this process does."""
    from onnxviz.model import inplace
    from tests.model.builders import matmul_model

    path = str(tmp_path / "big.onnx")
    onnx.save(matmul_model(size=64), path)
    original = inplace.MIN_FILE_SIZE
    inplace.MIN_FILE_SIZE = 1  # (this small file counts as big)
    try:
        doc = Document.open(path)
        doc.execute(c.SetNodeField("main", 0, "name", "mm"))
        validator = Validator(doc)
        assert validator.validate_in_worker()
        assert validator.diagnostics == Validator(doc).validate()
    finally:
        inplace.MIN_FILE_SIZE = original
