"""A conv chain that ends in a MaxPool (fusion.ConvChain.pool): the held direct or blocked
conv pools its output band by band of rows while they are in cache (native/_conv.c's
`held` with `pool`, call_run_pooled), so the conv's whole output never exists.

* The held call's result is the max pool of the runner's own conv result, bit for bit,
  and a plain numpy max pool of it: stems reading NCHW input, channels-last convs,
  windows that overlap, abut, skip rows, or have asymmetric pads, one and two images,
  images tall enough for several bands (rows shared by two bands kept, not recomputed),
  the blocked kernel's shapes at AVX-512, NaN inputs; at every level.
* A wrong pool (a residual, a window past the padded input) is a ValueError when the call
  is made.
* In a model: the MaxPool joins the chain (no MaxPool node left in the unwatched run),
  the chain's quick call is the pooled held conv from the second run, and the outputs
  are the bits of the same run with the pool left as its own node, and agree with the
  stepped run; random conv -> activation -> MaxPool graphs (hypothesis) too.
* Where the pool cannot join (read elsewhere, a residual in the chain, ceil_mode,
  an Indices output) it stays its own node.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import fusion, native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import _weight_cache, nn_conv_nhwc
from onnxviz.runtime.kernels.nn_conv import ACT_CLIP, ACT_RELU
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled

from .differential import assert_modes_agree

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
NAN = math.nan
F = TensorProto.FLOAT


@pytest.fixture(autouse=True)
def _kernels_on() -> Iterator[None]:
    """The compiled calls are what these tests prove: the kernels on at this CPU's level
    (a test may set another), even in the run with ONNXVIZ_NATIVE=off."""
    with at_level("conv", native.cpu_level()), at_level("pool", native.cpu_level()):
        yield


def _channels_last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _max_pool(y: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int], pads: Any):
    """numpy's max pool of the (N, C, H, W) ``y``: padding never wins (-inf), a NaN in a
    window gives NaN (np.max), floor rounding."""
    top, left, bottom, right = pads
    padded = np.pad(y, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=-np.inf)
    (kh, kw), (sh, sw) = kernel, strides
    oh = (padded.shape[2] - kh) // sh + 1
    ow = (padded.shape[3] - kw) // sw + 1
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))
    return windows[:, :, : (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw].max(axis=(4, 5))


def _runner(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, **attrs: Any) -> Any:
    for const in (w, b):
        if const is not None:
            const.flags.writeable = False
    runner = nn_conv_nhwc.prepare_channels_last(x, w, b, attrs)
    assert isinstance(runner, nn_conv_nhwc._Direct)
    return runner


class _Fallback:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> str:
        self.calls.append(args)
        return "fallback"


# (N, C, H, W, M, conv kernel, conv strides, conv pads, x channels-first,
#  pool kernel, pool strides, pool pads)
CASES = [
    # ResNet's stem and pool, one and two images, 16, 64 and 70 channels
    (1, 3, 41, 37, 64, (7, 7), (2, 2), (3, 3, 3, 3), True, (3, 3), (2, 2), (1, 1, 1, 1)),
    (2, 3, 23, 30, 16, (7, 7), (2, 2), (3, 3, 3, 3), True, (3, 3), (2, 2), (1, 1, 1, 1)),
    (1, 3, 20, 21, 70, (3, 3), (1, 1), (1, 1, 1, 1), True, (2, 2), (2, 2), (0, 0, 0, 0)),
    # channels-last convs: abutting, overlapping (two shared rows), row-skipping windows,
    # asymmetric pads, a 1x1 window
    (1, 16, 12, 13, 24, (3, 3), (1, 1), (1, 1, 1, 1), False, (2, 2), (2, 2), (0, 0, 0, 0)),
    (2, 8, 11, 9, 20, (3, 3), (1, 1), (1, 1, 1, 1), False, (3, 3), (1, 1), (1, 1, 1, 1)),
    (1, 12, 15, 14, 33, (3, 3), (1, 1), (1, 1, 1, 1), False, (2, 2), (3, 3), (0, 0, 0, 0)),
    (1, 16, 14, 12, 32, (5, 3), (1, 2), (2, 1, 2, 1), False, (5, 5), (3, 2), (2, 1, 0, 2)),
    (1, 8, 9, 9, 16, (3, 3), (1, 1), (0, 0, 0, 0), False, (1, 1), (1, 1), (0, 0, 0, 0)),
    # tall images: 7 bands of the stem-like NCHW conv, 2 of a channels-last one
    (1, 3, 1100, 12, 64, (3, 3), (1, 1), (1, 1, 1, 1), True, (3, 3), (2, 2), (1, 1, 1, 1)),
    (1, 16, 700, 10, 32, (3, 3), (1, 1), (1, 1, 1, 1), False, (2, 2), (2, 2), (0, 0, 0, 0)),
    (1, 16, 600, 10, 32, (3, 3), (1, 1), (1, 1, 1, 1), False, (3, 3), (1, 1), (1, 1, 1, 1)),
    # the blocked kernel's shapes at AVX-512 (128 x 128 channels, 10-pixel rows: fewer
    # output tiles than the fused Winograd conv takes)
    (1, 128, 10, 10, 128, (3, 3), (1, 1), (1, 1, 1, 1), False, (2, 2), (2, 2), (0, 0, 0, 0)),
]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"c{c[1]}m{c[4]}h{c[2]}p{c[9][0]}s{c[10][0]}")
def test_the_pooled_held_conv_gives_the_pool_of_the_runners_result(level: int, case: Any):
    compiled("conv", "the numpy convs run")
    n, c, h, wd, m, kernel, strides, pads, first, pk, ps, pp = case
    rng = np.random.default_rng(h * 7 + m + level)
    with at_level("conv", level):
        native.load("conv").set_level(level)
        w = (rng.standard_normal((m, c, *kernel)) * 0.2).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        image = rng.standard_normal((n, c, h, wd)).astype(np.float32)
        image[0, 0, h // 2, wd // 3] = np.nan  # reaches exactly the windows that hold it
        x = image if first else _channels_last(image)
        runner = _runner(x, w, b, kernel_shape=list(kernel), strides=list(strides), pads=list(pads))
        for act in (None, (ACT_RELU, NAN, NAN), (ACT_CLIP, -0.5, 0.25)):
            fallback = _Fallback()
            consts = (object(), object())
            window = (pk, ps, pp)
            held = runner.held(x, act, 3, None, (1, 2), consts, fallback, False, window)
            assert held is not None
            got = held(x, *consts)
            conv, _ = runner.run(x, None, act)
            want = _max_pool(conv.transpose(0, 3, 1, 2), pk, ps, pp)
            assert got.shape == want.shape
            assert got.transpose(0, 2, 3, 1).flags.c_contiguous and got.ctypes.data % 64 == 0
            np.testing.assert_array_equal(got, want)
            assert np.isnan(got).any() and not fallback.calls
            # another image shape is the fallback's
            other = x[:, :, :-1] if first else _channels_last(image[:, :, :-1])
            assert held(other, *consts) == "fallback"


def test_a_wrong_pool_is_a_value_error():
    compiled("conv", "the numpy convs run")
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
    x = _channels_last(rng.standard_normal((1, 8, 6, 6)).astype(np.float32))
    runner = _runner(x, w, None, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    consts = (object(), object())
    with pytest.raises(ValueError):  # a residual: its rows are not in the bands
        runner.held(x, None, 4, 3, (1, 2), consts, _Fallback(), False, ((2, 2), (2, 2), (0,) * 4))
    with pytest.raises(ValueError):  # a window past the padded 6x6 output
        runner.held(
            x, None, 3, None, (1, 2), consts, _Fallback(), False, ((8, 2), (1, 1), (0,) * 4)
        )
    with pytest.raises(ValueError):  # a zero stride
        runner.held(
            x, None, 3, None, (1, 2), consts, _Fallback(), False, ((2, 2), (0, 1), (0,) * 4)
        )


# -- in a model ------------------------------------------------------------------------------


def _model(
    rng: np.random.Generator,
    x_shape: tuple[int, int, int, int],
    convs: list[dict[str, Any]],
    pool: dict[str, Any],
    extra: str = "",
) -> onnx.ModelProto:
    """x -> Conv (-> Relu) ... -> MaxPool -> Conv -> y.  ``extra``: "tap" makes the last
    conv's output a graph output too (the pool cannot join), "indices" gives the pool its
    Indices output, "residual" adds the first conv's output to the last's, then a Relu,
    before the pool."""
    nodes, inits = [], []
    c, v = x_shape[1], "x"
    for i, spec in enumerate(convs):
        m = spec["m"]
        k = spec.get("kernel", (3, 3))
        w = (rng.standard_normal((m, c, *k)) * (1.0 / math.sqrt(c * k[0] * k[1]))).astype(
            np.float32
        )
        inits += [
            numpy_helper.from_array(w, f"w{i}"),
            numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), f"b{i}"),
        ]
        attrs = {key: list(val) for key, val in spec.items() if key in ("strides", "pads")}
        nodes.append(
            helper.make_node(
                "Conv", [v, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=list(k), **attrs
            )
        )
        v, c = f"c{i}", m
        if spec.get("relu", True):
            nodes.append(helper.make_node("Relu", [v], [f"r{i}"]))
            v = f"r{i}"
    if extra == "residual":  # the chain's residual, then its Relu
        nodes.append(helper.make_node("Add", [v, "c0"], ["sum"]))
        nodes.append(helper.make_node("Relu", ["sum"], ["rsum"]))
        v = "rsum"
    outs = ["p", "idx"] if extra == "indices" else ["p"]
    nodes.append(helper.make_node("MaxPool", [v], outs, **pool))
    w = (rng.standard_normal((8, c, 3, 3)) * 0.1).astype(np.float32)
    inits.append(numpy_helper.from_array(w, "wl"))
    nodes.append(
        helper.make_node("Conv", ["p", "wl"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    )
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if extra == "tap":
        outputs.append(helper.make_tensor_value_info(v, F, None))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, x_shape)], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _pools_joined(session: Session) -> list[Any]:
    return [
        q.fused for q in run_nodes(session.plan)
        if q.kind == "fused" and isinstance(q.fused, fusion.ConvChain) and q.fused.pool is not None
    ]  # fmt: skip


def _unjoined(monkeypatch: pytest.MonkeyPatch, model: onnx.ModelProto, feeds: dict[str, Any]):
    """The fused run's outputs (first and second run) with the pool left as its own node."""
    with monkeypatch.context() as patch:
        patch.setattr(fusion, "_trailing_max_pool", lambda *args: None)
        session = Session(model)
        assert not _pools_joined(session)
        return session.run(feeds), session.run(feeds)


