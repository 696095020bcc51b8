"""com.microsoft contrib kernels against onnxruntime, which implements them natively."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.session import Session
from tests.ort_reference import exact_options
from tests.runtime.differential import assert_stepped_bits
from tests.runtime.nodecases import run_graph_simply, single_node_model

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
RNG = np.random.default_rng(1234)


def _f(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape).astype(np.float32)


def compare_with_ort(
    op: str,
    inputs: list[np.ndarray | None],
    n_out: int = 1,
    domain: str = MS,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    constants: tuple[int, ...] = (),
    **attrs: Any,
) -> None:
    model, feeds = single_node_model(op, inputs, n_out, domain, attrs, constants)
    session = ort.InferenceSession(
        model.SerializeToString(), exact_options(ort, None), providers=["CPUExecutionProvider"]
    )
    names = [i.name for i in model.graph.input]
    expected = session.run(None, dict(zip(names, feeds, strict=True)))
    actual = run_graph_simply(model, feeds)
    assert len(actual) == len(expected)
    for e, a in zip(expected, actual):
        assert a.shape == e.shape
        assert a.dtype == e.dtype
        if e.dtype == object:
            assert a.tolist() == e.tolist()
        else:
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


def test_gelu_family() -> None:
    x = _f(3, 7)
    compare_with_ort("Gelu", [x])
    compare_with_ort("BiasGelu", [x, _f(7)])
    compare_with_ort("FastGelu", [x, _f(7)])
    compare_with_ort("FastGelu", [x, None])
    compare_with_ort("QuickGelu", [x], alpha=1.5)
    compare_with_ort("QuickGelu", [x])  # default alpha 1.702


def test_gelu_float16_computed_in_float32() -> None:
    compare_with_ort("Gelu", [_f(4, 5).astype(np.float16)], rtol=1e-3, atol=1e-3)
    compare_with_ort(
        "BiasGelu", [_f(4, 5).astype(np.float16), _f(5).astype(np.float16)], rtol=1e-3, atol=1e-3
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_bias_gelu_is_the_gelu_kernel_of_the_sum(dtype) -> None:
    """BiasGelu runs the Gelu pass over its own sum in place: the Gelu kernel's bits of
    a + b, in the input's dtype, and never the inputs written."""
    from onnxviz.runtime.kernels.contrib_ms import bias_gelu
    from onnxviz.runtime.kernels.math_activation import gelu

    a = (_f(3, 32, 64) * 4).astype(dtype)  # values across erf's pieces
    b = _f(64).astype(dtype)
    a0, b0 = a.copy(), b.copy()
    got = bias_gelu(a, b)
    total = a.astype(np.float32) + b.astype(np.float32) if dtype == np.float16 else a + b
    want = gelu(total).astype(dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_bias_add_formula() -> None:
    # onnxruntime has no CPU kernel for BiasAdd: check the documented formula.
    x, b, s = _f(2, 3, 4), _f(4), _f(2, 3, 4)
    model, feeds = single_node_model("BiasAdd", [x, b, s], 1, MS, {})
    (y,) = run_graph_simply(model, feeds)
    np.testing.assert_allclose(y, x + b + s, rtol=1e-6)


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "attrs"),
    [
        ((2, 3, 4), (2, 4, 5), {"alpha": 0.5}),
        ((2, 4, 3), (2, 4, 5), {"transA": 1}),
        ((2, 3, 4), (2, 5, 4), {"transB": 1, "alpha": 2.0}),
        ((2, 4, 3), (2, 5, 4), {"transA": 1, "transB": 1}),
        ((3, 2, 4), (2, 4, 5), {"transBatchA": 1}),
        ((4, 2, 3), (2, 4, 5), {"transBatchA": 1, "transA": 1}),
        ((2, 3, 4), (4, 2, 5), {"transBatchB": 1}),
        ((2, 3, 4), (5, 2, 4), {"transBatchB": 1, "transB": 1}),
        ((3, 4), (4, 6), {}),
    ],
)
def test_fused_matmul(a_shape: tuple[int, ...], b_shape: tuple[int, ...], attrs: Any) -> None:
    compare_with_ort("FusedMatMul", [_f(*a_shape), _f(*b_shape)], **attrs)


def test_skip_layer_normalization_all_outputs() -> None:
    compare_with_ort(
        "SkipLayerNormalization", [_f(2, 3, 8), _f(2, 3, 8), _f(8), _f(8), _f(8)], 4, epsilon=1e-5
    )
    # 2-D skip broadcast over the batch, default epsilon, no beta/bias.
    compare_with_ort("SkipLayerNormalization", [_f(2, 3, 8), _f(3, 8), _f(8)], 4)


