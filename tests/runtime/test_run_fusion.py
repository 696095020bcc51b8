"""Unwatched runs (Session.run) use fused node lists (fusion.py); stepping never does."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime.events import NodeFinished
from onnxviz.runtime.fusion import ConvChain, run_nodes
from onnxviz.runtime.kernels.nn_conv import direct_lanes
from onnxviz.runtime.session import Session

pytestmark = pytest.mark.numeric

F = TensorProto.FLOAT


def _conv_bn_model(*, extra_use: bool = False, bn_as_input: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
        numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "s"),
        numpy_helper.from_array(rng.uniform(-1, 1, 4).astype(np.float32), "beta"),
        numpy_helper.from_array(rng.uniform(-1, 1, 4).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "var"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "beta", "mean", "var"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["y"], name="relu"),
    ]
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if extra_use:
        outputs.append(helper.make_tensor_value_info("c", F, None))
    inputs = [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])]
    if bn_as_input:  # IR 3: an initializer listed as an input is a default a feed replaces
        inputs.append(helper.make_tensor_value_info("mean", F, [4]))
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3 if bn_as_input else 8
    return model


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Node-by-node result from a watched run (never fused)."""
    sess = Session(model)
    finished = [e for e in sess.steps(feeds) if isinstance(e, NodeFinished)]
    out: dict[str, np.ndarray] = {}
    for e in finished:
        out.update(e.outputs)
    return out


def test_conv_batchnorm_runs_as_one_node_with_the_same_result() -> None:
    model = _conv_bn_model()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    sess = Session(model)
    y = sess.run({"x": x})["y"]
    assert [pn.op_type for pn in run_nodes(sess.plan)] == ["Conv"]
    assert run_nodes(sess.plan)[0].kind == "fused"
    want = _reference(model, {"x": x})
    np.testing.assert_allclose(y, want["y"], rtol=1e-5, atol=1e-5)
    assert (y == 0).any() and (y > 0).any()  # the Relu was applied, not skipped
    # The fused chain is timed under the Conv's address; the others never ran.
    assert "main::conv" in sess.node_times
    assert "main::bn" not in sess.node_times and "main::relu" not in sess.node_times
    # Without fusion every node runs.
    plain = Session(model, fuse_ops=False)
    np.testing.assert_allclose(plain.run({"x": x})["y"], y, rtol=1e-5, atol=1e-5)
    assert "main::bn" in plain.node_times


def test_stepping_and_fetch_still_show_the_batchnorm_output() -> None:
    model = _conv_bn_model()
    x = np.ones((1, 3, 8, 8), np.float32)
    sess = Session(model)
    sess.run({"x": x})  # builds the fused list; must not change what stepping sees
    labels = [e.node.label for e in sess.steps({"x": x}) if isinstance(e, NodeFinished)]
    assert labels == ["conv", "bn", "relu"]
    got = sess.run({"x": x}, fetch=["c", "n"])
    want = _reference(model, {"x": x})
    np.testing.assert_allclose(got["c"], want["c"], rtol=1e-6)
    np.testing.assert_allclose(got["n"], want["n"], rtol=1e-6)


def test_conv_output_used_elsewhere_is_not_fused() -> None:
    model = _conv_bn_model(extra_use=True)
    sess = Session(model)
    x = np.ones((1, 3, 8, 8), np.float32)
    out = sess.run({"x": x})
    assert [pn.op_type for pn in run_nodes(sess.plan)] == ["Conv", "BatchNormalization", "Relu"]
    want = _reference(model, {"x": x})
    np.testing.assert_allclose(out["c"], want["c"], rtol=1e-6)


def test_fed_normalization_parameter_is_folded_again() -> None:
    model = _conv_bn_model(bn_as_input=True)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    sess = Session(model)
    default = sess.run({"x": x})["y"]
    mean = np.full(4, 0.25, np.float32)
    fed = sess.run({"x": x, "mean": mean})["y"]
    want = _reference(model, {"x": x, "mean": mean})["y"]
    np.testing.assert_allclose(fed, want, rtol=1e-5, atol=1e-5)
    assert not np.allclose(fed, default)
    np.testing.assert_allclose(sess.run({"x": x})["y"], default, rtol=1e-6)


