"""MatMulNBits at each accuracy_level (runtime/nbits_accuracy.py): ours is exact at levels
0-3 and rounds the activations to int8 steps at level 4, as onnxruntime does and
`emulate_level4` computes it; where two engines part there, a comparison says why."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime.exact_integer import peer_inexact
from onnxviz.runtime.nbits_accuracy import emulate_level4
from onnxviz.runtime.session import Session

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(11)
M, K, N, BLOCK = 5, 200, 24, 32  # K not a multiple of the block: a padded last block
KB = (K + BLOCK - 1) // BLOCK


def _case(zp_kind: str) -> dict[str, Any]:
    packed = RNG.integers(0, 256, (N, KB, BLOCK // 2)).astype(np.uint8)
    scales = (RNG.random(N * KB) * 0.1 + 0.01).astype(np.float32)
    zp: np.ndarray | None = None
    if zp_kind == "uint8":
        zp = RNG.integers(0, 256, (N, (KB + 1) // 2)).astype(np.uint8)
    return {
        "b": packed,
        "scales": scales,
        "zp": zp,
        "bias": RNG.standard_normal(N).astype(np.float32),
    }


def _model(case: dict[str, Any], level: int) -> onnx.ModelProto:
    inits = [
        numpy_helper.from_array(case["b"], "B"),
        numpy_helper.from_array(case["scales"], "S"),
        numpy_helper.from_array(case["bias"], "bias"),
    ]
    zp_name = ""
    if case["zp"] is not None:
        inits.append(numpy_helper.from_array(case["zp"], "Z"))
        zp_name = "Z"
    node = helper.make_node(
        "MatMulNBits",
        ["A", "B", "S", zp_name, "", "bias"],
        ["Y"],
        domain="com.microsoft",
        K=K,
        N=N,
        bits=4,
        block_size=BLOCK,
        accuracy_level=level,
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [M, N])],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    return model


def _ort(model: onnx.ModelProto, a: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"A": a})[0]


def _exact(case: dict[str, Any], a: np.ndarray) -> np.ndarray:
    """The op's definition in float64: dequantized weights times float activations."""
    from onnxviz.runtime.kernels.contrib_quant import unpack_bits

    q = unpack_bits(case["b"], 4, BLOCK).reshape(N, KB * BLOCK)[:, :K].astype(np.float64)
    zp = np.full((N, KB), 8.0)
    if case["zp"] is not None:
        zp = unpack_bits(case["zp"], 4, KB).astype(np.float64)
    block = np.arange(K) // BLOCK
    w = (q - zp[:, block]) * case["scales"].reshape(N, KB)[:, block]
    return a.astype(np.float64) @ w.T + case["bias"]


