"""Specialized calls of kernels that take a KernelContext (registry.specializer with a
context; prepared.py makes the node's context once): GroupQueryAttention's.

The unwatched run (the specialized call) must give the stepped run's bits (the kernel,
called by the executor with its context) on random calls of the compiled case, and on
every call outside it (which the specialized call hands to the kernel), including a
cos/sin cache a feed overrides (IR 3).  The context a maker gets names the node and its
outputs, and has no run generator (kernels that draw register no maker).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnxviz.runtime import registry
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import contrib_gqa
from onnxviz.runtime.session import Session
from tests.runtime.differential import stepped_values
from tests.runtime.native_modules import compiled
from tests.runtime.test_native_gqa import _case, _other_cases

pytestmark = pytest.mark.numeric

_NAMES = [
    "query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
    "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink", "k_scale",
    "v_scale", "q_norm_weight", "k_norm_weight",
]  # fmt: skip
_OUTPUTS = ["output", "present_key", "present_value"]


def _model(
    inputs: list[np.ndarray | None], attrs: dict[str, Any], *, ir3_caches: bool = False
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One GroupQueryAttention node: the cos/sin caches initializers (the constants the
    specialized call holds tables of), every other input fed."""
    names = [n if v is not None else "" for n, v in zip(_NAMES, inputs)]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(
        "GroupQueryAttention", names, _OUTPUTS, domain="com.microsoft", name="gqa", **attrs
    )
    feeds: dict[str, np.ndarray] = {}
    graph_inputs, inits = [], []
    for name, value in zip(names, inputs):
        if not name or value is None:
            continue
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        if name in ("cos_cache", "sin_cache"):
            inits.append(numpy_helper.from_array(value, name))
            if ir3_caches:
                graph_inputs.append(helper.make_tensor_value_info(name, elem, value.shape))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, elem, value.shape))
            feeds[name] = value
    graph = helper.make_graph(
        [node],
        "gqa",
        graph_inputs,
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in _OUTPUTS],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    if ir3_caches:
        model.ir_version = 3
    return model, feeds


def _assert_same_bits(model: onnx.ModelProto, feeds: dict[str, Any], what: str) -> Session:
    sess = Session(model)
    with np.errstate(all="ignore"):
        got = [sess.run(feeds) for _ in range(2)]  # the second run: the held tables
        want = stepped_values(model, feeds)
    for run in got:
        for name in _OUTPUTS:
            assert run[name].dtype == want[name].dtype, (what, name)
            np.testing.assert_array_equal(run[name], want[name], err_msg=f"{what}: {name}")
    return sess


def _specialized(sess: Session) -> bool:
    (pn,) = run_nodes(sess.plan)
    # The held attention (native/_gqa.c) fronts the specialized call.
    call = getattr(pn.call_many, "fallback", pn.call_many)
    return call is not None and "_specialize_gqa" in call.__qualname__


@pytest.mark.parametrize("seed", range(40))
def test_random_compiled_calls_give_the_kernels_bits(seed: int) -> None:
    inputs, attrs = _case(seed)
    model, feeds = _model(inputs, attrs)
    sess = _assert_same_bits(model, feeds, f"seed {seed}")
    assert _specialized(sess) == (contrib_gqa._COMPILED is not None)


@pytest.mark.parametrize("name", [c[0] for c in _other_cases()])
def test_calls_outside_the_compiled_case_go_to_the_kernel(name: str) -> None:
    inputs, attrs = next((i, a) for n, i, a in _other_cases() if n == name)
    model, feeds = _model(inputs, attrs)
    with np.errstate(all="ignore"):
        _assert_same_bits(model, feeds, name)


def test_a_fed_rotary_cache_is_not_read_from_the_held_tables() -> None:
    seed = next(i for i in range(100) if _case(i)[1].get("do_rotary"))
    inputs, attrs = _case(seed)
    model, feeds = _model(inputs, attrs, ir3_caches=True)
    sess = _assert_same_bits(model, feeds, "defaults")
    assert _specialized(sess) == (contrib_gqa._COMPILED is not None)
    cos, sin = inputs[7], inputs[8]
    assert cos is not None and sin is not None
    fed = {**feeds, "cos_cache": sin.copy(), "sin_cache": cos.copy()}  # swapped tables
    want = stepped_values(model, fed)
    got = sess.run(fed)
    np.testing.assert_array_equal(got["output"], want["output"])
    assert not np.array_equal(got["output"], sess.run(feeds)["output"])


def test_a_context_makers_context_names_the_node_and_cannot_draw(monkeypatch) -> None:
    seen: list[registry.KernelContext] = []

    def maker(attrs: dict[str, Any], known: tuple[Any, ...], n: int, ctx: Any) -> None:
        seen.append(ctx)
        return None  # the kernel runs

    monkeypatch.setitem(registry._SPECIALIZERS, contrib_gqa.group_query_attention, maker)
    inputs, attrs = _case(3)
    model, feeds = _model(inputs, attrs)
    _assert_same_bits(model, feeds, "kernel")
    (ctx,) = seen
    assert (ctx.n_outputs, ctx.node_name, ctx.output_names) == (3, "gqa", tuple(_OUTPUTS))
    assert ctx.opset == 1 and ctx.wants_output(2) and not ctx.wants_output(3)
    with pytest.raises(RuntimeError, match="no run generator"):
        _ = ctx.rng


