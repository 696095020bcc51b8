"""Feeds for a model's inputs: random, zeros/ones, files, text, images."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.errors import LoadError
from onnxviz.runtime.inputs import (
    FeedRecipe,
    build_feed,
    image_to_tensor,
    recipe_from_dict,
    recipe_to_dict,
    resize_bilinear,
    spec_of,
    symbolic_dims,
)


def _spec(elem: int, shape: list) -> object:
    return spec_of("x", helper.make_tensor_value_info("x", elem, shape).type)


def test_symbolic_dims_and_shapes() -> None:
    spec = _spec(TensorProto.FLOAT, ["batch", 3, None, "len"])
    assert symbolic_dims([spec]) == ["batch", "len"]
    v = build_feed(spec, FeedRecipe("zeros"), {"batch": 2, "len": 5}, np.random.default_rng(0))
    assert v.shape == (2, 3, 1, 5) and v.dtype == np.float32 and not v.any()
    assert spec.type_text == "float32[batch,3,?,len]"


@pytest.mark.parametrize(
    "elem, dtype",
    [
        (TensorProto.INT8, np.int8),
        (TensorProto.UINT16, np.uint16),
        (TensorProto.FLOAT16, np.float16),
        (TensorProto.BOOL, np.bool_),
    ],
)
def test_random_respects_dtype_and_range(elem: int, dtype: type) -> None:
    spec = _spec(elem, [1000])
    rng = np.random.default_rng(1)
    v = build_feed(spec, FeedRecipe("random", low=2, high=7), {}, rng)
    assert v.dtype == dtype and v.shape == (1000,)
    if dtype is not np.bool_:
        assert v.min() >= 2 and v.max() <= 7 and v.max() > v.min()


def test_normal_distribution_centres_on_the_range() -> None:
    spec = _spec(TensorProto.FLOAT, [20000])
    v = build_feed(
        spec,
        FeedRecipe("random", low=0, high=4, distribution="normal"),
        {},
        np.random.default_rng(0),
    )
    assert abs(float(v.mean()) - 2.0) < 0.05 and abs(float(v.std()) - 1.0) < 0.05


def test_ones_and_text() -> None:
    assert build_feed(
        _spec(TensorProto.INT64, [2]), FeedRecipe("ones"), {}, np.random.default_rng(0)
    ).tolist() == [1, 1]
    t = build_feed(
        _spec(TensorProto.STRING, [2]),
        FeedRecipe("text", text="hi|there"),
        {},
        np.random.default_rng(0),
    )
    assert t.dtype == object and t.tolist() == ["hi", "there"]


def test_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = _spec(TensorProto.FLOAT, [2])
    arr = np.array([1.5, 2.5], np.float32)
    np.save(tmp_path / "a.npy", arr)
    np.savez(tmp_path / "b.npz", x=arr * 2, other=arr)
    (tmp_path / "c.pb").write_bytes(numpy_helper.from_array(arr * 3).SerializeToString())
    rng = np.random.default_rng(0)
    for name, factor in (("a.npy", 1), ("b.npz", 2), ("c.pb", 3)):
        v = build_feed(spec, FeedRecipe("file", path=str(tmp_path / name)), {}, rng)
        assert np.array_equal(v, arr * factor)
    with pytest.raises(LoadError, match="does not exist"):
        build_feed(spec, FeedRecipe("file", path=str(tmp_path / "nope.npy")), {}, rng)


def test_image_nchw_imagenet_and_nhwc() -> None:
    img = np.zeros((4, 6, 3), np.uint8)
    img[..., 0] = 255  # red
    t = image_to_tensor(img, (1, 3, 2, 3), preset="ImageNet")
    assert t.shape == (1, 3, 2, 3) and t.dtype == np.float32
    assert np.allclose(t[0, 0], (1 - 0.485) / 0.229, atol=1e-5)
    assert np.allclose(t[0, 1], (0 - 0.456) / 0.224, atol=1e-5)
    h = image_to_tensor(img, (2, 5, 5, 3), preset="0..255", layout="NHWC")
    assert h.shape == (2, 5, 5, 3) and np.allclose(h[..., 0], 255) and np.allclose(h[..., 1], 0)
    grey = image_to_tensor(img, (1, 1, 4, 6), preset="0..1")
    assert np.allclose(grey, 1 / 3, atol=1e-5)


def test_resize_bilinear_keeps_gradients() -> None:
    ramp = np.tile(np.arange(8, dtype=np.float64)[None, :, None], (2, 1, 1))
    out = resize_bilinear(ramp, 2, 4)[0, :, 0]
    assert np.all(np.diff(out) > 0) and out[0] >= 0 and out[-1] <= 7


def test_recipe_round_trip() -> None:
    r = FeedRecipe("image", preset="-1..1", mean=[0.5])
    assert recipe_from_dict(recipe_to_dict(r)) == r
    assert recipe_from_dict({"mode": "bogus", "junk": 1}).mode == "random"


def test_sequence_input() -> None:
    tp = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [3]))
    v = build_feed(spec_of("s", tp), FeedRecipe("ones"), {}, np.random.default_rng(0))
    assert isinstance(v, list) and len(v) == 2 and np.array_equal(v[0], np.ones(3, np.float32))


def test_feed_inputs_are_a_sessions_inputs_without_its_plan() -> None:
    """The Run dock and the Compare window list a model's inputs from `feed_inputs` on
    the UI thread (a plan took seconds there at 100k nodes): the same list a Session
    gives, on every model of the onnx wheel that compiles, IR<4 defaults included."""
    import glob
    import os

    import onnx

    from onnxviz.errors import OnnxvizError
    from onnxviz.model.document import Document
    from onnxviz.runtime.session import Session, document_feed_inputs, feed_inputs

    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    models = [onnx.load(p) for p in sorted(glob.glob(os.path.join(folder, "*", "*", "model.onnx")))]
    # an initializer that is also an input (a default a feed may replace) is no feed
    defaulted = helper.make_model(
        helper.make_graph(
            [helper.make_node("Add", ["x", "bias"], ["y"])],
            "g",
            [
                helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                helper.make_tensor_value_info("bias", TensorProto.FLOAT, [2]),
            ],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
            [helper.make_tensor("bias", TensorProto.FLOAT, [2], [1.0, 2.0])],
        ),
        ir_version=3,
        opset_imports=[helper.make_opsetid("", 9)],
    )
    compared = 0
    for model in [defaulted, *models]:
        try:
            expected = Session(model).inputs
        except (OnnxvizError, NotImplementedError):
            continue  # a model our runtime refuses: nothing to agree with
        assert feed_inputs(model) == expected, model.graph.name
        # the Run dock's list, from the document's index (with sparse defaults too)
        assert document_feed_inputs(Document.from_model(model)) == expected, model.graph.name
        compared += 1
    assert compared > 100
    assert [n for n, _ in feed_inputs(defaulted)] == ["x"]
    assert [n for n, _ in document_feed_inputs(Document.from_model(defaulted))] == ["x"]
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("bias", TensorProto.FLOAT, [1], [1.0]),
        helper.make_tensor("idx", TensorProto.INT64, [1], [0]),
        [2],
    )
    defaulted.graph.ClearField("initializer")
    defaulted.graph.sparse_initializer.append(sparse)
    assert [n for n, _ in feed_inputs(defaulted)] == ["x"]
    assert [n for n, _ in document_feed_inputs(Document.from_model(defaulted))] == ["x"]