def test_unwatched_run_of_a_long_chain_matches_stepping() -> None:
    one = numpy_helper.from_array(np.ones(1, np.float32), "one")
    nodes = []
    prev = "x"
    for i in range(300):
        nodes.append(helper.make_node("Add", [prev, "one"], [f"a{i}"], name=f"add{i}"))
        prev = f"a{i}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", F, [1])],
        [helper.make_tensor_value_info(prev, F, [1])],
        initializer=[one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = Session(model)
    x = np.zeros(1, np.float32)
    assert sess.run({"x": x})[prev][0] == 300.0
    assert x[0] == 0.0  # the caller's feed is never written
    # elementwise chains (fusion_elementwise.py) of as many steps as the compiled program
    # holds, less the room a step of two nodes needs (MAX_STEPS - 1)
    from onnxviz.runtime.kernels import chain_program

    assert len(sess.node_times) == -(-300 // (chain_program.MAX_STEPS - 1))
    plain = Session(model, fuse_ops=False)
    assert plain.run({"x": x})[prev][0] == 300.0
    assert len(plain.node_times) == 300


def _conv_affine_model(add_shape: tuple[int, ...]) -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "s"),
        numpy_helper.from_array(rng.uniform(-1, 1, 4).astype(np.float32), "beta"),
        numpy_helper.from_array(rng.uniform(-1, 1, 4).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "var"),
        numpy_helper.from_array(rng.uniform(0.5, 2, (4, 1, 1)).astype(np.float32), "k"),
        numpy_helper.from_array(rng.uniform(-1, 1, add_shape).astype(np.float32), "a"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "beta", "mean", "var"], ["n"]),
        helper.make_node("Mul", ["k", "n"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "a"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_conv_with_per_channel_mul_and_add_folds_into_one_conv() -> None:
    model = _conv_affine_model((1, 4, 1, 1))
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    sess = Session(model)
    y = sess.run({"x": x})["y"]
    assert [pn.kind for pn in run_nodes(sess.plan)] == ["fused"]
    assert list(sess.node_times) == ["main::conv"]
    np.testing.assert_allclose(y, _reference(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_a_constant_that_is_not_per_channel_runs_the_steps_one_by_one() -> None:
    model = _conv_affine_model((8, 8))  # varies over space: cannot go into a Conv bias
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    y = Session(model).run({"x": x})["y"]
    np.testing.assert_allclose(y, _reference(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)


def _plain_conv_model(*, weight_as_input: bool = False, relu_kept: bool = False) -> onnx.ModelProto:
    """x -> Conv 3x3 (8 -> 16 channels, 40x40: big enough for the shifted-GEMM path)
    -> Relu."""
    rng = np.random.default_rng(11)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    inputs = [helper.make_tensor_value_info("x", F, [1, 8, 40, 40])]
    if weight_as_input:
        inputs.append(helper.make_tensor_value_info("w", F, [16, 8, 3, 3]))
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if relu_kept:
        outputs.append(helper.make_tensor_value_info("c", F, None))
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 3 if weight_as_input else 8
    return model


def test_conv_then_relu_runs_as_one_node() -> None:
    model = _plain_conv_model()
    x = np.random.default_rng(2).standard_normal((1, 8, 40, 40)).astype(np.float32)
    sess = Session(model)
    y = sess.run({"x": x})["y"]
    assert [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)] == [("Conv", "fused")]
    want = _reference(model, {"x": x})
    np.testing.assert_allclose(y, want["y"], rtol=1e-5, atol=1e-4)
    assert float(y.min()) == 0.0
    # Second run: the wrapped weight is reused and gives the same numbers.
    np.testing.assert_array_equal(sess.run({"x": x})["y"], y)


def test_conv_whose_output_is_kept_runs_alone_and_relu_separately() -> None:
    model = _plain_conv_model(relu_kept=True)
    x = np.random.default_rng(3).standard_normal((1, 8, 40, 40)).astype(np.float32)
    sess = Session(model)
    out = sess.run({"x": x})
    kinds = [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)]
    assert kinds == [("Conv", "fused"), ("Relu", "kernel")]
    want = _reference(model, {"x": x})
    assert (out["c"] < 0).any()  # the kept Conv output is not clipped
    np.testing.assert_allclose(out["c"], want["c"], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out["y"], want["y"], rtol=1e-5, atol=1e-4)


def test_fed_conv_weight_replaces_the_wrapped_one() -> None:
    model = _plain_conv_model(weight_as_input=True)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 8, 40, 40)).astype(np.float32)
    sess = Session(model)
    default = sess.run({"x": x})["y"]
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    fed = sess.run({"x": x, "w": w})["y"]
    np.testing.assert_allclose(fed, _reference(model, {"x": x, "w": w})["y"], rtol=1e-5, atol=1e-4)
    assert not np.allclose(fed, default)
    np.testing.assert_array_equal(sess.run({"x": x})["y"], default)


def _linear_model(bias_shape: tuple[int, ...], *, bias_first: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(13)
    inits = [
        numpy_helper.from_array(rng.standard_normal((24, 40)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(bias_shape).astype(np.float32), "bias"),
    ]
    add_inputs = ["bias", "mm"] if bias_first else ["mm", "bias"]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
        helper.make_node("Add", add_inputs, ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2, 7, 24])],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "bias_shape, bias_first",
    [((40,), False), ((1, 1, 40), True), ((7, 40), False), ((2, 7, 40), True)],
)
def test_matmul_then_bias_add_runs_as_one_gemm(
    bias_shape: tuple[int, ...], bias_first: bool
) -> None:
    model = _linear_model(bias_shape, bias_first=bias_first)
    x = np.random.default_rng(9).standard_normal((2, 7, 24)).astype(np.float32)
    sess = Session(model)
    y = sess.run({"x": x})["y"]
    assert [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)] == [("MatMul", "fused")]
    want = _reference(model, {"x": x})["y"]
    assert y.shape == want.shape == (2, 7, 40)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert "main::add" not in sess.node_times


