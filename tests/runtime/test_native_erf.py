"""The compiled float32 error function (runtime/native/_erf.c): within 3 ulp of the
correctly rounded erf over the float32 range, the same bits at every level this CPU has,
NaN and the infinities and zeros as erf gives them; the plain Erf kernel, Gelu and a
fused elementwise chain all use it, so stepped and unwatched runs agree.  Wrong buffers
raise ValueError."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import math_erf
from tests.runtime.differential import assert_modes_agree
from tests.runtime.native_modules import compiled

pytestmark = pytest.mark.numeric

LEVELS = native.levels()


def _module() -> Any:
    return compiled("erf")


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(0)
    tiny = np.logspace(-44, 1, 20_000).astype(np.float32)
    return np.concatenate(
        [
            (rng.standard_normal(200_001) * 2).astype(np.float32),
            np.linspace(-6, 6, 100_003, dtype=np.float32),
            tiny,
            -tiny,
            np.array([0.0, 1e-45, 0.84375, 1.25, 4.2, 4.2001, 6.0, 3e38], np.float32),
        ]
    )


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


def test_within_3_ulp_and_the_same_bits_at_every_level() -> None:
    module = _module()
    x = _inputs()
    want = np.array([math.erf(v) for v in x.astype(np.float64)])
    first = None
    for level in LEVELS:
        module.set_level(level)
        y = np.empty_like(x)
        module.erf(x, y)
        assert _ulps(y, want).max() <= 3.0, f"level {level}"
        if first is None:
            first = y
        np.testing.assert_array_equal(y, first, err_msg=f"level {level}")
    module.set_level(max(LEVELS))


def test_special_values() -> None:
    module = _module()
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 10.0, -10.0], np.float32)
    for level in LEVELS:
        module.set_level(level)
        y = np.empty_like(x)
        module.erf(x, y)
        assert np.isnan(y[0])
        np.testing.assert_array_equal(y[1:], [1.0, -1.0, 0.0, -0.0, 1.0, -1.0])
        assert np.signbit(y[4]) and not np.signbit(y[3])
        z = x.copy()
        module.erf(z, z)  # in place
        np.testing.assert_array_equal(z[1:], y[1:])
    module.set_level(max(LEVELS))


def test_the_kernels_use_it_in_every_form() -> None:
    """The plain erf, erf_into over blocks (strided too) and the float16 path give the
    compiled values."""
    module = _module()
    if native.requested_level() is None:  # ONNXVIZ_NATIVE=off: the numpy path runs
        assert math_erf._NATIVE is None
        return
    x = _inputs()[:50_000]
    y = np.empty_like(x)
    module.erf(x, y)
    np.testing.assert_array_equal(math_erf.erf(x), y)
    out = np.empty_like(x)
    math_erf.erf_into(x, out)
    np.testing.assert_array_equal(out, y)
    strided = np.empty(2 * x.size, np.float32)[::2]
    math_erf.erf_into(x, strided)
    np.testing.assert_array_equal(strided, y)
    half = x.astype(np.float16)
    y16 = np.empty(half.shape, np.float32)
    module.erf(half.astype(np.float32), y16)
    np.testing.assert_array_equal(math_erf.erf(half), y16.astype(np.float16))


def test_stepped_and_unwatched_gelu_chains_agree() -> None:
    """x * 0.5 * (1 + erf(x / sqrt 2)) as separate nodes: the unwatched run fuses the
    chain (erf_into per block), the stepped run calls Erf: the same numbers."""
    _module()
    nodes = [
        helper.make_node("Div", ["x", "r2"], ["a"]),
        helper.make_node("Erf", ["a"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["b"]),
        helper.make_node("Mul", ["x", "b"], ["c"]),
        helper.make_node("Mul", ["c", "half"], ["y"]),
    ]
    consts = [
        helper.make_tensor("r2", TensorProto.FLOAT, [], [math.sqrt(2.0)]),
        helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
    ]
    graph = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 3000])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 3000])],
        consts,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = (np.random.default_rng(1).standard_normal((64, 3000)) * 3).astype(np.float32)
    assert_modes_agree(model, {"x": x})


def test_wrong_buffers_are_refused() -> None:
    module = _module()
    x = np.zeros(10, np.float32)
    with pytest.raises(ValueError):
        module.erf(x, np.zeros(9, np.float32))
    with pytest.raises(ValueError):
        module.erf(x.astype(np.float64), np.zeros(10, np.float64))
    with pytest.raises(ValueError):
        module.erf(x, np.zeros(20, np.float32)[::2])
    with pytest.raises((ValueError, BufferError)):
        module.erf(x, np.frombuffer(bytes(40), np.float32))  # read-only