def _ort_quantizes(case: dict[str, Any], a: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """onnxruntime's level-4 result, the test skipped where its CPU kernel computes level 4
    in float (no int8 kernel on this CPU)."""
    theirs4 = _ort(_model(case, 4), a)
    if np.allclose(theirs4, exact, rtol=0, atol=1e-5 * float(np.abs(exact).max())):
        pytest.skip("onnxruntime has no int8 MatMulNBits kernel on this CPU (level 4 is float)")
    return np.asarray(theirs4)


@pytest.mark.numeric
@pytest.mark.parametrize("zp_kind", ["none", "uint8"])
def test_ours_is_exact_below_level4_and_quantizes_at_level4_as_ort(zp_kind: str) -> None:
    case = _case(zp_kind)
    a = RNG.standard_normal((M, K)).astype(np.float32)
    exact = _exact(case, a)
    scale = float(np.abs(exact).max())
    kw = {"K": K, "N": N, "block_size": BLOCK, "bits": 4}
    emulated = emulate_level4(a, case["b"], case["scales"], case["zp"], case["bias"], **kw)
    for level in (0, 1, 2, 3):
        ours = Session(_model(case, level)).run({"A": a})["Y"]
        np.testing.assert_allclose(ours, exact, rtol=0, atol=1e-5 * scale)
    ours4 = Session(_model(case, 4)).run({"A": a})["Y"]
    np.testing.assert_allclose(ours4, emulated, rtol=0, atol=1e-5 * scale)
    # ...which is far from the exact result: the difference is the quantization's
    assert float(np.abs(ours4 - exact).max()) > 100 * float(np.abs(ours4 - emulated).max())
    np.testing.assert_allclose(_ort(_model(case, 0), a), exact, rtol=0, atol=1e-5 * scale)
    # onnxruntime's level 4 is the same int8 arithmetic, up to float rounding
    theirs4 = _ort_quantizes(case, a, exact)
    np.testing.assert_allclose(theirs4, emulated, rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(ours4, theirs4, rtol=0, atol=1e-5 * scale)


def test_emulation_quantizes_each_block_to_int8_steps() -> None:
    """A block whose values are multiples of max/127 loses nothing; any other loses at
    most half a step per value."""
    case = _case("none")
    kw = {"K": K, "N": N, "block_size": BLOCK, "bits": 4}
    steps = RNG.integers(-127, 128, (1, K)).astype(np.float32)
    steps[0, ::BLOCK] = 127  # every block's max is exactly 127 steps
    a = steps * np.float32(0.25)
    exact = _exact(case, a)
    got = emulate_level4(a, case["b"], case["scales"], None, case["bias"], **kw)
    np.testing.assert_allclose(got, exact, rtol=1e-6, atol=1e-5)
    noisy = a + RNG.uniform(-0.1, 0.1, a.shape).astype(np.float32)
    assert not np.allclose(
        emulate_level4(noisy, case["b"], case["scales"], None, case["bias"], **kw),
        _exact(case, noisy),
        atol=1e-4,
    )


def _boundary_rows(count: int) -> np.ndarray:
    """Rows of A where ``x * (127 / max)`` and ``x / (max / 127)`` round to different
    integers somewhere: only the first is onnxruntime's arithmetic."""
    rows = []
    while len(rows) < count:
        a = RNG.standard_normal((4096, K)).astype(np.float32)
        pad = np.zeros((a.shape[0], KB * BLOCK - K), np.float32)
        blocks = np.concatenate([a, pad], axis=1).reshape(a.shape[0], KB, BLOCK)
        amax = np.abs(blocks).max(-1)
        one = np.rint(blocks * (np.float32(127) / amax)[..., None])
        two = np.rint(blocks * (np.float32(1) / (amax / np.float32(127)))[..., None])
        rows.extend(a[np.any(one != two, axis=(1, 2))])
    return np.stack(rows[:count])


@pytest.mark.numeric
def test_level4_emulation_scales_by_127_over_max_as_onnxruntime_does() -> None:
    case = _case("none")
    a = _boundary_rows(M)
    theirs4 = _ort(_model(case, 4), a)
    exact = _exact(case, a)
    scale = float(np.abs(exact).max())
    if np.allclose(theirs4, exact, rtol=0, atol=1e-5 * scale):
        pytest.skip("onnxruntime has no int8 MatMulNBits kernel on this CPU (level 4 is float)")
    kw = {"K": K, "N": N, "block_size": BLOCK, "bits": 4}
    emulated = emulate_level4(a, case["b"], case["scales"], None, case["bias"], **kw)
    np.testing.assert_allclose(theirs4, emulated, rtol=0, atol=1e-5 * scale)


@pytest.mark.numeric
def test_comparison_says_which_engine_quantized() -> None:
    case = _case("uint8")
    a = RNG.standard_normal((M, K)).astype(np.float32)
    model4 = _model(case, 4)
    inits = {t.name: numpy_helper.to_array(t) for t in model4.graph.initializer}
    value_of = {**inits, "A": a}.get
    node = model4.graph.node[0]
    ours4 = Session(model4).run({"A": a})["Y"]
    float_product = Session(_model(case, 0)).run({"A": a})["Y"]
    kw = {"K": K, "N": N, "block_size": BLOCK, "bits": 4}
    emulated = emulate_level4(a, case["b"], case["scales"], case["zp"], case["bias"], **kw)
    # a peer that computed level 4 in float (onnxruntime on a CPU without int8 kernels)
    note = peer_inexact(node, value_of, ours4, float_product)
    assert "in float although accuracy_level 4 allows int8" in note
    # a peer that quantized where ours did not (ours at a float level, say)
    note = peer_inexact(node, value_of, float_product, emulated)
    assert "accuracy_level 4 with int8-quantized activations" in note
    # both quantized, from an input one step apart: neighbouring steps
    nudged = a.copy()
    k = int(np.argsort(np.abs(a[2]))[K // 2])
    nudged[2, k] += np.abs(a[2, (k // BLOCK) * BLOCK :][:BLOCK]).max() / 127
    theirs = emulate_level4(nudged, case["b"], case["scales"], case["zp"], case["bias"], **kw)
    assert float(np.abs(theirs - ours4).max()) > 1e-4 * float(np.abs(ours4).max())
    assert "neighbouring steps" in peer_inexact(node, value_of, ours4, theirs)
    # a peer that is simply wrong is not excused, nor a node below level 4
    assert peer_inexact(node, value_of, ours4, emulated + 1.0) == ""
    model0 = _model(case, 0)
    assert peer_inexact(model0.graph.node[0], value_of, float_product, emulated) == ""
    # where onnxruntime quantizes, it agrees with ours: nothing to explain
    theirs4 = _ort_quantizes(case, a, _exact(case, a))
    np.testing.assert_allclose(ours4, theirs4, rtol=0, atol=1e-5 * float(np.abs(ours4).max()))
