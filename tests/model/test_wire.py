"""A model's bytes built in small steps (`model.wire`), and the Document's shared copy of
them (`Document.model_bytes`), which the worker processes and recovery snapshots read
from background threads while the UI thread edits."""

from __future__ import annotations

import glob
import os
import threading

import numpy as np
import onnx
import pytest
from onnx import ModelProto, TensorProto, helper, numpy_helper

from onnxviz.model import commands as c
from onnxviz.model.changes import ChangeSet
from onnxviz.model.document import Document
from onnxviz.model.wire import TooBig, serialize_in_pieces
from tests.model.builders import _field, loop_model, simple_model


def _many_nodes(count: int) -> ModelProto:
    """A chain longer than a batch, with initializers, value infos, a function, metadata
    and a Loop whose body holds an If: every kind of field the writer meets."""
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"n{i}") for i in range(700)]
    body = loop_model().graph.node[1].attribute[0].g
    nodes.append(
        helper.make_node("Loop", ["trip", "cond", f"v{700}"], ["looped"], name="loop", body=body)
    )
    inits = [
        numpy_helper.from_array(np.arange(i + 1, dtype=np.float32), f"w{i}") for i in range(300)
    ]
    inits.append(helper.make_tensor("raw", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0]))
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("looped", TensorProto.FLOAT, None)],
        inits,
        value_info=[
            helper.make_tensor_value_info(f"v{i}", TensorProto.FLOAT, [4]) for i in range(1, 600)
        ],
        doc_string="a graph",
    )
    fn = onnx.helper.make_function(
        "local",
        "Twice",
        ["x"],
        ["y"],
        [helper.make_node("Add", ["x", "x"], ["y"])],
        [helper.make_opsetid("", 18)],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)],
        functions=[fn],
        producer_name="tests",
        doc_string="model",
    )
    helper.set_model_props(model, {"author": "me", "purpose": "wire"})
    return model


def test_the_pieces_are_protobufs_own_bytes_on_every_kind_of_field() -> None:
    model = _many_nodes(700)
    assert serialize_in_pieces(model) == model.SerializeToString()
    assert serialize_in_pieces(loop_model()) == loop_model().SerializeToString()
    assert serialize_in_pieces(ModelProto()) == b""


def test_the_pieces_are_protobufs_own_bytes_on_the_onnx_wheels_models() -> None:
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    paths = sorted(glob.glob(os.path.join(folder, "*", "*", "model.onnx")))
    assert len(paths) > 100
    for path in paths:
        model = onnx.load(path, load_external_data=False)
        assert serialize_in_pieces(model) == model.SerializeToString(), path


def test_unknown_fields_survive_where_the_writer_takes_messages_apart() -> None:
    """A field from a newer onnx (unknown here) on the model and on its graph: the
    message that holds it is written in one call, so nothing is lost."""
    base = simple_model().SerializeToString()
    model = ModelProto()
    model.ParseFromString(base + _field(99, b"future"))
    model.graph.ParseFromString(model.graph.SerializeToString() + _field(98, b"later"))
    data = serialize_in_pieces(model)
    again = ModelProto()
    again.ParseFromString(data)
    assert again.SerializeToString() == model.SerializeToString()
    assert b"future" in data and b"later" in data


def test_a_model_over_the_limit_is_refused_before_it_is_built() -> None:
    model = _many_nodes(700)
    size = len(model.SerializeToString())
    with pytest.raises(TooBig):
        serialize_in_pieces(model, limit=size - 1)
    assert len(serialize_in_pieces(model, limit=size)) == size


def test_model_bytes_are_the_files_while_unedited_then_the_edit_shared_by_readers(
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "m.onnx"
    onnx.save(_many_nodes(700), str(path))
    doc = Document.open(str(path))
    assert doc.model_bytes() == path.read_bytes()
    doc.execute(c.SetNodeField("main", 3, "name", "renamed"))
    first = doc.model_bytes()
    assert first == doc.model.SerializeToString()
    assert doc.model_bytes() is first  # validation, inference and the snapshot share it
    doc.undo()
    assert doc.model_bytes() == path.read_bytes()  # back to the file
    doc.redo()
    again = doc.model_bytes()
    assert again == first and again is not first  # a new edit: taken again


def test_a_reader_in_another_thread_never_sees_an_edit_half_way() -> None:
    """A command of the UI thread that another thread's reader overlaps (it runs while
    the command is half-way, and while it is still going after the copy is taken):
    the reader's bytes are the model after the command, never a mix."""
    doc = Document(simple_model())
    doc.execute(c.SetNodeField("main", 0, "name", "before"))
    halfway = threading.Event()
    resume = threading.Event()
    got: list[bytes | None] = []

    class TwoStepEdit(c.Command):
        label = "two steps"

        def apply(self, d: Document):  # type: ignore[no-untyped-def,override]
            d.model.graph.node[0].name = "step one"
            halfway.set()
            resume.wait(5)  # the reader runs now, between the two changes
            d.model.graph.node[1].name = "step two"
            return ChangeSet()

        def revert(self, d: Document):  # type: ignore[no-untyped-def,override]
            raise AssertionError("not undone here")

    def read() -> None:
        halfway.wait(5)
        threading.Timer(0.05, resume.set).start()
        got.append(doc.model_bytes())

    reader = threading.Thread(target=read)
    reader.start()
    doc.execute(TwoStepEdit())
    reader.join(10)
    assert got and got[0] is not None
    seen = ModelProto()
    seen.ParseFromString(got[0])
    assert [n.name for n in seen.graph.node[:2]] == ["step one", "step two"]