STEM = {"m": 32, "kernel": (7, 7), "strides": (2, 2), "pads": (3, 3, 3, 3)}
POOL = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}


@pytest.mark.parametrize("level", LEVELS)
def test_a_stem_and_its_pool_run_as_one_held_call(monkeypatch: pytest.MonkeyPatch, level: int):
    compiled("conv", "the numpy convs run")
    rng = np.random.default_rng(5)
    model = _model(rng, (2, 3, 45, 38), [STEM, {"m": 24}], POOL)
    feeds = {"x": rng.standard_normal((2, 3, 45, 38)).astype(np.float32)}
    with at_level("conv", level):
        native.load("conv").set_level(level)
        _weight_cache.clear()
        session = Session(model)
        first = session.run(feeds)["y"]
        assert "MaxPool" not in [q.op_type for q in run_nodes(session.plan)]
        (chain,) = _pools_joined(session)
        assert type(chain.quick).__name__ == "Held"  # the pooled held conv
        calls: list[int] = []
        real = chain.quick
        monkeypatch.setattr(chain, "quick", lambda *ins: calls.append(1) or real(*ins))
        second = session.run(feeds)["y"]
        monkeypatch.undo()
        assert calls == [1]
        np.testing.assert_array_equal(second, first)
        alone_first, alone = _unjoined(monkeypatch, model, feeds)
        np.testing.assert_array_equal(first, alone_first["y"])
        np.testing.assert_array_equal(second, alone["y"])
    assert_modes_agree(model, feeds)
    _weight_cache.clear()


