"""Single-file weights left in place: the big raw_data fields of a model file are read from
a map of the file, and saves embed them again by streaming (model.inplace)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.model import dtypes, inplace, io
from onnxviz.model.commands import SetAttribute
from onnxviz.model.document import Document
from onnxviz.model.tensors import from_array, to_array

NUMERIC_CODES = [
    code for name, code in TensorProto.DataType.items() if name not in ("UNDEFINED", "STRING")
]


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small files and tensors go in place too, so tests stay small."""
    monkeypatch.setattr(inplace, "MIN_FILE_SIZE", 0)
    monkeypatch.setattr(inplace, "MIN_TENSOR_BYTES", 256)


def random_array(code: int, shape: tuple[int, ...], seed: int) -> np.ndarray:
    et = dtypes.element_type(code)
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    if et.dtype == np.bool_:
        return rng.integers(0, 2, count).astype(bool).reshape(shape)
    if et.is_sub_byte:
        return rng.integers(0, 1 << et.bits, count).astype(np.uint8).view(et.dtype).reshape(shape)
    raw = rng.integers(0, 256, count * et.dtype.itemsize, dtype=np.uint8)
    return raw.view(et.dtype).reshape(shape)


def bits(array: np.ndarray) -> bytes:
    et = dtypes.element_type(dtypes.elem_type_of(array.dtype))
    if et.is_sub_byte:
        return (np.ascontiguousarray(array).view(np.uint8) & ((1 << et.bits) - 1)).tobytes()
    return np.ascontiguousarray(array).tobytes()


