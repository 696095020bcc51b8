"""An NCHW conv chain that ends in an activation the direct conv's epilogue knows (Relu,
Clip, HardSwish, a written-out HardSwish, a written-out SiLU) runs, in unwatched runs, as
one compiled call with the activation in the kernel (`fusion.ConvChain._conv_activated`, over
`nn_conv.prepared_direct`), 1-D convs as the 2-D conv of height 1 they run as; a
plain conv (no activation, no residual) takes the same call with none.

* The fused run gives the stepped run's bits for every such chain: 1-D and 2-D, strides,
  dilations, uneven pads, every activation, output channels that leave a partial vector.
* The compiled call is what runs (a spy on the chain counts it) and a new input shape
  makes a new call; a 1-D strided conv of fewer than 4 input channels, which the conv
  kernel keeps on its 1-D paths, keeps the plain route and still the same numbers.
* Without the compiled conv (ONNXVIZ_DIRECT_CONV=off) the chain runs as before.
* A chain with a residual of the output's shape hands it to the same call (into the
  kernel's epilogue, or added after it when it is not a C-contiguous float32 array):
  the stepped run's bits, either operand order, with and without an activation after.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import fusion, native
from onnxviz.runtime.session import Session

from .differential import RTOL, assert_modes_agree

pytestmark = pytest.mark.numeric

# "none": a plain conv chain, which takes the same prepared call with no activation
ACTIVATIONS = ["relu", "clip", "hardswish", "written_hardswish", "silu", "none"]


def _model(
    spatial: int, c: int, m: int, kernel: int, stride: int, dilation: int, pads: tuple[int, int],
    act: str, length: int = 23,
) -> tuple[onnx.ModelProto, dict[str, Any]]:  # fmt: skip
    """x -> Conv -> activation -> Flatten (so the conv's output stays channels-first)."""
    rng = np.random.default_rng([spatial, c, m, kernel, stride, dilation, *pads, len(act)])
    kshape = [kernel] * spatial
    w = (rng.standard_normal((m, c, *kshape)) / np.sqrt(c * kernel**spatial)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    conv_pads = [pads[0]] * spatial + [pads[1]] * spatial
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w", "b"],
            ["y"],
            pads=conv_pads,
            strides=[stride] * spatial,
            dilations=[dilation] * spatial,
        )  # fmt: skip
    ]
    if act == "none":
        nodes.append(helper.make_node("Identity", ["y"], ["a"]))
    elif act == "relu":
        nodes.append(helper.make_node("Relu", ["y"], ["a"]))
    elif act == "clip":
        inits += [
            numpy_helper.from_array(np.array(-0.25, np.float32), "lo"),
            numpy_helper.from_array(np.array(0.5, np.float32), "hi"),
        ]
        nodes.append(helper.make_node("Clip", ["y", "lo", "hi"], ["a"]))
    elif act == "hardswish":
        nodes.append(helper.make_node("HardSwish", ["y"], ["a"]))
    elif act == "silu":  # y * Sigmoid(y), as torch writes nn.SiLU
        nodes.append(helper.make_node("Sigmoid", ["y"], ["g"]))
        nodes.append(helper.make_node("Mul", ["g", "y"], ["a"]))
    else:  # x * HardSigmoid(x), alpha 1/6 as torch writes it
        nodes.append(helper.make_node("HardSigmoid", ["y"], ["g"], alpha=1.0 / 6.0, beta=0.5))
        nodes.append(helper.make_node("Mul", ["y", "g"], ["a"]))
    nodes.append(helper.make_node("Flatten", ["a"], ["out"], axis=1))
    shape = [2, c] + [length] * spatial
    graph = helper.make_graph(
        nodes,
        "conv_act",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[::97] = 0.0  # exact zeros and sums at the activations' corners
    return model, {"x": x}


def _compiled_conv() -> bool:
    """Whether the compiled conv runs here (not under ONNXVIZ_NATIVE=off)."""
    return native.load("conv") is not None


class _Spy:
    """Counts the chain's compiled activated calls that ran (returned an output): its
    prepared call's, and its held form's (the `quick` the node loop calls from the
    second run on: `held` counts those)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ran = 0
        self.with_addend = 0
        self.held = 0
        real = fusion.ConvChain._conv_activated
        real_hold = fusion.ConvChain._hold_nchw

        def spy(chain: Any, x: Any, prepared: Any, act: Any, addend: Any = None) -> Any:
            y = real(chain, x, prepared, act, addend)
            self.ran += y is not None
            self.with_addend += y is not None and addend is not None
            return y

        def hold(chain: Any, ins: Any, x: Any, act: Any, spread: bool = False) -> None:
            real_hold(chain, ins, x, act, spread)
            quick = chain.quick
            if quick is None:
                return

            def counted(*args: Any) -> Any:
                y = quick(*args)
                if y is not None:
                    self.ran += 1
                    self.held += 1
                    self.with_addend += chain.residual is not None
                return y

            chain.quick = counted

        monkeypatch.setattr(fusion.ConvChain, "_conv_activated", spy)
        monkeypatch.setattr(fusion.ConvChain, "_hold_nchw", hold)


GEOMETRIES = [
    # spatial, c, m, kernel, stride, dilation, pads
    (1, 16, 24, 3, 1, 1, (1, 1)),
    (1, 5, 17, 5, 1, 2, (4, 0)),  # a causal conv's pads, a partial channel vector
    (1, 8, 9, 3, 2, 1, (1, 2)),
    (2, 8, 16, 3, 1, 1, (1, 1)),
    (2, 3, 7, 3, 2, 1, (1, 0)),
    (2, 12, 20, 5, 1, 2, (2, 3)),
]


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "d{}c{}m{}k{}s{}".format(*g))
def test_the_activated_conv_gives_the_stepped_runs_bits(
    geometry: tuple[Any, ...], act: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy(monkeypatch)
    model, feeds = _model(*geometry, act)
    assert_modes_agree(model, feeds, rtol=0.0)
    if _compiled_conv():
        assert spy.ran >= 2  # the fused runs took the compiled call
        # a 2-D conv's second run: the call's held form, in C (a 1-D one's: the call)
        assert spy.held == (1 if geometry[0] == 2 else 0)
    else:
        assert spy.ran == 0


def test_a_new_input_shape_makes_a_new_call(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(monkeypatch)
    model, feeds = _model(1, 16, 24, 3, 1, 1, (1, 1), "relu")
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "t"
    session = Session(model)
    for length in (23, 40, 23):
        x = np.random.default_rng(length).standard_normal((2, 16, length)).astype(np.float32)
        got = session.run({"x": x})["out"]
        want = Session(model, fuse_ops=False, inplace_ops=False).run({"x": x})["out"]
        assert got.shape == (2, 24 * length)
        np.testing.assert_array_equal(got, want)
    assert spy.ran == (3 if _compiled_conv() else 0)


def test_a_strided_1d_conv_of_few_channels_keeps_the_plain_route(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spy = _Spy(monkeypatch)
    model, feeds = _model(1, 2, 8, 4, 2, 1, (1, 1), "relu")
    assert_modes_agree(model, feeds, rtol=0.0)
    assert spy.ran == 0


def test_without_the_direct_conv_the_chain_runs_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ONNXVIZ_DIRECT_CONV", "off")
    spy = _Spy(monkeypatch)
    model, feeds = _model(2, 8, 16, 3, 1, 1, (1, 1), "clip")
    assert_modes_agree(model, feeds, rtol=0.0)
    assert spy.ran == 0


def _residual_model(
    spatial: int, c: int, m: int, kernel: int, stride: int, dilation: int, pads: tuple[int, int],
    residual_first: bool, transposed: bool, relu: bool,
) -> tuple[onnx.ModelProto, dict[str, Any]]:  # fmt: skip
    """x -> Conv -> Add(residual) [-> Relu] -> Flatten, the residual a graph input of the
    conv's output shape, or with ``transposed`` that input's Transpose (a strided view:
    numpy adds it after the kernel)."""
    model, feeds = _model(spatial, c, m, kernel, stride, dilation, pads, "none")
    graph = model.graph
    y_shape = [2, m, *_out_spatial(model, feeds)]
    rng = np.random.default_rng(len(y_shape))
    residual = rng.standard_normal(y_shape).astype(np.float32)
    del graph.node[1:]  # keep the Conv
    r_name = "r"
    if transposed:
        perm = [0, 1, *range(spatial + 1, 1, -1)]
        feeds["r_t"] = np.ascontiguousarray(residual.transpose(perm))
        graph.input.append(
            helper.make_tensor_value_info("r_t", TensorProto.FLOAT, list(feeds["r_t"].shape))
        )
        graph.node.append(helper.make_node("Transpose", ["r_t"], ["r"], perm=perm))
    else:
        feeds["r"] = residual
        graph.input.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, y_shape))
    operands = [r_name, "y"] if residual_first else ["y", r_name]
    graph.node.append(helper.make_node("Add", operands, ["s"]))
    last = "s"
    if relu:
        graph.node.append(helper.make_node("Relu", ["s"], ["a"]))
        last = "a"
    graph.node.append(helper.make_node("Flatten", [last], ["out"], axis=1))
    return model, feeds


def _out_spatial(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[int]:
    """The conv's output spatial sizes (its first node's output, run stepped)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    return list(Session(probe, fuse_ops=False).run(feeds)["y"].shape[2:])


