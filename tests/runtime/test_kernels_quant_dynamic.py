"""The com.microsoft ops onnxruntime's ``quantize_dynamic`` writes (DynamicQuantizeLSTM,
QAttention, QEmbedLayerNormalization) and the com.microsoft QuantizeLinear /
DequantizeLinear of ``UseQDQContribOps``: float models quantized the way users quantize
them, and single nodes on random data, against onnxruntime.

Tolerances: onnxruntime's int8 GEMMs are exact integer arithmetic, and so are ours, with
activations quantized at the same points with the same uint8 parameters; what remains
is float32 rounding order (onnxruntime's polynomial tanh/logistic/exp against numpy's,
its division by sqrt(var) against a multiplication by 1/sqrt(var)).  Measured: at most
7e-7 on the models' outputs (magnitude <= ~4), 3e-6 on the random nodes' larger ones
(about 1e-7 relative), so 2e-6 (16 float32 ulps at 1.0) plus 1e-6 relative.  Quantization itself moves these outputs by 1e-3 to 1e-1 (each model test
checks that the float model is that far away), so the tolerance tells the int8
semantics (where and how activations are quantized) from the float ones.

onnxruntime sessions run on one intra-op thread: its LSTM quantizes the hidden state of
each thread's share of the batch separately (see contrib_quant_dynamic.py).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.invoke import call_node
from onnxviz.runtime.kernels import contrib_quant_dynamic
from onnxviz.runtime.kernels.contrib_quant_dynamic import dynamic_uint8
from onnxviz.runtime.session import Session
from tests.ort_reference import exact_options
from tests.runtime.native_modules import at_level
from tests.runtime.nodecases import single_node_model

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

pytestmark = pytest.mark.numeric

MS = "com.microsoft"
ATOL = 2e-6
RTOL = 1e-6
# The float model is at least this far from the quantized one on every model here.
QUANTIZATION_EFFECT = 1e-3
RNG = np.random.default_rng(20240611)
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]


def _normal(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(
        model.SerializeToString(), exact_options(ort), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)  # type: ignore[no-any-return]


def _quantized(model: onnx.ModelProto, tmp_path: Path, **options: Any) -> onnx.ModelProto:
    """``model`` through onnxruntime.quantization.quantize_dynamic, as a user runs it."""
    src, dst = tmp_path / "float.onnx", tmp_path / "int8.onnx"
    onnx.save(model, src)
    logging.disable(logging.WARNING)  # its "consider pre-processing" advice
    try:
        quantization.quantize_dynamic(str(src), str(dst), **options)
    finally:
        logging.disable(logging.NOTSET)
    return onnx.load(dst)


def _compare_model(
    quantized: onnx.ModelProto, float_model: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> dict[str, float]:
    """Our run of ``quantized`` against onnxruntime's, output by output; the float model
    must be further away than the tolerance (the test could tell them apart).  The
    largest differences, by output."""
    want = _ort_run(quantized, feeds)
    away = _ort_run(float_model, feeds)
    got = Session(quantized).run(feeds)
    diffs = {}
    for out, ref, float_ref in zip(quantized.graph.output, want, away, strict=True):
        ours = np.asarray(got[out.name])
        np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL, err_msg=out.name)
        if ref.dtype == np.float32 and ref.size:
            assert np.abs(float_ref - ref).max() > QUANTIZATION_EFFECT, out.name
        diffs[out.name] = float(np.abs(ours.astype(np.float64) - ref).max()) if ref.size else 0.0
    return diffs


# ------------------------------------------------------------------------------ LSTM


def _float_lstm(
    steps: int,
    batch: int,
    inputs: int,
    hidden: int,
    direction: str,
    *,
    sequence_lens: bool,
    initial_states: bool,
    peepholes: bool = False,
    outputs: tuple[str, ...] = ("Y", "Y_h", "Y_c"),
) -> onnx.ModelProto:
    """A float LSTM node with initializer weights, as onnx.helper builds one."""
    dirs = 2 if direction == "bidirectional" else 1
    weights = {
        "W": _normal(dirs, 4 * hidden, inputs, scale=0.5),
        "R": _normal(dirs, 4 * hidden, hidden, scale=0.5),
        "B": _normal(dirs, 8 * hidden, scale=0.2),
    }
    if peepholes:
        weights["P"] = _normal(dirs, 3 * hidden, scale=0.3)
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [steps, batch, inputs])]
    if sequence_lens:
        graph_inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [batch]))
    if initial_states:
        for name in ("h0", "c0"):
            shape = [dirs, batch, hidden]
            graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    node_inputs = [
        "X", "W", "R", "B",
        "lens" if sequence_lens else "",
        "h0" if initial_states else "",
        "c0" if initial_states else "",
        "P" if peepholes else "",
    ]  # fmt: skip
    while node_inputs[-1] == "":
        node_inputs.pop()
    node = helper.make_node(
        "LSTM", node_inputs, list(outputs), hidden_size=hidden, direction=direction
    )
    graph = helper.make_graph(
        [node],
        "lstm",
        graph_inputs,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs if n],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


def _lstm_feeds(model: onnx.ModelProto, lens: list[int] | None = None) -> dict[str, np.ndarray]:
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.name == "lens":
            feeds["lens"] = np.array(lens, np.int32)
        elif value.name == "X" and lens is not None:
            # Padding past the longest sequence, larger than the data: onnxruntime's
            # uint8 range of X never sees it (its input GEMM stops there).
            x = _normal(*shape)
            x[max(lens) :] *= 4
            feeds["X"] = x
        else:
            feeds[value.name] = _normal(*shape, scale=1.0 if value.name == "X" else 0.5)
    return feeds


LSTM_CASES = [
    # direction, batch, sequence_lens (None: no input), initial states + peepholes
    ("forward", 1, None, False),
    ("forward", 3, [5, 2, 4], True),
    ("reverse", 4, None, True),
    ("reverse", 3, [3, 4, 0], False),  # the longest sequence shorter than X
    ("bidirectional", 2, None, False),
    ("bidirectional", 5, [1, 5, 4, 0, 2], True),
]


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
@pytest.mark.parametrize(("direction", "batch", "lens", "states"), LSTM_CASES)
def test_quantize_dynamic_lstm_matches_onnxruntime(
    tmp_path: Path,
    direction: str,
    batch: int,
    lens: list[int] | None,
    states: bool,
    per_channel: bool,
    weight_type: str,
) -> None:
    """An LSTM quantized by quantize_dynamic becomes DynamicQuantizeLSTM (int8 W and R,
    pre-transposed, whatever weight_type); runs as onnxruntime runs it: X quantized once,
    the hidden state once per step, ended sequences zero in Y."""
    model = _float_lstm(
        5, batch, 4, 8, direction,
        sequence_lens=lens is not None, initial_states=states, peepholes=states,
    )  # fmt: skip
    quantized = _quantized(
        model, tmp_path, per_channel=per_channel,
        weight_type=getattr(quantization.QuantType, weight_type),
    )  # fmt: skip
    assert [n.op_type for n in quantized.graph.node] == ["DynamicQuantizeLSTM"]
    _compare_model(quantized, model, _lstm_feeds(model, lens))


@pytest.mark.parametrize("level", [None, *native.levels()], ids=lambda v: f"level{v}")
def test_quantize_dynamic_lstm_matches_onnxruntime_at_every_level(
    tmp_path: Path, level: int | None
) -> None:
    """The file's LSTM models without peepholes, whose steps run compiled
    (native/_recurrent.c's qlstm) at each level this CPU has (None: the numpy loop), and
    a longer one with 40 hidden units: onnxruntime's numbers within the same tolerance."""
    cases = [(5, 8, case, "QInt8", False) for case in LSTM_CASES]
    cases += [(5, 8, LSTM_CASES[3], "QUInt8", True), (12, 40, LSTM_CASES[5], "QInt8", True)]
    ran: list[bool] = []
    real = contrib_quant_dynamic._compiled_steps

    def spy(*args: Any) -> Any:
        out = real(*args)
        ran.append(out is not None)
        return out

    for steps, hidden, (direction, batch, lens, states), weight_type, per_channel in cases:
        model = _float_lstm(
            steps, batch, 4, hidden, direction,
            sequence_lens=lens is not None, initial_states=states,
        )  # fmt: skip
        quantized = _quantized(
            model, tmp_path, per_channel=per_channel,
            weight_type=getattr(quantization.QuantType, weight_type),
        )  # fmt: skip
        feeds = _lstm_feeds(model, None if lens is None else [min(n, steps) for n in lens])
        with (
            at_level("recurrent", level),
            mock.patch.object(contrib_quant_dynamic, "_compiled_steps", spy),
        ):
            _compare_model(quantized, model, feeds)
    if level is not None and native.built("recurrent"):
        assert ran and all(ran)
    else:
        assert not any(ran)


def test_lstm_without_y_output_quantizes_the_held_state(tmp_path: Path) -> None:
    """Without a Y output onnxruntime reads the previous hidden state from Y_h, where an
    ended sequence keeps its last h (with Y it reads Y's zeroed rows): the next steps'
    uint8 range differs, and so do the other sequences' results."""
    model = _float_lstm(
        6, 3, 4, 8, "bidirectional", sequence_lens=True, initial_states=True,
        outputs=("", "Y_h", "Y_c"),
    )  # fmt: skip
    quantized = _quantized(model, tmp_path, per_channel=True)
    feeds = _lstm_feeds(model, [2, 6, 4])
    _compare_model(quantized, model, feeds)
    # The same node with a Y output gives other Y_h numbers: the difference is real.
    with_y = onnx.ModelProto()
    with_y.CopyFrom(quantized)
    with_y.graph.node[0].output[0] = "Y"
    with_y.graph.output.insert(0, helper.make_tensor_value_info("Y", TensorProto.FLOAT, None))
    ours = Session(with_y).run(feeds)["Y_h"]
    assert np.abs(ours - _ort_run(quantized, feeds)[0]).max() > 10 * ATOL


def test_dynamic_uint8_is_onnxruntimes_dynamic_quantization() -> None:
    """The helper every activation goes through equals onnxruntime's DynamicQuantizeLinear
    (the same GetQuantizationParameter) bit for bit, all-zero input included."""
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    # A range whose (max - min) / 255 is one ulp off when divided in float64.
    ulp_case = np.array([[0.40973523, -0.16527635, 0.1, -0.05]], np.float32)
    for x in (_normal(7, 9, scale=3.0), np.abs(_normal(5, 4)), np.zeros((2, 3)), ulp_case):
        x = x.astype(np.float32)
        graph = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
            [onnx.ValueInfoProto(name=n) for n in ("y", "s", "z")],
        )
        model = helper.make_model(graph, opset_imports=OPSETS[:1], ir_version=8)
        y, s, z = _ort_run(model, {"x": x})
        q, scale, zero = dynamic_uint8(x)
        np.testing.assert_array_equal(q, y)
        assert scale == s and zero == z


