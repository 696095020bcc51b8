"""float32 <-> float16 by native/_half.c (kernels/half.py): numpy's astype bits.

* At every level this CPU has: float32 bit patterns of every exponent with mantissas at
  and around each rounding tie (the dropped 13 bits at half, below, above; the kept bit
  odd and even), the subnormal and overflow boundaries, NaNs with quiet, signalling and
  vanishing payloads, infinities and zeros of both signs, and random patterns, all to
  float16 as numpy rounds them; every float16 pattern back to float32 as numpy widens it;
  lengths that leave a tail after the vectors.  (Checked once over all 2^32 float32
  patterns at each level; see docs/architecture.md.)
* Buffers of the wrong type or length raise ValueError.
* half.to_float16 / to_float32 / convert give astype's values for any layout and size, and
  a Cast node between float32 and float16 gives them in stepped and unwatched runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import half
from tests.runtime.differential import assert_stepped_bits
from tests.runtime.native_modules import compiled

pytestmark = pytest.mark.numeric

LEVELS = native.levels()


def _float32_patterns() -> np.ndarray:
    rng = np.random.default_rng(0)
    exps = np.arange(256, dtype=np.uint32) << 23
    low = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x2FFF], np.uint32)
    kept = rng.integers(0, 1 << 10, 40, dtype=np.uint32) << 13
    mants = (kept[:, None] | low[None, :]).reshape(-1)
    mants = np.concatenate([mants, low, np.array([0x7FFFFF, 0x400000, 0x200000, 1], np.uint32)])
    grid = (exps[:, None] | mants[None, :]).reshape(-1)
    near = np.float32([65504, 65519.99, 65520, 65535.99, 2.0**-14, 2.0**-24, 2.0**-25])
    near = np.concatenate([near.view(np.uint32).astype(np.int64) + d for d in range(-2, 3)])
    near = near.astype(np.uint32)
    rand = rng.integers(0, 1 << 32, 1_000_000, dtype=np.uint64).astype(np.uint32)
    patterns = np.concatenate([grid, near, rand])
    return np.concatenate([patterns, patterns | np.uint32(0x80000000)]).view(np.float32)


@pytest.mark.parametrize("level", LEVELS)
def test_float32_to_float16_is_numpys_rounding_at_every_level(level: int) -> None:
    module = compiled("half")
    x = _float32_patterns()
    with np.errstate(all="ignore"):
        want = x.astype(np.float16)
    module.set_level(level)
    try:
        for n in (x.size, 15, 7, 1):  # (tails after the 16- and 8-float vectors)
            got = np.empty(n, np.float16)
            module.to_half(x[:n], got)
            np.testing.assert_array_equal(got.view(np.uint16), want[:n].view(np.uint16))
    finally:
        module.set_level(max(LEVELS))


@pytest.mark.parametrize("level", LEVELS)
def test_float16_to_float32_is_numpys_widening_at_every_level(level: int) -> None:
    module = compiled("half")
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    want = h.astype(np.float32)
    module.set_level(level)
    try:
        for n in (h.size, 17, 3):
            got = np.empty(n, np.float32)
            module.to_single(h[:n], got)
            np.testing.assert_array_equal(got.view(np.uint32), want[:n].view(np.uint32))
    finally:
        module.set_level(max(LEVELS))


def test_the_module_checks_its_buffers() -> None:
    module = compiled("half")
    x = np.zeros(8, np.float32)
    for y in (np.zeros(7, np.float16), np.zeros(8, np.float32), np.zeros((8, 2), np.float16)[:, 0]):
        with pytest.raises((ValueError, BufferError)):
            module.to_half(x, y)
    with pytest.raises((ValueError, BufferError)):
        module.to_single(np.zeros(8, np.float16), np.zeros(8, np.float16))
    module.to_half(np.zeros(0, np.float32), np.zeros(0, np.float16))  # empty: nothing to do


@pytest.mark.parametrize("shape", [(3,), (600,), (24, 40), (5, 7, 11)])
def test_the_conversions_give_astypes_values_for_any_layout(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 300).astype(np.float32)
    views = [x, x.T, x[..., ::2]] if x.ndim > 1 else [x, x[::-1]]
    for v in views:
        np.testing.assert_array_equal(half.to_float16(v), v.astype(np.float16))
        h = v.astype(np.float16)
        np.testing.assert_array_equal(
            half.to_float32(h).view(np.uint32), h.astype(np.float32).view(np.uint32)
        )
        assert half.convert(v, np.dtype(np.float64)).dtype == np.float64


@pytest.mark.parametrize(("src", "dst"), [(np.float32, np.float16), (np.float16, np.float32)])
def test_a_cast_between_float32_and_float16_gives_numpys_bits(src, dst) -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((4, 300)) * 1000).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, 70000.0]
    with np.errstate(over="ignore"):  # (70000 is past float16's range: inf)
        x = x.astype(src)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=to)],
        "g",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info("y", to, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    _, got = assert_stepped_bits(model, {"x": x})
    with np.errstate(all="ignore"):
        want = x.astype(dst)
    bits = np.uint16 if dst == np.float16 else np.uint32
    np.testing.assert_array_equal(got["y"].view(bits), want.view(bits))


def test_a_float16_model_computes_in_float32_with_numpys_conversions() -> None:
    """A float16 Sigmoid: widened, computed in float32, narrowed, with numpy's bits at
    both conversions (the values the float32 kernel gives on numpy's float32 copy)."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((8, 512)) * 4).astype(np.float16)
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    _, got = assert_stepped_bits(model, {"x": x})
    wide = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    _, want32 = assert_stepped_bits(
        helper.make_model(wide, opset_imports=[helper.make_opsetid("", 17)]),
        {"x": x.astype(np.float32)},
    )
    np.testing.assert_array_equal(
        got["y"].view(np.uint16), want32["y"].astype(np.float16).view(np.uint16)
    )
