"""QuantizeLinear -> DequantizeLinear pairs as one float pass in unwatched runs
(fusion_qdq.py): bit for bit the stepped result."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import int8_products
from onnxviz.runtime.session import Session
from tests.runtime.differential import assert_modes_agree, stepped_values
from tests.runtime.native_modules import at_level, compiled

pytestmark = pytest.mark.numeric


_ZP = np.array(3, np.int8)
_SCALE = np.array(0.05, np.float32)


def _qdq_model(
    *,
    zp: np.ndarray | None = _ZP,
    scale: np.ndarray = _SCALE,
    zp2: np.ndarray | None | str = "same",
    scale2: np.ndarray | None = None,
    opset: int = 13,
    outputs: tuple[str, ...] = ("y",),
    second_reader: bool = False,
    q_attrs: dict[str, Any] | None = None,
) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(scale, "s")]
    q_ins = ["x", "s"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "zp"))
        q_ins.append("zp")
    dq_ins = ["q", "s2" if scale2 is not None else "s"]
    if scale2 is not None:
        inits.append(numpy_helper.from_array(scale2, "s2"))
    if isinstance(zp2, str):
        if zp is not None:
            dq_ins.append("zp")
    elif zp2 is not None:
        inits.append(numpy_helper.from_array(zp2, "zp2"))
        dq_ins.append("zp2")
    nodes = [
        helper.make_node("QuantizeLinear", q_ins, ["q"], name="quant", **(q_attrs or {})),
        helper.make_node("DequantizeLinear", dq_ins, ["y"], name="dequant"),
    ]
    if second_reader:
        nodes.append(helper.make_node("DequantizeLinear", dq_ins, ["y2"], name="dequant2"))
    qtype = helper.np_dtype_to_tensor_dtype(zp.dtype) if zp is not None else TensorProto.UINT8
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 40])],
        [
            helper.make_tensor_value_info(o, qtype if o == "q" else TensorProto.FLOAT, None)
            for o in outputs
        ],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _x(scale: float = 0.05) -> np.ndarray:
    """Values across the whole integer range and beyond, with exact .5 ties."""
    rng = np.random.default_rng(4)
    x = rng.uniform(-2000, 2000, (2, 3, 40)) * scale / 8
    x[0, 0, :8] = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e6, -1e6]) * scale
    return x.astype(np.float32)


def _pairs(model: onnx.ModelProto) -> int:
    return sum(type(pn.fused).__name__ == "QdqPair" for pn in run_nodes(Session(model).plan))


def _assert_bitwise(model: onnx.ModelProto, x: np.ndarray) -> None:
    want = stepped_values(model, {"x": x})
    got = Session(model).run({"x": x})
    for name, value in got.items():
        assert value.dtype == want[name].dtype
        np.testing.assert_array_equal(value, want[name], err_msg=name)


_ZERO_POINTS = {
    "int8": np.array(3, np.int8),
    "uint8": np.array(130, np.uint8),
    "no-zero-point": None,
}


@pytest.mark.parametrize(
    ("zp", "opset"),
    [
        *((zp, opset) for zp in _ZERO_POINTS.values() for opset in (10, 13, 21)),
        (np.array(-7, np.int16), 21),  # 16-bit types from opset 21 on
    ],
    ids=[*(f"{k}-opset{o}" for k in _ZERO_POINTS for o in (10, 13, 21)), "int16-opset21"],
)
def test_pair_is_one_node_with_the_stepped_bits(zp: np.ndarray | None, opset: int) -> None:
    model = _qdq_model(zp=zp, opset=opset)
    assert _pairs(model) == 1
    _assert_bitwise(model, _x())


def test_other_scale_and_zero_point_on_the_way_back() -> None:
    model = _qdq_model(zp2=np.array(-5, np.int8), scale2=np.array(0.3, np.float32))
    assert _pairs(model) == 1
    _assert_bitwise(model, _x())


def test_nan_inputs_run_the_nodes_themselves() -> None:
    model = _qdq_model()
    x = _x()
    x[1, 2, 5] = np.nan
    _assert_bitwise(model, x)


@pytest.mark.parametrize(
    "variant",
    [
        {"outputs": ("y", "q")},  # the integer value is a graph output
        {"second_reader": True, "outputs": ("y", "y2")},  # two readers of it
    ],
)
def test_a_visible_integer_value_stops_the_pairing(variant: dict[str, Any]) -> None:
    model = _qdq_model(**variant)
    assert _pairs(model) == 0
    _assert_bitwise(model, _x())


@pytest.mark.parametrize(
    "variant",
    [
        {"scale": np.full(3, 0.05, np.float32), "zp": np.array([1, 2, 3], np.int8)},
        {"q_attrs": {"output_dtype": TensorProto.UINT8}, "zp": None, "opset": 21},
        {"zp2": np.array(1, np.uint8)},  # zero point type differs: the kernel's error
    ],
    ids=["per-axis", "output-dtype", "mismatched-zero-point"],
)
def test_what_the_float_pass_does_not_cover_runs_the_nodes(variant: dict[str, Any]) -> None:
    model = _qdq_model(**variant)
    assert _pairs(model) == 1
    if "zp2" in variant:
        with pytest.raises(ExecutionError, match="dequant"):
            Session(model).run({"x": _x()})
        return
    _assert_bitwise(model, _x())
    assert_modes_agree(model, {"x": _x()})


# -- QDQ convs: which run float and channels-last ---------------------------------------------


def _qdq_conv_net(
    depthwise: bool, seed: int = 8, sigmoid: bool = False
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """onnxruntime.quantization's S8S8 QDQ form of a small MobileNet-style net: x -> Q/DQ
    -> 3x3/2 stem of 3 channels -> Relu -> Q/DQ -> 3x3 conv (depthwise, or a plain one of
    16 channels) -> Q/DQ [-> Sigmoid -> Q/DQ] -> 1x1 conv -> Q/DQ -> y; int8 weights per
    output channel."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def qdq(v: str, scale: float) -> str:
        inits.append(numpy_helper.from_array(np.array(scale, np.float32), f"{v}_s"))
        inits.append(numpy_helper.from_array(np.array(0, np.int8), f"{v}_z"))
        nodes.append(helper.make_node("QuantizeLinear", [v, f"{v}_s", f"{v}_z"], [f"{v}_q"]))
        nodes.append(
            helper.make_node("DequantizeLinear", [f"{v}_q", f"{v}_s", f"{v}_z"], [f"{v}_d"])
        )
        return f"{v}_d"

    def conv(v: str, name: str, m: int, c: int, k: int, group: int = 1, **attrs: Any) -> str:
        w = rng.integers(-127, 128, (m, c // group, k, k)).astype(np.int8)
        ws = rng.uniform(0.002, 0.01, m).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"{name}_w"))
        inits.append(numpy_helper.from_array(ws, f"{name}_ws"))
        inits.append(numpy_helper.from_array(np.zeros(m, np.int8), f"{name}_wz"))
        inits.append(numpy_helper.from_array(rng.normal(0, 0.1, m).astype(np.float32), f"{name}_b"))
        nodes.append(
            helper.make_node(
                "DequantizeLinear",
                [f"{name}_w", f"{name}_ws", f"{name}_wz"],
                [f"{name}_wd"],
                axis=0,
            )
        )
        nodes.append(
            helper.make_node(
                "Conv",
                [v, f"{name}_wd", f"{name}_b"],
                [name],
                name=name,
                kernel_shape=[k, k],
                group=group,
                **attrs,
            )
        )
        return name

    v = qdq("x", 0.03)
    v = conv(v, "stem", 16, 3, 3, strides=[2, 2], pads=[1, 1, 1, 1])
    nodes.append(helper.make_node("Relu", [v], ["stem_r"]))
    v = qdq("stem_r", 0.02)
    v = conv(v, "mid", 16, 16, 3, group=16 if depthwise else 1, pads=[1, 1, 1, 1])
    v = qdq(v, 0.05)
    if sigmoid:
        nodes.append(helper.make_node("Sigmoid", [v], ["gate"]))
        v = qdq("gate", 1 / 255)
    v = conv(v, "point", 24, 16, 1)
    v = qdq(v, 0.1)
    graph = helper.make_graph(
        nodes, "qdq_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 33, 30])],
        [helper.make_tensor_value_info(v, TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model, {"x": rng.normal(0, 1.0, (2, 3, 33, 30)).astype(np.float32)}


@pytest.mark.parametrize("depthwise", [True, False])
def test_qdq_convs_that_pay_run_float_channels_last(depthwise: bool) -> None:
    """In a model of depthwise convs (which the int8 kernel does not run) the 1x1 convs run
    float too, channels-last with the depthwise ones, the quantize-dequantize pair between
    them over the same layout; a short 3x3 stem of 3 channels is float in any model.
    Without depthwise convs the 1x1 conv and the plain 3x3 are integer products (when the
    int8 kernel is there).  The stepped run's values within one quantization step."""
    from onnxviz.runtime.fusion_qdq_conv import int8_module

    model, feeds = _qdq_conv_net(depthwise)
    session = Session(model)
    session.run(feeds)
    kinds = {
        pn.label: type(pn.fused).__name__ for pn in run_nodes(session.plan) if pn.op_type == "Conv"
    }
    integer = int8_module() is not None
    assert kinds["stem"] == "ConvChain"
    if depthwise:
        assert kinds == {"stem": "ConvChain", "mid": "ConvChain", "point": "ConvChain"}
        if native.level() is not None:  # the compiled kernels make the layout pay
            chains = {pn.label: pn.fused for pn in run_nodes(session.plan) if pn.op_type == "Conv"}
            assert chains["mid"].layout.emit  # through the pair to the 1x1 conv
    else:
        want = "QdqConv" if integer else "ConvChain"
        assert kinds == {"stem": "ConvChain", "mid": want, "point": want}
    assert_modes_agree(model, feeds, steps={model.graph.output[0].name: 0.1})


def test_a_chain_of_pairs_keeps_the_convs_channels_last() -> None:
    """Depthwise conv -> pair -> Sigmoid -> pair -> 1x1 conv: the pairs and the Sigmoid are
    one elementwise chain (a table of the codes with the int8 kernels at AVX2 or better:
    fusion_qdq_table), which runs over the conv's channels-last buffer and hands the
    layout on (taking it back to NCHW made the convs around it several times slower);
    the stepped values within one quantization step."""
    model, feeds = _qdq_conv_net(True, sigmoid=True)
    session = Session(model)
    session.run(feeds)
    nodes = run_nodes(session.plan)
    # find_qdq_tables' own condition: the compiled int8 module at AVX2 or better.
    kind = "QdqTable" if int8_products.module() is not None else "ElementwiseChain"
    assert sum(type(pn.fused).__name__ == kind for pn in nodes) == 1
    if native.level() is not None and native.load("chain") is not None:
        chains = {pn.label: pn.fused for pn in nodes if pn.op_type == "Conv"}
        assert chains["mid"].layout.emit  # through the chain to the 1x1 conv
    # The chain itself on a channels-last value: its result channels-last, the same bits
    # as on the NCHW copy.
    chain = next(pn for pn in nodes if type(pn.fused).__name__ == kind)
    constants = dict(session.plan.constants)
    x = np.random.default_rng(3).normal(0, 0.3, (2, 16, 17, 15)).astype(np.float32)
    last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    ins = [constants.get(s) for s in chain.inputs]
    ex = session._executor  # (the table's steps run once through its kernels)
    got = chain.fused(ex, [last, *ins[1:]])[0]
    want = chain.fused(ex, [x, *ins[1:]])[0]
    assert got.transpose(0, 2, 3, 1).flags.c_contiguous
    np.testing.assert_array_equal(got, want)
    assert_modes_agree(model, feeds, steps={model.graph.output[0].name: 0.1})


# -- the held pair -----------------------------------------------------------------------------


class _Fallback:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> str:
        self.calls.append(args)
        return "fallback"


@pytest.fixture
def _int8_on() -> Iterator[None]:
    """The held pair is the compiled module's: on at this CPU's level, even in the run with
    ONNXVIZ_NATIVE=off."""
    compiled("int8")
    with at_level("int8", native.cpu_level()):
        yield


def _held_qdq(signed: bool) -> tuple[Any, tuple[Any, ...], _Fallback]:
    module = native.load("int8")
    dtype = np.int8 if signed else np.uint8
    params = (_SCALE, np.array(3 if signed else 130, dtype), np.array(0.04, np.float32))
    params = (*params, np.array(-2 if signed else 128, dtype))
    fallback = _Fallback()
    held = module.held_qdq(
        0.05, int(params[1]), 0.04, int(params[3]), signed, 5, (1, 2, 3, 4), params, fallback,
        *native.held_arrays(),
    )  # fmt: skip
    return held, params, fallback


def _qdq_steps(x: np.ndarray, params: tuple[Any, ...]) -> np.ndarray:
    s, zp, s2, zp2 = params
    info = np.iinfo(zp.dtype)
    t = np.array(np.divide(x, s, dtype=np.float32))  # (a 0-d x's quotient is a scalar)
    np.rint(t, out=t)
    t += np.float32(zp)
    np.clip(t, info.min, info.max, out=t)
    t -= np.float32(zp2)
    t *= s2
    return t


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.usefixtures("_int8_on")
def test_the_held_pair_gives_the_kernels_bits_in_the_inputs_layout(signed: bool) -> None:
    """The compiled call the node loop makes of a pair: QuantizeLinear -> DequantizeLinear's
    float32 steps, bit for bit, on C-contiguous inputs of any rank (0-d included) and on
    channels-last images, its result laid out as its input and new."""
    held, params, fallback = _held_qdq(signed)
    x4 = _x().reshape(2, 3, 5, 8)
    last = np.ascontiguousarray(x4.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    for x in (_x(), x4, last, _x()[0, 0, :5].copy(), np.array(0.125, np.float32)):
        got = held(x, *params)
        assert type(got) is np.ndarray and got.shape == x.shape and got is not x
        np.testing.assert_array_equal(got.view(np.uint32), _qdq_steps(x, params).view(np.uint32))
        if x is last:
            assert got.transpose(0, 2, 3, 1).flags.c_contiguous
    assert not fallback.calls


@pytest.mark.usefixtures("_int8_on")
def test_every_call_the_held_pair_does_not_take_goes_to_the_fallback() -> None:
    held, params, fallback = _held_qdq(True)
    x = _x()
    with_nan = x.copy()
    with_nan[1, 2, 3] = np.nan
    other = (params[0].copy(), *params[1:])  # an equal scale, another object
    for args in [
        (with_nan, *params),  # a NaN: the nodes one by one
        (x.astype(np.float64), *params),
        (x[:, :, ::2], *params),  # strided
        (np.zeros((2, 0, 4), np.float32), *params),  # empty
        (x, *other),
        (x, *params[:3]),  # another argument count
        (x.tolist(), *params),
    ]:
        fallback.calls.clear()
        assert held(*args) == "fallback"
        assert len(fallback.calls) == 1 and fallback.calls[0][0] is args[0]
    with pytest.raises(ValueError):  # a zero point out of its type
        native.load("int8").held_qdq(
            0.05, 300, 0.04, 0, False, 5, (1, 2, 3, 4), params, print, *native.held_arrays()
        )


@pytest.mark.usefixtures("_int8_on")
def test_a_model_runs_the_held_pairs_from_its_second_run(monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = _qdq_conv_net(True)
    session = Session(model)
    first = session.run(feeds)
    pairs = [pn.fused for pn in run_nodes(session.plan) if type(pn.fused).__name__ == "QdqPair"]
    assert pairs
    assert all(type(p.quick).__name__ == "HeldQdq" for p in pairs)
    calls: list[int] = []
    for p in pairs:
        real = p.quick
        monkeypatch.setattr(p, "quick", lambda *ins, real=real: calls.append(1) or real(*ins))
    second = session.run(feeds)
    assert len(calls) == len(pairs)
    for name, value in first.items():
        np.testing.assert_array_equal(second[name], value)