# -------------------------------------------------------------------------- BERT int8


def _float_bert(batch: int, seq: int, hidden: int, heads: int) -> onnx.ModelProto:
    """EmbedLayerNormalization -> com.microsoft Attention -> output projection: what
    onnxruntime's transformer optimizer makes of a BERT layer, as onnx.helper nodes."""
    vocab, positions, segments = 40, 16, 2
    weights = {
        "word": _normal(vocab, hidden),
        "position": _normal(positions, hidden, scale=0.5),
        "segment": _normal(segments, hidden, scale=0.5),
        "gamma": 1 + _normal(hidden, scale=0.1),
        "beta": _normal(hidden, scale=0.1),
        "qkv_weight": _normal(hidden, 3 * hidden, scale=0.2),
        "qkv_bias": _normal(3 * hidden, scale=0.1),
        "out_weight": _normal(hidden, hidden, scale=0.2),
        "out_bias": _normal(hidden, scale=0.1),
    }
    nodes = [
        helper.make_node(
            "EmbedLayerNormalization",
            ["ids", "segment_ids", "word", "position", "segment", "gamma", "beta", "mask"],
            ["embedded", "mask_index"],
            domain=MS,
            epsilon=1e-12,
        ),
        helper.make_node(
            "Attention",
            ["embedded", "qkv_weight", "qkv_bias", "mask_index"],
            ["attended"],
            domain=MS,
            num_heads=heads,
        ),
        helper.make_node("MatMul", ["attended", "out_weight"], ["projected"]),
        helper.make_node("Add", ["projected", "out_bias"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bert",
        [
            helper.make_tensor_value_info(n, TensorProto.INT32, [batch, seq])
            for n in ("ids", "segment_ids", "mask")
        ],
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in ("embedded", "attended", "out")
        ]
        + [helper.make_tensor_value_info("mask_index", TensorProto.INT32, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=OPSETS, ir_version=8)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
def test_quantize_dynamic_bert_layer_matches_onnxruntime(
    tmp_path: Path, per_channel: bool, weight_type: str
) -> None:
    """The BERT int8 recipe: EmbedLayerNormalization -> QEmbedLayerNormalization (uint8
    tables), Attention -> DynamicQuantizeLinear + QAttention (per-column weights with
    per_channel), with right-padded sequences masked."""
    batch, seq = 3, 7
    model = _float_bert(batch, seq, hidden=32, heads=4)
    quantized = _quantized(
        model, tmp_path, per_channel=per_channel,
        weight_type=getattr(quantization.QuantType, weight_type),
    )  # fmt: skip
    ops = {n.op_type for n in quantized.graph.node}
    assert {"QEmbedLayerNormalization", "QAttention"} <= ops
    lengths = [7, 5, 2]
    feeds = {
        "ids": RNG.integers(0, 40, (batch, seq)).astype(np.int32),
        "segment_ids": RNG.integers(0, 2, (batch, seq)).astype(np.int32),
        "mask": (np.arange(seq)[None, :] < np.array(lengths)[:, None]).astype(np.int32),
    }
    _compare_model(quantized, model, feeds)


# ------------------------------------------------------------------ single nodes


def _compare_node(
    op: str,
    inputs: list[np.ndarray | None],
    n_out: int,
    atol: float = ATOL,
    constants: tuple[int, ...] = (),
    **attrs: Any,
) -> None:
    model, given = single_node_model(op, inputs, n_out, MS, attrs, constants)
    want = _ort_run(model, {i.name: v for i, v in zip(model.graph.input, given, strict=True)})
    got = call_node(model.graph.node[0], list(inputs), {"": 17, MS: 1})
    for k, (ours, ref) in enumerate(zip(got, want, strict=True)):
        assert ours.dtype == ref.dtype, k
        np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=atol, err_msg=f"output {k}")


def _weight_params(
    dtype: type, dirs: int, columns: int, per_channel: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Scales and zero points of DynamicQuantizeLSTM's W or R: [D] or [D, 4H]; per
    channel, int8 zero points are 0 and uint8 ones one value (its GEMM takes one)."""
    shape = (dirs, columns) if per_channel else (dirs,)
    scale = RNG.uniform(0.002, 0.02, shape).astype(np.float32)
    if dtype is np.int8:
        zero = np.zeros(shape, np.int8) if per_channel else RNG.integers(-3, 4, shape)
    else:
        zero = np.full(shape, 128) if per_channel else RNG.integers(120, 136, shape)
    return scale, np.asarray(zero).astype(dtype)


@SETTINGS
@given(
    direction=st.sampled_from(["forward", "reverse", "bidirectional"]),
    dims=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 6), st.integers(1, 7)),
    dtype=st.sampled_from([np.int8, np.uint8]),
    per_channel=st.booleans(),
    lens=st.booleans(),
    states=st.booleans(),
)
def test_dynamic_quantize_lstm_node_matches_onnxruntime(
    direction: str,
    dims: tuple[int, int, int, int],
    dtype: type,
    per_channel: bool,
    lens: bool,
    states: bool,
) -> None:
    """Random int8/uint8 weights with per-direction or per-column parameters."""
    steps, batch, inputs, hidden = dims
    dirs = 2 if direction == "bidirectional" else 1
    info = np.iinfo(dtype)
    w = RNG.integers(info.min, info.max + 1, (dirs, inputs, 4 * hidden)).astype(dtype)
    r = RNG.integers(info.min, info.max + 1, (dirs, hidden, 4 * hidden)).astype(dtype)
    w_scale, w_zero = _weight_params(dtype, dirs, 4 * hidden, per_channel)
    r_scale, r_zero = _weight_params(dtype, dirs, 4 * hidden, per_channel)
    inputs_ = [
        _normal(steps, batch, inputs),
        w,
        r,
        _normal(dirs, 8 * hidden, scale=0.3),
        RNG.integers(0, steps + 1, batch).astype(np.int32) if lens else None,
        _normal(dirs, batch, hidden, scale=0.5) if states else None,
        _normal(dirs, batch, hidden, scale=0.5) if states else None,
        _normal(dirs, 3 * hidden, scale=0.3) if states else None,
        w_scale,
        w_zero,
        r_scale,
        r_zero,
    ]
    _compare_node(
        "DynamicQuantizeLSTM", inputs_, 3, constants=(1, 2, 8, 9, 10, 11),
        hidden_size=hidden, direction=direction,
    )  # fmt: skip


@SETTINGS
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(2, 12)),
    heads=st.sampled_from([1, 2, 4]),
    dtype=st.sampled_from([np.int8, np.uint8]),
    per_column=st.booleans(),
    masked=st.booleans(),
    unidirectional=st.integers(0, 1),
)
def test_qattention_node_matches_onnxruntime(
    shape: tuple[int, int, int],
    heads: int,
    dtype: type,
    per_column: bool,
    masked: bool,
    unidirectional: int,
) -> None:
    batch, seq, width = shape
    hidden = 8 * heads
    info = np.iinfo(dtype)
    columns = 3 * hidden
    weight = RNG.integers(info.min, info.max + 1, (width, columns)).astype(dtype)
    n_params = columns if per_column else 1
    weight_scale = RNG.uniform(0.005, 0.02, n_params).astype(np.float32)
    weight_zero = RNG.integers(info.min // 8, info.max // 8 + 1, n_params).astype(dtype)
    inputs = [
        RNG.integers(0, 256, (batch, seq, width)).astype(np.uint8),
        weight,
        _normal(columns, scale=0.1),
        np.array(RNG.uniform(0.005, 0.02), np.float32),
        weight_scale,
        RNG.integers(1, seq + 1, batch).astype(np.int32) if masked else None,
        np.array(RNG.integers(100, 156), np.uint8),
        weight_zero,
    ]
    _compare_node(
        "QAttention", inputs, 2, constants=(1, 7), num_heads=heads, unidirectional=unidirectional
    )


def test_qattention_with_past_matches_onnxruntime() -> None:
    batch, seq, past_len, heads, head = 2, 3, 4, 2, 8
    hidden = heads * head
    inputs = [
        RNG.integers(0, 256, (batch, seq, hidden)).astype(np.uint8),
        RNG.integers(-128, 128, (hidden, 3 * hidden)).astype(np.int8),
        _normal(3 * hidden, scale=0.1),
        np.array(0.01, np.float32),
        np.array(0.008, np.float32),
        None,
        np.array(131, np.uint8),
        np.array(0, np.int8),
        _normal(2, batch, heads, past_len, head),
    ]
    _compare_node("QAttention", inputs, 2, constants=(1, 7), num_heads=heads, unidirectional=1)


@SETTINGS
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 8)),
    dtype=st.sampled_from([np.int8, np.uint8]),
    segments=st.booleans(),
    masked=st.booleans(),
)
def test_qembed_layer_norm_node_matches_onnxruntime(
    shape: tuple[int, int], dtype: type, segments: bool, masked: bool
) -> None:
    batch, seq = shape
    vocab, positions, hidden = 20, 8, 16
    info = np.iinfo(dtype)

    def table(*dims: int) -> np.ndarray:
        return RNG.integers(info.min, info.max + 1, dims).astype(dtype)

    def param() -> tuple[np.ndarray, np.ndarray]:
        zero = RNG.integers(info.min // 4, info.max // 4 + 1)
        return np.array(RNG.uniform(0.005, 0.05), np.float32), np.array(zero, dtype)

    word, position, segment, gamma, beta = (param() for _ in range(5))
    mask = None
    if masked:  # right-padded, and one stray 2 that onnxruntime does not count
        mask = (RNG.integers(0, 3, (batch, seq))).astype(np.int32)
    inputs = [
        RNG.integers(0, vocab, (batch, seq)).astype(np.int32),
        RNG.integers(0, 2, (batch, seq)).astype(np.int32) if segments else None,
        table(vocab, hidden),
        table(positions, hidden),
        table(2, hidden) if segments else None,
        table(hidden),
        table(hidden),
        mask,
        word[0], position[0], segment[0] if segments else None, gamma[0], beta[0],
        word[1], position[1], segment[1] if segments else None, gamma[1], beta[1],
    ]  # fmt: skip
    _compare_node("QEmbedLayerNormalization", inputs, 2, epsilon=1e-5)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
@pytest.mark.parametrize("axis", [None, 1, -1])
def test_ms_quantize_dequantize_linear_match_onnxruntime(dtype: type, axis: int | None) -> None:
    x = _normal(3, 4, 5, scale=3.0)
    attrs = {} if axis is None else {"axis": axis}
    channels = 1 if axis is None else x.shape[axis]
    scale = RNG.uniform(0.01, 0.05, channels).astype(np.float32)
    info = np.iinfo(dtype)
    zero = RNG.integers(info.min // 2, info.max // 2 + 1, channels).astype(dtype)
    if axis is None:
        scale, zero = scale.reshape(()), zero.reshape(())
    _compare_node("QuantizeLinear", [x, scale, zero], 1, **attrs)
    q = call_node(
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], domain=MS, **attrs),
        [x, scale, zero],
        {MS: 1},
    )[0]
    _compare_node("DequantizeLinear", [q, scale, zero], 1, **attrs)


def test_use_qdq_contrib_ops_16_bit_model_matches_onnxruntime(tmp_path: Path) -> None:
    """quantize_static with UseQDQContribOps and 16-bit activations writes
    com.microsoft QuantizeLinear / DequantizeLinear: exact, like the standard ones."""
    weight, bias = _normal(8, 6, scale=0.3), _normal(6, scale=0.1)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=OPSETS[:1], ir_version=8)
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model, src)
    batches = iter([{"x": _normal(4, 8)} for _ in range(4)])

    class Reader(quantization.CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(batches, None)

    logging.disable(logging.WARNING)
    try:
        quantization.quantize_static(
            str(src), str(dst), Reader(), quant_format=quantization.QuantFormat.QDQ,
            activation_type=quantization.QuantType.QUInt16,
            weight_type=quantization.QuantType.QInt16, per_channel=True,
            extra_options={"UseQDQContribOps": True},
        )  # fmt: skip
    finally:
        logging.disable(logging.NOTSET)
    quantized = onnx.load(dst)
    assert {(n.op_type, n.domain) for n in quantized.graph.node} >= {
        ("QuantizeLinear", MS),
        ("DequantizeLinear", MS),
    }
    feeds = {"x": _normal(4, 8)}
    np.testing.assert_array_equal(Session(quantized).run(feeds)["y"], _ort_run(quantized, feeds)[0])


# ---------------------------------------------------------------------------- bad input


def _lstm_node_inputs(w_shape: tuple[int, ...], zero: np.ndarray | None = None) -> list[Any]:
    hidden = 4
    return [
        _normal(3, 2, 5),
        np.ones(w_shape, np.int8),
        np.ones((1, hidden, 4 * hidden), np.int8),
        None, None, None, None, None,
        np.array([0.01], np.float32),
        np.zeros(1, np.int8) if zero is None else zero,
        np.array([0.01], np.float32),
        np.zeros(1, np.int8),
    ]  # fmt: skip


def test_lstm_weight_in_onnx_layout_is_a_clear_error() -> None:
    """W as a float LSTM's [D, 4H, I] instead of the pre-transposed [D, I, 4H]."""
    node = helper.make_node(
        "DynamicQuantizeLSTM", [f"i{k}" for k in range(12)], ["y"], domain=MS, hidden_size=4
    )
    with pytest.raises(ExecutionError, match=r"W must have shape \[1, 5, 16\]"):
        call_node(node, _lstm_node_inputs((1, 16, 5)), {MS: 1})
    per_channel_zero = np.ones((1, 16), np.int8)
    scale_2d = np.full((1, 16), 0.01, np.float32)
    inputs = _lstm_node_inputs((1, 5, 16), per_channel_zero)
    inputs[8] = scale_2d
    with pytest.raises(ExecutionError, match="zero points must be 0"):
        call_node(node, inputs, {MS: 1})


def test_bad_qattention_and_qembed_inputs_are_clear_errors() -> None:
    attention = helper.make_node(
        "QAttention", [f"i{k}" for k in range(8)], ["y"], domain=MS, num_heads=2
    )
    inputs = [
        np.zeros((1, 3, 8), np.uint8),
        np.zeros((8, 48), np.int8),
        np.zeros(47, np.float32),  # one short
        np.array(0.1, np.float32),
        np.array(0.1, np.float32),
        None,
        np.array(0, np.uint8),
        np.array(0, np.int8),
    ]
    with pytest.raises(ExecutionError, match=r"bias must have shape \[48\]"):
        call_node(attention, inputs, {MS: 1})

    embed = helper.make_node(
        "QEmbedLayerNormalization", [f"i{k}" for k in range(18)], ["y", "m"], domain=MS
    )
    one, zero = np.array(0.1, np.float32), np.array(0, np.uint8)
    inputs = [
        np.array([[1, 2, 99]], np.int32),  # 99: past the 10-row vocabulary
        None,
        np.zeros((10, 4), np.uint8),
        np.zeros((8, 4), np.uint8),
        None,
        np.zeros(4, np.uint8),
        np.zeros(4, np.uint8),
        None,
        one, one, None, one, one,
        zero, zero, None, zero, zero,
    ]  # fmt: skip
    with pytest.raises(ExecutionError, match="word_embedding index out of range"):
        call_node(embed, inputs, {MS: 1})


def test_session_reports_the_bad_node(tmp_path: Path) -> None:
    """Through a Session, a user sees the error of the node, not a numpy traceback."""
    model = _float_lstm(4, 2, 3, 4, "forward", sequence_lens=False, initial_states=False)
    quantized = _quantized(model, tmp_path)
    with pytest.raises(ExecutionError, match="X must be"):
        Session(quantized).run({"X": _normal(4, 2)})


@settings(max_examples=30, deadline=None)
@given(
    m=st.integers(1, 40),
    n=st.integers(1, 70),
    per_column=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_accumulators_scaled_back_are_numpys_two_roundings(
    m: int, n: int, per_column: bool, seed: int
) -> None:
    """float32(acc) * multiplier, the compiled pass at every level and numpy's cast and
    product without it, bit for bit (an LSTM's input projection, QAttention's)."""
    rng = np.random.default_rng(seed)
    acc = rng.integers(-(2**31), 2**31, (m, n), dtype=np.int64).astype(np.int32)
    multiplier = rng.uniform(1e-7, 1e-2, n if per_column else ()).astype(np.float32)
    want = acc.astype(np.float32) * multiplier
    for level in [*native.levels(), None]:
        with at_level("int8", level):
            got = contrib_quant_dynamic._scaled(acc, multiplier)
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, want, err_msg=f"level {level}")
