"""A Conv whose padded output a Slice trims runs, in unwatched runs, as the Conv with less
padding (fusion_conv_trim.py): a causal Conv1d's pad-then-cut as torch exports it.

* On random geometries (1-D and 2-D, kernel, dilation, stride, pads, trims at either
  end, within the pads or past them) the fused run gives the stepped run's numbers, and
  the Slice is gone exactly where the module says a trim is the Conv it replaces.
* A temporal convolutional network as TorchScript writes it (Constant nodes for the
  Slice's operands) runs without its Slices and the Relus after them, and gives the same outputs
  stepped, fused and plain, and onnxruntime's.
* What is not such a trim keeps its Slice: a strided conv, a step of 2, the channel
  axis, an end counted from the start, a conv output read elsewhere or kept as a graph
  output, opset 9's attribute Slice with axes named.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime import fusion
from onnxviz.runtime.session import Session

from .differential import assert_modes_agree, close

pytestmark = pytest.mark.numeric

END = 2**63 - 1  # a Slice's "to the end"


def _model(
    spatial: int,
    kernel: int,
    dilation: int,
    stride: int,
    pads: tuple[int, int],
    trims: tuple[int, int],
    length: int,
    *,
    axis: int = -1,
    step: int = 1,
    opset: int = 17,
    also_output: bool = False,
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """x -> Conv (pads along the last axis; the others 1 each side of a 3-tall kernel)
    -> Slice(starts = trims[0], ends = -trims[1] or the end, ``axis``) -> Relu."""
    rng = np.random.default_rng([spatial, kernel, dilation, stride, *pads, *trims, length])
    c, m = 5, 6
    kshape = [3] * (spatial - 1) + [kernel]
    w = (rng.standard_normal((m, c, *kshape)) / np.sqrt(c * kernel)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    conv_pads = [1] * (spatial - 1) + [pads[0]] + [1] * (spatial - 1) + [pads[1]]
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w", "b"],
            ["y"],
            pads=conv_pads,
            dilations=[1] * (spatial - 1) + [dilation],
            strides=[1] * (spatial - 1) + [stride],
            name="conv",
        )
    ]
    start, end = trims[0], (-trims[1] if trims[1] else END)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    if opset >= 10:
        # as TorchScript writes them: Constant nodes
        for name, value in (("s", start), ("e", end), ("a", axis), ("p", step)):
            nodes.append(
                helper.make_node(
                    "Constant",
                    [],
                    [name],
                    value=numpy_helper.from_array(np.array([value], np.int64)),
                )
            )
        nodes.append(helper.make_node("Slice", ["y", "s", "e", "a", "p"], ["cut"], name="cut"))
    else:
        nodes.append(
            helper.make_node(
                "Slice", ["y"], ["cut"], starts=[start], ends=[end], axes=[axis], name="cut"
            )
        )
    nodes.append(helper.make_node("Relu", ["cut"], ["out"], name="relu"))
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)]
    if also_output:
        outputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    shape = [2, c] + [4] * (spatial - 1) + [length]
    graph = helper.make_graph(
        nodes,
        "trim",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        outputs,
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    x = rng.standard_normal(shape).astype(np.float32)
    return model, {"x": x}


def _run_ops(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[str]:
    session = Session(model)
    session.run(feeds)
    return [pn.op_type for pn in fusion.run_nodes(session.plan) if pn.op_type != "Constant"]


def _trims_the_conv(
    kernel: int, dilation: int, stride: int, pads: tuple[int, int], trims: tuple[int, int]
) -> bool:
    """The module docstring's condition."""
    left, right = pads[0] - trims[0], pads[1] - trims[1]
    return stride == 1 and left >= 0 and right >= 0 and left + right >= dilation * (kernel - 1)


@settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    spatial=st.sampled_from([1, 2]),
    kernel=st.integers(1, 5),
    dilation=st.integers(1, 3),
    stride=st.sampled_from([1, 1, 2]),
    pads=st.tuples(st.integers(0, 6), st.integers(0, 6)),
    trims=st.tuples(st.integers(0, 7), st.integers(0, 7)),
    extra=st.integers(0, 12),
)
def test_a_trimmed_conv_gives_the_stepped_numbers(
    spatial: int,
    kernel: int,
    dilation: int,
    stride: int,
    pads: tuple[int, int],
    trims: tuple[int, int],
    extra: int,
) -> None:
    extent = dilation * (kernel - 1)
    length = max(1, extent + 1 - pads[0] - pads[1]) + extra
    out_len = (length + pads[0] + pads[1] - extent - 1) // stride + 1
    if trims[0] + trims[1] >= out_len:
        trims = (0, 0)  # an empty Slice says nothing here (and the Relu then has no work)
    model, feeds = _model(spatial, kernel, dilation, stride, pads, trims, length)
    assert_modes_agree(model, feeds)
    ops = _run_ops(model, feeds)
    if _trims_the_conv(kernel, dilation, stride, pads, trims):
        assert ops == ["Conv"], ops  # the Relu too: the conv chain took it
    else:
        assert "Slice" in ops, ops