def test_the_held_product_follows_each_runs_input() -> None:
    """With one BLAS thread the fused MatMul + bias holds its packed product's call
    after the first run; runs of other row counts (a few rows: OpenBLAS), other ranks,
    a non-contiguous input and a fed weight (IR 3) give the stepped result all the same."""
    from threadpoolctl import threadpool_limits

    from onnxviz.runtime.kernels import packed_gemm

    model = _linear_model((40,))
    del model.graph.input[0].type.tensor_type.shape.dim[:]
    model.ir_version = 3
    model.graph.input.append(helper.make_tensor_value_info("w", F, [24, 40]))
    sess = Session(model)
    fused = run_nodes(sess.plan)[0].fused
    rng = np.random.default_rng(4)
    base = rng.standard_normal((64, 24)).astype(np.float32)
    w2 = rng.standard_normal((24, 40)).astype(np.float32)
    cases = [
        {"x": base[:16].reshape(2, 8, 24)},
        {"x": base[:40]},  # rank 2, 40 rows
        {"x": base[:3]},  # 3 rows: OpenBLAS
        {"x": base[:48].reshape(2, 24, 24)[:, :, ::-1].copy()[:, ::2]},  # strided rows
        {"x": base[:16].reshape(2, 8, 24), "w": w2},  # a fed weight
        {"x": base.reshape(4, 16, 24)},
    ]
    with threadpool_limits(1):
        for i, feeds in enumerate(cases):
            got = sess.run(feeds)["y"]
            want = _reference(model, feeds)["y"]
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(i))
            if i == 0 and packed_gemm.module() is not None:  # compiled kernels on
                assert fused._held is not None and fused._held[0] is sess.plan.constants[0][1]


