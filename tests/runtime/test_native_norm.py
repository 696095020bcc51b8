"""The compiled float32 layer and RMS normalisation of rows (runtime/native/_norm.c,
kernels/row_norm.py).

* At every level this CPU has: within _norm.c's bound of the exact (float64) result,
  |y - (n gamma + beta)| <= 8 u (|gamma| (|n| + 1) + |beta|) with n the exact normalised
  value and u = 2^-24, on every width 1..100 and 128, 192, 768, 4096, rows offset far
  from zero (mean >> std), rows whose first value is far from the mean (the one-pass
  sums' pivot), constant rows, subnormal and huge values, with and without
  gamma, beta, skip and bias; mean and inv_std within 2^-23 relative; the skip sum
  (x + skip) + bias bit for bit numpy's.  Property-based too (hypothesis).
* NaN and inf go through a row as on the numpy path; epsilon is added as a float32.
* Every size and buffer is checked: a wrong call raises ValueError.
* Wired in: LayerNormalization, RMSNormalization, the com.microsoft LayerNormalization,
  SimplifiedLayerNormalization, SkipLayerNormalization and SkipSimplifiedLayerNormalization
  and the written-out (TorchScript) layer norm give the kernel's numbers, within the
  bound of their numpy paths' (kernel off); stepped, fused and plain runs of models with
  them agree (differential.assert_modes_agree) at every level.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import contrib_ms, nn_norm, row_norm
from onnxviz.runtime.session import Session
from tests.runtime.differential import assert_modes_agree
from tests.runtime.native_modules import compiled

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
U = 2.0**-24
WIDTHS = [*range(1, 101), 128, 192, 768, 4096]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _module() -> Any:
    return compiled("norm")


@contextmanager
def _at(level: int) -> Iterator[Any]:
    """The module at ``level`` inside the block, then back at the process's level."""
    module = _module()
    module.set_level(level)
    try:
        yield module
    finally:
        module.set_level(native.level() if native.level() is not None else max(LEVELS))