def test_a_tcn_runs_without_its_slices_and_relus() -> None:
    """Causal dilated Conv1d blocks as TorchScript exports them (Constant nodes for the
    Slice's operands, the Relu after the cut, a residual Add): every Slice and the Relus
    after them are gone from the unwatched run, and its outputs are the stepped
    run's, the plain run's and onnxruntime's."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(3)
    c, length = 8, 40
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x = "x"
    for i, d in enumerate((1, 2, 4)):
        h = x
        for j in range(2):
            name = f"b{i}c{j}"
            w = (rng.standard_normal((c, c, 3)) / np.sqrt(3 * c)).astype(np.float32)
            inits += [
                numpy_helper.from_array(w, f"{name}_w"),
                numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), f"{name}_b"),
            ]
            nodes.append(
                helper.make_node(
                    "Conv",
                    [h, f"{name}_w", f"{name}_b"],
                    [f"{name}_y"],
                    pads=[2 * d, 2 * d],
                    dilations=[d],
                    name=f"{name}/Conv",
                )
            )
            for op, value in (("s", 0), ("e", -2 * d), ("a", 2), ("p", 1)):
                nodes.append(
                    helper.make_node(
                        "Constant",
                        [],
                        [f"{name}_{op}"],
                        value=numpy_helper.from_array(np.array([value], np.int64)),
                    )
                )
            ops = [f"{name}_{op}" for op in "seap"]
            nodes.append(helper.make_node("Slice", [f"{name}_y", *ops], [f"{name}_cut"]))
            nodes.append(helper.make_node("Relu", [f"{name}_cut"], [f"{name}_r"]))
            h = f"{name}_r"
        nodes.append(helper.make_node("Add", [h, x], [f"b{i}_sum"]))
        nodes.append(helper.make_node("Relu", [f"b{i}_sum"], [f"b{i}_out"]))
        x = f"b{i}_out"
    graph = helper.make_graph(
        nodes,
        "tcn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, c, length])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": rng.standard_normal((3, c, length)).astype(np.float32)}
    stepped = assert_modes_agree(model, feeds)
    ops = _run_ops(model, feeds)
    # the Relus after the cuts are the convs' own now; each block's residual Add and
    # its Relu stay
    assert "Slice" not in ops and ops.count("Relu") == 3 and ops.count("Conv") == 6, ops
    got = Session(model).run(feeds)[x]
    assert got.shape == (3, c, length)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    close(got, theirs.run(None, feeds)[0], "onnxruntime", rtol=1e-5)
    close(got, stepped[x], "stepped")


@pytest.mark.parametrize(
    "case",
    [
        {"stride": 2},
        {"step": 2},
        {"axis": 1},  # channels
        {"also_output": True},
        {"trims": (0, 5)},  # past the end pad
        {"opset": 9, "axis": 2},
    ],
)
def test_what_is_not_a_trim_keeps_its_slice(case: dict[str, Any]) -> None:
    args: dict[str, Any] = {"trims": (0, 2), **case}
    trims = args.pop("trims")
    stride = args.pop("stride", 1)
    model, feeds = _model(1, 3, 1, stride, (2, 2), trims, 17, **args)
    assert_modes_agree(model, feeds)
    ops = _run_ops(model, feeds)
    if case == {"opset": 9, "axis": 2}:
        assert ops == ["Conv"], ops  # opset 9's attributes are a trim as well
    else:
        assert "Slice" in ops, ops


def test_an_end_counted_from_the_start_keeps_its_slice() -> None:
    """ends = 10 on an output of 19: the trim depends on the input's length, which the
    plan does not know, so the pair stays."""
    model, feeds = _model(1, 3, 1, 1, (2, 2), (0, 2), 17)
    for node in model.graph.node:
        if node.output[0] == "e":
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array([10], np.int64)))
    assert_modes_agree(model, feeds)
    assert "Slice" in _run_ops(model, feeds)
