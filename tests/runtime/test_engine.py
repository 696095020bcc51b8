"""The interpreter engine: plans, values, control flow, functions, errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime import registry
from onnxviz.runtime.events import NodeFinished
from onnxviz.runtime.invoke import UnsupportedOperator
from onnxviz.runtime.session import Session
from tests.runtime.engine_models import B, F, chain_model, if_model, loop_model, make, vi


def test_run_chain_and_outputs() -> None:
    x = np.array([1.0, 2.0, -3.0], dtype=np.float32)
    out = Session(chain_model()).run({"x": x})
    w = np.array([1.0, -5.0, 0.5], dtype=np.float32)
    np.testing.assert_allclose(out["y"], np.maximum(x + w, 0) * 2)


def test_plan_frees_dead_values_but_keeps_outputs() -> None:
    sess = Session(chain_model())
    slots = sess.plan.slots
    freed = {s for pn in sess.plan.nodes for s in pn.free_after}
    assert slots["s"] in freed and slots["r"] in freed
    assert slots["y"] not in freed
    sess.start({"x": np.zeros(3, np.float32)})
    sess.run_to("main::mul")
    values = sess.values()
    assert "r" in values  # input of the paused node is alive
    assert "s" not in values  # dead after relu
    assert sess.resume().reason == "finished"


def test_keep_intermediates_and_memory_cap_says_what_is_dropped() -> None:
    sess = Session(chain_model(), keep_intermediates=True)
    sess.run({"x": np.ones(3, np.float32)})
    assert set(sess.store.names("main")) >= {"x", "s", "r", "y"}  # type: ignore[union-attr]
    assert sess.dropped == []
    capped = Session(chain_model(), keep_intermediates=True, memory_cap_bytes=24)
    capped.run({"x": np.ones(3, np.float32)})
    dropped = [d.name for d in capped.dropped]
    assert dropped and "x" in dropped  # oldest first
    assert capped.store.used_bytes <= 24  # type: ignore[union-attr]


@pytest.mark.parametrize("c", [True, False])
def test_if_reads_outer_scope(c: bool) -> None:
    x = np.array([3.0, 4.0], np.float32)
    out = Session(if_model()).run({"c": np.array(c), "x": x})
    np.testing.assert_allclose(out["y"], x * 2 if c else x - 1)


@pytest.mark.parametrize(
    ("with_trip", "with_cond", "iterations"),
    [(True, True, 3), (True, False, 10), (False, True, 3)],  # ("", "") runs forever: see stepping
)
def test_loop_forms(with_trip: bool, with_cond: bool, iterations: int) -> None:
    # The body's cond output says "stop after 3 iterations"; the for-loop form (no cond
    # input) ignores it, as the spec says, and runs all 10.
    x = np.array([1.0, 2.0], np.float32)
    out = Session(loop_model(with_trip, with_cond)).run({"x": x})
    np.testing.assert_allclose(out["acc"], x * iterations)
    expected_scans = np.stack([x * (k + 1) for k in range(iterations)])
    np.testing.assert_allclose(out["scans"], expected_scans)


def test_loop_zero_iterations_gives_empty_scan_output() -> None:
    model = loop_model()
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array(0, np.int64), "trip"))
    out = Session(model).run({"x": np.ones(2, np.float32)})
    assert out["scans"].shape == (0, 2) and out["scans"].dtype == np.float32
    np.testing.assert_array_equal(out["acc"], np.zeros(2, np.float32))


def _scan_model(opset: int, reverse: bool = False, axis: int = 0) -> onnx.ModelProto:
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["y_t"]),
        ],
        "body",
        [vi("s_in", F, [2]), vi("x_t", F, [2])],
        [vi("s_out", F, [2]), vi("y_t", F, [2])],
    )
    if opset >= 9:
        attrs = {"num_scan_inputs": 1}
        if reverse:
            attrs["scan_input_directions"] = [1]
        if axis:
            attrs["scan_input_axes"] = [axis]
        node = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, **attrs)
    else:
        node = helper.make_node("Scan", ["", "s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1)
    return make(
        [node],
        [vi("s0", F, None), vi("xs", F, None)],
        [vi("s", F, None), vi("ys", F, None)],
        opset=opset,
    )


def test_scan9_forward_reverse_and_axis() -> None:
    xs = np.arange(6, dtype=np.float32).reshape(3, 2)
    s0 = np.zeros(2, np.float32)
    out = Session(_scan_model(11)).run({"s0": s0, "xs": xs})
    np.testing.assert_allclose(out["ys"], np.cumsum(xs, axis=0))
    np.testing.assert_allclose(out["s"], xs.sum(0))
    rev = Session(_scan_model(11, reverse=True)).run({"s0": s0, "xs": xs})
    np.testing.assert_allclose(rev["ys"], np.cumsum(xs[::-1], axis=0))
    ax = Session(_scan_model(11, axis=1)).run({"s0": s0, "xs": xs.T.copy()})
    np.testing.assert_allclose(ax["ys"], np.cumsum(xs, axis=0))


def test_scan8_batch_form() -> None:
    xs = np.arange(12, dtype=np.float32).reshape(2, 3, 2)  # batch 2, sequence 3
    s0 = np.zeros((2, 2), np.float32)
    out = Session(_scan_model(8)).run({"s0": s0, "xs": xs})
    np.testing.assert_allclose(out["ys"], np.cumsum(xs, axis=1))
    np.testing.assert_allclose(out["s"], xs.sum(1))


def test_sequence_map_with_tensor_argument() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "body",
        [vi("a", F, None), vi("b", F, None)],
        [vi("c", F, None)],
    )
    seq_t = helper.make_tensor_sequence_value_info
    node = helper.make_node("SequenceMap", ["seq", "t"], ["out"], body=body)
    model = make([node], [seq_t("seq", F, None), vi("t", F, [2])], [seq_t("out", F, None)])
    seq = [np.ones(2, np.float32), np.full(2, 3.0, np.float32)]
    out = Session(model).run({"seq": seq, "t": np.array([1.0, 2.0], np.float32)})
    assert isinstance(out["out"], list) and len(out["out"]) == 2
    np.testing.assert_allclose(out["out"][1], [4.0, 5.0])


def test_model_local_function_with_default_and_ref_attr() -> None:
    # scaled(x) = x * alpha, alpha an attribute of the call with a default of 3
    alpha_ref = helper.make_attribute_ref("value_float", AttributeProto_FLOAT())
    alpha_ref.ref_attr_name = "alpha"
    const = helper.make_node("Constant", [], ["a"])
    const.attribute.append(alpha_ref)
    fn = helper.make_function(
        "local",
        "Scaled",
        ["x"],
        ["y"],
        [const, helper.make_node("Mul", ["x", "a"], ["y"])],
        [helper.make_opsetid("", 18)],
        attributes=[],
    )
    fn.attribute_proto.append(helper.make_attribute("alpha", 3.0))
    calls = [
        helper.make_node("Scaled", ["x"], ["y1"], domain="local", name="call_default"),
        helper.make_node("Scaled", ["x"], ["y2"], domain="local", name="call_given", alpha=0.5),
    ]
    model = make(
        calls,
        [vi("x", F, [2])],
        [vi("y1", F, [2]), vi("y2", F, [2])],
        functions=[fn],
        extra_opsets={"local": 1},
    )
    x = np.array([2.0, 4.0], np.float32)
    out = Session(model).run({"x": x})
    np.testing.assert_allclose(out["y1"], x * 3)
    np.testing.assert_allclose(out["y2"], x * 0.5)


def AttributeProto_FLOAT() -> int:
    return onnx.AttributeProto.FLOAT


def test_model_local_function_overloads() -> None:
    def fn(overload: str, op: str) -> onnx.FunctionProto:
        f = helper.make_function(
            "local",
            "F",
            ["x"],
            ["y"],
            [helper.make_node(op, ["x"], ["y"])],
            [helper.make_opsetid("", 18)],
        )
        f.overload = overload
        return f

    n1 = helper.make_node("F", ["x"], ["a"], domain="local", overload="neg")
    n2 = helper.make_node("F", ["x"], ["b"], domain="local", overload="abs")
    model = make(
        [n1, n2],
        [vi("x", F, [2])],
        [vi("a", F, [2]), vi("b", F, [2])],
        functions=[fn("neg", "Neg"), fn("abs", "Abs")],
        extra_opsets={"local": 1},
    )
    model.ir_version = 10
    x = np.array([-1.0, 2.0], np.float32)
    out = Session(model).run({"x": x})
    np.testing.assert_allclose(out["a"], -x)
    np.testing.assert_allclose(out["b"], np.abs(x))


def test_schema_function_body_expands_when_no_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    registry.load_all_kernels()
    monkeypatch.delitem(registry._REGISTRY, ("", "Selu"), raising=False)
    node = helper.make_node("Selu", ["x"], ["y"], alpha=2.0, gamma=3.0, name="selu")
    model = make([node], [vi("x", F, [3])], [vi("y", F, [3])])
    sess = Session(model)
    assert sess.plan.nodes[0].kind == "schema_function"
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    events = list(sess.steps({"x": x}))
    paths = {e.node.graph_path for e in events if isinstance(e, NodeFinished)}
    assert "schema:ai.onnx:Selu" in paths  # the body's nodes ran in their own frame
    y = sess.outputs["y"]
    np.testing.assert_allclose(
        y, np.where(x > 0, 3.0 * x, 3.0 * (2.0 * np.exp(x) - 2.0)), rtol=1e-6
    )


def test_context_dependent_function_expands(monkeypatch: pytest.MonkeyPatch) -> None:
    registry.load_all_kernels()
    monkeypatch.delitem(registry._REGISTRY, ("", "LayerNormalization"), raising=False)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)
    model = make(
        [node], [vi("x", F, [2, 4]), vi("s", F, [4]), vi("b", F, [4])], [vi("y", F, [2, 4])]
    )
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    s = rng.standard_normal(4).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    y = Session(model).run({"x": x, "s": s, "b": b})["y"]
    mean = x.mean(-1, keepdims=True)
    ref = (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * s + b
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_kernel_failure_names_node_op_and_input_shapes() -> None:
    node = helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")
    model = make([node], [vi("a", F, None), vi("b", F, None)], [vi("c", F, None)])
    with pytest.raises(ExecutionError) as info:
        Session(model).run({"a": np.ones((2, 3), np.float32), "b": np.ones((4, 5), np.float32)})
    err = info.value
    assert err.node == "mm" and err.op_type == "MatMul" and err.graph_path == "main"
    assert "float32[2,3]" in str(err) and "float32[4,5]" in str(err)


def test_bad_feeds_are_clear_errors() -> None:
    sess = Session(chain_model())
    with pytest.raises(ExecutionError, match="missing"):
        sess.run({})
    with pytest.raises(ExecutionError, match="not an input"):
        sess.run({"x": np.ones(3, np.float32), "zz": np.ones(1)})
    with pytest.raises(ExecutionError, match="must be float32"):
        sess.run({"x": np.ones(3, np.float64)})


def test_unsupported_op_fails_only_when_reached() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="first"),
        helper.make_node("NoSuchOp", ["r"], ["y"], domain="acme", name="unknown"),
    ]
    model = make(nodes, [vi("x", F, [2])], [vi("y", F, [2])], extra_opsets={"acme": 1})
    sess = Session(model)
    sess.start({"x": np.ones(2, np.float32)})
    pause = sess.resume()
    assert pause.reason == "failed" and isinstance(sess.error, UnsupportedOperator)
    assert sess.current_node is not None and sess.current_node.label == "unknown"
    np.testing.assert_array_equal(sess.value("r"), np.ones(2, np.float32))


def test_cycle_is_reported_at_compile_time() -> None:
    nodes = [
        helper.make_node("Relu", ["b"], ["a"], name="n1"),
        helper.make_node("Relu", ["a"], ["b"], name="n2"),
    ]
    model = make(nodes, [vi("x", F, [2])], [vi("a", F, [2])])
    with pytest.raises(ExecutionError, match="cycle"):
        Session(model)


def test_unsorted_nodes_run_in_dependency_order() -> None:
    nodes = [
        helper.make_node("Relu", ["a"], ["y"], name="second"),
        helper.make_node("Neg", ["x"], ["a"], name="first"),
    ]
    model = make(nodes, [vi("x", F, [2])], [vi("y", F, [2])])
    out = Session(model).run({"x": np.array([-1.0, 1.0], np.float32)})
    np.testing.assert_allclose(out["y"], [1.0, 0.0])


def test_random_ops_follow_the_session_seed() -> None:
    node = helper.make_node("RandomUniform", [], ["y"], shape=[4], dtype=TensorProto.FLOAT)
    model = make([node], [], [vi("y", F, [4])])
    a = Session(model, seed=7).run({})["y"]
    b = Session(model, seed=7).run({})["y"]
    c = Session(model, seed=8).run({})["y"]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_initializer_only_nodes_are_folded_but_still_reported() -> None:
    shape = numpy_helper.from_array(np.array([3], np.int64), "shape")
    nodes = [
        helper.make_node(
            "ConstantOfShape",
            ["shape"],
            ["w"],
            value=helper.make_tensor("v", F, [1], [2.0]),
            name="cos",
        ),
        helper.make_node("Add", ["x", "w"], ["y"], name="add"),
    ]
    model = make(nodes, [vi("x", F, [3])], [vi("y", F, [3])], initializers=[shape])
    sess = Session(model)
    assert sess.plan.nodes[0].foldable and not sess.plan.nodes[1].foldable
    first = [e for e in sess.steps({"x": np.ones(3, np.float32)}) if isinstance(e, NodeFinished)]
    second = [e for e in sess.steps({"x": np.ones(3, np.float32)}) if isinstance(e, NodeFinished)]
    assert not first[0].folded and second[0].folded
    np.testing.assert_array_equal(second[0].outputs["w"], np.full(3, 2.0, np.float32))
    np.testing.assert_array_equal(sess.outputs["y"], np.full(3, 3.0, np.float32))


def test_constant_outputs_are_copies() -> None:
    c = numpy_helper.from_array(np.array([1.0], np.float32), "c")
    model = make(
        [helper.make_node("Identity", ["c"], ["y"])], [], [vi("y", F, [1])], initializers=[c]
    )
    sess = Session(model)
    sess.run({})["y"][0] = 99.0
    assert sess.run({})["y"][0] == 1.0


def test_optional_and_sequence_values_flow() -> None:
    opt_t = helper.make_tensor_type_proto(F, [2])
    nodes = [
        helper.make_node("Optional", ["x"], ["o"]),
        helper.make_node("OptionalHasElement", ["o"], ["has"]),
        helper.make_node("Optional", [], ["empty"], type=opt_t),
        helper.make_node("OptionalHasElement", ["empty"], ["has_empty"]),
    ]
    model = make(nodes, [vi("x", F, [2])], [vi("has", B, []), vi("has_empty", B, [])])
    out = Session(model).run({"x": np.ones(2, np.float32)})
    assert bool(out["has"]) is True and bool(out["has_empty"]) is False


def test_document_like_object_is_accepted() -> None:
    class Doc:
        model = chain_model()
        base_dir = None

    out = Session(Doc()).run({"x": np.zeros(3, np.float32)})
    assert out["y"].shape == (3,)
    with pytest.raises(TypeError):
        Session(object())


def test_bool_input_dtype_is_checked_for_cond() -> None:
    with pytest.raises(ExecutionError, match="must be bool"):
        Session(if_model()).run({"c": np.array(1, np.int64), "x": np.ones(2, np.float32)})
    assert B == TensorProto.BOOL


def test_initializer_listed_as_input_is_a_default_that_feeds_override() -> None:
    # IR 3 style: the initializer "w" is also a graph input; folding uses the default
    # only while nobody feeds "w".
    w = numpy_helper.from_array(np.array([2.0], np.float32), "w")
    nodes = [
        helper.make_node("Neg", ["w"], ["nw"], name="neg"),
        helper.make_node("Add", ["x", "nw"], ["y"], name="add"),
    ]
    model = make(nodes, [vi("x", F, [1]), vi("w", F, [1])], [vi("y", F, [1])], initializers=[w])
    model.ir_version = 3
    sess = Session(model)
    assert sess.input_names == ["x"]
    x = np.array([1.0], np.float32)
    assert sess.run({"x": x})["y"][0] == -1.0
    assert sess.run({"x": x})["y"][0] == -1.0  # folded value reused
    assert sess.run({"x": x, "w": np.array([5.0], np.float32)})["y"][0] == -4.0
    assert sess.run({"x": x})["y"][0] == -1.0


def test_kernel_older_than_schema_version_yields_to_the_schema_function(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry.load_all_kernels()
    monkeypatch.setitem(registry._REGISTRY, ("", "Selu"), [])
    registry.kernel("Selu", since=1)(lambda x, **_: x * 0)  # stands for a v1-only kernel
    node = helper.make_node("Selu", ["x"], ["y"])
    old = Session(make([node], [vi("x", F, [1])], [vi("y", F, [1])], opset=1))
    assert old.plan.nodes[0].kind == "kernel"
    new = Session(make([node], [vi("x", F, [1])], [vi("y", F, [1])], opset=22))
    assert new.plan.nodes[0].kind == "schema_function"
    y = new.run({"x": np.array([1.0], np.float32)})["y"]
    np.testing.assert_allclose(y, [1.0507009873554805], rtol=1e-6)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(1, 3), max_size=4),
    st.lists(st.integers(1, 3), max_size=4),
)
def test_a_dead_input_takes_a_binary_result_only_of_its_own_shape(
    a_shape: list[int], b_shape: list[int]
) -> None:
    """inplace.try_inplace on two dead inputs of any shapes: the result (numpy's, the
    kernel's operation) is written into an input only when it has the broadcast result's
    shape, and shapes that do not broadcast are left to the kernel (None)."""
    from onnxviz.runtime.inplace import try_inplace

    rng = np.random.default_rng(len(a_shape) * 7 + len(b_shape))
    # big enough to be taken in place: a trailing axis of 8192 on both
    a = rng.standard_normal((*a_shape, 8192)).astype(np.float32)
    b = rng.standard_normal((*b_shape, 8192)).astype(np.float32)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        shape = None
    want = None if shape is None else a + b
    ins = [a.copy(), b.copy()]
    got = try_inplace("Add", ins, (True, True))
    if shape is None:
        assert got is None
        return
    fits = [x.shape == shape for x in ins]
    if not any(fits):
        assert got is None
        return
    assert got is not None and got.shape == shape
    assert any(got is x for x, ok in zip(ins, fits) if ok)
    np.testing.assert_array_equal(got, want)


def test_inplace_elementwise_never_touches_live_views_feeds_or_constants() -> None:
    from onnxviz.runtime import executor as frames
    from onnxviz.runtime import inplace

    hits: list[str] = []
    original = frames.try_inplace

    def counting(op: str, ins: list, dead: tuple) -> object:
        result = original(op, ins, dead)
        if result is not None:
            hits.append(op)
        return result

    shp = numpy_helper.from_array(np.array([4], np.int64), "shp")
    c = numpy_helper.from_array(np.full((2, 2), 3.0, np.float32), "c")
    nodes = [
        helper.make_node("Exp", ["x"], ["a"], name="exp"),  # x is the caller's: not reused
        helper.make_node("Relu", ["a"], ["b"], name="relu"),  # a dead, private: reused
        helper.make_node("Reshape", ["b", "shp"], ["r"], name="view"),  # r is a view of b
        helper.make_node("Neg", ["b"], ["n"], name="neg"),  # b dead but viewed by r: not reused
        helper.make_node("Add", ["n", "c"], ["m"], name="add"),  # n reused, c constant kept
    ]
    model = make(
        nodes, [vi("x", F, [2, 2])], [vi("r", F, [4]), vi("m", F, [2, 2])], initializers=[shp, c]
    )
    x = np.arange(4, dtype=np.float32).reshape(2, 2).copy()
    x_before = x.copy()
    # Node by node (no fused chains, which make one fresh output of their own).
    sess = Session(model, fuse_ops=False)
    mp = pytest.MonkeyPatch()
    mp.setattr(frames, "try_inplace", counting)
    mp.setattr(inplace, "MIN_ELEMENTS", 0)  # the [2, 2] values here count as big
    try:
        out = sess.run({"x": x})
        again = sess.run({"x": x})
    finally:
        mp.undo()
    assert hits[:2] == ["Relu", "Add"]
    expected_b = np.maximum(np.exp(x_before), 0)
    np.testing.assert_allclose(out["r"], expected_b.reshape(4), rtol=1e-6)
    np.testing.assert_allclose(out["m"], -expected_b + 3.0, rtol=1e-6)
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_allclose(again["m"], out["m"])
    stepped = Session(model)
    events = [e for e in stepped.steps({"x": x}) if isinstance(e, NodeFinished)]
    relu_in = [e for e in events if e.node.label == "exp"][0].outputs["a"]
    np.testing.assert_allclose(relu_in, np.exp(x_before), rtol=1e-6)  # not overwritten when watched


def test_inplace_reuses_an_aligned_kernel_output_only_it_holds() -> None:
    """A compiled conv's output (nn_conv.aligned_empty: a 64-byte aligned view of a
    buffer up to 64 bytes longer) is reused like an array that owns its data, when
    nothing else holds the buffer; a view leaving more of its buffer unused is not."""
    from onnxviz.runtime import inplace
    from onnxviz.runtime.kernels.nn_conv import aligned_empty

    x = aligned_empty((100, 100))
    x[...] = 1.0
    assert inplace._reusable(x)
    other = x.base  # a second holder of the buffer
    assert not inplace._reusable(x)
    del other
    big = np.ones(100 * 100 + 100, np.float32)
    part = big[: 100 * 100].reshape(100, 100)
    del big
    assert not inplace._reusable(part)  # 400 bytes of its buffer unused


def test_undefined_value_in_main_graph_is_refused() -> None:
    node = helper.make_node("Add", ["x", "ghost"], ["y"], name="add")
    model = make([node], [vi("x", F, [1])], [vi("y", F, [1])])
    with pytest.raises(ExecutionError, match="'ghost'"):
        Session(model)


def test_scan_output_axis_and_reverse_output_direction() -> None:
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["y_t"]),
        ],
        "body",
        [vi("s_in", F, [2]), vi("x_t", F, [2])],
        [vi("s_out", F, [2]), vi("y_t", F, [2])],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "xs"],
        ["s", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_output_axes=[-1],
        scan_output_directions=[1],
    )
    model = make(
        [node], [vi("s0", F, None), vi("xs", F, None)], [vi("s", F, None), vi("ys", F, None)]
    )
    xs = np.arange(6, dtype=np.float32).reshape(3, 2)
    out = Session(model).run({"s0": np.zeros(2, np.float32), "xs": xs})
    np.testing.assert_allclose(out["ys"], np.cumsum(xs, axis=0)[::-1].T)


def test_recursive_function_is_a_clear_error() -> None:
    fn = helper.make_function(
        "local",
        "Forever",
        ["a"],
        ["b"],
        [helper.make_node("Forever", ["a"], ["b"], domain="local")],
        [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)],
    )
    call = helper.make_node("Forever", ["x"], ["y"], domain="local", name="call")
    model = make(
        [call], [vi("x", F, [1])], [vi("y", F, [1])], functions=[fn], extra_opsets={"local": 1}
    )
    with pytest.raises(ExecutionError, match="nest deeper"):
        Session(model).run({"x": np.ones(1, np.float32)})


def test_facade_runs_a_real_document(tmp_path: object) -> None:
    import onnxviz
    from onnxviz.model.document import Document

    path = f"{tmp_path}/chain.onnx"
    onnx.save(chain_model(), path)
    doc = onnxviz.open_model(path)
    assert isinstance(doc, Document)
    out = onnxviz.Session(doc).run({"x": np.ones(3, np.float32)})
    np.testing.assert_allclose(out["y"], [4.0, 0.0, 3.0])


def test_unexpected_interpreter_exception_becomes_execution_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from onnxviz.runtime import control_flow

    def broken(*args: object, **kwargs: object) -> object:
        raise KeyError("boom")

    monkeypatch.setattr(control_flow, "_if_frame", broken)  # (both If paths)
    sess = Session(if_model())
    with pytest.raises(ExecutionError, match="interpreter failed: KeyError") as info:
        sess.run({"c": np.array(True), "x": np.ones(2, np.float32)})
    assert info.value.node == "cond" and sess.state == "failed"
    sess.start({"c": np.array(True), "x": np.ones(2, np.float32)})
    assert sess.resume().reason == "failed"


def test_run_can_fetch_intermediate_values() -> None:
    sess = Session(chain_model())
    x = np.array([1.0, 1.0, 1.0], np.float32)
    out = sess.run({"x": x}, fetch=["s", "r", "x", "w"])
    np.testing.assert_allclose(out["s"], [2.0, -4.0, 1.5])
    np.testing.assert_allclose(out["r"], [2.0, 0.0, 1.5])  # not overwritten in place later
    np.testing.assert_allclose(out["y"], [4.0, 0.0, 3.0])
    assert out["x"] is x and out["w"].shape == (3,)
    with pytest.raises(ExecutionError, match="cannot fetch nope"):
        sess.run({"x": x}, fetch=["nope"])


def test_kept_subgraph_values_are_those_of_the_last_iteration() -> None:
    sess = Session(loop_model(), keep_intermediates=True)
    x = np.array([1.0, 2.0], np.float32)
    sess.run({"x": x})
    np.testing.assert_allclose(sess.intermediates[("main/body:loop", "acc_out")], x * 3)
    assert int(sess.intermediates[("main/body:loop", "i")]) == 2
    np.testing.assert_allclose(sess.value("scans"), np.stack([x, x * 2, x * 3]))


def test_folded_values_are_read_only_constants_and_outputs_stay_copies() -> None:
    """A foldable node's outputs are kept for every later run read-only (kernels may key
    the forms they make of them on them, as on initializers); a graph output that is
    one is still handed out as the caller's own copy."""
    shape = numpy_helper.from_array(np.array([3], np.int64), "shape")
    nodes = [
        helper.make_node(
            "ConstantOfShape", ["shape"], ["w"], value=helper.make_tensor("v", F, [1], [2.0])
        ),
        helper.make_node("Add", ["x", "w"], ["y"]),
    ]
    model = make(nodes, [vi("x", F, [3])], [vi("y", F, [3]), vi("w", F, [3])], initializers=[shape])
    sess = Session(model)
    x = np.ones(3, np.float32)
    sess.run({"x": x})
    folded = [v for v in sess.plan.folded_values if isinstance(v, np.ndarray)]
    assert folded and not any(v.flags.writeable for v in folded)
    out = sess.run({"x": x})
    out["w"][0] = 99.0  # the caller's copy
    np.testing.assert_array_equal(sess.run({"x": x})["w"], np.full(3, 2.0, np.float32))


