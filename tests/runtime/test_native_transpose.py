"""The tiled copy (runtime/native/_transpose.c) and kernels/dense.py: a strided view's
values in C order, equal to numpy's copy bit for bit at every level this CPU has, for
every permutation, reversal, broadcast (zero stride) and item size; dense() hands back
a C-contiguous array of the same values, dtype and shape.  A ConvNeXt block, whose
LayerNorm reads an NHWC permute, gives the stepped run's numbers.  Wrong buffers raise
ValueError."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import dense as dense_module
from onnxviz.runtime.kernels.dense import dense
from tests.runtime.differential import assert_modes_agree, assert_stepped_bits
from tests.runtime.native_modules import compiled

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
DTYPES = [np.uint8, np.float16, np.float32, np.int32, np.float64, np.int64]


def _module() -> Any:
    return compiled("transpose", "dense() runs numpy's copy")


@st.composite
def _views(draw) -> np.ndarray:
    """A view of a random array: its axes permuted, some reversed or stepped, a size-1
    axis broadcast (stride 0), of one of the item sizes."""
    ndim = draw(st.integers(1, 5))
    shape = draw(st.lists(st.integers(1, 19), min_size=ndim, max_size=ndim))
    dtype = draw(st.sampled_from(DTYPES))
    base = (np.arange(int(np.prod(shape)), dtype=np.int64) % 251).astype(dtype)
    x = base.reshape(shape)
    x = x.transpose(draw(st.permutations(range(ndim))))
    index = tuple(
        draw(st.sampled_from([slice(None), slice(None, None, -1), slice(None, None, 2)]))
        for _ in range(ndim)
    )
    x = x[index]
    if draw(st.booleans()) and ndim < 5:
        at = draw(st.integers(0, x.ndim))
        x = np.expand_dims(x, at)
        grown = list(x.shape)
        grown[at] = draw(st.integers(1, 4))
        x = np.broadcast_to(x, grown)
    return x


@pytest.mark.parametrize("level", LEVELS)
@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
@given(x=_views())
def test_the_copy_is_numpys_at_every_level(level, x) -> None:
    mod = _module()
    mod.set_level(level)
    try:
        out = np.empty(x.shape, x.dtype)
        mod.copy(x, out)
        np.testing.assert_array_equal(out, np.ascontiguousarray(x))
        assert out.tobytes() == np.ascontiguousarray(x).tobytes()
    finally:
        mod.set_level(native.level() if native.level() is not None else 0)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(
    ("shape", "perm"),
    [
        ((1, 48, 32, 32), (0, 2, 3, 1)),  # NCHW -> NHWC (a ConvNeXt block)
        ((1, 32, 32, 192), (0, 3, 1, 2)),  # and back
        ((512, 769), (1, 0)),  # a 2-D transpose, edges off the 8 x 8 blocks
        ((3, 13, 17, 9), (3, 1, 0, 2)),
        ((2, 12, 33, 64), (0, 2, 1, 3)),  # heads merged: rows already dense
    ],
)
def test_large_permutes_at_every_level(level, shape, perm) -> None:
    mod = _module()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32).transpose(perm)
    mod.set_level(level)
    try:
        out = np.empty(x.shape, x.dtype)
        mod.copy(x, out)
        assert out.tobytes() == np.ascontiguousarray(x).tobytes()
    finally:
        mod.set_level(native.level() if native.level() is not None else 0)


def test_wrong_buffers_raise() -> None:
    mod = _module()
    x = np.zeros((4, 5), np.float32).T
    for bad in (np.zeros((5, 3), np.float32), np.zeros((5, 4), np.float64)):
        with pytest.raises(ValueError):
            mod.copy(x, bad)
    with pytest.raises(ValueError):
        mod.copy(x, np.zeros((10, 4), np.float32)[::2])  # not C-contiguous
    with pytest.raises((ValueError, TypeError)):
        mod.copy(x, np.zeros((5, 4), np.float32).view(np.uint8)[:, :16].copy()[:, :0])


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64, np.float16])
@pytest.mark.parametrize("native_copy", [True, False])
def test_dense_gives_a_c_ordered_array_of_the_same_values(dtype, native_copy, monkeypatch) -> None:
    if not native_copy:
        monkeypatch.setattr(dense_module, "_NATIVE", None)
    x = np.arange(64 * 96, dtype=dtype).reshape(64, 96)
    assert dense(x) is x
    for view in (x.T, x[::-1], x[:, ::2].T, np.broadcast_to(x[:1], (64, 96)).T, x[None].T):
        got = dense(view)
        assert got.flags.c_contiguous and got.dtype == view.dtype and got.shape == view.shape
        np.testing.assert_array_equal(got, view)
    scalar = np.float32(3.0) * np.ones((), np.float32)
    assert dense(scalar).shape == ()


def _convnext_block(c: int = 48, hw: int = 32) -> tuple[Any, dict[str, np.ndarray]]:
    """A ConvNeXt block as TorchScript writes it: depthwise conv, permute to NHWC,
    LayerNorm over channels, two Linears with GELU, scale, permute back, residual Add."""
    rng = np.random.default_rng(3)

    def init(name: str, *shape: int) -> Any:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "dw", "dwb"], ["d"], group=c, pads=[3, 3, 3, 3]),
        helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("LayerNormalization", ["t", "g", "b"], ["n"], axis=-1, epsilon=1e-6),
        helper.make_node("MatMul", ["n", "w1"], ["h"]),
        helper.make_node("Gelu", ["h"], ["a"], domain="com.microsoft"),
        helper.make_node("MatMul", ["a", "w2"], ["o"]),
        helper.make_node("Mul", ["o", "s"], ["m"]),
        helper.make_node("Transpose", ["m"], ["back"], perm=[0, 3, 1, 2]),
        helper.make_node("Add", ["x", "back"], ["y"]),
    ]
    inits = [
        init("dw", c, 1, 7, 7), init("dwb", c), init("g", c), init("b", c),
        init("w1", c, 4 * c), init("w2", 4 * c, c), init("s", c),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "convnext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    return model, {"x": rng.standard_normal((1, c, hw, hw)).astype(np.float32)}


def test_a_convnext_block_gives_the_stepped_bits() -> None:
    """With the compiled kernels every fast path here gives the kernels' bits; with them
    off, the numpy fusions round differently (within float32 rounding)."""
    model, feeds = _convnext_block()
    if native.level() is None:
        assert_modes_agree(model, feeds)
    else:
        assert_stepped_bits(model, feeds, runs=3)