def test_a_transposed_input_keeps_the_held_product_with_the_stepped_bits() -> None:
    """A TorchScript attention's projection reads Transpose's view: the fused MatMul +
    bias keeps one held product (made once, not again each run: that was 20 us a call)
    and gives the stepped run's bits, run after run."""
    from threadpoolctl import threadpool_limits

    from .differential import assert_stepped_bits

    model = _linear_model((40,))
    model.graph.node.insert(0, helper.make_node("Transpose", ["xt"], ["x"], perm=[1, 0, 2]))
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("xt", F, [7, 2, 24]))
    xt = np.random.default_rng(21).standard_normal((7, 2, 24)).astype(np.float32)
    with threadpool_limits(1):
        sess, _ = assert_stepped_bits(model, {"xt": xt}, runs=2)
        fused = next(pn.fused for pn in run_nodes(sess.plan) if pn.kind == "fused")
        held, quick = fused._held, fused.quick
        for _ in range(3):
            sess.run({"xt": xt})
            assert fused._held is held and fused.quick is quick


def _residual_model(op: str, residual_shape: tuple[int, ...], kernel: int = 1) -> onnx.ModelProto:
    """x -> Conv kernel x kernel (16 -> 16, same size) -> op(conv, r) -> Relu, with r a
    second graph input (a live value, like a ResNet shortcut)."""
    rng = np.random.default_rng(17)
    w = rng.standard_normal((16, 16, kernel, kernel)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[kernel // 2] * 4),
        helper.make_node(op, ["r", "c"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", F, [1, 16, 12, 12]),
            helper.make_tensor_value_info("r", F, list(residual_shape)),
        ],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("op", ["Add", "Sum"])
def test_conv_residual_add_and_relu_run_as_one_node(
    op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _residual_model(op, (1, 16, 12, 12))
    rng = np.random.default_rng(8)
    feeds = {
        "x": rng.standard_normal((1, 16, 12, 12)).astype(np.float32),
        "r": rng.standard_normal((1, 16, 12, 12)).astype(np.float32),
    }
    kept = feeds["r"].copy()
    sess = Session(model)
    y = sess.run(feeds)["y"]
    assert [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)] == [("Conv", "fused")]
    np.testing.assert_allclose(y, _reference(model, feeds)["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(feeds["r"], kept)  # the residual is read, never written
    assert set(sess.node_times) == {"main::conv"}
    # The weights are prepared once: a new residual array each run is not a new weight.
    prepared: list[int] = []
    original = ConvChain._prepare
    monkeypatch.setattr(
        ConvChain, "_prepare", lambda self, ins: prepared.append(1) or original(self, ins)
    )
    fresh = {"x": feeds["x"], "r": feeds["r"].copy()}
    np.testing.assert_array_equal(sess.run(fresh)["y"], y)
    assert prepared == []


@pytest.mark.parametrize("kernel", [1, 3])
@pytest.mark.parametrize(
    "shape", [(1, 16, 1, 1), (16, 1, 1), (1, 1, 1, 1), (1, 1), (1, 16, 12, 1), (16, 12, 12)]
)
def test_conv_residual_that_broadcasts_gives_steppings_bits(
    shape: tuple[int, ...], kernel: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value per channel added to a conv's output (a diffusion UNet's time embedding,
    after Unsqueezes) runs in the fused conv (the direct kernel's prepared call where it
    runs the conv), then numpy's broadcast add: the stepped Add's bits.  Other
    broadcasts run the steps one by one, with the same result."""
    model = _residual_model("Add", shape, kernel)
    rng = np.random.default_rng(9)
    feeds = {
        "x": rng.standard_normal((1, 16, 12, 12)).astype(np.float32),
        "r": rng.standard_normal(shape).astype(np.float32),
    }
    one_by_one: list[int] = []
    original = ConvChain._one_by_one
    monkeypatch.setattr(
        ConvChain,
        "_one_by_one",
        lambda self, ex, ins: one_by_one.append(1) or original(self, ex, ins),
    )
    prepared: list[bool] = []  # the direct kernel's prepared call ran the conv
    activated = ConvChain._conv_activated
    monkeypatch.setattr(
        ConvChain,
        "_conv_activated",
        lambda self, *a: prepared.append((got := activated(self, *a)) is not None) or got,
    )
    sess = Session(model)
    y = sess.run(feeds)["y"]
    assert y.shape == (1, 16, 12, 12)
    np.testing.assert_array_equal(y, _reference(model, feeds)["y"])
    assert [(pn.op_type, pn.kind) for pn in run_nodes(sess.plan)] == [("Conv", "fused")]
    spread_over_space = len(shape) <= 2 or all(d == 1 for d in shape[-2:])
    assert one_by_one == ([] if spread_over_space else [1])
    if spread_over_space and kernel == 3 and direct_lanes() == 16:
        # at AVX-512 a 16-channel 3x3 of 12 px runs the direct kernel NCHW
        assert prepared == [True]


def test_conv_residual_that_would_widen_the_output_names_the_add() -> None:
    model = _residual_model("Add", (2, 16, 1, 1))
    rng = np.random.default_rng(10)
    feeds = {
        "x": rng.standard_normal((1, 16, 12, 12)).astype(np.float32),
        "r": rng.standard_normal((2, 16, 1, 1)).astype(np.float32),
    }
    # Broadcasting makes a batch of 2 here: the Add's result, not the conv's shape.
    y = Session(model).run(feeds)["y"]
    np.testing.assert_array_equal(y, _reference(model, feeds)["y"])
    assert y.shape == (2, 16, 12, 12)


def test_two_conv_branches_meeting_at_one_add_both_run() -> None:
    """A ResNet downsample block: the main branch's last Conv and the shortcut's Conv both
    end at the same Add.  Only one chain may take the Add; the other Conv must still
    run (a Conv lost here gave wrong numbers silently)."""
    rng = np.random.default_rng(23)
    inits = [
        numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
        for name, shape in [
            ("w1", (8, 4, 3, 3)),
            ("w2", (16, 8, 1, 1)),
            ("wd", (16, 4, 1, 1)),
            ("b2", (16,)),
            ("bd", (16,)),
        ]
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ar"], name="r1"),
        helper.make_node("Conv", ["ar", "w2", "b2"], ["m"], name="c2"),
        helper.make_node("Conv", ["x", "wd", "bd"], ["d"], name="down"),
        helper.make_node("Add", ["m", "d"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="r2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2, 4, 10, 10])],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feeds = {"x": rng.standard_normal((2, 4, 10, 10)).astype(np.float32)}
    sess = Session(model)
    y = sess.run(feeds)["y"]
    ran = {pn.label for pn in run_nodes(sess.plan)}
    assert {"c1", "c2", "down"} <= ran
    np.testing.assert_allclose(y, _reference(model, feeds)["y"], rtol=1e-5, atol=1e-5)
    assert (y > 0).mean() > 0.2  # a real signal, not an all-zero output


@pytest.mark.parametrize(
    "name", ["resnet50", "inception_v2", "densenet121", "shufflenet", "squeezenet", "vgg19"]
)
def test_fused_lists_of_real_models_keep_the_plan_invariants(name: str) -> None:
    """Over the light models' fused node lists: every value is made before it is read,
    every in-place mark is earned where the node now sits, and nothing is freed twice."""
    import os

    from onnxviz.runtime.conformance import light_dir

    model = onnx.load(os.path.join(light_dir(), f"light_{name}.onnx"))
    plan = Session(model).plan
    nodes = run_nodes(plan)
    made = {s for s, _ in plan.constants} | {plan.slots[i.name] for i in model.graph.input}
    freed: set[int] = set()
    for pn in nodes:
        for s in pn.inputs:
            assert s < 0 or (s in made and s not in freed), (pn.label, s)
        for slot, dead in zip(pn.inputs, pn.inplace_dead or ()):
            assert not dead or slot in pn.free_after, pn.label
        made.update(s for s in pn.outputs if s >= 0)
        assert not freed & set(pn.free_after)
        freed.update(pn.free_after)
    assert len(nodes) < len(plan.nodes)  # something was fused