def _reference(s: np.ndarray, eps: float, rms: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exact normalised rows, mean, inv_std) in float64 of float32 rows ``s``."""
    w = s.astype(np.float64)
    mean = np.zeros(w.shape[0]) if rms else w.mean(axis=1)
    var = ((w - mean[:, None]) ** 2).mean(axis=1)
    inv = 1.0 / np.sqrt(var + float(np.float32(eps)))
    return (w - mean[:, None]) * inv[:, None], mean, inv


def _run(
    module: Any,
    x: np.ndarray,
    eps: float,
    rms: bool,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    skip: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    rows, cols = x.shape
    y = np.full_like(x, -7.0)
    mean = np.full(rows, -7.0, np.float32)
    inv = np.full(rows, -7.0, np.float32)
    total = np.full_like(x, -7.0) if skip is not None or bias is not None else None
    eps32 = float(np.float32(eps))
    module.norm(x, y, cols, eps32, rms, gamma, beta, skip, bias, total, mean, inv)
    return y, mean, inv, total


def _check(
    x: np.ndarray,
    eps: float,
    rms: bool,
    got: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None],
    gamma: np.ndarray | None,
    beta: np.ndarray | None,
    skip: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    what: str = "",
) -> None:
    y, mean, inv, total = got
    s = x
    if skip is not None or bias is not None:
        s = x + skip if skip is not None else x.copy()
        if bias is not None:
            s = s + bias
        assert total is not None
        np.testing.assert_array_equal(total, s, err_msg=f"{what} total")
    n, want_mean, want_inv = _reference(s, eps, rms)
    g = np.ones(x.shape[1]) if gamma is None else gamma.astype(np.float64)
    b = np.zeros(x.shape[1]) if beta is None else beta.astype(np.float64)
    want = n * g + b
    bound = 8 * U * (np.abs(g) * (np.abs(n) + 1) + np.abs(b))
    err = np.abs(y.astype(np.float64) - want)
    assert np.all(err <= bound), f"{what}: {np.max(err / bound) * 8:.2f} u of the bound's 8"
    # (a subnormal mean rounds to the subnormals' spacing, 2^-149)
    tiny = 2.0**-149
    mean, inv = mean.reshape(-1), inv.reshape(-1)
    with np.errstate(over="ignore"):  # 1/std beyond float32's range is inf
        want_inv = want_inv.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(mean, want_mean, rtol=2 * U, atol=tiny, err_msg=f"{what} mean")
    np.testing.assert_allclose(inv, want_inv, rtol=2 * U, atol=tiny, err_msg=f"{what} inv_std")


def _row(rng: np.random.Generator, rows: int, cols: int, scale: float, offset: float) -> Any:
    return (rng.standard_normal((rows, cols)) * scale + offset).astype(np.float32)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("rms", [False, True])
def test_every_width_within_the_bound(level: int, rms: bool) -> None:
    rng = np.random.default_rng(level * 2 + rms)
    with _at(level) as module:
        for cols in WIDTHS:
            for scale, offset in ((1.0, 0.0), (1e-3, 5.0), (2.0, 3e4), (1.0, 1e6), (1e3, -1e5)):
                x = _row(rng, 3, cols, scale, offset)
                gamma = rng.uniform(-2, 2, cols).astype(np.float32)
                beta = None if rms else rng.uniform(-1, 1, cols).astype(np.float32)
                got = _run(module, x, 1e-5, rms, gamma, beta)
                _check(x, 1e-5, rms, got, gamma, beta, what=f"{cols} {scale} {offset}")


@pytest.mark.parametrize("level", LEVELS)
def test_a_first_value_far_from_the_mean_keeps_the_bound(level: int) -> None:
    """The one pass sums about the row's first value, at most sqrt(n) standard deviations
    from the mean; rows wider than 11585 whose first value is an outlier take the second
    pass about the mean."""
    rng = np.random.default_rng(11)
    with _at(level) as module:
        for cols in (2, 17, 768, 4096, 16384, 40000):
            for first in (30.0, 1e3, 1e5, -1e7):
                for offset in (0.0, 1e4):
                    x = _row(rng, 2, cols, 1.0, offset)
                    x[:, 0] = offset + first
                    gamma = rng.uniform(0.5, 1.5, cols).astype(np.float32)
                    got = _run(module, x, 1e-6, False, gamma, None)
                    _check(x, 1e-6, False, got, gamma, None, what=f"{cols} {first} {offset}")


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("rms", [False, True])
def test_skip_and_bias_are_added_first_and_their_sum_written(level: int, rms: bool) -> None:
    rng = np.random.default_rng(7)
    with _at(level) as module:
        for cols in (1, 5, 31, 33, 64, 100, 768, 4096):
            x = _row(rng, 4, cols, 3.0, 1.0)
            skip = _row(rng, 4, cols, 1.0, 0.5)
            bias = rng.standard_normal(cols).astype(np.float32)
            gamma = rng.uniform(0.5, 1.5, cols).astype(np.float32)
            for sk, bi in ((skip, bias), (skip, None), (None, bias)):
                got = _run(module, x, 1e-12, rms, gamma, None, sk, bi)
                _check(x, 1e-12, rms, got, gamma, None, sk, bi, what=f"{cols}")
            # Without gamma or beta too: the plain normalised rows.
            _check(x, 1e-12, rms, _run(module, x, 1e-12, rms), None, None, what=f"{cols} bare")


@pytest.mark.parametrize("level", LEVELS)
def test_constant_tiny_and_huge_rows(level: int) -> None:
    rng = np.random.default_rng(3)
    with _at(level) as module:
        for cols in (1, 7, 48, 768):
            beta = rng.standard_normal(cols).astype(np.float32)
            gamma = rng.standard_normal(cols).astype(np.float32)
            const = np.full((2, cols), 3.25e5, np.float32)
            y, mean, inv, _ = _run(module, const, 1e-5, False, gamma, beta)
            np.testing.assert_array_equal(y, np.broadcast_to(beta, y.shape))  # 0 * g + b
            np.testing.assert_array_equal(mean, 3.25e5)
            for rms in (False, True):
                for eps in (0.0, 1e-30, 1e-5):
                    for scale, offset in ((1e-40, 0.0), (1e-30, 1e-29), (1e-20, 0), (1e37, 1e38)):
                        if eps and scale < 1e-20 and rms:
                            continue  # epsilon dominates: y rounds to 0 on both sides
                        x = _row(rng, 2, cols, scale, offset)
                        if np.any(np.ptp(x, axis=1) == 0):
                            continue  # a constant row, checked above
                        got = _run(module, x, eps, rms, gamma, None)
                        _check(x, eps, rms, got, gamma, None, what=f"{cols} {eps} {scale}")


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("rms", [False, True])
def test_nan_and_inf_go_through_the_row_like_the_numpy_path(level: int, rms: bool) -> None:
    x = np.random.default_rng(1).standard_normal((5, 40)).astype(np.float32)
    x[1, 7] = np.nan
    x[2, 39] = np.inf
    x[3, 0] = -np.inf
    x[4, 3], x[4, 9] = np.inf, -np.inf
    gamma = np.full(40, 1.5, np.float32)
    with _at(level) as module, mock.patch.object(row_norm, "_NORM", module):
        done = row_norm.normalize(x, 1, 1e-5, rms=rms, gamma=gamma)
    assert done is not None
    y, mean, inv, _ = done
    with mock.patch.object(row_norm, "_NORM", None), np.errstate(invalid="ignore"):
        if rms:
            want_y, want_inv = contrib_ms._simplified_layer_norm(x, gamma)
            want_mean = np.zeros_like(mean)
        else:
            want_y, want_mean, want_inv = contrib_ms.ms_layer_norm(x, gamma)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(np.isnan(y), np.isnan(want_y))
        np.testing.assert_array_equal(np.isnan(mean), np.isnan(want_mean))
        # (the kernel's mean is the more accurate one: within rounding of numpy's)
        finite = np.isfinite(want_mean)
        np.testing.assert_array_equal(mean[~finite], want_mean[~finite])
        np.testing.assert_allclose(mean[finite], want_mean[finite], rtol=4 * U)
        np.testing.assert_array_equal(np.isnan(inv), np.isnan(want_inv))
        assert np.all(np.isfinite(y[0]))
        if not rms:  # (rms: 1/std is 0, and the row's finite values give 0)
            assert np.all(np.isnan(y[1:]))


def test_epsilon_is_added_as_a_float32() -> None:
    """A large epsilon shows in every output, and 0.1 is the float32 0.1 (the numpy
    paths' x.dtype.type(epsilon))."""
    _module()
    x = np.random.default_rng(2).standard_normal((4, 24)).astype(np.float32) * 0.3
    for eps in (0.1, 1.0, 1e-12):
        for level in LEVELS:
            with _at(level) as module:
                _check(x, eps, False, _run(module, x, eps, False), None, None, what=f"{eps}")
                done = row_norm.normalize(x, 1, eps) if row_norm.enabled() else None
                if done is not None:
                    _check(x, eps, False, (*done[:3], None), None, None, what=f"{eps}")


@SETTINGS
@given(
    st.integers(1, 4),
    st.one_of(st.integers(1, 300), st.sampled_from([512, 768, 1000, 2048, 4096])),
    st.floats(-30, 30),
    st.floats(-8, 8),
    st.sampled_from([0.0, 1e-12, 1e-6, 1e-5, 0.5]),
    st.booleans(),
    st.booleans(),
    st.sampled_from(LEVELS),
    st.integers(0, 2**16),
)
def test_random_rows_within_the_bound(
    rows: int,
    cols: int,
    log_scale: float,
    offset_ratio: float,
    eps: float,
    rms: bool,
    with_skip: bool,
    level: int,
    seed: int,
) -> None:
    """Any magnitude 1e-30..1e30, offsets up to 1e8 standard deviations, any epsilon."""
    rng = np.random.default_rng(seed)
    scale = 10.0**log_scale
    offset = scale * np.sign(offset_ratio) * 10 ** abs(offset_ratio)
    gamma = rng.uniform(-2, 2, cols).astype(np.float32)
    beta = None if rms else rng.uniform(-1, 1, cols).astype(np.float32)
    with _at(level) as module, np.errstate(over="ignore", invalid="ignore"):
        x = _row(rng, rows, cols, scale, offset)
        skip = _row(rng, rows, cols, scale, 0.0) if with_skip else None
        got = _run(module, x, eps, rms, gamma, beta, skip)
        s = x + skip if skip is not None else x
    if not np.all(np.isfinite(s)) or np.any(np.ptp(s, axis=1) == 0):
        return  # an overflowing sum, or a constant row (their own tests)
    _check(x, eps, rms, got, gamma, beta, skip, what=f"{rows}x{cols}")


def test_wrong_buffers_are_refused() -> None:
    module = _module()
    x = np.zeros(12, np.float32)
    y = np.zeros(12, np.float32)
    args: list[Any] = [x, y, 4, 1e-5, False, None, None, None, None, None, None, None]

    def call(**changes: Any) -> None:
        names = ["x", "y", "cols", "eps", "rms", "g", "b", "s", "bi", "t", "m", "i"]
        values = list(args)
        for k, v in changes.items():
            values[names.index(k)] = v
        module.norm(*values)

    call()
    for bad in (
        {"cols": 0},
        {"cols": 5},  # 12 is no multiple of 5
        {"y": np.zeros(11, np.float32)},
        {"x": x.astype(np.float64), "y": y.astype(np.float64)},
        {"y": np.zeros(24, np.float32)[::2]},
        {"g": np.zeros(3, np.float32)},
        {"b": np.zeros(5, np.float32)},
        {"s": np.zeros(8, np.float32)},
        {"bi": np.zeros(12, np.float32)},
        {"t": np.zeros(4, np.float32)},
        {"m": np.zeros(4, np.float32)},
        {"i": np.zeros(2, np.float32)},
    ):
        with pytest.raises(ValueError):
            call(**bad)
    with pytest.raises((ValueError, BufferError)):
        call(y=np.frombuffer(bytes(48), np.float32))  # read-only


# --- wired into the kernels ---------------------------------------------------------


def test_the_kernels_route_float32_through_it() -> None:
    """Each op kernel gives the compiled kernel's numbers when it is on, and within the
    bound of them on its numpy path (kernel off); float64 keeps the numpy path."""
    _module()
    if native.requested_level() is None:  # ONNXVIZ_NATIVE=off: the numpy paths run
        assert row_norm._NORM is None and not row_norm.enabled()
        return
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((2, 5, 64)) * 2 + 1).astype(np.float32)
    skip = rng.standard_normal((2, 5, 64)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, 64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    calls: list[Any] = [
        lambda: nn_norm.layer_norm(x, g, b),
        lambda: nn_norm.layer_norm(x, g.reshape(1, 64), None, axis=-1),
        lambda: nn_norm.layer_norm(x, np.tile(g, 5).reshape(5, 64), np.tile(b, (5, 1)), axis=1),
        lambda: (nn_norm.rms_norm(x, g, epsilon=1e-6),),
        lambda: contrib_ms.ms_layer_norm(x, g, b),
        lambda: contrib_ms._simplified_layer_norm(x, g),
        lambda: contrib_ms.skip_layer_norm(x, skip, g, b, bias),
        lambda: contrib_ms.skip_layer_norm(x, skip[0], g, None, None),  # skip broadcast
        lambda: contrib_ms.skip_simplified_layer_norm(x, skip, g, bias),
    ]
    real = row_norm.normalize
    results: list[Any] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        results.append(real(*args, **kwargs))
        return results[-1]

    for i, call in enumerate(calls):
        results.clear()
        with mock.patch.object(row_norm, "normalize", spy):
            got = call()
        assert len(results) == 1 and results[0] is not None, i
        with mock.patch.object(row_norm, "_NORM", None):
            want = call()
        assert len(got) == len(want)
        for k, (a, w) in enumerate(zip(got, want)):
            assert a.shape == w.shape and a.dtype == w.dtype, (i, k)
            scale = max(float(np.max(np.abs(w))), 1.0)
            np.testing.assert_allclose(a, w, rtol=3e-6, atol=3e-6 * scale, err_msg=f"{i} {k}")
    x64 = x.astype(np.float64)
    with mock.patch.object(row_norm, "_NORM", None):
        want64 = nn_norm.layer_norm(x64, g, b, stash_type=11)
    np.testing.assert_array_equal(nn_norm.layer_norm(x64, g, b, stash_type=11)[0], want64[0])


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    consts: dict[str, Any],
    outputs: list[str],
    domain_ms: bool = False,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "norm",
        [
            helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
            for k, v in inputs.items()
        ],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    opsets = [helper.make_opsetid("", 17)]
    if domain_ms:
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    return helper.make_model(graph, opset_imports=opsets)


def _agree_at_every_level(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    for level in LEVELS:
        with _at(level):
            assert_modes_agree(model, feeds)


def test_layer_normalization_models_agree() -> None:
    """A ViT-sized LayerNormalization with its mean and inv_std outputs, over the last
    axis and over the last two."""
    _module()
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((1, 197, 192)) * 4 + 2).astype(np.float32)
    consts = {
        "g": rng.uniform(0.5, 1.5, 192).astype(np.float32),
        "b": rng.standard_normal(192).astype(np.float32),
        "g2": rng.uniform(0.5, 1.5, (197, 192)).astype(np.float32),
    }
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["y", "m", "i"], epsilon=1e-6),
        helper.make_node("LayerNormalization", ["y", "g2"], ["z"], axis=1),
    ]
    _agree_at_every_level(_model(nodes, {"x": x}, consts, ["y", "m", "i", "z"]), {"x": x})


