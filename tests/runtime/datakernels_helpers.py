"""Shared test helpers for the tensor / sequence / quantize / string / training kernels:
judging ONNX backend node cases, running one node through our kernel and through
onnxruntime."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.model.tensors import to_array
from onnxviz.runtime.invoke import call_node
from onnxviz.runtime.registry import normalize_domain
from tests.runtime.nodecases import case_ops, cases_for, check_case, to_value, values_match

TENSOR_OPS = frozenset(
    [
        "Shape",
        "Size",
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Transpose",
        "Concat",
        "Split",
        "Slice",
        "Gather",
        "GatherElements",
        "GatherND",
        "ScatterElements",
        "ScatterND",
        "Scatter",
        "Tile",
        "Expand",
        "Pad",
        "CenterCropPad",
        "Compress",
        "NonZero",
        "OneHot",
        "Range",
        "ConstantOfShape",
        "Constant",
        "EyeLike",
        "Identity",
        "DepthToSpace",
        "SpaceToDepth",
        "ReverseSequence",
        "TopK",
        "Unique",
        "Trilu",
        "TensorScatter",
    ]
)
SEQUENCE_OPS = frozenset(
    [
        "SequenceAt",
        "SequenceConstruct",
        "SequenceEmpty",
        "SequenceErase",
        "SequenceInsert",
        "SequenceLength",
        "SplitToSequence",
        "ConcatFromSequence",
        "Optional",
        "OptionalGetElement",
        "OptionalHasElement",
    ]
)
RANDOM_OPS = frozenset(
    [
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Bernoulli",
        "Multinomial",
    ]
)
QUANT_OPS = frozenset(
    [
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "MatMulInteger",
        "QLinearMatMul",
    ]
)
STRING_OPS = frozenset(
    ["StringNormalizer", "RegexFullMatch", "StringSplit", "StringConcat", "TfIdfVectorizer"]
)
TRAINING_OPS = frozenset(["Adagrad", "Adam", "Momentum"])
OUR_OPS = TENSOR_OPS | SEQUENCE_OPS | RANDOM_OPS | QUANT_OPS | STRING_OPS | TRAINING_OPS

CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def case_params(ops: Iterable[str], known_failures: dict[str, str]) -> list[Any]:
    """pytest params over the node cases of ``ops``; known failures become strict xfails
    (one that starts passing fails, so the list shrinks as kernels are fixed)."""
    params = []
    for case in cases_for(ops):
        marks = []
        if case.name in known_failures:
            marks.append(pytest.mark.xfail(reason=known_failures[case.name], strict=True))
        params.append(pytest.param(case, id=case.name, marks=marks))
    return params


def judge_case(case: Any) -> None:
    """Assert the case passes.  A case that also uses other families' ops is skipped
    while one of those ops has no kernel yet (never when the missing kernel is ours).
    A failing case fails; when it also uses other families' ops, each of OUR nodes is
    first checked alone on onnx.reference's intermediate values, so the message says
    whether the fault is ours or another family's kernel."""
    if case_ops(case) & CONTROL_FLOW:
        # nodecases' simple runner has no control flow: the engine's Session runs these.
        from onnxviz.runtime.conformance import run_node_case

        result = run_node_case(case)
        status, detail = result.status, result.detail or ""
    else:
        status, detail = check_case(case)
    if status == "unsupported":
        missing = re.search(r"::(\w+) at opset", detail)
        op = missing.group(1) if missing else ""
        if op and op not in OUR_OPS:
            pytest.skip(f"needs {op} from another kernel family")
    if status != "pass" and case_ops(case) - OUR_OPS:
        mismatch = our_node_mismatch(case)
        assert mismatch is None, f"{detail}; our node differs from onnx.reference: {mismatch}"
        pytest.fail(f"{detail}; our nodes match onnx.reference: another family's kernel fails")
    assert status == "pass", detail