def _split_model(opset: int, axis: int, n_out: int, *, sizes: list[int] | None,
                 num_outputs: int | None = None, ir3: bool = False) -> onnx.ModelProto:  # fmt: skip
    inputs, inits, attrs = ["x"], [], {"axis": axis}
    graph_inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)]
    if sizes is not None and opset >= 13:
        inputs.append("sizes")
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        if ir3:
            graph_inputs.append(
                helper.make_tensor_value_info("sizes", onnx.TensorProto.INT64, [len(sizes)])
            )
    elif sizes is not None:
        attrs["split"] = sizes
    if num_outputs is not None:
        attrs["num_outputs"] = num_outputs
    outs = [f"y{i}" for i in range(n_out)]
    graph = helper.make_graph(
        [helper.make_node("Split", inputs, outs, name="split", **attrs)],
        "split",
        graph_inputs,
        [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outs],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir3:
        model.ir_version = 3
    return model


@pytest.mark.parametrize(
    ("opset", "axis", "n_out", "sizes", "num_outputs"),
    [
        (11, 1, 3, [2, 3, 1], None),
        (11, -1, 2, None, None),
        (13, 0, 3, [1, 4, 1], None),
        (13, -2, 2, None, None),
        (18, 1, 3, None, 3),
    ],
)
def test_split_gives_the_kernels_parts_for_every_input_shape(
    opset: int, axis: int, n_out: int, sizes: list[int] | None, num_outputs: int | None
) -> None:
    model = _split_model(opset, axis, n_out, sizes=sizes, num_outputs=num_outputs)
    sess = Session(model)
    (pn,) = run_nodes(sess.plan)
    assert pn.call_many is not None and "_specialize_split" in pn.call_many.__qualname__
    rng = np.random.default_rng(opset)
    width = sum(sizes) if sizes else 6
    shapes = [(width, 6), (6, width), (width, width, 6), (2, width, width)]
    for shape in shapes * 2:  # a shape's second run: its kept cuts
        x = rng.standard_normal(shape).astype(np.float32)
        try:
            want = stepped_values(model, {"x": x})
        except AssertionError:  # the kernel refuses this shape: so must the call
            with pytest.raises(Exception, match="Split"):
                sess.run({"x": x})
            continue
        got = sess.run({"x": x})
        for i in range(n_out):
            name = f"y{i}"
            assert got[name].shape == want[name].shape, (shape, name)
            np.testing.assert_array_equal(got[name], want[name])


def test_split_sizes_a_feed_overrides_go_to_the_kernel() -> None:
    model = _split_model(13, 0, 2, sizes=[1, 3], ir3=True)
    sess = Session(model)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    assert sess.run({"x": x})["y0"].shape == (1, 2)
    assert sess.run({"x": x})["y0"].shape == (1, 2)
    got = sess.run({"x": x, "sizes": np.array([3, 1], np.int64)})
    np.testing.assert_array_equal(got["y0"], x[:3])
    np.testing.assert_array_equal(got["y1"], x[3:])
    assert sess.run({"x": x})["y0"].shape == (1, 2)


def _same_or_same_error(held: Any, args: list[Any]) -> None:
    """held(*args) gives its Python call's outputs to the bit, or raises its error."""
    with np.errstate(all="ignore"):
        try:
            want = held.fallback(*args)
        except Exception as exc:
            with pytest.raises(type(exc)):
                held(*args)
            return
        got = held(*args)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def test_the_held_attention_gives_its_python_calls_bits(monkeypatch) -> None:
    """The node's call is native/_gqa.c's held attention when the module is built: on the
    random compiled cases and on calls it hands on (another dtype, a strided query,
    seqlens of another batch, a past of other lengths per entry) the outputs of the
    Python call it fronts, bit for bit, or its error."""
    # The compiled module whatever ONNXVIZ_NATIVE says (off: the Python call runs alone).
    monkeypatch.setattr(contrib_gqa, "_COMPILED", compiled("gqa", "the numpy attention runs"))
    for seed in range(16):
        inputs, attrs = _case(seed)
        model, feeds = _model(inputs, attrs)
        sess = Session(model)
        sess.run(feeds)
        (pn,) = run_nodes(sess.plan)
        held = pn.call_many
        assert type(held).__name__ == "HeldGqa"
        values = dict(feeds)
        for name, slot in sess.plan.slots.items():
            for s_, v in sess.plan.constants:
                if s_ == slot:
                    values[name] = v
        args = [values.get(n) for n in _NAMES[: len(pn.inputs)]]
        _same_or_same_error(held, args)
        q, seqlens = args[0], args[5]
        _same_or_same_error(held, [q.astype(np.float64), *args[1:]])
        _same_or_same_error(held, [np.asfortranarray(q), *args[1:]])
        _same_or_same_error(held, [*args[:5], np.concatenate([seqlens, seqlens]), *args[6:]])
        if seqlens.size > 1:
            ragged = seqlens.copy()
            ragged[0] -= 1
            _same_or_same_error(held, [*args[:5], ragged, *args[6:]])