def weights_model(weights: list[TensorProto], *, in_attribute: TensorProto | None = None):
    nodes = [helper.make_node("Identity", [w.name], [f"out{i}"]) for i, w in enumerate(weights)]
    outputs = [
        helper.make_tensor_value_info(f"out{i}", w.data_type, None) for i, w in enumerate(weights)
    ]
    if in_attribute is not None:
        nodes.append(helper.make_node("Constant", [], ["c"], name="const", value=in_attribute))
        outputs.append(helper.make_tensor_value_info("c", in_attribute.data_type, None))
    graph = helper.make_graph(nodes, "g", [], outputs, weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def write(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


@settings(max_examples=40, deadline=None)
@given(
    code=st.sampled_from(NUMERIC_CODES),
    count=st.integers(300, 2000),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_dtype_decodes_the_same_from_the_map_as_from_the_proto(
    tmp_path_factory: pytest.TempPathFactory, code: int, count: int, seed: int
) -> None:
    array = random_array(code, (count,), seed)
    weight = from_array(array, "w")
    path = write(weights_model([weight]), tmp_path_factory.mktemp("m") / "m.onnx")
    parsed = onnx.load(str(path), load_external_data=False).graph.initializer[0]
    loaded = io.load(str(path))
    kept = loaded.model.graph.initializer[0]
    in_place = inplace.is_inplace(kept)
    assert in_place == (len(weight.raw_data) >= inplace.MIN_TENSOR_BYTES)
    assert not kept.HasField("raw_data") or not in_place
    assert bits(to_array(kept, str(path.parent))) == bits(to_array(parsed))
    assert bits(to_array(kept, str(path.parent))) == bits(array)


def test_big_tensors_stay_in_the_file_and_small_ones_are_parsed(tmp_path: Path) -> None:
    big = numpy_helper.from_array(np.arange(1000, dtype=np.float32), "big")
    small = numpy_helper.from_array(np.arange(4, dtype=np.int64), "small")
    const = numpy_helper.from_array(np.arange(500, dtype=np.float32), "cval")
    path = write(weights_model([big, small], in_attribute=const), tmp_path / "m.onnx")
    doc = Document.open(str(path))
    big_k, small_k = doc.model.graph.initializer
    const_k = doc.model.graph.node[-1].attribute[0].t
    assert inplace.is_inplace(big_k) and inplace.is_inplace(const_k)
    assert not inplace.is_inplace(small_k) and small_k.HasField("raw_data")
    assert big_k.name == "big" and list(big_k.dims) == [1000]
    assert np.array_equal(doc.tensor_array(big_k), np.arange(1000, dtype=np.float32))
    assert np.array_equal(doc.tensor_array(const_k), np.arange(500, dtype=np.float32))
    assert doc.diagnostics == []


def test_unmodified_save_is_byte_identical(tmp_path: Path) -> None:
    big = numpy_helper.from_array(np.random.default_rng(1).random((64, 64), np.float32), "w")
    path = write(weights_model([big]), tmp_path / "m.onnx")
    original = path.read_bytes()
    doc = Document.open(str(path))
    doc.save(str(tmp_path / "copy.onnx"))
    assert (tmp_path / "copy.onnx").read_bytes() == original
    doc.save(str(path))
    assert path.read_bytes() == original


def test_edited_save_over_the_mapped_file_embeds_the_weights(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    arrays = [rng.random((32, 32), np.float32) for _ in range(3)]
    weights = [numpy_helper.from_array(a, f"w{i}") for i, a in enumerate(arrays)]
    model = weights_model(weights)
    path = write(model, tmp_path / "m.onnx")
    doc = Document.open(str(path))
    doc.execute(
        SetAttribute("main", 0, helper.make_attribute("note", "edited"))  # a real edit
    )
    doc.save(str(path))  # the file being written over is the one mapped
    again = onnx.load(str(path))
    for tensor, array in zip(again.graph.initializer, arrays):
        assert not tensor.external_data and np.array_equal(numpy_helper.to_array(tensor), array)
    expected = onnx.ModelProto()
    expected.CopyFrom(model)
    expected.graph.node[0].attribute.extend([helper.make_attribute("note", "edited")])
    assert again.SerializeToString() == expected.SerializeToString()
    # The document now reads the new file, and a second save streams from it.
    for tensor, array in zip(doc.model.graph.initializer, arrays):
        assert np.array_equal(doc.tensor_array(tensor), array)
    doc.save(str(path))
    assert onnx.load(str(path)).SerializeToString() == expected.SerializeToString()


def test_save_as_embed_external_and_text(tmp_path: Path) -> None:
    array = np.arange(256, dtype=np.float32).reshape(16, 16)
    path = write(weights_model([numpy_helper.from_array(array, "w")]), tmp_path / "m.onnx")
    doc = Document.open(str(path))
    other = tmp_path / "other"
    other.mkdir()
    doc.save(str(other / "embedded.onnx"), external_data="embed")
    assert np.array_equal(
        numpy_helper.to_array(onnx.load(str(other / "embedded.onnx")).graph.initializer[0]),
        array,
    )
    doc.save(str(other / "ext.onnx"), external_data="external", threshold=16)
    plain = onnx.load(str(other / "ext.onnx"), load_external_data=False).graph.initializer[0]
    assert plain.data_location == TensorProto.EXTERNAL
    assert dict((e.key, e.value) for e in plain.external_data)["location"] == "ext.data"
    assert np.array_equal(
        numpy_helper.to_array(onnx.load(str(other / "ext.onnx")).graph.initializer[0]), array
    )
    doc.save(str(other / "m.onnxtxt"))
    assert "external" not in (other / "m.onnxtxt").read_text()


def test_keep_into_another_folder_keeps_weights_embedded(tmp_path: Path) -> None:
    array = np.arange(256, dtype=np.float32)
    path = write(weights_model([numpy_helper.from_array(array, "w")]), tmp_path / "m.onnx")
    doc = Document.open(str(path))
    doc.execute(SetAttribute("main", 0, helper.make_attribute("note", "x")))
    (tmp_path / "b").mkdir()
    doc.save(str(tmp_path / "b" / "m.onnx"))
    assert os.listdir(tmp_path / "b") == ["m.onnx"]
    saved = onnx.load(str(tmp_path / "b" / "m.onnx"))
    assert np.array_equal(numpy_helper.to_array(saved.graph.initializer[0]), array)


def test_sparse_and_subgraph_tensors_go_in_place(tmp_path: Path) -> None:
    values = numpy_helper.from_array(np.arange(300, dtype=np.float32) + 1, "sv")
    indices = numpy_helper.from_array(np.arange(300, dtype=np.int64) * 2, "si")
    sparse = helper.make_sparse_tensor(values, indices, [600])
    inner_w = numpy_helper.from_array(np.ones(400, np.float32), "inner_w")
    body = helper.make_graph(
        [helper.make_node("Identity", ["inner_w"], ["o"])],
        "body",
        [],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, [400])],
        [inner_w],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["r"], then_branch=body, else_branch=body)],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [400])],
        sparse_initializer=[sparse],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    path = write(model, tmp_path / "m.onnx")
    loaded = io.load(str(path))
    kept = [s.tensor for s in io.iter_tensors(loaded.model)]
    assert sum(inplace.is_inplace(t) for t in kept) == 4  # values, indices, two branches
    doc = Document(loaded.model, str(path), original_bytes=None)
    doc.save(str(tmp_path / "again.onnx"))
    assert (tmp_path / "again.onnx").read_bytes() == model.SerializeToString()


