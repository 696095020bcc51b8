"""Expand's specialized call (tensor_shape._prepared_expand) keeps the view's shape and
strides for a frozen target and input layout: every run must still give the stepped
run's values, whatever changes between runs (the input's shape, layout or dtype, a fed
target's values in place, another target)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels.tensor_shape import expand
from onnxviz.runtime.session import Session

from .differential import stepped_values

pytestmark = pytest.mark.numeric

F = onnx.TensorProto.FLOAT
I64 = onnx.TensorProto.INT64


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], inits=()) -> Any:
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)], initializer=inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check_runs(model: onnx.ModelProto, feeds_list: list[dict[str, Any]]) -> Session:
    sess = Session(model)
    for feeds in feeds_list:
        got = sess.run(feeds)["y"]
        want = stepped_values(model, feeds)["y"]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        assert got.flags.writeable  # the session's copy, never the read-only view
    return sess


def _mask_model() -> onnx.ModelProto:
    """A TorchScript attention's key padding mask: [B, 1, 1, T] expanded to
    [B, heads, 1, T] with the target computed from the mask's shape at run time, then
    added to the scores, as nn.MultiheadAttention's export does each layer."""
    nodes = [
        helper.make_node("Shape", ["m"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i3"], ["t"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
        helper.make_node("Unsqueeze", ["t", "ax"], ["t1"]),
        helper.make_node("Concat", ["b1", "heads", "one", "t1"], ["target"], axis=0),
        helper.make_node("Expand", ["m", "target"], ["e"]),
        helper.make_node("Add", ["scores", "e"], ["y"]),
    ]
    inits = [
        onnx.numpy_helper.from_array(np.array(0, np.int64), "i0"),
        onnx.numpy_helper.from_array(np.array(3, np.int64), "i3"),
        onnx.numpy_helper.from_array(np.array([0], np.int64), "ax"),
        onnx.numpy_helper.from_array(np.array([4], np.int64), "heads"),
        onnx.numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    inputs = [
        helper.make_tensor_value_info("m", F, None),
        helper.make_tensor_value_info("scores", F, None),
    ]
    return _model(nodes, inputs, inits)


def test_a_computed_target_gives_the_stepped_values_as_the_mask_changes() -> None:
    rng = np.random.default_rng(0)

    def feeds(b: int, t: int) -> dict[str, Any]:
        return {
            "m": rng.standard_normal((b, 1, 1, t)).astype(np.float32),
            "scores": rng.standard_normal((b, 4, t, t)).astype(np.float32),
        }

    sess = _check_runs(_mask_model(), [feeds(2, 7), feeds(2, 7), feeds(3, 5), feeds(2, 7)])
    assert any(pn.op_type == "Expand" for pn in run_nodes(sess.plan))


def test_a_fed_target_is_read_on_every_run_and_a_frozen_one_kept() -> None:
    model = _model(
        [helper.make_node("Expand", ["x", "t"], ["y"])],
        [helper.make_tensor_value_info("x", F, None), helper.make_tensor_value_info("t", I64, [3])],
    )
    sess = Session(model)
    x = np.arange(3, dtype=np.float32).reshape(1, 3)
    target = np.array([2, 2, 3], np.int64)
    assert sess.run({"x": x, "t": target})["y"].shape == (2, 2, 3)
    target[:] = [4, 1, 3]  # changed in place: the same object, other values
    y = sess.run({"x": x, "t": target})["y"]
    assert y.shape == (4, 1, 3) and np.array_equal(y, np.broadcast_to(x, (4, 1, 3)))
    target.flags.writeable = False
    for _ in range(2):
        assert sess.run({"x": x, "t": target})["y"].shape == (4, 1, 3)
    # the same frozen target with another input layout, shape and dtype
    xt = np.arange(6, dtype=np.float32).reshape(3, 2).T[:1]  # [1, 3], not contiguous
    assert np.array_equal(sess.run({"x": xt, "t": target})["y"], np.broadcast_to(xt, (4, 1, 3)))
    x2 = np.arange(3, dtype=np.float32).reshape(3, 1)
    assert sess.run({"x": x2, "t": target})["y"].shape == (4, 3, 3)
    assert np.array_equal(sess.run({"x": x, "t": target})["y"], np.broadcast_to(x, (4, 1, 3)))
    # made writeable again and changed in place: its values are read again
    target.flags.writeable = True
    target[:] = [2, 5, 3]
    assert sess.run({"x": x, "t": target})["y"].shape == (2, 5, 3)


def test_the_kept_view_is_read_only_and_reads_the_new_input() -> None:
    from onnxviz.runtime.kernels.tensor_shape import _prepared_expand

    target = np.array([3, 1, 4], np.int64)
    target.flags.writeable = False
    call = _prepared_expand({}, (None, target), 1)
    for seed in range(3):  # the second and third calls take the kept shape and strides
        x = np.random.default_rng(seed).standard_normal((2, 1)).astype(np.float32)
        got = call(x, target)
        assert not got.flags.writeable and got.base is x
        np.testing.assert_array_equal(got, expand(x, target))
    # float64 input of the same shape and strides' byte count differs: not the kept view
    x64 = np.ones((2, 1), np.float64)
    assert call(x64, target).dtype == np.float64


@st.composite
def _cases(draw) -> tuple[tuple[int, ...], list[int], str]:
    rank = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    extra = draw(st.integers(0, 2))
    lead = draw(st.lists(st.integers(1, 3), min_size=extra, max_size=extra))
    tail = [draw(st.sampled_from([1, d] if d != 1 else [1, 2, 3])) for d in shape]
    layout = draw(st.sampled_from(["c", "transposed", "sliced"]))
    return shape, lead + tail, layout


@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(_cases(), _cases())
def test_random_expands_match_the_kernel_on_every_call(first, second) -> None:
    from onnxviz.runtime.kernels.tensor_shape import _prepared_expand

    calls = [_prepared_expand({}, (None, None), 1) for _ in range(2)]
    made = []
    for shape, want, layout in (first, second):
        target = np.array(want, np.int64)
        target.flags.writeable = False
        made.append((shape, layout, target))
    # first, first again (the kept view, on new data), second, first (kept again)
    for k, (shape, layout, target) in enumerate((made[0], made[0], made[1], made[0])):
        x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) * (k + 1)
        if layout == "transposed" and x.ndim > 1:
            x = np.ascontiguousarray(x.T).T
        elif layout == "sliced" and x.ndim:
            x = np.repeat(x, 2, axis=-1)[..., ::2]
        for call in calls:
            got = call(x, target)
            ref = expand(x, target)
            assert got.shape == ref.shape and got.dtype == ref.dtype
            np.testing.assert_array_equal(got, ref)
            assert not got.flags.writeable
