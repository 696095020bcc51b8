"""com.microsoft GatherBlockQuantized (kernels/contrib_gather_quant.py) against
onnxruntime: packed uint8 at 4 and 8 bits with and without zero points, int4/uint4 data,
gathering along and across the quantized axis, negative and 2-D indices."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.errors import ExecutionError
from onnxviz.runtime.session import Session

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(21)
V, D, BS = 10, 64, 16


def _model(
    data: np.ndarray,
    shape: tuple[int, ...],
    scales: np.ndarray,
    zp: np.ndarray | None,
    **attrs: Any,
) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(data, "D"), numpy_helper.from_array(scales, "S")]
    ins = ["D", "I", "S"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "Z"))
        ins.append("Z")
    node = helper.make_node("GatherBlockQuantized", ins, ["Y"], domain="com.microsoft", **attrs)
    out_type = numpy_helper.from_array(scales).data_type
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("I", TensorProto.INT64, list(shape))],
        [helper.make_tensor_value_info("Y", out_type, None)],
        inits,
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def _both(model: onnx.ModelProto, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return Session(model).run({"I": idx})["Y"], sess.run(None, {"I": idx})[0]


IDX = np.array([[1, 9], [0, -1]], np.int64)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("with_zp", [False, True])
@pytest.mark.parametrize("scale_type", [np.float32, np.float16])
def test_packed_uint8_matches_onnxruntime(bits: int, with_zp: bool, scale_type: Any) -> None:
    per = 8 // bits
    data = RNG.integers(0, 256, (V, D // per)).astype(np.uint8)
    scales = RNG.random((V, D // BS)).astype(scale_type)
    zp = RNG.integers(0, 256, (V, (D // BS + per - 1) // per)).astype(np.uint8) if with_zp else None
    ours, theirs = _both(_model(data, IDX.shape, scales, zp, block_size=BS, bits=bits), IDX)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape == (2, 2, D)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4])
def test_int4_data_across_and_along_the_quantized_axis(dtype: Any) -> None:
    lo, hi = (-8, 8) if dtype == ml_dtypes.int4 else (0, 16)
    data = RNG.integers(lo, hi, (3, V, D)).astype(dtype)
    scales = RNG.random((3, V, D // BS)).astype(np.float32)
    zp = RNG.integers(0, 8, (3, V, D // BS)).astype(dtype)
    cases = [
        (data, scales, None, {"gather_axis": 1, "quantize_axis": 2}, IDX),
        (data, scales, zp, {"gather_axis": 1, "quantize_axis": 2}, IDX),
        (data, scales, None, {"gather_axis": 0, "quantize_axis": 2}, np.array([2, 0])),
    ]
    long = RNG.integers(lo, hi, (3, 32, D)).astype(dtype)  # gather along the blocks
    cases.append(
        (long, RNG.random((3, 2, D)).astype(np.float32), None,
         {"gather_axis": 1, "quantize_axis": 1}, np.array([3, 31, 17]))
    )  # fmt: skip
    for d, s, z, axes, idx in cases:
        ours, theirs = _both(_model(d, idx.shape, s, z, block_size=BS, **axes), idx)
        assert ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)


def test_only_the_gathered_rows_are_dequantized() -> None:
    """A definition check that needs no peer: row r of the output is (q - zp) * scale of
    row idx[r], block by block."""
    from onnxviz.runtime.kernels.contrib_gather_quant import gather_block_quantized

    q = RNG.integers(0, 16, (V, D)).astype(np.uint8)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    scales = RNG.random((V, D // BS)).astype(np.float32)
    got = gather_block_quantized(packed, np.array([7, 2]), scales, block_size=BS, bits=4)
    want = (q[[7, 2]].astype(np.float32) - 8) * np.repeat(scales[[7, 2]], BS, axis=1)
    np.testing.assert_array_equal(got, want)


def test_errors() -> None:
    from onnxviz.runtime.kernels.contrib_gather_quant import gather_block_quantized

    packed = np.zeros((V, D // 2), np.uint8)
    scales = np.ones((V, D // BS), np.float32)
    with pytest.raises(ExecutionError, match="out of range"):
        gather_block_quantized(packed, np.array([V]), scales, block_size=BS)
    with pytest.raises(ExecutionError, match="block_size"):
        gather_block_quantized(packed, np.array([0]), scales, block_size=12)
    with pytest.raises(ExecutionError, match="gather_axis 0"):
        gather_block_quantized(packed, np.array([0]), scales, block_size=BS, gather_axis=1)
    with pytest.raises(ExecutionError, match="not supported"):
        gather_block_quantized(packed.astype(np.int32), np.array([0]), scales, block_size=BS)


def test_a_constant_table_is_dequantized_once_with_the_kernels_values() -> None:
    """Unwatched runs of a constant table gather rows of the table dequantized once by
    the kernel: every run the stepped run's bits, whatever the indices (negative ones,
    2-D); an index out of range is still the kernel's error, and the next run is fine."""
    from onnxviz.runtime.fusion import run_nodes
    from tests.runtime.differential import stepped_values

    data = RNG.integers(0, 256, (V, D // 2)).astype(np.uint8)
    scales = RNG.random((V, D // BS)).astype(np.float32)
    zp = RNG.integers(0, 256, (V, D // BS // 2)).astype(np.uint8)
    model = _model(data, (2, 3), scales, zp, block_size=BS, bits=4)
    sess = Session(model)
    for idx in (np.array([[1, 9, 0], [-1, -10, 4]]), np.array([[3, 3, 3], [2, 8, 7]])):
        got = sess.run({"I": idx})["Y"]
        want = stepped_values(model, {"I": idx})["Y"]
        assert got.dtype == want.dtype and got.shape == want.shape == (2, 3, D)
        np.testing.assert_array_equal(got, want)
    (pn,) = run_nodes(sess.plan)
    assert "_prepared_gather" in pn.call.__qualname__
    with pytest.raises(ExecutionError, match="out of range"):
        sess.run({"I": np.array([[0, V, 1], [0, 0, 0]])})
    ok = sess.run({"I": np.array([[0, 1, 2], [3, 4, 5]])})["Y"]
    np.testing.assert_array_equal(
        ok, stepped_values(model, {"I": np.array([[0, 1, 2], [3, 4, 5]])})["Y"]
    )