def our_node_mismatch(case: Any) -> str | None:
    """Run each node of our ops on onnx.reference's values of its inputs; the first
    output that differs from onnx.reference's, or None."""
    from onnx.reference import ReferenceEvaluator

    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    graph = model.graph
    names = [o for n in graph.node for o in n.output if o]
    inputs, _ = case.data_sets[0]
    known = {i.name for i in graph.initializer}
    feeds = {
        i.name: to_value(v) for i, v in zip([i for i in graph.input if i.name not in known], inputs)
    }
    del graph.output[:]
    graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = dict(zip(names, ReferenceEvaluator(model).run(None, feeds)))
    values.update(feeds)
    values.update({i.name: to_array(i) for i in graph.initializer})
    opsets = {normalize_domain(o.domain): o.version for o in model.opset_import}
    for node in graph.node:
        if node.op_type not in OUR_OPS:
            continue
        outs = call_node(node, [values[n] if n else None for n in node.input], opsets)
        for name, value in zip(node.output, outs):
            if name:
                reason = values_match(values[name], value, case.rtol, case.atol)
                if reason:
                    return f"{node.op_type} -> {name}: {reason}"
    return None


def run_ours(
    op: str,
    inputs: Sequence[Any],
    opset: int,
    n_outputs: int = 1,
    domain: str = "",
    rng: np.random.Generator | None = None,
    **attrs: Any,
) -> list[Any]:
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = helper.make_node(
        op, names, [f"out{i}" for i in range(n_outputs)], domain=domain or None, **attrs
    )
    return call_node(node, list(inputs), {domain: opset}, rng=rng)


_NUMPY_UNFRIENDLY = {
    TensorProto.INT4,
    TensorProto.UINT4,
    TensorProto.INT2,
    TensorProto.UINT2,
    TensorProto.FLOAT4E2M1,
    TensorProto.FLOAT8E4M3FN,
    TensorProto.FLOAT8E4M3FNUZ,
    TensorProto.FLOAT8E5M2,
    TensorProto.FLOAT8E5M2FNUZ,
}


def run_ort(
    op: str, inputs: Sequence[np.ndarray | None], opset: int, n_outputs: int = 1, **attrs: Any
) -> list[np.ndarray]:
    """One node through onnxruntime (CPU).  Inputs of types onnxruntime's Python binding
    cannot take (int4, float8...) become initializers; such outputs travel back through a
    Cast to float32 and are converted to their own type here (exactly representable)."""
    import onnxruntime as ort

    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, **attrs)
    graph_inputs, inits, feeds = [], [], {}
    for n, x in zip(names, inputs):
        if x is None:
            continue
        elem = helper.np_dtype_to_tensor_dtype(x.dtype)
        if elem in _NUMPY_UNFRIENDLY:
            inits.append(numpy_helper.from_array(x, n))
        else:
            graph_inputs.append(helper.make_tensor_value_info(n, elem, x.shape))
            feeds[n] = x
    graph = helper.make_graph([node], "g", graph_inputs, [], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    graph = model.graph  # make_model copied the graph
    graph.output.extend(onnx.ValueInfoProto(name=o) for o in outs)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.output}
    del graph.output[:]
    back: dict[int, int] = {}
    for i, o in enumerate(outs):
        if types.get(o) in _NUMPY_UNFRIENDLY:
            graph.node.append(helper.make_node("Cast", [o], [o + "_f"], to=TensorProto.FLOAT))
            graph.output.append(helper.make_value_info(o + "_f", onnx.TypeProto()))
            back[i] = types[o]
        else:
            graph.output.append(helper.make_value_info(o, onnx.TypeProto()))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    results = list(sess.run(None, feeds))
    for i, elem in back.items():
        results[i] = results[i].astype(helper.tensor_dtype_to_np_dtype(elem))
    return results


def assert_same(ours: Any, theirs: Any) -> None:
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    if ours.dtype.kind in "fc" or ours.dtype.name in ("bfloat16",):
        np.testing.assert_allclose(
            ours.astype(np.float64), theirs.astype(np.float64), rtol=1e-6, atol=1e-6
        )
    else:
        np.testing.assert_array_equal(ours, theirs)


FLOAT = TensorProto.FLOAT
