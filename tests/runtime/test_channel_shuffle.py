"""ShuffleNet's channel shuffle and grouped 1x1 convs in unwatched runs
(runtime.fusion_shuffle, kernels.nn_conv_nhwc._GroupedPointwise).

* The compiled shuffle of channels-last rows equals its definition at every level.
* ShuffleNet units (grouped 1x1 -> shuffle -> depthwise -> grouped 1x1 -> residual or
  AvgPool + Concat) run channels-last from end to end and give the stepped run's numbers;
  the shuffle alone gives the stepped run's bits, in either layout, float32, float64 and
  integers, with the compiled kernels and without.
* Shapes the constant shapes do not describe (other ranks, other sizes, a Reshape that
  is not a shuffle), inner values a graph output or a second reader keeps: the nodes as
  they are, the stepped bits.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.fusion_shuffle import ChannelShuffle, shuffle
from onnxviz.runtime.kernels import packed_gemm
from onnxviz.runtime.kernels.nn_conv_nhwc import is_channels_last
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled

from .differential import assert_modes_agree, assert_stepped_bits

pytestmark = pytest.mark.numeric

F = TensorProto.FLOAT


def _definition(rows: np.ndarray, groups: int) -> np.ndarray:
    r, c = rows.shape
    return rows.reshape(r, groups, c // groups).transpose(0, 2, 1).reshape(r, c)


@pytest.mark.parametrize("level", native.levels())
def test_the_compiled_shuffle_is_its_definition_at_every_level(level: int) -> None:
    channels = compiled("channels")
    rng = np.random.default_rng(3)
    with at_level("channels", level):
        channels.set_level(level)
        for groups in (1, 2, 3, 4, 5, 8):
            for per in (0, 1, 2, 7, 15, 16, 17, 28, 33, 40):
                for rows in (0, 1, 3, 10):
                    x = rng.standard_normal((rows, groups * per)).astype(np.float32)
                    x[::3, ::5] = np.nan  # NaNs are copied as they are
                    out = np.full_like(x, 7.0)
                    channels.shuffle(x, out, (rows, groups, per))
                    want = _definition(x, groups)
                    np.testing.assert_array_equal(out.view(np.int32), want.view(np.int32))


def test_the_compiled_shuffle_refuses_what_it_cannot_do() -> None:
    channels = compiled("channels")
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match="overlap"):
        channels.shuffle(x, x, (4, 2, 4))
    with pytest.raises(ValueError, match="floats"):
        channels.shuffle(x, np.zeros((4, 7), np.float32), (4, 2, 4))
    with pytest.raises(ValueError, match="groups >= 1"):
        channels.shuffle(x, np.zeros_like(x), (4, 0, 4))
    with pytest.raises(ValueError, match="float32"):
        channels.shuffle(x.astype(np.float64), np.zeros_like(x), (4, 2, 4))


# -- models ------------------------------------------------------------------------------


class _Net:
    def __init__(self, seed: int, opset: int = 17) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0
        self.opset = opset

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def const(self, value: np.ndarray) -> str:
        n = self.name("k")
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def add(self, op: str, ins: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def conv(self, x: str, c: int, m: int, k: int = 1, group: int = 1, stride: int = 1) -> str:
        w = self.rng.standard_normal((m, c // group, k, k)) / np.sqrt(c // group * k * k)
        b = self.rng.standard_normal(m) * 0.1
        y = self.add(
            "Conv",
            [x, self.const(w.astype(np.float32)), self.const(b.astype(np.float32))],
            kernel_shape=[k, k],
            group=group,
            strides=[stride, stride],
            pads=[k // 2] * 4,
        )
        ks = [
            self.rng.uniform(0.5, 1.5, m),
            self.rng.uniform(-0.5, 0.5, m),
            self.rng.uniform(-0.5, 0.5, m),
            self.rng.uniform(0.5, 1.5, m),
        ]
        return self.add("BatchNormalization", [y, *(self.const(v.astype(np.float32)) for v in ks)])

    def shuffle(self, x: str, shape: tuple[int, ...], groups: int, split=None, back=None) -> str:
        n, c, h, w = shape
        split = (n, groups, c // groups, h, w) if split is None else split
        back = (n, c, h, w) if back is None else back
        y = self.add("Reshape", [x, self.const(np.array(split, np.int64))])
        y = self.add("Transpose", [y], perm=[0, 2, 1, 3, 4])
        return self.add("Reshape", [y, self.const(np.array(back, np.int64))])

    def model(self, x_shape, outputs: list[str], dtype=F) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "shufflenet",
            [helper.make_tensor_value_info("x", dtype, list(x_shape))],
            [helper.make_tensor_value_info(o, dtype, None) for o in outputs],
            initializer=self.inits,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])


def _unit(net: _Net, x: str, shape, groups: int, mid: int, stride: int) -> tuple[str, tuple]:
    """A ShuffleNet v1 unit: grouped 1x1 + BN + Relu, shuffle, depthwise 3x3 + BN, grouped
    1x1 + BN, then the residual Add (stride 1) or AvgPool + Concat (stride 2), Relu."""
    n, c, h, w = shape
    y = net.add("Relu", [net.conv(x, c, mid, group=groups)])
    y = net.shuffle(y, (n, mid, h, w), groups)
    y = net.conv(y, mid, mid, k=3, group=mid, stride=stride)
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    if stride == 1:
        y = net.conv(y, mid, c, group=groups)
        return net.add("Relu", [net.add("Add", [y, x])]), (n, c, oh, ow)
    y = net.conv(y, mid, c, group=groups)
    pool = net.add("AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return net.add("Relu", [net.add("Concat", [y, pool], axis=1)]), (n, 2 * c, oh, ow)


def _shufflenet(seed: int, n: int, c: int, hw: int, groups: int, units: list[int]):
    net = _Net(seed)
    shape = (n, c, hw, hw)
    x = net.add("Relu", [net.conv("x", c, c, k=3)])  # a stem (writes channels-last)
    for stride in units:
        x, shape = _unit(net, x, shape, groups, shape[1] * 2 if stride == 2 else shape[1], stride)
    model = net.model((n, c, hw, hw), [x])
    feeds = {"x": np.random.default_rng(seed).standard_normal((n, c, hw, hw)).astype(np.float32)}
    return model, feeds


def _kinds(session: Session) -> list[str]:
    return [type(pn.fused).__name__ for pn in run_nodes(session.plan) if pn.kind == "fused"]


@pytest.mark.parametrize("groups", [2, 3, 4])
@pytest.mark.parametrize("n", [1, 2])
def test_a_shufflenet_runs_channels_last_and_gives_the_stepped_numbers(groups, n) -> None:
    model, feeds = _shufflenet(5 + groups, n, 4 * groups, 12, groups, [2, 1, 1, 2, 1])
    assert_modes_agree(model, feeds)
    session = Session(model)
    session.run(feeds)
    assert _kinds(session).count("ChannelShuffle") == 5
    if native.level() is not None:  # (kernels off: the stem's plain conv writes NCHW)
        grouped = [
            pn
            for pn in run_nodes(session.plan)
            if pn.op_type == "Conv" and pn.attrs.get("group", 1) == groups
        ]
        assert len(grouped) == 10
        # Every grouped 1x1 writes channels-last: its readers (the shuffle and the
        # depthwise conv after it, the Add, Concat and Relu) take the layout.  The last
        # one's value goes on to the graph output, which stays NCHW.
        assert [pn.fused.layout.emit for pn in grouped] == [True] * 9 + [False]


def test_without_the_compiled_gemm_and_shuffle_the_numpy_forms_give_the_numbers(
    monkeypatch,
) -> None:
    model, feeds = _shufflenet(9, 2, 8, 10, 4, [1, 2, 1])
    monkeypatch.setattr(packed_gemm, "module", lambda: None)
    monkeypatch.setattr("onnxviz.runtime.fusion_shuffle._CHANNELS", None)
    assert_modes_agree(model, feeds)


@st.composite
def _shuffle_cases(draw):
    groups = draw(st.sampled_from([1, 2, 3, 4, 8]))
    per = draw(st.integers(1, 20))
    n = draw(st.sampled_from([1, 2]))
    h, w = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    c = groups * per
    net = _Net(draw(st.integers(0, 2**16)), opset=draw(st.sampled_from([13, 14, 19])))
    # The exporters' spellings: every size written out, or 0 (copy) and -1 (the rest).
    split = draw(
        st.sampled_from([(n, groups, per, h, w), (0, groups, -1, h, w), (n, groups, per, -1, w)])
    )
    back = draw(st.sampled_from([(n, c, h, w), (0, -1, h, w), (-1, c, h, w)]))
    layout = draw(st.sampled_from(["input", "conv", "depthwise"]))
    x = "x"
    if layout != "input":  # a channels-last producer (with the kernels built)
        k, g = (1, 1) if layout == "conv" else (3, c)
        x = net.conv("x", c, c, k=k, group=g)
    y = net.shuffle(x, (n, c, h, w), groups, split, back)
    outputs = [y]
    if draw(st.booleans()):  # a reader after it that takes the layout
        outputs = [net.conv(y, c, c, k=3, group=c)]
    model = net.model((n, c, h, w), outputs)
    feeds = {"x": np.random.default_rng(1).standard_normal((n, c, h, w)).astype(np.float32)}
    return model, feeds, layout


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(_shuffle_cases())
def test_random_shuffles_give_the_stepped_numbers(case) -> None:
    model, feeds, layout = case
    if layout == "input" and model.graph.node[-1].op_type == "Reshape":
        assert_stepped_bits(model, feeds)  # the shuffle alone: a copy, the same bits
    assert_modes_agree(model, feeds)
    session = Session(model)
    session.run(feeds)
    assert "ChannelShuffle" in _kinds(session)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.float16])
def test_other_dtypes_are_shuffled_as_the_steps_do(dtype) -> None:
    net = _Net(2)
    y = net.shuffle("x", (2, 12, 3, 5), 3)
    model = net.model((2, 12, 3, 5), [y], helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    feeds = {"x": (np.random.default_rng(0).standard_normal((2, 12, 3, 5)) * 50).astype(dtype)}
    assert_stepped_bits(model, feeds)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_the_shuffle_keeps_its_input_layout(layout) -> None:
    x = np.random.default_rng(4).standard_normal((2, 12, 5, 7)).astype(np.float32)
    if layout == "nhwc":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    y = shuffle(x, 4)
    want = x.reshape(2, 4, 3, 5, 7).transpose(0, 2, 1, 3, 4).reshape(2, 12, 5, 7)
    np.testing.assert_array_equal(y, want)
    assert is_channels_last(y) == (layout == "nhwc")
    assert y.flags.c_contiguous == (layout == "nchw")


def test_shapes_that_are_not_a_shuffle_run_the_nodes_as_they_are() -> None:
    """The constant shapes are checked against the input's at run time: a split whose
    sizes do not match (another height), and a Reshape back to another shape, run the
    three nodes (the same bits), as does a fed shape of another size."""
    net = _Net(3)
    a = net.shuffle("x", (1, 8, 4, 6), 2, split=(1, 2, 4, 6, 4), back=(1, 8, 4, 6))
    b = net.shuffle("x", (1, 8, 4, 6), 2, back=(1, 4, 8, 6))
    model = net.model((1, 8, 4, 6), [a, b])
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 8, 4, 6)).astype(np.float32)}
    assert_stepped_bits(model, feeds)
    session = Session(model)
    session.run(feeds)
    shuffles = [pn.fused for pn in run_nodes(session.plan) if isinstance(pn.fused, ChannelShuffle)]
    assert len(shuffles) == 2
    assert [s.groups_for((1, 8, 4, 6)) for s in shuffles] == [0, 0]
    # The model's batch is fixed in its shapes: another batch makes the steps fail as
    # they would stepped (the error names the Reshape).
    with pytest.raises(Exception, match="reshape"):
        session.run({"x": np.zeros((2, 8, 4, 6), np.float32)})


def test_inner_values_someone_reads_keep_the_nodes() -> None:
    net = _Net(6)
    a = net.add("Reshape", ["x", net.const(np.array([1, 2, 4, 3, 3], np.int64))])
    t = net.add("Transpose", [a], perm=[0, 2, 1, 3, 4])
    y = net.add("Reshape", [t, net.const(np.array([1, 8, 3, 3], np.int64))])
    other = net.add("Neg", [t])  # the transposed value read twice
    net2 = _Net(6)
    y2 = net2.shuffle("x", (1, 8, 3, 3), 2)
    for model_net, outputs in ((net, [y, other]), (net2, [y2, net2.nodes[0].output[0]])):
        model = model_net.model((1, 8, 3, 3), outputs)
        feeds = {"x": np.random.default_rng(0).standard_normal((1, 8, 3, 3)).astype(np.float32)}
        assert_stepped_bits(model, feeds)
        session = Session(model)
        session.run(feeds)
        assert "ChannelShuffle" not in _kinds(session)


def test_another_transpose_is_not_a_shuffle() -> None:
    net = _Net(7)
    a = net.add("Reshape", ["x", net.const(np.array([1, 2, 4, 3, 3], np.int64))])
    t = net.add("Transpose", [a], perm=[0, 1, 2, 4, 3])
    y = net.add("Reshape", [t, net.const(np.array([1, 8, 3, 3], np.int64))])
    model = net.model((1, 8, 3, 3), [y])
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 8, 3, 3)).astype(np.float32)}
    assert_stepped_bits(model, feeds)
    session = Session(model)
    session.run(feeds)
    assert "ChannelShuffle" not in _kinds(session)
