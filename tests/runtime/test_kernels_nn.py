"""Neural-network kernels (conv, pool, norm, resize, rnn, attention, loss, signal, ...).

1. Every ONNX backend node-test case whose op under test is one of ours must pass,
   except the explicit, commented known failures below.
2. Old opset forms and edge cases the node tests do not reach, checked against values
   derived by hand from the operator specs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime.invoke import call_node
from onnxviz.runtime.registry import resolve
from tests.runtime.nodecases import cases_for, check_case

pytestmark = pytest.mark.numeric

NN_OPS = [
    "Conv",
    "ConvTranspose",
    "ConvInteger",
    "QLinearConv",
    "DeformConv",
    "AveragePool",
    "MaxPool",
    "LpPool",
    "GlobalAveragePool",
    "GlobalLpPool",
    "GlobalMaxPool",
    "MaxRoiPool",
    "MaxUnpool",
    "RoiAlign",
    "NonMaxSuppression",
    "BatchNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    "LayerNormalization",
    "RMSNormalization",
    "LpNormalization",
    "MeanVarianceNormalization",
    "LRN",
    "Dropout",
    "Resize",
    "Upsample",
    "GridSample",
    "AffineGrid",
    "Col2Im",
    "LSTM",
    "GRU",
    "RNN",
    "Attention",
    "RotaryEmbedding",
    "LinearAttention",
    "FlexAttention",
    "CausalConvWithState",
    "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss",
    "DFT",
    "STFT",
    "HannWindow",
    "HammingWindow",
    "BlackmanWindow",
    "MelWeightMatrix",
    "ImageDecoder",
]

_NO_CODEC = "no image codec for this format without an image library (not a runtime dep)"

KNOWN_FAILURES: dict[str, str] = {
    "test_image_decoder_decode_jpeg2k_rgb": _NO_CODEC,
    "test_image_decoder_decode_webp_rgb": _NO_CODEC,
}


def _case_params() -> list[Any]:
    params = []
    for case in cases_for(NN_OPS):
        marks = []
        if case.name in KNOWN_FAILURES:
            marks.append(pytest.mark.xfail(reason=KNOWN_FAILURES[case.name], strict=True))
        params.append(pytest.param(case, id=case.name, marks=marks))
    return params


@pytest.mark.parametrize("case", _case_params())
def test_backend_node_case(case: Any) -> None:
    status, detail = check_case(case)
    assert status == "pass", detail


def test_every_version_registered() -> None:
    import onnx.defs

    missing = []
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.name not in NN_OPS:
            continue
        spec = resolve(schema.domain, schema.name, schema.since_version)
        if spec is None or spec.since_version != schema.since_version:
            missing.append(f"{schema.domain}:{schema.name}-{schema.since_version}")
    assert missing == []


def run(op: str, inputs: list[Any], opset: int, n_out: int = 1, **attrs: Any) -> list[Any]:
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    node = helper.make_node(op, names, [f"o{k}" for k in range(n_out)], **attrs)
    return call_node(node, inputs, {"": opset})


# --- old opset forms -------------------------------------------------------------------


def test_batchnorm_opset6_is_test_inference_and_spatial0() -> None:
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    scale = np.array([1.0, 2.0, 0.5], np.float32)
    bias = np.array([0.0, 1.0, -1.0], np.float32)
    mean = np.array([1.0, 2.0, 3.0], np.float32)
    var = np.array([4.0, 1.0, 0.25], np.float32)
    (y,) = run("BatchNormalization", [x, scale, bias, mean, var], 6, is_test=1, epsilon=0.0)
    want = (x - mean[None, :, None]) / np.sqrt(var[None, :, None]) * scale[None, :, None]
    np.testing.assert_allclose(y, want + bias[None, :, None], rtol=1e-6)
    # spatial=0: statistics are per activation (C, D1) instead of per channel.
    s2 = np.full((3, 2), 2.0, np.float32)
    b2 = np.zeros((3, 2), np.float32)
    m2 = np.ones((3, 2), np.float32)
    v2 = np.full((3, 2), 4.0, np.float32)
    (y2,) = run("BatchNormalization", [x, s2, b2, m2, v2], 7, spatial=0, epsilon=0.0)
    np.testing.assert_allclose(y2, (x - 1) / 2 * 2, rtol=1e-6)


def test_batchnorm_training_outputs_opset14() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 2, 3)).astype(np.float32)
    ones, zeros = np.ones(2, np.float32), np.zeros(2, np.float32)
    y, rm, rv = run(
        "BatchNormalization", [x, ones, zeros, zeros, ones], 14, 3, training_mode=1, momentum=0.5
    )
    mean = x.mean(axis=(0, 2))
    var = x.var(axis=(0, 2))
    np.testing.assert_allclose(rm, 0.5 * mean, rtol=1e-5)
    np.testing.assert_allclose(rv, 0.5 + 0.5 * var, rtol=1e-5)
    np.testing.assert_allclose(y.mean(axis=(0, 2)), 0, atol=1e-5)


def test_batchnorm_opset1_training_unless_is_test() -> None:
    x = np.array([[[1.0], [10.0]], [[3.0], [20.0]]], np.float32)  # N=2, C=2, L=1
    p = [np.ones(2, np.float32), np.zeros(2, np.float32)]
    y, rm, _, saved_mean, _ = run(
        "BatchNormalization", [x, *p, np.zeros(2, np.float32), np.ones(2, np.float32)], 1, 5
    )
    np.testing.assert_allclose(saved_mean, [2.0, 15.0])
    np.testing.assert_allclose(rm, [0.2, 1.5], rtol=1e-6)
    np.testing.assert_allclose(y[:, 0, 0], [-1, 1], atol=1e-2)


def test_dropout_old_opsets() -> None:
    x = np.arange(6, dtype=np.float32)
    y, mask = run("Dropout", [x], 7, 2, ratio=0.5)  # opset 7-10: inference identity
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.float32
    y10, mask10 = run("Dropout", [x], 10, 2)
    assert mask10.dtype == np.bool_ and mask10.all()
    big = np.ones(10000, np.float32)
    yt, mt = run("Dropout", [big], 6, 2, ratio=0.25)  # opset 6 trains unless is_test
    kept = mt.astype(bool)
    assert 0.7 < kept.mean() < 0.8
    np.testing.assert_allclose(yt[kept], 1 / 0.75, rtol=1e-6)
    assert not yt[~kept].any()


@pytest.mark.parametrize("opset", [9, 13])
def test_an_inference_dropout_makes_no_generator(opset: int) -> None:
    """Dropout at inference is x and an all-ones mask: the run's random generator (about
    100 us to make) is not made, and the mask allocates nothing (a read-only broadcast);
    a training Dropout in the same kind of graph still draws from it."""
    from onnx import TensorProto

    from onnxviz.runtime.session import Session

    def model(training: bool) -> Any:
        ins = ["x"] if opset < 12 else ["x", "r", "t"]
        inits = []
        if opset >= 12:
            inits = [
                helper.make_tensor("r", TensorProto.FLOAT, [], [0.5]),
                helper.make_tensor("t", TensorProto.BOOL, [], [training]),
            ]
        graph = helper.make_graph(
            [helper.make_node("Dropout", ins, ["y", "mask"], ratio=0.5)]
            if opset < 12
            else [helper.make_node("Dropout", ins, ["y", "mask"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 32])],
            [
                helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                helper.make_tensor_value_info("mask", TensorProto.UNDEFINED, None),
            ],
            inits,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])

    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    session = Session(model(False))
    got = session.run({"x": x})
    np.testing.assert_array_equal(got["y"], x)
    assert got["mask"].shape == x.shape and got["mask"].all()
    assert got["mask"].dtype == (np.float32 if opset < 10 else np.bool_)
    assert session._executor._rng is None
    if opset >= 12:
        trained = Session(model(True))
        drawn = trained.run({"x": x})
        assert trained._executor._rng is not None
        assert 0.3 < drawn["mask"].mean() < 0.7


def test_upsample_v1_and_v7_nearest() -> None:
    x = np.array([[[[1, 2], [3, 4]]]], np.float32)
    want = np.repeat(np.repeat(x, 2, axis=2), 3, axis=3)
    (y1,) = run("Upsample", [x], 1, height_scale=2.0, width_scale=3.0)
    (y7,) = run("Upsample", [x], 7, scales=[1.0, 1.0, 2.0, 3.0])
    (y9,) = run("Upsample", [x, np.array([1, 1, 2, 3], np.float32)], 9)
    for y in (y1, y7, y9):
        np.testing.assert_array_equal(y, want)


def test_lppool_opset1_float_p_and_global_lp() -> None:
    x = np.array([[[3.0, 4.0, 0.0, 12.0]]], np.float32)
    (y,) = run("LpPool", [x], 1, kernel_shape=[2], strides=[2], p=2.0)
    np.testing.assert_allclose(y, [[[5.0, 12.0]]])
    (g,) = run("GlobalLpPool", [x], 2, p=1)
    np.testing.assert_allclose(g, [[[19.0]]])


def test_gru_opset1_and_rnn_activation_defaults() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 2, 4)).astype(np.float32)
    w = rng.normal(size=(1, 3 * 5, 4)).astype(np.float32)
    r = rng.normal(size=(1, 3 * 5, 5)).astype(np.float32)
    y, yh = run("GRU", [x, w, r], 1, 2, hidden_size=5)
    assert y.shape == (3, 1, 2, 5)
    np.testing.assert_array_equal(y[-1], yh)
    # RNN with a single step and zero state is tanh(x W^T).
    wr = rng.normal(size=(1, 5, 4)).astype(np.float32)
    rr = rng.normal(size=(1, 5, 5)).astype(np.float32)
    _, h = run("RNN", [x[:1], wr, rr], 7, 2, hidden_size=5)
    np.testing.assert_allclose(h[0], np.tanh(x[0] @ wr[0].T), rtol=1e-5)


def test_lstm_sequence_lens_freezes_state_and_zeroes_outputs() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 2, 3)).astype(np.float32)
    w = rng.normal(size=(2, 4 * 2, 3)).astype(np.float32)
    r = rng.normal(size=(2, 4 * 2, 2)).astype(np.float32)
    lens = np.array([4, 2], np.int32)
    y, yh, _ = run("LSTM", [x, w, r, None, lens], 14, 3, hidden_size=2, direction="bidirectional")
    assert not y[2:, :, 1].any()
    np.testing.assert_allclose(yh[0, 1], y[1, 0, 1])  # forward: last valid step
    np.testing.assert_allclose(yh[1, 1], y[0, 1, 1])  # reverse: ends at step 0
    # The second sample alone, truncated, must give the same results.
    y2, yh2, _ = run("LSTM", [x[:2, 1:], w, r], 14, 3, hidden_size=2, direction="bidirectional")
    np.testing.assert_allclose(y2[:, :, 0], y[:2, :, 1], rtol=1e-5)
    np.testing.assert_allclose(yh2[:, 0], yh[:, 1], rtol=1e-5)


# --- edge cases and errors -------------------------------------------------------------


def test_maxpool_indices_storage_order_column_major() -> None:
    x = np.array([[[[1, 5], [7, 2]]]], np.float32)
    y, idx = run("MaxPool", [x], 12, 2, kernel_shape=[2, 2], storage_order=1)
    assert y.item() == 7 and idx.dtype == np.int64
    assert idx.item() == 1  # (h=1, w=0) column-major: w * H + h


def test_maxpool_int8_and_uint8() -> None:
    x = np.array([[[[-128, -5], [-7, -100]]]], np.int8)
    (y,) = run("MaxPool", [x], 12, kernel_shape=[2, 2], pads=[1, 1, 1, 1], strides=[2, 2])
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, [[[[-128, -5], [-7, -100]]]])


def test_conv_float16_and_float64_dtypes_kept() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1, 2, 5, 5))
    w = rng.normal(size=(3, 2, 3, 3))
    (y64,) = run("Conv", [x, w], 11)
    (y16,) = run("Conv", [x.astype(np.float16), w.astype(np.float16)], 11)
    assert y64.dtype == np.float64 and y16.dtype == np.float16
    np.testing.assert_allclose(y16, y64, rtol=2e-2, atol=5e-2)


def test_conv_rejects_mismatched_channels() -> None:
    x = np.zeros((1, 3, 4, 4), np.float32)
    w = np.zeros((2, 2, 3, 3), np.float32)
    with pytest.raises(ExecutionError, match="channels"):
        run("Conv", [x, w], 11)


def test_resize_rejects_unknown_mode() -> None:
    x = np.zeros((1, 1, 2, 2), np.float32)
    with pytest.raises(ExecutionError, match="mode"):
        run("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)], 13, mode="bogus")


def test_kernels_do_not_mutate_inputs() -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 4, 6, 6)).astype(np.float32)
    keep = x.copy()
    w = rng.normal(size=(4, 1, 3, 3)).astype(np.float32)
    run("Conv", [x, w], 11, group=4, pads=[1, 1, 1, 1])
    run("MaxPool", [x], 12, 2, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    run("LayerNormalization", [x, np.ones(6, np.float32)], 17)
    run("InstanceNormalization", [x, np.ones(4, np.float32), np.zeros(4, np.float32)], 6)
    q = rng.normal(size=(1, 2, 3, 4)).astype(np.float32)
    qk = q.copy()
    cache = np.ones((3, 2), np.float32)
    run("RotaryEmbedding", [q, cache, cache, np.array([[0, 1, 2]], np.int64)], 23)
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_array_equal(q, qk)


def test_attention_fully_masked_row_is_zero_not_nan() -> None:
    q = np.ones((1, 1, 2, 4), np.float32)
    k = np.ones((1, 1, 3, 4), np.float32)
    v = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    mask = np.array([[False, False, False], [True, True, False]])
    (y,) = run("Attention", [q, k, v, mask], 23)
    assert not np.isnan(y).any()
    np.testing.assert_array_equal(y[0, 0, 0], 0)
    np.testing.assert_allclose(y[0, 0, 1], v[0, 0, :2].mean(axis=0))


def test_depthwise_conv_with_channel_multiplier() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 7, 7)).astype(np.float32)
    w = rng.normal(size=(6, 1, 3, 3)).astype(np.float32)
    (y,) = run("Conv", [x, w], 11, group=3, strides=[2, 2], pads=[1, 1, 1, 1])
    # Reference: each output channel m reads input channel m // 2, by explicit windows.
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 6, 4, 4), np.float32)
    for m in range(6):
        for i in range(4):
            for j in range(4):
                patch = xp[:, m // 2, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3]
                want[:, m, i, j] = (patch * w[m, 0]).sum(axis=(1, 2))
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_group_norm_opset18_scale_is_per_group() -> None:
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 4, 3)).astype(np.float32)
    scale = np.array([2.0, -1.0], np.float32)  # per group at opset 18
    bias = np.array([0.5, 1.0], np.float32)
    (y,) = run("GroupNormalization", [x, scale, bias], 18, num_groups=2, epsilon=0.0)
    g = x.reshape(2, 2, 6)
    normed = (g - g.mean(axis=2, keepdims=True)) / g.std(axis=2, keepdims=True)
    want = normed * scale[None, :, None] + bias[None, :, None]
    np.testing.assert_allclose(y, want.reshape(x.shape), rtol=1e-5, atol=1e-5)


def test_lstm_opset1_matches_opset14() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(3, 2, 4)).astype(np.float32)
    w = (rng.normal(size=(1, 8, 4)) / 2).astype(np.float32)
    r = (rng.normal(size=(1, 8, 2)) / 2).astype(np.float32)
    old = run("LSTM", [x, w, r], 1, 3, hidden_size=2, output_sequence=1)
    new = run("LSTM", [x, w, r], 14, 3, hidden_size=2)
    for a, b in zip(old, new):
        np.testing.assert_array_equal(a, b)
    # One step by hand (gate order i, o, f, c; zero state): h = o * tanh(i * c~).
    g = x[0] @ w[0].T
    sig = 1 / (1 + np.exp(-g))
    h = sig[:, 2:4] * np.tanh(sig[:, 0:2] * np.tanh(g[:, 6:8]))
    np.testing.assert_allclose(new[0][0, 0], h, rtol=1e-5)


# --- ImageDecoder on hand-built files ---------------------------------------------------


def _png(pixels: np.ndarray) -> bytes:
    """RGB PNG whose row r uses filter type r % 5 (forward filters per the PNG spec)."""
    import struct
    import zlib

    h, w, _ = pixels.shape
    raw = b""
    prev = np.zeros(w * 3, dtype=np.int64)
    for r in range(h):
        row = pixels[r].reshape(-1).astype(np.int64)
        left = np.concatenate([np.zeros(3, np.int64), row[:-3]])
        up_left = np.concatenate([np.zeros(3, np.int64), prev[:-3]])
        kind = r % 5
        if kind == 0:
            pred = np.zeros_like(row)
        elif kind == 1:
            pred = left
        elif kind == 2:
            pred = prev
        elif kind == 3:
            pred = (left + prev) // 2
        else:
            p = left + prev - up_left
            pa, pb, pc = abs(p - left), abs(p - prev), abs(p - up_left)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, up_left))
        raw += bytes([kind]) + ((row - pred) % 256).astype(np.uint8).tobytes()
        prev = row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _decode(data: bytes, fmt: str = "RGB") -> np.ndarray:
    (out,) = run("ImageDecoder", [np.frombuffer(data, dtype=np.uint8)], 20, pixel_format=fmt)
    return out


def test_image_decoder_png_all_filters_and_pixel_formats() -> None:
    pixels = np.random.default_rng(8).integers(0, 256, size=(10, 7, 3), dtype=np.uint8)
    data = _png(pixels)
    np.testing.assert_array_equal(_decode(data), pixels)
    np.testing.assert_array_equal(_decode(data, "BGR"), pixels[..., ::-1])
    gray = _decode(data, "Grayscale")
    want = (pixels[..., 0] * 0.299 + pixels[..., 1] * 0.587 + pixels[..., 2] * 0.114)[..., None]
    assert gray.shape == (10, 7, 1) and gray.dtype == np.uint8
    assert np.abs(gray.astype(float) - want).max() <= 1


def test_image_decoder_bmp_and_pnm() -> None:
    import struct

    pixels = np.random.default_rng(9).integers(0, 256, size=(3, 5, 3), dtype=np.uint8)
    stride = (5 * 3 + 3) // 4 * 4
    body = b"".join(
        pixels[r, :, ::-1].tobytes() + b"\0" * (stride - 15) for r in reversed(range(3))
    )
    header = struct.pack("<2sIHHI", b"BM", 54 + len(body), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, 5, 3, 1, 24, 0, len(body), 0, 0, 0, 0)
    np.testing.assert_array_equal(_decode(header + info + body), pixels)
    ascii_pnm = b"P3\n# comment\n2 1\n15\n15 0 0  0 15 3\n"
    np.testing.assert_array_equal(_decode(ascii_pnm), [[[255, 0, 0], [0, 255, 51]]])


def test_image_decoder_rejects_unknown_data() -> None:
    with pytest.raises(ExecutionError, match="codec"):
        _decode(b"RIFF\0\0\0\0WEBPVP8 ")