def test_a_recurrent_weight_made_by_folded_nodes_is_packed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dynamo export slices and concatenates an LSTM's weights in nodes of initializers:
    folded once, read-only, so the kernel's packed forms of them are made once."""
    from onnxviz.runtime.kernels import nn_rnn

    rng = np.random.default_rng(3)
    hidden, n_in = 8, 5
    parts = {
        f"{k}{i}": (rng.standard_normal((1, 2 * hidden, n)) * 0.3).astype(np.float32)
        for k, n in (("w", n_in), ("r", hidden))
        for i in range(2)
    }
    nodes = [
        helper.make_node("Concat", ["w0", "w1"], ["W"], axis=1),
        helper.make_node("Concat", ["r0", "r1"], ["R"], axis=1),
        helper.make_node("LSTM", ["x", "W", "R"], ["Y"], hidden_size=hidden),
    ]
    model = make(
        nodes,
        [vi("x", F, [1, 2, n_in])],
        [vi("Y", F, None)],
        initializers=[numpy_helper.from_array(v, k) for k, v in parts.items()],
    )
    builds: list[str] = []
    derived = nn_rnn.derived

    def counting(kind: str, sources: Any, params: Any, build: Any) -> Any:
        def counted() -> Any:
            builds.append(kind)
            return build()

        return derived(kind, sources, params, counted)

    monkeypatch.setattr(nn_rnn, "derived", counting)
    sess = Session(model)
    feeds = {"x": rng.standard_normal((1, 2, n_in)).astype(np.float32)}
    first = sess.run(feeds)["Y"]
    made = len(builds)
    for _ in range(3):
        np.testing.assert_array_equal(sess.run(feeds)["Y"], first)
    assert made and len(builds) == made, builds  # nothing rebuilt after the first run