@pytest.mark.parametrize(
    ("extra", "pool"),
    [
        ("tap", POOL),
        ("indices", POOL),
        ("residual", POOL),
        ("", {**POOL, "ceil_mode": 1}),
        ("", {**POOL, "dilations": [2, 2]}),
        ("", {**POOL, "auto_pad": "SAME_UPPER", "pads": None}),
    ],
)
def test_a_pool_that_cannot_join_stays_its_own_node(extra: str, pool: dict[str, Any]) -> None:
    rng = np.random.default_rng(6)
    attrs = {k: v for k, v in pool.items() if v is not None}
    same = {"m": 16, "pads": (1, 1, 1, 1)}
    convs = [same, {**same, "relu": False}] if extra == "residual" else [STEM, {"m": 16}]
    model = _model(
        rng, (1, 3, 30, 30) if extra != "residual" else (1, 16, 30, 30), convs, attrs, extra
    )
    feeds = {
        "x": rng.standard_normal(
            tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
        ).astype(np.float32)
    }
    session = Session(model)
    session.run(feeds)
    assert not _pools_joined(session)
    assert "MaxPool" in [q.op_type for q in run_nodes(session.plan)]
    assert_modes_agree(model, feeds)


@st.composite
def _graphs(draw: Any) -> dict[str, Any]:
    stem = draw(st.booleans())  # the model's NCHW input read by the first conv
    c = draw(st.sampled_from([3, 4])) if stem else draw(st.sampled_from([1, 8, 17]))
    k = draw(st.sampled_from([(1, 1), (3, 3), (5, 5), (7, 7), (3, 1)]))
    s = draw(st.sampled_from([(1, 1), (2, 2), (1, 2)]))
    pad = tuple(draw(st.integers(0, kk // 2)) for kk in (*k, *k))
    conv = {"m": draw(st.sampled_from([8, 16, 24, 40, 64])), "kernel": k, "strides": s, "pads": pad,
            "relu": draw(st.booleans())}  # fmt: skip
    convs = [conv] if stem else [{"m": c}, conv]
    pk = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    ps = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pp = [draw(st.integers(0, pk[0] - 1)), draw(st.integers(0, pk[1] - 1))]
    pp += [draw(st.integers(0, pk[0] - 1)), draw(st.integers(0, pk[1] - 1))]
    h, w = draw(st.integers(8, 40)), draw(st.integers(8, 40))
    # the conv's output must hold the pool's window (padded)
    oh = (h + pad[0] + pad[2] - k[0]) // s[0] + 1
    ow = (w + pad[1] + pad[3] - k[1]) // s[1] + 1
    assume(oh + pp[0] + pp[2] >= pk[0] and ow + pp[1] + pp[3] >= pk[1])
    return {"x": (draw(st.integers(1, 2)), c, h, w), "convs": convs,
            "pool": {"kernel_shape": list(pk), "strides": list(ps), "pads": pp},
            "seed": draw(st.integers(0, 2**31))}  # fmt: skip


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(g=_graphs())
def test_random_conv_pool_graphs_give_the_bits_of_the_pool_as_its_own_node(
    monkeypatch: pytest.MonkeyPatch, g: dict[str, Any]
) -> None:
    rng = np.random.default_rng(g["seed"])
    model = _model(rng, g["x"], g["convs"], g["pool"])
    feeds = {"x": rng.standard_normal(g["x"]).astype(np.float32)}
    session = Session(model)
    runs = session.run(feeds), session.run(feeds)
    assert len(_pools_joined(session)) == 1
    alone = _unjoined(monkeypatch, model, feeds)
    for got, want in zip(runs, alone):
        np.testing.assert_array_equal(got["y"], want["y"])
    assert_modes_agree(model, feeds)


def test_a_window_past_the_convs_output_runs_as_the_stepped_run_does() -> None:
    """A 5x5 window over a 2x2 conv output (unpadded): no held call is made for it (the
    held conv refuses such a window) and the chain's pool kernel gives what stepping
    gives, an empty output, on the first run and the next."""
    rng = np.random.default_rng(9)
    stem = {"m": 16, "kernel": (7, 7), "strides": (2, 2), "pads": (0, 0, 0, 0)}
    model = _model(rng, (1, 3, 9, 9), [stem], {"kernel_shape": [5, 5]})
    feeds = {"x": rng.standard_normal((1, 3, 9, 9)).astype(np.float32)}
    session = Session(model)
    for _ in range(2):
        assert session.run(feeds)["y"].shape == (1, 8, 0, 0)
    (chain,) = _pools_joined(session)
    assert chain.quick is None
    assert_modes_agree(model, feeds)
