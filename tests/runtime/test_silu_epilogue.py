"""A conv chain that ends in a SiLU written out as two nodes, g = Sigmoid(y) and Mul(y, g)
(torch's export of nn.SiLU: EfficientNet's, YOLO's activation after every conv), applies
it in the conv kernel's epilogue (activation code 4, native/activations.h): the conv's
output never makes a pass of its own through memory.

* Every compiled conv kernel (the packed GEMM of 1x1 convs, the direct conv, Winograd,
  the depthwise kernels, channels-last and NCHW) at every level gives, with the SiLU,
  exactly its own output without it times the Sigmoid kernel's value of that output:
  the stepped Sigmoid and Mul's bits.
* In a model the chain takes both nodes (either operand order of the Mul, after a
  BatchNormalization too) and gives the stepped run's numbers; a depthwise conv's (whose
  kernel has the stepped conv's bits) bit for bit, float64 too (no compiled kernel:
  the Sigmoid kernel and the product in place).
* A gate another node reads too, or a Mul of something else, stops the chain at the
  conv: the nodes run as they are.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from threadpoolctl import threadpool_limits

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import chain_program
from onnxviz.runtime.kernels.nn_conv import ACT_SILU, ConvWeight, prepared_direct
from onnxviz.runtime.kernels.nn_conv_nhwc import prepare_channels_last
from onnxviz.runtime.session import Session

from .differential import assert_modes_agree
from .native_modules import at_level, compiled_silu
from .test_channels_last import _Net, as_dtype

pytestmark = pytest.mark.numeric

NAN = math.nan
SILU = (ACT_SILU, NAN, NAN)

# (input shape, weight shape, attributes): the kernels' routes.
CONVS = {
    "pointwise": ((1, 24, 19, 21), (40, 24, 1, 1), {}),
    "pointwise_batch": ((2, 33, 9, 10), (17, 33, 1, 1), {}),
    "pointwise_strided": ((1, 16, 10, 10), (24, 16, 1, 1), {"strides": [2, 2]}),
    "depthwise_3x3": ((1, 40, 13, 12), (40, 1, 3, 3), {"group": 40, "pads": [1, 1, 1, 1]}),
    "depthwise_3x3_s2": (
        (1, 24, 14, 15),
        (24, 1, 3, 3),
        {"group": 24, "pads": [1, 1, 1, 1], "strides": [2, 2]},
    ),
    "depthwise_5x5": ((1, 48, 7, 7), (48, 1, 5, 5), {"group": 48, "pads": [2, 2, 2, 2]}),
    "full_3x3": ((1, 16, 12, 12), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "full_3x3_s2": ((1, 8, 15, 13), (20, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "winograd": ((1, 64, 28, 28), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    "stem_7x7": ((1, 3, 32, 32), (16, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
}


def _arrays(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    x_shape, w_shape, attrs = CONVS[name]
    rng = np.random.default_rng(len(name))
    # Wide values: the sigmoid's both branches, its saturation and its underflow.
    x = (rng.standard_normal(x_shape) * 4).astype(np.float32)
    x[0, 0, 0, 0] = np.nan  # read by every route (the strided ones too)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    # Read-only, as a fused chain's constants are (the packed GEMM keeps forms of those).
    w.flags.writeable = b.flags.writeable = False
    return x, w, b, {"kernel_shape": list(w_shape[2:]), **attrs}


def _gated(y: np.ndarray) -> np.ndarray:
    """The stepped run's SiLU on ``y`` where the kernels are on: the Sigmoid kernel's
    compiled float32 sigmoid, then the product."""
    return compiled_silu(np.asarray(y)).reshape(np.shape(y))


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.int32)


@pytest.mark.parametrize("level", native.levels())
@pytest.mark.parametrize("name", list(CONVS))
def test_every_channels_last_kernel_applies_silu_with_the_steps_bits(name: str, level: int) -> None:
    x, w, b, attrs = _arrays(name)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    # One thread: the packed GEMM's route (what a 1x1 conv takes in the benchmarks).
    with at_level("conv", level), threadpool_limits(1):
        runner = prepare_channels_last(nhwc, w, b, attrs)
        assert runner is not None
        plain, _ = runner.run(nhwc, None, None)
        got, done = runner.run(nhwc, None, SILU)
    assert done, "the kernel left the SiLU to the caller"
    if name == "winograd":  # its fused F(2x2, 3x3) conv from AVX2 up
        assert (getattr(runner, "fused_winograd", None) is not None) == (level >= native.AVX2)
    np.testing.assert_array_equal(_bits(got), _bits(_gated(plain)))
    assert np.isnan(got).any() and (got < 0).any() and (got > 1).any()


@pytest.mark.parametrize("level", native.levels())
@pytest.mark.parametrize("name", ["full_3x3", "full_3x3_s2", "stem_7x7", "depthwise_3x3"])
def test_the_nchw_direct_kernels_apply_silu_with_the_steps_bits(name: str, level: int) -> None:
    x, w, b, attrs = _arrays(name)
    with at_level("conv", level):
        call = prepared_direct(x, w, ConvWeight(w), b, attrs)
        assert call is not None
        plain = call(x, None, None)
        got = call(x, None, SILU)
    assert got is not None and plain is not None
    np.testing.assert_array_equal(_bits(got), _bits(_gated(plain)))


def _silu_model(
    kind: str, gate_first: bool, batch_norm: bool, dtype: Any = np.float32
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], str, str]:
    """x -> Conv (-> BatchNormalization) -> y * Sigmoid(y) -> a 3x3 conv (a reader, so a
    channels-last output may stay so); (model, feeds, the SiLU's output, the gate)."""
    net = _Net(np.random.default_rng(21))
    shape = (2, 24, 9, 11)
    net.shapes["x"] = shape
    k, group = {"depthwise": (3, 24), "pointwise": (1, 1), "plain": (3, 1)}[kind]
    y = net.conv("x", 24, k=k, group=group)
    if batch_norm:
        c = net.shapes[y][1]
        scale = [net.const(net.rng.uniform(0.5, 1.5, c)) for _ in range(2)]
        shift = [net.const(net.rng.uniform(-0.5, 0.5, c)) for _ in range(2)]
        ins = [y, scale[0], shift[0], shift[1], scale[1]]
        y = net.add("BatchNormalization", ins, net.shapes[y], epsilon=1e-5)
    g = net.add("Sigmoid", [y], net.shapes[y])
    z = net.add("Mul", [g, y] if gate_first else [y, g], net.shapes[y])
    last = net.conv(z, 8, k=3)
    model = net.model(shape, last)
    feeds = {"x": (3 * np.random.default_rng(4).standard_normal(shape)).astype(np.float32)}
    feeds = as_dtype(model, feeds, dtype)
    return model, feeds, z, g


@pytest.mark.parametrize("kind", ["depthwise", "pointwise", "plain"])
@pytest.mark.parametrize("gate_first", [False, True])
@pytest.mark.parametrize("batch_norm", [False, True])
def test_the_conv_chain_takes_the_silu_with_the_stepped_numbers(
    kind: str, gate_first: bool, batch_norm: bool
) -> None:
    model, feeds, z, _ = _silu_model(kind, gate_first, batch_norm)
    sess = Session(model)
    sess.run(feeds)
    assert [pn.op_type for pn in run_nodes(sess.plan)] == ["Conv", "Conv"]
    chain = run_nodes(sess.plan)[0].fused
    assert chain.kinds[-2:] == ["sig", "silu"]
    stepped = assert_modes_agree(model, feeds)
    assert (stepped[z] < 0).any() and (stepped[z] > 1).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_depthwise_conv_and_its_silu_give_the_stepped_bits(dtype: Any) -> None:
    """The depthwise kernel has the stepped conv's bits, so the whole chain does (float64:
    no compiled kernel, the Sigmoid kernel and the product in place on the conv's
    output)."""
    model, feeds, z, _ = _silu_model("depthwise", False, False, dtype)
    model.graph.output.append(helper.make_tensor_value_info(z, TensorProto.UNDEFINED, None))
    stepped = assert_modes_agree(model, feeds)
    for _ in range(2):  # the second run takes the compiled call the first one made
        got = Session(model).run(feeds)[z]
        np.testing.assert_array_equal(got, stepped[z])


def test_a_gate_read_elsewhere_or_another_product_stops_the_chain() -> None:
    model, feeds, _, g = _silu_model("depthwise", False, False)
    model.graph.output.append(helper.make_tensor_value_info(g, TensorProto.UNDEFINED, None))
    sess = Session(model)
    sess.run(feeds)
    assert [pn.op_type for pn in run_nodes(sess.plan)][:1] == ["Conv"]
    assert "Sigmoid" in [pn.op_type for pn in run_nodes(sess.plan)]
    assert_modes_agree(model, feeds)
    # y * Sigmoid(x): not a SiLU of the conv's output.
    model, feeds, z, g = _silu_model("depthwise", False, False)
    mul = next(n for n in model.graph.node if n.output[0] == z)
    mul.input[:] = [g, "x"]
    sess = Session(model)
    sess.run(feeds)
    assert "Mul" in [pn.op_type for pn in run_nodes(sess.plan)]
    assert_modes_agree(model, feeds)


def test_without_the_compiled_sigmoid_the_chain_runs_the_sigmoid_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chain module off (not built): the Sigmoid kernel runs numpy's sigmoid, so the
    conv's epilogue, whose sigmoid is the compiled one, is not asked; the chain applies
    the kernel and the product after the conv, the stepped run's bits."""
    monkeypatch.setattr(chain_program, "CHAIN", None)
    model, feeds, z, _ = _silu_model("depthwise", True, False)
    model.graph.output.append(helper.make_tensor_value_info(z, TensorProto.UNDEFINED, None))
    sess = Session(model)
    got = sess.run(feeds)[z]
    chain = run_nodes(sess.plan)[0].fused
    x = feeds["x"]
    assert chain.kinds[-2:] == ["sig", "silu"] and chain._kernel_act([x], x) is None
    stepped = assert_modes_agree(model, feeds)
    np.testing.assert_array_equal(got, stepped[z])