def test_written_out_layer_norm_models_agree() -> None:
    """TorchScript's nine-node nn.LayerNorm, BERT-tiny's width: fused into one node that
    runs the kernel, within float32 rounding of the stepped nodes."""
    _module()
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((1, 128, 128)) * 3 + 0.5).astype(np.float32)
    consts = {
        "axes": np.array([-1], np.int64),
        "two": np.array(2.0, np.float32),
        "eps": np.array(1e-12, np.float32),
        "g": rng.uniform(0.5, 1.5, 128).astype(np.float32),
        "b": rng.standard_normal(128).astype(np.float32),
    }
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
        helper.make_node("Sub", ["x", "m"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["p"]),
        helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
        helper.make_node("Add", ["v", "eps"], ["e"]),
        helper.make_node("Sqrt", ["e"], ["s"]),
        helper.make_node("Div", ["d", "s"], ["n"]),
        helper.make_node("Mul", ["n", "g"], ["yg"]),
        helper.make_node("Add", ["yg", "b"], ["y"]),
    ]
    model = _model(nodes, {"x": x}, consts, ["y"])
    fused = run_nodes(Session(model).plan)
    assert [type(pn.fused).__name__ for pn in fused] == ["LayerNormChain"]
    _agree_at_every_level(model, {"x": x})


