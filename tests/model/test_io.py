"""Loading and saving: faithful bytes, text format, external data, atomic writes."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from onnxviz.errors import ExternalDataError, LoadError, SaveError
from onnxviz.model import io
from onnxviz.model.document import Document
from onnxviz.model.external import MAPPED_FILES
from tests.model.builders import simple_model, with_external

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _write(path: str, model: onnx.ModelProto) -> str:
    with open(path, "wb") as fh:
        fh.write(model.SerializeToString())
    return path


def test_unmodified_document_saves_byte_identical(tmp_path):
    src = os.path.join(LIGHT, "light_squeezenet.onnx")
    doc = Document.open(src)
    out = doc.save(str(tmp_path / "copy.onnx"))
    with open(src, "rb") as a, open(out, "rb") as b:
        assert a.read() == b.read()


def test_edited_save_parses_back_equal(tmp_path):
    path = _write(str(tmp_path / "m.onnx"), simple_model())
    doc = Document.open(path)
    doc.rename_value("r", "relu_out")
    doc.save()
    again = onnx.load(path)
    assert again == doc.model
    assert [n.input[0] for n in again.graph.node] == ["x", "relu_out"]
    assert not doc.is_modified


def test_text_format_round_trip(tmp_path):
    import onnxviz.check  # noqa: F401  (hands model.io the text parser of its worker)

    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    agraph (float[N, 4] x) => (float[N, 4] y) {
        r = Relu(x)
        y = Add(r, r)
    }
    """
    path = tmp_path / "m.onnxtxt"
    path.write_text(text)
    doc = Document.open(str(path))
    assert doc.source_format == "text"
    assert [n.op_type for n in doc.model.graph.node] == ["Relu", "Add"]
    out = doc.save(str(tmp_path / "back.onnxtxt"))
    reloaded = Document.open(out)
    assert [n.op_type for n in reloaded.model.graph.node] == ["Relu", "Add"]
    assert reloaded.model.graph.input[0].name == "x"


def test_bad_text_format_is_one_sentence(tmp_path):
    path = tmp_path / "bad.onnxtxt"
    path.write_text("<ir_version: 8> agraph (float x => {")
    with pytest.raises(LoadError) as err:
        Document.open(str(path))
    assert "bad.onnxtxt" in str(err.value) and "\n" not in str(err.value)


def test_external_data_is_read_lazily_and_correctly(tmp_path):
    path = with_external(str(tmp_path / "m"))
    data_file = os.path.realpath(str(tmp_path / "m" / "weights.bin"))
    MAPPED_FILES.forget()
    doc = Document.open(path)
    assert doc.diagnostics == []
    assert data_file not in MAPPED_FILES._maps  # opening maps nothing
    arr = doc.tensor_array(doc.model.graph.initializer[0])
    np.testing.assert_array_equal(arr, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert data_file in MAPPED_FILES._maps


@pytest.mark.parametrize(
    ("location", "code"),
    [("../outside.bin", "D102"), ("/etc/passwd", "D102"), ("nothere.bin", "D101")],
)
def test_bad_external_locations_become_diagnostics(tmp_path, location, code):
    path = with_external(str(tmp_path / "m"), location=location)
    doc = Document.open(path)  # the rest of the model still opens
    assert [d.code for d in doc.diagnostics] == [code]
    diag = doc.diagnostics[0]
    assert diag.location.value == "w" and diag.location.graph_path == "main"
    with pytest.raises(ExternalDataError):
        doc.tensor_array(doc.model.graph.initializer[0])


def test_symlink_out_of_folder_is_refused(tmp_path):
    outside = tmp_path / "secret.bin"
    outside.write_bytes(np.zeros(6, np.float32).tobytes())
    folder = tmp_path / "m"
    path = with_external(str(folder), location="link.bin")
    os.symlink(outside, folder / "link.bin")
    doc = Document.open(path)
    assert [d.code for d in doc.diagnostics] == ["D102"]


def test_range_past_end_and_length_mismatch(tmp_path):
    path = with_external(str(tmp_path / "m"))
    model = onnx.load(path, load_external_data=False)
    entries = model.graph.initializer[0].external_data
    entries[1].value = "1000"  # offset past the end
    _write(path, model)
    assert [d.code for d in Document.open(path).diagnostics] == ["D103"]
    entries[1].value = "0"
    entries[2].value = "8"  # 8 bytes where 2x3 float32 need 24
    _write(path, model)
    assert [d.code for d in Document.open(path).diagnostics] == ["D104"]


@pytest.mark.parametrize("mode", ["embed", "external", "keep"])
def test_save_modes_keep_values(tmp_path, mode):
    path = with_external(str(tmp_path / "src"))
    doc = Document.open(path)
    target = str(tmp_path / "dst" / "out.onnx")
    os.makedirs(os.path.dirname(target))
    doc.save(target, external_data=mode, threshold=16)
    saved = onnx.load(target, load_external_data=False)
    t = saved.graph.initializer[0]
    if mode == "embed":
        assert t.data_location == TensorProto.DEFAULT and len(t.raw_data) == 24
    else:
        assert t.data_location == TensorProto.EXTERNAL
        assert os.path.exists(os.path.join(os.path.dirname(target), "out.data"))
    reopened = Document.open(target)
    assert reopened.diagnostics == []
    np.testing.assert_array_equal(
        reopened.tensor_array(reopened.model.graph.initializer[0]),
        np.arange(6, dtype=np.float32).reshape(2, 3),
    )


def test_save_over_the_file_whose_data_is_mapped(tmp_path):
    folder = tmp_path / "m"
    path = with_external(str(folder))
    doc = Document.open(path)
    before = doc.tensor_array(doc.model.graph.initializer[0]).copy()  # maps weights.bin
    doc.save(path, external_data="external", threshold=1)  # rewrites model.data
    doc.save(path, external_data="external", threshold=1)  # now overwriting its own data file
    reopened = Document.open(path)
    assert reopened.diagnostics == []
    np.testing.assert_array_equal(
        reopened.tensor_array(reopened.model.graph.initializer[0]), before
    )


def test_failed_save_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = _write(str(tmp_path / "m.onnx"), simple_model())
    with open(path, "rb") as fh:
        original = fh.read()
    doc = Document.open(path)
    doc.rename_value("r", "q")

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io.os, "fsync", boom)
    with pytest.raises(SaveError) as err:
        doc.save()
    assert "No space left" in str(err.value)
    with open(path, "rb") as fh:
        assert fh.read() == original
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]
    assert doc.is_modified


