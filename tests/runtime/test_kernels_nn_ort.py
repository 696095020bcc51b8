"""Neural-network kernels against onnxruntime on random data at realistic shapes:
grouped / depthwise / dilated / strided / padded convolutions, ConvTranspose with
output_padding and output_shape, pooling variants, normalizations, Resize modes,
recurrent layers, region pooling, and old opset forms onnxruntime still runs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, ValueInfoProto, helper

from onnxviz.runtime.invoke import call_node

pytestmark = pytest.mark.numeric

ort = pytest.importorskip("onnxruntime")

_TYPES = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def compare(
    op: str,
    inputs: list[np.ndarray | None],
    opset: int,
    n_out: int = 1,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    **attrs: Any,
) -> None:
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, _TYPES[v.dtype], v.shape)
            for n, v in zip(names, inputs)
            if v is not None
        ],
        [ValueInfoProto(name=o) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = {n: v for n, v in zip(names, inputs) if v is not None}
    theirs = session.run(None, feeds)
    ours = call_node(node, inputs, {"": opset})
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert a is not None, f"output {k} missing"
        assert a.dtype == b.dtype, f"output {k}: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"output {k}: shape {a.shape} != {b.shape}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {k}")


RNG = np.random.default_rng(1234)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CONV_CASES = [
    ("3x3_pad", (1, 16, 20, 20), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("1x1", (2, 32, 14, 14), (16, 32, 1, 1), {}),
    ("1x1_stride2", (1, 32, 14, 14), (16, 32, 1, 1), {"strides": [2, 2]}),
    ("7x7_s2", (1, 3, 32, 32), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    ("grouped", (1, 32, 12, 12), (64, 8, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    # ShuffleNet's grouped 1x1 convs: the batched product on the image in place
    ("grouped_1x1", (2, 24, 9, 7), (36, 6, 1, 1), {"group": 4}),
    ("grouped_1x1_stride2", (1, 24, 9, 7), (36, 8, 1, 1), {"group": 3, "strides": [2, 2]}),
    ("depthwise", (2, 24, 15, 15), (24, 1, 3, 3), {"group": 24, "pads": [1, 1, 1, 1]}),
    (
        "depthwise_s2",
        (1, 16, 16, 16),
        (16, 1, 5, 5),
        {"group": 16, "strides": [2, 2], "pads": [2, 2, 2, 2]},
    ),
    ("dilated", (1, 8, 17, 17), (8, 8, 3, 3), {"dilations": [2, 3], "pads": [2, 3, 2, 3]}),
    ("asym_pads", (1, 4, 9, 11), (6, 4, 3, 2), {"pads": [0, 1, 2, 0], "strides": [2, 1]}),
    ("same_upper", (1, 4, 10, 9), (4, 4, 4, 3), {"auto_pad": "SAME_UPPER", "strides": [3, 2]}),
    ("same_lower", (1, 4, 10, 9), (4, 4, 4, 3), {"auto_pad": "SAME_LOWER", "strides": [3, 2]}),
    ("valid", (1, 4, 10, 9), (4, 4, 3, 3), {"auto_pad": "VALID"}),
    ("conv1d", (2, 6, 30), (4, 6, 5), {"pads": [2, 2], "strides": [2]}),
    # Several small items of a 1x1: one batched product, then the bias.
    ("pointwise_batch4", (4, 16, 8, 8), (32, 16, 1, 1), {}),
    ("conv1d_pointwise_batch4", (4, 16, 256), (64, 16, 1), {}),
    ("3x3_s2_phases", (1, 16, 70, 66), (8, 16, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (
        "dilated_strided_phases",
        (2, 32, 13, 12),
        (4, 32, 3, 2),
        {"strides": [2, 3], "dilations": [2, 1], "pads": [1, 0, 2, 1]},
    ),
    (
        "depthwise_s2_phases",
        (1, 8, 40, 40),
        (8, 1, 3, 3),
        {"group": 8, "strides": [2, 2], "pads": [1] * 4},
    ),
    (
        "depthwise_mult2_s2_phases",
        (2, 4, 30, 30),
        (8, 1, 3, 3),
        {"group": 4, "strides": [2, 2], "pads": [1] * 4},
    ),
    ("conv1d_s3_phases", (1, 16, 3100), (6, 16, 4), {"strides": [3], "pads": [2, 1]}),
    ("conv3d", (1, 3, 6, 7, 8), (4, 3, 3, 3, 3), {"pads": [1] * 6}),
    # Big enough (>= 1024 outputs) for the shifted-GEMM paths, whose crop adds the bias.
    ("shifted_s1_bias", (1, 16, 34, 34), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    # Fewer than 8 input channels: one im2col GEMM from the flat layout (RGB stems).
    ("few_channels_s1", (1, 3, 40, 40), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("few_channels_s2", (2, 3, 70, 66), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3] * 4}),
    ("shifted_s2_bias", (2, 16, 48, 50), (8, 16, 3, 3), {"strides": [2, 2], "pads": [1] * 4}),
]


def test_conv_scratch_buffers_do_not_leak_between_calls() -> None:
    """Conv temporaries are reused between calls: an earlier result must stay intact
    after later convs of the same and of other shapes (fresh outputs only)."""
    x1, x2, w, b = rand(1, 16, 34, 34), rand(1, 16, 34, 34), rand(24, 16, 3, 3), rand(24)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    first = call_node(node, [x1, w, b], {"": 11})[0]
    kept = first.copy()
    second = call_node(node, [x2, w, b], {"": 11})[0]
    call_node(
        helper.make_node("Conv", ["x", "w"], ["y"]),
        [rand(1, 3, 40, 40), rand(4, 3, 5, 5)],
        {"": 11},
    )
    np.testing.assert_array_equal(first, kept)
    assert not np.shares_memory(first, second)


@pytest.mark.parametrize(
    "shape_x, shape_w, attrs", [c[1:] for c in CONV_CASES], ids=[c[0] for c in CONV_CASES]
)
def test_conv_vs_ort(
    shape_x: tuple[int, ...], shape_w: tuple[int, ...], attrs: dict[str, Any]
) -> None:
    x, w, b = rand(*shape_x), rand(*shape_w), rand(shape_w[0])
    compare("Conv", [x, w, b], 11, **attrs)


CONV_T_CASES = [
    (
        "s2_outpad",
        (1, 8, 7, 7),
        (8, 4, 3, 3),
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
    ),
    (
        "grouped_dilated",
        (1, 6, 5, 6),
        (6, 2, 3, 3),
        {"group": 3, "dilations": [2, 2], "strides": [1, 2]},
    ),
    ("output_shape", (1, 4, 5, 5), (4, 3, 3, 3), {"strides": [2, 2], "output_shape": [10, 11]}),
    ("conv1d_t", (2, 3, 9), (3, 5, 4), {"strides": [3], "pads": [1, 2]}),
    ("conv3d_t", (1, 2, 3, 4, 3), (2, 3, 2, 2, 2), {"strides": [2, 2, 2]}),
    # Kernel == stride: the non-overlapping interleave path (UNet upsampling).
    ("k_eq_s_2d", (2, 4, 5, 6), (4, 3, 2, 2), {"strides": [2, 2], "group": 2}),
    ("k_eq_s_pads", (1, 3, 5, 4), (3, 2, 3, 2), {"strides": [3, 2], "pads": [1, 0, 2, 1]}),
    ("k_eq_s_outpad", (1, 3, 4, 4), (3, 2, 2, 2), {"strides": [2, 2], "output_padding": [1, 1]}),
    ("k_eq_s_1d", (2, 3, 7), (3, 4, 3), {"strides": [3]}),
]


@pytest.mark.parametrize(
    "shape_x, shape_w, attrs", [c[1:] for c in CONV_T_CASES], ids=[c[0] for c in CONV_T_CASES]
)
def test_conv_transpose_vs_ort(
    shape_x: tuple[int, ...], shape_w: tuple[int, ...], attrs: dict[str, Any]
) -> None:
    x, w = rand(*shape_x), rand(*shape_w)
    b = rand(shape_w[1] * attrs.get("group", 1))
    compare("ConvTranspose", [x, w, b], 11, **attrs)


POOL_CASES = [
    ("MaxPool", 12, 2, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", 12, 2, {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", 12, 2, {"kernel_shape": [2, 3], "dilations": [2, 2], "strides": [1, 2]}),
    ("MaxPool", 12, 2, {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("MaxPool", 12, 2, {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ("MaxPool", 8, 2, {"kernel_shape": [2, 2], "strides": [2, 2], "storage_order": 1}),
    ("MaxPool", 1, 1, {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("AveragePool", 19, 1, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", 19, 1, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 0}),
    (
        "AveragePool",
        19,
        1,
        {
            "kernel_shape": [3, 3],
            "strides": [2, 2],
            "ceil_mode": 1,
            "pads": [1, 1, 1, 1],
            "count_include_pad": 1,
        },
    ),
    ("AveragePool", 19, 1, {"kernel_shape": [2, 2], "dilations": [2, 2]}),
    ("AveragePool", 7, 1, {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"}),
    ("LpPool", 18, 1, {"kernel_shape": [3, 3], "strides": [2, 2], "p": 3, "pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize(
    "op, opset, n_out, attrs",
    POOL_CASES,
    ids=[f"{c[0]}{c[1]}_{k}" for k, c in enumerate(POOL_CASES)],
)
def test_pool_vs_ort(op: str, opset: int, n_out: int, attrs: dict[str, Any]) -> None:
    compare(op, [rand(2, 3, 11, 12)], opset, n_out, **attrs)


def test_maxpool_3d_and_1d_with_indices_vs_ort() -> None:
    compare(
        "MaxPool",
        [rand(1, 2, 5, 6, 7)],
        12,
        2,
        kernel_shape=[2, 3, 2],
        strides=[2, 2, 1],
        pads=[1, 0, 1, 0, 1, 0],
    )
    compare("MaxPool", [rand(2, 3, 15)], 12, 2, kernel_shape=[4], strides=[3], ceil_mode=1)


def test_stride1_pools_flat_path_vs_ort() -> None:
    """Stride-1 pools run on the flattened padded tensor (windows wrap past row ends and
    are cropped): dilated, asymmetric-padded, 3-D and 1-D windows, with and without
    indices, must still match exactly."""
    x = rand(2, 3, 9, 10)
    compare("MaxPool", [x], 12, 2, kernel_shape=[3, 2], dilations=[2, 3], pads=[2, 0, 1, 1])
    compare("MaxPool", [x], 12, 1, kernel_shape=[1, 3], pads=[0, 1, 0, 1])
    compare("AveragePool", [x], 19, 1, kernel_shape=[3, 3], dilations=[1, 2], pads=[1, 2, 1, 2])
    compare("AveragePool", [x], 19, 1, kernel_shape=[7, 7], count_include_pad=0)
    compare("MaxPool", [rand(1, 2, 5, 6, 7)], 12, 2, kernel_shape=[2, 3, 2], pads=[1] * 6)
    compare("AveragePool", [rand(2, 3, 15)], 19, 1, kernel_shape=[4], pads=[2, 1])


def test_pool_scratch_buffers_do_not_leak_between_calls() -> None:
    """Stride-1 pools reuse their window buffers: earlier results stay intact."""
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    first = call_node(node, [rand(1, 4, 9, 9)], {"": 12})[0]
    kept = first.copy()
    second = call_node(node, [rand(1, 4, 9, 9)], {"": 12})[0]
    avg = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2])
    call_node(avg, [rand(1, 4, 9, 9)], {"": 19})
    np.testing.assert_array_equal(first, kept)
    assert not np.shares_memory(first, second)


def test_global_pools_vs_ort() -> None:
    x = rand(2, 5, 7, 6)
    compare("GlobalAveragePool", [x], 1)
    compare("GlobalMaxPool", [x], 1)
    compare("GlobalLpPool", [x], 2, p=3)


def test_normalizations_vs_ort() -> None:
    x = rand(3, 8, 6, 5)
    c = x.shape[1]
    scale, bias = rand(c), rand(c)
    mean, var = rand(c), np.abs(rand(c)) + 0.5
    compare("BatchNormalization", [x, scale, bias, mean, var], 15)
    compare("BatchNormalization", [x, scale, bias, mean, var], 9)
    compare("BatchNormalization", [x, scale, bias, mean, var], 7)
    compare("InstanceNormalization", [x, scale, bias], 6, epsilon=1e-3)
    compare("LayerNormalization", [x, rand(6, 5), rand(6, 5)], 17, 3, axis=2)
    compare("GroupNormalization", [x, scale, bias], 21, num_groups=4)
    compare("LRN", [x], 13, size=3, alpha=1e-3, beta=0.6, bias=1.5)
    compare("LpNormalization", [x], 1, axis=1, p=1)
    compare("MeanVarianceNormalization", [x], 13, rtol=1e-3, atol=1e-4)


def test_batchnorm_training_vs_ort() -> None:
    x = rand(4, 3, 5, 5)
    c = 3
    compare(
        "BatchNormalization",
        [x, rand(c), rand(c), rand(c), np.abs(rand(c)) + 0.1],
        15,
        3,
        training_mode=1,
        momentum=0.7,
    )


RESIZE_CASES = [
    {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    {
        "mode": "nearest",
        "coordinate_transformation_mode": "half_pixel",
        "nearest_mode": "round_prefer_ceil",
    },
    {
        "mode": "nearest",
        "coordinate_transformation_mode": "align_corners",
        "nearest_mode": "round_prefer_floor",
    },
    {"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
    {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
    {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    {"mode": "cubic", "coordinate_transformation_mode": "half_pixel", "cubic_coeff_a": -0.5},
    {"mode": "cubic", "coordinate_transformation_mode": "asymmetric", "exclude_outside": 1},
]


@pytest.mark.parametrize(
    "attrs",
    RESIZE_CASES,
    ids=[f"{a['mode']}-{a['coordinate_transformation_mode']}" for a in RESIZE_CASES],
)
@pytest.mark.parametrize(
    "scales",
    [[1.0, 1.0, 2.0, 1.5], [1.0, 1.0, 0.5, 0.7], [1.0, 1.0, 2.0, 3.0]],
    ids=["up", "down", "up-whole"],  # whole factors: nearest repeats elements (a copy)
)
def test_resize_vs_ort(attrs: dict[str, Any], scales: list[float]) -> None:
    # Sizes where n * scale is whole: with a fractional n * scale, align_corners divides by
    # the real-valued length (the spec and the ONNX test data), onnxruntime by the integer.
    x = rand(1, 2, 8, 10)
    compare("Resize", [x, None, np.array(scales, np.float32)], 13, **attrs)


def test_resize_sizes_and_antialias_vs_ort() -> None:
    x = rand(1, 3, 16, 20)
    sizes = np.array([1, 3, 7, 9], np.int64)
    compare("Resize", [x, None, None, sizes], 18, mode="linear", antialias=1)
    compare("Resize", [x, None, None, sizes], 18, mode="cubic", antialias=1, rtol=1e-3, atol=1e-4)
    compare(
        "Resize",
        [x, None, None, np.array([8, 8], np.int64)],
        18,
        mode="linear",
        axes=[2, 3],
        keep_aspect_ratio_policy="not_larger",
    )
    roi = np.array([0, 0, 0.1, 0.2, 1, 1, 0.8, 0.9], np.float32)
    compare(
        "Resize",
        [x, roi, None, sizes],
        13,
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-1.0,
    )


def test_upsample_and_resize10_vs_ort() -> None:
    x = rand(1, 2, 4, 5)
    compare("Upsample", [x, np.array([1, 1, 2, 3], np.float32)], 9, mode="nearest")
    compare("Upsample", [x, np.array([1, 1, 2, 2.5], np.float32)], 9, mode="linear")
    compare("Upsample", [x], 7, scales=[1.0, 1.0, 3.0, 2.0])
    compare("Resize", [x, np.array([1, 1, 0.5, 0.6], np.float32)], 10, mode="nearest")


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_vs_ort(direction: str) -> None:
    d = 2 if direction == "bidirectional" else 1
    t, b, i, h = 6, 3, 5, 4
    x = rand(t, b, i)
    w, r, bias = rand(d, 4 * h, i), rand(d, 4 * h, h), rand(d, 8 * h)
    lens = np.array([6, 3, 1], np.int32)
    h0, c0, p = rand(d, b, h), rand(d, b, h), rand(d, 3 * h)
    compare("LSTM", [x, w, r, bias, lens, h0, c0, p], 14, 3, hidden_size=h, direction=direction)
    compare(
        "LSTM", [x, w, r, bias], 7, 3, hidden_size=h, direction=direction, clip=0.5, input_forget=1
    )


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_plain_loop_vs_ort(direction: str) -> None:
    """No peepholes, no sequence_lens: the in-place time loop (reused gate buffer, cell
    state updated in place, h written into Y)."""
    d = 2 if direction == "bidirectional" else 1
    t, b, i, h = 7, 3, 5, 4
    x = rand(t, b, i)
    w, r, bias = rand(d, 4 * h, i), rand(d, 4 * h, h), rand(d, 8 * h)
    h0, c0 = rand(d, b, h), rand(d, b, h)
    compare("LSTM", [x, w, r, bias, None, h0, c0], 14, 3, hidden_size=h, direction=direction)
    compare("LSTM", [x, w, r], 14, 3, hidden_size=h, direction=direction, clip=0.7)
    compare(
        "LSTM",
        [x, w, r, bias],
        14,
        3,
        hidden_size=h,
        direction=direction,
        activations=["HardSigmoid", "Tanh", "Softsign"] * d,
    )


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_vs_ort(lbr: int) -> None:
    t, b, i, h = 5, 2, 4, 3
    x = rand(t, b, i)
    w, r, bias = rand(2, 3 * h, i), rand(2, 3 * h, h), rand(2, 6 * h)
    lens = np.array([5, 2], np.int32)
    compare(
        "GRU",
        [x, w, r, bias, lens, rand(2, b, h)],
        14,
        2,
        hidden_size=h,
        direction="bidirectional",
        linear_before_reset=lbr,
    )


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_plain_loop_vs_ort(lbr: int) -> None:
    """No sequence_lens: the buffered time loop (h written straight into Y)."""
    t, b, i, h = 6, 3, 4, 5
    x = rand(t, b, i)
    w, r, bias = rand(2, 3 * h, i), rand(2, 3 * h, h), rand(2, 6 * h)
    attrs: dict[str, Any] = {"hidden_size": h, "linear_before_reset": lbr}
    compare("GRU", [x, w, r, bias, None, rand(2, b, h)], 14, 2, direction="bidirectional", **attrs)
    compare("GRU", [x, w[:1], r[:1]], 14, 2, clip=0.6, **attrs)
    compare("GRU", [x, w[1:], r[1:], bias[1:]], 14, 2, direction="reverse", **attrs)


def test_rnn_vs_ort_with_activations() -> None:
    x = rand(4, 2, 3)
    w, r, bias = rand(2, 5, 3), rand(2, 5, 5), rand(2, 10)
    compare(
        "RNN",
        [x, w, r, bias],
        14,
        2,
        hidden_size=5,
        direction="bidirectional",
        activations=["LeakyRelu", "HardSigmoid"],
        activation_alpha=[0.1, 0.3],
        activation_beta=[0.4],
    )


def test_region_ops_vs_ort() -> None:
    x = rand(2, 3, 12, 14)
    rois = np.array([[0, 1, 1, 8, 9], [1, 0, 2, 13, 7], [0, 5, 5, 5, 5]], np.float32)
    compare("MaxRoiPool", [x, rois], 1, pooled_shape=[3, 2], spatial_scale=1.0)
    boxes = np.array([[1, 1, 8, 9], [0, 2, 13, 7.5], [3.3, 2.2, 9.1, 11.7]], np.float32)
    idx = np.array([0, 1, 1], np.int64)
    compare(
        "RoiAlign",
        [x, boxes, idx],
        16,
        output_height=3,
        output_width=4,
        sampling_ratio=2,
        spatial_scale=0.8,
    )
    compare("RoiAlign", [x, boxes, idx], 16, output_height=2, output_width=2, mode="max")


def test_quantized_convs_vs_ort() -> None:
    x = RNG.integers(0, 255, size=(1, 4, 9, 9), dtype=np.uint8)
    w = RNG.integers(-100, 100, size=(6, 2, 3, 3), dtype=np.int8)
    compare("ConvInteger", [x, w, np.array(128, np.uint8), None], 10, group=2, pads=[1, 1, 1, 1])
    wu = RNG.integers(0, 255, size=(6, 4, 3, 3), dtype=np.uint8)
    compare(
        "QLinearConv",
        [
            x,
            np.array(0.02, np.float32),
            np.array(120, np.uint8),
            wu,
            np.full(6, 0.01, np.float32),
            np.array([100, 110, 120, 130, 140, 150], np.uint8),
            np.array(0.5, np.float32),
            np.array(10, np.uint8),
            RNG.integers(-500, 500, size=6).astype(np.int32),
        ],
        10,
        strides=[2, 2],
        atol=1,
    )


def test_grid_sample_vs_ort() -> None:
    x = rand(2, 3, 7, 8)
    grid = RNG.random((2, 5, 6, 2)).astype(np.float32) * 2.6 - 1.3
    for mode in ("linear", "nearest", "cubic"):
        for padding in ("zeros", "border", "reflection"):
            for align in (0, 1):
                compare(
                    "GridSample",
                    [x, grid],
                    20,
                    mode=mode,
                    padding_mode=padding,
                    align_corners=align,
                    rtol=1e-3,
                    atol=1e-4,
                )


def test_newer_ops_vs_ort() -> None:
    x = rand(2, 4, 9, 9)
    w = rand(6, 2, 3, 3)
    offset = rand(2, 2 * 2 * 9, 7, 7) * 0.7
    mask = RNG.random((2, 2 * 9, 7, 7)).astype(np.float32)
    compare(
        "DeformConv",
        [x, w, offset, rand(6), mask],
        19,
        group=2,
        offset_group=2,
        rtol=1e-3,
        atol=1e-4,
    )
    cols = rand(2, 3 * 4, 18)
    compare(
        "Col2Im",
        [cols, np.array([5, 6], np.int64), np.array([2, 2], np.int64)],
        18,
        pads=[1, 0, 1, 1],
        strides=[2, 1],
    )
    theta = rand(2, 2, 3)
    compare("AffineGrid", [theta, np.array([2, 3, 5, 7], np.int64)], 20, align_corners=0)
    boxes = RNG.random((2, 30, 4)).astype(np.float32)
    scores = RNG.random((2, 3, 30)).astype(np.float32)
    compare(
        "NonMaxSuppression",
        [
            boxes,
            scores,
            np.array([5], np.int64),
            np.array([0.3], np.float32),
            np.array([0.2], np.float32),
        ],
        11,
    )


def test_attention_family_vs_ort() -> None:
    q, k, v = rand(2, 4, 5, 8), rand(2, 2, 7, 8), rand(2, 2, 7, 6)
    mask = RNG.random((5, 7)) > 0.3
    compare("Attention", [q, k, v, mask], 23, is_causal=0, rtol=1e-4, atol=1e-5)
    compare("Attention", [q, k, v], 23, is_causal=1, softcap=2.0)
    # A causal decode step after a cache (every key visible: the mask pass is skipped),
    # with grouped KV heads; present key/value are outputs too.
    step = [rand(2, 4, 1, 8), rand(2, 2, 1, 8), rand(2, 2, 1, 6), None]
    compare("Attention", step + [rand(2, 2, 9, 8), rand(2, 2, 9, 6)], 23, n_out=3, is_causal=1)
    x = rand(2, 6, 3 * 8)
    cache = rand(10, 4)
    pos = np.array([[0, 1, 2, 3, 4, 5], [4, 5, 6, 7, 8, 9]], np.int64)
    compare("RotaryEmbedding", [x, cache, cache, pos], 23, num_heads=3)
    compare("RMSNormalization", [x, rand(24)], 23, epsilon=1e-3)