def test_malformed_file_falls_back_to_the_ordinary_error(tmp_path: Path) -> None:
    big = numpy_helper.from_array(np.ones(1000, np.float32), "w")
    data = weights_model([big]).SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    from onnxviz.errors import LoadError

    with pytest.raises(LoadError, match="truncated or is not protobuf"):
        io.load(str(path))


def test_files_below_the_size_threshold_are_parsed_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inplace, "MIN_FILE_SIZE", 10**9)
    big = numpy_helper.from_array(np.ones(1000, np.float32), "w")
    path = write(weights_model([big]), tmp_path / "m.onnx")
    kept = io.load(str(path)).model.graph.initializer[0]
    assert kept.HasField("raw_data") and not inplace.is_inplace(kept)


def test_check_and_info_see_embedded_weights_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnxviz.check import validate
    from onnxviz.check.inference import infer_types
    from onnxviz.model.summary import summarize

    rng = np.random.default_rng(3)
    weight = numpy_helper.from_array(rng.random((32, 32), np.float32), "w")
    shape = numpy_helper.from_array(np.array([32, 1], np.int64), "shape")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
            helper.make_node("Reshape", ["y", "shape"], ["out"], name="reshape"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [32, 1])],
        [weight, shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (tmp_path / "models").mkdir()
    path = write(model, tmp_path / "models" / "m.onnx")
    monkeypatch.chdir(tmp_path)  # not the model's folder
    doc = Document.open(str(path))
    assert inplace.is_inplace(doc.model.graph.initializer[0])
    assert validate(doc) == []
    out = infer_types(doc).graph("main")["out"]
    assert [d.dim_value for d in out.tensor_type.shape.dim] == [32, 1]
    assert summarize(doc.model)["external_data_files"] == []


def test_recovery_snapshot_of_an_in_place_model_restores_and_saves_the_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnxviz.model import recovery

    monkeypatch.setenv("ONNXVIZ_RECOVERY_DIR", str(tmp_path / "recovery"))
    array = np.random.default_rng(4).random((16, 16), np.float32)
    path = write(weights_model([numpy_helper.from_array(array, "w")]), tmp_path / "m.onnx")
    doc = Document.open(str(path))
    doc.execute(SetAttribute("main", 0, helper.make_attribute("note", "unsaved")))
    assert recovery.Autosaver(doc).save_now()
    snapshot = recovery.pending()[0]
    # The snapshot is small: the weights stay in the model file.
    assert os.path.getsize(snapshot.snapshot) < array.nbytes
    # A new session: the token in the snapshot names no map of this process.
    monkeypatch.setattr(inplace, "SOURCES", inplace._Registry())
    restored = snapshot.restore()
    assert np.array_equal(restored.tensor_array(restored.model.graph.initializer[0]), array)
    restored.save(str(tmp_path / "restored.onnx"))
    saved = onnx.load(str(tmp_path / "restored.onnx"), load_external_data=False)
    assert saved.graph.initializer[0].data_location == TensorProto.DEFAULT  # embedded again
    assert np.array_equal(numpy_helper.to_array(saved.graph.initializer[0]), array)
    assert saved.graph.node[0].attribute[0].s == b"unsaved"


def test_onnxruntime_reads_the_plain_external_copy_from_the_model_folder(
    tmp_path: Path,
) -> None:
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(5)
    w = rng.random((32, 32), np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = write(model, tmp_path / "m.onnx")
    doc = Document.open(str(path))
    plain = inplace.plain_external_copy(doc.model)
    assert not inplace.is_inplace(plain.graph.initializer[0])
    assert inplace.is_inplace(doc.model.graph.initializer[0])  # the document is untouched
    opts = ort.SessionOptions()
    opts.add_session_config_entry(
        "session.model_external_initializers_file_folder_path", str(tmp_path)
    )
    sess = ort.InferenceSession(plain.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    x = rng.random((1, 32), np.float32)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, x @ w, rtol=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=6),
    places=st.lists(st.sampled_from(["init", "attr", "branch", "sparse"]), min_size=6, max_size=6),
    threshold=st.sampled_from([1, 100, 256, 2000]),
)
def test_scan_then_streamed_save_reproduces_the_file(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], places: list[str], threshold: int
) -> None:
    """Differential: for any mix of tensor sites and sizes, the in-place load followed by
    a streamed save gives protobuf's own serialization of the model, byte for byte."""
    inits, nodes, sparse, branch_inits = [], [], [], []
    for i, (size, place) in enumerate(zip(sizes, places)):
        t = numpy_helper.from_array(np.arange(size, dtype=np.uint8), f"t{i}")
        if place == "init":
            inits.append(t)
        elif place == "attr":
            nodes.append(helper.make_node("Constant", [], [f"c{i}"], value=t))
        elif place == "sparse" and size:
            idx = numpy_helper.from_array(np.arange(size, dtype=np.int64), f"i{i}")
            sparse.append(helper.make_sparse_tensor(t, idx, [size]))
        else:
            branch_inits.append(t)
    body = helper.make_graph([], "body", [], [], branch_inits)
    nodes.append(helper.make_node("If", ["cond"], [], then_branch=body, else_branch=body))
    graph = helper.make_graph(nodes, "g", [], [], inits, sparse_initializer=sparse)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    folder = tmp_path_factory.mktemp("m")
    path = write(model, folder / "m.onnx")
    old_threshold = inplace.MIN_TENSOR_BYTES
    inplace.MIN_TENSOR_BYTES = threshold
    try:
        loaded = io.load(str(path))
    finally:
        inplace.MIN_TENSOR_BYTES = old_threshold
    kept = 0
    for site in io.iter_tensors(loaded.model):
        if inplace.is_inplace(site.tensor):
            kept += 1
            assert inplace.inplace_ref(site.tensor).length >= threshold  # type: ignore[union-attr]
    biggest = max(
        size * (8 if place == "sparse" and size else 1) for size, place in zip(sizes, places)
    )  # (a sparse tensor's int64 indices are 8 bytes an element)
    assert (kept > 0) == (biggest >= threshold)
    doc = Document(loaded.model, str(path))
    doc.save(str(folder / "again.onnx"))
    assert (folder / "again.onnx").read_bytes() == model.SerializeToString()


def test_the_interpreter_runs_on_weights_left_in_place(tmp_path: Path) -> None:
    import onnxviz

    rng = np.random.default_rng(6)
    weights = [rng.standard_normal((24, 24)).astype(np.float32) for _ in range(3)]
    nodes, prev = [], "x"
    for i in range(3):
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"y{i}"], name=f"mm{i}"))
        prev = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 24])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2, 24])],
        [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = write(model, tmp_path / "m.onnx")
    doc = onnxviz.open_model(str(path))
    assert all(inplace.is_inplace(t) for t in doc.model.graph.initializer)
    x = rng.standard_normal((2, 24)).astype(np.float32)
    got = onnxviz.Session(doc).run({"x": x})[prev]
    np.testing.assert_allclose(got, x @ weights[0] @ weights[1] @ weights[2], rtol=1e-4, atol=1e-5)