def _div_model() -> onnx.ModelProto:
    return make(
        [helper.make_node("Div", ["x", "z"], ["y"])],
        [vi("x", F, [2]), vi("z", F, [2])],
        [vi("y", F, [2])],
    )


def test_a_run_ignores_floating_point_warnings_and_restores_the_callers_state() -> None:
    """Overflow and 0/0 are a run's results (inf, NaN), never warnings or errors, even
    under a caller's np.errstate(all="raise"); the caller's state is back after a run
    that finishes and after one that fails."""
    sess = Session(_div_model())
    feeds = {"x": np.array([1.0, 0.0], np.float32), "z": np.zeros(2, np.float32)}
    with np.errstate(all="raise", under="warn"):
        before = np.geterr()
        y = sess.run(feeds)["y"]
        assert np.isposinf(y[0]) and np.isnan(y[1])
        assert np.geterr() == before
        with pytest.raises(ExecutionError):
            sess.run({"x": feeds["x"]})  # z missing: the run fails
        assert np.geterr() == before
        with np.errstate(divide="ignore"):  # another enclosing state, then this one again
            assert np.isposinf(sess.run(feeds)["y"][0])
            assert np.geterr()["divide"] == "ignore" and np.geterr()["invalid"] == "raise"
        assert np.isnan(sess.run(feeds)["y"][1])
        assert np.geterr() == before