@pytest.mark.parametrize("simplified", [False, True])
def test_skip_layer_normalization_models_agree(simplified: bool) -> None:
    """The com.microsoft Skip(Simplified)LayerNormalization with every output (the sum
    too) feeding a second norm, Llama's and BERT's widths."""
    _module()
    rng = np.random.default_rng(8)
    width = 2048 if simplified else 768
    x = rng.standard_normal((1, 6, width)).astype(np.float32)
    skip = (rng.standard_normal((1, 6, width)) * 4).astype(np.float32)
    consts = {
        "g": rng.uniform(0.5, 1.5, width).astype(np.float32),
        "b": rng.standard_normal(width).astype(np.float32),
        "bias": rng.standard_normal(width).astype(np.float32),
    }
    if simplified:
        first = helper.make_node(
            "SkipSimplifiedLayerNormalization",
            ["x", "skip", "g", "bias"],
            ["y", "", "i", "t"],
            domain="com.microsoft",
            epsilon=1e-6,
        )
        second = helper.make_node(
            "SimplifiedLayerNormalization", ["t", "g"], ["z", "i2"], epsilon=1e-6
        )
        outputs = ["y", "i", "t", "z", "i2"]
    else:
        first = helper.make_node(
            "SkipLayerNormalization",
            ["x", "skip", "g", "b", "bias"],
            ["y", "m", "i", "t"],
            domain="com.microsoft",
        )
        second = helper.make_node(
            "LayerNormalization", ["t", "g", "b"], ["z"], domain="com.microsoft"
        )
        outputs = ["y", "m", "i", "t", "z"]
    model = _model([first, second], {"x": x, "skip": skip}, consts, outputs, domain_ms=True)
    _agree_at_every_level(model, {"x": x, "skip": skip})