def _residual_rtol() -> float:
    """The stepped run's bits with the compiled conv; without it (ONNXVIZ_NATIVE=off) the
    chain's numpy conv takes the residual into its product's accumulator (conv_core's
    addend), a float32 rounding away from Conv then Add."""
    return 0.0 if _compiled_conv() else RTOL


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("residual_first", [False, True])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "d{}c{}m{}k{}s{}".format(*g))
def test_a_residual_goes_to_the_same_call_with_the_stepped_runs_bits(
    geometry: tuple[Any, ...], residual_first: bool, relu: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy(monkeypatch)
    model, feeds = _residual_model(*geometry, residual_first, False, relu)
    assert_modes_agree(model, feeds, rtol=_residual_rtol())
    if _compiled_conv():
        assert spy.with_addend >= 2  # the fused runs handed the residual to the call
        assert spy.held == (1 if geometry[0] == 2 and not relu else 0)
    else:
        assert spy.ran == 0


@pytest.mark.parametrize("geometry", GEOMETRIES[3:4] + GEOMETRIES[:1], ids=["2d", "1d"])
def test_a_strided_residual_is_added_after_the_kernel_with_the_same_bits(
    geometry: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy(monkeypatch)
    model, feeds = _residual_model(*geometry, False, True, True)
    assert_modes_agree(model, feeds, rtol=_residual_rtol())
    if _compiled_conv():
        assert spy.with_addend >= 2
        assert spy.held == 0  # a strided residual: the held call hands it back


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("residual", [False, True])
def test_a_patch_embedding_takes_its_prepared_call_with_the_stepped_bits(
    bias: bool, residual: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conv whose kernel equals its stride (a ViT's patch embedding, 16 x 16 patches of
    a 50 x 48 image: the edge that fills no patch left out) takes its prepared call
    (`nn_conv.prepared_patches`: the patches' product, then the bias and the residual as
    `conv_core` adds them) in both fused runs, with the stepped run's bits; it has no held
    form."""
    spy = _Spy(monkeypatch)
    rng = np.random.default_rng(31)
    inits = [
        numpy_helper.from_array(rng.standard_normal((24, 3, 16, 16)).astype(np.float32) * 0.05, "w")
    ]
    conv_ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b"))
        conv_ins.append("b")
    nodes = [helper.make_node("Conv", conv_ins, ["y"], kernel_shape=[16, 16], strides=[16, 16])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 50, 48])]
    feeds = {"x": rng.standard_normal((1, 3, 50, 48)).astype(np.float32)}
    out = "y"
    if residual:
        nodes.append(helper.make_node("Add", ["y", "r"], ["out"]))
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 24, 3, 3]))
        feeds["r"] = rng.standard_normal((1, 24, 3, 3)).astype(np.float32)
        out = "out"
    graph = helper.make_graph(
        nodes,
        "patches",
        inputs,
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert_modes_agree(model, feeds, rtol=0.0)
    assert spy.ran >= 2 and spy.held == 0
    assert spy.with_addend == (spy.ran if residual else 0)