def test_skip_simplified_layer_normalization() -> None:
    compare_with_ort(
        "SkipSimplifiedLayerNormalization",
        [_f(2, 3, 8), _f(2, 3, 8), _f(8), _f(8)],
        4,
        epsilon=1e-5,
        atol=2e-5,
    )


def test_simplified_and_contrib_layer_normalization_in_default_domain() -> None:
    compare_with_ort("SimplifiedLayerNormalization", [_f(2, 3, 8), _f(8)], 2, domain="")
    compare_with_ort("SimplifiedLayerNormalization", [_f(2, 3, 8), _f(3, 8)], 2, domain="", axis=1)


def test_simplified_layer_normalization_com_microsoft_matches_default_domain() -> None:
    x, g = _f(2, 5, 6), _f(6)
    ms_model, feeds = single_node_model("SimplifiedLayerNormalization", [x, g], 1, MS, {})
    std_model, _ = single_node_model("SimplifiedLayerNormalization", [x, g], 1, "", {})
    np.testing.assert_array_equal(
        run_graph_simply(ms_model, feeds)[0], run_graph_simply(std_model, feeds)[0]
    )
    rms = np.sqrt((x.astype(np.float64) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(run_graph_simply(ms_model, feeds)[0], x / rms * g, rtol=1e-5)


def test_embed_layer_normalization() -> None:
    ids = RNG.integers(0, 10, (2, 5)).astype(np.int32)
    seg = RNG.integers(0, 2, (2, 5)).astype(np.int32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    compare_with_ort(
        "EmbedLayerNormalization",
        [ids, seg, _f(10, 8), _f(6, 8), _f(2, 8), _f(8), _f(8), mask],
        3,
    )
    compare_with_ort(
        "EmbedLayerNormalization", [ids, None, _f(10, 8), _f(6, 8), None, _f(8), _f(8)], 2
    )
    # a wide row; and int64 ids (onnxruntime takes int32 only) give the int32 numbers
    tables = [_f(10, 96), _f(6, 96), _f(2, 96), _f(96), _f(96)]
    compare_with_ort("EmbedLayerNormalization", [ids, seg, *tables, mask], 3)
    from onnxviz.runtime.kernels.contrib_ms import embed_layer_norm

    narrow = embed_layer_norm(ids, seg, *tables, mask)
    wide = embed_layer_norm(ids.astype(np.int64), seg.astype(np.int64), *tables, mask)
    for a, b in zip(narrow, wide, strict=True):
        np.testing.assert_array_equal(a, b)


def test_embed_layer_normalization_compiled_rows_match_the_numpy_steps() -> None:
    """The compiled call (native/_norm.c's embed) gives embed_sum's sums bit for bit and
    the layer norm of them within float32 rounding, for each table layout it takes."""
    from onnxviz.runtime.kernels import contrib_ms, row_norm

    if row_norm.module() is None:
        pytest.skip("compiled kernels are off: the numpy steps are the only path")
    for cols, batch, seq, with_segment in ((8, 2, 5, True), (33, 1, 7, False), (128, 3, 4, True)):
        word, pos, segt = _f(50, cols) * 3, _f(9, cols), _f(3, cols)
        gamma, beta = _f(cols), _f(cols)
        ids = RNG.integers(0, 50, (batch, seq)).astype(np.int32)
        seg = RNG.integers(0, 3, (batch, seq)).astype(np.int64)
        seg_in, table = (seg, segt) if with_segment else (None, None)
        y, total = contrib_ms._embed_compiled(
            ids, seg_in, word, pos, table, gamma, beta, None, 1e-12
        )
        want_total = contrib_ms.embed_sum(ids, seg_in, word, pos, table, None)
        np.testing.assert_array_equal(total, want_total)
        t64 = want_total.astype(np.float64)
        mean = t64.mean(-1, keepdims=True)
        ref = (t64 - mean) / np.sqrt(t64.var(-1, keepdims=True) + np.float32(1e-12)) * gamma + beta
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("native", ["on", "off"])
@pytest.mark.parametrize(
    ("ids", "seg", "pos_rows", "message"),
    [
        ([[1, 50]], None, 9, "word id out of range"),
        ([[1, -1]], None, 9, "word id out of range"),
        ([[1, 2]], [[0, 3]], 9, "segment id out of range"),
        ([[1, 2]], [[-1, 0]], 9, "segment id out of range"),
        ([[1, 2, 3]], None, 2, "sequence longer than position table"),
    ],
)
def test_embed_layer_normalization_ids_outside_their_tables(
    native, ids, seg, pos_rows, message, monkeypatch
) -> None:
    """An id outside its table is the run's error, naming which (never numpy's negative
    indexing from the end, nor a read outside the table)."""
    from onnxviz.errors import ExecutionError
    from onnxviz.runtime.kernels import contrib_ms, row_norm

    if native == "off":
        monkeypatch.setattr(row_norm, "_NORM", None)
    ids_a = np.array(ids, np.int32)
    seg_a = None if seg is None else np.array(seg, np.int32)
    with pytest.raises(ExecutionError, match=message):
        contrib_ms.embed_layer_norm(
            ids_a, seg_a, _f(50, 8), _f(pos_rows, 8), None if seg is None else _f(3, 8),
            _f(8), _f(8),
        )  # fmt: skip


X3 = _f(2, 4, 16)
W48 = _f(16, 48)
B48 = _f(48)


@pytest.mark.parametrize(
    ("extra", "attrs"),
    [
        ([], {"num_heads": 4}),
        ([np.array([3, 4], np.int32)], {"num_heads": 4}),  # right padding lengths
        ([np.array([4, 3, 0, 1], np.int32)], {"num_heads": 4}),  # end / start positions
        ([np.array([[1, 1, 0, 1], [1, 1, 1, 0]], np.int32)], {"num_heads": 2, "unidirectional": 1}),
        ([np.ones((2, 4, 4), np.int32) * np.array([1, 0, 1, 1], np.int32)], {"num_heads": 4}),
    ],
)
def test_attention_masks(extra: list[np.ndarray], attrs: Any) -> None:
    compare_with_ort("Attention", [X3, W48, B48, *extra], **attrs)


@pytest.mark.parametrize(
    ("extra", "attrs"),
    [
        ([np.array([3, 4], np.int32)], {"num_heads": 4}),
        ([np.array([[1, 1, 0, 1], [1, 1, 1, 0]], np.int32)], {"num_heads": 2, "unidirectional": 1}),
    ],
)
def test_attention_with_initializer_weights_takes_its_packed_weights(
    extra: list[np.ndarray], attrs: Any
) -> None:
    """Weights and bias as initializers (an exporter's Attention): the projection by the
    weights packed once (the specialized call of unwatched runs; the kernel's own route in
    a stepped run), onnxruntime's numbers, and the stepped run's bits on every run, the
    kept additive mask read again."""
    compare_with_ort("Attention", [X3, W48, B48, *extra], constants=(1, 2), **attrs)
    model, feeds = single_node_model("Attention", [X3, W48, B48, *extra], 1, MS, attrs, (1, 2))
    names = [i.name for i in model.graph.input]
    session, _ = assert_stepped_bits(model, dict(zip(names, feeds, strict=True)), runs=3)
    (pn,) = run_nodes(session.plan)
    from onnxviz.runtime.kernels import packed_gemm

    if packed_gemm.module() is not None:  # (kernels off: no packed form, the kernel runs)
        assert "_specialize_attention" in pn.call.__qualname__  # not the kernel


def test_attention_mask_values_change_between_runs() -> None:
    """The additive mask kept for one mask's values is never another's."""
    model, feeds = single_node_model(
        "Attention", [X3, W48, B48, np.array([3, 4], np.int32)], 1, MS, {"num_heads": 4}, (1, 2)
    )
    session = Session(model)
    ort_session = ort.InferenceSession(
        model.SerializeToString(), exact_options(ort, None), providers=["CPUExecutionProvider"]
    )
    for lengths in ([3, 4], [1, 2], [3, 4], [4, 4]):
        mask = np.array(lengths, np.int32)
        got = session.run({"in0": X3, "in3": mask})["out0"]
        want = ort_session.run(None, {"in0": X3, "in3": mask})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_attention_with_past_and_present() -> None:
    mask = np.array([[1, 1, 0, 1, 1, 1, 1], [1, 1, 1, 0, 1, 1, 1]], np.int32)
    compare_with_ort(
        "Attention", [X3, W48, B48, mask, _f(2, 2, 2, 3, 8)], 2, num_heads=2, unidirectional=1
    )


def test_attention_uneven_qkv_sizes_bias_and_scale() -> None:
    compare_with_ort(
        "Attention",
        [X3, _f(16, 40), _f(40), None, None, _f(2, 4, 4, 4)],
        num_heads=4,
        qkv_hidden_sizes=[16, 16, 8],
        scale=0.3,
        atol=2e-5,
    )


@pytest.mark.parametrize("bits", [2, 4])
def test_matmul_nbits(bits: int) -> None:
    k, n, block = 40, 6, 16
    k_blocks = (k + block - 1) // block
    packed = RNG.integers(0, 256, (n, k_blocks, block * bits // 8)).astype(np.uint8)
    scales = _f(n * k_blocks)
    attrs = {"K": k, "N": n, "block_size": block, "bits": bits}
    compare_with_ort("MatMulNBits", [_f(3, k), packed, scales], rtol=1e-4, atol=1e-4, **attrs)
    zp = RNG.integers(0, 256, (n, (k_blocks * bits + 7) // 8)).astype(np.uint8)
    compare_with_ort(
        "MatMulNBits",
        [_f(2, 3, k), packed, scales, zp, None, _f(n)],
        rtol=1e-4,
        atol=1e-4,
        **attrs,
    )
    compare_with_ort(
        "MatMulNBits", [_f(3, k), packed, scales, _f(n, k_blocks)], rtol=1e-4, atol=1e-4, **attrs
    )


def test_matmul_nbits_8bit_against_dequantised_weights() -> None:
    # onnxruntime's CPU kernel lacks 8-bit unpacked compute: check against the definition.
    k, n, block = 32, 3, 16
    q = RNG.integers(0, 256, (n, 2, block)).astype(np.uint8)
    scales = _f(n, 2)
    a = _f(4, k)
    model, feeds = single_node_model(
        "MatMulNBits", [a, q, scales], 1, MS, {"K": k, "N": n, "block_size": block, "bits": 8}
    )
    (y,) = run_graph_simply(model, feeds)
    w = (q.reshape(n, k).astype(np.float64) - 128) * np.repeat(scales, block, axis=1)
    np.testing.assert_allclose(y, a @ w.T, rtol=1e-4, atol=1e-3)


STRINGS = np.array([["Hello World", "I love computer science !"], ["a,b;;c", "  x  "]], object)


@pytest.mark.parametrize(
    ("data", "attrs"),
    [
        (STRINGS, {"mark": 1, "pad_value": "#", "mincharnum": 1, "separators": [" "]}),
        (STRINGS, {"mark": 0, "pad_value": "#", "mincharnum": 2, "separators": [" ", ";", ","]}),
        (STRINGS, {"mark": 1, "pad_value": "#", "mincharnum": 1, "separators": [""]}),
        (STRINGS, {"mark": 0, "pad_value": "#", "mincharnum": 2, "tokenexp": "[a-zA-Z]+"}),
        (STRINGS[0], {"mark": 1, "pad_value": "#", "mincharnum": 1, "tokenexp": "."}),
        (
            np.array(["   "], object),
            {"mark": 1, "pad_value": "#", "mincharnum": 1, "separators": [" "]},
        ),
    ],
)
def test_tokenizer(data: np.ndarray, attrs: Any) -> None:
    compare_with_ort("Tokenizer", [data], **attrs)


def test_contrib_errors_are_execution_errors() -> None:
    from onnxviz.errors import ExecutionError

    model, feeds = single_node_model(
        "MatMulNBits",
        [_f(2, 8), np.zeros((1, 1, 8), np.uint8), _f(1)],
        1,
        MS,
        {"K": 8, "N": 1, "block_size": 16, "bits": 3},
    )
    with pytest.raises(ExecutionError, match="bits"):
        run_graph_simply(model, feeds)
    model, feeds = single_node_model("Attention", [X3, _f(16, 47)], 1, MS, {"num_heads": 4})
    with pytest.raises(ExecutionError, match="Q, K, V"):
        run_graph_simply(model, feeds)


def _u8(*shape: int) -> np.ndarray:
    return RNG.integers(0, 256, shape).astype(np.uint8)


def _i8(*shape: int) -> np.ndarray:
    return RNG.integers(-128, 128, shape).astype(np.int8)


def _s(value: float) -> np.ndarray:
    return np.array(value, np.float32)


def test_fused_gemm_and_conv() -> None:
    compare_with_ort(
        "FusedGemm", [_f(3, 4), _f(4, 5), _f(5)], alpha=0.5, beta=2.0, activation="Relu"
    )
    compare_with_ort(
        "FusedGemm",
        [_f(4, 3), _f(5, 4), _f(3, 5)],
        transA=1,
        transB=1,
        activation="LeakyRelu",
        activation_alpha=0.2,
    )
    compare_with_ort("FusedGemm", [_f(3, 4), _f(4, 5)], activation="Tanh")
    compare_with_ort(
        "FusedConv", [_f(1, 3, 8, 8), _f(4, 3, 3, 3), _f(4)], activation="Relu", pads=[1, 1, 1, 1]
    )
    compare_with_ort(
        "FusedConv",
        [_f(1, 3, 8, 8), _f(4, 3, 3, 3), _f(4), _f(1, 4, 6, 6)],
        activation="Clip",
        activation_params=[-0.5, 0.5],
    )
    compare_with_ort(
        "FusedConv",
        [_f(1, 3, 8, 8), _f(4, 3, 3, 3), None],
        activation="HardSigmoid",
        activation_params=[0.3, 0.4],
    )


def _i8_exact_for_ort(*shape: int) -> np.ndarray:
    """int8 weights onnxruntime multiplies exactly on every CPU: its AVX2 u8s8 kernels
    (no VNNI) add pairs of u8 x s8 products in saturating int16, exact while
    2 * 255 * |b| <= 32767, i.e. |b| <= 64."""
    return RNG.integers(-64, 64, shape).astype(np.int8)


def _ours(op: str, inputs: list[np.ndarray | None]) -> np.ndarray:
    model, feeds = single_node_model(op, inputs, 1, MS, {})
    return run_graph_simply(model, feeds)[0]


def _exact_integer_matmul_to_float(a, b, a_scale, b_scale, a_zp=None, b_zp=None, bias=None):
    """(A - zp_a) @ (B - zp_b) in int64, scaled in float64: what the op means."""
    ai = a.astype(np.int64) - (0 if a_zp is None else a_zp.astype(np.int64))
    bi = b.astype(np.int64) - (0 if b_zp is None else b_zp.astype(np.int64))
    y = (ai @ bi).astype(np.float64) * (a_scale.astype(np.float64) * b_scale.astype(np.float64))
    return y if bias is None else y + bias


@pytest.mark.numeric
def test_integer_matmuls_to_float() -> None:
    zp_a, zp_b = np.array(100, np.uint8), np.array(3, np.int8)
    # Full int8 range: against exact integer arithmetic (onnxruntime's u8s8 kernels may
    # saturate there on AVX2 machines without VNNI).
    a, b, bias = _u8(3, 64), _i8(64, 5), _f(5)
    args = [a, b, _s(0.02), _s(0.03), zp_a, zp_b, bias]
    want = _exact_integer_matmul_to_float(a, b, _s(0.02), _s(0.03), zp_a, zp_b, bias)
    np.testing.assert_allclose(_ours("MatMulIntegerToFloat", args), want, rtol=1e-6, atol=1e-5)
    b_u8, col_scale = _u8(64, 5), np.full(5, 0.03, np.float32)
    a3 = _u8(2, 3, 64)
    want = _exact_integer_matmul_to_float(a3, b_u8, _s(0.02), col_scale)
    got = _ours("MatMulIntegerToFloat", [a3, b_u8, _s(0.02), col_scale])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
    # Against onnxruntime where its result is exact by construction.
    compare_with_ort(
        "MatMulIntegerToFloat",
        [_u8(3, 4), _i8_exact_for_ort(4, 5), _s(0.02), _s(0.03), zp_a, zp_b, _f(5)],
    )
    compare_with_ort("MatMulIntegerToFloat", [_u8(2, 3, 4), _u8(4, 5), _s(0.02), col_scale])
    compare_with_ort(
        "DynamicQuantizeMatMul", [_f(3, 4), _i8_exact_for_ort(4, 5), _s(0.03), None, _f(5)]
    )
    compare_with_ort(
        "DynamicQuantizeMatMul", [_f(2, 3, 4), _u8(4, 5), np.full(5, 0.03, np.float32), _u8(5)]
    )


def test_qgemm_quantized_and_float_outputs() -> None:
    bias = RNG.integers(-100, 100, 5).astype(np.int32)
    zp = np.array(128, np.uint8)
    compare_with_ort(
        "QGemm",
        [_u8(3, 4), _s(0.02), zp, _i8(4, 5), _s(0.03), np.array(0, np.int8), bias, _s(0.05), zp],
        constants=(3, 4, 5),  # B and its parameters: a weight
    )
    compare_with_ort(
        "QGemm",
        [_u8(3, 4), _s(0.02), zp, _i8(5, 4), np.full(5, 0.03, np.float32), np.zeros(5, np.int8)],
        constants=(3, 4, 5),
        transB=1,
    )


def test_qlinear_elementwise_pool_concat() -> None:
    zp = np.array(128, np.uint8)
    compare_with_ort(
        "QLinearAdd",
        # Ratios like 0.05/0.1 make many exact half-way values: rounding must agree.
        [_u8(64, 32), _s(0.05), zp, _u8(32), _s(0.07), np.array(100, np.uint8), _s(0.1), zp],
    )
    compare_with_ort(
        "QLinearMul",
        [
            _i8(64, 32),
            _s(0.05),
            np.array(1, np.int8),
            _i8(64, 32),
            _s(0.07),
            np.array(-3, np.int8),
            _s(0.1),
            np.array(5, np.int8),
        ],
    )
    compare_with_ort(
        "QLinearSigmoid", [_u8(2, 5), _s(0.05), zp, _s(1 / 256), np.array(0, np.uint8)]
    )
    compare_with_ort(
        "QLinearLeakyRelu",
        [_i8(2, 5), _s(0.05), np.array(3, np.int8), _s(0.04), np.array(-2, np.int8)],
        alpha=0.1,
    )
    # onnxruntime sums the dequantised float32 values and divides, so a mean on a
    # half-way point can round the other way (one step); ours equals exact arithmetic.
    pool_in = [_s(0.05), zp, _s(0.02), np.array(100, np.uint8)]
    for shape, last in (((1, 3, 4, 4), 0), ((1, 4, 4, 3), 1), ((2, 5, 3, 3), 0)):
        x = _u8(*shape)
        compare_with_ort(
            "QLinearGlobalAveragePool", [x, *pool_in], rtol=0, atol=1, channels_last=last
        )
        model, feeds = single_node_model(
            "QLinearGlobalAveragePool", [x, *pool_in], 1, MS, {"channels_last": last}
        )
        axes = (1, 2) if last else (2, 3)
        exact = (x.astype(np.int64) - 128).sum(axis=axes, keepdims=True) * np.float64(
            np.float32(0.05)
        )
        count = shape[axes[0]] * shape[axes[1]]
        want = np.clip(np.round(exact / count / np.float64(np.float32(0.02))) + 100, 0, 255)
        (ours,) = run_graph_simply(model, feeds)
        np.testing.assert_array_equal(ours, want.astype(np.uint8))
    compare_with_ort(
        "QLinearConcat",
        [_s(0.1), zp, _u8(2, 3), _s(0.05), zp, _u8(2, 2), _s(0.2), np.array(10, np.uint8)],
        axis=1,
    )


def test_qlinear_average_pool_reduce_mean_softmax_where() -> None:
    """QOperator output of onnxruntime.quantization (a pooled conv net, attention) uses
    these four.  Results are within one quantisation step of onnxruntime's: it sums the
    dequantised float32 values in window order and divides, so a mean that lands on a
    half-way point can round the other way (ours sums more exactly); its softmax reads exp
    from a lookup table.  QLinearWhere selects and requantises: exact."""
    zp = np.array(128, np.uint8)
    pool_in = [_s(0.05), zp, _s(0.03), np.array(120, np.uint8)]
    exact = {"rtol": 0, "atol": 1}
    compare_with_ort(
        "QLinearAveragePool", [_u8(2, 3, 7, 7), *pool_in], kernel_shape=[3, 3], **exact
    )
    compare_with_ort(
        "QLinearAveragePool",
        [_u8(1, 2, 9, 8), *pool_in],
        kernel_shape=[3, 2],
        strides=[2, 2],
        pads=[1, 0, 1, 1],
        ceil_mode=1,
        **exact,
    )
    compare_with_ort(
        "QLinearAveragePool",
        [_u8(1, 6, 6, 4), *pool_in],
        kernel_shape=[2, 2],
        pads=[1, 1, 1, 1],
        count_include_pad=1,
        channels_last=1,
        **exact,
    )
    compare_with_ort(
        "QLinearAveragePool",
        [_i8(1, 2, 16), _s(0.1), np.array(-3, np.int8), _s(0.07), np.array(2, np.int8)],
        kernel_shape=[4],
        strides=[3],
        **exact,
    )
    # onnxruntime has the schema of QLinearReduceMean but no CPU kernel: exact arithmetic
    # (integer sums, one rounding half to even) is the reference.
    data = _i8(4, 6, 5)
    model, feeds = single_node_model(
        "QLinearReduceMean",
        [data, _s(0.1), np.array(1, np.int8), _s(0.05), np.array(-4, np.int8)],
        1,
        MS,
        {"axes": [0, 2], "keepdims": 0},
    )
    (got,) = run_graph_simply(model, feeds)
    sums = (data.astype(np.int64) - 1).sum(axis=(0, 2))
    scale_in, scale_out = np.float64(np.float32(0.1)), np.float64(np.float32(0.05))
    want = np.clip(np.rint(sums * scale_in / 20 / scale_out) - 4, -128, 127)
    np.testing.assert_array_equal(got, want.astype(np.int8))
    assert got.shape == (6,) and got.dtype == np.int8
    for opset in (12, 13):
        compare_with_ort(
            "QLinearSoftmax",
            [_u8(3, 4, 10), _s(0.08), zp, _s(1 / 256), np.array(0, np.uint8)],
            axis=-1 if opset >= 13 else 2,
            opset=opset,
            rtol=0,
            atol=1,
        )
    cond = RNG.random((3, 5)) > 0.5
    compare_with_ort(
        "QLinearWhere",
        [cond, _u8(3, 5), _s(0.05), zp, _u8(1, 5), _s(0.1), np.array(100, np.uint8), _s(0.07), zp],
        rtol=0,
        atol=0,
    )


B, S, L, N, H = 2, 3, 5, 2, 4


@pytest.mark.parametrize(
    ("inputs", "attrs"),
    [
        ([_f(B, S, N * H), _f(B, L, N * H), _f(B, L, N * H)], {}),
        ([_f(B, S, N * H), _f(B, L, N * H), _f(B, L, N * H), _f(3 * N * H)], {}),
        (
            [_f(B, S, N * H), _f(B, L, N * H), _f(B, L, N * H), None, np.array([3, 5], np.int32)],
            {},
        ),
        (
            [
                _f(B, S, N * H),
                _f(B, L, N * H),
                _f(B, L, N * H),
                None,
                np.array([[1, 1, 0, 1, 1], [1, 1, 1, 1, 0]], np.int32),
            ],
            {},
        ),
        ([_f(B, S, N * H), _f(B, N, L, H), _f(B, N, L, H)], {}),
    ],
)
def test_multi_head_attention(inputs: list[np.ndarray | None], attrs: Any) -> None:
    compare_with_ort("MultiHeadAttention", inputs, num_heads=N, **attrs)


def test_multi_head_attention_causal_with_cache_and_bias() -> None:
    compare_with_ort(
        "MultiHeadAttention",
        [
            _f(B, S, N * H),
            _f(B, S, N * H),
            _f(B, S, N * H),
            _f(3 * N * H),
            None,
            _f(B, N, S, S + 4),
            _f(B, N, 4, H),
            _f(B, N, 4, H),
        ],
        3,
        num_heads=N,
        unidirectional=1,
        scale=0.4,
    )


def test_multi_head_attention_packed_layouts_match_unpacked() -> None:
    # onnxruntime's CPU kernel has no packed layouts: compare with the unpacked form.  The
    # unpacked self-attention runs the compiled attention (native/_gqa.c), the packed ones
    # numpy's steps: the same values within float32 rounding, not the same bits.
    q, k, v = _f(B, S, N, H), _f(B, S, N, H), _f(B, S, N, H)
    flat = [t.reshape(B, S, N * H) for t in (q, k, v)]
    plain_model, feeds = single_node_model("MultiHeadAttention", flat, 1, MS, {"num_heads": N})
    (expected,) = run_graph_simply(plain_model, feeds)
    packed_qkv = np.stack([q, k, v], axis=3)  # [B, S, N, 3, H]
    model, feeds = single_node_model("MultiHeadAttention", [packed_qkv], 1, MS, {"num_heads": N})
    np.testing.assert_allclose(run_graph_simply(model, feeds)[0], expected, rtol=1e-5, atol=1e-6)
    packed_kv = np.stack([k, v], axis=3)  # [B, L, N, 2, H]
    model, feeds = single_node_model(
        "MultiHeadAttention", [flat[0], packed_kv], 1, MS, {"num_heads": N}
    )
    np.testing.assert_allclose(run_graph_simply(model, feeds)[0], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding(interleaved: int) -> None:
    positions = np.array([[0, 1, 2], [3, 4, 5]], np.int64)
    compare_with_ort(
        "RotaryEmbedding",
        [_f(B, S, N * H), positions, _f(8, H // 2), _f(8, H // 2)],
        interleaved=interleaved,
    )
    compare_with_ort(
        "RotaryEmbedding",
        [_f(B, N, S, H), np.array([2], np.int64), _f(8, H // 2), _f(8, H // 2)],
        interleaved=interleaved,
    )
    compare_with_ort(  # partial rotation: only the first 4 of 8 head dims
        "RotaryEmbedding",
        [_f(B, S, N * 8), positions, _f(8, 2), _f(8, 2)],
        interleaved=interleaved,
        num_heads=N,
        rotary_embedding_dim=4,
    )


def _lens(*values: int) -> np.ndarray:
    return np.array(values, np.int32)


GB, GS, GN, GK, GH = 2, 4, 4, 2, 16  # GQA: batch, sequence, q heads, kv heads, head size


@pytest.mark.parametrize(
    ("inputs", "attrs"),
    [
        # prompt, separate Q/K/V
        (
            [_f(GB, GS, GN * GH), _f(GB, GS, GK * GH), _f(GB, GS, GK * GH), None, None]
            + [_lens(GS - 1, GS - 1), _lens(GS)],
            {},
        ),
        # one decoding step after 5 cached tokens
        (
            [_f(GB, 1, GN * GH), _f(GB, 1, GK * GH), _f(GB, 1, GK * GH)]
            + [_f(GB, GK, 5, GH), _f(GB, GK, 5, GH), _lens(5, 5), _lens(6)],
            {},
        ),
        # shared 10-slot cache buffer, ragged lengths, interleaved rotary
        (
            [_f(GB, 1, GN * GH), _f(GB, 1, GK * GH), _f(GB, 1, GK * GH)]
            + [_f(GB, GK, 10, GH), _f(GB, GK, 10, GH), _lens(5, 3), _lens(6)]
            + [_f(16, GH // 2), _f(16, GH // 2)],
            {"do_rotary": 1, "rotary_interleaved": 1},
        ),
        # packed QKV prompt with rotary
        (
            [_f(GB, GS, (GN + 2 * GK) * GH), None, None, None, None, _lens(3, 3), _lens(4)]
            + [_f(16, GH // 2), _f(16, GH // 2)],
            {"do_rotary": 1},
        ),
        (
            [_f(GB, GS, GN * GH), _f(GB, GS, GK * GH), _f(GB, GS, GK * GH), None, None]
            + [_lens(3, 3), _lens(4)],
            {"softcap": 2.0, "local_window_size": 2, "scale": 0.3},
        ),
        (
            [_f(GB, GS, GN * GH), _f(GB, GS, GK * GH), _f(GB, GS, GK * GH), None, None]
            + [_lens(3, 3), _lens(4)],
            {"smooth_softmax": 1},
        ),
        # head sinks and an attention bias
        (
            [_f(GB, GS, GN * GH), _f(GB, GS, GK * GH), _f(GB, GS, GK * GH), None, None]
            + [_lens(3, 3), _lens(4), None, None, None, _f(GB, 1, GS, GS), _f(GN)],
            {},
        ),
    ],
)
def test_group_query_attention(inputs: list[np.ndarray | None], attrs: Any) -> None:
    compare_with_ort("GroupQueryAttention", inputs, 3, num_heads=GN, kv_num_heads=GK, **attrs)


def test_cdist() -> None:
    compare_with_ort("CDist", [_f(5, 3), _f(4, 3)])
    compare_with_ort(
        "CDist", [_f(5, 3).astype(np.float64), _f(4, 3).astype(np.float64)], metric="euclidean"
    )


def test_murmur_hash3_strings_and_numbers() -> None:
    words = np.array([["hello", "world", ""], ["ab", "abc", "abcdé😀"]], dtype=object)
    compare_with_ort("MurmurHash3", [words])
    compare_with_ort("MurmurHash3", [words], positive=0, seed=42)
    for dtype in (np.int32, np.uint32, np.int64, np.uint64):
        compare_with_ort("MurmurHash3", [RNG.integers(0, 1000, (3, 4)).astype(dtype)], seed=7)
    compare_with_ort(
        "MurmurHash3", [RNG.integers(-1000, 1000, (3, 4)).astype(np.int64)], positive=0
    )
    compare_with_ort("MurmurHash3", [_f(3, 4)])
    compare_with_ort("MurmurHash3", [_f(3, 4).astype(np.float64)])
