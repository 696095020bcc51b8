"""Shared harness for the one-node kernel benchmarks: time our kernel and an
onnxruntime session running the same single node.

Import it after the calling script has pinned the BLAS/OpenMP thread variables (they
are read when numpy loads).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper

from onnxviz.runtime.invoke import call_node, find_kernel


def median_seconds(fn: Callable[[], Any], repeat: int) -> float:
    """Median wall time of ``repeat`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def single_node(op: str, n_inputs: int, n_outputs: int, attrs: dict[str, Any]) -> onnx.NodeProto:
    return helper.make_node(
        op, [f"x{i}" for i in range(n_inputs)], [f"y{i}" for i in range(n_outputs)], **attrs
    )


def ours(node: onnx.NodeProto, inputs: list[np.ndarray], opset: int) -> Callable[[], Any]:
    """Our kernel for ``node``, resolved once, as a no-argument call."""
    spec = find_kernel(node, {"": opset})
    return lambda: call_node(node, inputs, {"": opset}, spec=spec)


def onnxruntime_call(
    node: onnx.NodeProto, inputs: list[np.ndarray], opset: int, threads: int
) -> Callable[[], Any]:
    """An onnxruntime session running only ``node`` (output types left to it)."""
    import onnxruntime as ort

    graph = helper.make_graph(
        [node],
        "bench",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in zip(node.input, inputs)
        ],
        [onnx.ValueInfoProto(name=o) for o in node.output],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = dict(zip(node.input, inputs))
    return lambda: sess.run(None, feeds)


def geometric_mean(ratios: list[float]) -> float:
    return float(np.exp(np.mean(np.log(ratios))))