def test_saving_over_2gib_inline_is_refused_clearly(monkeypatch, tmp_path):
    monkeypatch.setattr(io, "PROTOBUF_LIMIT", 10)
    doc = Document.from_model(simple_model())
    with pytest.raises(SaveError, match="2 GiB"):
        doc.save(str(tmp_path / "x.onnx"))


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_new_model_and_data_files_honour_the_umask(tmp_path, mask) -> None:
    """mkstemp's 0600 made new files unreadable to other users; a new file gets
    0666 & ~umask, as open() would give it, and an overwritten one keeps its mode."""
    import stat

    from tests.model.builders import matmul_model

    src = tmp_path / "src.onnx"
    onnx.save(matmul_model(), src)
    old = os.umask(mask)
    try:
        doc = Document.open(str(src))
        embedded, external = tmp_path / "new.onnx", tmp_path / "ext.onnx"
        doc.save(str(embedded))
        doc.save(str(external), external_data="external")
        data_files = [p for p in tmp_path.iterdir() if p.suffix not in (".onnx",)]
        assert data_files, "the external save wrote no data file"
        for path in [embedded, external, *data_files]:
            assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask, path.name
        os.chmod(embedded, 0o640)
        doc.save(str(embedded))
        assert stat.S_IMODE(embedded.stat().st_mode) == 0o640  # overwriting keeps the mode
    finally:
        os.umask(old)


def test_saving_over_a_file_another_program_rewrote_is_refused_unless_forced(tmp_path) -> None:
    from onnxviz.errors import FileChangedError

    path = tmp_path / "m.onnx"
    path.write_bytes(simple_model().SerializeToString())
    doc = Document.open(str(path))
    doc.rename_value("r", "mine")
    # Another tool rewrites the file while it is open.
    other = simple_model()
    other.doc_string = "written by another tool"
    path.write_bytes(other.SerializeToString())
    with pytest.raises(FileChangedError, match="changed on disk"):
        doc.save()
    assert onnx.load(str(path)).doc_string == "written by another tool"  # untouched
    doc.save(overwrite_changed=True)
    assert onnx.load(str(path)).graph.node[0].output[0] == "mine"
    # After our own save, saving again needs no force; Save As elsewhere never does.
    doc.rename_value("mine", "again")
    doc.save()
    doc.save(str(tmp_path / "copy.onnx"))


def test_text_format_without_a_parser_says_how_to_get_one(tmp_path, monkeypatch):
    """onnx.parser is C++ code: model.io never runs it itself; without the worker's parser
    handed over, opening a text model is a LoadError that says what to do, not a crash."""
    from onnxviz.model import io

    monkeypatch.setattr(io, "TEXT_PARSER", None)
    path = tmp_path / "m.onnxtxt"
    path.write_text(
        '<ir_version: 8, opset_import: ["" : 17]>\ng (float[2] x) => (float[2] y) {\n y = Relu(x)\n}\n'
    )
    with pytest.raises(LoadError, match="checker process"):
        Document.open(str(path))
