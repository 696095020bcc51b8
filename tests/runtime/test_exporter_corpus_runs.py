"""Every model of the exporter corpus (tests/data/exporters/) runs in our interpreter:
the unwatched (fused) run, the plain run and the stepped run agree, and match
onnxruntime.

onnxruntime is the reference as the model means it, not as its optimizer rewrites it:
its graph optimizations are off (on a QDQ model they fuse DequantizeLinear -> Conv ->
QuantizeLinear into an integer QLinearConv that rounds differently), and both engines run
MatMulNBits at accuracy_level 0 for this comparison: at level 4 (what the genai builder
writes for CPU) both round the activations to int8 steps, and inputs a few bits apart can
round to neighbouring steps (test_ort_engine's genai test compares level 4 with that in
mind).  Our own modes are compared on the model as it is, level 4 included.

An output that a DequantizeLinear makes may differ by one quantization step: the float
value before its QuantizeLinear can sit within float rounding of a rounding boundary,
and which side it lands on depends on the summation order of the BLAS kernel (seen on
OpenBLAS's Haswell kernels against onnxruntime's MLAS), and in the fused run on the
exact integer product that runs a QDQ conv (fusion_qdq_conv.py) instead of float32.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from onnxviz.model.document import Document
from onnxviz.runtime.session import Session
from tests.data.exporters import NAMES, feeds_of, path_of
from tests.ort_reference import exact_options

from .differential import assert_modes_agree, close

pytestmark = pytest.mark.numeric

INTEGER_GEMMS = {"MatMulInteger", "ConvInteger"}


def _as_meant(model: onnx.ModelProto) -> onnx.ModelProto:
    exact = onnx.ModelProto()
    exact.CopyFrom(model)
    for node in exact.graph.node:
        if node.op_type == "MatMulNBits":
            for attr in node.attribute:
                if attr.name == "accuracy_level":
                    attr.i = 0
    return exact


def _quantization_step(model: onnx.ModelProto, output: str) -> float:
    """The scale of the DequantizeLinear that makes ``output`` (0 for other outputs)."""
    inits = {t.name: t for t in model.graph.initializer}
    node = next((n for n in model.graph.node if output in n.output), None)
    if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in inits:
        return 0.0
    return float(np.max(numpy_helper.to_array(inits[node.input[1]])))


@pytest.mark.parametrize("name", NAMES)
def test_exporter_model_matches_onnxruntime_in_every_mode(name: str) -> None:
    doc = Document.open(str(path_of(name)))
    feeds = feeds_of(name)
    steps = {o.name: _quantization_step(doc.model, o.name) for o in doc.model.graph.output}
    assert_modes_agree(doc.model, feeds, steps=steps)
    options = exact_options(ort, None)
    # Unoptimized, so onnxruntime computes what the nodes say; except that its exact
    # integer GEMM for constant weights (tests/ort_reference.py) comes with its extended
    # level's rewrite of MatMulInteger, so a model with one gets that level.
    integer = any(n.op_type in INTEGER_GEMMS for n in doc.model.graph.node)
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        if integer
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    reference = ort.InferenceSession(
        _as_meant(doc.model).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    want = reference.run(None, feeds)
    got = Session(_as_meant(doc.model)).run(feeds)
    for out, ref in zip(doc.model.graph.output, want, strict=True):
        value = got[out.name]
        if isinstance(ref, list):  # skl2onnx's ZipMap: a list of {label: probability}
            assert [sorted(d) for d in value] == [sorted(d) for d in ref]
            for mine, theirs in zip(value, ref):
                for key in theirs:
                    np.testing.assert_allclose(mine[key], theirs[key], rtol=1e-5, err_msg=name)
            continue
        step = _quantization_step(doc.model, out.name)
        if step:
            assert np.abs(value - ref).max() <= step * (1 + 1e-4), f"{name}: {out.name}"
            assert np.mean(value == ref) >= 0.5  # most values agree exactly
            continue
        close(value, np.asarray(ref), f"{name}: {out.name}", rtol=1e-5)
